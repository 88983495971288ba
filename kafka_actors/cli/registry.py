"""``consume -s/-r``: keys and values decoded through a Schema Registry, as kcat's ``-s avro``.

Owns: which confluent-kafka deserializer a ``-s`` name stands for, and the rendering of what
it returns as JSON text (UTF-8 bytes), so that every output format prints decoded records.
May touch: confluent-kafka's Schema Registry client and deserializers (the ``schema-registry``
extras of confluent-kafka: fastavro for Avro, jsonschema for JSON Schema), imported only when
``-s`` is given.

``avro``: the writer's schema is fetched from the registry by the id each record carries.
``json``: JSON Schema, validated against the writer's schema likewise. Protobuf needs the
reader's generated message class in Python and is not offered on the command line.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["SERDES", "decoders", "parse_serdes", "registry_client"]

#: ``-s`` names and what they decode.
SERDES = {"avro": "Avro (Schema Registry)", "json": "JSON Schema (Schema Registry)"}


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
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer

        return JSONDeserializer(None, schema_registry_client=client)

    return {f"{field}.deserializer": AsJson(inner(name)) for field, name in serdes.items()}
