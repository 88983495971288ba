"""Unit tests of the record batch v2 decoder (kafka_actors.protocol.records.decode)."""

from __future__ import annotations

import struct

import pytest

from kafka_actors.errors import CorruptRecordError, KafkaError, UnsupportedRecordFormatError
from kafka_actors.protocol.records import decode as decode_module
from kafka_actors.protocol.records.build import (
    RecordSpec,
    build_batch,
    build_control_batch,
    encode_varint,
)
from kafka_actors.protocol.records.decode import (
    AbortedTransaction,
    CompressionType,
    ConsumerRecord,
    IsolationLevel,
    TimestampType,
    decode_records,
)

CODECS = list(CompressionType)


def _specs(n: int, ts: int = 1_700_000_000_123) -> list[RecordSpec]:
    return [
        RecordSpec(
            key=None if i % 5 == 0 else b"key-%d" % i,
            value=None if i % 7 == 3 else bytes(range(i % 256)) * 3,
            headers=() if i % 2 else (("h1", b"v%d" % i), ("empty", b""), ("null", None)),
            timestamp=ts + i * 3 + (i % 2),
        )
        for i in range(n)
    ]


def _as_tuples(decoded: object) -> list[tuple[object, ...]]:
    return [
        (r.offset, r.timestamp, r.key, r.value, r.headers)
        for r in decoded  # type: ignore[attr-defined]
    ]


def _expected(specs: list[RecordSpec], base_offset: int) -> list[tuple[object, ...]]:
    return [(base_offset + i, s.timestamp, s.key, s.value, s.headers) for i, s in enumerate(specs)]


@pytest.mark.parametrize(
    "codec,xerial",
    [(c, False) for c in CODECS] + [(CompressionType.SNAPPY, True)],
    ids=[c.name.lower() for c in CODECS] + ["snappy-xerial"],
)
def test_round_trip_each_codec(codec: CompressionType, xerial: bool) -> None:
    specs = _specs(300)
    data = build_batch(
        specs, base_offset=1000, compression=codec, snappy_xerial=xerial, partition_leader_epoch=7
    )
    decoded = decode_records(data, "t", 3, fetch_offset=1000)
    assert _as_tuples(decoded) == _expected(specs, 1000)
    assert decoded.next_fetch_offset == 1300
    assert decoded.bytes_consumed == len(data)
    records = decoded.records()
    assert records[0] == ConsumerRecord(
        "t", 3, 1000, 1_700_000_000_123, TimestampType.CREATE_TIME, None, specs[0].value,
        specs[0].headers, 7,
    )  # fmt: skip


def test_xerial_snappy_with_several_blocks() -> None:
    specs = [RecordSpec(key=b"k", value=bytes([i % 251]) * 1000, timestamp=5) for i in range(200)]
    data = build_batch(specs, compression=CompressionType.SNAPPY, snappy_xerial=True)
    assert data.count(b"\x82SNAPPY\x00") == 1
    assert decode_records(data, "t", 0).values == [s.value for s in specs]


def test_several_batches_and_millisecond_timestamps() -> None:
    a = _specs(10)
    b = _specs(5, ts=1_700_000_001_999)
    data = build_batch(a, base_offset=0, compression=CompressionType.LZ4) + build_batch(
        b, base_offset=10, compression=CompressionType.ZSTD
    )
    decoded = decode_records(data, "t", 0)
    assert decoded.offsets == list(range(15))
    assert decoded.timestamps == [s.timestamp for s in a + b]
    assert decoded.batch_ends == [10, 15]
    assert all(ts % 1000 for ts in decoded.timestamps[:3])  # sub-second part kept


def test_headers_and_null_key_value() -> None:
    specs = [
        RecordSpec(key=None, value=None, headers=(("a", None),)),
        RecordSpec(key=b"", value=b"", headers=(("ü-key", b"\x00\xff"), ("a", b"1"), ("a", b"2"))),
    ]
    decoded = decode_records(build_batch(specs), "t", 0)
    assert decoded.keys == [None, b""]
    assert decoded.values == [None, b""]
    assert decoded.headers == [(("a", None),), (("ü-key", b"\x00\xff"), ("a", b"1"), ("a", b"2"))]


def test_log_append_time_applies_batch_max_timestamp() -> None:
    specs = _specs(4)
    data = build_batch(
        specs, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=1_800_000_000_456
    )
    decoded = decode_records(data, "t", 0)
    assert decoded.timestamps == [1_800_000_000_456] * 4
    assert {r.timestamp_type for r in decoded} == {TimestampType.LOG_APPEND_TIME}


