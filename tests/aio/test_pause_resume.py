"""pause() and resume() of the asyncio consumer when records fetched before the pause are still
waiting in the fetch buffer (found by the parallel bench: AsyncParallelConsumer pauses a
partition whose handlers fall behind; after the resume no record came any more)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from kafka_actors import TopicPartition
from kafka_actors.aio import AsyncKafkaConsumer
from tests.consumer.helpers import base_config, produce, unique

pytestmark = pytest.mark.mock

RECORDS = 6000


def test_resume_hands_out_what_was_fetched_before_the_pause(mock_cluster: Any) -> None:
    topic = unique("aio-pause")
    mock_cluster.create_topic(topic, partitions=1)
    bootstrap = mock_cluster.bootstrap_servers
    # one fetch response holds more than a collect takes (2,000): some stay in the buffer
    produce(bootstrap, topic, RECORDS, partition=0)
    tp = TopicPartition(topic, 0)

    async def main() -> list[int]:
        offsets: list[int] = []
        async with AsyncKafkaConsumer(config=base_config(bootstrap)) as consumer:
            consumer.assign([tp])
            deadline = time.monotonic() + 60
            while len(offsets) < 2500:
                assert time.monotonic() < deadline, f"{len(offsets)} records before the pause"
                for recs in (await consumer.getmany(timeout_ms=1000, max_records=500)).values():
                    offsets.extend(r.offset for r in recs)
            consumer.pause(tp)
            for _ in range(3):  # polls while paused find nothing (and remember that)
                assert await consumer.getmany(timeout_ms=100) == {}
            consumer.resume(tp)
            deadline = time.monotonic() + 30
            while len(offsets) < RECORDS and time.monotonic() < deadline:
                for recs in (await consumer.getmany(timeout_ms=1000, max_records=500)).values():
                    offsets.extend(r.offset for r in recs)
        return offsets

    offsets = asyncio.run(main())
    assert offsets == list(range(RECORDS)), f"{len(offsets)} of {RECORDS} after the resume"
