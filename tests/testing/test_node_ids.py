"""The testkit's ``first_node_id``: which ``node.id`` each node gets, everywhere it appears."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from kafka_actors.testing.broker import KafkaBroker, KafkaCluster


def _props(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def _planned(cluster: KafkaCluster, directory: Path) -> KafkaCluster:
    cluster.directory = directory
    cluster._plan_nodes()
    for node in cluster.nodes:
        cluster._write_config(node)
    return cluster


def test_default_node_ids_are_unchanged(tmp_path: Path) -> None:
    single = _planned(KafkaBroker(), tmp_path / "one")
    assert [n.node_id for n in single.nodes] == [1]
    props = _props(single.node.config_path)
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"].startswith("1@")
    three = _planned(KafkaCluster(3), tmp_path / "three")
    assert [n.node_id for n in three.brokers] == [1, 2, 3]
    assert three.controller.node_id == 1000
    assert three.controller.directory.name == "node-1000"


def test_first_node_id_numbers_nodes_voters_and_directories(tmp_path: Path) -> None:
    single = _planned(KafkaBroker(first_node_id=7), tmp_path / "one")
    assert single.node.node_id == 7 and single.controller is single.node
    props = _props(single.node.config_path)
    assert props["node.id"] == "7"
    assert props["controller.quorum.voters"] == f"7@127.0.0.1:{single.node.controller_port}"
    assert single.node.directory.name == "node-7"

    three = _planned(KafkaCluster(3, first_node_id=20), tmp_path / "three")
    assert [n.node_id for n in three.brokers] == [20, 21, 22]
    assert [_props(n.config_path)["node.id"] for n in three.brokers] == ["20", "21", "22"]
    voters = f"1000@127.0.0.1:{three.controller.controller_port}"
    assert {_props(n.config_path)["controller.quorum.voters"] for n in three.nodes} == {voters}


def test_dedicated_controller_id_never_collides_with_a_broker(tmp_path: Path) -> None:
    cluster = _planned(KafkaCluster(3, first_node_id=999), tmp_path)
    assert [n.node_id for n in cluster.brokers] == [999, 1000, 1001]
    assert cluster.controller.node_id == 1002
    assert len({n.node_id for n in cluster.nodes}) == 4


def test_negative_first_node_id_is_rejected() -> None:
    with pytest.raises(ValueError, match="first_node_id"):
        KafkaCluster(first_node_id=-1)


@pytest.mark.broker
def test_broker_started_with_first_node_id_7_reports_id_7_in_metadata() -> None:
    with KafkaBroker(first_node_id=7) as broker:
        assert broker.node.node_id == 7
        broker.create_topic("node-ids", partitions=2)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 0})
        answer = admin.list_topics(timeout=30)
        assert set(answer.brokers) == {7}
        assert answer.controller_id == 7
        partitions = answer.topics["node-ids"].partitions.values()
        assert [p.leader for p in partitions] == [7, 7]
