"""``acquisition_lock_timeout_ms()`` (Java's ``acquisitionLockTimeoutMs()``) on the sync and the
asyncio share consumers against a Kafka 4.4 broker: ``None`` before the first ShareFetch answer,
then the group's ``share.record.lock.duration.ms`` as the broker reports it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from kafka_actors.testing.share import set_share_group_config
from tests.consumer.helpers import unique
from tests.share.helpers import first_batch, produce, share_api, share_config

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]

LOCK_MS = 17_000


def test_sync_share_consumer_reports_the_group_lock_duration(kafka_broker: Any) -> None:
    api = share_api()
    topic, group = unique("share-lock"), unique("share-lock-g")
    kafka_broker.create_topic(topic, partitions=1)
    set_share_group_config(kafka_broker.bootstrap_servers, group, record_lock_duration_ms=LOCK_MS)
    produce(kafka_broker.bootstrap_servers, topic, 5)
    with api.KafkaShareConsumer(share_config(kafka_broker, group)) as consumer:
        assert consumer.acquisition_lock_timeout_ms() is None
        consumer.subscribe([topic])
        assert first_batch(consumer)
        assert consumer.acquisition_lock_timeout_ms() == LOCK_MS


def test_async_share_consumer_reports_the_group_lock_duration(kafka_broker: Any) -> None:
    api = share_api()
    topic, group = unique("share-lock-aio"), unique("share-lock-aio-g")
    kafka_broker.create_topic(topic, partitions=1)
    set_share_group_config(kafka_broker.bootstrap_servers, group, record_lock_duration_ms=LOCK_MS)
    produce(kafka_broker.bootstrap_servers, topic, 5)

    async def run() -> tuple[int | None, int | None]:
        consumer = api.AsyncKafkaShareConsumer(share_config(kafka_broker, group))
        try:
            before = await consumer.acquisition_lock_timeout_ms()
            consumer.subscribe([topic])
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not list(await consumer.poll(0.5)):
                pass
            after = None
            while time.monotonic() < deadline and after is None:
                after = await consumer.acquisition_lock_timeout_ms()
                if after is None:
                    await consumer.poll(0.2)
            return before, after
        finally:
            await consumer.close()

    assert asyncio.run(run()) == (None, LOCK_MS)
