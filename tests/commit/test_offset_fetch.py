"""CommitManager: OffsetFetch for committed() and for initializing positions (pure)."""

from __future__ import annotations

import pytest

from kafka_actors import errors
from kafka_actors.errors import KafkaTimeoutError, NoOffsetForPartitionError
from kafka_actors.protocol.group.consumer.membership import CoordinatorUnknown
from kafka_actors.protocol.offsets.commit import CommittedOffsetsFetched, PositionsInitialized
from kafka_actors.protocol.subscription import FetchPosition, FetchState, ResetKind

from .harness import (
    COORDINATOR,
    GROUP,
    MEMBER_ID,
    TOPIC_IDS,
    Harness,
    fetch_partitions,
    fetch_response,
    oam,
    tp,
)


def test_fetch_committed_reads_offsets_epochs_and_metadata() -> None:
    h = Harness()
    h.m.on_member_changed(MEMBER_ID, 6)
    h.m.fetch_committed([tp("a", 0), tp("a", 1), tp("b", 0)], h.now + 5_000, "f1")
    request = h.send()
    assert request.node == COORDINATOR
    body = request.request
    assert body.require_stable is True
    (group,) = body.groups
    assert (group.group_id, group.member_id, group.member_epoch) == (GROUP, MEMBER_ID, 6)
    assert fetch_partitions(request) == {tp("a", 0), tp("a", 1), tp("b", 0)}
    h.answer(request, fetch_response({tp("a", 0): oam(42, 5, "meta"), tp("a", 1): None}))
    (done,) = h.take(CommittedOffsetsFetched)
    assert done.request_key == "f1" and done.error is None
    # b-0 is missing from the answer: no committed offset either.
    assert done.offsets == {tp("a", 0): oam(42, 5, "meta"), tp("a", 1): None, tp("b", 0): None}


@pytest.mark.parametrize("version", [1, 7, 10])
def test_fetch_committed_at_older_and_newer_versions(version: int) -> None:
    h = Harness(fetch_version=version)
    h.m.on_topic_ids(TOPIC_IDS)
    h.m.fetch_committed([tp("a", 0), tp("b", 1)], h.now + 5_000, "f")
    request = h.send()
    assert type(request.request).__version__ == version
    assert fetch_partitions(request) == {tp("a", 0), tp("b", 1)}
    if version >= 7:
        assert request.request.require_stable is True
    h.answer(request, fetch_response({tp("a", 0): oam(3, 2), tp("b", 1): oam(9)}, version=version))
    (done,) = h.take(CommittedOffsetsFetched)
    epoch = 2 if version >= 5 else None  # leader epochs exist from v5
    assert done.offsets == {tp("a", 0): oam(3, epoch), tp("b", 1): oam(9)}


def test_classic_and_standalone_fetches_carry_no_member() -> None:
    h = Harness(protocol="classic")
    h.m.on_member_changed("classic-1", 8)
    h.m.fetch_committed([tp("a", 0)], h.now + 5_000, "f")
    (group,) = h.send().request.groups
    assert (group.member_id, group.member_epoch) == (None, -1)


def test_identical_concurrent_fetches_share_one_request() -> None:
    h = Harness()
    h.m.fetch_committed([tp("a", 0), tp("a", 1)], h.now + 5_000, "f1")
    h.m.fetch_committed([tp("a", 1), tp("a", 0)], h.now + 5_000, "f2")  # same set, unsent
    request = h.send()
    h.m.fetch_committed([tp("a", 0), tp("a", 1)], h.now + 5_000, "f3")  # same set, in flight
    h.m.fetch_committed([tp("a", 0)], h.now + 5_000, "other")  # different set: own request
    other = h.send()
    assert fetch_partitions(other) == {tp("a", 0)}
    h.answer(request, fetch_response({tp("a", 0): oam(1), tp("a", 1): oam(2)}))
    done = h.take(CommittedOffsetsFetched)
    assert [e.request_key for e in done] == ["f1", "f2", "f3"]
    assert all(e.offsets == {tp("a", 0): oam(1), tp("a", 1): oam(2)} for e in done)
    assert h.m.pending_fetches == 1  # "other" still waits


def test_fetches_of_different_member_epochs_are_not_shared() -> None:
    h = Harness()
    h.m.on_member_changed(MEMBER_ID, 1)
    h.m.fetch_committed([tp("a", 0)], h.now + 5_000, "f1")
    h.send()
    h.m.on_member_changed(MEMBER_ID, 2)
    h.m.fetch_committed([tp("a", 0)], h.now + 5_000, "f2")
    assert h.send().request.groups[0].member_epoch == 2


