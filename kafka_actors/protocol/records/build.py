"""Record batch (magic v2) encoding, for tests and benchmarks.

Owns: building valid v2 record batches byte for byte: any codec (gzip, snappy raw or
xerial-framed, lz4 frame, zstd), headers, CreateTime / LogAppendTime, producer id / epoch /
base sequence, transactional data batches and control (COMMIT / ABORT marker) batches.

May touch: nothing but its arguments. Pure code. The consumer never encodes records; this
module exists so that decoder tests (unit, property, read_committed) and bench/ can make
the bytes a producer and a broker would.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import cramjam
from crc32c import crc32c

from kafka_actors.protocol.records.decode import (
    CompressionType,
    ControlRecordType,
    Headers,
    TimestampType,
)

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "RecordSpec",
    "build_batch",
    "build_control_batch",
    "compress",
    "concat",
    "encode_varint",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordCount
_HEADER_BEFORE_CRC = struct.Struct(">qiib")  # baseOffset, batchLength, leaderEpoch, magic
_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


@dataclass(frozen=True, slots=True)
class RecordSpec:
    """One record to encode. ``timestamp`` is ms (None: the batch's base timestamp)."""

    key: bytes | None = None
    value: bytes | None = None
    headers: Headers = ()
    timestamp: int | None = None
    offset_delta: int | None = None  # None: its index in the batch (no compaction gaps)


def encode_varint(value: int) -> bytes:
    """Zigzag varint/varlong encoding of a signed 64-bit value."""
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _encode_bytes(data: bytes | None) -> bytes:
    if data is None:
        return encode_varint(-1)
    return encode_varint(len(data)) + data


def _encode_record(
    attributes: int, timestamp_delta: int, offset_delta: int, spec: RecordSpec
) -> bytes:
    body = bytearray()
    body.append(attributes)
    body += encode_varint(timestamp_delta)
    body += encode_varint(offset_delta)
    body += _encode_bytes(spec.key)
    body += _encode_bytes(spec.value)
    body += encode_varint(len(spec.headers))
    for hkey, hvalue in spec.headers:
        body += _encode_bytes(hkey.encode())
        body += _encode_bytes(hvalue)
    return encode_varint(len(body)) + bytes(body)


def compress(codec: CompressionType, data: bytes, *, xerial: bool = False) -> bytes:
    """Compress a batch's records section as producers do (snappy: raw or xerial)."""
    if codec == CompressionType.NONE:
        return data
    if codec == CompressionType.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == CompressionType.LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == CompressionType.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    if codec == CompressionType.SNAPPY:
        if not xerial:
            return bytes(cramjam.snappy.compress_raw(data))
        parts = [_XERIAL_HEADER]
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK]))
            parts.append(struct.pack(">i", len(block)))
            parts.append(block)
        return b"".join(parts)
    raise ValueError(f"unknown codec {codec}")


def build_batch(
    records: Sequence[RecordSpec],
    *,
    base_offset: int = 0,
    compression: CompressionType = CompressionType.NONE,
    snappy_xerial: bool = False,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    log_append_time: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    last_offset_delta: int | None = None,
    magic: int = 2,
) -> bytes:
    """Encode one record batch.

    Timestamps: each record's ``timestamp`` (default: the base timestamp, default 0);
    ``base_timestamp`` defaults to the first record's. With LOG_APPEND_TIME the broker's
    ``log_append_time`` becomes the batch max timestamp (as a broker rewrites it).
    ``magic`` other than 2 makes a v2-shaped batch with that magic byte (only to test that
    decoders refuse it).
    """
    stamps = [r.timestamp for r in records if r.timestamp is not None]
    if base_timestamp is None:
        base_timestamp = stamps[0] if stamps else 0
    deltas = [r.offset_delta if r.offset_delta is not None else i for i, r in enumerate(records)]
    body = b"".join(
        _encode_record(
            0,
            (r.timestamp if r.timestamp is not None else base_timestamp) - base_timestamp,
            d,
            r,
        )
        for r, d in zip(records, deltas, strict=True)
    )
    if max_timestamp is None:
        if timestamp_type == TimestampType.LOG_APPEND_TIME and log_append_time is not None:
            max_timestamp = log_append_time
        else:
            max_timestamp = max(stamps, default=base_timestamp)
    attributes = int(compression) & 0x07
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= 0x08
    if transactional:
        attributes |= 0x10
    if control:
        attributes |= 0x20
    if last_offset_delta is None:
        last_offset_delta = max(deltas, default=0)
    payload = compress(compression, body, xerial=snappy_xerial)
    after_crc = (
        _HEADER_AFTER_CRC.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        + payload
    )
    crc = crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, rest
    return (
        _HEADER_BEFORE_CRC.pack(base_offset, batch_length, partition_leader_epoch, magic)
        + struct.pack(">I", crc)
        + after_crc
    )


def build_control_batch(
    *,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int = 0,
    timestamp: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """Encode a transaction marker (control batch with one COMMIT or ABORT record)."""
    ctype = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    record = RecordSpec(
        key=struct.pack(">hh", 0, ctype),
        value=struct.pack(">hi", 0, coordinator_epoch),
        timestamp=timestamp,
    )
    return build_batch(
        [record],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def concat(batches: Iterable[bytes]) -> bytes:
    """The records bytes of a fetched partition made of these batches."""
    return b"".join(batches)
