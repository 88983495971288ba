"""AsyncParallelConsumer over a stand-in AsyncKafkaConsumer (no broker): handler tasks run
the started records one after another and start the next themselves; records are handled
each once, in order, within max_concurrency; handlers that suspend spread over up to
max_concurrency tasks; no-op handlers do not cost a task each; a failure is retried."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog

import kafka_actors.parallel.aio as aio_module
from kafka_actors.parallel.aio import AsyncParallelConsumer
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord, TimestampType

TP = TopicPartition("orders", 0)


def rec(offset: int, key: bytes | None = None) -> ConsumerRecord:
    return ConsumerRecord(
        TP.topic, TP.partition, offset, 0, TimestampType.CREATE_TIME, key, b"v", [], None
    )


class _StandIn:
    """What AsyncParallelConsumer uses of an AsyncKafkaConsumer: one partition of
    ``records``, 100 at a time, pauses honoured, commits recorded."""

    records: list[ConsumerRecord] = []
    instances: list[_StandIn] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.position = 0
        self.paused: set[TopicPartition] = set()
        self.listener: Any = None
        self.commits: list[dict[TopicPartition, OffsetAndMetadata]] = []
        self.topics: list[str] = []
        _StandIn.instances.append(self)

    def subscribe(self, topics: list[str], listener: Any = None) -> None:
        self.topics = list(topics)
        self.listener = listener

    def subscription(self) -> set[str]:
        return set(self.topics)

    async def getmany(
        self, timeout_ms: int = 0, max_records: int = 500
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        if self.listener is not None:
            listener, self.listener = self.listener, None
            await listener.on_partitions_assigned({TP})
        if TP not in self.paused and self.position < len(self.records):
            batch = self.records[self.position : self.position + min(100, max_records)]
            self.position += len(batch)
            return {TP: batch}
        await asyncio.sleep(timeout_ms / 1000)
        return {}

    def pause(self, *tps: TopicPartition) -> None:
        self.paused.update(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.paused.difference_update(tps)

    async def committed(self, tps: Any, timeout: float | None = None) -> Any:
        return dict.fromkeys(tps)

    async def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata], **kw: Any) -> None:
        self.commits.append(offsets)

    async def close(self, timeout: float | None = None) -> None:
        pass


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> type[_StandIn]:
    monkeypatch.setattr(aio_module, "AsyncKafkaConsumer", _StandIn)
    _StandIn.instances = []
    return _StandIn


def consumer(handler: Any, **options: Any) -> AsyncParallelConsumer:
    return AsyncParallelConsumer(
        {"bootstrap.servers": "localhost:9", "group.id": "g", "auto.commit.interval.ms": 50},
        handler=handler,
        offset_metadata_max_bytes=4096,
        **options,
    )


async def until(condition: Any, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.005)


@pytest.mark.parametrize("ordering", ["partition", "key", "unordered"])
def test_no_op_handlers_in_order_each_once_without_a_task_each(
    stand_in: type[_StandIn], ordering: str
) -> None:
    n = 3000
    stand_in.records = [rec(i, b"k%d" % (i % 7)) for i in range(n)]
    handled: list[int] = []
    contexts: list[dict[str, Any]] = []
    created = [0]

    async def handle(record: ConsumerRecord) -> None:
        handled.append(record.offset)
        if record.offset % 1000 == 0:
            contexts.append(dict(structlog.contextvars.get_contextvars()))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        create = loop.create_task

        def counting(coro: Any, **kw: Any) -> Any:
            created[0] += 1
            return create(coro, **kw)

        loop.create_task = counting  # type: ignore[method-assign]
        async with consumer(handle, ordering=ordering, max_concurrency=8) as pc:
            pc.subscribe(["orders"])
            runner = asyncio.ensure_future(pc.run())
            await until(lambda: len(handled) >= n)
            pc.stop()
            await runner

    asyncio.run(main())
    assert sorted(handled) == list(range(n))
    if ordering != "unordered":
        for k in range(7):
            mine = [o for o in handled if o % 7 == k]
            assert mine == sorted(mine)
    assert stand_in.instances[0].commits[-1][TP].offset == n
    assert created[0] < n // 10  # not a task per record
    assert [c["offset"] for c in contexts] == [0, 1000, 2000]
    assert contexts[0] == {
        "topic": "orders",
        "partition": 0,
        "offset": 0,
        "key": b"k0",
        "attempt": 1,
    }


def test_suspending_handlers_spread_over_max_concurrency_tasks(
    stand_in: type[_StandIn],
) -> None:
    stand_in.records = [rec(i, b"k%d" % i) for i in range(64)]
    running = [0]
    most = [0]
    handled: list[int] = []

    async def handle(record: ConsumerRecord) -> None:
        running[0] += 1
        most[0] = max(most[0], running[0])
        await asyncio.sleep(0.02)
        running[0] -= 1
        handled.append(record.offset)

    async def main() -> None:
        async with consumer(handle, max_concurrency=16) as pc:
            pc.subscribe(["orders"])
            runner = asyncio.ensure_future(pc.run())
            await until(lambda: len(handled) == 64)
            pc.stop()
            await runner

    asyncio.run(main())
    assert most[0] == 16


def test_a_failing_record_is_retried_while_the_others_go_on(stand_in: type[_StandIn]) -> None:
    stand_in.records = [rec(i, b"k%d" % (i % 3)) for i in range(300)]
    attempts: dict[int, int] = {}

    async def handle(record: ConsumerRecord) -> None:
        attempts[record.offset] = attempts.get(record.offset, 0) + 1
        if record.offset == 100 and attempts[record.offset] < 3:
            raise RuntimeError("not yet")

    async def main() -> None:
        async with consumer(
            handle, max_concurrency=4, retry_backoff_ms=20, retry_backoff_max_ms=40
        ) as pc:
            pc.subscribe(["orders"])
            runner = asyncio.ensure_future(pc.run())
            await until(lambda: pc.metrics()["records-completed-total"] == 300)
            pc.stop()
            await runner

    asyncio.run(main())
    assert attempts[100] == 3
    assert all(count == 1 for offset, count in attempts.items() if offset != 100)
    assert stand_in.instances[0].commits[-1][TP].offset == 300
