"""The bookkeeping that keeps the per-poll work proportional to what changed, not to the
number of assigned partitions: SubscriptionState's index of partitions not FETCHING (what
needs a position, a reset or a validation) and its usability counter, which lets
FetchBuffer.drop_stale skip its scan while nothing that could make buffered data stale
happened. Each answer must equal what a full scan of the partitions' states gives."""

from __future__ import annotations

from kafka_actors.protocol.fetch.buffer import CompletedFetch, FetchBuffer
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.subscription import (
    FetchPosition,
    FetchState,
    LeaderAndEpoch,
    SubscriptionState,
)

from .fetch_harness import batch

TPS = [TopicPartition("t", p) for p in range(6)]


def _scan(subs: SubscriptionState, state: FetchState) -> tuple[TopicPartition, ...]:
    found = []
    for tp in subs.assigned_partitions_list():
        s = subs.partition_state(tp)
        assert s is not None
        if s.fetch_state is state:
            found.append(tp)
    return tuple(found)


def _check(subs: SubscriptionState) -> None:
    """The indexed answers equal a full scan, in assignment order."""
    assert subs.initializing_partitions() == _scan(subs, FetchState.INITIALIZING)
    assert subs.partitions_needing_reset(0) == _scan(subs, FetchState.AWAIT_RESET)
    assert subs.partitions_needing_validation(0) == _scan(subs, FetchState.AWAIT_VALIDATION)
    assert subs.has_all_fetch_positions() == all(
        s is not None and s.fetch_state is FetchState.FETCHING
        for s in map(subs.partition_state, subs.assigned_partitions_list())
    )


def test_the_not_fetching_index_follows_every_state_change() -> None:
    subs = SubscriptionState()
    _check(subs)
    subs.assign_from_user(TPS[:4])
    _check(subs)  # all initializing
    for tp in TPS[:4]:
        subs.seek(tp, 10)
    _check(subs)
    assert subs.has_all_fetch_positions()
    assert subs.partitions_needing_reset(0) == ()
    subs.request_offset_reset(TPS[1])
    _check(subs)
    assert subs.partitions_needing_reset(0) == (TPS[1],)
    # KIP-320: a new leader with a known epoch: the position awaits validation
    subs.seek_unvalidated(TPS[2], FetchPosition(10, 3, LeaderAndEpoch(1, 3)))
    subs.complete_validation(TPS[2])
    subs.update_current_leader(TPS[2], LeaderAndEpoch(2, 4))
    _check(subs)
    assert subs.partitions_needing_validation(0) == (TPS[2],)
    subs.complete_validation(TPS[2])
    _check(subs)
    subs.move_partition_to_end(TPS[1])
    _check(subs)  # order follows the assignment order
    subs.assign_from_user([TPS[1], TPS[4], TPS[5]])  # TPS[1] kept (awaiting reset), new ones
    _check(subs)
    assert subs.partitions_needing_reset(0) == (TPS[1],)
    assert subs.initializing_partitions() == (TPS[4], TPS[5])
    subs.seek(TPS[1], 0)
    subs.pause([TPS[4]])
    subs.mark_pending_revocation([TPS[5]])
    _check(subs)
    subs.unsubscribe()
    _check(subs)
    assert subs.has_all_fetch_positions()


def _cf(tp: TopicPartition, offset: int, count: int) -> CompletedFetch:
    return CompletedFetch(
        tp=tp,
        fetch_offset=offset,
        data=batch(offset, count),
        aborted=None,
        node=1,
        next_offset=offset,
        end_offset=offset + count,
    )


def _buffer() -> tuple[SubscriptionState, FetchBuffer]:
    subs = SubscriptionState()
    subs.assign_from_user(TPS[:3])
    for tp in TPS[:3]:
        subs.seek(tp, 0)
    buffer = FetchBuffer(subs)
    for tp in TPS[:3]:
        buffer.add(_cf(tp, 0, 5))
    buffer.drop_stale()
    assert buffer.buffered_partitions() == frozenset(TPS[:3])
    return subs, buffer