def test_control_batches_are_skipped_and_advance_next_offset() -> None:
    data = (
        build_batch([RecordSpec(value=b"a")], base_offset=0, producer_id=9, producer_epoch=0,
                    transactional=True)
        + build_control_batch(base_offset=1, producer_id=9, producer_epoch=0, commit=True)
        + build_batch([RecordSpec(value=b"b")], base_offset=2)
        + build_control_batch(base_offset=3, producer_id=9, producer_epoch=0, commit=False)
    )  # fmt: skip
    for level in IsolationLevel:
        decoded = decode_records(data, "t", 0, isolation_level=level)
        assert decoded.values == [b"a", b"b"]
        assert decoded.next_fetch_offset == 4
        assert decoded.bytes_consumed == len(data)


def test_only_control_batch_still_advances() -> None:
    data = build_control_batch(base_offset=41, producer_id=1, producer_epoch=0, commit=True)
    decoded = decode_records(data, "t", 0, fetch_offset=41)
    assert len(decoded) == 0
    assert decoded.next_fetch_offset == 42
    assert decoded.bytes_consumed == len(data)


def _txn_batch(offset: int, pid: int, value: bytes) -> bytes:
    return build_batch(
        [RecordSpec(value=value)],
        base_offset=offset,
        producer_id=pid,
        producer_epoch=0,
        transactional=True,
    )


def _marker(offset: int, pid: int, commit: bool) -> bytes:
    return build_control_batch(base_offset=offset, producer_id=pid, producer_epoch=0, commit=commit)


def test_read_committed_interleaved_producers() -> None:
    # offsets: producers 1 and 2 interleave; 1 aborts its first txn, commits its second;
    # 2 commits its first, aborts its second; 3 is non-transactional.
    parts = [
        _txn_batch(0, 1, b"p1-t1-a"),  # aborted
        _txn_batch(1, 2, b"p2-t1-a"),  # committed
        build_batch([RecordSpec(value=b"plain")], base_offset=2, producer_id=3, producer_epoch=0),
        _txn_batch(3, 1, b"p1-t1-b"),  # aborted
        _marker(4, 1, commit=False),
        _txn_batch(5, 2, b"p2-t1-b"),  # committed
        _txn_batch(6, 1, b"p1-t2-a"),  # committed
        _marker(7, 2, commit=True),
        _txn_batch(8, 2, b"p2-t2-a"),  # aborted
        _marker(9, 1, commit=True),
        _marker(10, 2, commit=False),
        build_batch([RecordSpec(value=b"tail")], base_offset=11),
    ]
    data = b"".join(parts)
    aborted = [AbortedTransaction(2, 8), AbortedTransaction(1, 0)]  # any order
    committed = decode_records(
        data, "t", 0, isolation_level=IsolationLevel.READ_COMMITTED, aborted_transactions=aborted
    )
    assert committed.values == [b"p2-t1-a", b"plain", b"p2-t1-b", b"p1-t2-a", b"tail"]
    assert committed.offsets == [1, 2, 5, 6, 11]
    assert committed.next_fetch_offset == 12
    everything = decode_records(data, "t", 0, aborted_transactions=aborted)
    assert everything.values == [
        b"p1-t1-a", b"p2-t1-a", b"plain", b"p1-t1-b", b"p2-t1-b", b"p1-t2-a", b"p2-t2-a", b"tail"
    ]  # fmt: skip


def test_read_committed_accepts_kio_aborted_transaction_objects() -> None:
    from kio.schema.fetch.v16.response import AbortedTransaction as KioAborted
    from kio.schema.types import ProducerId
    from kio.static.primitive import i64

    data = _txn_batch(0, 5, b"x") + _marker(1, 5, commit=False) + _txn_batch(2, 6, b"y")
    decoded = decode_records(
        data,
        "t",
        0,
        isolation_level=IsolationLevel.READ_COMMITTED,
        aborted_transactions=(KioAborted(producer_id=ProducerId(5), first_offset=i64(0)),),
    )
    assert decoded.values == [b"y"]


def test_aborted_producer_without_abort_marker_in_fetch_stays_aborted() -> None:
    # The abort marker is beyond this fetch: the open aborted txn filters to the end.
    data = _txn_batch(10, 4, b"a") + _txn_batch(11, 4, b"b")
    decoded = decode_records(
        data, "t", 0, fetch_offset=10, isolation_level=IsolationLevel.READ_COMMITTED,
        aborted_transactions=[AbortedTransaction(4, 10)],
    )  # fmt: skip
    assert len(decoded) == 0
    assert decoded.next_fetch_offset == 12


