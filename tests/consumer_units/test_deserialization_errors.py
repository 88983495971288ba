"""A key / value deserializer that raises in ``KafkaConsumer.poll`` (Java's
RecordDeserializationException, KIP-334), without a broker: the fetch actor's collector is
replaced by one serving records from a list, moving the partition's position as the real
one does. The records before the failing one are returned; the next poll raises a typed
error naming the partition and offset (the deserializer's exception chained), every poll
after raises again while the position stays at the record, commits of consumed offsets do
not pass it; after a seek past it the records after it come; nothing is skipped."""

from __future__ import annotations

import json
import pickle
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from kafka_actors import KafkaConsumer, TopicPartition
from kafka_actors.errors import DeserializationOrigin, RecordDeserializationError
from kafka_actors.protocol.fetch.manager import FetchResult
from kafka_actors.protocol.records.decode import ConsumerRecord, TimestampType
from kafka_actors.protocol.subscription import FetchPosition

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def _records(partition: int, values: Sequence[bytes], key: bytes = b"1") -> list[ConsumerRecord]:
    return [
        ConsumerRecord("t", partition, o, 0, TimestampType.CREATE_TIME, key, v, (), 3)
        for o, v in enumerate(values)
    ]


def _json(data: bytes | None) -> Any:
    return None if data is None else json.loads(data)


def _json_values(count: int, bad: int | None) -> list[bytes]:
    return [b"{not json" if i == bad else json.dumps({"n": i}).encode() for i in range(count)]


class _Log:
    """Stands for the fetch actor's collector: per partition, records by offset; a collect
    takes them from each fetchable partition's position on and moves the position."""

    def __init__(self, consumer: KafkaConsumer, logs: dict[TopicPartition, list[ConsumerRecord]]):
        self.subs = consumer._ctx.subscriptions
        self.logs = logs

    def collect(
        self, max_records: int, *, columnar: bool = False, wait: bool = True
    ) -> FetchResult:
        records: dict[TopicPartition, tuple[ConsumerRecord, ...]] = {}
        positions: dict[TopicPartition, FetchPosition] = {}
        for tp, log in self.logs.items():
            position = self.subs.valid_position(tp)
            if position is None or not self.subs.is_fetchable(tp):
                continue
            taken = tuple(log[position.offset : position.offset + max_records])
            if not taken:
                continue
            new = FetchPosition(taken[-1].offset + 1, taken[-1].leader_epoch)
            if self.subs.advance_position(tp, position.offset, new):
                records[tp] = taken
                positions[tp] = new
                max_records -= len(taken)
        return FetchResult(records=records, positions=positions)


def _consumer(
    logs: dict[TopicPartition, list[ConsumerRecord]],
    value_deserializer: Callable[[bytes | None], Any] | None = None,
    key_deserializer: Callable[[bytes | None], Any] | None = None,
    config: dict[str, Any] | None = None,
) -> KafkaConsumer:
    # Nothing listens there: the actors retry connecting while the test polls.
    consumer = KafkaConsumer(
        {"bootstrap.servers": "127.0.0.1:1", "reconnect.backoff.ms": 1000, **(config or {})},
        key_deserializer=key_deserializer,
        value_deserializer=value_deserializer,
    )
    consumer.assign(list(logs))
    for tp in logs:
        consumer.seek(tp, 0)
    consumer._core.handout.collector = _Log(consumer, logs)  # type: ignore[assignment]
    return consumer


def _consumed(consumer: KafkaConsumer, tp: TopicPartition) -> int:
    return consumer._ctx.subscriptions.all_consumed()[tp].offset


def test_records_before_the_failing_one_then_raises_until_seek_past_it() -> None:
    consumer = _consumer({TP0: _records(0, _json_values(10, bad=5))}, value_deserializer=_json)
    with consumer:
        first = consumer.poll(1.0)
        assert [r.offset for r in first] == [0, 1, 2, 3, 4]
        values: list[Any] = [r.value for r in first]
        assert values == [{"n": i} for i in range(5)]
        assert consumer.position(TP0) == 5
        assert _consumed(consumer, TP0) == 5
        for _ in range(3):  # the same record, every poll
            with pytest.raises(RecordDeserializationError) as caught:
                consumer.poll(0.2)
            error = caught.value
            assert (error.topic, error.partition, error.offset) == ("t", 0, 5)
            assert error.origin is DeserializationOrigin.VALUE
            assert error.value == b"{not json" and error.key == b"1"
            assert isinstance(error.__cause__, json.JSONDecodeError)
            assert not error.retriable
            assert consumer.position(TP0) == 5
            assert _consumed(consumer, TP0) == 5
        consumer.seek(TP0, 5 + 1)
        rest = consumer.poll(1.0)
        assert [r.offset for r in rest] == [6, 7, 8, 9]
        assert _consumed(consumer, TP0) == 10


