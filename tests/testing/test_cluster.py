"""The 3-broker cluster: replication factor 3 survives a SIGKILLed broker, which rejoins."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kafka_actors.testing.broker import KafkaCluster, pid_alive

pytestmark = pytest.mark.cluster


def _isr(admin: AdminClient, topic: str) -> dict[int, list[int]]:
    t = admin.list_topics(topic=topic, timeout=10).topics[topic]
    return {p.id: sorted(p.isrs) for p in t.partitions.values()}


def _wait_isr(admin: AdminClient, topic: str, want: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    isr: dict[int, list[int]] = {}
    while time.monotonic() < deadline:
        isr = _isr(admin, topic)
        if all(len(v) == want for v in isr.values()):
            return
        time.sleep(0.5)
    raise AssertionError(f"ISR of {topic} never reached {want}: {isr}")


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 3})
    for v in values:
        p.produce(topic, v)
    assert p.flush(120) == 0


def _consume_all(bootstrap: str, topic: str, partitions: int, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "log_level": 3})
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 120
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def test_cluster_has_three_brokers_and_a_controller(kafka_cluster: KafkaCluster) -> None:
    assert len(kafka_cluster.brokers) == 3
    assert len(kafka_cluster.bootstrap_servers.split(",")) == 3
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    assert sorted(admin.list_topics(timeout=10).brokers) == [
        b.node_id for b in kafka_cluster.brokers
    ]
    assert "controller" in kafka_cluster.controller.roles
    assert kafka_cluster.controller not in kafka_cluster.brokers


def test_rf3_topic_survives_kill_9_and_broker_rejoins(
    kafka_cluster: KafkaCluster, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(kafka_cluster, partitions=3, replication_factor=3)
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    _wait_isr(admin, topic, 3)
    before = [f"before-{i}".encode() for i in range(30)]
    _produce(kafka_cluster.bootstrap_servers, topic, before)

    victim = kafka_cluster.brokers[1]
    old_pid = victim.pid
    assert old_pid is not None
    kafka_cluster.kill_broker(1)
    assert not victim.running and not pid_alive(old_pid)

    # The controller fences the dead broker: it leaves every ISR.
    _wait_isr(admin, topic, 2)
    survivors = ",".join(f"{b.host}:{b.port}" for b in kafka_cluster.brokers if b.running)
    during = [f"during-{i}".encode() for i in range(30)]
    _produce(survivors, topic, during)
    assert sorted(_consume_all(survivors, topic, 3, 60)) == sorted(before + during)

    kafka_cluster.start_broker(1)
    assert victim.running and victim.pid != old_pid
    _wait_isr(admin, topic, 3)
    assert sorted(_consume_all(kafka_cluster.bootstrap_servers, topic, 3, 60)) == sorted(
        before + during
    )


def test_killed_broker_is_restarted_for_the_next_test_part1(kafka_cluster: KafkaCluster) -> None:
    kafka_cluster.kill_broker(2)
    assert not kafka_cluster.brokers[2].running


def test_killed_broker_is_restarted_for_the_next_test_part2(kafka_cluster: KafkaCluster) -> None:
    # Runs after part1 (file order): the plugin restarted broker 2 in between.
    assert all(b.running for b in kafka_cluster.brokers)
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    assert len(admin.list_topics(timeout=10).brokers) == 3


def test_ensure_running_restarts_a_killed_controller(
    kafka_cluster: KafkaCluster, kafka_topic: Callable[..., str]
) -> None:
    ctrl = kafka_cluster.controller
    assert ctrl.process is not None
    old = ctrl.pid
    ctrl.process.kill()
    ctrl.process.wait()
    assert not ctrl.running
    kafka_cluster.ensure_running()
    assert ctrl.running and ctrl.pid != old
    # Metadata changes need the controller: creating an RF=3 topic proves it is back.
    topic = kafka_topic(kafka_cluster, partitions=2, replication_factor=3)
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    _wait_isr(admin, topic, 3)
