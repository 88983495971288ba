"""Auto-commit on poll and commit on close (enable.auto.commit=true)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kafka_actors import KafkaConsumer, TopicPartition
from tests.consumer.helpers import base_config, poll_until, produce, unique

pytestmark = pytest.mark.broker


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_auto_commit_on_poll_and_on_close(kafka_broker: Any, protocol: str) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique(f"auto-{protocol}")
    group = unique("g")
    tp = TopicPartition(topic, 0)
    kafka_broker.create_topic(topic, partitions=1)
    produce(bootstrap, topic, 50)
    config = base_config(
        bootstrap,
        **{
            "group.id": group,
            "group.protocol": protocol,
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 200,
        },
    )
    with KafkaConsumer(config) as consumer:
        consumer.subscribe([topic])
        poll_until(consumer, 50)
        deadline = time.monotonic() + 30
        while True:
            consumer.poll(0.3)  # auto-commit is driven by poll
            committed = consumer.committed(tp)[tp]
            if committed is not None and committed.offset == 50:
                break
            assert time.monotonic() < deadline, f"auto-commit did not happen: {committed}"
    # Commit on close: a long interval, so only close() commits.
    produce(bootstrap, topic, 10, start=50)
    config["auto.commit.interval.ms"] = 600_000
    consumer = KafkaConsumer(config)
    consumer.subscribe([topic])
    records = poll_until(consumer, 10)
    assert [r.offset for r in records] == list(range(50, 60))
    consumer.close(timeout=30)
    with KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group}) as checker:
        committed = checker.committed(tp)[tp]
    assert committed is not None and committed.offset == 60