def test_handing_out_records_is_no_usability_change_and_the_rest_stays_usable() -> None:
    subs, buffer = _buffer()
    changes = subs.usability_changes
    subs.move_partition_to_end(TPS[0])
    result = buffer.collect(3)  # advances TPS[1]'s position along its own data
    assert result.record_count == 3
    assert subs.usability_changes == changes
    buffer.drop_stale()
    assert buffer.collect(100).record_count == 12  # nothing dropped: all still continues


def test_a_seek_revocation_reset_or_unassignment_drops_the_data_at_the_next_poll() -> None:
    subs, buffer = _buffer()
    subs.seek(TPS[0], 3)
    buffer.drop_stale()
    assert buffer.buffered_partitions() == frozenset(TPS[1:3])
    subs.mark_pending_revocation([TPS[1]])
    buffer.drop_stale()
    assert buffer.buffered_partitions() == frozenset(TPS[2:3])
    subs.request_offset_reset(TPS[2])
    buffer.drop_stale()
    assert buffer.buffered_partitions() == frozenset()
    assert buffer.buffered_bytes == 0
    subs.seek(TPS[2], 0)
    buffer.add(_cf(TPS[2], 0, 5))
    buffer.drop_stale()
    subs.assign_from_user(TPS[:2])
    buffer.drop_stale()
    assert buffer.buffered_partitions() == frozenset()


def test_a_paused_partition_keeps_its_data_and_serves_it_once_resumed() -> None:
    subs, buffer = _buffer()
    subs.pause([TPS[0]])
    buffer.drop_stale()
    assert buffer.collect(100).record_count == 10
    assert buffer.buffered_partitions() == frozenset(TPS[:1])
    subs.resume([TPS[0]])
    buffer.drop_stale()
    assert dict(buffer.collect(100).records).keys() == {TPS[0]}


def test_data_arriving_for_a_partition_that_moved_meanwhile_is_dropped() -> None:
    subs, buffer = _buffer()
    subs.seek(TPS[0], 2)  # while a Fetch from 0 was in flight
    buffer.drop_stale()  # the scan that sees the seek
    buffer.add(_cf(TPS[0], 0, 5))  # its stale answer arrives after it
    buffer.drop_stale()
    assert buffer.buffered_partitions() == frozenset(TPS[1:3])


def test_a_leader_change_needing_validation_drops_the_data() -> None:
    subs, buffer = _buffer()
    subs.seek_unvalidated(TPS[0], FetchPosition(0, 3, LeaderAndEpoch(1, 3)))
    subs.complete_validation(TPS[0])
    buffer.add(_cf(TPS[0], 0, 5))
    buffer.drop_stale()
    subs.update_current_leader(TPS[0], LeaderAndEpoch(2, 4))
    buffer.drop_stale()
    assert TPS[0] not in buffer.buffered_partitions()


def test_chains_follow_data_added_handed_out_and_dropped() -> None:
    subs, buffer = _buffer()
    buffer.add(_cf(TPS[0], 5, 4))  # fetched ahead: continues TPS[0]'s data
    assert buffer.chains() == {TPS[0]: (2, 9), TPS[1]: (1, 5), TPS[2]: (1, 5)}
    assert buffer.chain_end(TPS[0]) == 9
    assert buffer.collect(5).record_count == 5  # TPS[0]'s first response drained
    assert buffer.chains() == {TPS[0]: (1, 9), TPS[1]: (1, 5), TPS[2]: (1, 5)}
    subs.seek(TPS[1], 1)
    buffer.drop_stale()
    assert buffer.chains() == {TPS[0]: (1, 9), TPS[2]: (1, 5)}
    assert buffer.chain_end(TPS[1]) is None
    assert buffer.collect(100).record_count == 9
    assert buffer.chains() == {}
    assert buffer.buffered_partitions() == frozenset()
