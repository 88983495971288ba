"""Typed errors at the call that caused them, and heartbeats that do not need poll()."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kafka_actors import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka_actors.errors import AuthenticationError, OffsetOutOfRangeError
from tests.consumer.helpers import base_config, poll_until, produce, unique

pytestmark = pytest.mark.broker


def test_offset_out_of_range_without_reset_policy(kafka_broker: Any) -> None:
    topic = unique("oor")
    kafka_broker.create_topic(topic, partitions=1)
    produce(kafka_broker.bootstrap_servers, topic, 5)
    tp = TopicPartition(topic, 0)
    config = base_config(kafka_broker.bootstrap_servers, **{"auto.offset.reset": "none"})
    with KafkaConsumer(config) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1000)
        with pytest.raises(OffsetOutOfRangeError) as info:
            for _ in range(100):
                consumer.poll(0.2)
        assert info.value.partition == 0 and info.value.topic == topic
        consumer.seek(tp, 2)  # the user recovers by seeking
        assert [r.offset for r in poll_until(consumer, 3)] == [2, 3, 4]


def test_offset_out_of_range_resets_with_policy(kafka_broker: Any) -> None:
    topic = unique("oor-reset")
    kafka_broker.create_topic(topic, partitions=1)
    produce(kafka_broker.bootstrap_servers, topic, 5)
    tp = TopicPartition(topic, 0)
    with KafkaConsumer(base_config(kafka_broker.bootstrap_servers)) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1000)
        assert [r.offset for r in poll_until(consumer, 5)] == [0, 1, 2, 3, 4]


def test_wrong_password_is_an_authentication_error(kafka_broker_secured: Any) -> None:
    spec = kafka_broker_secured.listener("SASL_PLAINTEXT")
    config = {
        "bootstrap.servers": kafka_broker_secured.listener_bootstrap("SASL_PLAINTEXT"),
        "security.protocol": spec.security_protocol,
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": "not-alices-password",
        "group.id": unique("g"),
    }
    with KafkaConsumer(config) as consumer:
        consumer.subscribe(["whatever"])
        started = time.monotonic()
        with pytest.raises(AuthenticationError):
            while time.monotonic() - started < 60:
                consumer.poll(0.5)


def test_heartbeats_continue_without_poll(kafka_broker: Any) -> None:
    """Classic group, session.timeout.ms=6000: not polling for 10 s (less than
    max.poll.interval.ms) keeps the member in the group; no rebalance happens."""
    topic = unique("hb")
    kafka_broker.create_topic(topic, partitions=2)
    produce(kafka_broker.bootstrap_servers, topic, 10)
    events: list[str] = []

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
            events.append(f"revoked {sorted(map(str, revoked))}")

        def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
            events.append(f"lost {sorted(map(str, lost))}")

    config = base_config(
        kafka_broker.bootstrap_servers,
        **{
            "group.id": unique("g"),
            "group.protocol": "classic",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            "max.poll.interval.ms": 60_000,
        },
    )
    with KafkaConsumer(config) as consumer:
        consumer.subscribe([topic], listener=Listener())
        poll_until(consumer, 10)
        generation = consumer.group_metadata().generation_id
        time.sleep(10)
        produce(kafka_broker.bootstrap_servers, topic, 4, start=10)
        assert len(poll_until(consumer, 4)) == 4
        assert consumer.group_metadata().generation_id == generation
        assert len(consumer.assignment()) == 2
    assert events == [] or all(e.startswith("revoked") for e in events[-1:])
    assert not any(e.startswith("lost") for e in events)
