"""``FetchManager.collect(columnar=True)``: the same records, positions and bookkeeping as
``collect()``, as column slices of the decoded responses (no ConsumerRecord made); one
response's records per partition per collect (each partition's batch one zero-copy slice)."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_actors.protocol.fetch.buffer import ColumnSlice, FetchResult
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.decode import slice_records

from .fetch_harness import Part, batch, setup
from .test_fetch_ahead import respond

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
LEADERS = {T0: (1, 5), T1: (1, 5)}


def offsets(result: FetchResult) -> dict[TopicPartition, list[int]]:
    """The offsets handed out, per partition, whichever way they were collected."""
    if result.columns:
        return {
            tp: [r.offset for s in slices for r in slice_records(s.decoded, s.start, s.end)]
            for tp, slices in result.columns.items()
        }
    return {tp: [r.offset for r in recs] for tp, recs in result.records.items()}


def _run(columnar: bool) -> list[tuple[Any, ...]]:
    """Three collects over the same responses: what each hands out and where it leaves the
    positions (and the consumed positions)."""
    fm, subs = setup({T0: 0, T1: 0}, LEADERS, max_poll_records=4)
    respond(
        fm,
        0,
        {
            T0: Part(batch(0, 3, leader_epoch=4) + batch(3, 2, leader_epoch=6)),
            T1: Part(batch(0, 3)),
        },
    )
    out = []
    for limit in (4, 2, 10):
        result = fm.collect(limit, columnar=columnar)
        assert (result.records == {}) == columnar or not result.record_count
        out.append(
            (
                offsets(result),
                result.record_count,
                dict(result.positions),
                subs.position(T0),
                subs.position(T1),
                dict(subs.all_consumed()),
            )
        )
    return out


def test_the_same_records_positions_and_consumed_positions_as_collect() -> None:
    assert _run(columnar=True) == _run(columnar=False)


def test_slices_are_of_the_decoded_columns_and_know_their_offsets() -> None:
    fm, _ = setup({T0: 0}, LEADERS)
    respond(fm, 0, {T0: Part(batch(0, 3) + batch(3, 2, leader_epoch=6))})
    result = fm.collect(4, columnar=True)
    (piece,) = result.columns[T0]
    assert isinstance(piece, ColumnSlice)
    assert (piece.start, piece.end, len(piece)) == (0, 4, 4)
    assert (piece.first_offset, piece.last_offset) == (0, 3)
    assert result.positions[T0].offset == 4 and result.positions[T0].offset_epoch == 6
    decoded = piece.decoded
    if decoded.native_columns is not None:  # the native path: Arrow buffers, no objects
        assert decoded.offsets == [] and decoded.materialized is None


def test_one_response_per_partition_per_columnar_collect() -> None:
    fm, _ = setup({T0: 0}, LEADERS, fetch_ahead=True)
    respond(fm, 0, {T0: Part(batch(0, 3))})
    respond(fm, 1, {T0: Part(batch(3, 4))})  # fetched ahead: a second buffered response
    first = fm.collect(100, columnar=True)
    assert offsets(first) == {T0: [0, 1, 2]}
    assert offsets(fm.collect(100, columnar=True)) == {T0: [3, 4, 5, 6]}
    fm2, _ = setup({T0: 0}, LEADERS, fetch_ahead=True)
    respond(fm2, 0, {T0: Part(batch(0, 3))})
    respond(fm2, 1, {T0: Part(batch(3, 4))})
    assert offsets(fm2.collect(100)) == {T0: [0, 1, 2, 3, 4, 5, 6]}  # collect() takes both


@pytest.mark.parametrize("first_columnar", [True, False])
def test_collects_of_both_kinds_continue_each_other(first_columnar: bool) -> None:
    fm, subs = setup({T0: 0}, LEADERS)
    respond(fm, 0, {T0: Part(batch(0, 5))})
    a = fm.collect(2, columnar=first_columnar)
    b = fm.collect(10, columnar=not first_columnar)
    assert offsets(a)[T0] + offsets(b)[T0] == [0, 1, 2, 3, 4]
    assert subs.position(T0).offset == 5  # type: ignore[union-attr]