def test_truncated_trailing_batch_is_ignored() -> None:
    first = build_batch(_specs(3), base_offset=0)
    second = build_batch(_specs(3), base_offset=3, compression=CompressionType.GZIP)
    for cut in (1, 11, 12, 20, 61, len(second) - 1):
        decoded = decode_records(first + second[:cut], "t", 0)
        assert decoded.offsets == [0, 1, 2]
        assert decoded.bytes_consumed == len(first)
        assert decoded.next_fetch_offset == 3
    only_partial = decode_records(second[:40], "t", 0, fetch_offset=3)
    assert len(only_partial) == 0 and only_partial.bytes_consumed == 0
    assert only_partial.next_fetch_offset == 3


def test_fetch_offset_in_the_middle_of_a_batch() -> None:
    specs = _specs(20)
    data = build_batch(specs[:10], base_offset=100) + build_batch(specs[10:], base_offset=110)
    decoded = decode_records(data, "t", 0, fetch_offset=105)
    assert decoded.offsets == list(range(105, 120))
    assert decoded.values == [s.value for s in specs[5:]]
    assert decoded.next_fetch_offset == 120
    past_first = decode_records(data, "t", 0, fetch_offset=112)
    assert past_first.offsets == list(range(112, 120))
    assert past_first.batch_ends == [8]


def test_compacted_batch_with_offset_gaps_and_empty_batch() -> None:
    specs = [RecordSpec(value=b"a", offset_delta=0), RecordSpec(value=b"c", offset_delta=4)]
    data = build_batch(specs, base_offset=50, last_offset_delta=9) + build_batch(
        [], base_offset=60, last_offset_delta=2
    )
    decoded = decode_records(data, "t", 0)
    assert decoded.offsets == [50, 54]
    assert decoded.next_fetch_offset == 63


@pytest.mark.parametrize("magic", [0, 1])
def test_old_message_format_is_refused(magic: int) -> None:
    data = build_batch(_specs(2), base_offset=77, magic=magic)
    with pytest.raises(UnsupportedRecordFormatError) as info:
        decode_records(data, "orders", 4)
    assert (info.value.topic, info.value.partition, info.value.offset) == ("orders", 4, 77)


def test_crc_mismatch_names_topic_partition_offset() -> None:
    good = build_batch(_specs(3), base_offset=0)
    bad = bytearray(build_batch(_specs(3), base_offset=3))
    bad[-2] ^= 0x01  # inside a value: still parses, only the CRC tells
    with pytest.raises(CorruptRecordError) as info:
        decode_records(good + bytes(bad), "orders", 2)
    err = info.value
    assert (err.topic, err.partition, err.offset) == ("orders", 2, 3)
    assert "CRC" in str(err) and "orders" in str(err)
    unchecked = decode_records(good + bytes(bad), "orders", 2, check_crcs=False)
    assert unchecked.offsets == [0, 1, 2, 3, 4, 5]
    assert unchecked.headers[-1] != _specs(3)[-1].headers


def test_partial_on_error_returns_good_batches_first() -> None:
    good = build_batch(_specs(3), base_offset=0)
    bad = bytearray(build_batch(_specs(3), base_offset=3, compression=CompressionType.ZSTD))
    bad[-3] ^= 0x55
    decoded = decode_records(good + bytes(bad), "t", 1, partial_on_error=True)
    assert decoded.offsets == [0, 1, 2]
    assert isinstance(decoded.error, CorruptRecordError)
    assert decoded.error.offset == 3
    assert decoded.next_fetch_offset == 3


def _raw_batch(records_section: bytes, count: int, codec: int = 0) -> bytes:
    from crc32c import crc32c

    after = struct.pack(">hiqqqhii", codec, max(count - 1, 0), 0, 0, -1, -1, -1, count)
    after += records_section
    return struct.pack(">qiibI", 0, 9 + len(after), -1, 2, crc32c(after)) + after


@pytest.mark.parametrize(
    "section,count",
    [
        (b"\x7f" * 20, 1),  # record length -64
        (encode_varint(300) + b"\x00" * 10, 1),  # record longer than the batch
        (b"\xff" * 11, 1),  # varint longer than 10 bytes
        (encode_varint(6) + b"\x00\x00\x00\x05\x00\x00", 1),  # key length -3
        (encode_varint(6) + b"\x00\x00\x00\x01\x02\x00", 1),  # fields longer than the record
        (encode_varint(5) + b"\x00\x00\x00\x01\x01", 1),  # no headers count: runs off the end
        (encode_varint(6) + b"\x00\x00\x00\x01\x01\x00" + b"\x00", 1),  # bytes left over
        (encode_varint(6) + b"\x00\x00\x00\x01\x01\x00", 2),  # count larger than records
        (b"", -1),  # negative count
    ],
)
def test_malformed_records_raise_corrupt_record_error(section: bytes, count: int) -> None:
    with pytest.raises(CorruptRecordError) as info:
        decode_records(_raw_batch(section, count), "t", 0)
    assert info.value.topic == "t" and info.value.offset == 0


