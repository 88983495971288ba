"""Cancellation and timeouts: a cancelled getmany (or one cut by ``asyncio.timeout``) loses no
records — the next call returns them; several consumers share one loop."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from kafka_actors import TopicPartition
from kafka_actors.aio import AsyncKafkaConsumer
from tests.aio.helpers import group_config
from tests.consumer.helpers import base_config, produce, unique

pytestmark = pytest.mark.broker


async def _collect_all(
    consumer: AsyncKafkaConsumer, count: int, seen: list[tuple[int, int]], cancel_every: int
) -> int:
    """Read ``count`` records, cancelling every ``cancel_every``-th getmany at a random point
    of its life (before, during or after the collect answer). Returns how many were cut."""
    cut = 0
    calls = 0
    deadline = time.monotonic() + 120
    while len(seen) < count:
        assert time.monotonic() < deadline, f"{len(seen)} of {count}"
        calls += 1
        task = asyncio.ensure_future(consumer.getmany(timeout_ms=2000, max_records=50))
        if calls % cancel_every == 0:
            for _ in range(calls % 4):
                await asyncio.sleep(0)
            if not task.done():
                task.cancel()
                cut += 1
        try:
            batch = await task
        except asyncio.CancelledError:
            continue
        for records in batch.values():
            seen.extend((r.partition, r.offset) for r in records)
    return cut


def test_cancelled_getmany_loses_nothing(kafka_broker: Any) -> None:
    topic = unique("aio-cancel")
    kafka_broker.create_topic(topic, partitions=3)
    produce(kafka_broker.bootstrap_servers, topic, 3000)

    async def main() -> None:
        async with AsyncKafkaConsumer(config=base_config(kafka_broker.bootstrap_servers)) as c:
            c.assign([TopicPartition(topic, p) for p in range(3)])
            seen: list[tuple[int, int]] = []
            cut = await _collect_all(c, 3000, seen, cancel_every=2)
            assert cut > 0
            assert len(seen) == len(set(seen)) == 3000
            for p in range(3):
                offsets = [o for q, o in seen if q == p]
                assert offsets == sorted(offsets) == list(range(len(offsets)))
            assert await c.getmany(timeout_ms=300) == {}

    asyncio.run(main())


def test_asyncio_timeout_around_getmany(kafka_broker: Any) -> None:
    """``asyncio.timeout`` shorter than getmany's own timeout: TimeoutError, nothing lost; a
    timeout that does not fire leaves the result alone."""
    topic = unique("aio-timeout")
    kafka_broker.create_topic(topic, partitions=1)
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        async with AsyncKafkaConsumer(config=base_config(kafka_broker.bootstrap_servers)) as c:
            c.assign([tp])
            start = time.monotonic()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.5):
                    await c.getmany(timeout_ms=30_000)
            assert time.monotonic() - start < 20
            await asyncio.to_thread(produce, kafka_broker.bootstrap_servers, topic, 100)
            got: list[int] = []
            timeouts = 0
            while len(got) < 100:
                try:
                    async with asyncio.timeout(0.002 if timeouts < 20 else 10):
                        batch = await c.getmany(timeout_ms=5000, max_records=7)
                except TimeoutError:
                    timeouts += 1
                    continue
                got.extend(r.offset for r in batch.get(tp, []))
            assert got == list(range(100))
            async with asyncio.timeout(10):
                assert await c.getmany(timeout_ms=200) == {}
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.3):
                    await c.getone()
            assert await c.position(tp) == 100

    asyncio.run(main())


def test_two_consumers_on_one_loop(kafka_broker: Any) -> None:
    """Two group members of one group and one standalone consumer, all on one loop."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("aio-two")
    kafka_broker.create_topic(topic, partitions=4)
    produce(bootstrap, topic, 2000)
    group = unique("g")

    async def main() -> None:
        config = group_config(bootstrap, group, "classic")
        a = AsyncKafkaConsumer(topic, config=config)
        b = AsyncKafkaConsumer(topic, config=config)
        solo = AsyncKafkaConsumer(config=base_config(bootstrap))
        solo.assign([TopicPartition(topic, p) for p in range(4)])
        seen: dict[str, list[tuple[int, int]]] = {"a": [], "b": [], "solo": []}

        async def run(name: str, consumer: AsyncKafkaConsumer, stop: asyncio.Event) -> None:
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    seen[name].extend((r.partition, r.offset) for r in records)
                if batch and name != "solo":
                    await consumer.commit()

        stop = asyncio.Event()
        tasks = [
            asyncio.ensure_future(run(n, c, stop)) for n, c in (("a", a), ("b", b), ("solo", solo))
        ]
        deadline = time.monotonic() + 120
        while not (
            len(seen["solo"]) >= 2000
            and len(seen["a"]) + len(seen["b"]) >= 2000
            and a.assignment()
            and b.assignment()
        ):
            assert time.monotonic() < deadline, {k: len(v) for k, v in seen.items()}
            await asyncio.sleep(0.2)
        stop.set()
        await asyncio.gather(*tasks)
        assert sorted(seen["solo"]) == sorted(set(seen["solo"]))
        assert len(seen["solo"]) == 2000
        group_seen = seen["a"] + seen["b"]
        assert len(set(group_seen)) == 2000  # every record (duplicates allowed only at the
        # handover from one member to the other before its first commit: checked elsewhere)
        await asyncio.gather(a.close(), b.close(), solo.close())

    asyncio.run(asyncio.wait_for(main(), 200))
