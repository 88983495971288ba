"""Heartbeat errors: fatal codes, fencing, retriable codes with exponential backoff."""

from __future__ import annotations

import math
import random

import pytest
from membership_harness import MEMBER_ID, Harness, tps

from kafka_actors import errors
from kafka_actors.protocol.group.consumer.membership import (
    CONSUMER_PROTOCOL_NOT_SUPPORTED_MSG,
    CoordinatorUnknown,
    ErrorEvent,
    ExponentialBackoff,
    InvokeLost,
    MemberEpochChanged,
    MemberState,
)
from kafka_actors.protocol.group.events import PauseFetching

S = MemberState

FATAL_CODES = {
    30: errors.GroupAuthorizationFailedError,
    42: errors.InvalidRequestError,
    81: errors.GroupMaxSizeReachedError,
    112: errors.UnsupportedAssignorError,
    111: errors.UnreleasedInstanceIdError,
    82: errors.FencedInstanceIdError,
    35: errors.UnsupportedVersionError,
    128: errors.InvalidRegularExpressionError,
}


@pytest.mark.parametrize(("code", "cls"), sorted(FATAL_CODES.items()))
def test_fatal_codes(code: int, cls: type[errors.KafkaError]) -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    h.advance(5_000)
    h.respond(h.heartbeat(), error=code, message="broker says no")
    assert h.m.state is S.FATAL
    events = h.take_events()
    (error,) = h.of(ErrorEvent, events)
    assert error.fatal
    assert isinstance(error.error, cls)
    assert error.consumer_protocol_unsupported is (code == 35)
    if code == 35:
        assert "group.protocol=classic" in str(error.error)
        assert error.error.message == CONSUMER_PROTOCOL_NOT_SUPPORTED_MSG
    assert MemberEpochChanged(MEMBER_ID, None) in events
    (lost,) = h.of(InvokeLost, events)
    assert lost.partitions == tps(("a", 0))
    h.m.on_callback_completed(lost.callback_id)
    assert h.m.assignment == frozenset()
    for _ in range(3):
        h.advance(60_000)
        assert h.no_heartbeat().time_until_next_poll_ms is None
    h.m.on_poll(h.now)
    h.m.subscribe(["b"])
    h.m.on_poll(h.now)
    assert h.m.state is S.FATAL


def test_fatal_on_join_without_assignment_has_no_lost_callback() -> None:
    h = Harness()
    h.respond(h.join("a"), error=30)
    events = h.take_events()
    assert h.m.state is S.FATAL
    assert h.of(InvokeLost, events) == []
    assert "group-1" in str(h.of(ErrorEvent, events)[0].error)


@pytest.mark.parametrize("code", [27, 9_999])  # REBALANCE_IN_PROGRESS, unknown code
def test_unexpected_non_retriable_codes_are_fatal(code: int) -> None:
    h = Harness()
    h.respond(h.join("a"), error=code)
    assert h.m.state is S.FATAL
    (error,) = h.of(ErrorEvent, h.take_events())
    assert error.fatal
    assert error.error.code == code


def test_topic_authorization_failed_is_reported_not_fatal() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    h.advance(5_000)
    h.respond(h.heartbeat(), error=29)
    events = h.take_events()
    (error,) = h.of(ErrorEvent, events)
    assert not error.fatal
    assert isinstance(error.error, errors.TopicAuthorizationFailedError)
    assert h.m.state is S.STABLE
    assert h.m.assignment == tps(("a", 0))
    h.advance(200)  # after the backoff (<= 120 ms for the first failure)
    h.heartbeat()


@pytest.mark.parametrize("code", [110, 25])
def test_fenced_without_assignment_rejoins_at_once(code: int) -> None:
    h = Harness()
    h.respond(h.join("a"), epoch=4, assignment={})
    h.complete_all_callbacks()
    h.respond(h.ack(), epoch=4)
    assert h.m.state is S.STABLE
    h.advance(5_000)
    h.respond(h.heartbeat(), error=code)
    # Nothing to lose: no callback, JOINING at once with epoch 0, no backoff.
    assert h.m.state is S.JOINING
    assert h.m.member_epoch == 0
    events = h.take_events()
    assert h.of(InvokeLost, events) == []
    body = h.requests[-1].request
    assert body.member_epoch == 0
    assert body.subscribed_topic_names == ("a",)


@pytest.mark.parametrize("code", [110, 25, 30])  # FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, fatal
def test_lost_partitions_stop_being_returned_before_on_partitions_lost(code: int) -> None:
    """The assignment is cleared when the lost callback's reply comes back, while the
    application thread polls on: its partitions are marked pending revocation (no longer
    fetched nor returned) before the callback is asked for."""
    h = Harness()
    h.stable_with({"a": [0, 1]})
    h.advance(5_000)
    h.respond(h.heartbeat(), error=code)
    events = h.take_events()
    released = [e for e in events if isinstance(e, (PauseFetching, InvokeLost))]
    assert [type(e) for e in released] == [PauseFetching, InvokeLost]
    assert released[0].partitions == released[1].partitions == tps(("a", 0), ("a", 1))
    assert h.m.assignment == tps(("a", 0), ("a", 1))  # until the reply
    h.m.on_callback_completed(released[1].callback_id)
    assert h.m.assignment == frozenset()


