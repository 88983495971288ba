"""The consumed view: "all consumed" commits (auto-commit on poll, the commit before a
revocation, commit_sync() without offsets) cover only records handed out to the application,
never records the fetch manager collected (moving the fetch position) that a front end has not
returned yet. Java's consumer commits what poll() returned; a commit past records the
application never received loses them when the consumer stops or the partition moves."""

from __future__ import annotations

from kafka_actors.protocol.group.consumer.membership import CommitBeforeRevocation
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.records.build import build_control_batch
from kafka_actors.protocol.subscription import FetchPosition, SubscriptionState
from tests.fetch.fetch_harness import Part, batch, fetch_response, requested, setup

from .harness import Harness, oam, request_offsets, tp

A0 = tp("a", 0)
A1 = tp("a", 1)
T0 = TopicPartition("t", 0)
LEADERS = {T0: (1, 5)}


def _collected(h: Harness, partition: TopicPartition, start: int, end: int) -> None:
    """The fetch manager handed records [start, end) to a front end (position moved) that
    has not returned them to the application yet."""
    assert h.subs.advance_position(partition, start, FetchPosition(end, 2))


# -- SubscriptionState ---------------------------------------------------------------------------


def test_collected_records_count_as_consumed_only_once_handed_out() -> None:
    s = SubscriptionState()
    s.assign_from_user([T0])
    s.seek(T0, 10)
    assert s.advance_position(T0, 10, FetchPosition(20, 3))
    assert s.position(T0) == FetchPosition(20, 3)
    assert s.all_consumed() == {T0: OffsetAndMetadata(10)}  # not returned yet
    assert s.advance_consumed(T0, FetchPosition(20, 3))
    assert s.all_consumed() == {T0: OffsetAndMetadata(20, "", 3)}


def test_consumed_never_passes_the_position_and_follows_seeks() -> None:
    s = SubscriptionState()
    s.assign_from_user([T0])
    s.seek(T0, 10)
    assert not s.advance_consumed(T0, FetchPosition(11))  # beyond the position
    assert s.advance_position(T0, 10, FetchPosition(15))
    assert s.advance_consumed(T0, FetchPosition(12))  # part of what was collected
    assert s.all_consumed() == {T0: OffsetAndMetadata(12)}
    s.seek(T0, 4)  # a seek is consumed at once (committing after it commits it)
    assert s.all_consumed() == {T0: OffsetAndMetadata(4)}
    # Conditional form (a collect that moved past records-less batches only).
    assert not s.advance_consumed(T0, FetchPosition(4), from_offset=3)
    assert s.advance_position(T0, 4, FetchPosition(6))
    assert s.advance_consumed(T0, FetchPosition(6), from_offset=4)
    assert s.all_consumed() == {T0: OffsetAndMetadata(6)}
    assert not s.advance_consumed(TopicPartition("t", 9), FetchPosition(1))  # not assigned


def test_one_record_at_a_time_moves_the_consumed_position_every_reader_sees() -> None:
    """consume_one (``async for``): the move is kept aside and written into the state at its
    next read, so partition_state(), all_consumed() and the commit before a revocation all
    see it; a seek, reset or any other write of the state after it wins."""
    s = SubscriptionState()
    s.assign_from_user([T0])
    s.seek(T0, 10)
    assert s.advance_position(T0, 10, FetchPosition(15, 2))
    for offset in range(11, 14):
        assert s.consume_one(T0, FetchPosition(offset, 2))
    assert s.all_consumed() == {T0: OffsetAndMetadata(13, "", 2)}
    assert s.consume_one(T0, FetchPosition(14, 2))
    state = s.partition_state(T0)
    assert state is not None and state.consumed == FetchPosition(14, 2)
    assert state.position == FetchPosition(15, 2)
    # never past the position: the record is still handed out, the position stays
    assert s.consume_one(T0, FetchPosition(16))
    assert s.all_consumed() == {T0: OffsetAndMetadata(14, "", 2)}
    # a seek after a move that no read wrote in yet: the seek's position wins
    assert s.consume_one(T0, FetchPosition(15, 2))
    s.seek(T0, 3)
    assert s.all_consumed() == {T0: OffsetAndMetadata(3)}
    # a write made from a read keeps the move (the read wrote it in first)
    assert s.advance_position(T0, 3, FetchPosition(9))
    assert s.consume_one(T0, FetchPosition(5))
    s.pause([T0])
    assert s.all_consumed() == {T0: OffsetAndMetadata(5)}
    # not fetchable (paused): nothing is handed out, nothing moves
    assert not s.consume_one(T0, FetchPosition(6))
    assert s.all_consumed() == {T0: OffsetAndMetadata(5)}
    s.resume([T0])
    assert s.consume_one(T0, FetchPosition(6))
    s.assign_from_user([])  # unassigned: the pending move goes with the partition
    assert s.all_consumed() == {} and not s.consume_one(T0, FetchPosition(7))


