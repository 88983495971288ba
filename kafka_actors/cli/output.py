"""How ``consume`` prints a record: kcat's ``-f`` format strings, and JSON lines.

Owns: :class:`RecordFormatter` and :func:`unescape` (kcat's backslash escapes). Pure: records
in, bytes out, so that keys and values reach stdout exactly as they are stored.

Format tokens (kcat's): ``%t`` topic, ``%p`` partition, ``%o`` offset, ``%k`` key, ``%s``
value, ``%K`` key length in bytes (-1 for null), ``%S`` value length (-1 for null), ``%T``
timestamp in ms (-1 when the record has none), ``%h`` headers as ``name=value`` separated by
``,``, ``%%`` a percent sign; escapes ``\\n``, ``\\t``, ``\\r``, ``\\0`` (a NUL byte),
``\\xNN`` (the byte NN in hex), ``\\\\``; another backslash is kept as it is. Keys, values and
header values are written as their bytes, never decoded (binary data survives); a null key or
value prints as the ``null`` text (default empty). An unknown ``%x`` is a ValueError, caught at
start-up.

JSON lines: one object per record with ``topic``, ``partition``, ``offset``, ``timestamp``,
``timestamp_type`` (``CreateTime`` / ``LogAppendTime`` / null), ``key``, ``value`` and
``headers`` (``[[name, value], ...]``); keys and values as base64 (``bytes="base64"``) or
UTF-8 text (``bytes="utf8"``, invalid bytes replaced), null as JSON null.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

__all__ = ["FORMAT_TOKENS", "RecordFormatter", "unescape"]

#: The ``%`` tokens of a format string and what they print.
FORMAT_TOKENS = {
    "t": "topic",
    "p": "partition",
    "o": "offset",
    "k": "key",
    "s": "value",
    "K": "key length in bytes (-1: null)",
    "S": "value length in bytes (-1: null)",
    "T": "timestamp in ms (-1: none)",
    "h": "headers, name=value,...",
    "%": "a percent sign",
}
_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0", "\\": b"\\"}
_HEX = "0123456789abcdefABCDEF"

_Piece = Callable[[Any], bytes]


def _escape_at(text: str, i: int) -> tuple[bytes, int] | None:
    """The bytes of the escape starting at ``text[i] == "\\"`` and its length, or None when
    it is not one of kcat's escapes."""
    if i + 1 >= len(text):
        return None
    nxt = text[i + 1]
    if nxt in _ESCAPES:
        return _ESCAPES[nxt], 2
    digits = text[i + 2 : i + 4]
    if nxt == "x" and len(digits) == 2 and all(c in _HEX for c in digits):
        return bytes([int(digits, 16)]), 4
    return None


def unescape(text: str) -> bytes:
    """``text`` as bytes (UTF-8) with kcat's escapes applied: ``\\n \\t \\r \\0 \\\\ \\xNN``
    (another backslash stays as it is): a delimiter given on the command line."""
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "\\":
            hit = _escape_at(text, i)
            if hit is not None:
                out += hit[0]
                i += hit[1]
                continue
        out += text[i].encode("utf-8", "surrogateescape")
        i += 1
    return bytes(out)


def _raw(value: bytes | None, null: bytes) -> bytes:
    return null if value is None else bytes(value)


def _length(value: bytes | None) -> bytes:
    return b"-1" if value is None else str(len(value)).encode("ascii")


def _number(value: object) -> bytes:
    return str(value).encode("ascii")


