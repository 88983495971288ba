"""The offset map: which records above a partition's committed offset are already completed,
written into the commit's metadata string so that the next owner skips them.

Owns: the encoding (:func:`encode`, :func:`decode`, :class:`OffsetMap`), the size bound used
for back-pressure (:func:`encoded_size_bound`, :func:`fits`) and the bounds a decoder obeys.
May touch: nothing outside itself and :mod:`kafka_actors.errors` (pure, no clock).

What is encoded. A partition's commit is its *lowest incomplete offset* ``base`` (Kafka's
"next offset to read"); records above it may already be completed (out-of-order concurrency).
``completed[i]`` (a ``bytes`` of 0/1 values) says whether offset ``base + 1 + i`` is completed;
``base`` itself is never completed (else it would not be the base).

The format (version 1): ``"KAP1" + kind + base85(payload)``, an ASCII string (commit metadata
is a string; base85 costs 5/4 of the payload against base64's 4/3). The payload starts with
``varint(base)`` (a map is only applied to the committed offset it was written for: a commit
reset by a tool keeps someone else's metadata, or none) and is one of:

* ``R`` run-length: varints of alternating run lengths from ``base + 1``, an incomplete run
  first (possibly empty), ending with a completed run;
* ``B`` bitmap: ``varint(nbits)`` then the bits, least significant bit first;
* ``r`` / ``b``: the same payloads zlib-compressed.

The encoder writes the smallest of the four (the raw one on a tie). Measured (the table in
``docs/parallel.md``): run-length wins for
completed ranges (a slow record with everything after it done: ~15 characters whatever the
width), the compressed forms for patterns (strict alternation of completed and incomplete
over 100,000 offsets: 64 characters), the raw bitmap for the true worst case, random
completion at one half (incompressible: one bit per offset, ~0.156 characters per offset
after base85), so the default 4096-byte limit holds ~26,000 offsets of the worst case.

Decoding trusts nothing: a metadata string that does not start with ``KAP`` is someone
else's (:func:`decode` returns None); one that does but cannot be read raises
:class:`~kafka_actors.errors.OffsetMapError`. Every length is bounded before use: the input
length (``MAX_METADATA_CHARS``), the decompressed size (``zlib`` with ``max_length``), each
varint (at most 10 bytes) and the span of the map (``max_span`` offsets above ``base``); the
result is a tuple of ranges (never a per-offset set), so its size is bounded by the input's.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from kafka_actors.errors import OffsetMapError

__all__ = [
    "DEFAULT_MAX_SPAN",
    "MAX_METADATA_CHARS",
    "PREFIX",
    "OffsetMap",
    "completed_ranges",
    "decode",
    "encode",
    "encode_ranges",
    "encoded_size_bound",
    "fits",
    "ranges_to_completed",
    "span_always_fitting",
    "varint_size",
]

#: What every map written by this module starts with (``KAP`` and the format version).
PREFIX: Final = "KAP1"
_FAMILY: Final = "KAP"
#: The longest metadata string :func:`decode` reads (a broker may allow long metadata; a map
#: longer than this was not written by us).
MAX_METADATA_CHARS: Final = 1 << 20
#: The widest map (offsets above base) :func:`decode` accepts by default: 4 Mi offsets, so
#: that materializing it costs at most 4 MiB.
DEFAULT_MAX_SPAN: Final = 1 << 22
_ZLIB_LEVEL: Final = 6
_VARINT_MAX_BYTES: Final = 10
_KINDS: Final = "RBrb"
_TO_BITS: Final = bytes.maketrans(b"\x00\x01", b"01")


@dataclass(frozen=True, slots=True)
class OffsetMap:
    """A decoded map: ``base`` (the committed offset it was written for) and the completed
    offsets above it as sorted, disjoint, non-adjacent half-open ranges ``(start, end)``."""

    base: int
    ranges: tuple[tuple[int, int], ...]

    def __contains__(self, offset: object) -> bool:
        if not isinstance(offset, int):
            return False
        i = bisect.bisect_right(self.ranges, offset, key=_start) - 1
        return i >= 0 and self.ranges[i][0] <= offset < self.ranges[i][1]

    @property
    def end(self) -> int:
        """One past the highest completed offset (``base + 1`` when there is none)."""
        return self.ranges[-1][1] if self.ranges else self.base + 1

    @property
    def completed_count(self) -> int:
        return sum(end - start for start, end in self.ranges)

    def completed(self) -> bytes:
        """The map as :func:`encode` takes it (one 0/1 byte per offset from ``base + 1``)."""
        return ranges_to_completed(self.base, self.ranges)


def _start(item: tuple[int, int]) -> int:
    return item[0]


# -- varints -------------------------------------------------------------------------------


def varint_size(value: int) -> int:
    """Bytes of an unsigned LEB128 varint of ``value``."""
    return max(1, (value.bit_length() + 6) // 7)


def _put_varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _get_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    for i in range(pos, min(len(data), pos + _VARINT_MAX_BYTES)):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
    raise OffsetMapError("truncated or overlong varint in the offset map")


# -- encoding ------------------------------------------------------------------------------


def _runs(completed: bytes) -> list[int]:
    """Alternating run lengths (incomplete first) of a 0/1 string ending with a 1."""
    runs: list[int] = []
    pos = 0
    size = len(completed)
    want = 1  # the next run ends where a 1 starts
    while pos < size:
        nxt = completed.find(b"\x01" if want else b"\x00", pos)
        if nxt < 0:
            nxt = size
        runs.append(nxt - pos)
        pos = nxt
        want ^= 1
    return runs


def _bitmap(completed: bytes) -> bytes:
    if not completed:
        return b""
    bits = completed.translate(_TO_BITS)[::-1]
    return int(bits, 2).to_bytes((len(completed) + 7) // 8, "little")


def _trim(completed: bytes) -> bytes:
    end = completed.rfind(b"\x01")
    return completed[: end + 1]


def encode(base: int, completed: bytes | bytearray | memoryview) -> str:
    """The metadata string of a map: ``completed[i]`` (0 or 1) says whether ``base + 1 + i``
    is completed. The smallest of the four encodings; trailing incomplete offsets are not
    written."""
    if base < 0:
        raise ValueError(f"base offset must be >= 0, got {base}")
    data = _trim(bytes(completed))
    if data.strip(b"\x00\x01"):
        raise ValueError("completed must hold only 0 and 1 bytes")
    head = bytearray()
    _put_varint(head, base)
    bitmap = _bitmap(data)
    bm = bytearray(head)
    _put_varint(bm, len(data))
    bm += bitmap
    candidates = [("B", bytes(bm))]
    # The run-length payload takes at least a byte per run: when there are more runs than
    # twice the bitmap's bytes it loses even compressed (random completion), and building it
    # would cost a Python step per run.
    bits = int.from_bytes(bitmap, "little")
    runs = (bits ^ (bits << 1)).bit_count()
    if runs <= 2 * len(bitmap) + 2:
        rl = bytearray(head)
        for run in _runs(data):
            _put_varint(rl, run)
        candidates.insert(0, ("R", bytes(rl)))
    for kind, payload in list(candidates):
        if len(payload) > 24:  # zlib's own overhead makes tiny payloads only grow
            candidates.append((kind.lower(), zlib.compress(payload, _ZLIB_LEVEL)))
    kind, payload = min(candidates, key=lambda c: (len(c[1]), _KINDS.index(c[0])))
    return PREFIX + kind + base64.b85encode(payload).decode("ascii")


def ranges_to_completed(base: int, ranges: Iterable[tuple[int, int]]) -> bytes:
    """The 0/1 string of completed half-open ``ranges`` above ``base``."""
    out = bytearray()
    for start, end in ranges:
        if start <= base or end < start:
            raise ValueError(f"range ({start}, {end}) is not above base {base}")
        lo = start - base - 1
        if lo > len(out):
            out.extend(bytes(lo - len(out)))
        hi = end - base - 1
        if hi > len(out):
            out.extend(bytes(hi - len(out)))
        out[lo:hi] = b"\x01" * (hi - lo)
    return bytes(out)


def encode_ranges(base: int, ranges: Iterable[tuple[int, int]]) -> str:
    """:func:`encode` of completed half-open ranges."""
    return encode(base, ranges_to_completed(base, ranges))


def _b85_len(payload_len: int) -> int:
    return (payload_len * 5 + 3) // 4


def encoded_size_bound(base: int, span: int, transitions: int) -> int:
    """An upper bound of ``len(encode(base, completed))`` for any ``completed`` of at most
    ``span`` offsets with at most ``transitions`` changes between completed and incomplete
    (counting the start, incomplete at ``base``): the smaller of the raw run-length and raw
    bitmap encodings' worst cases (the encoder never writes more than its raw candidates)."""
    head = varint_size(base)
    vs = varint_size(span)
    rl = head + (transitions + 1) * vs
    bm = head + varint_size(span) + (span + 7) // 8
    return len(PREFIX) + 1 + _b85_len(min(rl, bm))


