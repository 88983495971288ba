"""CommitManager: commit_sync retries and error mapping, commit_async, member identity,
coordinator discovery (pure, manual clock, fabricated responses)."""

from __future__ import annotations

import pytest

from kafka_actors import errors
from kafka_actors.errors import (
    CommitFailedError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    DisconnectedError,
    KafkaTimeoutError,
)
from kafka_actors.protocol.group.consumer.membership import CoordinatorUnknown, MemberEpochChanged
from kafka_actors.protocol.offsets.commit import CommitCompleted

from .harness import COORDINATOR, GROUP, MEMBER_ID, TOPIC_IDS, Harness, oam, request_offsets, tp


def test_commit_sync_of_all_consumed_goes_to_the_coordinator_with_member_epoch() -> None:
    h = Harness()
    h.own({tp("a", 0): (10, 3), tp("a", 1): 20})
    h.m.on_member_changed(MEMBER_ID, 7)
    h.m.commit_sync(None, h.now + 5_000, "k1")
    request = h.send()
    assert request.node == COORDINATOR
    assert request.trace_id == "k1"
    body = request.request
    assert body.group_id == GROUP
    assert body.member_id == MEMBER_ID
    assert body.generation_id_or_member_epoch == 7
    assert request_offsets(request) == {tp("a", 0): oam(10, 3), tp("a", 1): oam(20)}
    assert request.timeout_ms == 5_000  # bounded by the deadline (request.timeout.ms 30 s)
    h.ok(request)
    (done,) = h.take(CommitCompleted)
    assert done == CommitCompleted("k1", {tp("a", 0): oam(10, 3), tp("a", 1): oam(20)}, None)
    assert h.m.last_committed == {tp("a", 0): oam(10, 3), tp("a", 1): oam(20)}
    assert h.m.pending_commits == 0


def test_empty_commit_completes_without_a_request() -> None:
    h = Harness()
    h.m.commit_sync(None, h.now + 1_000, "sync")
    h.m.commit_async({}, "async")
    result = h.nothing_sent()
    assert [e.request_key for e in result.events] == ["sync", "async"]
    assert all(e.error is None and e.offsets == {} for e in result.events)


def test_sync_retry_schedule_follows_exponential_backoff_until_the_deadline() -> None:
    h = Harness(retry_backoff_ms=100, retry_backoff_max_ms=1_000)
    deadline = h.now + 3_000
    h.m.commit_sync({tp("a", 0): oam(5)}, deadline, "k")
    attempt = 0
    sent_at: list[int] = []
    while True:
        request = h.send()
        sent_at.append(h.now)
        h.ok(request, {tp("a", 0): 14})  # COORDINATOR_LOAD_IN_PROGRESS
        result = h.nothing_sent()
        if any(isinstance(e, CommitCompleted) for e in result.events):
            break
        wait = result.time_until_next_poll_ms
        assert wait is not None
        expected = min(1_000, 100 * 2**attempt)
        if h.now + wait < deadline:
            # The retry is due after the backoff: exp. with jitter 0.2, capped at the max.
            assert min(1_000, int(expected * 0.8)) <= wait <= min(1_000, int(expected * 1.2))
            h.advance(wait - 1)
            h.nothing_sent()  # not a millisecond early
            h.advance(1)
        else:
            assert h.now + wait == deadline  # next retry would be past the deadline
            h.advance(wait)
            result = h.nothing_sent()
            break
        attempt += 1
    assert len(sent_at) >= 4
    (done,) = [e for e in h.take() if isinstance(e, CommitCompleted)] or [
        e for e in result.events if isinstance(e, CommitCompleted)
    ]
    assert isinstance(done.error, KafkaTimeoutError)
    assert isinstance(done.error.__cause__, CoordinatorLoadInProgressError)
    assert h.now == deadline
    assert all(t < deadline for t in sent_at)


def test_sync_commit_in_flight_at_the_deadline_times_out_and_its_answer_is_ignored() -> None:
    h = Harness()
    h.m.commit_sync({tp("a", 0): oam(5)}, h.now + 1_000, "k")
    request = h.send()
    h.advance(1_000)
    (done,) = h.take(CommitCompleted)
    assert isinstance(done.error, KafkaTimeoutError)
    h.ok(request)  # late answer: ignored, no second completion
    assert h.take(CommitCompleted) == []
    assert h.m.last_committed == {}


