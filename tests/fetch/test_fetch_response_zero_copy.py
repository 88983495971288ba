"""Fetch responses v12-v17 read without copying records: the same response kio reads, records
as views of the frame; every truncation a typed error; and the buffer lets a frame go once its
data is decoded or paused, so what it holds stays within the fetch limits (issue 26)."""

from __future__ import annotations

import dataclasses
import importlib
import io
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.writers import write_unsigned_varint
from kio.static.primitive import Records, i32Timedelta, uvarint

from kafka_actors.errors import InvalidFrameError, TruncatedFrameError
from kafka_actors.protocol.fetch.buffer import CompletedFetch, FetchBuffer
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.subscription import SubscriptionState
from kafka_actors.protocol.wire.fetch_response import FLEXIBLE_VERSIONS, decode_fetch_body

from .fetch_harness import batch

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))  # type: ignore[arg-type]


def _module(version: int) -> Any:
    return importlib.import_module(f"kio.schema.fetch.v{version}.response")


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, memoryview):
        return bytes(value)
    return value


@pytest.mark.parametrize("version", list(FLEXIBLE_VERSIONS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_same_response_as_kio_with_records_as_views(version: int, data: st.DataObject) -> None:
    module = _module(version)
    response = data.draw(st.from_type(module.FetchResponse))
    out = io.BytesIO()
    entity_writer(module.FetchResponse)(out, response)
    frame = memoryview(bytearray(out.getvalue())).toreadonly()
    theirs, size = entity_reader(module.FetchResponse)(frame, 0)
    ours, used = decode_fetch_body(frame, 0, version, module)
    assert used == size == len(frame)
    assert _plain(ours) == _plain(theirs)
    for topic in ours.responses:
        for partition in topic.partitions:
            assert partition.records is None or isinstance(partition.records, memoryview)
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises((TruncatedFrameError, InvalidFrameError)):
        decode_fetch_body(frame[:cut], 0, version, module)


def test_the_buffer_lets_a_frame_go_once_its_records_are_handed_out_or_paused() -> None:
    """Three partitions' data are views of one frame (as the consumer's connections decode a
    Fetch response), and on the native record path their decoded records are spans into it.
    A partition paused before all its records were polled would keep the whole frame alive
    for as long as it stays paused, and partitions paused at different times one frame each:
    when a collect sets a paused partition aside, its data (not decoded yet) and its records
    (decoded, partly handed out) get their own bytes. A bytearray cannot grow while any view
    of it exists, which is what is checked."""
    tps = [TopicPartition("t", p) for p in range(3)]
    subs = SubscriptionState()
    subs.assign_from_user(tps)
    for tp in tps:
        subs.seek(tp, 0)
    buffer = FetchBuffer(subs)
    parts = [batch(0, 5 + p) for p in range(3)]
    frame = bytearray(b"".join(parts))
    start = 0
    for tp, part in zip(tps, parts, strict=True):
        view = memoryview(frame)[start : start + len(part)].toreadonly()
        start += len(part)
        buffer.add(
            CompletedFetch(tp=tp, fetch_offset=0, data=view, aborted=None, node=1, next_offset=0)
        )
    del view
    assert buffer.buffered_bytes == len(frame)
    with pytest.raises(BufferError):
        frame.append(0)  # the views hold it
    subs.pause([tps[0]])
    # tps[0] paused before it was decoded; tps[1] handed out whole; tps[2] only in part
    result = buffer.collect(8)
    assert {tp: len(r) for tp, r in result.records.items()} == {tps[1]: 6, tps[2]: 2}
    assert buffer.buffered_bytes == len(parts[0]) + len(parts[2])  # the bound counts what came
    subs.pause([tps[2]])
    assert buffer.collect(100).records == {}
    frame.append(0)  # no view is left
    frame[:] = bytes(len(frame))  # the frame's buffer reused for another response
    subs.resume(tps)
    records = buffer.collect(100).records
    assert [r.value for r in records[tps[0]]] == [f"v{i}".encode() for i in range(5)]
    assert [r.value for r in records[tps[2]]] == [f"v{i}".encode() for i in range(2, 7)]
    assert buffer.buffered_bytes == 0


def test_unknown_tagged_fields_are_skipped_and_not_kept() -> None:
    """Tagged fields a version does not know are skipped (KIP-482). A hostile frame of many
    tiny unknown tags must not make the reader hold an entry for each: 200,000 of them (about
    0.8 MB of frame) decode to the same response with little memory allocated."""
    import tracemalloc

    version = 17
    module = _module(version)
    response = module.FetchResponse(
        throttle_time=i32Timedelta.parse(timedelta(0)),
        error_code=ErrorCode.none,
        session_id=7,
        responses=(),
    )
    out = io.BytesIO()
    entity_writer(module.FetchResponse)(out, response)
    body = out.getvalue()
    assert body[-1] == 0  # the response's tagged-field count, last
    count = 200_000
    # distinct tags from 1,000 on, each without a value
    tagged = io.BytesIO()
    write_unsigned_varint(tagged, uvarint(count))
    for i in range(count):
        write_unsigned_varint(tagged, uvarint(1000 + i))
        write_unsigned_varint(tagged, uvarint(0))
    tags = tagged.getvalue()
    frame = memoryview(bytearray(body[:-1] + tags)).toreadonly()
    tracemalloc.start()
    try:
        ours, used = decode_fetch_body(frame, 0, version, module)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert used == len(frame)
    assert (ours.session_id, ours.responses) == (7, ())
    assert peak < 200_000
