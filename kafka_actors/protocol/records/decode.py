"""Record batch (magic v2) decoding for one partition of a Fetch response.

Owns: turning the ``records`` bytes of one fetched partition into columnar results
(:class:`DecodedRecords`), CRC32C verification, decompression (gzip, snappy raw and
xerial-framed, lz4 frame, zstd), control-batch skipping, read_committed filtering of
aborted transactions, and the next fetch offset / bytes consumed bookkeeping.

May touch: nothing but its arguments. Pure code: no sockets, no clocks, no logging. The
native record path (the C extension :mod:`kafka_actors.protocol.records._crecords`, built by
installing the package when a C compiler is present) does the batch loop and the creation of
:class:`ConsumerRecord` values in C, producing exactly what this module's pure-Python path
produces; ``IMPLEMENTATION`` says which path is in use (``"native"`` or ``"python"``) and
``NATIVE_UNAVAILABLE_REASON`` why not native. ``KAFKA_ACTORS_PURE_PYTHON=1`` forces the pure
path. Both paths hand compressed sections to :func:`_decompress`.
Raises only :mod:`kafka_actors.errors` types (``CorruptRecordError``,
``UnsupportedRecordFormatError``); low-level exceptions (IndexError, struct.error,
cramjam errors, UnicodeDecodeError) never leak.

Batch layout (v2), offsets from the batch start::

    0  baseOffset int64        8  batchLength int32      12 partitionLeaderEpoch int32
    16 magic int8              17 crc uint32 (CRC32C of bytes 21..end)
    21 attributes int16        23 lastOffsetDelta int32  27 baseTimestamp int64
    35 maxTimestamp int64      43 producerId int64       51 producerEpoch int16
    53 baseSequence int32      57 recordCount int32      61 records...

The hot loop decodes a whole batch at a time into parallel lists, inlines the one- and
two-byte zigzag varint cases with a lookup table, and builds no per-record objects other
than the key/value bytes and header tuples; :class:`ConsumerRecord` values are made on
demand by iterating a :class:`DecodedRecords`, or while decoding with ``materialize=True``
(the consumer's way: on the native path no per-record column list is filled then).
"""

from __future__ import annotations

import bisect
import heapq
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from functools import partial
from itertools import repeat
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, cast, overload

from typing_extensions import TypeVar

from kafka_actors.errors import (
    CorruptRecordError,
    DecompressedBatchTooLargeError,
    KafkaError,
    UnsupportedRecordFormatError,
)

if TYPE_CHECKING:
    import cramjam

__all__ = [
    "BATCH_HEADER_SIZE",
    "DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES",
    "AbortedTransaction",
    "CompressionType",
    "ConsumerRecord",
    "ControlRecordType",
    "DecodedRecords",
    "Header",
    "IsolationLevel",
    "RecordSequence",
    "TimestampType",
    "decode_records",
    "slice_records",
]


class CompressionType(IntEnum):
    """The codec in bits 0-2 of the batch attributes (Kafka's CompressionType ids)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    """Kafka's TimestampType (attribute bit 3); NO_TIMESTAMP_TYPE is for magic v0 only."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class IsolationLevel(IntEnum):
    """Fetch isolation level, with the ids Kafka's Fetch request uses."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class ControlRecordType(IntEnum):
    """The type field of a control record's key."""

    ABORT = 0
    COMMIT = 1


class AbortedTransaction(NamedTuple):
    """An aborted transaction as listed in a Fetch response partition."""

    producer_id: int
    first_offset: int


class _AbortedTransactionLike(Protocol):
    """Anything with ``producer_id`` and ``first_offset`` (kio's Fetch response type too)."""

    @property
    def producer_id(self) -> int: ...

    @property
    def first_offset(self) -> int: ...


Header = tuple[str, bytes | None]
Headers = tuple[Header, ...]


#: The type of a record's key and of its value: what the consumer's deserializer returns;
#: ``bytes | None`` (the raw bytes, None for a null key or value) when there is none, so a
#: bare ``ConsumerRecord`` is a record as decoded. Covariant: a record is immutable.
K_co = TypeVar("K_co", covariant=True, default=bytes | None)
V_co = TypeVar("V_co", covariant=True, default=bytes | None)


