"""FetchManager with ``fetch_ahead``: a partition with one buffered response is fetched again
from where its data ends; the data is used only while it continues the buffered chain."""

from __future__ import annotations

from typing import Any

from kafka_actors.protocol.fetch.config import FetchConfig
from kafka_actors.protocol.fetch.manager import FetchManager
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.build import build_control_batch

from .fetch_harness import Part, batch, fetch_response, requested, setup

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
LEADERS = {T0: (1, 5), T1: (1, 5)}


def offsets(records: Any) -> list[int]:
    return [r.offset for r in records]


def respond(
    fm: FetchManager, now: int, parts: dict[TopicPartition, Part]
) -> dict[TopicPartition, int]:
    """Answer the one request poll() sends; returns what it asked for (partition -> offset)."""
    (request,) = fm.poll(now).requests
    asked = {tp: p.fetch_offset for tp, p in requested(request).items()}
    mine = {tp: parts.get(tp, Part()) for tp in asked}
    fm.on_response(request.request_id, fetch_response(17, mine, session_id=9), now)
    return asked


def test_buffered_partition_is_fetched_from_where_its_data_ends() -> None:
    fm, subs = setup({T0: 0}, LEADERS, fetch_ahead=True)
    assert respond(fm, 0, {T0: Part(batch(0, 3) + batch(3, 2))}) == {T0: 0}
    # One response buffered: fetched again from offset 5 while nothing was collected yet.
    assert respond(fm, 1, {T0: Part(batch(5, 4))}) == {T0: 5}
    # Two responses buffered: no third until one is drained.
    assert fm.poll(2).requests == ()
    result = fm.collect(3)
    assert offsets(result.records[T0]) == [0, 1, 2]
    assert fm.poll(3).requests == ()  # the first response is not drained yet
    assert offsets(fm.collect(10).records[T0]) == [3, 4, 5, 6, 7, 8]
    assert subs.valid_position(T0).offset == 9  # type: ignore[union-attr]
    # Both drained in one collect: fetched from the position.
    assert respond(fm, 4, {}) == {T0: 9}


def test_fetch_ahead_off_is_javas_rule() -> None:
    fm, _ = setup({T0: 0}, LEADERS)
    assert FetchConfig().fetch_ahead is False
    respond(fm, 0, {T0: Part(batch(0, 3))})
    assert fm.poll(1).requests == ()  # nothing to fetch while T0 has data buffered


def test_a_seek_drops_the_chain() -> None:
    fm, subs = setup({T0: 0}, LEADERS, fetch_ahead=True)
    respond(fm, 0, {T0: Part(batch(0, 3))})
    respond(fm, 1, {T0: Part(batch(3, 3))})
    subs.seek(T0, 1)
    assert respond(fm, 2, {T0: Part(batch(0, 6))}) == {T0: 1}
    assert fm.buffered_bytes == len(batch(0, 6))
    assert offsets(fm.collect(10).records[T0]) == [1, 2, 3, 4, 5]


def test_response_to_a_fetch_ahead_after_a_seek_is_stale() -> None:
    fm, subs = setup({T0: 0}, LEADERS, fetch_ahead=True)
    respond(fm, 0, {T0: Part(batch(0, 3))})
    (ahead,) = fm.poll(1).requests
    assert requested(ahead)[T0].fetch_offset == 3
    subs.seek(T0, 100)  # meanwhile: the buffered data and what is in flight are stale
    fm.on_response(ahead.request_id, fetch_response(17, {T0: Part(batch(3, 3))}, session_id=9), 2)
    result = fm.collect(10)
    assert result.records == {}
    assert fm.buffered_bytes == 0


def test_control_batch_at_the_end_moves_the_next_fetch_past_it() -> None:
    fm, subs = setup({T0: 0}, LEADERS, fetch_ahead=True)
    data = batch(0, 2, producer_id=7, producer_epoch=0, transactional=True) + (
        build_control_batch(base_offset=2, producer_id=7, producer_epoch=0, commit=True)
    )
    respond(fm, 0, {T0: Part(data)})
    assert respond(fm, 1, {T0: Part(batch(3, 2))}) == {T0: 3}
    # One collect goes on from the first response into the second: the chain holds.
    assert offsets(fm.collect(10).records[T0]) == [0, 1, 3, 4]
    assert subs.valid_position(T0).offset == 5  # type: ignore[union-attr]


def test_paused_partition_keeps_its_chain() -> None:
    fm, subs = setup({T0: 0, T1: 0}, LEADERS, fetch_ahead=True)
    respond(fm, 0, {T0: Part(batch(0, 2)), T1: Part(batch(0, 2))})
    respond(fm, 1, {T0: Part(batch(2, 2)), T1: Part(batch(2, 2))})
    subs.pause([T0])
    result = fm.collect(10)
    assert set(result.records) == {T1}
    fm.poll(2)
    assert fm.buffered_partitions() >= {T0}
    subs.resume([T0])
    assert offsets(fm.collect(10).records[T0]) == [0, 1, 2, 3]


def test_data_fetched_ahead_of_a_corrupt_batch_serves_a_seek_past_it() -> None:
    fm, subs = setup({T0: 0}, LEADERS, fetch_ahead=True)
    good = batch(0, 2)
    bad = bytearray(batch(2, 2))
    bad[-1] ^= 0xFF  # CRC mismatch
    respond(fm, 0, {T0: Part(good + bytes(bad))})
    assert respond(fm, 1, {T0: Part(batch(4, 2))}) == {T0: 4}
    assert offsets(fm.collect(10).records[T0]) == [0, 1]
    error = fm.collect(10).error
    assert error is not None and error.offset == 2
    assert subs.valid_position(T0).offset == 2  # type: ignore[union-attr]
    assert fm.collect(10).error is not None  # raised again while the position stays
    subs.seek(T0, 4)  # the user skips the bad batch: the data fetched from 4 continues it
    assert offsets(fm.collect(10).records[T0]) == [4, 5]
    subs.seek(T0, 0)
    assert fm.collect(10).records == {}  # and a seek back drops everything buffered
    assert fm.buffered_bytes == 0