def test_failing_first_record_raises_at_once() -> None:
    consumer = _consumer({TP0: _records(0, _json_values(4, bad=0))}, value_deserializer=_json)
    with consumer:
        with pytest.raises(RecordDeserializationError) as caught:
            consumer.poll(1.0)
        assert caught.value.offset == 0
        assert consumer.position(TP0) == 0 and _consumed(consumer, TP0) == 0
        with pytest.raises(RecordDeserializationError):
            consumer.poll(0.2)


def test_key_deserializer_failure_names_the_key() -> None:
    def key(data: bytes | None) -> int:
        return int(data or b"")

    records = _records(0, [b"a", b"b", b"c"])
    records[2] = records[2]._replace(key=b"x")
    consumer = _consumer({TP0: records}, key_deserializer=key)
    with consumer:
        keys: list[Any] = [r.key for r in consumer.poll(1.0)]
        assert keys == [1, 1]
        with pytest.raises(RecordDeserializationError) as caught:
            consumer.poll(0.2)
        error = caught.value
        assert error.origin is DeserializationOrigin.KEY and error.offset == 2
        assert error.key == b"x" and isinstance(error.__cause__, ValueError)
        again = pickle.loads(pickle.dumps(error))
        assert (again.origin, again.offset, again.key) == (error.origin, 2, b"x")


def test_other_partitions_records_do_not_hide_the_error() -> None:
    logs = {
        TP0: _records(0, _json_values(3, bad=0)),
        TP1: _records(1, _json_values(50, bad=None)),
    }
    consumer = _consumer(logs, value_deserializer=_json, config={"max.poll.records": 5})
    with consumer:
        first = consumer.poll(1.0)
        got = [r.offset for r in first.records(TP1)]
        assert got and got == list(range(len(got)))  # TP0's 3 records used 3 of 5
        assert list(first.records(TP0)) == []
        # TP1 has records ready on every poll: the error still comes on the next one.
        with pytest.raises(RecordDeserializationError) as caught:
            consumer.poll(0.2)
        assert (caught.value.partition, caught.value.offset) == (0, 0)
        assert _consumed(consumer, TP0) == 0 and _consumed(consumer, TP1) == len(got)
        consumer.seek(TP0, 1)
        offsets: dict[int, list[int]] = {0: [], 1: []}
        deadline = time.monotonic() + 30
        while len(offsets[0]) < 2 or len(offsets[1]) < 50 - len(got):
            assert time.monotonic() < deadline
            for r in consumer.poll(0.2):
                offsets[r.partition].append(r.offset)
        assert offsets == {0: [1, 2], 1: list(range(len(got), 50))}


def test_a_deserializer_that_recovers_returns_the_record() -> None:
    failures = {"left": 2}

    def flaky(data: bytes | None) -> Any:
        if data == b"3" and failures["left"]:
            failures["left"] -= 1
            raise ValueError("registry down")
        return data

    values = [b"0", b"1", b"2", b"3", b"4"]
    consumer = _consumer({TP0: _records(0, values)}, value_deserializer=flaky)
    with consumer:
        assert [r.offset for r in consumer.poll(1.0)] == [0, 1, 2]
        with pytest.raises(RecordDeserializationError):
            consumer.poll(0.2)
        assert [r.offset for r in consumer.poll(1.0)] == [3, 4]  # tried again: no skip


class _Interrupt(BaseException):
    """Not a deserializer error (as KeyboardInterrupt): raised as is, nothing lost."""


def test_an_interrupted_deserializer_loses_nothing() -> None:
    calls = {"n": 0}

    def interrupted_once(data: bytes | None) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise _Interrupt()
        return data

    consumer = _consumer(
        {TP0: _records(0, [b"0", b"1", b"2"])}, value_deserializer=interrupted_once
    )
    with consumer:
        with pytest.raises(_Interrupt):
            consumer.poll(1.0)
        assert consumer.position(TP0) == 0 and _consumed(consumer, TP0) == 0
        assert [r.offset for r in consumer.poll(1.0)] == [0, 1, 2]
