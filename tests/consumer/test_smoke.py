"""First light: assign + poll against the real broker."""

from __future__ import annotations

import pytest

from kafka_actors import KafkaConsumer, TopicPartition
from tests.consumer.helpers import base_config, poll_until, produce, unique

pytestmark = pytest.mark.broker


def test_assign_and_poll(kafka_broker: object) -> None:
    bootstrap = kafka_broker.bootstrap_servers  # type: ignore[attr-defined]
    topic = unique("assign")
    kafka_broker.create_topic(topic, partitions=2)  # type: ignore[attr-defined]
    produce(bootstrap, topic, 50, partition=0)
    produce(bootstrap, topic, 30, partition=1, start=50)
    with KafkaConsumer(base_config(bootstrap)) as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        records = poll_until(consumer, 80)
    assert len(records) == 80
    by_partition: dict[int, list[int]] = {}
    for r in records:
        by_partition.setdefault(r.partition, []).append(r.offset)
    assert by_partition[0] == list(range(50))
    assert by_partition[1] == list(range(30))