class ConsumerRecord(NamedTuple, Generic[K_co, V_co]):
    """One record as handed to the user (Java's ConsumerRecord, timestamps in ms).

    Generic in the key and value types (``ConsumerRecord[str, Any]``), which the consumer
    infers from its deserializers; subscripting is for type checkers only: every record is a
    plain ``ConsumerRecord`` tuple at run time (the native path builds them as such)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: K_co
    value: V_co
    headers: Headers
    leader_epoch: int | None


class RecordSequence(Protocol):
    """``DecodedRecords.materialized`` on the native path (``_crecords.LazyRecords``): a
    read-only sequence whose records are built when read (an index, a slice as a list, one
    at a time when iterated)."""

    def __len__(self) -> int: ...

    @overload
    def __getitem__(self, index: int, /) -> ConsumerRecord: ...

    @overload
    def __getitem__(self, index: slice, /) -> list[ConsumerRecord]: ...

    def __iter__(self) -> Iterator[ConsumerRecord]: ...

    def offset_at(self, index: int, /) -> int: ...


@dataclass(slots=True, eq=False)
class DecodedRecords:
    """The data records of one partition's fetched bytes, in columns.

    Record ``i`` has ``offsets[i]``, ``timestamps[i]``, ``keys[i]``, ``values[i]`` and
    ``headers[i]``. Batches are contiguous spans: batch ``j`` covers record indexes
    ``batch_ends[j-1] .. batch_ends[j]-1`` (0 for ``j == 0``) and has
    ``batch_timestamp_types[j]`` and ``batch_leader_epochs[j]``. Batches that yielded no
    records (control, aborted, below the fetch offset, empty) have no span.

    ``next_fetch_offset`` is the offset after the last complete batch (or the fetch offset
    if no batch was complete); ``bytes_consumed`` counts the bytes of complete batches, so
    ``bytes_consumed < len(data)`` means a trailing truncated batch was ignored.

    ``materialized`` (decoding with ``materialize=True``): the records as ConsumerRecords
    (on the pure path a list built while decoding; on the native path a
    :class:`RecordSequence` that keeps each record as spans into the fetched bytes and
    builds it when read, so records are created when a poll hands them out, and iterating
    builds one at a time); the five record columns are then empty, the batch columns are
    as above.

    ``native_columns`` (decoding with ``columnar=True`` on the native path): the records as
    Arrow buffers filled in C, no Python object per record (the layout is ``_crecords.c``'s
    ``arrow_export``; :mod:`kafka_actors.protocol.records.arrow` makes a ``pyarrow.RecordBatch`` of
    them, cached in ``arrow``); the five record columns are then empty, the batch columns are
    as above. On the pure path ``columnar=True`` fills the record columns as usual.

    ``error`` is set only when decoding with ``partial_on_error=True`` met a bad batch: the
    columns then hold the records of the batches before it, ``next_fetch_offset`` is the
    offset after the last good batch (where the bad one starts), and the error is to be
    raised once those records are consumed (as Java's consumer does).
    """

    topic: str
    partition: int
    next_fetch_offset: int
    bytes_consumed: int = 0
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[Headers] = field(default_factory=list)
    batch_ends: list[int] = field(default_factory=list)
    batch_timestamp_types: list[TimestampType] = field(default_factory=list)
    batch_leader_epochs: list[int | None] = field(default_factory=list)
    error: KafkaError | None = None
    materialized: list[ConsumerRecord] | RecordSequence | None = None
    native_columns: tuple[Any, ...] | None = None
    arrow: Any = None

    def __len__(self) -> int:
        if self.native_columns is not None:
            return int(self.native_columns[0])
        return len(self.offsets) if self.materialized is None else len(self.materialized)

    def offset_at(self, index: int) -> int:
        """The offset of record ``index`` (whichever form the records are in)."""
        if self.native_columns is not None:
            if not 0 <= index < len(self):
                raise IndexError(index)
            return int(_INT64.unpack_from(self.native_columns[1], 8 * index)[0])
        if self.materialized is not None:
            if isinstance(self.materialized, list):
                return self.materialized[index].offset
            return self.materialized.offset_at(index)
        return self.offsets[index]

    def leader_epoch_at(self, index: int) -> int | None:
        """The leader epoch of the batch record ``index`` came in."""
        return self.batch_leader_epochs[bisect.bisect_right(self.batch_ends, index)]

    def __iter__(self) -> Iterator[ConsumerRecord]:
        if self.materialized is not None:
            return iter(self.materialized)
        return iter(slice_records(self, 0, len(self)))

    def records(self) -> list[ConsumerRecord]:
        """All records as :class:`ConsumerRecord` values."""
        return slice_records(self, 0, len(self))

    def own_records(self, start: int) -> None:
        """Let go of the fetched bytes: on the native path the materialized records are spans
        into them (a view of a whole received frame: :func:`decode_records`). The records
        from ``start`` on are built now; those before it (handed out already) are not kept,
        and must not be read again. Nothing to do for records in columns or already built."""
        records = self.materialized
        if records is None or isinstance(records, list):
            return
        kept = [cast(ConsumerRecord, None)] * start + records[start:]
        self.materialized = kept


def slice_records(decoded: DecodedRecords, start: int, end: int) -> list[ConsumerRecord]:
    """Records ``start``..``end-1`` of ``decoded`` as ConsumerRecords."""
    if decoded.materialized is not None:
        return decoded.materialized[start:end]
    if decoded.native_columns is not None:
        return _records_from_native(decoded, start, end)
    return _slice_columns(decoded, start, end)


def _records_from_native(decoded: DecodedRecords, start: int, end: int) -> list[ConsumerRecord]:
    """Records ``start``..``end-1`` of columnar-decoded records as ConsumerRecords (a poll
    after a columnar poll took part of the same fetched data: not the hot path)."""
    assert decoded.native_columns is not None
    columns = decoded.native_columns
    (count, offsets, timestamps, ts_types, header_offsets, _nh, *binary) = columns[:18]
    start, end = max(start, 0), min(end, count)
    offs = memoryview(offsets).cast("q")
    stamps = memoryview(timestamps).cast("q")
    types = memoryview(ts_types).cast("i")
    hoffs = memoryview(header_offsets).cast("i")
    keys, values, hkeys, hvalues = (
        _BinaryColumn(binary[i], binary[i + 1], binary[i + 2]) for i in range(0, 12, 3)
    )
    out: list[ConsumerRecord] = []
    for i in range(start, end):
        headers = tuple(
            (hkeys.get(h).decode("utf-8"), hvalues.get(h))  # type: ignore[union-attr]
            for h in range(hoffs[i], hoffs[i + 1])
        )
        out.append(
            ConsumerRecord(
                decoded.topic,
                decoded.partition,
                offs[i],
                stamps[i] // 1000,
                TimestampType(types[i]),
                keys.get(i),
                values.get(i),
                headers,
                decoded.leader_epoch_at(i),
            )
        )
    return out


class _BinaryColumn:
    """One binary column of ``native_columns``: validity bitmap (None: no nulls), int32
    offsets, data."""

    def __init__(self, validity: bytes | None, offsets: bytes, data: bytes) -> None:
        self.validity = validity
        self.offsets = memoryview(offsets).cast("i")
        self.data = data

    def get(self, i: int) -> bytes | None:
        if self.validity is not None and not (self.validity[i >> 3] >> (i & 7)) & 1:
            return None
        return self.data[self.offsets[i] : self.offsets[i + 1]]


def _slice_records_python(decoded: DecodedRecords, start: int, end: int) -> list[ConsumerRecord]:
    """Records ``start``..``end-1`` of ``decoded`` as ConsumerRecords (the pure path).

    Built with C-level iterators only (zip over column slices, ``tuple.__new__``): no Python
    frame per record (ConsumerRecord's own constructor is a Python function)."""
    out: list[ConsumerRecord] = []
    extend = out.extend
    ends = decoded.batch_ends
    end = min(end, len(decoded.offsets))
    batch = bisect.bisect_right(ends, start)
    topic = repeat(decoded.topic)
    partition = repeat(decoded.partition)
    i = start
    while i < end:
        batch_end = min(ends[batch], end)
        extend(
            map(
                _make_record,
                zip(
                    topic,
                    partition,
                    decoded.offsets[i:batch_end],
                    decoded.timestamps[i:batch_end],
                    repeat(decoded.batch_timestamp_types[batch]),
                    decoded.keys[i:batch_end],
                    decoded.values[i:batch_end],
                    decoded.headers[i:batch_end],
                    repeat(decoded.batch_leader_epochs[batch]),
                ),
            )
        )
        i = batch_end
        batch += 1
    return out


_make_record = partial(tuple.__new__, ConsumerRecord)


BATCH_HEADER_SIZE = 61
_LOG_OVERHEAD = 12  # baseOffset + batchLength
_LEGACY_RECORD_OVERHEAD_V0 = 14  # smallest legal batchLength of any magic (Java's check)
_CRC_START = 21
_INT64_MAX = (1 << 63) - 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_INT64 = struct.Struct("=q")
_CONTROL_KEY = struct.Struct(">hh")

_ATTR_COMPRESSION_MASK = 0x07
_ATTR_TIMESTAMP_TYPE = 0x08
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16  # magic (8) + version int32 + compatible version int32

# Zigzag-decoded values of every one- and two-byte varint, indexed by the raw 14-bit value
# ``(b0 & 0x7f) | (b1 << 7)`` (or ``b0`` for one byte).
# (the even raw values are 0, 1, 2 ..., the odd ones -1, -2, -3 ...: filled by slices, four
# times faster than computing each at import)
_ZIGZAG_14 = [0] * (1 << 14)
_ZIGZAG_14[0::2] = range(1 << 13)
_ZIGZAG_14[1::2] = range(-1, -(1 << 13) - 1, -1)

_NO_HEADERS: Headers = ()
# Misses after which a batch whose header blocks are mostly distinct stops caching them.
_HEADER_CACHE_PROBATION = 32


class _Corrupt(Exception):
    """Internal: the batch being decoded is malformed; turned into CorruptRecordError."""


# Low-level exceptions that mean "malformed batch" (CorruptRecordError) on both paths.
_MALFORMED = (IndexError, struct.error, UnicodeDecodeError, ValueError, OverflowError)


def _read_varint_slow(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode a zigzag varint/varlong of any length (at most 10 bytes) at ``pos``."""
    shift = 0
    raw = 0
    for i in range(10):
        b = buf[pos + i]
        if i == 9 and b > 1:  # past 64 bits (Java's varlong limit; the native path's too)
            raise _Corrupt("varint longer than 10 bytes" if b & 0x80 else "varint past 64 bits")
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos + i + 1
        shift += 7
    raise _Corrupt("varint longer than 10 bytes")


class _TooLarge(_Corrupt):
    """Internal: the batch decompresses past the bound; turned into
    DecompressedBatchTooLargeError."""


#: Default bound on one batch's decompressed records section (``max.decompressed.batch.bytes``).
DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES = 256 * 1024 * 1024

_LZ4_MAGIC = 0x184D2204
_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE_MASK = 0xFFFFFFF0
_LZ4_SKIPPABLE = 0x184D2A50  # also zstd's skippable frames
_LZ4_BLOCK_MAX = (0, 0, 0, 0, 64 << 10, 256 << 10, 1 << 20, 4 << 20)
_ZSTD_BLOCK_MAX = 128 << 10  # a zstd block never decodes to more (format limit)


def _too_large(codec: int, size: int, max_size: int, what: str) -> _TooLarge:
    return _TooLarge(
        f"{CompressionType(codec).name} batch {what} {size} bytes, more than the bound of "
        f"{max_size} (max.decompressed.batch.bytes)"
    )


def _uvarint32(data: bytes | memoryview, pos: int) -> int:
    """Snappy's length preamble: an unsigned varint of at most 5 bytes."""
    value = 0
    for i in range(5):
        if pos + i >= len(data):
            raise _Corrupt("truncated snappy length")
        b = data[pos + i]
        value |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            return value
    raise _Corrupt("bad snappy length")


def _snappy_raw(data: bytes | memoryview, budget: int, max_size: int) -> bytes:
    """Raw snappy: its preamble declares the exact decompressed size (checked before any
    allocation; the decoder refuses data that does not match it)."""
    declared = _uvarint32(data, 0)
    if declared > budget:
        raise _too_large(CompressionType.SNAPPY, max_size - budget + declared, max_size, "declares")
    import cramjam

    return bytes(cramjam.snappy.decompress_raw(data))


def _unxerial(data: bytes | memoryview, max_size: int) -> bytes:
    """Decompress snappy in the xerial (snappy-java stream) framing, at most ``max_size``."""
    out = []
    pos = _XERIAL_HEADER_SIZE
    end = len(data)
    budget = max_size
    while pos < end:
        if pos + 4 > end:
            raise _Corrupt("truncated xerial snappy block length")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise _Corrupt("bad xerial snappy block length")
        block = _snappy_raw(data[pos : pos + n], budget, max_size)
        budget -= len(block)
        out.append(block)
        pos += n
    return b"".join(out)


def _gunzip(payload: bytes | memoryview, max_size: int) -> bytes:
    """gzip (one or more members), streamed: never more than ``max_size + 1`` bytes out."""
    out: list[bytes] = []
    size = 0
    data: bytes | memoryview = payload
    while data:
        inflater = zlib.decompressobj(31)
        chunk = inflater.decompress(data, max_size - size + 1)
        size += len(chunk)
        if size > max_size:
            raise _too_large(CompressionType.GZIP, size, max_size, "expands past")
        out.append(chunk)
        if not inflater.eof:
            raise _Corrupt("GZIP decompression failed: truncated stream")
        data = inflater.unused_data
    if not out:
        raise _Corrupt("GZIP decompression failed: empty stream")
    return out[0] if len(out) == 1 else b"".join(out)


def _lz4_bound(data: bytes | memoryview, limit: int) -> int:
    """Most bytes an LZ4 frame sequence can decode to, from its block headers (each block
    decodes to at most the frame's block maximum size, which the decoder enforces;
    uncompressed blocks to their size). Stops counting once past ``limit``."""
    total = 0
    pos = 0
    end = len(data)
    while pos < end:
        if end - pos < 4:
            raise _Corrupt("LZ4 decompression failed: truncated frame")
        (magic,) = struct.unpack_from("<I", data, pos)
        if magic & _SKIPPABLE_MASK == _LZ4_SKIPPABLE:
            if end - pos < 8:
                raise _Corrupt("LZ4 decompression failed: truncated skippable frame")
            (skip,) = struct.unpack_from("<I", data, pos + 4)
            pos += 8 + skip
            continue
        if magic != _LZ4_MAGIC or end - pos < 7:
            raise _Corrupt("LZ4 decompression failed: not an LZ4 frame")
        flags = data[pos + 4]
        block_max = _LZ4_BLOCK_MAX[(data[pos + 5] >> 4) & 0x07]
        if not block_max:
            raise _Corrupt("LZ4 decompression failed: bad block maximum size")
        pos += 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0) + 1
        block_checksum = 4 if flags & 0x10 else 0
        while True:
            if end - pos < 4:
                raise _Corrupt("LZ4 decompression failed: truncated block")
            (size,) = struct.unpack_from("<I", data, pos)
            pos += 4
            if size == 0:
                break
            stored = size & 0x7FFFFFFF
            total += stored if size & 0x80000000 else block_max
            if total > limit:
                return total
            pos += stored + block_checksum
        pos += 4 if flags & 0x04 else 0
    return total


def _zstd_bound(data: bytes | memoryview, limit: int) -> int:
    """Most bytes a zstd frame sequence can decode to, from its block headers (raw and RLE
    blocks state their size; a compressed block decodes to at most 128 KiB, which the decoder
    enforces). Stops counting once past ``limit``."""
    total = 0
    pos = 0
    end = len(data)
    while pos < end:
        if end - pos < 4:
            raise _Corrupt("ZSTD decompression failed: truncated frame")
        (magic,) = struct.unpack_from("<I", data, pos)
        if magic & _SKIPPABLE_MASK == _LZ4_SKIPPABLE:
            if end - pos < 8:
                raise _Corrupt("ZSTD decompression failed: truncated skippable frame")
            (skip,) = struct.unpack_from("<I", data, pos + 4)
            pos += 8 + skip
            continue
        if magic != _ZSTD_MAGIC or end - pos < 5:
            raise _Corrupt("ZSTD decompression failed: not a zstd frame")
        descriptor = data[pos + 4]
        fcs_flag = descriptor >> 6
        single_segment = descriptor & 0x20
        pos += 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03]
        pos += (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
        while True:
            if end - pos < 3:
                raise _Corrupt("ZSTD decompression failed: truncated block")
            header = data[pos] | (data[pos + 1] << 8) | (data[pos + 2] << 16)
            pos += 3
            kind = (header >> 1) & 0x03
            size = header >> 3
            if kind == 0:  # raw
                total += size
                pos += size
            elif kind == 1:  # RLE: one byte repeated size times
                total += size
                pos += 1
            elif kind == 2:
                total += _ZSTD_BLOCK_MAX
                pos += size
            else:
                raise _Corrupt("ZSTD decompression failed: reserved block type")
            if total > limit:
                return total
            if header & 0x01:
                break
        pos += 4 if descriptor & 0x04 else 0
    return total


def _decompress_into_bound(codec: int, payload: bytes | memoryview, max_size: int) -> bytes:
    """Decompress into a buffer of ``max_size + 1`` bytes that the kernel fills on first touch,
    for batches whose headers allow more than the bound (a legitimately high ratio, or a bomb):
    output past the buffer is an error, so nothing beyond the bound is ever allocated."""
    import mmap

    import cramjam

    buffer = mmap.mmap(-1, max_size + 1)
    try:
        try:
            if codec == CompressionType.LZ4:
                size = cramjam.lz4.decompress_into(payload, buffer)
            else:
                size = cramjam.zstd.decompress_into(payload, buffer)
        except Exception as exc:
            # cramjam's error for output that does not fit the buffer (checked by
            # tests/records/test_decompression_bound.py; any other message still ends as a
            # CorruptRecordError, and nothing past the buffer is written either way).
            if "failed to write whole buffer" in str(exc):
                raise _too_large(codec, max_size + 1, max_size, "expands past") from None
            raise
        if size > max_size:
            raise _too_large(codec, size, max_size, "expands to")
        return buffer[:size]
    finally:
        buffer.close()


def _decompress(codec: int, payload: bytes | memoryview, max_size: int) -> bytes | cramjam.Buffer:
    """Decompress a batch's records section, at most ``max_size`` bytes of it: bytes, or
    cramjam's buffer as it is (LZ4, zstd: not copied again; the native path's records keep
    it, the pure path takes it as bytes).

    Nothing past ``max_size`` is allocated: snappy's declared sizes are checked first, gzip is
    streamed with an output limit, LZ4 and zstd are decompressed in one step when their block
    headers prove the output fits and into a bounded buffer otherwise. Raises the internal
    corrupt error (``_TooLarge`` past the bound), which the caller turns into
    CorruptRecordError / DecompressedBatchTooLargeError naming topic, partition and offset.
    """
    import cramjam  # (here: a consumer of uncompressed batches never needs it)

    try:
        if codec == CompressionType.LZ4:
            if _lz4_bound(payload, max_size) <= max_size:
                return cramjam.lz4.decompress(payload)
            return _decompress_into_bound(codec, payload, max_size)
        if codec == CompressionType.ZSTD:
            if _zstd_bound(payload, max_size) <= max_size:
                return cramjam.zstd.decompress(payload)
            return _decompress_into_bound(codec, payload, max_size)
        if codec == CompressionType.GZIP:
            return _gunzip(payload, max_size)
        if codec == CompressionType.SNAPPY:
            if payload[:8] == _XERIAL_MAGIC:
                return _unxerial(payload, max_size)
            return _snappy_raw(payload, max_size, max_size)
    except _Corrupt:
        raise
    except Exception as exc:  # cramjam raises DecompressionError, ValueError, TypeError...
        raise _Corrupt(f"{CompressionType(codec).name} decompression failed: {exc}") from exc
    raise _Corrupt(f"unknown compression codec id {codec}")


def _decode_batch_records(
    buf: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    out: DecodedRecords,
) -> None:
    """Append the ``count`` records in ``buf[pos:end]`` to the columns of ``out``.

    The caller trims records below the fetch offset and applies LogAppendTime afterwards, so
    that the per-record loop has no branch for either.
    """
    zz = _ZIGZAG_14
    slow = _read_varint_slow
    offsets_append = out.offsets.append
    timestamps_append = out.timestamps.append
    keys_append = out.keys.append
    values_append = out.values.append
    headers_append = out.headers.append
    no_headers = _NO_HEADERS
    parse_headers = _parse_headers
    header_cache: dict[bytes, Headers] = {}
    header_cache_get = header_cache.get
    caching = True
    misses = 0
    n_headed = 0
    for _ in range(count):
        # record length
        b = buf[pos]
        if b < 0x80:
            record_end = pos + 1 + zz[b]
        else:
            b1 = buf[pos + 1]
            if b1 < 0x80:
                record_end = pos + 2 + zz[(b & 0x7F) | (b1 << 7)]
            else:
                length, pos = slow(buf, pos)
                record_end = pos + length
                pos -= 2  # undo the two-byte step below
            pos += 1
        pos += 2  # one-byte length + attributes (unused)
        # timestamp delta (varlong)
        b = buf[pos]
        if b < 0x80:
            timestamps_append(base_timestamp + zz[b])
            pos += 1
        else:
            b1 = buf[pos + 1]
            if b1 < 0x80:
                timestamps_append(base_timestamp + zz[(b & 0x7F) | (b1 << 7)])
                pos += 2
            else:
                n, pos = slow(buf, pos)
                timestamps_append(base_timestamp + n)
        # offset delta
        b = buf[pos]
        if b < 0x80:
            offsets_append(base_offset + zz[b])
            pos += 1
        else:
            b1 = buf[pos + 1]
            if b1 < 0x80:
                offsets_append(base_offset + zz[(b & 0x7F) | (b1 << 7)])
                pos += 2
            else:
                n, pos = slow(buf, pos)
                offsets_append(base_offset + n)
        # key
        b = buf[pos]
        if b == 1:  # -1: null
            keys_append(None)
            pos += 1
        else:
            if b < 0x80:
                n = zz[b]
                pos += 1
            else:
                b1 = buf[pos + 1]
                if b1 < 0x80:
                    n = zz[(b & 0x7F) | (b1 << 7)]
                    pos += 2
                else:
                    n, pos = slow(buf, pos)
            if n < 0:
                raise _Corrupt(f"bad key length {n}")
            keys_append(buf[pos : pos + n])
            pos += n
        # value
        b = buf[pos]
        if b == 1:  # -1: null
            values_append(None)
            pos += 1
        else:
            if b < 0x80:
                n = zz[b]
                pos += 1
            else:
                b1 = buf[pos + 1]
                if b1 < 0x80:
                    n = zz[(b & 0x7F) | (b1 << 7)]
                    pos += 2
                else:
                    n, pos = slow(buf, pos)
            if n < 0:
                raise _Corrupt(f"bad value length {n}")
            values_append(buf[pos : pos + n])
            pos += n
        # headers: the last field, so the header block is buf[pos:record_end]. Producers
        # often repeat the same headers on every record: parse each distinct block once.
        if buf[pos] == 0:
            headers_append(no_headers)
            pos += 1
            if pos != record_end:
                raise _Corrupt(f"record size does not match its fields (at byte {record_end})")
        elif caching:
            block = buf[pos:record_end]
            headers = header_cache_get(block)
            if headers is None:
                headers = header_cache[block] = parse_headers(buf, pos, record_end)
                misses += 1
                if misses == _HEADER_CACHE_PROBATION and len(header_cache) * 2 > n_headed:
                    caching = False  # mostly distinct header blocks: stop paying for the cache
            headers_append(headers)
            n_headed += 1
            pos = record_end
        else:  # distinct header blocks: parse inline (as _parse_headers does)
            b = buf[pos]
            if b < 0x80:
                n = zz[b]
                pos += 1
            else:
                n, pos = slow(buf, pos)
            if n < 0 or n > record_end - pos:
                raise _Corrupt(f"bad header count {n}")
            hl: list[Header] = []
            for _h in range(n):
                b = buf[pos]
                if b < 0x80:
                    size = zz[b]
                    pos += 1
                else:
                    size, pos = slow(buf, pos)
                key_end = pos + size
                if size < 0 or key_end > record_end:
                    raise _Corrupt(f"bad header key length {size}")
                b = buf[key_end]
                if b == 1:
                    hl.append((buf[pos:key_end].decode("utf-8", "replace"), None))
                    pos = key_end + 1
                    continue
                if b < 0x80:
                    size = zz[b]
                    value_start = key_end + 1
                else:
                    size, value_start = slow(buf, key_end)
                if size < 0:
                    raise _Corrupt(f"bad header value length {size}")
                hl.append(
                    (
                        buf[pos:key_end].decode("utf-8", "replace"),
                        buf[value_start : value_start + size],
                    )
                )
                pos = value_start + size
            headers_append(tuple(hl))
            if pos != record_end:
                raise _Corrupt(f"record size does not match its fields (at byte {record_end})")
    if pos != end:
        raise _Corrupt(f"{end - pos} bytes left after the last of {count} records")


def _parse_headers(buf: bytes, pos: int, end: int) -> Headers:
    """Parse the header block ``buf[pos:end]`` (count, then key/value pairs) exactly."""
    zz = _ZIGZAG_14
    b = buf[pos]
    if b < 0x80:
        n = zz[b]
        pos += 1
    else:
        n, pos = _read_varint_slow(buf, pos)
    if n < 0 or n > end - pos:
        raise _Corrupt(f"bad header count {n}")
    out: list[Header] = []
    for _ in range(n):
        b = buf[pos]
        if b < 0x80:
            size = zz[b]
            pos += 1
        else:
            size, pos = _read_varint_slow(buf, pos)
        if size < 0 or pos + size > end:
            raise _Corrupt(f"bad header key length {size}")
        key = buf[pos : pos + size].decode("utf-8", "replace")
        pos += size
        b = buf[pos]
        if b == 1:
            out.append((key, None))
            pos += 1
            continue
        if b < 0x80:
            size = zz[b]
            pos += 1
        else:
            size, pos = _read_varint_slow(buf, pos)
        if size < 0:
            raise _Corrupt(f"bad header value length {size}")
        out.append((key, buf[pos : pos + size]))
        pos += size
    if pos != end:
        raise _Corrupt(f"record size does not match its fields (at byte {end})")
    return tuple(out)


def _control_type(buf: bytes, pos: int, end: int) -> int | None:
    """The ControlRecordType id of the first record in ``buf[pos:end]``, if any."""
    if pos >= end:
        return None
    _length, pos = _read_varint_slow(buf, pos)
    pos += 1  # attributes
    _ts, pos = _read_varint_slow(buf, pos)
    _od, pos = _read_varint_slow(buf, pos)
    key_length, pos = _read_varint_slow(buf, pos)
    if key_length < 4 or pos + key_length > end:
        raise _Corrupt(f"bad control record key length {key_length}")
    _version, ctype = _CONTROL_KEY.unpack_from(buf, pos)
    return int(ctype)


def _readonly(data: bytes | bytearray | memoryview) -> bool:
    """``data`` is bytes or a read-only contiguous view: decoded in place, never written."""
    return isinstance(data, bytes) or (
        isinstance(data, memoryview) and data.readonly and data.c_contiguous
    )


def decode_records(
    data: bytes | bytearray | memoryview,
    topic: str,
    partition: int,
    *,
    fetch_offset: int = -1,
    check_crcs: bool = True,
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    aborted_transactions: Iterable[_AbortedTransactionLike] | None = None,
    partial_on_error: bool = False,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES,
    materialize: bool = False,
    columnar: bool = False,
) -> DecodedRecords:
    """Decode the record batches of one fetched partition.

    ``fetch_offset``: records below it are dropped (a fetch may return a batch that starts
    before the requested offset). ``aborted_transactions`` come from the Fetch response and
    matter only for READ_COMMITTED. A trailing truncated batch is ignored. Control batches
    are never returned. Raises ``CorruptRecordError`` (CRC mismatch or malformed batch,
    naming the batch's base offset) and ``UnsupportedRecordFormatError`` (magic v0/v1);
    with ``partial_on_error`` the error is returned in ``DecodedRecords.error`` instead,
    together with the records of the batches before the bad one. A compressed batch whose
    records section would decompress past ``max_decompressed_size`` bytes raises
    ``DecompressedBatchTooLargeError`` (a CorruptRecordError) without allocating past it.
    ``materialize``: the records as ConsumerRecords in ``DecodedRecords.materialized``
    rather than in columns. ``columnar`` (not with ``materialize``): on the native path, the
    records as Arrow buffers in ``DecodedRecords.native_columns``, no object per record.

    On the native path ``data`` is not copied when it is bytes or a read-only view (a
    received frame's): the materialized records are spans into it and keep it (and so the
    view's whole buffer) alive until they are dropped or own their bytes
    (:meth:`DecodedRecords.own_records`).
    """
    if materialize and columnar:
        raise ValueError("materialize and columnar exclude each other")
    out = DecodedRecords(topic, partition, next_fetch_offset=max(fetch_offset, 0))
    read_committed = isolation_level == IsolationLevel.READ_COMMITTED
    try:
        if _native is not None:
            if materialize:
                out.materialized = _native.LazyRecords()
            _native.decode_into(
                data if _readonly(data) else bytes(data),
                out,
                fetch_offset,
                check_crcs,
                read_committed,
                sorted((t.first_offset, t.producer_id) for t in aborted_transactions)
                if read_committed and aborted_transactions
                else [],
                partial(_decompress, max_size=max_decompressed_size),
                columnar,
            )
        else:
            _decode_into(
                data if isinstance(data, bytes) else bytes(data),
                out,
                fetch_offset,
                check_crcs,
                read_committed,
                aborted_transactions,
                max_decompressed_size,
                columnar,
            )
    except (CorruptRecordError, UnsupportedRecordFormatError) as exc:
        if not partial_on_error:
            raise
        _rollback(out)
        out.error = exc
    if materialize and out.materialized is None:  # the pure path: from its columns
        out.materialized = _slice_records_python(out, 0, len(out.offsets))
        out.offsets, out.timestamps, out.keys, out.values, out.headers = [], [], [], [], []
    return out


def _decode_into(
    buf: bytes,
    out: DecodedRecords,
    fetch_offset: int,
    check_crcs: bool,
    read_committed: bool,
    aborted_transactions: Iterable[_AbortedTransactionLike] | None,
    max_decompressed_size: int,
    columnar: bool = False,
) -> None:
    """Decode every complete batch of ``buf`` into ``out``; raises the typed errors.
    ``columnar``: also the checks of the native path's Arrow sink (``_check_columnar``)."""
    topic = out.topic
    partition = out.partition
    aborted_heap: list[tuple[int, int]] = []
    aborted_producers: set[int] = set()
    if read_committed and aborted_transactions:
        aborted_heap = [(t.first_offset, t.producer_id) for t in aborted_transactions]
        heapq.heapify(aborted_heap)
    total = len(buf)
    pos = 0
    unpack_header = _HEADER.unpack_from
    batch_ends = out.batch_ends
    next_fetch_offset = out.next_fetch_offset
    while total - pos >= _LOG_OVERHEAD:
        out.next_fetch_offset = next_fetch_offset
        out.bytes_consumed = pos
        base_offset, batch_length = struct.unpack_from(">qi", buf, pos)
        if batch_length < _LEGACY_RECORD_OVERHEAD_V0:
            raise CorruptRecordError(
                f"batch length {batch_length} is too small",
                topic=topic,
                partition=partition,
                offset=base_offset,
            )
        end = pos + _LOG_OVERHEAD + batch_length
        if end > total:
            break  # trailing truncated batch: normal, the next fetch gets it whole
        magic = buf[pos + 16]
        if magic != 2:
            if magic in (0, 1):
                raise UnsupportedRecordFormatError(
                    f"message format v{magic} is not supported",
                    topic=topic,
                    partition=partition,
                    offset=base_offset,
                )
            raise CorruptRecordError(
                f"invalid magic {magic}",
                topic=topic,
                partition=partition,
                offset=base_offset,
            )
        if end - pos < BATCH_HEADER_SIZE:
            raise CorruptRecordError(
                f"batch length {batch_length} is too small",
                topic=topic,
                partition=partition,
                offset=base_offset,
            )
        (
            _bo,
            _bl,
            leader_epoch,
            _magic,
            crc,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            _producer_epoch,
            _base_sequence,
            count,
        ) = unpack_header(buf, pos)
        if check_crcs and _crc32c(memoryview(buf)[pos + _CRC_START : end]) != crc:
            raise _batch_error(_Corrupt("CRC32C mismatch"), topic, partition, base_offset)
        if count < 0 or last_offset_delta < 0:
            corrupt = _Corrupt(f"bad record count {count} / last offset delta")
            raise _batch_error(corrupt, topic, partition, base_offset)
        last_offset = base_offset + last_offset_delta
        if last_offset >= _INT64_MAX:  # next_fetch_offset would not fit Kafka's int64
            corrupt = _Corrupt("last offset overflows int64")
            raise _batch_error(corrupt, topic, partition, base_offset)
        is_control = attributes & _ATTR_CONTROL
        try:
            codec = attributes & _ATTR_COMPRESSION_MASK
            records_start = pos + BATCH_HEADER_SIZE
            if read_committed and producer_id >= 0:
                while aborted_heap and aborted_heap[0][0] <= last_offset:
                    aborted_producers.add(heapq.heappop(aborted_heap)[1])
                if is_control:
                    if codec:
                        cbuf = bytes(
                            _decompress(
                                codec, memoryview(buf)[records_start:end], max_decompressed_size
                            )
                        )
                        ctype = _control_type(cbuf, 0, len(cbuf))
                    else:
                        ctype = _control_type(buf, records_start, end)
                    if ctype == ControlRecordType.ABORT:
                        aborted_producers.discard(producer_id)
                elif attributes & _ATTR_TRANSACTIONAL and producer_id in aborted_producers:
                    is_control = 1  # skip like a control batch: aborted data
            if not is_control and last_offset >= fetch_offset and count:
                if codec:
                    rbuf = bytes(
                        _decompress(
                            codec, memoryview(buf)[records_start:end], max_decompressed_size
                        )
                    )
                    rpos, rend = 0, len(rbuf)
                else:
                    rbuf, rpos, rend = buf, records_start, end
                first = len(out.offsets)
                _decode_batch_records(rbuf, rpos, rend, count, base_offset, base_timestamp, out)
                n = len(out.offsets)
                if attributes & _ATTR_TIMESTAMP_TYPE:
                    out.timestamps[first:] = [max_timestamp] * (n - first)
                if base_offset < fetch_offset:
                    _drop_below(out, first, fetch_offset)
                    n = len(out.offsets)
                if columnar and n > first:
                    _check_columnar(out, first)
                if n > first:
                    batch_ends.append(n)
                    out.batch_timestamp_types.append(
                        TimestampType.LOG_APPEND_TIME
                        if attributes & _ATTR_TIMESTAMP_TYPE
                        else TimestampType.CREATE_TIME
                    )
                    out.batch_leader_epochs.append(leader_epoch if leader_epoch >= 0 else None)
        except (_Corrupt, *_MALFORMED) as exc:
            raise _batch_error(exc, topic, partition, base_offset) from None
        if last_offset + 1 > next_fetch_offset:
            next_fetch_offset = last_offset + 1
        pos = end
    out.next_fetch_offset = next_fetch_offset
    out.bytes_consumed = pos


#: Kafka timestamps (ms) whose microseconds (the Arrow batches' unit) fit int64.
_MAX_TIMESTAMP_MS = _INT64_MAX // 1000


def _check_columnar(out: DecodedRecords, first: int) -> None:
    """What the native path's Arrow sink refuses in the kept records of a batch (from ``first``,
    after those below the fetch offset are dropped: a dropped record is not put in a column):
    offsets past int64, timestamps whose microseconds do not fit int64 (only in malformed or
    absurd batches)."""
    offsets = out.offsets[first:]
    if max(offsets) > _INT64_MAX or min(offsets) < -_INT64_MAX - 1:
        raise _Corrupt("record offset overflows int64")
    stamps = out.timestamps[first:]
    if max(stamps) > _MAX_TIMESTAMP_MS or min(stamps) < -_MAX_TIMESTAMP_MS:
        raise _Corrupt("record timestamp is out of the range of a microsecond timestamp")


def _batch_error(exc: Exception, topic: str, partition: int, offset: int) -> KafkaError:
    """The typed error of the batch at ``offset`` that failed to decode: ``_TooLarge`` past
    the decompression bound, ``_Corrupt``, or a low-level error of a malformed batch."""
    if isinstance(exc, _TooLarge):
        return DecompressedBatchTooLargeError(
            str(exc), topic=topic, partition=partition, offset=offset
        )
    message = (
        str(exc) if isinstance(exc, _Corrupt) else f"malformed batch: {type(exc).__name__}: {exc}"
    )
    return CorruptRecordError(message, topic=topic, partition=partition, offset=offset)


def _drop_below(out: DecodedRecords, first: int, fetch_offset: int) -> None:
    """Drop the records from index ``first`` on whose offset is below ``fetch_offset``."""
    offsets = out.offsets
    cut = first
    n = len(offsets)
    while cut < n and offsets[cut] < fetch_offset:
        cut += 1
    if cut > first:
        del offsets[first:cut], out.timestamps[first:cut], out.keys[first:cut]
        del out.values[first:cut], out.headers[first:cut]


def _rollback(out: DecodedRecords) -> None:
    """Drop the partial records of a batch that failed half-way (keeps columns aligned)."""
    n = out.batch_ends[-1] if out.batch_ends else 0
    del out.offsets[n:], out.timestamps[n:], out.keys[n:], out.values[n:], out.headers[n:]
    if out.materialized is not None and len(out.materialized) != n:
        # (a LazyRecords shows only complete batches: its length is n already)
        out.materialized = out.materialized[:n]


_crc32c_impl: Callable[[Any], int] | None = None


def _crc32c(data: Any) -> int:
    """CRC-32C of ``data`` (the pure-Python path's check). The crc32c package is imported on
    the first call: its import costs ~20 ms of start-up (importlib.metadata among it), and the
    native path checks CRCs in C."""
    global _crc32c_impl
    if _crc32c_impl is None:
        import crc32c

        _crc32c_impl = crc32c.crc32c
    return _crc32c_impl(data)


#: Set to 1 (or true / yes) to use the pure-Python record path even when the native one is built.
PURE_ENV = "KAFKA_ACTORS_PURE_PYTHON"


def _load_native() -> tuple[ModuleType | None, str]:
    """The native record path, set up, or None and the reason it is not used."""
    if os.environ.get(PURE_ENV, "").strip().lower() in ("1", "true", "yes"):
        return None, f"{PURE_ENV} is set"
    try:
        from kafka_actors.protocol.records import _crecords
    except ImportError as exc:
        return None, f"the native extension is not built (no C compiler at install?): {exc}"
    _crecords.setup(
        ConsumerRecord,
        TimestampType.CREATE_TIME,
        TimestampType.LOG_APPEND_TIME,
        CorruptRecordError,
        UnsupportedRecordFormatError,
        _Corrupt,
        _MALFORMED,
        _TooLarge,
        DecompressedBatchTooLargeError,
    )
    return _crecords, ""


_native, NATIVE_UNAVAILABLE_REASON = _load_native()

#: The record path in use: "native" (the C extension) or "python" (this module's code).
IMPLEMENTATION = "native" if _native is not None else "python"

_slice_columns = _native.records if _native is not None else _slice_records_python