@pytest.mark.parametrize("codec", [1, 2, 3, 4, 5, 6, 7])
def test_bad_compressed_payload_raises_corrupt_record_error(codec: int) -> None:
    with pytest.raises(CorruptRecordError):
        decode_records(_raw_batch(b"definitely not compressed data", 1, codec), "t", 0)


def test_bad_batch_length_raises() -> None:
    data = struct.pack(">qi", 5, 3) + b"\x00" * 30
    with pytest.raises(CorruptRecordError) as info:
        decode_records(data, "t", 0)
    assert info.value.offset == 5


def test_errors_are_kafka_errors() -> None:
    assert issubclass(CorruptRecordError, KafkaError)
    assert issubclass(UnsupportedRecordFormatError, KafkaError)


def test_memoryview_and_bytearray_input() -> None:
    data = build_batch(_specs(5), base_offset=9)
    assert decode_records(memoryview(data), "t", 0).offsets == list(range(9, 14))
    assert decode_records(bytearray(data), "t", 0).offsets == list(range(9, 14))


def test_large_varints_take_the_slow_path() -> None:
    big = b"x" * 20_000  # 3-byte length varints
    specs = [RecordSpec(key=big, value=big, timestamp=10**12 + i * 10**9) for i in range(3)]
    data = build_batch(specs, base_timestamp=10**12)
    decoded = decode_records(data, "t", 0)
    assert decoded.keys == [big] * 3
    assert decoded.timestamps == [s.timestamp for s in specs]


def test_repeated_and_distinct_header_blocks() -> None:
    # Distinct blocks first (the per-batch header cache gives up), then repeated ones, and
    # the reverse order: every record keeps its own headers either way.
    distinct = [RecordSpec(value=b"d", headers=(("id", b"%d" % i),)) for i in range(100)]
    same = [RecordSpec(value=b"s", headers=(("type", b"json"), ("v", None))) for _ in range(100)]
    for specs in (distinct + same, same + distinct, [*distinct[:40], *same, *distinct[40:]]):
        decoded = decode_records(build_batch(specs), "t", 0)
        assert decoded.headers == [s.headers for s in specs]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("materialize", [False, True])
def test_a_view_of_a_frame_decodes_to_the_same_bytes(
    codec: CompressionType, materialize: bool
) -> None:
    """Fetch v12+ records are views of the response's frame (wire.fetch_response): keys,
    values and header values come out as bytes, as from a bytes copy, on either path."""
    specs = _specs(50)
    data = build_batch(specs, base_offset=10, compression=codec)
    frame = bytearray(b"\0" * 7 + data + b"\0" * 5)
    view = memoryview(frame).toreadonly()[7 : 7 + len(data)]
    decoded = decode_records(view, "t", 0, fetch_offset=10, materialize=materialize)
    records = decoded.records()
    assert _as_tuples(decoded) == _expected(specs, 10)
    for record in records:
        assert record.key is None or type(record.key) is bytes
        assert record.value is None or type(record.value) is bytes
        for _name, value in record.headers:
            assert value is None or type(value) is bytes


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP])
def test_records_of_a_view_keep_their_frame_until_they_own_their_bytes(
    codec: CompressionType,
) -> None:
    """On the native path a view is decoded in place: the records are spans into the frame
    (no copy of it), which stays exported, so it cannot be reused, while they exist.
    ``own_records(k)`` builds the records from k on with their own bytes and lets the frame
    go: it may then be overwritten without changing them (what the fetch buffer does for a
    paused partition's records)."""
    specs = _specs(20)
    data = build_batch(specs, base_offset=10, compression=codec)
    frame = bytearray(b"\0" * 3 + data)
    view = memoryview(frame).toreadonly()[3:]
    decoded = decode_records(view, "t", 0, fetch_offset=10, materialize=True)
    del view
    expected = _expected(specs, 10)
    assert _as_tuples(decoded.records()[:5]) == expected[:5]
    if decode_module.IMPLEMENTATION == "native":
        with pytest.raises(BufferError):
            frame.append(0)  # the spans hold it
    decoded.own_records(5)
    frame.append(0)  # let go
    frame[:] = bytes(len(frame))  # and overwritten, as a reused frame buffer is
    assert len(decoded) == len(expected)
    assert decoded.materialized is not None
    assert _as_tuples(decoded.materialized[5:]) == expected[5:]
