"""Key and value deserializers, with or without the record's context.

Owns: how a deserializer given to a consumer (``key_deserializer=`` / ``value_deserializer=``,
or ``key.deserializer`` / ``value.deserializer`` in the config) is called, and
:func:`deserialize_records`, the one loop every front end (``KafkaConsumer``,
``AsyncKafkaConsumer``, the bridges built on them) deserializes records with.

A deserializer is one of:

* a plain callable ``(bytes) -> T`` (``bytes.decode``, ``json.loads`` ...): called with the
  raw key or value only, exactly as before this module existed. It is called with None for a
  null key or value (a tombstone) too: its type says ``bytes`` so that ``bytes.decode`` and
  ``json.loads`` type-check, as they read most topics' keys and values; where nulls occur,
  give a function that takes ``bytes | None``;
* an object with a ``deserialize(topic, headers, data)`` method, as Java's
  ``org.apache.kafka.common.serialization.Deserializer`` (its three-argument form);
* a :class:`ContextDeserializer` (subclass it, or wrap a function with :func:`with_context`):
  called ``d(data, ctx)`` with a :class:`DeserializationContext` (topic, partition, headers,
  key or value);
* a confluent-kafka ``confluent_kafka.serialization.Deserializer`` instance, such as the
  Schema Registry's ``AvroDeserializer``, ``JSONDeserializer`` and ``ProtobufDeserializer``:
  called ``d(data, SerializationContext(topic, MessageField.KEY or VALUE, headers))``, as
  confluent-kafka's ``DeserializingConsumer`` calls it. Recognized by its class (only when
  ``confluent_kafka.serialization`` is already imported, which it is once such an object
  exists), never by guessing from a signature: ``bytes.decode`` accepts two positional
  arguments too.

Typing: :data:`Deserializer` is generic in what it returns (``Deserializer[str]`` for
``bytes.decode``), and the consumers take their key and value types from it
(``KafkaConsumer(config, value_deserializer=bytes.decode)`` is a ``KafkaConsumer[bytes | None,
str]`` whose records are ``ConsumerRecord[bytes | None, str]``). ``K`` and ``V`` are
the consumers' type variables.

The kind is decided once, when the consumer is built (:func:`as_deserializer`); a batch of
records whose deserializers are all plain (or absent) goes through the same loop as before,
so plain callables cost nothing more per record.

May touch: the records (:class:`~kafka_actors.protocol.records.decode.ConsumerRecord`) and the
errors module; nothing else.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any, Final, Generic, Protocol, TypeAlias, runtime_checkable

from typing_extensions import TypeVar

from kafka_actors.errors import DeserializationOrigin, RecordDeserializationError
from kafka_actors.protocol.records.decode import ConsumerRecord, Headers

__all__ = [
    "ContextDeserializer",
    "DeserializationContext",
    "Deserializer",
    "SupportsDeserialize",
    "as_deserializer",
    "deserialize_records",
    "with_context",
]

#: confluent-kafka's ``MessageField`` values (plain strings there too).
KEY_FIELD: Final = "key"
VALUE_FIELD: Final = "value"

#: What a deserializer returns (Any where not known: a bare ``ContextDeserializer``).
T_co = TypeVar("T_co", covariant=True, default=Any)
T = TypeVar("T")
#: A consumer's key and value types: what its deserializers return, ``bytes | None`` (the
#: record as decoded) with no deserializer. The front ends' type variables (not in
#: ``__all__``: users write ``KafkaConsumer[str, Order]``, never these).
K = TypeVar("K", default=bytes | None)
V = TypeVar("V", default=bytes | None)


class DeserializationContext:
    """What a context-aware deserializer learns about the bytes it is given.

    ``field`` is ``"key"`` or ``"value"`` (confluent-kafka's ``MessageField`` values), so a
    function written for confluent-kafka's ``SerializationContext`` (``ctx.topic``,
    ``ctx.field``, ``ctx.headers``) reads this one the same way."""

    __slots__ = ("headers", "is_key", "partition", "topic")

    def __init__(self, topic: str, partition: int, headers: Headers, is_key: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.headers = headers
        self.is_key = is_key

    @property
    def field(self) -> str:
        return KEY_FIELD if self.is_key else VALUE_FIELD

    def __repr__(self) -> str:
        return (
            f"DeserializationContext(topic={self.topic!r}, partition={self.partition}, "
            f"field={self.field!r}, headers={self.headers!r})"
        )


class ContextDeserializer(Generic[T_co]):
    """Base class of deserializers called with the record's context: ``d(data, ctx)``.

    Subclass it and define ``__call__``, or wrap a function with :func:`with_context`.
    Generic in what it returns: ``class Orders(ContextDeserializer[Order])``."""

    __slots__ = ()

    def __call__(self, data: bytes | None, ctx: DeserializationContext) -> T_co:
        raise NotImplementedError


class _FunctionWithContext(ContextDeserializer[T_co]):
    __slots__ = ("function",)

    def __init__(self, function: Callable[[bytes | None, DeserializationContext], T_co]) -> None:
        self.function = function

    def __call__(self, data: bytes | None, ctx: DeserializationContext) -> T_co:
        return self.function(data, ctx)

    def __repr__(self) -> str:
        return f"with_context({self.function!r})"


def with_context(
    function: Callable[[bytes | None, DeserializationContext], T],
) -> ContextDeserializer[T]:
    """``function(data, ctx)`` as a deserializer that receives the record's
    :class:`DeserializationContext`."""
    return _FunctionWithContext(function)


@runtime_checkable
class SupportsDeserialize(Protocol[T_co]):
    """Java's ``Deserializer``: ``deserialize(topic, headers, data)``."""

    def deserialize(self, topic: str, headers: Headers, data: bytes | None) -> T_co: ...


