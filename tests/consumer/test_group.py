"""Group consumption under both group protocols: subscribe + poll, commits, two members."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kafka_actors import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from tests.consumer.helpers import base_config, poll_until, produce, unique

pytestmark = pytest.mark.broker

PROTOCOLS = ["consumer", "classic"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_subscribe_and_poll(kafka_broker: Any, protocol: str) -> None:
    topic = unique(f"sub-{protocol}")
    kafka_broker.create_topic(topic, partitions=3)
    produce(kafka_broker.bootstrap_servers, topic, 90)
    config = base_config(
        kafka_broker.bootstrap_servers, **{"group.id": unique("g"), "group.protocol": protocol}
    )
    with KafkaConsumer(config) as consumer:
        consumer.subscribe([topic])
        records = poll_until(consumer, 90)
        assert consumer.assignment() == {TopicPartition(topic, p) for p in range(3)}
        assert consumer.subscription() == {topic}
    assert sorted(r.value for r in records) == sorted(f"value-{i}".encode() for i in range(90))
