"""How ``consume`` prints a record: kcat's ``-f`` format strings, and JSON lines.

Owns: :class:`RecordFormatter`. Pure: strings in, strings out.

Format tokens (kcat's): ``%t`` topic, ``%p`` partition, ``%o`` offset, ``%k`` key, ``%s``
value, ``%K`` key length in bytes (-1 for null), ``%S`` value length (-1 for null), ``%T``
timestamp in ms (-1 when the record has none), ``%h`` headers as ``name=value`` separated by
``,``, ``%%`` a percent sign; escapes ``\\n``, ``\\t``, ``\\r``, ``\\\\``. Keys, values and
header values are decoded as UTF-8 (invalid bytes replaced); a null key or value prints as the
``null`` text (default empty). An unknown ``%x`` is a ValueError, caught at start-up.

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

__all__ = ["FORMAT_TOKENS", "RecordFormatter"]

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
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}

_Piece = Callable[[Any], str]


def _text(value: bytes | None, null: str) -> str:
    return null if value is None else value.decode("utf-8", "replace")


def _length(value: bytes | None) -> str:
    return "-1" if value is None else str(len(value))


class RecordFormatter:
    """``RecordFormatter("%t %p %o %k %s\\n")`` or ``RecordFormatter.jsonl()``; ``format``
    returns the text for one record (a format string ends the line only if it says so)."""

    def __init__(self, fmt: str, *, null: str = "") -> None:
        self._pieces = self._compile(fmt, null)

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

        def piece(record: Any) -> str:
            kind = getattr(record, "timestamp_type", None)
            return (
                json.dumps(
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
                + "\n"
            )

        self._pieces = [piece]
        return self

    @staticmethod
    def _compile(fmt: str, null: str) -> list[_Piece]:
        pieces: list[_Piece] = []
        literal: list[str] = []

        def flush() -> None:
            if literal:
                text = "".join(literal)
                pieces.append(lambda _r: text)
                literal.clear()

        i = 0
        while i < len(fmt):
            ch = fmt[i]
            if ch == "\\" and i + 1 < len(fmt) and fmt[i + 1] in _ESCAPES:
                literal.append(_ESCAPES[fmt[i + 1]])
                i += 2
                continue
            if ch != "%":
                literal.append(ch)
                i += 1
                continue
            if i + 1 >= len(fmt):
                raise ValueError("format string ends with a lone '%'")
            token = fmt[i + 1]
            i += 2
            if token == "%":
                literal.append("%")
                continue
            flush()
            if token == "t":
                pieces.append(lambda r: str(r.topic))
            elif token == "p":
                pieces.append(lambda r: str(r.partition))
            elif token == "o":
                pieces.append(lambda r: str(r.offset))
            elif token == "k":
                pieces.append(lambda r: _text(r.key, null))
            elif token == "s":
                pieces.append(lambda r: _text(r.value, null))
            elif token == "K":
                pieces.append(lambda r: _length(r.key))
            elif token == "S":
                pieces.append(lambda r: _length(r.value))
            elif token == "T":
                pieces.append(lambda r: str(r.timestamp))
            elif token == "h":
                pieces.append(lambda r: ",".join(f"{k}={_text(v, null)}" for k, v in r.headers))
            else:
                known = " ".join(f"%{t}" for t in FORMAT_TOKENS)
                raise ValueError(f"unknown format token %{token} (known: {known})")
        flush()
        return pieces

    def format(self, record: Any) -> str:
        return "".join(piece(record) for piece in self._pieces)


def _timestamp_type_name(kind: Any) -> str | None:
    if kind is None:
        return None
    value = int(kind)
    return {0: "CreateTime", 1: "LogAppendTime"}.get(value)
