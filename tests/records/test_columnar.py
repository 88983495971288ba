"""Columnar decoding (``decode_records(columnar=True)``) and its Arrow batches
(:mod:`kafka_actors.protocol.records.arrow`): the rows of the batch are the records the record path
gives, on the native path (Arrow buffers filled in C) and on the pure path, for every codec,
headers, nulls, control batches, aborted transactions, truncated and corrupted input."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_actors.errors import CorruptRecordError, KafkaError
from kafka_actors.protocol.records import arrow
from kafka_actors.protocol.records import decode as records
from kafka_actors.protocol.records.build import RecordSpec, build_batch, build_control_batch
from kafka_actors.protocol.records.decode import (
    CompressionType,
    ConsumerRecord,
    TimestampType,
    decode_records,
)

from .test_native import corrupted_cases, transaction_cases
from .test_properties import batches, transactions

pa = pytest.importorskip("pyarrow")

PATHS = ["native", "python"] if records._native is not None else ["python"]


@contextmanager
def _path(path: str) -> Iterator[None]:
    saved = records._native, records._slice_columns
    if path == "python":
        records._native, records._slice_columns = None, records._slice_records_python
    try:
        yield
    finally:
        records._native, records._slice_columns = saved


def row_of(record: ConsumerRecord) -> dict[str, Any]:
    """A record as the row the columnar batch must hold for it."""
    return {
        "key": record.key,
        "value": record.value,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp * 1000,  # microseconds (as int: years past 9999 too)
        "timestampType": int(record.timestamp_type),
        "headers": [{"key": k, "value": v} for k, v in record.headers],
    }


def batch_rows(batch: Any) -> list[dict[str, Any]]:
    """The rows of a columnar batch (timestamps as microseconds since the epoch)."""
    columns = {
        name: (column.cast(pa.int64()) if name == "timestamp" else column).to_pylist()
        for name, column in zip(batch.schema.names, batch.columns, strict=True)
    }
    return [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def _rows(data: bytes, **kw: Any) -> tuple[str, Any]:
    """The record path's records as rows (and its error), or its typed error."""
    try:
        d = decode_records(data, "t", 3, **kw)
    except KafkaError as exc:
        return "error", (type(exc), exc.offset)
    error = None if d.error is None else (type(d.error), d.error.offset)
    return "ok", ([row_of(r) for r in d], d.next_fetch_offset, d.bytes_consumed, error)


def _columnar_rows(data: bytes, **kw: Any) -> tuple[str, Any]:
    try:
        d = decode_records(data, "t", 3, columnar=True, **kw)
    except KafkaError as exc:
        return "error", (type(exc), exc.offset)
    error = None if d.error is None else (type(d.error), d.error.offset)
    batch = arrow.record_batch(d, 0, len(d), include_headers=True)
    assert batch.schema == arrow.arrow_schema(True)
    assert batch.num_rows == len(d)
    # a poll after a columnar poll on the same data: the records again, from the columns
    rows = batch_rows(batch)
    assert [row_of(r) for r in records.slice_records(d, 0, len(d))] == rows
    return "ok", (rows, d.next_fetch_offset, d.bytes_consumed, error)


def _same(data: bytes, **kw: Any) -> tuple[str, Any]:
    """The columnar batch's rows are the record path's records, on every path."""
    outcomes = []
    for path in PATHS:
        with _path(path):
            expected = _rows(data, **kw)
            assert _columnar_rows(data, **kw) == expected, path
            outcomes.append(expected)
    assert all(o == outcomes[0] for o in outcomes)
    return outcomes[0]


@pytest.mark.parametrize("codec", list(CompressionType))
def test_every_codec_headers_nulls_log_append_time_and_control_batches(
    codec: CompressionType,
) -> None:
    specs = [
        RecordSpec(key=None if i % 3 else b"k%d" % i, value=None if i == 4 else b"v" * i, headers=h)
        for i, h in enumerate(
            [
                (),
                (("a", b"1"),),
                (("a", b"1"),),
                (("a", None), ("b", b"")),
                (("\u00e9t\u00e9", b"x"),),
            ]
            * 3
        )
    ]
    data = (
        build_batch(specs, base_offset=10, compression=codec, partition_leader_epoch=4)
        + build_control_batch(base_offset=25, producer_id=7, producer_epoch=0, commit=True)
        + build_batch(
            specs,
            base_offset=26,
            compression=codec,
            timestamp_type=TimestampType.LOG_APPEND_TIME,
            log_append_time=1_700_000_000_000,
        )
    )
    kind, (rows, next_offset, _consumed, _error) = _same(data, fetch_offset=12)
    assert kind == "ok"
    assert [r["offset"] for r in rows] == list(range(12, 25)) + list(range(26, 41))
    assert {r["timestampType"] for r in rows[13:]} == {1}
    assert rows[0]["key"] is None and rows[1]["key"] == b"k3" and rows[2]["value"] is None
    assert rows[1]["headers"] == [{"key": "a", "value": None}, {"key": "b", "value": b""}]
    assert rows[2]["headers"] == [{"key": "\u00e9t\u00e9", "value": b"x"}]
    assert next_offset == 41


