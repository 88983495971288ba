"""SubscriptionState: subscription types, assignment, positions, resets, pause, revocation,
lag, preferred read replicas, and that concurrent callers see atomic operations."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from datetime import timedelta

import pytest

from kafka_actors.errors import IllegalStateError
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.subscription import (
    EARLIEST,
    LATEST,
    NO_RESET,
    FetchPosition,
    FetchState,
    IsolationLevel,
    LeaderAndEpoch,
    OffsetResetStrategy,
    ResetKind,
    SubscriptionState,
    SubscriptionType,
)

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
U0 = TopicPartition("u", 0)


def assigned(*tps: TopicPartition, seek: int | None = None) -> SubscriptionState:
    s = SubscriptionState()
    s.assign_from_user(tps)
    if seek is not None:
        for tp in tps:
            s.seek(tp, seek)
    return s


# -- subscription types ------------------------------------------------------------------------


def test_new_state_has_no_subscription() -> None:
    s = SubscriptionState()
    assert s.subscription_type is SubscriptionType.NONE
    assert s.has_no_subscription_or_user_assignment()
    assert s.assigned_partitions() == frozenset()
    assert s.assignment_id == 0


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("topics", "assign"),
        ("topics", "pattern"),
        ("pattern", "topics"),
        ("pattern", "assign"),
        ("assign", "topics"),
        ("assign", "pattern"),
    ],
)
def test_mixing_subscription_types_raises(first: str, second: str) -> None:
    s = SubscriptionState()
    calls: dict[str, Callable[[], object]] = {
        "topics": lambda: s.subscribe(["t"]),
        "pattern": lambda: s.subscribe_pattern("t.*"),
        "assign": lambda: s.assign_from_user([T0]),
    }
    calls[first]()
    with pytest.raises(IllegalStateError, match="mutually exclusive"):
        calls[second]()


def test_same_type_again_is_allowed_and_unsubscribe_resets_type() -> None:
    s = SubscriptionState()
    assert s.subscribe(["t"]) is True
    assert s.subscribe(["t"]) is False
    assert s.subscribe(["t", "u"]) is True
    assert s.subscription == {"t", "u"}
    s.unsubscribe()
    assert s.subscription_type is SubscriptionType.NONE
    s.assign_from_user([T0])
    assert s.subscription_type.value == "USER_ASSIGNED"
    assert s.subscription == frozenset()  # user assignment has no subscription


def test_empty_topic_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        SubscriptionState().subscribe(["t", " "])


def test_pattern_subscription_matches_and_sets_topics() -> None:
    s = SubscriptionState()
    s.subscribe_pattern(re.compile("orders-.*"))
    assert s.subscription_type is SubscriptionType.AUTO_PATTERN
    assert s.matches_subscribed_pattern("orders-eu")
    assert not s.matches_subscribed_pattern("payments")
    assert not s.matches_subscribed_pattern("xorders-eu")  # the whole name must match
    assert s.subscribe_from_pattern(["orders-eu", "orders-us"]) is True
    assert s.subscribe_from_pattern(["orders-us", "orders-eu"]) is False
    assert s.subscription == {"orders-eu", "orders-us"}
    assert s.metadata_topics() == {"orders-eu", "orders-us"}


def test_a_broker_evaluated_pattern_accepts_what_the_broker_assigns() -> None:
    # The consumer group protocol: the coordinator matches the regex (RE2J). One Python's re
    # cannot read (\Q...\E quoting) is kept; the assignment's topics are the subscription.
    s = SubscriptionState()
    with pytest.raises(re.error):
        s.subscribe_pattern(r"\Qorders.\E.*")  # matched here (classic): refused
    s.subscribe_pattern(r"\Qorders.\E.*", broker_evaluated=True)
    assert s.subscription_type is SubscriptionType.AUTO_PATTERN
    assert s.subscribed_regex == r"\Qorders.\E.*"
    assert s.subscription == frozenset()
    assert s.assign_from_subscribed([TopicPartition("orders.eu", 0)]) is True
    assert s.subscription == {"orders.eu"}
    # A readable pattern whose Python match differs from the broker's: the broker decides.
    s.unsubscribe()
    assert s.subscribed_regex is None
    s.subscribe_pattern("orders-[a-z]+", broker_evaluated=True)
    assert s.assign_from_subscribed([TopicPartition("orders-EU", 0)]) is True
    s.unsubscribe()
    s.subscribe_pattern("orders-[a-z]+")
    with pytest.raises(ValueError):
        s.assign_from_subscribed([TopicPartition("orders-EU", 0)])


def test_subscribe_from_pattern_needs_a_pattern_subscription() -> None:
    s = SubscriptionState()
    s.subscribe(["t"])
    with pytest.raises(IllegalStateError):
        s.subscribe_from_pattern(["t"])


def test_assign_from_subscribed_requires_auto_subscription_and_subscribed_topics() -> None:
    s = SubscriptionState()
    with pytest.raises(IllegalStateError):
        s.assign_from_subscribed([T0])
    s.subscribe(["t"])
    with pytest.raises(ValueError, match="not of a subscribed topic"):
        s.assign_from_subscribed([U0])
    assert s.assign_from_subscribed([T0, T1]) is True
    assert s.assigned_partitions() == {T0, T1}
    user = assigned(T0)
    with pytest.raises(IllegalStateError):
        user.assign_from_subscribed([T0])


def test_assign_from_subscribed_with_pattern_accepts_matching_topics() -> None:
    s = SubscriptionState()
    s.subscribe_pattern("t|u")
    assert s.assign_from_subscribed([T0, U0])
    with pytest.raises(ValueError):
        s.assign_from_subscribed([TopicPartition("v", 0)])


# -- assignment ----------------------------------------------------------------------------


def test_assignment_id_grows_on_every_change_only() -> None:
    s = SubscriptionState()
    s.assign_from_user([T0])
    first = s.assignment_id
    s.assign_from_user([T0])
    assert s.assignment_id == first  # unchanged
    s.assign_from_user([T0, T1])
    assert s.assignment_id == first + 1
    s.assign_from_user([])
    assert s.assignment_id == first + 2
    s.assign_from_user([T1])
    s.unsubscribe()
    assert s.assignment_id == first + 4
    assert s.assigned_partitions() == frozenset()


def test_reassignment_keeps_state_of_kept_partitions_and_drops_others() -> None:
    s = assigned(T0, T1, seek=5)
    s.pause([T1])
    s.assign_from_user([T1, U0])
    assert s.position(T1) == FetchPosition(5)
    assert s.is_paused(T1)
    assert not s.is_assigned(T0)
    assert s.partition_state(U0) is not None
    assert s.partition_state(U0).fetch_state is FetchState.INITIALIZING  # type: ignore[union-attr]
    assert s.assigned_partitions_list() == (T1, U0)


def test_calls_on_unassigned_partitions_raise_illegal_state() -> None:
    s = assigned(T0)
    with pytest.raises(IllegalStateError, match="No current assignment"):
        s.seek(T1, 0)
    with pytest.raises(IllegalStateError):
        s.position(T1)
    with pytest.raises(IllegalStateError):
        s.pause([T1])
    with pytest.raises(IllegalStateError):
        s.request_offset_reset([T1])


# -- positions and fetchability ------------------------------------------------------------


def test_new_partition_needs_a_position_and_is_not_fetchable() -> None:
    s = assigned(T0, T1)
    assert s.initializing_partitions() == (T0, T1)
    assert s.partitions_needing_position() == (T0, T1)
    assert not s.has_all_fetch_positions()
    assert not s.is_fetchable(T0)
    assert s.fetchable_partitions() == ()
    assert s.position(T0) is None
    s.seek(T0, 10)
    assert s.initializing_partitions() == (T1,)
    assert s.is_fetchable(T0)
    assert s.fetchable_partitions() == (T0,)
    assert not s.has_all_fetch_positions()
    s.seek(T1, 0)
    assert s.has_all_fetch_positions()


def test_seek_rejects_negative_offsets() -> None:
    s = assigned(T0)
    with pytest.raises(ValueError):
        s.seek(T0, -1)


def test_seek_unvalidated_with_epoch_awaits_validation() -> None:
    s = assigned(T0, T1)
    s.seek_unvalidated(T0, FetchPosition(7, offset_epoch=3, current_leader=LeaderAndEpoch(1, 4)))
    s.seek_unvalidated(T1, FetchPosition(7))  # no epoch: nothing to validate
    assert s.position(T0) == FetchPosition(7, 3, LeaderAndEpoch(1, 4))
    assert not s.is_fetchable(T0)
    assert s.is_fetchable(T1)
    assert s.partitions_needing_validation(0) == (T0,)
    s.request_failed([T0], next_retry_ms=100)
    assert s.partitions_needing_validation(99) == ()
    assert s.partitions_needing_validation(100) == (T0,)
    assert s.complete_validation(T0) is True
    assert s.is_fetchable(T0)
    assert s.complete_validation(T0) is False  # no longer awaiting


def test_complete_validation_may_move_the_position_after_truncation() -> None:
    s = assigned(T0)
    s.seek_unvalidated(T0, FetchPosition(70, offset_epoch=3))
    s.complete_validation(T0, FetchPosition(50, offset_epoch=2))
    assert s.position(T0) == FetchPosition(50, 2)


def test_fetchable_rules_pause_revocation_and_assigned_callback() -> None:
    s = SubscriptionState()
    s.subscribe(["t", "u"])
    s.assign_from_subscribed_awaiting_callback([T0, T1, U0], added=[U0])
    for tp in (T0, T1, U0):
        s.seek(tp, 0)
    assert s.fetchable_partitions() == (T0, T1)  # U0 waits for onPartitionsAssigned
    s.enable_fetching_for_new_partitions([U0])
    assert s.fetchable_partitions() == (T0, T1, U0)
    s.pause([T0])
    assert s.paused_partitions() == {T0}
    s.mark_pending_revocation([T1])
    assert s.is_pending_revocation(T1)
    assert s.fetchable_partitions() == (U0,)
    assert s.fetchable_partitions(lambda tp: tp.topic == "t") == ()
    s.resume([T0])
    assert s.fetchable_partitions() == (T0, U0)
    # A revoked partition pending revocation still has its position committed.
    assert T1 in s.all_consumed()


def test_advance_position_is_conditional() -> None:
    s = assigned(T0, seek=10)
    assert s.advance_position(T0, 10, FetchPosition(15, 2)) is True
    assert s.position(T0) == FetchPosition(15, 2)
    assert s.advance_position(T0, 10, FetchPosition(20)) is False  # not at 10 any more
    s.pause([T0])
    assert s.advance_position(T0, 15, FetchPosition(20)) is False  # not fetchable
    s.resume([T0])
    s.mark_pending_revocation([T0])
    assert s.advance_position(T0, 15, FetchPosition(20)) is False
    assert s.advance_position(T1, 0, FetchPosition(1)) is False  # not assigned


def test_advance_position_keeps_the_current_leader_when_not_given() -> None:
    s = assigned(T0)
    s.seek(T0, FetchPosition(0, None, LeaderAndEpoch(2, 9)))
    s.advance_position(T0, 0, FetchPosition(3, 9))
    assert s.position(T0) == FetchPosition(3, 9, LeaderAndEpoch(2, 9))


def test_update_current_leader() -> None:
    s = assigned(T0, T1, seek=0)
    s.update_current_leader(T0, LeaderAndEpoch(3, 7))
    s.update_current_leader(U0, LeaderAndEpoch(3, 7))  # not assigned: ignored
    assert s.position(T0) == FetchPosition(0, None, LeaderAndEpoch(3, 7))
    assert s.position(T1) == FetchPosition(0)


def test_move_partition_to_end_rotates_fetch_order() -> None:
    s = assigned(T0, T1, U0, seek=0)
    s.move_partition_to_end(T0)
    assert s.fetchable_partitions() == (T1, U0, T0)
    assert list(s.fetchable_positions()) == [T1, U0, T0]


# -- resets --------------------------------------------------------------------------------


def test_request_offset_reset_and_partitions_needing_reset() -> None:
    s = assigned(T0, T1, seek=5)
    s.request_offset_reset([T0], EARLIEST)
    assert s.is_offset_reset_needed(T0)
    assert s.reset_strategy(T0) == EARLIEST
    assert s.position(T0) is None
    assert not s.is_fetchable(T0)
    assert s.partitions_needing_reset(0) == (T0,)
    s.request_offset_reset(T1)  # default strategy: auto.offset.reset (latest)
    assert s.reset_strategy(T1) == LATEST
    s.set_next_allowed_retry([T0], 50)
    assert s.partitions_needing_reset(49) == (T1,)
    assert s.partitions_needing_reset(50) == (T0, T1)
    s.seek(T0, 3)
    assert s.partitions_needing_reset(100) == (T1,)
    assert s.reset_strategy(T0) is None


def test_reset_result_is_applied_only_while_still_awaiting_that_reset() -> None:
    s = assigned(T0)
    s.request_offset_reset([T0], EARLIEST)
    s.seek(T0, 42)  # the user seeks while the ListOffsets is in flight
    assert s.maybe_seek_unvalidated(T0, FetchPosition(0), EARLIEST) is False
    assert s.position(T0) == FetchPosition(42)
    s.request_offset_reset([T0], LATEST)
    assert s.maybe_seek_unvalidated(T0, FetchPosition(0), EARLIEST) is False  # other strategy
    assert s.maybe_seek_unvalidated(T0, FetchPosition(99), LATEST) is True
    assert s.position(T0) == FetchPosition(99)
    assert s.is_fetchable(T0)


def test_reset_initializing_positions_uses_default_strategy() -> None:
    s = SubscriptionState(default_reset_strategy=EARLIEST)
    s.assign_from_user([T0, T1, U0])
    s.seek(U0, 1)
    assert s.reset_initializing_positions(lambda tp: tp != T1) == ()
    assert s.partitions_needing_reset(0) == (T0,)
    assert s.initializing_partitions() == (T1,)


def test_reset_initializing_positions_with_none_strategy_returns_them() -> None:
    s = SubscriptionState(default_reset_strategy=NO_RESET)
    s.assign_from_user([T0, T1])
    assert s.reset_initializing_positions() == (T0, T1)
    assert s.partitions_needing_reset(0) == ()


def test_reset_strategy_values() -> None:
    assert OffsetResetStrategy.of("Earliest") == EARLIEST
    assert OffsetResetStrategy.of("latest", timedelta(hours=1)) == LATEST  # duration ignored
    hour = OffsetResetStrategy.of("by_duration", timedelta(hours=1))
    assert hour.kind is ResetKind.BY_DURATION
    assert hour.timestamp_ms(10_000_000) == 10_000_000 - 3_600_000
    assert EARLIEST.timestamp_ms(5) == -2
    assert LATEST.timestamp_ms(5) == -1
    with pytest.raises(ValueError):
        OffsetResetStrategy.of("by_duration")
    with pytest.raises(IllegalStateError):
        NO_RESET.timestamp_ms(0)


# -- commits, lag, end of partition ----------------------------------------------------------


def test_all_consumed_has_valid_positions_with_leader_epoch() -> None:
    s = assigned(T0, T1, U0)
    s.seek(T0, FetchPosition(10, offset_epoch=4))
    s.seek_unvalidated(T1, FetchPosition(20, offset_epoch=5))  # awaiting validation
    assert s.all_consumed() == {T0: OffsetAndMetadata(10, "", 4)}


def test_lag_is_isolation_aware() -> None:
    s = assigned(T0, seek=40)
    assert s.partition_lag(T0) is None  # high watermark not known yet
    s.update_partition_offsets(T0, high_watermark=100, last_stable_offset=70, log_start_offset=5)
    assert s.partition_lag(T0, IsolationLevel.READ_UNCOMMITTED) == 60
    assert s.partition_lag(T0, IsolationLevel.READ_COMMITTED) == 30
    assert s.partition_lead(T0) == 35
    s.update_partition_offsets(T0, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1)
    state = s.partition_state(T0)
    assert state is not None
    assert (state.high_watermark, state.last_stable_offset, state.log_start_offset) == (100, 70, 5)
    s.update_high_watermark(T0, 120)
    s.update_last_stable_offset(T0, 110)
    s.update_log_start_offset(T0, 6)
    assert s.partition_lag(T0) == 80
    assert s.partition_lag(T1) is None
    s.request_offset_reset([T0])
    assert s.partition_lag(T0) is None


def test_end_of_partition_is_reported_once_per_arrival() -> None:
    s = assigned(T0, seek=0)
    s.update_high_watermark(T0, 2)
    assert s.check_end_of_partition(T0) is False
    s.advance_position(T0, 0, FetchPosition(2))
    assert s.check_end_of_partition(T0) is True
    assert s.check_end_of_partition(T0) is False
    s.update_high_watermark(T0, 3)
    assert s.check_end_of_partition(T0) is False
    s.advance_position(T0, 2, FetchPosition(3))
    assert s.check_end_of_partition(T0) is True
    s.seek(T0, 3)
    assert s.check_end_of_partition(T0) is True  # re-armed by the seek


def test_end_of_partition_read_committed_uses_last_stable_offset() -> None:
    s = assigned(T0, seek=5)
    s.update_partition_offsets(T0, high_watermark=9, last_stable_offset=5)
    assert s.check_end_of_partition(T0, IsolationLevel.READ_UNCOMMITTED) is False
    assert s.check_end_of_partition(T0, IsolationLevel.READ_COMMITTED) is True


# -- preferred read replica ----------------------------------------------------------------


def test_preferred_read_replica_expires() -> None:
    s = assigned(T0, seek=0)
    assert s.preferred_read_replica(T0, 0) is None
    s.update_preferred_read_replica(T0, 3, expire_ms=1000)
    assert s.preferred_read_replica(T0, 999) == 3
    assert s.preferred_read_replica(T0, 1000) is None
    assert s.preferred_read_replica(T0, 10) is None  # cleared when found expired
    s.update_preferred_read_replica(T0, 2, expire_ms=1000)
    assert s.clear_preferred_read_replica(T0) == 2
    assert s.preferred_read_replica(T0, 0) is None


# -- thread safety -------------------------------------------------------------------------


def test_concurrent_advances_never_lose_or_repeat_a_step() -> None:
    """Many threads race to move one position forward by 1 with compare-and-set: every
    successful step is unique, and the final position counts them all."""
    s = assigned(T0, seek=0)
    wins: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(2000):
            pos = s.position(T0)
            assert pos is not None
            if s.advance_position(T0, pos.offset, FetchPosition(pos.offset + 1)):
                with lock:
                    wins.append(pos.offset)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = s.position(T0)
    assert final is not None
    assert sorted(wins) == list(range(final.offset))


def test_concurrent_assignment_changes_and_reads_stay_consistent() -> None:
    s = SubscriptionState()
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        for i in range(500):
            s.assign_from_user([T0, T1] if i % 2 else [U0])
            for tp in s.assigned_partitions():
                try:
                    s.seek(tp, i)
                except IllegalStateError:
                    pass  # reassigned in between: allowed
        stop.set()

    def reader() -> None:
        try:
            while not stop.is_set():
                positions = s.fetchable_positions()
                assert set(positions) in ({T0, T1}, {U0}, {T0}, {T1}, set())
                consumed = s.all_consumed()
                assert set(consumed) <= {T0, T1, U0}
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert s.assignment_id == 500
