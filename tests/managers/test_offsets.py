"""OffsetsManager: deterministic tests with fabricated ListOffsets responses and a real
SubscriptionState."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from kafka_actors.errors import (
    DisconnectedError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
    TopicAuthorizationFailedError,
    UnsupportedVersionError,
)
from kafka_actors.protocol.messages import UnsentRequest
from kafka_actors.protocol.metadata import Cluster, Node, PartitionInfo, TopicInfo
from kafka_actors.protocol.offsets.list_offsets import (
    ListOffsetsCompleted,
    MetadataUpdateNeeded,
    OffsetAndTimestamp,
    OffsetsConfig,
    OffsetsManager,
    ResetPositionsError,
)
from kafka_actors.protocol.records.decode import IsolationLevel
from kafka_actors.protocol.subscription import (
    FetchPosition,
    FetchState,
    LeaderAndEpoch,
    OffsetResetStrategy,
    ResetKind,
    SubscriptionState,
)
from tests.managers.harness import (
    Off,
    events_of,
    list_offsets_asked,
    list_offsets_response,
    only_request,
    seeded_random,
    tp,
    versions,
)

WALL_MS = 1_700_000_000_000
NOT_LEADER = 6
UNKNOWN_TOPIC = 3
FENCED_LEADER_EPOCH = 74
TOPIC_AUTH = 29
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43

EARLIEST = OffsetResetStrategy(ResetKind.EARLIEST)
LATEST = OffsetResetStrategy(ResetKind.LATEST)
NONE = OffsetResetStrategy(ResetKind.NONE)


def cluster(leaders: dict[tuple[str, int], tuple[int, int]]) -> Cluster:
    """A cluster with nodes 1..3 and partitions with (leader, leader epoch)."""
    topics: dict[str, dict[int, PartitionInfo]] = {}
    for (topic, partition), (leader, epoch) in leaders.items():
        topics.setdefault(topic, {})[partition] = PartitionInfo(partition, leader, epoch)
    return Cluster.build(
        nodes=[Node(n, f"b{n}", 9090 + n) for n in (1, 2, 3)],
        topics=[TopicInfo(name, None, parts) for name, parts in topics.items()],
    )


DEFAULT_LEADERS = {("orders", 0): (1, 5), ("orders", 1): (2, 7), ("payments", 0): (1, 3)}


def manager(
    *,
    version: int = 11,
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    subscription: SubscriptionState | None = None,
    leaders: dict[tuple[str, int], tuple[int, int]] | None = None,
) -> tuple[OffsetsManager, SubscriptionState]:
    subs = subscription or SubscriptionState()
    m = OffsetsManager(
        OffsetsConfig(isolation_level=isolation, retry_backoff_ms=100, retry_backoff_max_ms=1_000),
        versions(list_offsets=version),
        subs,
        random=seeded_random(),
        wall_clock_ms=lambda: WALL_MS,
    )
    m.on_cluster_updated(cluster(DEFAULT_LEADERS if leaders is None else leaders))
    return m, subs


def by_node(requests: tuple[UnsentRequest, ...]) -> dict[int, UnsentRequest]:
    out = {r.node: r for r in requests}
    assert len(out) == len(requests)
    return out


def answer(m: OffsetsManager, request: UnsentRequest, now: int, answers: dict[Any, Off]) -> None:
    version = int(request.request.__version__)
    m.on_response(request.request_id, list_offsets_response(version, answers), now)


# -- Lookups -----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 4, 7, 11])
def test_beginning_offsets_grouped_by_leader(version: int) -> None:
    m, _ = manager(version=version)
    key = m.beginning_offsets([tp("orders", 0), tp("orders", 1), tp("payments", 0)], 60_000, 0)
    result = m.poll(0)
    requests = by_node(result.requests)
    assert set(requests) == {1, 2}
    one, two = requests[1].request, requests[2].request
    assert one.__version__ == version
    assert list_offsets_asked(one) == {tp("orders", 0): -2, tp("payments", 0): -2}
    assert list_offsets_asked(two) == {tp("orders", 1): -2}
    assert one.replica_id == -1
    if version >= 4:  # the current leader epoch lets the broker fence a stale client
        epochs = {
            (t.name, int(p.partition_index)): int(p.current_leader_epoch)
            for t in one.topics
            for p in t.partitions
        }
        assert epochs == {("orders", 0): 5, ("payments", 0): 3}
    assert m.poll(1).requests == ()  # in flight: not sent twice
    answer(m, requests[1], 5, {tp("orders", 0): Off(10), tp("payments", 0): Off(0)})
    assert events_of(m.poll(5), ListOffsetsCompleted) == []
    answer(m, requests[2], 6, {tp("orders", 1): Off(42, epoch=7)})
    (done,) = events_of(m.poll(6), ListOffsetsCompleted)
    assert done.request_key == key and done.error is None
    assert done.offsets == {tp("orders", 0): 10, tp("orders", 1): 42, tp("payments", 0): 0}


@pytest.mark.parametrize("isolation", list(IsolationLevel))
def test_end_offsets_follow_isolation_level(isolation: IsolationLevel) -> None:
    m, _ = manager(isolation=isolation)
    m.end_offsets([tp("orders", 0)], 60_000, 0)
    request = only_request(m.poll(0))
    assert int(request.request.isolation_level) == int(isolation)
    assert list_offsets_asked(request.request) == {tp("orders", 0): -1}
    answer(m, request, 1, {tp("orders", 0): Off(99)})
    (done,) = events_of(m.poll(1), ListOffsetsCompleted)
    assert done.offsets == {tp("orders", 0): 99}


def test_read_committed_needs_list_offsets_v2() -> None:
    m, _ = manager(version=1, isolation=IsolationLevel.READ_COMMITTED)
    key = m.end_offsets([tp("orders", 0)], 60_000, 0)
    result = m.poll(0)
    assert result.requests == ()
    (done,) = events_of(result, ListOffsetsCompleted)
    assert done.request_key == key and isinstance(done.error, UnsupportedVersionError)


def test_offsets_for_times_results() -> None:
    m, _ = manager()
    asked = {tp("orders", 0): 1_000, tp("orders", 1): 2_000, tp("payments", 0): 3_000}
    key = m.offsets_for_times(asked, 60_000, 0)
    requests = by_node(m.poll(0).requests)
    assert list_offsets_asked(requests[1].request) == {
        tp("orders", 0): 1_000,
        tp("payments", 0): 3_000,
    }
    answer(
        m,
        requests[1],
        1,
        {
            tp("orders", 0): Off(17, timestamp=1_005, epoch=5),
            tp("payments", 0): Off(-1, timestamp=-1),  # no record that late
        },
    )
    answer(m, requests[2], 1, {tp("orders", 1): Off(0, error=UNSUPPORTED_FOR_MESSAGE_FORMAT)})
    (done,) = events_of(m.poll(1), ListOffsetsCompleted)
    assert done.request_key == key
    assert done.result == {
        tp("orders", 0): OffsetAndTimestamp(17, 1_005, 5),
        tp("orders", 1): None,
        tp("payments", 0): None,
    }


def test_offsets_for_times_refuses_negative_timestamps() -> None:
    m, _ = manager()
    with pytest.raises(ValueError):
        m.offsets_for_times({tp("orders", 0): -1}, 60_000, 0)


@pytest.mark.parametrize("code", [NOT_LEADER, UNKNOWN_TOPIC, FENCED_LEADER_EPOCH, 5])
def test_retriable_error_refreshes_metadata_then_retries(code: int) -> None:
    m, _ = manager()
    key = m.end_offsets([tp("orders", 0)], 60_000, 0)
    request = only_request(m.poll(0))
    answer(m, request, 10, {tp("orders", 0): Off(-1, error=code)})
    result = m.poll(10)
    (need,) = events_of(result, MetadataUpdateNeeded)
    assert need.topics == frozenset({"orders"})
    assert result.requests == ()
    wait = result.time_until_next_poll_ms
    assert wait is not None and 80 <= wait <= 120
    assert m.poll(10 + wait - 1).requests == ()
    # The leader moved to node 3 meanwhile.
    m.on_cluster_updated(cluster({("orders", 0): (3, 6)}))
    retry = only_request(m.poll(10 + wait))
    assert retry.node == 3
    answer(m, retry, 200, {tp("orders", 0): Off(5)})
    (done,) = events_of(m.poll(200), ListOffsetsCompleted)
    assert done.request_key == key and done.offsets == {tp("orders", 0): 5}


def test_unknown_leader_asks_for_metadata_and_waits() -> None:
    m, _ = manager(leaders={})
    m.beginning_offsets([tp("orders", 0)], 60_000, 0)
    result = m.poll(0)
    assert result.requests == ()
    (need,) = events_of(result, MetadataUpdateNeeded)
    assert need.topics == frozenset({"orders"})
    assert events_of(m.poll(1), MetadataUpdateNeeded) == []  # asked once per cluster update
    m.on_cluster_updated(cluster(DEFAULT_LEADERS))
    assert only_request(m.poll(2)).node == 1


def test_deadline_gives_timeout_error_naming_partitions() -> None:
    m, _ = manager()
    key = m.offsets_for_times({tp("orders", 0): 5, tp("orders", 1): 5}, 1_000, 0)
    requests = by_node(m.poll(0).requests)
    answer(m, requests[1], 10, {tp("orders", 0): Off(3, timestamp=7)})
    result = m.poll(10)
    assert events_of(result, ListOffsetsCompleted) == []
    assert result.time_until_next_poll_ms == 990
    (done,) = events_of(m.poll(1_000), ListOffsetsCompleted)
    assert done.request_key == key
    assert isinstance(done.error, KafkaTimeoutError)
    assert "orders-1" in str(done.error) and "orders-0" not in str(done.error)
    assert done.error.partition == 1
    # A late answer is ignored.
    answer(m, requests[2], 1_100, {tp("orders", 1): Off(3, timestamp=7)})
    assert m.poll(1_100).events == ()
    assert m.pending_lookups == 0 and m.requests_in_flight == 0


def test_request_failure_is_retried_until_deadline() -> None:
    m, _ = manager()
    key = m.beginning_offsets([tp("orders", 0)], 500, 0)
    now = 0
    sent = 0
    while True:
        result = m.poll(now)
        done = events_of(result, ListOffsetsCompleted)
        if done:
            break
        for request in result.requests:
            sent += 1
            m.on_failure(request.request_id, DisconnectedError("down", node=1), now)
        now += max(1, m.poll(now).time_until_next_poll_ms or 1)
    assert done[0].request_key == key and isinstance(done[0].error, KafkaTimeoutError)
    assert now == 500
    assert 3 <= sent <= 4  # 0, ~100, ~300: exponential backoff


def test_topic_authorization_failed_is_typed() -> None:
    m, _ = manager()
    m.end_offsets([tp("orders", 0)], 60_000, 0)
    request = only_request(m.poll(0))
    answer(m, request, 1, {tp("orders", 0): Off(-1, error=TOPIC_AUTH)})
    (done,) = events_of(m.poll(1), ListOffsetsCompleted)
    assert isinstance(done.error, TopicAuthorizationFailedError)
    assert done.error.topic == "orders"


# -- Position resets ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "timestamp"),
    [
        (EARLIEST, -2),
        (LATEST, -1),
        (OffsetResetStrategy(ResetKind.BY_DURATION, timedelta(hours=1)), WALL_MS - 3_600_000),
    ],
)
def test_reset_positions_for_each_strategy(strategy: OffsetResetStrategy, timestamp: int) -> None:
    subs = SubscriptionState(default_reset_strategy=strategy)
    subs.assign_from_user([tp("orders", 0), tp("orders", 1)])
    assert subs.reset_initializing_positions() == ()  # the commit layer's job, done here
    m, _ = manager(subscription=subs)
    requests = by_node(m.poll(0).requests)
    assert list_offsets_asked(requests[1].request) == {tp("orders", 0): timestamp}
    assert list_offsets_asked(requests[2].request) == {tp("orders", 1): timestamp}
    assert m.poll(1).requests == ()  # in flight: not sent again
    answer(m, requests[1], 2, {tp("orders", 0): Off(11, timestamp=timestamp, epoch=6)})
    answer(m, requests[2], 2, {tp("orders", 1): Off(22, timestamp=timestamp, epoch=-1)})
    assert subs.position(tp("orders", 0)) == FetchPosition(11, None, LeaderAndEpoch(1, 6))
    assert subs.position(tp("orders", 1)) == FetchPosition(22, None, LeaderAndEpoch(2, 7))
    state = subs.partition_state(tp("orders", 0))
    assert state is not None and state.fetch_state is FetchState.FETCHING
    assert subs.has_all_fetch_positions()
    assert m.poll(3).requests == ()


def test_by_duration_without_recent_record_resets_to_latest() -> None:
    strategy = OffsetResetStrategy(ResetKind.BY_DURATION, timedelta(minutes=5))
    subs = SubscriptionState(default_reset_strategy=strategy)
    subs.assign_from_user([tp("orders", 0)])
    subs.reset_initializing_positions()
    m, _ = manager(subscription=subs)
    first = only_request(m.poll(0))
    assert list_offsets_asked(first.request) == {tp("orders", 0): WALL_MS - 300_000}
    answer(m, first, 1, {tp("orders", 0): Off(-1)})
    assert subs.position(tp("orders", 0)) is None
    second = only_request(m.poll(1))
    assert list_offsets_asked(second.request) == {tp("orders", 0): -1}
    answer(m, second, 2, {tp("orders", 0): Off(77)})
    position = subs.position(tp("orders", 0))
    assert position is not None and position.offset == 77


def test_reset_strategy_none_raises_no_offset_once() -> None:
    subs = SubscriptionState(default_reset_strategy=NONE)
    subs.assign_from_user([tp("orders", 0), tp("orders", 1), tp("payments", 0)])
    subs.seek(tp("payments", 0), 3)
    subs.request_offset_reset([tp("orders", 1), tp("orders", 0)], NONE)
    m, _ = manager(subscription=subs)
    result = m.poll(0)
    assert result.requests == ()
    (event,) = events_of(result, ResetPositionsError)
    assert isinstance(event.error, NoOffsetForPartitionError)
    assert event.error.partitions == (("orders", 0), ("orders", 1))
    assert "orders-0" in str(event.error) and "orders-1" in str(event.error)
    assert m.poll(1).events == ()  # reported once
    subs.seek(tp("orders", 0), 0)
    subs.seek(tp("orders", 1), 0)
    assert m.poll(2).events == ()


def test_failed_reset_backs_off_per_partition() -> None:
    subs = SubscriptionState(default_reset_strategy=EARLIEST)
    subs.assign_from_user([tp("orders", 0)])
    subs.reset_initializing_positions()
    m, _ = manager(subscription=subs)
    request = only_request(m.poll(0))
    answer(m, request, 10, {tp("orders", 0): Off(-1, error=NOT_LEADER)})
    result = m.poll(10)
    assert result.requests == ()
    assert len(events_of(result, MetadataUpdateNeeded)) == 1
    state = subs.partition_state(tp("orders", 0))
    assert state is not None and state.next_retry_time_ms is not None
    assert 90 <= state.next_retry_time_ms <= 130
    assert result.time_until_next_poll_ms == state.next_retry_time_ms - 10
    assert m.poll(state.next_retry_time_ms - 1).requests == ()
    retry = only_request(m.poll(state.next_retry_time_ms))
    m.on_failure(retry.request_id, DisconnectedError("x", node=1), 200)
    state = subs.partition_state(tp("orders", 0))
    assert state is not None and state.next_retry_time_ms is not None
    assert 200 + 160 <= state.next_retry_time_ms <= 200 + 240  # second failure: doubled


def test_seek_during_reset_wins() -> None:
    subs = SubscriptionState(default_reset_strategy=LATEST)
    subs.assign_from_user([tp("orders", 0)])
    subs.reset_initializing_positions()
    m, _ = manager(subscription=subs)
    request = only_request(m.poll(0))
    subs.seek(tp("orders", 0), 5)
    answer(m, request, 1, {tp("orders", 0): Off(100)})
    position = subs.position(tp("orders", 0))
    assert position is not None and position.offset == 5


def test_reset_authorization_error_is_reported() -> None:
    subs = SubscriptionState(default_reset_strategy=EARLIEST)
    subs.assign_from_user([tp("orders", 0)])
    subs.reset_initializing_positions()
    m, _ = manager(subscription=subs)
    request = only_request(m.poll(0))
    answer(m, request, 1, {tp("orders", 0): Off(-1, error=TOPIC_AUTH)})
    (event,) = events_of(m.poll(1), ResetPositionsError)
    assert isinstance(event.error, TopicAuthorizationFailedError)
    assert subs.is_offset_reset_needed(tp("orders", 0))
