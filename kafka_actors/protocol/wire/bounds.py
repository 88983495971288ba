"""Bounded decoding: check a frame's lengths and counts before kio's native reader sees it.

Owns: one *walk* per kio message class, generated once from the class's own schema (the same
dataclass metadata kio's reader compiles: ``kafka_type``, arrays, nullability, ``__flexible__``,
tagged fields), that steps through a frame exactly as kio's reader does without building
anything. Every string, bytes and records length is checked against the bytes that remain, and
every array count against ``count * (smallest encoding of one item)`` bytes that remain, so the
reader never allocates for a count the frame cannot hold. Failures raise
:class:`~kafka_actors.errors.TruncatedFrameError` (a length or count running past the end of the
frame) or :class:`~kafka_actors.errors.InvalidFrameError` (a malformed varint, a negative length,
an unknown tag, null where the schema has no null), naming the message, its version and the
field path. May touch: kio's schema introspection, kafka_actors.errors. Pure: no I/O.

Why: kio 0.6's readers are native; an array length such as a 5-byte varint 2**35-1 makes them
reserve that many slots up front and the process aborts on the failed allocation (SIGABRT),
which no ``except`` can catch. Java's generated readers refuse a count larger than the bytes
that remain; this walk does the same (with the item's minimum size, a tighter bound) before kio
runs.

How kio 0.6 reads (mirrored here): unsigned varints take at most 5 bytes (a continuation bit in
the 5th is an error); compact strings/bytes/arrays store length+1 (0 is null); legacy strings
an int16 length, legacy bytes and arrays an int32 (-1 is null, any other negative an error);
a nullable struct starts with an int8 marker (-1 is null); a flexible struct ends with a
varint count of tagged fields, each a varint tag and a varint size (which kio ignores: it reads
the field by its schema) and an unknown tag is an error; tagged primitive fields are read as
non-nullable; ``RequestHeader.client_id`` is always a nullable legacy string.

The walk is generated Python source (one function per struct, consecutive fixed-size fields
merged into one step, one-byte varints inlined, arrays of fixed-size items skipped by length,
record sets skipped as one blob): it runs on every response, so it must cost little next to the
decode itself. ``plan_source(cls)`` shows the generated code. A class's fast walk is generated
at its first frame; the careful walk (which names the failing field) only when a frame fails
the fast one, since generating it costs as much as the first decode (issue 26).
"""

from __future__ import annotations

import dataclasses
import struct
import threading
from collections.abc import Callable
from typing import Any, Final

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from kafka_actors.errors import InvalidFrameError, TruncatedFrameError

__all__ = [
    "check_entity",
    "check_request",
    "check_response",
    "min_encoded_size",
    "plan_source",
]

Buffer = bytes | bytearray | memoryview
Walk = Callable[[Any, int, int], int]