def span_always_fitting(max_bytes: int) -> int:
    """The largest ``span`` whose :func:`encoded_size_bound` stays within ``max_bytes`` for any
    base and any number of transitions (the raw bitmap's worst case, with varints of the
    largest 64-bit values); -1 when none does."""
    widest = varint_size(2**64 - 1)
    low, high = -1, max_bytes * 8
    while low < high:  # the bound grows with span: the largest one that fits
        middle = (low + high + 1) // 2
        bitmap = widest + varint_size(middle) + (middle + 7) // 8
        if len(PREFIX) + 1 + _b85_len(bitmap) <= max_bytes:
            low = middle
        else:
            high = middle - 1
    return low


def fits(metadata: str, max_bytes: int) -> bool:
    """Whether ``metadata`` fits a broker's ``offset.metadata.max.bytes`` (the broker counts
    the string's characters; ours are ASCII)."""
    return len(metadata) <= max_bytes


# -- decoding ------------------------------------------------------------------------------


def decode(
    metadata: str | None,
    committed_offset: int | None = None,
    *,
    max_span: int = DEFAULT_MAX_SPAN,
) -> OffsetMap | None:
    """The map in ``metadata``; None when the string is not a map of ours (empty, written by
    another application). Raises :class:`~kafka_actors.errors.OffsetMapError` for a map of
    ours that cannot be read, is wider than ``max_span`` offsets, or was written for another
    offset than ``committed_offset`` (when given)."""
    if not metadata or not metadata.startswith(_FAMILY):
        return None
    if not metadata.startswith(PREFIX):
        raise OffsetMapError(f"offset map of an unknown version ({metadata[:5]!r})")
    if len(metadata) > MAX_METADATA_CHARS:
        raise OffsetMapError(f"offset map of {len(metadata)} characters is too long")
    if len(metadata) < len(PREFIX) + 1:
        raise OffsetMapError("offset map without its kind")
    kind = metadata[len(PREFIX)]
    if kind not in _KINDS:
        raise OffsetMapError(f"offset map of an unknown kind {kind!r}")
    try:
        payload = base64.b85decode(metadata[len(PREFIX) + 1 :].encode("ascii"))
    except (ValueError, UnicodeEncodeError, binascii.Error) as exc:
        raise OffsetMapError(f"offset map is not base85: {exc}") from None
    if kind in "rb":
        # A raw payload of a map at most max_span wide is at most its two leading varints
        # and max_span bytes (a run of L offsets takes at most L bytes; a bitmap 1/8 byte per
        # offset): the inflater stops there.
        limit = 2 * _VARINT_MAX_BYTES + max_span + 1
        inflater = zlib.decompressobj()
        try:
            payload = inflater.decompress(payload, limit)
        except zlib.error as exc:
            raise OffsetMapError(f"offset map does not decompress: {exc}") from None
        if inflater.unconsumed_tail or not inflater.eof:
            raise OffsetMapError("offset map decompresses past its bound or is truncated")
    base, pos = _get_varint(payload, 0)
    if committed_offset is not None and base != committed_offset:
        raise OffsetMapError(
            f"offset map written for offset {base}, not the committed {committed_offset}",
            offset=committed_offset,
        )
    if kind in "Rr":
        ranges = _decode_runs(base, payload, pos, max_span)
    else:
        ranges = _decode_bitmap(base, payload, pos, max_span)
    return OffsetMap(base, tuple(ranges))