# -- CommitManager -------------------------------------------------------------------------------


def test_auto_commit_never_covers_records_collected_but_not_handed_out() -> None:
    h = Harness(auto_commit=True, interval_ms=1_000)
    h.own({A0: 10})
    h.m.maybe_auto_commit_on_poll(h.now)
    h.advance(1_000)
    _collected(h, A0, 10, 20)  # the poll that sent this PollEvent is collecting right now
    h.m.maybe_auto_commit_on_poll(h.now)
    assert request_offsets(h.send()) == {A0: oam(10)}


def test_commit_before_revocation_never_covers_records_collected_but_not_handed_out() -> None:
    h = Harness(auto_commit=True)
    h.own({A0: 10, A1: 30})
    _collected(h, A0, 10, 20)  # collected, then the partition became pending revocation:
    h.subs.mark_pending_revocation([A0])  # the front end drops them and moves back to 10
    h.m.on_commit_before_revocation(CommitBeforeRevocation(frozenset({A0}), h.now + 30_000, 1))
    assert request_offsets(h.send()) == {A0: oam(10), A1: oam(30)}


def test_commit_sync_of_all_consumed_covers_what_was_handed_out() -> None:
    h = Harness(auto_commit=False)
    h.own({A0: 10})
    _collected(h, A0, 10, 20)
    assert h.subs.advance_consumed(A0, FetchPosition(20, 2))  # poll() returned them
    h.m.commit_sync(None, h.now + 30_000, "k")
    assert request_offsets(h.send()) == {A0: oam(20, 2)}


# -- FetchManager --------------------------------------------------------------------------------


def _deliver(fm: object, parts: dict[TopicPartition, Part]) -> None:
    for request in fm.poll(1).requests:  # type: ignore[attr-defined]
        mine = {key: p for key, p in parts.items() if key in requested(request)}
        for key in requested(request):
            mine.setdefault(key, Part())
        fm.on_response(  # type: ignore[attr-defined]
            request.request_id, fetch_response(17, mine, session_id=1), 1
        )


def test_collect_moves_the_position_not_the_consumed_view() -> None:
    fm, subs = setup({T0: 0}, LEADERS)
    _deliver(fm, {T0: Part(batch(0, 3))})
    result = fm.collect()
    assert [r.offset for r in result.records[T0]] == [0, 1, 2]
    assert subs.position(T0).offset == 3  # type: ignore[union-attr]
    assert subs.all_consumed()[T0].offset == 0


def test_records_less_collect_moves_the_consumed_view_along() -> None:
    """Only a transaction marker: nothing for the application, nothing to lose either; the
    consumed offset follows (a commit then stores the offset after the marker, as Java)."""
    fm, subs = setup({T0: 3}, LEADERS)
    marker = build_control_batch(base_offset=3, producer_id=7, producer_epoch=0, commit=True)
    _deliver(fm, {T0: Part(marker)})
    assert fm.collect().records == {}
    assert subs.all_consumed()[T0].offset == 4


def test_records_less_collect_after_unreturned_records_keeps_the_consumed_view() -> None:
    fm, subs = setup({T0: 0}, LEADERS)
    _deliver(fm, {T0: Part(batch(0, 2))})
    assert [r.offset for r in fm.collect().records[T0]] == [0, 1]  # not handed out yet
    marker = build_control_batch(base_offset=2, producer_id=7, producer_epoch=0, commit=True)
    _deliver(fm, {T0: Part(marker)})
    assert fm.collect().records == {}
    assert subs.position(T0).offset == 3  # type: ignore[union-attr]
    assert subs.all_consumed()[T0].offset == 0