RETRIED = [
    (14, errors.CoordinatorLoadInProgressError, False),
    (15, errors.CoordinatorNotAvailableError, True),
    (16, errors.NotCoordinatorError, True),
    (7, errors.RequestTimedOutError, True),
    (3, errors.UnknownTopicOrPartitionError, False),
]


@pytest.mark.parametrize(("code", "cls", "coordinator_unknown"), RETRIED)
def test_retriable_commit_errors_are_retried(
    code: int, cls: type[errors.KafkaError], coordinator_unknown: bool
) -> None:
    h = Harness()
    h.m.commit_sync({tp("a", 0): oam(5), tp("b", 1): oam(6)}, h.now + 10_000, "k")
    request = h.send()
    h.ok(request, {tp("b", 1): code})
    events = h.take()
    assert not [e for e in events if isinstance(e, CommitCompleted)]
    if coordinator_unknown:
        assert [type(e) for e in events] == [CoordinatorUnknown]
        assert h.m.coordinator is None
        h.advance(5_000)
        h.nothing_sent()  # waits for the coordinator
        h.m.on_coordinator_changed(COORDINATOR + 1)
    else:
        assert events == []
        h.advance(1_000)
    retry = h.send()
    assert retry.node == (COORDINATOR + 1 if coordinator_unknown else COORDINATOR)
    assert request_offsets(retry) == request_offsets(request)
    h.ok(retry)
    (done,) = h.take(CommitCompleted)
    assert done.error is None


FATAL = [
    (22, CommitFailedError),  # ILLEGAL_GENERATION
    (25, CommitFailedError),  # UNKNOWN_MEMBER_ID
    (110, CommitFailedError),  # FENCED_MEMBER_EPOCH
    (113, CommitFailedError),  # STALE_MEMBER_EPOCH (Java 4.x: CommitFailedException)
    (82, CommitFailedError),  # FENCED_INSTANCE_ID (consumer protocol)
    (27, errors.RebalanceInProgressError),
    (30, errors.GroupAuthorizationFailedError),
    (12, errors.OffsetMetadataTooLargeError),
    (28, errors.InvalidCommitOffsetSizeError),
    (42, errors.InvalidRequestError),
]


@pytest.mark.parametrize(("code", "cls"), FATAL)
def test_fatal_commit_errors_complete_at_once_naming_the_partition(
    code: int, cls: type[errors.KafkaError]
) -> None:
    h = Harness()
    h.m.on_member_changed(MEMBER_ID, 4)
    h.m.commit_sync({tp("a", 0): oam(5), tp("b", 1): oam(6)}, h.now + 10_000, "k")
    h.ok(h.send(), {tp("b", 1): code})
    (done,) = h.take(CommitCompleted)
    assert type(done.error) is cls
    assert (done.error.topic, done.error.partition, done.error.offset) == ("b", 1, 6)
    if cls is errors.GroupAuthorizationFailedError:
        assert GROUP in str(done.error)
    h.advance(5_000)
    h.nothing_sent()  # never retried
    assert h.m.last_committed == {}


def test_fenced_instance_id_is_its_own_error_with_the_classic_protocol() -> None:
    h = Harness(protocol="classic")
    h.m.on_member_changed("classic-member", 3, "instance-1")
    h.m.commit_sync({tp("a", 0): oam(5)}, h.now + 10_000, "k")
    request = h.send()
    assert request.request.group_instance_id == "instance-1"
    h.ok(request, {tp("a", 0): 82})
    (done,) = h.take(CommitCompleted)
    assert type(done.error) is errors.FencedInstanceIdError


def test_denied_topics_are_collected_into_one_authorization_error() -> None:
    h = Harness()
    h.m.commit_sync({tp("a", 0): oam(1), tp("b", 0): oam(2), tp("b", 1): oam(3)}, h.now + 9, "k")
    h.ok(h.send(), {tp("a", 0): 29, tp("b", 1): 29})
    (done,) = h.take(CommitCompleted)
    assert type(done.error) is errors.TopicAuthorizationFailedError
    assert "['a', 'b']" in str(done.error)