def test_a_header_key_that_is_not_utf8_is_replaced_as_on_the_record_path() -> None:
    data = build_batch(
        [RecordSpec(value=b"v", headers=(("ok", b"1"),)), RecordSpec(value=b"w")], base_offset=0
    )
    bad = data.replace(b"\x04ok", b"\x04\xff\xfe")  # the key bytes, CRC unchecked below
    kind, (rows, *_rest) = _same(bad, check_crcs=False)
    assert kind == "ok"
    assert rows[0]["headers"] == [{"key": "\ufffd\ufffd", "value": b"1"}]


def test_only_some_rows_sliced_without_copy_and_without_headers() -> None:
    data = build_batch([RecordSpec(value=b"%d" % i) for i in range(10)], base_offset=100)
    for path in PATHS:
        with _path(path):
            d = decode_records(data, "t", 3, columnar=True)
            part = arrow.record_batch(d, 3, 7, include_headers=False)
            assert part.schema == arrow.arrow_schema(False)
            assert part.column("offset").to_pylist() == [103, 104, 105, 106]
            assert part.column("value").to_pylist() == [b"3", b"4", b"5", b"6"]
            assert d.offset_at(6) == 106 and d.leader_epoch_at(6) is None
    if records._native is not None:
        d = decode_records(data, "t", 3, columnar=True)
        assert d.native_columns is not None and d.offsets == [] and len(d) == 10
        full = arrow.record_batch(d, 0, 10, include_headers=True)
        part = arrow.record_batch(d, 3, 7, include_headers=True)
        assert (
            part.column("value").buffers()[2].address == full.column("value").buffers()[2].address
        )


def test_columnar_and_materialize_exclude_each_other() -> None:
    with pytest.raises(ValueError, match="exclude"):
        decode_records(b"", "t", 0, columnar=True, materialize=True)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.data())
def test_valid_input_gives_the_same_rows(
    case: tuple[list[list[RecordSpec]], list[bytes], int], data: st.DataObject
) -> None:
    _groups, parts, base = case
    whole = b"".join(parts)
    cut = data.draw(st.sampled_from([len(whole), data.draw(st.integers(0, len(whole)))]))
    kind, _ = _same(whole[:cut], fetch_offset=base + data.draw(st.integers(-2, 40)))
    assert kind == "ok"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.data(), st.booleans(), st.booleans())
def test_corrupted_input_gives_the_same_rows_or_error(
    case: tuple[list[list[RecordSpec]], list[bytes], int],
    data: st.DataObject,
    check_crcs: bool,
    partial: bool,
) -> None:
    for buf, kw in corrupted_cases(case, data, check_crcs, partial):
        if _columns_refuse(buf, **kw):
            # a corrupted offset or timestamp past what Arrow's int64 columns hold: the columnar
            # path refuses the batch by design (test_timestamps_past_the_microsecond_range_...),
            # the record path hands the value out
            continue
        _same(buf, **kw)


_INT64_RANGE = range(-(2**63), 2**63)


def _columns_refuse(data: bytes, **kw: Any) -> bool:
    """Whether the record path decodes a record the columns cannot hold (an offset past int64,
    a timestamp whose microseconds leave int64) before its first error, if any: the columnar
    path refuses that batch, at its base offset, ahead of any later error. The records before
    the first error are those ``partial_on_error`` hands out, whatever ``kw`` asks for (the
    record path raising on a later batch does not make the refused one go away)."""
    kind, result = _rows(data, **{**kw, "partial_on_error": True})
    return kind == "ok" and any(
        row["offset"] not in _INT64_RANGE or row["timestamp"] not in _INT64_RANGE
        for row in result[0]
    )


@settings(max_examples=100, deadline=None)
@given(transactions())
def test_aborted_transactions_give_the_same_rows(
    case: tuple[bytes, list[tuple[int, int]], list[bytes]],
) -> None:
    for data, kw in transaction_cases(case):
        kind, _ = _same(data, **kw)
        assert kind == "ok"


