"""A KIP-848 member whose group is gone, against real brokers.

The bootstrap address (a TCP forwarder) moves to a new cluster while the old one stops: the
consumer re-bootstraps, finds the new cluster's coordinator and heartbeats with its member
epoch; the 4.4 broker, which does not know the group, answers GROUP_ID_NOT_FOUND. As Java's
consumer (4.4), ours fails the member: the next poll raises GroupIdNotFoundError naming the
group (not retriable), and close() still finishes in time without raising.
"""

from __future__ import annotations

import time

import pytest

from kafka_actors import KafkaConsumer
from kafka_actors.errors import GroupIdNotFoundError, KafkaError
from kafka_actors.testing import KafkaBroker, capture_logs
from tests.actors.network_proxy import TcpProxy
from tests.consumer.helpers import base_config, poll_until, produce, unique


@pytest.mark.broker
def test_member_moved_to_a_cluster_without_its_group_fails_like_java() -> None:
    topic, group = unique("group-gone"), unique("group-gone-g")
    with KafkaBroker() as old:
        old.create_topic(topic)
        produce(old.bootstrap_servers, topic, 10, partition=0)
        with TcpProxy("127.0.0.1", (old.node.host, old.node.port)) as proxy:
            consumer = KafkaConsumer(
                base_config(
                    proxy.address,
                    **{
                        "group.id": group,
                        "group.protocol": "consumer",
                        "enable.auto.commit": False,
                        "metadata.recovery.rebootstrap.trigger.ms": 3_000,
                        "reconnect.backoff.max.ms": 500,
                    },
                )
            )
            try:
                consumer.subscribe([topic])
                assert len(poll_until(consumer, 10)) == 10
                with KafkaBroker(first_node_id=7) as new, capture_logs() as logs:
                    new.create_topic(topic)
                    proxy.target = (new.node.host, new.node.port)
                    old.stop()
                    error: KafkaError | None = None
                    deadline = time.monotonic() + 120
                    while error is None and time.monotonic() < deadline:
                        try:
                            consumer.poll(0.5)
                        except KafkaError as exc:
                            error = exc
                    assert isinstance(error, GroupIdNotFoundError), error
                    assert group in str(error) and not error.retriable
                    # the heartbeat's answer, from the new cluster's coordinator
                    assert any(
                        e["event"] == "heartbeat_fatal_error" and e["error_code"] == 69
                        for e in logs
                    )
                    started = time.monotonic()
                    consumer.close(timeout=30)
                    assert time.monotonic() - started < 30 + 10
            finally:
                consumer.close(timeout=5)
