"""KIP-320 position validation in the OffsetsManager: deterministic tests with fabricated
OffsetsForLeaderEpoch responses, a real SubscriptionState and a fake clock (``now`` values)."""

from __future__ import annotations

import pickle
from typing import Any

from kio.schema.offset_for_leader_epoch.v4 import response as r4

from kafka_actors.errors import (
    LogTruncationError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
)
from kafka_actors.protocol.messages import UnsentRequest
from kafka_actors.protocol.offsets.list_offsets import (
    MetadataUpdateNeeded,
    OffsetsConfig,
    OffsetsManager,
    PositionsValidated,
    ResetPositionsError,
)
from kafka_actors.protocol.subscription import (
    FetchPosition,
    FetchState,
    LeaderAndEpoch,
    OffsetResetStrategy,
    ResetKind,
    SubscriptionState,
    ValidationOutcome,
)
from kafka_actors.protocol.wire.apis import ApiKey
from tests.managers.harness import events_of, only_request, seeded_random, tp, versions
from tests.managers.test_offsets import cluster

WALL_MS = 1_700_000_000_000
REQUEST_TIMEOUT_MS = 30_000
FENCED_LEADER_EPOCH = 74
TOPIC_AUTH = 29
EARLIEST = OffsetResetStrategy(ResetKind.EARLIEST)
LATEST = OffsetResetStrategy(ResetKind.LATEST)
NONE = OffsetResetStrategy(ResetKind.NONE)
T0 = tp("orders", 0)
T1 = tp("orders", 1)
LEADERS = {("orders", 0): (1, 5), ("orders", 1): (2, 7)}


def manager(
    policy: OffsetResetStrategy = EARLIEST, **caps: int
) -> tuple[OffsetsManager, SubscriptionState]:
    subs = SubscriptionState(policy)
    subs.assign_from_user([T0, T1])
    m = OffsetsManager(
        OffsetsConfig(
            retry_backoff_ms=100, retry_backoff_max_ms=1_000, request_timeout_ms=REQUEST_TIMEOUT_MS
        ),
        versions(**caps),
        subs,
        random=seeded_random(),
        wall_clock_ms=lambda: WALL_MS,
    )
    m.on_cluster_updated(cluster(LEADERS))
    return m, subs


def asked(request: Any) -> dict[Any, tuple[int, int]]:
    """(partition → (leader_epoch asked, current_leader_epoch)) of an OffsetForLeaderEpoch."""
    assert int(request.__api_key__) == ApiKey.OFFSET_FOR_LEADER_EPOCH
    return {
        tp(str(t.topic), int(p.partition)): (int(p.leader_epoch), int(p.current_leader_epoch))
        for t in request.topics
        for p in t.partitions
    }


def answer(
    m: OffsetsManager,
    request: UnsentRequest,
    now: int,
    answers: dict[Any, tuple[int, int, int]],  # tp -> (error, end epoch, end offset)
) -> None:
    by_topic: dict[str, list[Any]] = {}
    for part, (error, epoch, offset) in answers.items():
        by_topic.setdefault(part.topic, []).append(
            r4.EpochEndOffset(
                error_code=error, partition=part.partition, leader_epoch=epoch, end_offset=offset
            )
        )
    response = r4.OffsetForLeaderEpochResponse(
        throttle_time=0,
        topics=tuple(
            r4.OffsetForLeaderTopicResult(topic=t, partitions=tuple(ps))
            for t, ps in by_topic.items()
        ),
    )
    m.on_response(request.request_id, response, now)


def committed(subs: SubscriptionState, offset: int, epoch: int) -> None:
    """As the commit manager applies a committed offset with its leader epoch."""
    subs.seek_unvalidated(T0, FetchPosition(offset, epoch))


def test_committed_offset_with_epoch_is_validated_then_kept() -> None:
    m, subs = manager()
    subs.seek(T1, 3)  # no epoch: fetched without validation
    committed(subs, 100, 4)
    assert subs.partition_state(T0).fetch_state is FetchState.AWAIT_VALIDATION  # type: ignore[union-attr]
    assert not subs.is_fetchable(T0)
    request = only_request(m.poll(0))
    assert request.node == 1  # the leader
    assert request.request.replica_id == -1  # a consumer
    assert asked(request.request) == {T0: (4, 5)}  # offset epoch, current leader epoch
    assert m.poll(10).requests == ()  # one in flight at a time
    answer(m, request, 20, {T0: (0, 4, 150)})  # epoch 4 ends at 150 >= 100: not truncated
    state = subs.partition_state(T0)
    assert state is not None and state.fetch_state is FetchState.FETCHING
    assert state.position == FetchPosition(100, 4, LeaderAndEpoch(1, 5))
    assert subs.is_fetchable(T0)
    assert m.poll(30).requests == ()


def test_truncation_with_reset_policy_moves_to_the_divergent_offset() -> None:
    for policy in (EARLIEST, LATEST):
        m, subs = manager(policy)
        committed(subs, 100, 4)
        request = only_request(m.poll(0))
        answer(m, request, 20, {T0: (0, 3, 80)})  # the new leader's log ends epoch 3 at 80
        state = subs.partition_state(T0)
        assert state is not None and state.fetch_state is FetchState.FETCHING
        assert state.position == FetchPosition(80, 3, LeaderAndEpoch(1, 5))
        assert state.consumed == state.position
        assert events_of(m.poll(30), ResetPositionsError) == []


