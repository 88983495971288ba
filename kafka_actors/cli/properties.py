"""Java properties files, as Kafka's command-line tools read ``--consumer.config``.

Owns: :func:`parse_properties` and :func:`load_properties`. May touch: nothing but the file it
is asked to read. Pure otherwise.

The format is ``java.util.Properties.load``'s: one ``key=value``, ``key: value`` or
``key value`` per logical line; lines whose first non-blank character is ``#`` or ``!`` are
comments (a comment never continues onto the next line); a line ending in an odd number of
backslashes continues on the next one, whose leading blanks are skipped; in keys and values
``\\t \\n \\r \\f``, ``\\uXXXX`` and ``\\<any other char>`` (that char: ``\\=``, ``\\:``,
``\\ ``, ``\\\\``) are escapes; blanks around the separator are skipped, trailing blanks of a
value are kept. A later key replaces an earlier one. Files are read as UTF-8, falling back to
ISO-8859-1 (Java's own encoding for ``load(InputStream)``) when they are not valid UTF-8.
"""

from __future__ import annotations

import os

from kafka_actors.errors import ConfigError

__all__ = ["load_properties", "parse_properties"]

_BLANKS = " \t\f"
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first natural line number, logical line) pairs, comments and blank lines removed."""
    natural = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    result: list[tuple[int, str]] = []
    i = 0
    while i < len(natural):
        start = i
        line = natural[i].lstrip(_BLANKS)
        i += 1
        if not line or line[0] in "#!":
            continue
        parts: list[str] = []
        while True:
            trailing = len(line) - len(line.rstrip("\\"))
            if trailing % 2 == 1:
                parts.append(line[:-1])
                if i >= len(natural):
                    break  # a continuation at the end of the file ends the line (as Java)
                line = natural[i].lstrip(_BLANKS)
                i += 1
                continue
            parts.append(line)
            break
        result.append((start + 1, "".join(parts)))
    return result


def _unescape(raw: str, lineno: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= len(raw):
            i += 1  # a lone trailing backslash (only after an even run was split off)
            continue
        nxt = raw[i + 1]
        if nxt == "u":
            digits = raw[i + 2 : i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError(f"malformed \\uxxxx escape on line {lineno}: {raw[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_SIMPLE_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _split(line: str) -> tuple[str, str]:
    """The raw (still escaped) key and value of a logical line."""
    i = 0
    n = len(line)
    while i < n:
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=:" or ch in _BLANKS:
            break
        i += 1
    key = line[:i]
    j = i
    while j < n and line[j] in _BLANKS:
        j += 1
    if j < n and line[j] in "=:":
        j += 1
        while j < n and line[j] in _BLANKS:
            j += 1
    return key, line[j:]


def parse_properties(text: str) -> dict[str, str]:
    """The properties in ``text`` (see the module docstring), in file order."""
    result: dict[str, str] = {}
    for lineno, line in _logical_lines(text):
        raw_key, raw_value = _split(line)
        result[_unescape(raw_key, lineno)] = _unescape(raw_value, lineno)
    return result


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a properties file; an unreadable file is a ConfigError naming it."""
    try:
        with open(path, "rb") as f:
            data = f.read(16 << 20)
            if f.read(1):
                raise ConfigError(f"{os.fspath(path)}: larger than 16 MiB, not a config file")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {os.fspath(path)}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    if text.startswith("\ufeff"):
        text = text[1:]
    return parse_properties(text)
