"""The native record path (kafka_actors/protocol/records/_crecords.c) against the pure-Python one:
same columns, same records, same errors, on valid and corrupted input; and how the path in
use is chosen and reported."""

from __future__ import annotations

import os
import pickle
import random
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_actors.errors import CorruptRecordError, KafkaError, OffsetOutOfRangeError
from kafka_actors.protocol.records import decode as records
from kafka_actors.protocol.records.build import RecordSpec, build_batch, build_control_batch
from kafka_actors.protocol.records.decode import (
    AbortedTransaction,
    CompressionType,
    ConsumerRecord,
    IsolationLevel,
    TimestampType,
    decode_records,
)

from .test_properties import batches, transactions

NATIVE = records._native
needs_native = pytest.mark.skipif(
    NATIVE is None, reason=f"native record path not in use: {records.NATIVE_UNAVAILABLE_REASON}"
)


@contextmanager
def _pure() -> Iterator[None]:
    saved = records._native, records._slice_columns
    records._native, records._slice_columns = None, records._slice_records_python
    try:
        yield
    finally:
        records._native, records._slice_columns = saved


def _outcome(data: bytes, **kw: Any) -> tuple[str, Any]:
    """What decoding gives: ("ok", every column and the records) or ("error", its type and
    where it points)."""
    try:
        d = decode_records(data, "t", 3, **kw)
    except KafkaError as exc:
        return "error", (type(exc), exc.topic, exc.partition, exc.offset)
    error = None if d.error is None else (type(d.error), d.error.offset)
    recs = [tuple(r) for r in d]
    assert all(type(r) is ConsumerRecord for r in d)
    return "ok", (
        d.offsets,
        d.timestamps,
        d.keys,
        d.values,
        d.headers,
        d.batch_ends,
        d.batch_timestamp_types,
        d.batch_leader_epochs,
        d.next_fetch_offset,
        d.bytes_consumed,
        error,
        recs,
        [tuple(r) for r in records.slice_records(d, 1, len(d) - 1)],
    )


def _same_on_both_paths(data: bytes, **kw: Any) -> tuple[str, Any]:
    """The same outcome on both paths, with and without ``materialize`` (records built while
    decoding: the same records, and errors, as from the columns)."""
    native = _outcome(data, **kw)
    with _pure():
        pure = _outcome(data, **kw)
    assert native == pure
    for outcome in (_outcome(data, materialize=True, **kw), _pure_materialized(data, **kw)):
        assert outcome[0] == native[0]
        if native[0] == "ok":
            # records, slice, the position and error; the five record columns are empty
            assert outcome[1][-2:] == native[1][-2:]
            assert outcome[1][5:11] == native[1][5:11]
            assert outcome[1][0] == outcome[1][2] == []
        else:
            assert outcome == native
    return native


def _pure_materialized(data: bytes, **kw: Any) -> tuple[str, Any]:
    with _pure():
        return _outcome(data, materialize=True, **kw)


def test_implementation_is_reported() -> None:
    assert records.IMPLEMENTATION in ("native", "python")
    assert (records.IMPLEMENTATION == "native") == (NATIVE is not None)
    assert (records.NATIVE_UNAVAILABLE_REASON == "") == (NATIVE is not None)
    if os.environ.get(records.PURE_ENV) == "1":
        assert records.IMPLEMENTATION == "python"


def test_environment_forces_pure_python() -> None:
    code = (
        "from kafka_actors.protocol.records import decode as r;"
        " print(r.IMPLEMENTATION, r.NATIVE_UNAVAILABLE_REASON)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, records.PURE_ENV: "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split()[0] == "python"
    assert records.PURE_ENV in out.stdout


def test_records_pickle_by_their_public_module() -> None:
    data = build_batch([RecordSpec(key=b"k", value=b"v", headers=(("h", b"1"),))], base_offset=5)
    (record,) = decode_records(data, "t", 0)
    assert type(record) is ConsumerRecord and record.offset == 5 and record.key == b"k"
    assert pickle.loads(pickle.dumps(record)) == record
    assert hash(record) == hash(tuple(record)) and record._replace(offset=6).offset == 6


@needs_native
@pytest.mark.parametrize(
    # past 767 and 24575 bytes: the three interleaved streams (short and long blocks) joined
    "size",
    [0, 1, 7, 8, 9, 63, 64, 65, 767, 768, 775, 1000, 2311, 4099, 24575, 24576, 25351, 65543],
)
def test_crc32c_matches_the_reference(size: int) -> None:
    assert NATIVE is not None
    rng = random.Random(size)
    blob = bytes(rng.getrandbits(8) for _ in range(size + 7))
    for start in range(8):  # every alignment
        assert NATIVE.crc32c(blob[start : start + size]) == crc32c(blob[start : start + size])
        half = start + size // 2  # continuing from a CRC: the register is carried over
        part = NATIVE.crc32c(blob[start:half])
        assert NATIVE.crc32c(blob[half : start + size], part) == crc32c(blob[start : start + size])


@needs_native
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.data())
def test_valid_input_decodes_the_same(
    case: tuple[list[list[RecordSpec]], list[bytes], int], data: st.DataObject
) -> None:
    _groups, parts, base = case
    whole = b"".join(parts)
    cut = data.draw(st.sampled_from([len(whole), data.draw(st.integers(0, len(whole)))]))
    fetch_offset = base + data.draw(st.integers(-2, 40))
    kind, _ = _same_on_both_paths(whole[:cut], fetch_offset=fetch_offset)
    assert kind == "ok"


