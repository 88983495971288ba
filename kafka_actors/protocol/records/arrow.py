"""Fetched records as Arrow columns: the columnar poll's and the Spark source's batches.

Owns: the Arrow schema of the records handed out in columns (Spark's Kafka source columns, in
its order) and the making of a ``pyarrow.RecordBatch`` from a
:class:`~kafka_actors.protocol.records.decode.DecodedRecords`, whichever form its records are in:

- Arrow buffers filled in C (``DecodedRecords.native_columns``, decoding with
  ``columnar=True`` on the native record path): wrapped with ``pa.Array.from_buffers``, no
  Python object per record and no copy; the batch of the whole decoded data is made once
  (``DecodedRecords.arrow``) and handed out in zero-copy slices;
- the pure path's record columns (lists), converted by pyarrow (slower, same batch);
- ConsumerRecords (data a ``poll()`` started on): converted the same way.

The schema::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp (Kafka's milliseconds, as microseconds in UTC), timestampType int,
    headers array<struct<key string, value binary>>   (only with include_headers)

May touch: nothing but its arguments and pyarrow, imported when first needed
(:func:`require_pyarrow` raises ``MissingDependencyError`` without it). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from kafka_actors.errors import MissingDependencyError
from kafka_actors.protocol.records.decode import ConsumerRecord, DecodedRecords

__all__ = [
    "arrow_schema",
    "concat_batches",
    "record_batch",
    "records_batch",
    "require_pyarrow",
]

_pa: ModuleType | None = None
_schemas: dict[bool, Any] = {}


def require_pyarrow() -> ModuleType:
    """The pyarrow module, or ``MissingDependencyError`` naming what to install."""
    global _pa
    if _pa is None:
        try:
            import pyarrow
        except ImportError as exc:
            raise MissingDependencyError(
                "the columnar poll needs pyarrow (pip install 'kafka-actors[arrow]' or "
                f"pyarrow itself): {exc}"
            ) from None
        _pa = pyarrow
    return _pa


def header_type() -> Any:
    """``list<struct<key string, value binary>>``: Spark's headers column."""
    pa = require_pyarrow()
    return pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))


def arrow_schema(include_headers: bool) -> Any:
    """The ``pyarrow.Schema`` of the batches (see the module docstring)."""
    schema = _schemas.get(include_headers)
    if schema is None:
        pa = require_pyarrow()
        schema = pa.schema(
            [
                ("key", pa.binary()),
                ("value", pa.binary()),
                ("topic", pa.string()),
                ("partition", pa.int32()),
                ("offset", pa.int64()),
                ("timestamp", pa.timestamp("us", tz="UTC")),
                ("timestampType", pa.int32()),
            ]
        )
        if include_headers:
            schema = schema.append(pa.field("headers", header_type()))
        schema = _schemas[include_headers] = schema
    return schema


def record_batch(decoded: DecodedRecords, start: int, end: int, include_headers: bool) -> Any:
    """Records ``start``..``end-1`` of ``decoded`` as one ``pyarrow.RecordBatch``."""
    start = max(start, 0)
    end = min(end, len(decoded))
    if decoded.native_columns is not None:
        both = decoded.arrow
        if both is None:
            both = decoded.arrow = _from_native(decoded)
        full = both[include_headers]
        return full if start == 0 and end == full.num_rows else full.slice(start, end - start)
    return _from_lists(decoded, start, end, include_headers)


def records_batch(records: Sequence[ConsumerRecord], include_headers: bool) -> Any:
    """ConsumerRecords of one partition (collected by a ``getmany()``, returned by a columnar
    call) as one RecordBatch, converted by pyarrow."""
    first = records[0]
    decoded = DecodedRecords(
        first.topic, first.partition, next_fetch_offset=0, materialized=list(records)
    )
    return _from_lists(decoded, 0, len(records), include_headers)


def concat_batches(batches: Sequence[Any]) -> Any:
    """One RecordBatch of ``batches`` (same schema); the batch itself when only one."""
    if len(batches) == 1:
        return batches[0]
    pa = require_pyarrow()
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def _binary(
    pa: ModuleType, kind: Any, n: int, validity: bytes | None, offsets: bytes, data: bytes
) -> Any:
    return pa.Array.from_buffers(
        kind,
        n,
        [
            None if validity is None else pa.py_buffer(validity),
            pa.py_buffer(offsets),
            pa.py_buffer(data),
        ],
    )


def _timestamps(pa: ModuleType, ms: Any) -> Any:
    return ms.cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC"))


def _from_native(decoded: DecodedRecords) -> tuple[Any, Any]:
    """The whole of columnar-decoded records (Arrow buffers filled in C) as RecordBatches
    without and with headers: the buffers are wrapped, not copied, and only pyarrow calls that
    keep the GIL are made (one that gives it up, cast or repeat, waits for the GIL again behind
    the actor threads, up to a switch interval: a poll's whole cost, measured)."""
    pa = require_pyarrow()
    assert decoded.native_columns is not None
    (n, offsets, timestamps, ts_types, header_offsets, nh, *rest) = decoded.native_columns
    binary, (topic_offsets, topic_data, partitions) = rest[:12], rest[12:]
    entries = pa.StructArray.from_arrays(
        [_binary(pa, pa.string(), nh, *binary[6:9]), _binary(pa, pa.binary(), nh, *binary[9:12])],
        names=["key", "value"],
    )
    arrays = [
        _binary(pa, pa.binary(), n, *binary[0:3]),
        _binary(pa, pa.binary(), n, *binary[3:6]),
        _binary(pa, pa.string(), n, None, topic_offsets, topic_data),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(partitions)]),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)]),
        pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, pa.py_buffer(timestamps)]),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(ts_types)]),
    ]
    headers = pa.Array.from_buffers(
        header_type(), n, [None, pa.py_buffer(header_offsets)], children=[entries]
    )
    return (
        pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(False)),
        pa.RecordBatch.from_arrays([*arrays, headers], schema=arrow_schema(True)),
    )


def _from_lists(decoded: DecodedRecords, start: int, end: int, include_headers: bool) -> Any:
    """Records ``start``..``end-1`` of the pure path's columns (or of ConsumerRecords) as a
    RecordBatch, converted by pyarrow."""
    pa = require_pyarrow()
    n = max(0, end - start)
    if decoded.materialized is not None:
        recs = decoded.materialized[start:end]
        keys = [r.key for r in recs]
        values = [r.value for r in recs]
        offsets = [r.offset for r in recs]
        stamps = [r.timestamp for r in recs]
        types = [int(r.timestamp_type) for r in recs]
        headers = [r.headers for r in recs]
    else:
        keys = decoded.keys[start:end]
        values = decoded.values[start:end]
        offsets = decoded.offsets[start:end]
        stamps = decoded.timestamps[start:end]
        types = []
        first = 0
        for batch_end, ts_type in zip(
            decoded.batch_ends, decoded.batch_timestamp_types, strict=True
        ):
            lo, hi = max(first, start), min(batch_end, end)
            if hi > lo:
                types.extend([int(ts_type)] * (hi - lo))
            first = batch_end
        headers = decoded.headers[start:end]
    arrays = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(decoded.topic, pa.string()), n),
        pa.repeat(pa.scalar(decoded.partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        _timestamps(pa, pa.array(stamps, pa.int64())),
        pa.array(types, pa.int32()),
    ]
    if include_headers:
        arrays.append(
            pa.array([[{"key": k, "value": v} for k, v in hs] for hs in headers], header_type())
        )
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))
