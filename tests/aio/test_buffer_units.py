"""The asyncio consumer's own buffer, without a broker: records put in it by hand (as a
collect would) for a partition with a position are returned in order, in slices, by getmany
and getone; a call that finds records ready still gives the loop a turn when it has not had
one for a while; a failing deserializer returns the records before the failing one and keeps
it (tried again by the next call)."""

from __future__ import annotations

import asyncio
from typing import Any

from kafka_actors import TopicPartition
from kafka_actors.aio import AsyncKafkaConsumer, _Buffered
from kafka_actors.protocol.records.decode import ConsumerRecord, TimestampType

TP = TopicPartition("t", 0)


def _records(first: int, count: int) -> list[ConsumerRecord]:
    return [
        ConsumerRecord("t", 0, o, 0, TimestampType.CREATE_TIME, b"k%d" % o, b"v%d" % o, (), None)
        for o in range(first, first + count)
    ]


def _config(**extra: Any) -> dict[str, Any]:
    # Nothing listens there: the actors retry connecting while the test uses the buffer.
    return {"bootstrap.servers": "127.0.0.1:1", "reconnect.backoff.ms": 1000, **extra}


def _fill(consumer: AsyncKafkaConsumer, records: list[ConsumerRecord]) -> None:
    buffered = consumer._buffer.setdefault(TP, _Buffered())
    buffered.add(records)


def test_buffered_slices_and_compacts() -> None:
    b = _Buffered()
    b.add(_records(0, 5))
    assert len(b) == 5 and b.first().offset == 0
    assert [r.offset for r in b.take(2)] == [0, 1]
    assert len(b) == 3 and b.first().offset == 2
    b.add(_records(5, 2))  # drops what was taken before appending
    assert b.start == 0 and [r.offset for r in b.records] == [2, 3, 4, 5, 6]
    assert [r.offset for r in b.take(10)] == [2, 3, 4, 5, 6]
    assert len(b) == 0 and b.take(3) == []


def test_getmany_and_getone_return_buffered_records_in_order() -> None:
    async def main() -> list[int]:
        async with AsyncKafkaConsumer(config=_config()) as consumer:
            consumer.assign([TP])
            consumer.seek(TP, 0)
            _fill(consumer, _records(0, 7))
            first = await consumer.getmany(max_records=3)
            one = await consumer.getone()
            rest = await consumer.getmany(max_records=10)
            assert consumer.metrics()["buffered-records"] == 0.0
            return [r.offset for r in first[TP]] + [one.offset] + [r.offset for r in rest[TP]]

    assert asyncio.run(main()) == [0, 1, 2, 3, 4, 5, 6]


def test_a_call_with_records_ready_gives_the_loop_a_turn() -> None:
    async def main() -> tuple[list[str], list[int]]:
        events: list[str] = []
        async with AsyncKafkaConsumer(config=_config()) as consumer:
            consumer.assign([TP])
            consumer.seek(TP, 0)
            _fill(consumer, _records(0, 4))
            await consumer.getmany(max_records=1)  # the loop had its turn just now
            other = asyncio.get_running_loop().create_task(_mark(events))
            got = await consumer.getmany(max_records=1)
            events.append("returned")
            consumer._turn_at = -1e9  # no turn for long: the next call yields first
            more = await consumer.getmany(max_records=1)
            events.append("returned again")
            await other
            return events, [r.offset for r in got[TP] + more[TP]]

    events, offsets = asyncio.run(main())
    assert offsets == [1, 2]
    assert events == ["returned", "other task ran", "returned again"]


async def _mark(events: list[str]) -> None:
    events.append("other task ran")


def test_failing_deserializer_keeps_the_failing_record() -> None:
    calls = {"n": 0}

    def flaky(data: bytes | None) -> bytes | None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise ValueError("bad value")
        return data

    async def main() -> tuple[list[int], list[int]]:
        async with AsyncKafkaConsumer(config=_config(), value_deserializer=flaky) as consumer:
            consumer.assign([TP])
            consumer.seek(TP, 0)
            _fill(consumer, _records(0, 3))
            first = await consumer.getmany(max_records=3)
            again = await consumer.getmany(max_records=3)
            return [r.offset for r in first[TP]], [r.offset for r in again[TP]]

    assert asyncio.run(main()) == ([0], [1, 2])
