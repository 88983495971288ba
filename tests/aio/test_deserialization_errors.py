"""A value deserializer that raises in AsyncKafkaConsumer, against the real broker (Java's
RecordDeserializationException, KIP-334): 10 records, record 5 not JSON, a JSON value
deserializer. ``getmany()`` returns records 0-4, then ``getmany()`` and ``getone()`` raise a
typed error naming partition 0 and offset 5, again on every call; ``commit()`` never commits
past 5 before the application seeks past the record; after ``seek(tp, 6)`` records 6-9 come."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from kafka_actors import TopicPartition
from kafka_actors.aio import AsyncKafkaConsumer
from kafka_actors.errors import DeserializationOrigin, RecordDeserializationError
from tests.consumer.helpers import base_config, unique
from tests.consumer.test_deserialization_errors import BAD, json_value, produce_with_bad_record

pytestmark = pytest.mark.broker


@pytest.mark.parametrize("call", ["getmany", "getone"])
def test_records_before_then_raises_until_seek_past(kafka_broker: Any, call: str) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("aio-deser-fail")
    kafka_broker.create_topic(topic, partitions=1)
    produce_with_bad_record(bootstrap, topic)
    tp = TopicPartition(topic, 0)
    config = base_config(bootstrap, **{"group.id": unique("g"), "enable.auto.commit": False})

    async def get(consumer: AsyncKafkaConsumer) -> list[Any]:
        if call == "getone":
            return [await asyncio.wait_for(consumer.getone(), 60)]
        return (await consumer.getmany(timeout_ms=500)).get(tp, [])

    async def main() -> None:
        async with AsyncKafkaConsumer(config=config, value_deserializer=json_value) as consumer:
            consumer.assign([tp])
            received: list[Any] = []
            error: RecordDeserializationError | None = None
            deadline = time.monotonic() + 60
            while error is None:
                assert time.monotonic() < deadline, f"no error; received {received}"
                try:
                    received.extend(await get(consumer))
                except RecordDeserializationError as exc:
                    error = exc
                committed = await consumer.commit()
                assert tp not in committed or committed[tp].offset <= BAD, committed
            assert [r.offset for r in received] == [0, 1, 2, 3, 4]
            assert [r.value for r in received] == [{"n": i} for i in range(5)]
            assert (error.topic, error.partition, error.offset) == (topic, 0, BAD)
            assert error.origin is DeserializationOrigin.VALUE
            assert isinstance(error.__cause__, json.JSONDecodeError)
            assert await consumer.position(tp) == BAD
            for again in (consumer.getone, consumer.getmany, consumer.getone):
                with pytest.raises(RecordDeserializationError) as caught:
                    await asyncio.wait_for(again(), 60)
                assert (caught.value.partition, caught.value.offset) == (0, BAD)
                assert (await consumer.commit())[tp].offset == BAD
            got = (await consumer.committed(tp))[tp]
            assert got is not None and got.offset == BAD
            consumer.seek(tp, BAD + 1)
            rest: list[Any] = []
            while len(rest) < 4:
                assert time.monotonic() < deadline + 60, f"only {rest}"
                rest.extend(await get(consumer))
            assert [r.offset for r in rest] == [6, 7, 8, 9]
            assert [r.value for r in rest] == [{"n": i} for i in range(6, 10)]
            assert (await consumer.commit())[tp].offset == 10

    asyncio.run(main())
