"""``consume -s/-r``: keys and values decoded through a Schema Registry, as kcat's ``-s avro``.

Owns: which confluent-kafka deserializer a ``-s`` name stands for, and the rendering of what
it returns as JSON text (UTF-8 bytes), so that every output format prints decoded records.
May touch: confluent-kafka's Schema Registry client and deserializers (the ``schema-registry``
extras of confluent-kafka: fastavro for Avro, jsonschema for JSON Schema), imported only when
``-s`` is given.

``avro``: the writer's schema is fetched from the registry by the id each record carries.
``json``: JSON Schema, validated against the writer's schema likewise. ``protobuf``:
confluent-kafka's deserializer wants the reader's generated message class, which a command
line does not have; the class is built from the writer's schema instead (fetched in the
registry's serialized form, with the schemas it references), picked by the message indexes
the record carries after the schema id, and the message printed as JSON (field names as in
the schema). Schema ids are read from the payload's prefix (the registry's wire format), not
from headers.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["SERDES", "decoders", "parse_serdes", "protobuf_framing", "registry_client"]

#: ``-s`` names and what they decode.
SERDES = {
    "avro": "Avro (Schema Registry)",
    "json": "JSON Schema (Schema Registry)",
    "protobuf": "Protobuf (Schema Registry)",
}


def parse_serdes(values: Iterable[str]) -> dict[str, str]:
    """``-s`` values → ``{"key": name, "value": name}``: ``key=NAME``, ``value=NAME`` or
    ``NAME`` for both, as kcat's ``-s``."""
    result: dict[str, str] = {}
    for value in values:
        field, sep, name = value.partition("=")
        fields = [field] if sep else ["key", "value"]
        name = name if sep else value
        if sep and field not in ("key", "value"):
            raise ValueError(f"bad -s {value!r}: expected key=NAME, value=NAME or NAME")
        if name not in SERDES:
            raise ValueError(f"bad -s {value!r}: NAME is one of {', '.join(SERDES)}")
        for f in fields:
            result[f] = name
    return result