def test_each_caller_of_a_shared_fetch_times_out_on_its_own_deadline() -> None:
    h = Harness()
    h.m.fetch_committed([tp("a", 0)], h.now + 1_000, "short")
    h.m.fetch_committed([tp("a", 0)], h.now + 9_000, "long")
    request = h.send()
    h.advance(1_000)
    (short,) = h.take(CommittedOffsetsFetched)
    assert short.request_key == "short" and isinstance(short.error, KafkaTimeoutError)
    h.answer(request, fetch_response({tp("a", 0): oam(7)}))
    (long,) = h.take(CommittedOffsetsFetched)
    assert long.request_key == "long" and long.offsets == {tp("a", 0): oam(7)}


@pytest.mark.parametrize(
    ("group_error", "partition_error", "coordinator_unknown"),
    [
        (14, 0, False),  # COORDINATOR_LOAD_IN_PROGRESS
        (16, 0, True),  # NOT_COORDINATOR
        (15, 0, True),  # COORDINATOR_NOT_AVAILABLE
        (0, 88, False),  # UNSTABLE_OFFSET_COMMIT (pending transactional offsets)
    ],
)
def test_retriable_fetch_errors_are_retried_until_success(
    group_error: int, partition_error: int, coordinator_unknown: bool
) -> None:
    h = Harness()
    h.m.fetch_committed([tp("a", 0)], h.now + 10_000, "f")
    request = h.send()
    partition_errors = {tp("a", 0): partition_error} if partition_error else None
    h.answer(
        request,
        fetch_response(
            {tp("a", 0): None}, group_error=group_error, partition_errors=partition_errors
        ),
    )
    events = h.take()
    assert [type(e) for e in events] == ([CoordinatorUnknown] if coordinator_unknown else [])
    if coordinator_unknown:
        h.m.on_coordinator_changed(COORDINATOR)
    h.advance(1_000)
    h.answer(h.send(), fetch_response({tp("a", 0): oam(5)}))
    (done,) = h.take(CommittedOffsetsFetched)
    assert done.error is None and done.offsets == {tp("a", 0): oam(5)}


def test_retriable_fetch_error_until_the_deadline_is_a_timeout() -> None:
    h = Harness()
    h.m.fetch_committed([tp("a", 0)], h.now + 2_000, "f")
    while True:
        result = h.poll()
        for request in result.requests:
            h.answer(request, fetch_response({}, group_error=14))
        done = [e for e in result.events if isinstance(e, CommittedOffsetsFetched)]
        if done:
            break
        assert result.time_until_next_poll_ms is not None
        h.advance(max(1, result.time_until_next_poll_ms))
    assert isinstance(done[0].error, KafkaTimeoutError)
    assert isinstance(done[0].error.__cause__, errors.CoordinatorLoadInProgressError)
    assert h.now == 1_000 + 2_000


def test_stale_member_epoch_on_fetch_is_retried_with_the_new_epoch() -> None:
    h = Harness()
    h.m.on_member_changed(MEMBER_ID, 3)
    h.m.fetch_committed([tp("a", 0)], h.now + 10_000, "f")
    h.answer(h.send(), fetch_response({}, group_error=113))
    h.m.on_member_changed(MEMBER_ID, 4)
    h.advance(1_000)
    retry = h.send()
    assert retry.request.groups[0].member_epoch == 4
    h.answer(retry, fetch_response({tp("a", 0): oam(1)}))
    assert h.take(CommittedOffsetsFetched)[0].error is None


@pytest.mark.parametrize(
    ("group_error", "partition_error", "cls"),
    [
        (30, 0, errors.GroupAuthorizationFailedError),
        (25, 0, errors.UnknownMemberIdError),
        (0, 29, errors.TopicAuthorizationFailedError),
        (0, 3, errors.UnknownTopicOrPartitionError),
    ],
)
def test_fatal_fetch_errors(
    group_error: int, partition_error: int, cls: type[errors.KafkaError]
) -> None:
    h = Harness()
    h.m.fetch_committed([tp("a", 0)], h.now + 10_000, "f")
    partition_errors = {tp("a", 0): partition_error} if partition_error else None
    h.answer(
        h.send(),
        fetch_response({}, group_error=group_error, partition_errors=partition_errors),
    )
    (done,) = h.take(CommittedOffsetsFetched)
    assert type(done.error) is cls
    assert done.error is not None
    if partition_error:
        assert done.error.topic == "a"
    h.advance(5_000)
    h.nothing_sent()


