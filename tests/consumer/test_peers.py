"""The consumer against the librdkafka mock cluster and against Kafka 3.9."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_actors import KafkaConsumer, TopicPartition
from kafka_actors.errors import UnsupportedVersionError
from tests.consumer.helpers import base_config, poll_until, produce, unique


@pytest.mark.mock
def test_mock_cluster_assign_and_poll(mock_cluster: Any) -> None:
    topic = unique("mock")
    mock_cluster.create_topic(topic, partitions=3)
    produce(mock_cluster.bootstrap_servers, topic, 60)
    with KafkaConsumer(base_config(mock_cluster.bootstrap_servers)) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(3)])
        records = poll_until(consumer, 60)
    assert sorted(r.value or b"" for r in records) == sorted(
        f"value-{i}".encode() for i in range(60)
    )


@pytest.mark.broker
def test_kafka_39_classic_group(kafka_broker_39: Any) -> None:
    topic = unique("k39")
    kafka_broker_39.create_topic(topic, partitions=2)
    produce(kafka_broker_39.bootstrap_servers, topic, 20)
    config = base_config(
        kafka_broker_39.bootstrap_servers, **{"group.id": unique("g"), "group.protocol": "classic"}
    )
    with KafkaConsumer(config) as consumer:
        consumer.subscribe([topic])
        assert len(poll_until(consumer, 20)) == 20
        consumer.commit_sync()


@pytest.mark.broker
def test_kafka_39_consumer_protocol(kafka_broker_39: Any) -> None:
    """The testkit's 3.9 broker has the KIP-848 protocol enabled (opt-in on 3.x)."""
    topic = unique("k39c")
    kafka_broker_39.create_topic(topic, partitions=2)
    produce(kafka_broker_39.bootstrap_servers, topic, 10)
    config = base_config(
        kafka_broker_39.bootstrap_servers, **{"group.id": unique("g"), "group.protocol": "consumer"}
    )
    with KafkaConsumer(config) as consumer:
        consumer.subscribe([topic])
        assert len(poll_until(consumer, 10)) == 10


@pytest.mark.broker
def test_consumer_protocol_unsupported_fails_clearly(
    kafka_broker_39: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker whose ApiVersions lack ConsumerGroupHeartbeat (Kafka 3.x without KIP-848):
    group.protocol=consumer is refused with an error telling the user to set
    group.protocol=classic (no silent fallback). Simulated by the client not offering the API,
    which leaves it out of the negotiated versions exactly as such a broker does."""
    from types import MappingProxyType

    from kafka_actors.protocol.wire import versions
    from kafka_actors.protocol.wire.apis import CLIENT_VERSIONS, ApiKey

    without = {k: v for k, v in CLIENT_VERSIONS.items() if k != ApiKey.CONSUMER_GROUP_HEARTBEAT}
    monkeypatch.setattr(versions, "CLIENT_VERSIONS", MappingProxyType(without))
    topic = unique("k39u")
    kafka_broker_39.create_topic(topic, partitions=1)
    config = base_config(
        kafka_broker_39.bootstrap_servers, **{"group.id": unique("g"), "group.protocol": "consumer"}
    )
    with KafkaConsumer(config) as consumer:
        with pytest.raises(UnsupportedVersionError) as info:
            consumer.subscribe([topic])
            for _ in range(60):
                consumer.poll(0.5)
        assert "group.protocol=classic" in str(info.value)
        with pytest.raises(UnsupportedVersionError):
            consumer.subscribe([topic])  # versions known now: refused at once
        consumer.unsubscribe()
        consumer.assign([TopicPartition(topic, 0)])  # manual assignment still works
        consumer.poll(0.2)


@pytest.mark.mock
def test_mock_cluster_group_by_regex(mock_cluster: Any) -> None:
    """librdkafka's mock serves KIP-848 groups subscribed by regex."""
    topic = unique("mockgrp")
    mock_cluster.create_topic(topic, partitions=2)
    produce(mock_cluster.bootstrap_servers, topic, 20)
    config = base_config(
        mock_cluster.bootstrap_servers, **{"group.id": unique("g"), "group.protocol": "consumer"}
    )
    with KafkaConsumer(config) as consumer:
        consumer.subscribe(pattern=f"^{topic}$")
        assert len(poll_until(consumer, 20)) == 20
        consumer.commit_sync()