def registry_client(url: str, settings: Mapping[str, str]) -> Any:
    """confluent-kafka's Schema Registry client for ``url`` (``mock://`` gives its in-memory
    one) with extra ``settings`` (``basic.auth.user.info``, ``ssl.ca.location``...)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient.new_client({"url": url, **settings})


def _jsonable(value: object) -> object:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


def decoders(serdes: Mapping[str, str], client: Any) -> dict[str, Any]:
    """``{"key.deserializer": ..., "value.deserializer": ...}`` for the consumer: each a
    confluent-kafka ``Deserializer`` (called with the record's topic and headers) that
    returns the decoded object as JSON text in UTF-8 (bytes fields as base64)."""
    from confluent_kafka.serialization import Deserializer

    class AsJson(Deserializer):
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __call__(self, value: bytes | None, ctx: Any = None) -> bytes | None:
            if value is None:
                return None
            decoded = self._inner(value, ctx)
            return json.dumps(decoded, ensure_ascii=False, default=_jsonable).encode("utf-8")

    def inner(name: str) -> Any:
        if name == "avro":
            from confluent_kafka.schema_registry.avro import AvroDeserializer

            return AvroDeserializer(client)
        if name == "protobuf":
            return _ProtobufByWriter(client)
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer

        return JSONDeserializer(None, schema_registry_client=client)

    return {f"{field}.deserializer": AsJson(inner(name)) for field, name in serdes.items()}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint at ``pos`` → (value, next position)."""
    shift = 0
    raw = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated message indexes after the schema id")
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos


def protobuf_framing(data: bytes) -> tuple[int, tuple[int, ...]]:
    """The schema id and the message indexes (the path of the message type in its file:
    top-level index, then nested) at the front of a Protobuf record of the registry's wire
    format: magic byte 0, the id (4 bytes, big endian), a count and that many indexes
    (zig-zag varints; a count of 0 means the first message type)."""
    if len(data) < 6 or data[0] != 0:
        raise ValueError("not in the Schema Registry's wire format (no magic byte 0)")
    schema_id = int.from_bytes(data[1:5], "big")
    count, pos = _varint(data, 5)
    if count == 0:
        return schema_id, (0,)
    if count < 0 or count > len(data) - pos:
        raise ValueError(f"bad count of message indexes: {count}")
    path: list[int] = []
    for _ in range(count):
        index, pos = _varint(data, pos)
        if index < 0:
            raise ValueError(f"bad message index: {index}")
        path.append(index)
    return schema_id, tuple(path)


class _ProtobufByWriter:
    """Protobuf records decoded with the writer's message type (see the module doc): one
    confluent-kafka ``ProtobufDeserializer`` per (schema id, message path), built once."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._deserializers: dict[tuple[int, tuple[int, ...]], Any] = {}

    def __call__(self, value: bytes, ctx: Any) -> object:
        from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
        from google.protobuf import json_format  # type: ignore[import-untyped]

        key = protobuf_framing(value)
        deserializer = self._deserializers.get(key)
        if deserializer is None:
            message_class = self._message_class(*key)
            deserializer = ProtobufDeserializer(
                message_class, {"use.deprecated.format": False}, self._client
            )
            self._deserializers[key] = deserializer
        message = deserializer(value, ctx)
        return json_format.MessageToDict(message, preserving_proto_field_name=True)

    def _message_class(self, schema_id: int, path: tuple[int, ...]) -> Any:
        from google.protobuf import descriptor_pool, message_factory

        schema = self._client.get_schema(schema_id, fmt="serialized")
        pool = descriptor_pool.DescriptorPool()
        name = f"kafka-actors-schema-{schema_id}.proto"
        proto = self._add(pool, schema, name, set())
        names: list[str] = []
        container: Any = proto.message_type
        for index in path:
            if index >= len(container):
                raise ValueError(f"schema {schema_id} has no message at indexes {list(path)}")
            names.append(container[index].name)
            container = container[index].nested_type
        full_name = ".".join(([proto.package] if proto.package else []) + names)
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))

    def _add(self, pool: Any, schema: Any, name: str, visited: set[str]) -> Any:
        """Add ``schema`` (serialized form) to ``pool`` as ``name``, after what it imports:
        the schemas it references (fetched from the registry) and protobuf's own
        well-known types. Returns its FileDescriptorProto."""
        from google.protobuf import descriptor_pb2, descriptor_pool

        for ref in schema.references or ():
            if ref.name in visited:
                continue
            visited.add(ref.name)
            if _in_pool(pool, ref.name):
                continue
            if _in_pool(descriptor_pool.Default(), ref.name):
                continue  # a well-known type: copied below, as a dependency
            registered = self._client.get_version(ref.subject, ref.version, True, "serialized")
            self._add(pool, registered.schema, ref.name, visited)
        proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(schema.schema_str))
        proto.name = name
        for dependency in proto.dependency:
            _copy_from_default(pool, dependency)
        pool.Add(proto)
        return proto


def _in_pool(pool: Any, name: str) -> bool:
    try:
        pool.FindFileByName(name)
    except KeyError:
        return False
    return True


def _copy_from_default(pool: Any, name: str) -> None:
    """Add the file ``name`` (and what it imports) from protobuf's default pool to ``pool``
    when ``pool`` does not hold it yet (google/protobuf/timestamp.proto and the like)."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    if _in_pool(pool, name):
        return
    try:
        found = descriptor_pool.Default().FindFileByName(name)
    except KeyError:
        raise ValueError(f"the schema imports {name!r}, which the registry did not give") from None
    proto = descriptor_pb2.FileDescriptorProto()
    found.CopyToProto(proto)
    for dependency in proto.dependency:
        _copy_from_default(pool, dependency)
    pool.Add(proto)