class RecordFormatter:
    """``RecordFormatter("%t %p %o %k %s\\n")`` or ``RecordFormatter.jsonl()``; ``format``
    returns the bytes for one record (a format string ends the line only if it says so)."""

    def __init__(self, fmt: str, *, null: str = "") -> None:
        self._pieces = self._compile(fmt, null.encode("utf-8", "surrogateescape"))

    @classmethod
    def raw(
        cls, *, delimiter: str = "\\n", key_delimiter: str | None = None, null: str = ""
    ) -> RecordFormatter:
        """kcat's output without ``-f``: the value then ``delimiter`` (``-D``), preceded by the
        key and ``key_delimiter`` when one is given (``-K``); both take kcat's escapes."""
        self = cls.__new__(cls)
        null_bytes = null.encode("utf-8", "surrogateescape")
        end = unescape(delimiter)
        if key_delimiter is None:
            self._pieces = [lambda r: _raw(r.value, null_bytes) + end]
        else:
            between = unescape(key_delimiter)
            self._pieces = [
                lambda r: _raw(r.key, null_bytes) + between + _raw(r.value, null_bytes) + end
            ]
        return self

    @classmethod
    def jsonl(cls, *, bytes_as: str = "base64") -> RecordFormatter:
        if bytes_as not in ("base64", "utf8"):
            raise ValueError(f"bytes_as must be base64 or utf8, not {bytes_as!r}")
        self = cls.__new__(cls)

        def encode(value: bytes | None) -> str | None:
            if value is None:
                return None
            if bytes_as == "utf8":
                return value.decode("utf-8", "replace")
            return base64.b64encode(value).decode("ascii")

        def piece(record: Any) -> bytes:
            kind = getattr(record, "timestamp_type", None)
            line = json.dumps(
                {
                    "topic": record.topic,
                    "partition": record.partition,
                    "offset": record.offset,
                    "timestamp": record.timestamp,
                    "timestamp_type": _timestamp_type_name(kind),
                    "key": encode(record.key),
                    "value": encode(record.value),
                    "headers": [[k, encode(v)] for k, v in record.headers],
                },
                separators=(",", ":"),
                ensure_ascii=False,
            )
            return line.encode("utf-8") + b"\n"

        self._pieces = [piece]
        return self

    @staticmethod
    def _compile(fmt: str, null: bytes) -> list[_Piece]:
        pieces: list[_Piece] = []
        literal = bytearray()

        def flush() -> None:
            if literal:
                text = bytes(literal)
                pieces.append(lambda _r: text)
                literal.clear()

        i = 0
        while i < len(fmt):
            ch = fmt[i]
            if ch == "\\":
                hit = _escape_at(fmt, i)
                if hit is not None:
                    literal.extend(hit[0])
                    i += hit[1]
                    continue
            if ch != "%":
                literal.extend(ch.encode("utf-8", "surrogateescape"))
                i += 1
                continue
            if i + 1 >= len(fmt):
                raise ValueError("format string ends with a lone '%'")
            token = fmt[i + 1]
            i += 2
            if token == "%":
                literal.extend(b"%")
                continue
            flush()
            if token == "t":
                pieces.append(lambda r: str(r.topic).encode("utf-8", "surrogateescape"))
            elif token == "p":
                pieces.append(lambda r: _number(r.partition))
            elif token == "o":
                pieces.append(lambda r: _number(r.offset))
            elif token == "k":
                pieces.append(lambda r: _raw(r.key, null))
            elif token == "s":
                pieces.append(lambda r: _raw(r.value, null))
            elif token == "K":
                pieces.append(lambda r: _length(r.key))
            elif token == "S":
                pieces.append(lambda r: _length(r.value))
            elif token == "T":
                pieces.append(lambda r: _number(r.timestamp))
            elif token == "h":
                pieces.append(
                    lambda r: b",".join(
                        str(k).encode("utf-8", "surrogateescape") + b"=" + _raw(v, null)
                        for k, v in r.headers
                    )
                )
            else:
                known = " ".join(f"%{t}" for t in FORMAT_TOKENS)
                raise ValueError(f"unknown format token %{token} (known: {known})")
        flush()
        return pieces

    def format(self, record: Any) -> bytes:
        return b"".join(piece(record) for piece in self._pieces)


def _timestamp_type_name(kind: Any) -> str | None:
    if kind is None:
        return None
    value = int(kind)
    return {0: "CreateTime", 1: "LogAppendTime"}.get(value)
