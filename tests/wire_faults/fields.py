"""Where the lengths and counts are in a Kafka response frame, read from kio's schema classes.

Owns: one walker over a response's bytes (after the size prefix) that follows the kio
dataclass of the API and version and lists every length or count prefix it meets (array
counts, string and bytes lengths, tagged-field counts) with its offset and encoding. The fault
proxy uses it to set exactly those fields to huge values. Test code only: it trusts the frame
(a real broker's answer) and stops at the first thing it cannot follow.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from kafka_actors.protocol.wire import bounds

Encoding = Literal["int16", "int32", "uvarint"]

# The encoded sizes of kio's fixed-size types: the same table the bounded decoder walks with.
_FIXED = bounds._FIXED


@dataclass(frozen=True, slots=True)
class SizeField:
    """A length or count prefix: ``size`` bytes at ``offset``, encoded as ``encoding``."""

    offset: int
    size: int
    encoding: Encoding
    kind: Literal["array", "string", "bytes", "tags"]
    path: str


class _Stop(Exception):
    """The walker met something it cannot follow (the list so far is still right)."""


def _uvarint(frame: bytes, offset: int) -> tuple[int, int]:
    value = shift = 0
    start = offset
    while True:
        if offset >= len(frame) or offset - start >= 5:
            raise _Stop("bad varint")
        byte = frame[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset - start
        shift += 7


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _optional(hint: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


class _Walker:
    def __init__(self, frame: bytes) -> None:
        self.frame = frame
        self.fields: list[SizeField] = []

    def _int(self, offset: int, size: int, signed: bool = True) -> int:
        if offset + size > len(self.frame):
            raise _Stop("short")
        return int.from_bytes(self.frame[offset : offset + size], "big", signed=signed)

    def length(
        self, offset: int, flexible: bool, kind: Literal["array", "string", "bytes"], path: str
    ) -> tuple[int, int]:
        """Read a length/count prefix: (count or -1 for null, bytes used)."""
        if flexible:
            value, used = _uvarint(self.frame, offset)
            self.fields.append(SizeField(offset, used, "uvarint", kind, path))
            return value - 1, used
        size = 2 if kind == "string" else 4
        value = self._int(offset, size)
        self.fields.append(SizeField(offset, size, "int16" if size == 2 else "int32", kind, path))
        return value, size

    def primitive(self, kafka_type: str, offset: int, flexible: bool, path: str) -> int:
        fixed = _FIXED.get(kafka_type)
        if fixed is not None:
            if offset + fixed > len(self.frame):
                raise _Stop("short")
            return offset + fixed
        if kafka_type == "string":
            n, used = self.length(offset, flexible, "string", path)
        elif kafka_type in ("bytes", "records"):
            n, used = self.length(offset, flexible, "bytes", path)
        else:
            raise _Stop(f"unknown type {kafka_type}")
        return offset + used + max(n, 0)

    def entity(self, cls: type, offset: int, path: str) -> int:
        flexible = bool(getattr(cls, "__flexible__", False))
        hints = _hints(cls)
        for field in dataclasses.fields(cls):
            if "tag" in field.metadata:
                continue
            offset = self.value(field, hints[field.name], offset, flexible, f"{path}.{field.name}")
        if flexible:
            count, used = _uvarint(self.frame, offset)
            self.fields.append(SizeField(offset, used, "uvarint", "tags", f"{path}.<tags>"))
            offset += used
            for _ in range(count):
                _tag, used = _uvarint(self.frame, offset)
                offset += used
                size, used = _uvarint(self.frame, offset)
                offset += used + size
        return offset

    def value(
        self, field: dataclasses.Field[Any], hint: Any, offset: int, flexible: bool, path: str
    ) -> int:
        hint, nullable = _optional(hint)
        if typing.get_origin(hint) is tuple:
            n, used = self.length(offset, flexible, "array", path)
            offset += used
            (element,) = typing.get_args(hint)[:1]
            for i in range(max(n, 0)):
                if dataclasses.is_dataclass(element):
                    offset = self.entity(typing.cast(type, element), offset, f"{path}[{i}]")
                else:
                    offset = self.primitive(
                        field.metadata["kafka_type"], offset, flexible, f"{path}[{i}]"
                    )
            return offset
        if dataclasses.is_dataclass(hint):
            if nullable:
                marker = self._int(offset, 1)
                offset += 1
                if marker < 0:
                    return offset
            return self.entity(typing.cast(type, hint), offset, path)
        kafka_type = field.metadata.get("kafka_type")
        if kafka_type is None:
            raise _Stop(f"no kafka_type at {path}")
        return self.primitive(str(kafka_type), offset, flexible, path)


def size_fields(frame: bytes, response_type: type, header_flexible: bool) -> list[SizeField]:
    """The length and count prefixes of ``frame`` (a response without its size prefix), in
    order. ``header_flexible``: the response header has tagged fields (header v1)."""
    walker = _Walker(frame)
    offset = 4
    try:
        if header_flexible:
            count, used = _uvarint(frame, offset)
            walker.fields.append(SizeField(offset, used, "uvarint", "tags", "header.<tags>"))
            offset += used
            for _ in range(count):
                _tag, used = _uvarint(frame, offset)
                offset += used
                size, used = _uvarint(frame, offset)
                offset += used + size
        walker.entity(response_type, offset, response_type.__name__)
    except (_Stop, KeyError, ValueError, TypeError):
        pass
    return walker.fields