def test_disconnect_marks_the_coordinator_unknown_and_the_sync_commit_waits_for_it() -> None:
    h = Harness()
    h.m.commit_sync({tp("a", 0): oam(5)}, h.now + 10_000, "k")
    h.fail(h.send(), DisconnectedError("gone", node=COORDINATOR))
    assert [type(e) for e in h.take()] == [CoordinatorUnknown]
    h.advance(2_000)
    h.nothing_sent()
    h.m.on_coordinator_changed(COORDINATOR)
    h.ok(h.send())
    (done,) = h.take(CommitCompleted)
    assert done.error is None


def test_no_coordinator_sync_commit_waits_and_succeeds_after_discovery() -> None:
    h = Harness(coordinator=None)
    h.m.commit_sync({tp("a", 0): oam(5)}, h.now + 10_000, "k")
    result = h.nothing_sent()
    assert result.time_until_next_poll_ms == 10_000  # only the deadline wakes it
    h.advance(3_000)
    h.nothing_sent()
    h.m.on_coordinator_changed(5)
    request = h.send()
    assert request.node == 5
    h.ok(request)
    (done,) = h.take(CommitCompleted)
    assert done.error is None


def test_no_coordinator_until_the_deadline_is_a_timeout_caused_by_no_coordinator() -> None:
    h = Harness(coordinator=None)
    h.m.commit_sync({tp("a", 0): oam(5)}, h.now + 2_000, "k")
    h.nothing_sent()
    h.advance(2_000)
    (done,) = h.take(CommitCompleted)
    assert isinstance(done.error, KafkaTimeoutError)
    assert isinstance(done.error.__cause__, CoordinatorNotAvailableError)


# -- commit_async -------------------------------------------------------------------------------


def test_async_commit_is_never_retried() -> None:
    h = Harness()
    h.m.commit_async({tp("a", 0): oam(5)}, "a1")
    h.ok(h.send(), {tp("a", 0): 14})
    (done,) = h.take(CommitCompleted)
    assert type(done.error) is CoordinatorLoadInProgressError
    assert done.error.retriable
    h.advance(60_000)
    h.nothing_sent()


def test_async_commit_failing_on_disconnect_is_not_retried_either() -> None:
    h = Harness()
    h.m.commit_async({tp("a", 0): oam(5)}, "a1")
    h.fail(h.send(), DisconnectedError("gone"))
    events = h.take()
    assert [type(e) for e in events] == [CoordinatorUnknown, CommitCompleted]
    assert isinstance(events[1].error, DisconnectedError)
    h.m.on_coordinator_changed(COORDINATOR)
    h.nothing_sent()


def test_async_commits_complete_in_the_order_they_were_made() -> None:
    h = Harness()
    for i in range(3):
        h.m.commit_async({tp("a", 0): oam(10 + i)}, f"a{i}")
    requests = h.poll().requests
    assert len(requests) == 3  # pipelined, in order
    assert [request_offsets(r)[tp("a", 0)].offset for r in requests] == [10, 11, 12]
    h.ok(requests[2])
    h.ok(requests[1], {tp("a", 0): 14})
    assert h.take(CommitCompleted) == []  # a0 has not completed: nothing is published yet
    h.ok(requests[0])
    done = h.take(CommitCompleted)
    assert [e.request_key for e in done] == ["a0", "a1", "a2"]
    assert [type(e.error) for e in done] == [type(None), CoordinatorLoadInProgressError, type(None)]


def test_async_commit_waits_for_the_coordinator_until_close_bounds_it() -> None:
    h = Harness(coordinator=None)
    h.m.commit_async({tp("a", 0): oam(5)}, "a1")
    result = h.nothing_sent()
    assert result.time_until_next_poll_ms is None  # no deadline of its own (as Java)
    h.advance(600_000)
    h.nothing_sent()
    h.m.close(h.now + 1_000)
    h.advance(1_000)
    (done,) = h.take(CommitCompleted)
    assert isinstance(done.error, KafkaTimeoutError)


# -- member identity ----------------------------------------------------------------------------


