"""A key / value deserializer that raises in ``AsyncKafkaConsumer`` (Java's
RecordDeserializationException, KIP-334), without a broker: records put in the consumer's
buffer by hand (as a collect would). The records before the failing one are returned; the
next call (getmany or getone) raises a typed error naming the partition and offset, every call
after raises again while the record stays first, the offsets to commit and the position stay
at it; after a seek past it the records after it come; records taken from other partitions in
the same call are returned, not lost."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from kafka_actors import TopicPartition
from kafka_actors.aio import AsyncKafkaConsumer, _Buffered
from kafka_actors.errors import DeserializationOrigin, RecordDeserializationError
from kafka_actors.protocol.records.decode import ConsumerRecord, TimestampType

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def _records(partition: int, count: int, bad: int | None = None) -> list[ConsumerRecord]:
    return [
        ConsumerRecord(
            "t",
            partition,
            o,
            0,
            TimestampType.CREATE_TIME,
            b"k",
            b"{not json" if o == bad else json.dumps({"n": o}).encode(),
            (),
            None,
        )
        for o in range(count)
    ]


def _json(data: bytes | None) -> Any:
    return None if data is None else json.loads(data)


def _config(**extra: Any) -> dict[str, Any]:
    # Nothing listens there: the actors retry connecting while the test uses the buffer.
    return {"bootstrap.servers": "127.0.0.1:1", "reconnect.backoff.ms": 1000, **extra}


def _fill(consumer: AsyncKafkaConsumer, tp: TopicPartition, records: list[ConsumerRecord]) -> None:
    consumer._buffer.setdefault(tp, _Buffered()).add(records)


def test_getmany_returns_the_records_before_then_raises_until_seek_past() -> None:
    async def main() -> None:
        async with AsyncKafkaConsumer(config=_config(), value_deserializer=_json) as consumer:
            consumer.assign([TP0])
            consumer.seek(TP0, 0)
            _fill(consumer, TP0, _records(0, 10, bad=5))
            first = await consumer.getmany(max_records=100)
            assert [r.offset for r in first[TP0]] == [0, 1, 2, 3, 4]
            for _ in range(3):
                with pytest.raises(RecordDeserializationError) as caught:
                    await consumer.getmany(max_records=100)
                error = caught.value
                assert (error.topic, error.partition, error.offset) == ("t", 0, 5)
                assert error.origin is DeserializationOrigin.VALUE
                assert error.value == b"{not json"
                assert isinstance(error.__cause__, json.JSONDecodeError)
                assert await consumer.position(TP0) == 5
                assert consumer._records.consumed_offsets()[TP0].offset == 5
            with pytest.raises(RecordDeserializationError):
                await consumer.getone()
            consumer.seek(TP0, 6)
            _fill(consumer, TP0, _records(0, 10)[6:])  # what the fetch from 6 brings
            rest = await consumer.getmany(max_records=100)
            assert [r.offset for r in rest[TP0]] == [6, 7, 8, 9]

    asyncio.run(main())


def test_getone_raises_at_the_failing_record_and_again() -> None:
    async def main() -> None:
        async with AsyncKafkaConsumer(config=_config(), value_deserializer=_json) as consumer:
            consumer.assign([TP0])
            consumer.seek(TP0, 0)
            _fill(consumer, TP0, _records(0, 4, bad=2))
            assert [(await consumer.getone()).offset for _ in range(2)] == [0, 1]
            for _ in range(2):
                with pytest.raises(RecordDeserializationError) as caught:
                    await consumer.getone()
                assert caught.value.offset == 2
            with pytest.raises(RecordDeserializationError):
                await consumer.getmany()
            assert consumer._records.consumed_offsets()[TP0].offset == 2

    asyncio.run(main())


def test_records_of_other_partitions_are_returned_and_do_not_hide_the_error() -> None:
    async def main() -> None:
        async with AsyncKafkaConsumer(config=_config(), value_deserializer=_json) as consumer:
            consumer.assign([TP0, TP1])
            consumer.seek(TP0, 0)
            consumer.seek(TP1, 0)
            _fill(consumer, TP1, _records(1, 20))
            _fill(consumer, TP0, _records(0, 3, bad=0))
            first = await consumer.getmany(max_records=5)
            # TP1's records came before TP0's failing one in the same call: returned.
            assert [r.offset for r in first[TP1]] == [0, 1, 2, 3, 4] and TP0 not in first
            assert consumer._records.consumed_offsets()[TP1].offset == 5
            # TP1 still has records ready: the error comes first all the same.
            with pytest.raises(RecordDeserializationError) as caught:
                await consumer.getmany(max_records=5)
            assert (caught.value.partition, caught.value.offset) == (0, 0)
            with pytest.raises(RecordDeserializationError):
                await consumer.getone()
            more = await consumer.getmany(TP1, max_records=5)  # other partitions still served
            assert [r.offset for r in more[TP1]] == [5, 6, 7, 8, 9]
            assert consumer._records.consumed_offsets()[TP0].offset == 0

    asyncio.run(main())


def test_a_deserializer_that_recovers_returns_the_record() -> None:
    calls = {"n": 0}

    def flaky(data: bytes | None) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise ValueError("registry down")
        return data

    async def main() -> list[list[int]]:
        async with AsyncKafkaConsumer(config=_config(), key_deserializer=flaky) as consumer:
            consumer.assign([TP0])
            consumer.seek(TP0, 0)
            _fill(consumer, TP0, _records(0, 4))
            got = [[r.offset for r in (await consumer.getmany(max_records=10))[TP0]]]
            got.append([r.offset for r in (await consumer.getmany(max_records=10))[TP0]])
            return got

    assert asyncio.run(main()) == [[0, 1], [2, 3]]


class _Interrupt(BaseException):
    """Not a deserializer error (as KeyboardInterrupt): raised as is, nothing lost."""


def test_an_interrupted_deserializer_loses_nothing() -> None:
    calls = {"n": 0}

    def interrupted_once(data: bytes | None) -> Any:
        calls["n"] += 1
        if calls["n"] in (2, 4):
            raise _Interrupt()
        return data

    async def main() -> list[int]:
        async with AsyncKafkaConsumer(config=_config(), value_deserializer=interrupted_once) as c:
            c.assign([TP0])
            c.seek(TP0, 0)
            _fill(c, TP0, _records(0, 4))
            with pytest.raises(_Interrupt):
                await c.getmany(max_records=10)  # at record 1: 0 and 1 back
            first = await c.getone()
            with pytest.raises(_Interrupt):
                await c.getone()  # at record 1 again: back
            rest = await c.getmany(max_records=10)
            return [first.offset] + [r.offset for r in rest[TP0]]

    assert asyncio.run(main()) == [0, 1, 2, 3]