def corrupted(parts: list[bytes], data: st.DataObject) -> bytes:
    """``parts`` (batches) joined, then one to three edits drawn from ``data``: bit flips,
    bytes, batch header fields, truncation, splices, deletions."""
    buf = bytearray(b"".join(parts))
    starts = [sum(len(p) for p in parts[:j]) for j in range(len(parts))]
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["flip", "byte", "field", "truncate", "splice", "delete"]))
        if not buf:
            break
        i = data.draw(st.integers(0, len(buf) - 1))
        if kind == "field":  # a batch header field or the first record's first fields
            i = min(
                len(buf) - 1, data.draw(st.sampled_from(starts)) + data.draw(st.integers(0, 70))
            )
            buf[i] = data.draw(
                st.sampled_from([0, 1, 2, 0x7F, 0x80, 0xFF, buf[i] ^ 1, buf[i] + 1 & 0xFF])
            )
        elif kind == "flip":
            buf[i] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "byte":
            buf[i] = data.draw(st.integers(0, 255))
        elif kind == "truncate":
            del buf[i:]
        elif kind == "splice":
            buf[i:i] = data.draw(st.binary(min_size=1, max_size=40))
        else:
            del buf[i : i + data.draw(st.integers(1, 40))]
    return bytes(buf)


@needs_native
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.data(), st.booleans(), st.booleans())
def test_corrupted_input_gives_the_same_records_or_error(
    case: tuple[list[list[RecordSpec]], list[bytes], int],
    data: st.DataObject,
    check_crcs: bool,
    partial: bool,
) -> None:
    for buf, kw in corrupted_cases(case, data, check_crcs, partial):
        _same_on_both_paths(buf, **kw)


def corrupted_cases(
    case: tuple[list[list[RecordSpec]], list[bytes], int],
    data: st.DataObject,
    check_crcs: bool,
    partial: bool,
) -> Iterator[tuple[bytes, dict[str, Any]]]:
    """The corrupted bytes of ``case`` (:func:`corrupted`) with the decoding arguments to try
    them with, once per isolation level."""
    _groups, parts, base = case
    buf = corrupted(parts, data)
    for level in IsolationLevel:
        yield buf, {
            "fetch_offset": base + data.draw(st.integers(-1, 5)),
            "check_crcs": check_crcs,
            "isolation_level": level,
            "aborted_transactions": [AbortedTransaction(0, base)],
            "partial_on_error": partial,
        }


@needs_native
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 7), st.booleans(), st.integers(0, 1))
def test_random_records_section_gives_the_same(
    section: bytes, codec: int, control: bool, level: int
) -> None:
    """A batch with a valid header and CRC but a random records section."""
    import struct

    attributes = codec | (0x30 if control else 0)
    after = struct.pack(">hiqqqhii", attributes, 3, 0, 0, 5, 0, 0, 4) + section
    data = struct.pack(">qiibI", 0, 9 + len(after), -1, 2, crc32c(after)) + after
    _same_on_both_paths(
        data,
        isolation_level=IsolationLevel(level),
        aborted_transactions=[AbortedTransaction(5, 0)],
    )


@needs_native
@settings(max_examples=150, deadline=None)
@given(transactions())
def test_read_committed_gives_the_same(
    case: tuple[bytes, list[tuple[int, int]], list[bytes]],
) -> None:
    for data, kw in transaction_cases(case):
        kind, _ = _same_on_both_paths(data, **kw)
        assert kind == "ok"


def transaction_cases(
    case: tuple[bytes, list[tuple[int, int]], list[bytes]],
) -> Iterator[tuple[bytes, dict[str, Any]]]:
    """The bytes of a ``transactions()`` case with the decoding arguments to try them with,
    once per isolation level."""
    data, aborted, _everything = case
    for level in IsolationLevel:
        yield data, {
            "isolation_level": level,
            "aborted_transactions": [AbortedTransaction(pid, first) for pid, first in aborted],
        }