#: What a consumer accepts as a key or value deserializer (see the module docstring), generic
#: in what it returns: ``Deserializer[str]``. A confluent-kafka ``Deserializer`` (the Schema
#: Registry's) is a callable ``(data, ctx=None)``, so it is a plain callable to a type checker.
Deserializer: TypeAlias = (
    Callable[[bytes], T_co] | ContextDeserializer[T_co] | SupportsDeserialize[T_co]
)

_RecordField = Callable[[ConsumerRecord], Any]


class _WithRecord:
    """A context-aware deserializer, normalized: ``field(record, is_key)`` deserializes the
    record's key or value. Only :func:`as_deserializer` builds these."""

    __slots__ = ("call", "original")

    def __init__(self, original: object, call: Callable[[ConsumerRecord, bool], Any]) -> None:
        self.original = original
        self.call = call

    def field(self, is_key: bool) -> _RecordField:
        call = self.call
        return lambda record: call(record, is_key)

    def __repr__(self) -> str:
        return repr(self.original)


def _confluent_deserializer_class() -> type | None:
    module = sys.modules.get("confluent_kafka.serialization")
    cls = getattr(module, "Deserializer", None) if module is not None else None
    return cls if isinstance(cls, type) else None


def _confluent_call(d: Any) -> Callable[[ConsumerRecord, bool], Any]:
    from confluent_kafka.serialization import MessageField, SerializationContext

    key_field, value_field = MessageField.KEY, MessageField.VALUE

    def call(record: ConsumerRecord, is_key: bool) -> Any:
        headers = record.headers
        ctx = SerializationContext(
            record.topic, key_field if is_key else value_field, list(headers) if headers else None
        )
        return d(record.key if is_key else record.value, ctx)

    return call


def as_deserializer(d: object) -> Any:
    """``d`` as the consumer stores it: a plain callable (or None) unchanged, any other kind
    (see the module docstring) normalized once. A ``TypeError`` when it is none of them."""
    if d is None or isinstance(d, _WithRecord):
        return d
    confluent = _confluent_deserializer_class()
    if confluent is not None and isinstance(d, confluent):
        return _WithRecord(d, _confluent_call(d))
    if isinstance(d, ContextDeserializer):
        cd = d

        def call_ctx(record: ConsumerRecord, is_key: bool) -> Any:
            ctx = DeserializationContext(record.topic, record.partition, record.headers, is_key)
            return cd(record.key if is_key else record.value, ctx)

        return _WithRecord(d, call_ctx)
    method = getattr(d, "deserialize", None)
    if callable(method) and not isinstance(d, type):
        java = method

        def call_java(record: ConsumerRecord, is_key: bool) -> Any:
            return java(record.topic, record.headers, record.key if is_key else record.value)

        return _WithRecord(d, call_java)
    if callable(d):
        return d
    raise TypeError(
        f"a deserializer must be a callable (bytes | None) -> Any, an object with "
        f"deserialize(topic, headers, data), a ContextDeserializer or a confluent-kafka "
        f"Deserializer; got {d!r}"
    )


def _field(d: Any, is_key: bool) -> _RecordField:
    if d is None:
        return (lambda r: r.key) if is_key else (lambda r: r.value)
    if isinstance(d, _WithRecord):
        return d.field(is_key)
    return (lambda r: d(r.key)) if is_key else (lambda r: d(r.value))


def deserialize_records(
    records: Iterable[ConsumerRecord],
    key_deserializer: Any,
    value_deserializer: Any,
) -> tuple[list[ConsumerRecord[Any, Any]], RecordDeserializationError | None]:
    """``records`` with keys and values deserialized, up to the first record a deserializer
    raises for (each deserializer is called once per record, in order, key first): (the
    records before it, the error naming it, its raw key and value, with the deserializer's
    exception as ``__cause__``); (all of them, None) when none raised.

    The deserializers are as :func:`as_deserializer` returns them."""
    kd, vd = key_deserializer, value_deserializer
    out: list[ConsumerRecord[Any, Any]] = []
    append = out.append
    origin = DeserializationOrigin.KEY
    record: ConsumerRecord | None = None
    try:
        if type(kd) is not _WithRecord and type(vd) is not _WithRecord:
            for record in records:
                origin = DeserializationOrigin.KEY
                key = record.key if kd is None else kd(record.key)
                origin = DeserializationOrigin.VALUE
                value = record.value if vd is None else vd(record.value)
                append(record._replace(key=key, value=value))
        else:
            kf, vf = _field(kd, True), _field(vd, False)
            for record in records:
                origin = DeserializationOrigin.KEY
                key = kf(record)
                origin = DeserializationOrigin.VALUE
                value = vf(record)
                append(record._replace(key=key, value=value))
    except Exception as exc:
        assert record is not None
        error = RecordDeserializationError(
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            origin=origin,
            key=record.key,
            value=record.value,
        )
        error.__cause__ = exc
        return out, error
    return out, None