def expected_backoffs(seed: int, count: int, initial: int = 100, maximum: int = 1_000) -> list[int]:
    """Java's formula, written out independently: min(max, initial*2^n*U(0.8, 1.2))."""
    rng = random.Random(seed)
    exp_max = math.log(maximum / initial) / math.log(2)
    values = []
    for attempt in range(count):
        term = initial * 2 ** min(attempt, exp_max)
        values.append(min(int((0.8 + 0.4 * rng.random()) * term), maximum))
    return values


@pytest.mark.parametrize("code", [14, 13, 7])  # LOAD_IN_PROGRESS, NETWORK_EXCEPTION, TIMED_OUT
def test_retriable_codes_back_off_exponentially(code: int) -> None:
    h = Harness(seed=11)
    h.stable_with({"a": [0]})
    h.advance(5_000)
    request = h.heartbeat()
    for expected in expected_backoffs(11, 7):
        assert 80 <= expected <= 1_000
        h.respond(request, error=code)
        assert h.m.state is S.STABLE
        result = h.no_heartbeat()
        assert result.time_until_next_poll_ms == expected
        h.advance(expected - 1)
        h.no_heartbeat()
        h.advance(1)
        request = h.heartbeat()
    # Success resets the backoff: the next failure waits a first-attempt backoff again.
    h.respond(request, epoch=1)
    h.advance(5_000)
    h.respond(h.heartbeat(), error=code)
    wait = h.no_heartbeat().time_until_next_poll_ms
    assert wait is not None and 80 <= wait <= 120


def test_backoff_caps_at_retry_backoff_max() -> None:
    backoff = ExponentialBackoff(100, 2, 1_000, 0.2, random.Random(3).random)
    values = [backoff.backoff(n) for n in range(12)]
    assert all(80 <= v <= 1_000 for v in values)
    assert values[-1] == 1_000 or values[-1] >= 800
    assert ExponentialBackoff(500, 2, 100, 0.2, lambda: 0.99).backoff(5) == 500  # no growth
    assert ExponentialBackoff(100, 2, 1_000, 0.2, lambda: 0.0).backoff(0) == 80
    assert ExponentialBackoff(100, 2, 1_000, 0.2, lambda: 0.999999).backoff(1) == 239


def test_joining_member_waits_the_backoff() -> None:
    h = Harness(seed=5)
    (first,) = expected_backoffs(5, 1)
    h.respond(h.join("a"), error=14)
    assert h.m.state is S.JOINING
    assert h.no_heartbeat().time_until_next_poll_ms == first
    h.advance(first)
    assert h.heartbeat().request.member_epoch == 0


@pytest.mark.parametrize("code", [16, 15])  # NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE
def test_coordinator_errors_ask_for_rediscovery_and_skip_backoff(code: int) -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    h.advance(5_000)
    h.respond(h.heartbeat(), error=code, message="moved")
    events = h.take_events()
    assert h.of(CoordinatorUnknown, events) == [CoordinatorUnknown("moved")]
    assert not h.m.coordinator_known
    h.advance(10_000)
    assert h.no_heartbeat().time_until_next_poll_ms is None
    h.m.on_coordinator_discovered(h.now)
    body = h.heartbeat().request  # at once: no backoff
    assert body.topic_partitions is not None  # full request after an error


@pytest.mark.parametrize(
    "error",
    [errors.DisconnectedError("closed", node=1), errors.RequestTimedOutError()],
)
def test_network_failures_back_off_and_rediscover(error: errors.KafkaError) -> None:
    h = Harness(seed=2)
    (first,) = expected_backoffs(2, 1)
    h.stable_with({"a": [0]})
    h.advance(5_000)
    h.fail(h.heartbeat(), error)
    events = h.take_events()
    assert len(h.of(CoordinatorUnknown, events)) == 1
    assert h.m.state is S.STABLE
    h.m.on_coordinator_discovered(h.now)
    assert h.no_heartbeat().time_until_next_poll_ms == first
    h.advance(first)
    h.heartbeat()


def test_retriable_failure_without_connection_loss_keeps_coordinator() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    h.advance(5_000)
    h.fail(h.heartbeat(), errors.CoordinatorLoadInProgressError())
    assert h.of(CoordinatorUnknown, h.take_events()) == []
    assert h.m.coordinator_known


def test_non_retriable_failure_is_fatal() -> None:
    h = Harness()
    h.fail(h.join("a"), errors.UnsupportedVersionError("no ConsumerGroupHeartbeat"))
    assert h.m.state is S.FATAL
    (error,) = h.of(ErrorEvent, h.take_events())
    assert error.fatal and error.consumer_protocol_unsupported


def test_non_kafka_failure_is_wrapped_fatal() -> None:
    h = Harness()
    h.fail(h.join("a"), ValueError("codec bug"))
    (error,) = h.of(ErrorEvent, h.take_events())
    assert isinstance(error.error, errors.FatalConsumerError)
    assert isinstance(error.error.__cause__, ValueError)


def test_outcome_for_unknown_request_is_ignored() -> None:
    h = Harness()
    request = h.join("a")
    h.m.on_response(request.request_id + 7, object(), h.now)
    h.m.on_failure(request.request_id + 7, errors.DisconnectedError(), h.now)
    assert h.m.request_in_flight
    h.respond(request, epoch=1, assignment={})
    assert h.m.state is S.RECONCILING
    h.respond(request, epoch=9, assignment={"a": [0]})  # duplicate: ignored
    assert h.m.member_epoch == 1