#: Encoded size of kio's fixed-size kafka types.
_FIXED: Final[dict[str, int]] = {
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_VARIABLE: Final = frozenset({"string", "bytes", "records"})

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


# -- Failures raised by generated code (turned into typed errors by the entry points) ---------


class _Short(Exception):
    """A length or count runs past the end of the frame."""


class _Bad(Exception):
    """A malformed length, marker or tag."""


def _short(path: str, need: int, have: int) -> _Short:
    return _Short(f"{path} needs {need} bytes, {have} remain")


def _count_short(path: str, count: int, item: int, have: int) -> _Short:
    return _Short(
        f"{path} claims {count} items (at least {count * item} bytes), {have} bytes remain"
    )


def _uvarint(buf: Any, pos: int, end: int, path: str) -> tuple[int, int]:
    """kio's unsigned varint: at most 5 bytes, little-endian groups of 7 bits."""
    value = 0
    shift = 0
    for _ in range(5):
        if pos >= end:
            raise _short(f"{path} (varint)", 1, 0)
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise _Bad(f"{path}: varint longer than 5 bytes")


def _i16(buf: Any, pos: int, end: int, path: str) -> int:
    if end - pos < 2:
        raise _short(path, 2, end - pos)
    value: int = _I16.unpack_from(buf, pos)[0]
    return value


def _i32(buf: Any, pos: int, end: int, path: str) -> int:
    if end - pos < 4:
        raise _short(path, 4, end - pos)
    value: int = _I32.unpack_from(buf, pos)[0]
    return value


_HELPERS: Final[dict[str, Any]] = {
    "_Short": _Short,
    "_Bad": _Bad,
    "_short": _short,
    "_count_short": _count_short,
    "_uvarint": _uvarint,
    "_i16": _i16,
    "_i32": _i32,
}


# -- Schema → field descriptions ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Prim:
    """One primitive value (``kind`` is the kafka type; ``nullable`` as kio reads it)."""

    kind: str
    nullable: bool


@dataclasses.dataclass(frozen=True, slots=True)
class _Struct:
    cls: type
    nullable: bool


@dataclasses.dataclass(frozen=True, slots=True)
class _Array:
    item: _Prim | _Struct
    compact: bool


_Field = _Prim | _Struct | _Array


def _describe(
    field: dataclasses.Field[Any], flexible: bool, request_header: bool, tagged: bool
) -> _Field:
    """The field as kio's native reader reads it (see kio's ``build_field_schema``)."""
    if request_header and field.name == "client_id":
        return _Prim("string/legacy", True)
    klass = classify_field(field)
    item: _Prim | _Struct
    if isinstance(klass, EntityField):
        return _Struct(klass.type_, is_optional(field))
    if isinstance(klass, EntityTupleField):
        item = _Struct(klass.type_, False)
    else:
        kind = get_schema_field_type(field)
        if kind not in _FIXED and kind not in _VARIABLE:
            raise TypeError(f"kio type {kind!r} of {field.name} has no bounds rule")
        if kind in _VARIABLE:
            kind = f"{kind}/{'compact' if flexible else 'legacy'}"
        if not isinstance(klass, PrimitiveTupleField):
            return _Prim(kind, is_optional(field) and not tagged)
        item = _Prim(kind, False)
    return _Array(item, compact=flexible)


_FIELDS: dict[type, tuple[list[tuple[str, _Field]], dict[int, tuple[str, _Field]]]] = {}


def _fields(cls: type) -> tuple[list[tuple[str, _Field]], dict[int, tuple[str, _Field]]]:
    """``cls``'s regular fields (in order) and tagged fields (by tag), described once: the
    fast and the careful walks and :func:`min_encoded_size` all read them."""
    described = _FIELDS.get(cls)
    if described is None:
        described = _FIELDS[cls] = _describe_fields(cls)
    return described


def _describe_fields(
    cls: type,
) -> tuple[list[tuple[str, _Field]], dict[int, tuple[str, _Field]]]:
    flexible = bool(getattr(cls, "__flexible__", False))
    request_header = cls.__name__ == "RequestHeader"
    regular: list[tuple[str, _Field]] = []
    tagged: dict[int, tuple[str, _Field]] = {}
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        described = _describe(field, flexible, request_header, tag is not None)
        if tag is None:
            regular.append((field.name, described))
        else:
            tagged[int(tag)] = (field.name, described)
    return regular, tagged


def _min_size(described: _Field) -> int:
    if isinstance(described, _Array):
        return 1 if described.compact else 4
    if isinstance(described, _Struct):
        return 1 if described.nullable else min_encoded_size(described.cls)
    kind = described.kind
    if kind in _FIXED:
        return _FIXED[kind]
    if kind.endswith("/compact"):
        return 1
    if kind == "string/legacy":
        return 2
    return 4  # bytes/records, legacy: int32 length


_MIN_SIZES: dict[type, int] = {}


def min_encoded_size(cls: type) -> int:
    """Fewest bytes one (non-null) ``cls`` struct can take on the wire."""
    size = _MIN_SIZES.get(cls)
    if size is None:
        regular, _tagged = _fields(cls)
        size = sum(_min_size(d) for _name, d in regular)
        if getattr(cls, "__flexible__", False):
            size += 1  # the tagged-field count
        _MIN_SIZES[cls] = size
    return size


# -- Code generation ---------------------------------------------------------------------------


class _Gen:
    """Generates the walk of one message class; field paths are baked into the error
    messages, so the walk itself carries nothing but positions."""

    def __init__(self, fast: bool = False) -> None:
        #: The fast walk leaves out every check that a later read or the final position
        #: catches anyway (a read past the end raises IndexError; positions only grow, so an
        #: overrun shows in the end position); it keeps every count check, made against the
        #: true position. Any failure reruns the careful walk, which names the field.
        self.fast = fast
        self.sources: list[str] = []
        self._counter = 0

    def _var(self, stem: str) -> str:
        self._counter += 1
        return f"{stem}{self._counter}"

    def function(self, cls: type, path: str) -> str:
        """A function ``walk(buf, pos, end) -> pos`` stepping over one ``cls`` struct."""
        name = f"walk_{cls.__name__}"
        lines = [f"def {name}(buf, pos, end):"]
        lines += [f"    {line}" for line in self.body(cls, path)]
        lines.append("    return pos")
        self.sources.append("\n".join(lines))
        return name

    def body(self, cls: type, path: str) -> list[str]:
        """Lines stepping over one ``cls`` struct; nested structs are inlined (a call per
        partition of a large Metadata response costs more than the checks themselves)."""
        regular, tagged = _fields(cls)
        body: list[str] = []
        run: list[str] = []  # fixed-size fields not yet stepped over
        size = 0
        for fname, described in regular:
            if isinstance(described, _Prim) and described.kind in _FIXED:
                run.append(fname)
                size += _FIXED[described.kind]
                continue
            if run:
                body += self._fixed(size, _join(path, run))
                run, size = [], 0
            body += self._field(described, _join(path, [fname]))
        if run:
            body += self._fixed(size, _join(path, run))
        if getattr(cls, "__flexible__", False):
            body += self._tags(tagged, path)
        return body or ["pass"]

    def _fixed(self, size: int, path: str) -> list[str]:
        step = f"pos += {size}"
        if self.fast:
            return [step]
        return [f"if end - pos < {size}: raise _short({path!r}, {size}, end - pos)", step]

    def _uvarint(self, target: str, path: str) -> list[str]:
        check = [] if self.fast else [f"if pos >= end: raise _short({path + ' (varint)'!r}, 1, 0)"]
        return [
            *check,
            f"{target} = buf[pos]",
            f"if {target} < 0x80: pos += 1",
            "elif pos + 1 < end and buf[pos + 1] < 0x80:",  # two bytes: a record set's length
            f"    {target} = ({target} & 0x7F) | (buf[pos + 1] << 7)",
            "    pos += 2",
            f"else: {target}, pos = _uvarint(buf, pos, end, {path!r})",
        ]

    def _field(self, described: _Field, path: str) -> list[str]:
        """Lines stepping over one field."""
        if isinstance(described, _Prim):
            return self._prim(described, path)
        if isinstance(described, _Struct):
            return self._struct(described, path)
        return self._array(described, path)

    def _prim(self, prim: _Prim, path: str) -> list[str]:
        kind = prim.kind
        if kind in _FIXED:
            return self._fixed(_FIXED[kind], path)
        n = self._var("n")
        null = f"raise _Bad({path + ': null where the schema has no null'!r})"
        if kind.endswith("/compact"):
            lines = self._uvarint(n, path)
            if prim.nullable:
                lines.append(f"if {n}:")
                inner = "    "
            else:
                lines.append(f"if not {n}: {null}")
                inner = ""
            if self.fast:
                return [*lines, f"{inner}pos += {n} - 1"]
            return [
                *lines,
                f"{inner}{n} -= 1",
                f"{inner}if {n} > end - pos: raise _short({path!r}, {n}, end - pos)",
                f"{inner}pos += {n}",
            ]
        read, width = ("_i16", 2) if kind == "string/legacy" else ("_i32", 4)
        return [
            f"{n} = {read}(buf, pos, end, {path!r})",
            f"pos += {width}",
            f"if {n} < 0:",
            f"    if {n} != -1: raise _Bad({path!r} + f': negative length {{{n}}}')",
            *([] if prim.nullable else [f"    {null}"]),
            f"elif {n} > end - pos: raise _short({path!r}, {n}, end - pos)",
            f"else: pos += {n}",
        ]

    def _struct(self, struct_: _Struct, path: str) -> list[str]:
        body = self.body(struct_.cls, path)
        if not struct_.nullable:
            return body
        check = (
            [] if self.fast else [f"if pos >= end: raise _short({path + ' (null marker)'!r}, 1, 0)"]
        )
        return [
            *check,
            "pos += 1",
            "if buf[pos - 1] != 255:",
            *[f"    {line}" for line in body],
        ]

    def _array(self, array: _Array, path: str) -> list[str]:
        n = self._var("n")
        item = array.item
        item_min = max(1, _min_size(item))
        if array.compact:
            lines = [*self._uvarint(n, path), f"if {n}:", f"    {n} -= 1"]
        else:
            lines = [
                f"{n} = _i32(buf, pos, end, {path!r})",
                "pos += 4",
                f"if {n} < -1: raise _Bad({path!r} + f': negative array length {{{n}}}')",
                f"if {n} > 0:",
            ]
        lines.append(
            f"    if {n} * {item_min} > end - pos: "
            f"raise _count_short({path!r}, {n}, {item_min}, end - pos)"
        )
        if isinstance(item, _Prim) and item.kind in _FIXED:
            lines.append(f"    pos += {n} * {_FIXED[item.kind]}")
            return lines
        item_path = f"{path}[]"
        if isinstance(item, _Struct):
            lines.append(f"    for _ in range({n}):")
            lines += [f"        {line}" for line in self.body(item.cls, item_path)]
            return lines
        lines.append(f"    for _ in range({n}):")
        lines += [f"        {line}" for line in self._prim(item, item_path)]
        return lines

    def _tags(self, tagged: dict[int, tuple[str, _Field]], path: str) -> list[str]:
        where = f"{path or '(top)'} tagged fields"
        t, tag, size = self._var("t"), self._var("tag"), self._var("size")
        loop = [*self._uvarint(tag, where), *self._uvarint(size, where)]
        first = True
        for number, (fname, described) in sorted(tagged.items()):
            loop.append(f"{'if' if first else 'elif'} {tag} == {number}:")
            loop += [f"    {line}" for line in self._field(described, _join(path, [fname]))]
            first = False
        unknown = f"raise _Bad({where!r} + f': unknown tag {{{tag}}}')"
        loop.append(f"else: {unknown}" if not first else unknown)
        check = [] if self.fast else [f"if pos >= end: raise _short({where!r}, 1, 0)"]
        return [
            *check,
            f"{t} = buf[pos]",
            f"if not {t}: pos += 1",
            "else:",
            *[f"    {line}" for line in self._uvarint(t, where)[1 - self.fast :]],
            f"    for _ in range({t}):",
            *[f"        {line}" for line in loop],
        ]


def _join(path: str, names: list[str]) -> str:
    last = names[0] if len(names) == 1 else f"{names[0]}..{names[-1]}"
    return f"{path}.{last}" if path else last


_lock = threading.Lock()
#: The fast walk of each class and its source, generated at its first frame.
_WALKS: dict[type, tuple[Walk, str]] = {}
#: The careful walk of each class and its source, generated only when a frame fails the fast
#: walk (or for :func:`plan_source`): a well-formed response never needs it.
_CAREFUL: dict[type, tuple[Walk, str]] = {}


def _compile(cls: type, fast: bool) -> tuple[Walk, str]:
    gen = _Gen(fast)
    name = gen.function(cls, "")
    source = "\n\n".join(gen.sources)
    namespace = dict(_HELPERS)
    kind = "fast" if fast else "careful"
    code = compile(source, f"<bounds {kind} {cls.__module__}.{cls.__qualname__}>", "exec")
    exec(code, namespace)  # our own source, generated from kio's schema
    walk: Walk = namespace[name]
    return walk, source


def _walk(cls: type, fast: bool) -> tuple[Walk, str]:
    """The fast or the careful walk of ``cls`` and its source, generated once (kept in
    :data:`_WALKS` or :data:`_CAREFUL`)."""
    table = _WALKS if fast else _CAREFUL
    walk = table.get(cls)
    if walk is not None:
        return walk
    with _lock:
        walk = table.get(cls)
        if walk is None:
            walk = table[cls] = _compile(cls, fast)
    return walk


def plan_source(cls: type, *, fast: bool = False) -> str:
    """The generated walk for ``cls`` (for reading and debugging)."""
    if fast:
        return _compile(cls, True)[1]
    return _walk(cls, False)[1]


# -- Entry points ------------------------------------------------------------------------------


def _label(cls: type) -> str:
    version = getattr(cls, "__version__", None)
    return f"{cls.__name__} v{version}" if version is not None else cls.__name__


def check_entity(frame: Buffer, offset: int, cls: type, what: str | None = None) -> int:
    """Walk one ``cls`` struct at ``offset`` of ``frame``; return where it ends.

    Raises TruncatedFrameError when a length or count runs past the end of ``frame``,
    InvalidFrameError when a length, varint or tag is malformed. ``what`` names the message in
    the error (default: the class name and version).
    """
    end = len(frame)
    try:
        pos = _walk(cls, True)[0](frame, offset, end)
        if pos <= end:
            return pos
    except (IndexError, struct.error, _Short, _Bad):
        pass
    try:  # something is wrong: the careful walk says what and where
        _walk(cls, False)[0](frame, offset, end)
        raise _Short("frame ended early")  # pragma: no cover - the walks agree
    except _Short as exc:
        raise TruncatedFrameError(f"{what or _label(cls)}: {exc}") from None
    except _Bad as exc:
        raise InvalidFrameError(f"{what or _label(cls)}: {exc}") from None


def check_response(frame: Buffer, header_type: type, body_type: type) -> None:
    """Check a response frame (header then body) before kio decodes it."""
    end = check_entity(frame, 0, header_type, f"{_label(body_type)} response header")
    check_entity(frame, end, body_type)


def check_request(frame: Buffer, header_type: type, body_type: type) -> None:
    """Check a request frame (header then body) before kio decodes it."""
    end = check_entity(frame, 0, header_type, f"{_label(body_type)} request header")
    check_entity(frame, end, body_type)