# -- initializing positions ---------------------------------------------------------------------


def test_initialize_positions_seeks_to_committed_offsets_or_marks_for_reset() -> None:
    h = Harness(reset="earliest")
    h.subs.assign_from_user([tp("a", 0), tp("a", 1), tp("a", 2), tp("b", 0)])
    h.subs.seek(tp("b", 0), 100)  # has a position: not fetched
    h.m.initialize_positions(h.now + 5_000, "init")
    request = h.send()
    assert fetch_partitions(request) == {tp("a", 0), tp("a", 1), tp("a", 2)}
    h.subs.seek(tp("a", 2), 77)  # the user seeks while the fetch is in flight: the user wins
    h.answer(
        request, fetch_response({tp("a", 0): oam(42, 5), tp("a", 1): None, tp("a", 2): oam(1)})
    )
    (done,) = h.take(PositionsInitialized)
    assert done.error is None
    assert done.seeked == {tp("a", 0): oam(42, 5)}
    assert done.reset == frozenset({tp("a", 1)})
    a0 = h.subs.partition_state(tp("a", 0))
    assert a0 is not None and a0.position == FetchPosition(42, 5)
    assert a0.fetch_state is FetchState.AWAIT_VALIDATION  # committed epoch: validate first
    a1 = h.subs.partition_state(tp("a", 1))
    assert a1 is not None and a1.awaiting_reset
    assert a1.reset_strategy is not None and a1.reset_strategy.kind is ResetKind.EARLIEST
    assert h.subs.position(tp("a", 2)) == FetchPosition(77)
    assert h.subs.position(tp("b", 0)) == FetchPosition(100)


def test_initialize_positions_without_a_reset_policy_reports_no_offset() -> None:
    h = Harness(reset="none")
    h.subs.assign_from_user([tp("a", 0)])
    h.m.initialize_positions(h.now + 5_000, "init")
    h.answer(h.send(), fetch_response({tp("a", 0): None}))
    (done,) = h.take(PositionsInitialized)
    assert isinstance(done.error, NoOffsetForPartitionError)
    assert done.error.partitions == (("a", 0),)
    assert h.subs.initializing_partitions() == (tp("a", 0),)


def test_initialize_positions_skips_partitions_no_longer_owned() -> None:
    h = Harness()
    h.subs.assign_from_user([tp("a", 0), tp("a", 1)])
    h.m.initialize_positions(h.now + 5_000, "init")
    request = h.send()
    h.subs.assign_from_user([tp("a", 1)])
    h.answer(request, fetch_response({tp("a", 0): oam(5), tp("a", 1): oam(6)}))
    (done,) = h.take(PositionsInitialized)
    assert done.seeked == {tp("a", 1): oam(6)}
    assert h.subs.partition_state(tp("a", 0)) is None


def test_initialize_positions_answer_after_the_deadline_is_still_applied() -> None:
    h = Harness()
    h.subs.assign_from_user([tp("a", 0)])
    h.m.initialize_positions(h.now + 1_000, "init")
    request = h.send()
    h.advance(1_000)
    (timed_out,) = h.take(PositionsInitialized)
    assert isinstance(timed_out.error, KafkaTimeoutError)
    h.answer(request, fetch_response({tp("a", 0): oam(12)}))
    assert h.subs.position(tp("a", 0)) == FetchPosition(12)
    # The next call finds nothing left to initialize.
    h.m.initialize_positions(h.now + 1_000, "again")
    result = h.nothing_sent()
    assert [e.seeked for e in result.events if isinstance(e, PositionsInitialized)] == [{}]


def test_initialize_positions_with_nothing_to_initialize_completes_at_once() -> None:
    h = Harness()
    h.own({tp("a", 0): 3})
    h.m.initialize_positions(h.now + 1_000, "init")
    result = h.nothing_sent()
    assert list(result.events) == [PositionsInitialized("init", {}, frozenset(), None)]


def test_committed_and_positions_fetches_of_the_same_partitions_share_a_request() -> None:
    h = Harness()
    h.subs.assign_from_user([tp("a", 0)])
    h.m.fetch_committed([tp("a", 0)], h.now + 5_000, "committed")
    h.m.initialize_positions(h.now + 5_000, "init")
    request = h.send()
    h.nothing_sent()
    h.answer(request, fetch_response({tp("a", 0): oam(8)}))
    events = h.take()
    assert {type(e) for e in events} == {CommittedOffsetsFetched, PositionsInitialized}
    assert h.subs.position(tp("a", 0)) == FetchPosition(8)