@needs_native
@pytest.mark.parametrize("codec", list(CompressionType))
def test_log_append_time_leader_epoch_headers_and_control_batches(codec: CompressionType) -> None:
    specs = [
        RecordSpec(key=None if i % 3 else b"k%d" % i, value=b"v" * i, headers=h)
        for i, h in enumerate([(), (("a", b"1"),), (("a", b"1"),), (("a", None), ("b", b""))] * 3)
    ]
    data = (
        build_batch(specs, base_offset=10, compression=codec, partition_leader_epoch=4)
        + build_control_batch(base_offset=22, producer_id=7, producer_epoch=0, commit=True)
        + build_batch(
            specs,
            base_offset=23,
            compression=codec,
            timestamp_type=TimestampType.LOG_APPEND_TIME,
            log_append_time=1_700_000_000_000,
        )
    )
    kind, _ = _same_on_both_paths(data, fetch_offset=12)
    assert kind == "ok"
    decoded = decode_records(data, "t", 0, fetch_offset=12)
    assert decoded.offsets == list(range(12, 22)) + list(range(23, 35))
    assert decoded.batch_timestamp_types == [
        TimestampType.CREATE_TIME,
        TimestampType.LOG_APPEND_TIME,
    ]
    assert decoded.batch_leader_epochs == [4, None]
    assert set(decoded.timestamps[10:]) == {1_700_000_000_000}