def test_consumer_protocol_uses_the_latest_member_epoch_on_each_attempt() -> None:
    h = Harness()
    h.m.on_member_epoch_changed(MemberEpochChanged(MEMBER_ID, 3))
    h.m.commit_sync({tp("a", 0): oam(5)}, h.now + 10_000, "k")
    first = h.send()
    assert (first.request.member_id, first.request.generation_id_or_member_epoch) == (MEMBER_ID, 3)
    h.ok(first, {tp("a", 0): 14})
    h.m.on_member_epoch_changed(MemberEpochChanged(MEMBER_ID, 4))
    h.advance(1_000)
    second = h.send()
    assert second.request.generation_id_or_member_epoch == 4


def test_classic_protocol_sends_the_generation_and_standalone_sends_minus_one() -> None:
    h = Harness(protocol="classic")
    h.m.on_member_changed("classic-1", 12)
    h.m.commit_async({tp("a", 0): oam(5)}, "k")
    body = h.send().request
    assert (body.member_id, body.generation_id_or_member_epoch) == ("classic-1", 12)

    standalone = Harness(protocol="classic")
    standalone.m.commit_async({tp("a", 0): oam(5)}, "k")
    body = standalone.send().request
    assert (body.member_id, body.generation_id_or_member_epoch) == ("", -1)

    left = Harness()
    left.m.on_member_epoch_changed(MemberEpochChanged(MEMBER_ID, None))  # not in the group
    left.m.commit_async({tp("a", 0): oam(5)}, "k")
    assert left.send().request.generation_id_or_member_epoch == -1


def test_v10_commits_name_topics_by_id_when_every_id_is_known_else_fall_back_to_v9() -> None:
    h = Harness(commit_version=10)
    h.m.on_topic_ids({"a": TOPIC_IDS["a"], "b": str(TOPIC_IDS["b"])})
    h.m.commit_sync({tp("a", 0): oam(5), tp("b", 2): oam(7)}, h.now + 10_000, "k")
    request = h.send()
    assert type(request.request).__version__ == 10
    assert {t.topic_id for t in request.request.topics} == {TOPIC_IDS["a"], TOPIC_IDS["b"]}
    h.ok(request, {tp("b", 2): 25})  # the answer names topics by id: mapped back to names
    (done,) = h.take(CommitCompleted)
    assert isinstance(done.error, CommitFailedError)
    assert (done.error.topic, done.error.partition) == ("b", 2)

    unknown = Harness(commit_version=10)
    unknown.m.on_topic_ids({"a": TOPIC_IDS["a"]})
    unknown.m.commit_async({tp("a", 0): oam(5), tp("c", 0): oam(1)}, "k")
    request = unknown.send()
    assert type(request.request).__version__ == 9
    assert {str(t.name) for t in request.request.topics} == {"a", "c"}


def test_all_consumed_never_includes_a_partition_no_longer_owned() -> None:
    h = Harness()
    h.own({tp("a", 0): 10, tp("a", 1): 20})
    h.subs.assign_from_user([tp("a", 1)])  # a-0 is gone
    h.m.commit_async(None, "k")
    assert set(request_offsets(h.send())) == {tp("a", 1)}


def test_fail_pending_fails_every_commit_and_fetch() -> None:
    h = Harness(coordinator=None)
    h.m.commit_sync({tp("a", 0): oam(1)}, h.now + 10_000, "s")
    h.m.commit_async({tp("a", 0): oam(2)}, "a")
    h.m.fetch_committed([tp("a", 0)], h.now + 10_000, "f")
    fatal = errors.GroupAuthorizationFailedError("denied")
    h.m.fail_pending(fatal)
    events = h.take()
    assert sorted(e.request_key for e in events) == ["a", "f", "s"]
    assert all(e.error is fatal for e in events)
    assert h.m.pending_commits == 0 and h.m.pending_fetches == 0


def test_negative_offsets_are_refused_at_the_call() -> None:
    h = Harness()
    with pytest.raises(ValueError, match="a-0"):
        h.m.commit_sync({tp("a", 0): oam(-1)}, h.now + 1_000, "k")
    with pytest.raises(ValueError):
        h.m.commit_async({tp("a", 0): oam(-5)}, "k")
    h.nothing_sent()
    assert h.m.pending_commits == 0
