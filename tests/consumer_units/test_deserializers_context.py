"""Deserializers that receive the record's context (topic, partition, headers, key or
value): Java-style ``deserialize(topic, headers, data)`` objects, ``ContextDeserializer`` /
``with_context`` functions and confluent-kafka ``Deserializer`` instances, next to plain
``bytes -> value`` callables, through the one loop both consumers use. A context-aware
deserializer that raises gives the same RecordDeserializationError as a plain one."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.serialization import (
    MessageField,
    SerializationContext,
    StringDeserializer,
)

from kafka_actors import KafkaConsumer
from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import ConfigError, DeserializationOrigin, RecordDeserializationError
from kafka_actors.protocol.records.decode import ConsumerRecord, TimestampType
from kafka_actors.serialization import (
    ContextDeserializer,
    DeserializationContext,
    as_deserializer,
    deserialize_records,
    with_context,
)

HEADERS = (("trace", b"t-1"), ("kind", None))


def _records(*values: bytes | None) -> list[ConsumerRecord]:
    return [
        ConsumerRecord("orders", 3, o, 0, TimestampType.CREATE_TIME, b"k%d" % o, v, HEADERS, 1)
        for o, v in enumerate(values)
    ]


class JavaStyle:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, bytes | None]] = []

    def deserialize(self, topic: str, headers: Any, data: bytes | None) -> Any:
        self.calls.append((topic, headers, data))
        return None if data is None else data.decode().upper()


def test_plain_callables_are_kept_as_they_are() -> None:
    assert as_deserializer(bytes.decode) is bytes.decode  # two positional args, still plain
    out, error = deserialize_records(_records(b"a", b"b"), bytes.decode, bytes.decode)
    assert error is None
    assert [(r.key, r.value) for r in out] == [("k0", "a"), ("k1", "b")]


def test_java_style_deserializer_gets_topic_headers_and_data() -> None:
    kd, vd = JavaStyle(), JavaStyle()
    out, error = deserialize_records(_records(b"a", None), as_deserializer(kd), as_deserializer(vd))
    assert error is None
    assert [(r.key, r.value) for r in out] == [("K0", "A"), ("K1", None)]
    assert kd.calls == [("orders", HEADERS, b"k0"), ("orders", HEADERS, b"k1")]
    assert vd.calls == [("orders", HEADERS, b"a"), ("orders", HEADERS, None)]


def test_context_deserializer_gets_partition_and_field() -> None:
    seen: list[DeserializationContext] = []

    def value(data: bytes | None, ctx: DeserializationContext) -> Any:
        seen.append(ctx)
        return (ctx.topic, ctx.partition, ctx.field, ctx.is_key, data)

    class Key(ContextDeserializer):
        def __call__(self, data: bytes | None, ctx: DeserializationContext) -> Any:
            assert ctx.is_key and ctx.field == "key" and ctx.headers == HEADERS
            return data

    out, error = deserialize_records(
        _records(b"x"), as_deserializer(Key()), as_deserializer(with_context(value))
    )
    assert error is None
    assert out[0].key == b"k0"
    assert out[0].value == ("orders", 3, "value", False, b"x")
    assert seen[0].headers == HEADERS


def test_confluent_deserializer_gets_their_serialization_context() -> None:
    seen: list[SerializationContext | None] = []

    class Recording(StringDeserializer):  # type: ignore[misc]
        def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> Any:
            seen.append(ctx)
            return super().__call__(value, ctx)

    out, error = deserialize_records(
        _records(b"v"), as_deserializer(Recording()), as_deserializer(Recording())
    )
    assert error is None
    assert (out[0].key, out[0].value) == ("k0", "v")
    key_ctx, value_ctx = seen
    assert isinstance(key_ctx, SerializationContext) and isinstance(value_ctx, SerializationContext)
    assert (key_ctx.topic, key_ctx.field) == ("orders", MessageField.KEY)
    assert (value_ctx.topic, value_ctx.field) == ("orders", MessageField.VALUE)
    assert value_ctx.headers == list(HEADERS)


def test_context_deserializer_error_names_the_record_as_a_plain_one_does() -> None:
    def value(data: bytes | None, ctx: DeserializationContext) -> Any:
        if data == b"bad":
            raise ValueError("cannot read")
        return data

    out, error = deserialize_records(
        _records(b"ok", b"bad", b"after"), None, as_deserializer(with_context(value))
    )
    assert [r.value for r in out] == [b"ok"]
    assert isinstance(error, RecordDeserializationError)
    assert (error.topic, error.partition, error.offset) == ("orders", 3, 1)
    assert error.origin is DeserializationOrigin.VALUE
    assert error.value == b"bad" and error.key == b"k1"
    assert isinstance(error.__cause__, ValueError)


def test_config_and_constructor_accept_every_kind_and_reject_others() -> None:
    config = ConsumerConfig.from_dict(
        {"bootstrap.servers": "h:1", "key.deserializer": JavaStyle(), "value.deserializer": str}
    )
    assert config.value_deserializer is str
    with pytest.raises(ConfigError) as info:
        ConsumerConfig.from_dict({"bootstrap.servers": "h:1", "value.deserializer": "a.B"})
    assert info.value.key == "value.deserializer"
    consumer = KafkaConsumer(
        {"bootstrap.servers": "127.0.0.1:1"}, value_deserializer=StringDeserializer()
    )
    try:
        out, error = deserialize_records(
            _records(b"v"),
            consumer.core.handout.key_deserializer,
            consumer.core.handout.value_deserializer,
        )
        assert error is None and out[0].value == "v" and out[0].key == b"k0"
    finally:
        consumer.close(timeout=5)


def test_a_context_deserializer_given_in_the_config_is_called_with_context() -> None:
    java = JavaStyle()
    config = ConsumerConfig.from_dict(
        {"bootstrap.servers": "127.0.0.1:1", "value.deserializer": java}
    )
    assert config.value_deserializer is java  # the config keeps the object as given
    consumer = KafkaConsumer(config)
    try:
        out, error = deserialize_records(
            _records(b"v"),
            consumer.core.handout.key_deserializer,
            consumer.core.handout.value_deserializer,
        )
    finally:
        consumer.close(timeout=5)
    assert error is None and out[0].value == "V"
    assert java.calls == [("orders", HEADERS, b"v")]