def test_missing_pyarrow_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from kafka_actors.errors import MissingDependencyError

    real_import = builtins.__import__

    def no_pyarrow(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pyarrow" or name.startswith("pyarrow."):
            raise ImportError("No module named 'pyarrow'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(arrow, "_pa", None)
    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(MissingDependencyError, match="pyarrow"):
        arrow.require_pyarrow()


def test_timestamps_past_the_microsecond_range_are_corrupt_in_columns_on_both_paths() -> None:
    """Arrow's timestamps are microseconds: a batch whose milliseconds do not fit is refused
    (typed, at its base offset, the batches before it kept), alike on both paths; the record
    path hands the value out as it is."""
    data = build_batch([RecordSpec(value=b"a", timestamp=5)], base_offset=0) + build_batch(
        [RecordSpec(value=b"b", timestamp=2**62)], base_offset=1
    )
    for path in PATHS:
        with _path(path):
            d = decode_records(data, "t", 3, columnar=True, partial_on_error=True)
            assert d.error is not None and d.error.offset == 1
            assert "microsecond" in str(d.error)
            assert batch_rows(arrow.record_batch(d, 0, len(d), False)) == [
                {"key": None, "value": b"a", "topic": "t", "partition": 3, "offset": 0,
                 "timestamp": 5000, "timestampType": 0}
            ]  # fmt: skip
            assert [r.timestamp for r in decode_records(data, "t", 3)] == [5, 2**62]


def test_a_batch_past_microseconds_before_a_corrupt_one_is_the_columnar_error() -> None:
    """Without ``partial_on_error``: the columnar path raises at the batch it cannot hold (the
    first error it meets), the record path hands that batch out and raises at the corrupt batch
    after it. Alike on both paths; the differential fuzz skips the case (hypothesis found it:
    the record path's error at offset 12, the columnar one at the refused batch's 2**56)."""
    good = build_batch([RecordSpec(value=b"a", timestamp=2**62)], base_offset=2**56)
    bad = bytearray(build_batch([RecordSpec(value=b"b")], base_offset=2**56 + 1))
    bad[-1] ^= 0xFF  # the CRC no longer matches
    data = good + bytes(bad)
    for path in PATHS:
        with _path(path):
            assert _rows(data, check_crcs=True) == ("error", (CorruptRecordError, 2**56 + 1))
            assert _columnar_error(data, check_crcs=True) == (
                "error",
                (CorruptRecordError, 2**56, "microsecond"),
            )
            assert _columns_refuse(data, check_crcs=True)


def _columnar_error(data: bytes, **kw: Any) -> tuple[str, Any]:
    try:
        decode_records(data, "t", 3, columnar=True, **kw)
    except KafkaError as exc:
        return "error", (type(exc), exc.offset, "microsecond" if "microsecond" in str(exc) else "")
    return "ok", None


@pytest.mark.parametrize(
    ("specs", "base_offset", "fetch_offset"),
    [
        ([RecordSpec(value=b"a", timestamp=2**62), RecordSpec(value=b"b", timestamp=5)], 0, 1),
        (
            [RecordSpec(value=b"a", offset_delta=-1), RecordSpec(value=b"b", offset_delta=1)],
            -(2**63),
            -(2**63) + 1,
        ),
    ],
    ids=["timestamp-past-microseconds", "offset-below-int64"],
)
def test_a_record_dropped_below_the_fetch_offset_is_not_refused_by_the_columns(
    specs: list[RecordSpec], base_offset: int, fetch_offset: int
) -> None:
    """A record below the fetch offset is dropped, not put in a column: an offset or timestamp
    the columns could not hold does not refuse its batch (the record path hands out the rest of
    it), on both paths."""
    data = build_batch(specs, base_offset=base_offset)
    kind, (rows, _next, _consumed, error) = _same(data, fetch_offset=fetch_offset)
    assert kind == "ok" and error is None
    assert [(r["offset"], r["value"]) for r in rows] == [(base_offset + 1, b"b")]


@pytest.mark.skipif(records._native is None, reason="the native path's Arrow sink")
def test_full_columns_stop_before_a_batch_as_before_a_truncated_one() -> None:
    """An Arrow binary column holds 2 GiB (int32 offsets): decoding stops before the batch
    that would not fit, as before a truncated batch (the next fetch starts at it); a first
    batch that does not fit alone is corrupt. The bound is lowered here to show it."""
    assert records._native is not None
    parts = [build_batch([RecordSpec(value=b"x" * 400)], base_offset=i) for i in range(3)]
    data = b"".join(parts)
    records._native.set_column_limit(1000)
    try:
        d = decode_records(data, "t", 0, columnar=True)
        assert len(d) == 2 and d.next_fetch_offset == 2
        assert d.bytes_consumed == len(parts[0]) + len(parts[1])
        records._native.set_column_limit(300)
        d = decode_records(data, "t", 0, columnar=True, partial_on_error=True)
        assert len(d) == 0 and d.error is not None and d.error.offset == 0
        assert "2 GiB" in str(d.error)
    finally:
        records._native.set_column_limit(2**31 - 1)
    assert len(decode_records(data, "t", 0, columnar=True)) == 3