@pytest.mark.parametrize("path", ["native", "python"])
def test_decompression_goes_through_records_decompress(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both paths hand compressed sections to records._decompress: its errors apply alike (a
    typed error of its own propagates; its internal corrupt error is a CorruptRecordError)."""
    if path == "native" and NATIVE is None:
        pytest.skip("native record path not in use")
    data = build_batch(
        [RecordSpec(value=b"x" * 100)] * 5, base_offset=3, compression=CompressionType.ZSTD
    )
    seen: list[int] = []
    original = records._decompress

    def counting(codec: int, payload: Any, max_size: int) -> bytes:
        seen.append(codec)
        return original(codec, payload, max_size)

    def refusing(codec: int, payload: Any, max_size: int) -> bytes:
        raise OffsetOutOfRangeError("too big, says the bound")  # any typed error of its own

    def corrupt(codec: int, payload: Any, max_size: int) -> bytes:
        raise records._Corrupt("decompressed size over the bound")

    ctx = _pure() if path == "python" else contextmanager(lambda: iter([None]))()
    with ctx:
        monkeypatch.setattr(records, "_decompress", counting)
        assert decode_records(data, "t", 0).offsets == [3, 4, 5, 6, 7]
        assert seen == [CompressionType.ZSTD]
        monkeypatch.setattr(records, "_decompress", refusing)
        with pytest.raises(OffsetOutOfRangeError):
            decode_records(data, "t", 0)
        monkeypatch.setattr(records, "_decompress", corrupt)
        with pytest.raises(CorruptRecordError, match="over the bound") as info:
            decode_records(data, "t", 0)
        assert info.value.offset == 3


# Batch header fields (offset, size) that steer the decoder, for targeted edits.
_FIELDS = [(0, 8), (8, 4), (12, 4), (16, 1), (21, 2), (23, 4), (27, 8), (35, 8), (43, 8), (57, 4)]


@needs_native
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.data())
def test_edited_header_fields_and_varints_give_the_same(
    case: tuple[list[list[RecordSpec]], list[bytes], int], data: st.DataObject
) -> None:
    """CRC unchecked (as when a CRC collides): header fields and varint bytes of the records
    set to edge values."""
    _groups, parts, base = case
    j = data.draw(st.integers(0, len(parts) - 1))
    part = bytearray(parts[j])
    if data.draw(st.booleans()):
        at, size = data.draw(st.sampled_from(_FIELDS))
        value = data.draw(
            st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31), 2**63 - 1])
            | st.integers(-3, 40)
            | st.integers(-(2 ** (8 * size - 1)), 2 ** (8 * size - 1) - 1)
        )
        value %= 1 << (8 * size)
        part[at : at + size] = value.to_bytes(size, "big")
    else:  # an uncompressed records section: edit bytes near its start
        i = min(len(part) - 1, 61 + data.draw(st.integers(0, 30)))
        part[i] = data.draw(st.sampled_from([0, 1, 2, 3, 0x7F, 0x80, 0x81, 0xFF]))
    whole = b"".join([*parts[:j], bytes(part), *parts[j + 1 :]])
    for level in IsolationLevel:
        _same_on_both_paths(
            whole,
            fetch_offset=base + data.draw(st.integers(-1, 5)),
            check_crcs=False,
            isolation_level=level,
            aborted_transactions=[AbortedTransaction(-1, base), AbortedTransaction(0, base)],
            partial_on_error=data.draw(st.booleans()),
        )


def test_consumer_reports_the_record_path_and_why_not_native() -> None:
    """The consumer_created INFO line names the path and the reason; metrics() has it."""
    code = (
        "from kafka_actors import KafkaConsumer, log\n"
        "log.configure(json=True, level='INFO')\n"
        "c = KafkaConsumer({'bootstrap.servers': '127.0.0.1:1', 'group.id': 'g'})\n"
        "try:\n"
        "    print('METRIC', c.metrics()['record-decoder'])\n"
        "finally:\n"
        "    c.close(1.0)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, records.PURE_ENV: "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    text = out.stdout + out.stderr
    created = [line for line in text.splitlines() if '"consumer_created"' in line]
    assert created, text[-2000:]
    assert '"record_decoder": "python"' in created[0]
    assert f'"record_decoder_reason": "{records.PURE_ENV} is set"' in created[0]
    assert "METRIC python" in text


def _lazy_sample(codec: CompressionType) -> tuple[bytes, list[ConsumerRecord]]:
    """Three batches (one compressed per codec, headers in the middle one), and the records
    the pure path makes of them."""
    specs = [
        RecordSpec(key=None if i % 3 == 0 else b"k%d" % i, value=b"v" * i, timestamp=1000 + i)
        for i in range(12)
    ]
    data = b"".join(
        build_batch(
            [replace(s, headers=(("h", b"x"), ("n", None))) if b == 1 else s for s in chunk],
            base_offset=4 * b,
            compression=codec,
            partition_leader_epoch=b or -1,
        )
        for b, chunk in enumerate((specs[0:4], specs[4:8], specs[8:12]))
    )
    with _pure():
        expected = list(decode_records(data, "t", 3, materialize=True))
    return data, expected


@needs_native
@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
def test_lazy_records_index_slice_and_iterate_like_a_list(codec: CompressionType) -> None:
    data, expected = _lazy_sample(codec)
    d = decode_records(bytearray(data), "t", 3, materialize=True)
    lazy = d.materialized
    assert lazy is not None and not isinstance(lazy, list)
    del data  # the records point into buffers the sequence keeps
    assert len(lazy) == len(expected) == 12
    assert list(lazy) == expected == d.records()
    assert [lazy[i] for i in range(-12, 12)] == expected + expected
    for s in (slice(None), slice(3, 9), slice(-5, None), slice(None, None, -2), slice(1, 11, 3)):
        assert lazy[s] == expected[s]
        assert records.slice_records(d, 2, 7) == expected[2:7]
    assert [d.offset_at(i) for i in range(12)] == [r.offset for r in expected]
    assert [lazy.offset_at(i) for i in (-1, 0)] == [11, 0]
    assert [d.leader_epoch_at(i) for i in (0, 5, 11)] == [None, 1, 2]
    for bad in (12, -13):
        with pytest.raises(IndexError):
            lazy[bad]
        with pytest.raises(IndexError):
            lazy.offset_at(bad)
    with pytest.raises(TypeError):
        lazy["0"]  # type: ignore[call-overload]
    assert pickle.loads(pickle.dumps(lazy[5])) == expected[5]


@needs_native
def test_lazy_records_show_only_batches_before_a_bad_one() -> None:
    data, expected = _lazy_sample(CompressionType.NONE)
    bad = bytearray(data)
    bad[-3] ^= 0xFF  # the third batch's CRC no longer matches
    d = decode_records(bytes(bad), "t", 3, materialize=True, partial_on_error=True)
    assert isinstance(d.error, CorruptRecordError) and d.error.offset == 8
    assert len(d) == 8 and list(d) == expected[:8] == d.materialized[:]  # type: ignore[index]
    assert d.next_fetch_offset == 8


@needs_native
def test_lazy_records_past_int64_offsets_and_timestamps_as_exact_ints() -> None:
    # offsets and timestamps whose base + delta overflow int64 are Python ints, as the pure
    # path gives them (the span keeps them as ints, not as int64)
    top = 2**63 - 3
    data = build_batch(
        [RecordSpec(key=b"a", value=b"b", timestamp=top + 5, offset_delta=5)],
        base_offset=top,
        base_timestamp=top,
        max_timestamp=top,
        last_offset_delta=0,
    )
    outcome = _same_on_both_paths(data)
    assert outcome[0] == "ok"
    (rec,) = decode_records(data, "t", 3, materialize=True)
    assert (rec.offset, rec.timestamp) == (top + 5, top + 5)
