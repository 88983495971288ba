"""Every asyncio front end is bound to the event loop it first ran on: a call from another loop
is a typed IllegalStateError (the same check for the consumer, the share consumer and the
parallel consumer: ``kafka_actors.aio_loop.running_loop_of``), and the first loop still works."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kafka_actors import AsyncParallelConsumer
from kafka_actors.aio import AsyncKafkaConsumer
from kafka_actors.aio_share import AsyncKafkaShareConsumer
from kafka_actors.errors import IllegalStateError
from tests.consumer.helpers import base_config, unique

pytestmark = pytest.mark.mock


def test_a_consumer_is_used_from_its_first_loop(mock_cluster: Any) -> None:
    topic = unique("aio-bound")
    mock_cluster.create_topic(topic, partitions=1)
    consumer = AsyncKafkaConsumer(
        config=base_config(mock_cluster.bootstrap_servers, **{"group.id": unique("g")})
    )
    first = asyncio.new_event_loop()
    try:
        first.run_until_complete(consumer.__aenter__())
        consumer.subscribe([topic])

        async def from_another_loop() -> None:
            await consumer.unsubscribe()

        with pytest.raises(IllegalStateError, match="AsyncKafkaConsumer is bound"):
            asyncio.run(from_another_loop())
        first.run_until_complete(consumer.unsubscribe())  # the first loop still works
        assert consumer.subscription() == set()
    finally:
        first.run_until_complete(consumer.close())
        first.close()


def test_a_share_consumer_is_used_from_its_first_loop(mock_cluster: Any) -> None:
    config = {"bootstrap.servers": mock_cluster.bootstrap_servers, "group.id": unique("sg")}
    consumer = AsyncKafkaShareConsumer(config)
    first = asyncio.new_event_loop()
    try:
        first.run_until_complete(consumer.__aenter__())
        with pytest.raises(IllegalStateError, match="AsyncKafkaShareConsumer is bound"):
            asyncio.run(consumer.__aenter__())
    finally:
        first.run_until_complete(consumer.close())
        first.close()


def test_a_parallel_consumer_is_used_from_its_first_loop(mock_cluster: Any) -> None:
    async def handler(record: Any) -> None:
        return None

    config = base_config(mock_cluster.bootstrap_servers, **{"group.id": unique("g")})
    consumer = AsyncParallelConsumer(config, handler=handler, offset_metadata_max_bytes=4096)
    first = asyncio.new_event_loop()
    try:
        first.run_until_complete(consumer.__aenter__())
        with pytest.raises(IllegalStateError, match="AsyncParallelConsumer is bound"):
            asyncio.run(consumer.__aenter__())
    finally:
        first.run_until_complete(consumer.close())
        first.close()
