"""A value deserializer that raises, against the real broker (Java's
RecordDeserializationException, KIP-334): 10 records, record 5 not JSON, a JSON value
deserializer. ``poll()`` returns records 0-4, then raises a typed error naming partition 0 and
offset 5, and raises again on every poll after; ``commit_sync()`` never commits past 5 before
the application seeks past the record; after ``seek(tp, 6)`` records 6-9 come."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from kafka_actors import KafkaConsumer, TopicPartition
from kafka_actors.errors import DeserializationOrigin, RecordDeserializationError
from tests.consumer.helpers import base_config, poll_until, unique

pytestmark = pytest.mark.broker

BAD = 5


def produce_with_bad_record(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    for i in range(10):
        value = b"{not json" if i == BAD else json.dumps({"n": i}).encode()
        producer.produce(topic, key=b"k%d" % i, value=value, partition=0)
    assert producer.flush(30) == 0


def json_value(data: bytes | None) -> Any:
    return None if data is None else json.loads(data)


def test_poll_returns_records_before_then_raises_until_seek_past(kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("deser-fail")
    kafka_broker.create_topic(topic, partitions=1)
    produce_with_bad_record(bootstrap, topic)
    tp = TopicPartition(topic, 0)
    config = base_config(bootstrap, **{"group.id": unique("g"), "enable.auto.commit": False})
    with KafkaConsumer(config, value_deserializer=json_value) as consumer:
        consumer.assign([tp])
        received: list[Any] = []
        error: RecordDeserializationError | None = None
        deadline = time.monotonic() + 60
        while error is None:
            assert time.monotonic() < deadline, f"no error; received {received}"
            try:
                received.extend(consumer.poll(0.5))
            except RecordDeserializationError as exc:
                error = exc
            committed = consumer.commit_sync()
            assert tp not in committed or committed[tp].offset <= BAD, committed
        assert [r.offset for r in received] == [0, 1, 2, 3, 4]
        assert [r.value for r in received] == [{"n": i} for i in range(5)]
        assert (error.topic, error.partition, error.offset) == (topic, 0, BAD)
        assert error.origin is DeserializationOrigin.VALUE
        assert error.value == b"{not json" and error.key == b"k5"
        assert isinstance(error.__cause__, json.JSONDecodeError)
        assert consumer.position(tp) == BAD
        for _ in range(3):  # again, while the position stays at the record
            with pytest.raises(RecordDeserializationError) as caught:
                consumer.poll(0.5)
            assert (caught.value.partition, caught.value.offset) == (0, BAD)
            assert consumer.commit_sync()[tp].offset == BAD
        got = consumer.committed(tp)[tp]
        assert got is not None and got.offset == BAD
        consumer.seek(tp, BAD + 1)
        rest: list[Any] = poll_until(consumer, 4)
        assert [r.offset for r in rest] == [6, 7, 8, 9]
        assert [r.value for r in rest] == [{"n": i} for i in range(6, 10)]
        assert consumer.commit_sync()[tp].offset == 10
