"""Re-bootstrap (KIP-899 / KIP-1102) against real brokers.

* NetworkActor: a known broker that stops answering Metadata (its responses dropped by fault
  injection) is forgotten after ``metadata.recovery.rebootstrap.trigger.ms``; the next
  Metadata goes to the bootstrap server (event ``rebootstrap``).
* Consumer: the bootstrap address (a TCP forwarder standing for a DNS name or a load
  balancer) moves to a new cluster (another node id, other ports) while the known broker
  dies; with the default ``rebootstrap`` the consumer keeps consuming from the new cluster's
  broker, with ``none`` it reports BrokersUnreachableError. When the old broker refuses
  connections, requests for any node fall back to the bootstrap address at once; when it is
  frozen (SIGSTOP: connections are accepted by the kernel, nothing is answered) and connection
  setup may take longer than the test, only the ``metadata.recovery.rebootstrap.trigger.ms``
  path (event ``rebootstrap``, forgetting node 1) gets away from it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pykka
import pytest

from kafka_actors import KafkaConsumer
from kafka_actors.actors.network import Response, UpdateNodes
from kafka_actors.errors import BrokersUnreachableError, KafkaError
from kafka_actors.metrics import CONSUMER, ConsumerMetrics
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.wire import requests as rq
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.supervisors import FaultInjector
from kafka_actors.testing import KafkaBroker, capture_logs
from tests.actors.network_helpers import events, metadata, network_config, send
from tests.actors.network_proxy import TcpProxy
from tests.consumer.helpers import base_config, poll_until, produce, unique

StartNetwork = Callable[..., pykka.ActorRef[Any]]


@pytest.mark.broker
def test_known_broker_silent_for_trigger_ms_rebootstraps(
    kafka_broker: KafkaBroker, start_network: StartNetwork
) -> None:
    host, port = kafka_broker.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with TcpProxy("127.0.0.1", (host, int(port))) as proxy:
        faults = FaultInjector()
        config = network_config(
            proxy.address, **{"metadata.recovery.rebootstrap.trigger.ms": 1_500}
        )
        metrics = ConsumerMetrics("network-test")
        ref = start_network(config, faults=faults, metrics=metrics)
        first = metadata(ref)
        node = int(first.response.brokers[0].node_id)
        assert first.node < 0  # answered by the bootstrap server
        assert metadata(ref, node=node).node == node  # connected to the known broker
        assert metadata(ref).node == node  # which is preferred while ready
        faults.drop_response(ApiKey.METADATA, times=None, node=node)  # it goes silent
        lost = send(ref, rq.metadata_request(12, topics=None), timeout_ms=4_000)
        with pytest.raises(KafkaError):
            reply = lost.get(timeout=30)
            if not isinstance(reply, Response):
                raise reply.error
        kinds = [e.kind for e in events(ref)]
        assert "rebootstrap" in kinds
        again = metadata(ref)
        assert again.node < 0  # the bootstrap server again
        assert int(again.response.brokers[0].node_id) == node
        # the forgotten broker's socket was closed: connection-count counts one, the bootstrap
        # server's (it counted the closed one too)
        assert metrics.view(dict).find(CONSUMER, "connection-count").value() == 1


def _consume_until_error(consumer: KafkaConsumer, timeout: float) -> BaseException | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            consumer.poll(0.5)
        except BrokersUnreachableError as exc:
            return exc
    return None


def _strategy_consumers(address: str, **settings: object) -> dict[str, KafkaConsumer]:
    """One consumer per ``metadata.recovery.strategy`` (also its ``client.id``), on
    ``address``, with a 3 s rebootstrap trigger."""
    common = {
        "metadata.recovery.rebootstrap.trigger.ms": 3_000,
        "reconnect.backoff.max.ms": 500,
        "enable.auto.commit": False,
        **settings,
    }
    return {
        strategy: KafkaConsumer(
            base_config(
                address, **common, **{"metadata.recovery.strategy": strategy, "client.id": strategy}
            )
        )
        for strategy in ("rebootstrap", "none")
    }


@pytest.mark.broker
def test_consumer_follows_the_bootstrap_address_to_a_new_cluster() -> None:
    topic = unique("rebootstrap")
    tp = TopicPartition(topic, 0)
    with KafkaBroker() as old:
        assert old.node.node_id == 1
        old.create_topic(topic)
        produce(old.bootstrap_servers, topic, 10, partition=0)
        with TcpProxy("127.0.0.1", (old.node.host, old.node.port)) as proxy:
            consumers = _strategy_consumers(proxy.address)
            try:
                for consumer in consumers.values():
                    consumer.assign([tp])
                    assert [r.offset for r in poll_until(consumer, 10)] == list(range(10))
                    assert [p.leader for p in consumer.partitions_for(topic, 30)] == [1]
                with KafkaBroker(first_node_id=7) as new:  # no node the consumers know
                    assert new.node.port != old.node.port
                    new.create_topic(topic)
                    produce(new.bootstrap_servers, topic, 20, partition=0, start=100)
                    proxy.target = (new.node.host, new.node.port)
                    old.stop()
                    moved = poll_until(consumers["rebootstrap"], 10, timeout=120)
                    assert [(r.offset, r.value) for r in moved[:10]] == [
                        (i, f"value-{100 + i}".encode()) for i in range(10, 20)
                    ]
                    # the consumer's metadata now names the new cluster's broker
                    moved_leaders = consumers["rebootstrap"].partitions_for(topic, 30)
                    assert [p.leader for p in moved_leaders] == [7]
                    assert [p.leader for p in consumers["rebootstrap"].list_topics(30)[topic]] == [
                        7
                    ]
                    error = _consume_until_error(consumers["none"], 120)
                    assert isinstance(error, BrokersUnreachableError), error
                    assert "metadata.recovery.strategy=none" in str(error)
            finally:
                for consumer in consumers.values():
                    consumer.close()


def test_recovery_settings_are_validated() -> None:
    config = network_config("localhost:9092")
    assert config.metadata_recovery_strategy == "rebootstrap"  # Kafka 4.x's default
    assert config.metadata_recovery_rebootstrap_trigger_ms == 300_000
    with pytest.raises(KafkaError, match=r"metadata\.recovery\.strategy"):
        network_config("localhost:9092", **{"metadata.recovery.strategy": "sometimes"})
    with pytest.raises(KafkaError, match="trigger"):
        network_config("localhost:9092", **{"metadata.recovery.rebootstrap.trigger.ms": -1})


@pytest.mark.broker
def test_rebootstrap_required_answer_forgets_known_brokers(
    kafka_broker: KafkaBroker, start_network: StartNetwork
) -> None:
    faults = FaultInjector()
    ref = start_network(network_config(kafka_broker.bootstrap_servers), faults=faults)
    node = int(metadata(ref).response.brokers[0].node_id)
    assert metadata(ref, node=node).node == node
    faults.error_response(ApiKey.METADATA, 129, node=node)  # REBOOTSTRAP_REQUIRED (v13+)
    reply = send(ref, rq.metadata_request(13, topics=None), node=node).get(timeout=30)
    assert not isinstance(reply, Response)
    assert reply.error.retriable and "REBOOTSTRAP_REQUIRED" in str(reply.error)
    assert "rebootstrap" in [e.kind for e in events(ref)]
    assert metadata(ref).node < 0  # the known broker was forgotten: a bootstrap server answers


@pytest.mark.broker
def test_consumer_leaves_a_frozen_cluster_after_the_trigger_time() -> None:
    topic = unique("rebootstrap-frozen")
    tp = TopicPartition(topic, 0)
    with KafkaBroker() as old:
        old.create_topic(topic)
        produce(old.bootstrap_servers, topic, 10, partition=0)
        with TcpProxy("127.0.0.1", (old.node.host, old.node.port)) as proxy:
            consumers = _strategy_consumers(
                proxy.address,
                **{
                    "request.timeout.ms": 5_000,
                    # a connection to the frozen broker stays "connecting" for the whole test,
                    # so requests do not fall back to the bootstrap address because it failed
                    "socket.connection.setup.timeout.ms": 120_000,
                    "socket.connection.setup.timeout.max.ms": 120_000,
                },
            )
            pid = old.node.pid
            assert pid is not None
            frozen = False
            try:
                for consumer in consumers.values():
                    consumer.assign([tp])
                    assert [r.offset for r in poll_until(consumer, 10)] == list(range(10))
                with KafkaBroker(first_node_id=7) as new, capture_logs() as logs:
                    new.create_topic(topic)
                    produce(new.bootstrap_servers, topic, 20, partition=0, start=100)
                    proxy.target = (new.node.host, new.node.port)
                    os.kill(pid, signal.SIGSTOP)  # node 1 accepts connections, answers nothing
                    frozen = True
                    moved = poll_until(consumers["rebootstrap"], 10, timeout=120)
                    assert [(r.offset, r.value) for r in moved[:10]] == [
                        (i, f"value-{100 + i}".encode()) for i in range(10, 20)
                    ]
                    leaders = consumers["rebootstrap"].partitions_for(topic, 30)
                    assert [p.leader for p in leaders] == [7]
                    error = _consume_until_error(consumers["none"], 120)
                    assert isinstance(error, BrokersUnreachableError), error
                    assert "metadata.recovery.strategy=none" in str(error)
                rebootstraps = [e for e in logs if e["event"] == "rebootstrap"]
                assert {e["client_id"] for e in rebootstraps} == {"rebootstrap"}
                assert any("1@" in str(e["forgotten"]) for e in rebootstraps)
            finally:
                if frozen:
                    os.kill(pid, signal.SIGCONT)
                for consumer in consumers.values():
                    consumer.close()


@pytest.mark.broker
def test_a_known_address_answering_for_another_cluster_rebootstraps(
    start_network: StartNetwork,
) -> None:
    """KIP-1242 (Kafka 4.4): node 1's address (a forwarder standing for a reused address)
    starts answering for another cluster, whose broker is node 1 too. The reconnection's
    ApiVersions v5 names the cluster id the metadata gave: the other cluster answers
    REBOOTSTRAP_REQUIRED and the client rebootstraps. With metadata.cluster.check.enable=false
    it would talk to the other cluster's node 1 as if it were the first's."""
    with KafkaBroker() as first, KafkaBroker() as second:
        assert first.node.node_id == second.node.node_id == 1
        with TcpProxy("127.0.0.1", (first.node.host, first.node.port)) as proxy:
            checked = start_network(network_config(first.bootstrap_servers))
            unchecked = start_network(
                network_config(
                    first.bootstrap_servers, **{"metadata.cluster.check.enable": False}
                )
            )
            host, port = proxy.address.rsplit(":", 1)
            for ref in (checked, unchecked):
                cluster_id = metadata(ref).response.cluster_id
                assert cluster_id
                ref.tell(UpdateNodes(((1, host, int(port)),)))  # node 1 is at the forwarder
                answer = send(ref, _find_coordinator(), node=1).get(timeout=30)
                assert isinstance(answer, Response), answer  # the first cluster answers
            proxy.target = (second.node.host, second.node.port)
            proxy.cut()  # both reconnect to the second cluster
            # A request sent before the actor read the cut fails with the cut connection
            # (ciW: DisconnectedError, no rebootstrap yet); the reconnection then meets the
            # other cluster. Never an answer from it: each failure is retriable, until the
            # rebootstrap is recorded.
            deadline = time.monotonic() + 60  # a bound on a hang, not a timing assertion
            reasons: list[str] = []
            while not reasons:
                assert time.monotonic() < deadline, events(checked)
                failed = send(checked, _find_coordinator(), node=1).get(timeout=30)
                assert not isinstance(failed, Response) and failed.error.retriable, failed
                reasons = [e.error or "" for e in events(checked) if e.kind == "rebootstrap"]
            assert len(reasons) == 1 and "REBOOTSTRAP_REQUIRED" in reasons[0], reasons
            assert cluster_id in reasons[0]
            assert metadata(checked).node < 0  # node 1 forgotten: a bootstrap server answers
            wrong = send(unchecked, _find_coordinator(), node=1).get(timeout=30)
            while not isinstance(wrong, Response):  # the cut connection's failure first
                assert wrong.error.retriable and time.monotonic() < deadline, wrong
                wrong = send(unchecked, _find_coordinator(), node=1).get(timeout=30)
            # The second cluster answered, unnoticed.
            assert "rebootstrap" not in [e.kind for e in events(unchecked)]


def _find_coordinator() -> Any:
    return rq.find_coordinator_request(4, key="kip-1242")