def _decode_runs(base: int, payload: bytes, pos: int, max_span: int) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    cursor = base + 1
    completed = False
    while pos < len(payload):
        run, pos = _get_varint(payload, pos)
        if cursor + run - base - 1 > max_span:
            raise OffsetMapError(f"offset map wider than {max_span} offsets")
        if completed:
            if run == 0:
                raise OffsetMapError("offset map with an empty completed run")
            ranges.append((cursor, cursor + run))
        elif run == 0 and ranges:
            raise OffsetMapError("offset map with an empty incomplete run")
        cursor += run
        completed = not completed
    return ranges


def _decode_bitmap(base: int, payload: bytes, pos: int, max_span: int) -> list[tuple[int, int]]:
    nbits, pos = _get_varint(payload, pos)
    if nbits > max_span:
        raise OffsetMapError(f"offset map wider than {max_span} offsets")
    body = payload[pos:]
    if len(body) != (nbits + 7) // 8:
        raise OffsetMapError(
            f"offset map bitmap of {len(body)} bytes for {nbits} bits", offset=base
        )
    if nbits == 0:
        return []
    bits = format(int.from_bytes(body, "little"), f"0{len(body) * 8}b")[::-1][:nbits]
    ranges: list[tuple[int, int]] = []
    pos = 0
    while True:
        start = bits.find("1", pos)
        if start < 0:
            break
        end = bits.find("0", start)
        if end < 0:
            end = nbits
        ranges.append((base + 1 + start, base + 1 + end))
        pos = end
    return ranges


def completed_ranges(base: int, completed: Sequence[int]) -> list[tuple[int, int]]:
    """The completed ranges of a 0/1 sequence (for tests and health)."""
    data = bytes(completed)
    runs = _runs(_trim(data))
    out: list[tuple[int, int]] = []
    cursor = base + 1
    for i, run in enumerate(runs):
        if i % 2 == 1:
            out.append((cursor, cursor + run))
        cursor += run
    return out