def test_truncation_without_reset_policy_raises_log_truncation() -> None:
    m, subs = manager(NONE)
    committed(subs, 100, 4)
    request = only_request(m.poll(0))
    answer(m, request, 20, {T0: (0, 3, 80)})
    errors = events_of(m.poll(30), ResetPositionsError)
    assert len(errors) == 1
    error = errors[0].error
    assert isinstance(error, LogTruncationError)
    assert isinstance(error, OffsetOutOfRangeError)  # as Java's LogTruncationException
    assert error.fetch_offsets == {("orders", 0): 100}
    assert error.divergent_offsets == {("orders", 0): (80, 3)}
    assert (error.topic, error.partition, error.offset) == ("orders", 0, 100)
    assert "orders-0" in str(error) and "80" in str(error)
    again = pickle.loads(pickle.dumps(error))
    assert isinstance(again, LogTruncationError)
    assert again.divergent_offsets == error.divergent_offsets
    # The position is left for the user (still awaiting validation, not fetched) ...
    assert subs.partition_state(T0).fetch_state is FetchState.AWAIT_VALIDATION  # type: ignore[union-attr]
    assert m.poll(1_000).requests == ()  # ... and not asked again before the request timeout
    # ... until the user seeks (for example to the divergent offset).
    subs.seek(T0, 80)
    assert subs.is_fetchable(T0)


def test_undefined_epoch_resets_or_reports_no_offset() -> None:
    m, subs = manager(EARLIEST)
    committed(subs, 100, 4)
    answer(m, only_request(m.poll(0)), 20, {T0: (0, -1, -1)})
    state = subs.partition_state(T0)
    assert state is not None and state.fetch_state is FetchState.AWAIT_RESET
    assert state.reset_strategy == EARLIEST

    m, subs = manager(NONE)
    committed(subs, 100, 4)
    answer(m, only_request(m.poll(0)), 20, {T0: (0, -1, -1)})
    errors = events_of(m.poll(30), ResetPositionsError)
    assert [type(e.error) for e in errors] == [NoOffsetForPartitionError]


def test_leader_change_puts_a_fetched_position_awaiting_validation() -> None:
    m, subs = manager()
    # A position advanced by fetching: the epoch of the last batch consumed.
    subs.seek(T0, FetchPosition(100, 5, LeaderAndEpoch(1, 5)))
    subs.seek(T1, FetchPosition(7, None, LeaderAndEpoch(2, 7)))  # no epoch known
    assert m.poll(0).requests == ()
    # Metadata: the leaders moved (an election, unclean or not).
    m.on_cluster_updated(cluster({("orders", 0): (3, 6), ("orders", 1): (1, 8)}))
    assert subs.partition_state(T0).fetch_state is FetchState.AWAIT_VALIDATION  # type: ignore[union-attr]
    assert subs.partition_state(T1).fetch_state is FetchState.FETCHING  # type: ignore[union-attr]
    request = only_request(m.poll(10))
    assert request.node == 3
    assert asked(request.request) == {T0: (5, 6)}
    answer(m, request, 20, {T0: (0, 5, 100)})
    assert subs.partition_state(T0).fetch_state is FetchState.FETCHING  # type: ignore[union-attr]
    # The same metadata again changes nothing.
    m.on_cluster_updated(cluster({("orders", 0): (3, 6), ("orders", 1): (1, 8)}))
    assert subs.is_fetchable(T0)


def test_retriable_error_refreshes_metadata_and_retries_after_backoff() -> None:
    m, subs = manager()
    committed(subs, 100, 4)
    answer(m, only_request(m.poll(0)), 20, {T0: (FENCED_LEADER_EPOCH, -1, -1)})
    result = m.poll(21)
    assert result.requests == ()
    assert events_of(result, MetadataUpdateNeeded)
    assert result.time_until_next_poll_ms is not None and result.time_until_next_poll_ms > 0
    m.on_cluster_updated(cluster({("orders", 0): (2, 6), ("orders", 1): (2, 7)}))
    request = only_request(m.poll(5_000))
    assert request.node == 2 and asked(request.request) == {T0: (4, 6)}


def test_non_retriable_error_is_reported() -> None:
    m, subs = manager()
    committed(subs, 100, 4)
    answer(m, only_request(m.poll(0)), 20, {T0: (TOPIC_AUTH, -1, -1)})
    errors = events_of(m.poll(21), ResetPositionsError)
    assert len(errors) == 1 and errors[0].error.topic == "orders"


def test_answer_for_an_older_position_is_ignored() -> None:
    m, subs = manager(NONE)
    committed(subs, 100, 4)
    request = only_request(m.poll(0))
    subs.seek(T0, 42)  # the user seeks meanwhile
    answer(m, request, 20, {T0: (0, 3, 80)})
    assert events_of(m.poll(30), ResetPositionsError) == []
    assert subs.position(T0) == FetchPosition(42)
    assert subs.maybe_complete_validation(T0, FetchPosition(42), 3, 10) is ValidationOutcome.IGNORED


def test_broker_without_offset_for_leader_epoch_skips_validation() -> None:
    m, subs = manager(offset_for_leader_epoch=2)  # below the consumer's v3
    committed(subs, 100, 4)
    result = m.poll(0)
    assert result.requests == ()
    assert subs.is_fetchable(T0)
    # No response will follow: the poll itself tells that positions became fetchable (the
    # fetch actor otherwise never polls them; librdkafka's mock, which answers v2 at most,
    # stalled a consumer this way).
    assert [e.partitions for e in events_of(result, PositionsValidated)] == [(T0,)]
    position = subs.position(T0)
    assert position is not None and (position.offset, position.offset_epoch) == (100, 4)

