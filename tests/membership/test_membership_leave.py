"""Leaving the group (unsubscribe/close) and the poll timer (max.poll.interval.ms → STALE)."""

from __future__ import annotations

from typing import Any

import pytest
from membership_harness import MEMBER_ID, Harness, tps

from kafka_actors import errors
from kafka_actors.protocol.group.consumer.membership import (
    AssignmentChanged,
    ErrorEvent,
    InvokeLost,
    InvokeRevoked,
    LeaveCompleted,
    MemberEpochChanged,
    MemberState,
    PauseFetching,
)

S = MemberState


def leave_and_release(h: Harness, **kwargs: Any) -> list[Any]:
    h.m.leave_group(h.now, **kwargs)
    assert h.m.state is S.PREPARE_LEAVING
    return h.take_events()


@pytest.mark.parametrize(("instance_id", "epoch"), [(None, -1), ("static-7", -2)])
def test_leave_releases_then_sends_one_leave_heartbeat(instance_id: str | None, epoch: int) -> None:
    h = Harness(instance_id=instance_id)
    h.stable_with({"a": [0, 1]}, epoch=6)
    events = leave_and_release(h)
    assert [type(e) for e in events if isinstance(e, (PauseFetching, InvokeRevoked))] == [
        PauseFetching,
        InvokeRevoked,
    ]
    (revoked,) = h.of(InvokeRevoked, events)
    assert revoked.partitions == tps(("a", 0), ("a", 1))
    h.no_heartbeat()  # nothing until the callback completes (the interval has not passed)
    h.m.on_callback_completed(revoked.callback_id)
    assert h.m.state is S.LEAVING
    assert h.m.member_epoch == epoch
    result = h.poll()
    (leave,) = result.requests
    assert leave.request.member_epoch == epoch
    assert leave.request.member_id == MEMBER_ID
    assert leave.request.instance_id == instance_id
    assert leave.request.topic_partitions is None
    assert h.m.state is S.UNSUBSCRIBED
    assert AssignmentChanged(frozenset()) in result.events
    assert MemberEpochChanged(MEMBER_ID, None) in result.events
    assert h.of(LeaveCompleted, list(result.events)) == []  # completes on the response
    h.events.clear()
    h.respond(leave, epoch=epoch)
    assert h.take_events() == [LeaveCompleted()]
    h.advance(60_000)
    assert h.no_heartbeat().time_until_next_poll_ms is None


def test_leave_without_epoch_uses_lost_and_no_callback_when_nothing_owned() -> None:
    h = Harness()
    h.respond(h.join("a"), error=14)  # still JOINING, epoch 0, nothing owned
    h.m.leave_group(h.now)
    assert h.m.state is S.LEAVING  # nothing to release
    h.advance(5_000)
    leave = h.heartbeat()  # LEAVING ignores the backoff
    assert leave.request.member_epoch == -1
    h.fail(leave, errors.DisconnectedError())
    events = h.take_events()
    assert LeaveCompleted() in events
    assert len(h.of(Exception, events)) == 0


def test_leave_waits_for_in_flight_heartbeat() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    h.advance(5_000)
    in_flight = h.heartbeat()
    events = leave_and_release(h)
    h.m.on_callback_completed(h.of(InvokeRevoked, events)[0].callback_id)
    assert h.m.state is S.LEAVING
    h.no_heartbeat()  # never two in flight
    h.respond(in_flight, epoch=2, assignment={"b": [0]})  # ignored while LEAVING
    assert h.m.member_epoch == -1
    leave = h.heartbeat()
    assert leave.request.member_epoch == -1
    h.respond(leave, epoch=-1)
    assert LeaveCompleted() in h.take_events()


def test_leave_without_coordinator_completes_at_once() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    h.m.on_coordinator_unknown(h.now)
    events = leave_and_release(h)
    h.m.on_callback_completed(h.of(InvokeRevoked, events)[0].callback_id)
    result = h.poll()
    assert result.requests == ()
    assert h.m.state is S.UNSUBSCRIBED
    assert LeaveCompleted() in result.events


def test_leave_when_not_in_group_completes_at_once() -> None:
    h = Harness()
    h.m.leave_group(h.now)
    assert h.take_events() == [LeaveCompleted()]
    assert h.m.state is S.UNSUBSCRIBED


def test_leave_deadline_when_callback_never_completes() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    leave_and_release(h, deadline_ms=h.now + 30_000)
    assert h.no_heartbeat().time_until_next_poll_ms is not None
    h.advance(30_000)
    result = h.poll()
    assert LeaveCompleted(timed_out=True) in result.events
    (leave,) = result.requests  # best effort, response ignored
    assert leave.request.member_epoch == -1
    assert h.m.state is S.UNSUBSCRIBED
    assert h.m.assignment == frozenset()
    h.respond(leave, epoch=-1)
    assert h.of(LeaveCompleted, h.take_events()) == [LeaveCompleted(timed_out=True)]


def test_fenced_while_preparing_to_leave() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    h.advance(5_000)
    in_flight = h.heartbeat()
    events = leave_and_release(h)
    h.respond(in_flight, error=110)
    assert h.m.state is S.UNSUBSCRIBED
    assert LeaveCompleted() in h.take_events()
    h.m.on_callback_completed(h.of(InvokeRevoked, events)[0].callback_id)
    assert h.m.state is S.UNSUBSCRIBED
    assert h.m.assignment == frozenset()
    h.advance(10_000)
    h.no_heartbeat()  # no leave heartbeat: the broker already removed the member


def test_fatal_leave_response_surfaces_error() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    h.m.leave_group(h.now, run_callbacks=False)
    leave = h.heartbeat()
    h.respond(leave, error=30)
    events = h.take_events()
    assert LeaveCompleted() in events
    assert h.of(ErrorEvent, events)[0].fatal
    assert h.m.state is S.FATAL


def test_resubscribe_after_leave_joins_again_with_epoch_zero() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    h.m.leave_group(h.now, run_callbacks=False)
    leave = h.heartbeat()
    h.m.subscribe(["b"])
    h.m.on_poll(h.now)
    assert h.m.state is S.JOINING
    h.no_heartbeat()  # the leave is still in flight
    h.respond(leave, epoch=-1)
    body = h.heartbeat().request
    assert body.member_epoch == 0
    assert body.subscribed_topic_names == ("b",)
    assert body.topic_partitions == ()


def test_unsubscribe_while_fenced_does_not_rejoin() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    h.advance(5_000)
    h.respond(h.heartbeat(), error=110)
    (lost,) = h.of(InvokeLost, h.take_events())
    h.m.leave_group(h.now)
    assert h.m.state is S.UNSUBSCRIBED
    assert LeaveCompleted() in h.take_events()
    h.m.on_callback_completed(lost.callback_id)
    assert h.m.state is S.UNSUBSCRIBED
    assert h.m.assignment == frozenset()


# -- Poll timer -------------------------------------------------------------------------------


def stale_member(h: Harness) -> tuple[Any, InvokeLost]:
    h.stable_with({"a": [0]}, epoch=3)
    h.m.on_poll(h.now)
    last_app_poll = h.now
    for _ in range(60):  # heartbeats keep going while the application does not poll
        h.advance(5_000)
        if h.now >= last_app_poll + 300_000:
            break
        h.respond(h.heartbeat(), epoch=3)
    result = h.poll()
    (leave,) = result.requests
    assert h.m.state is S.STALE
    (lost,) = h.of(InvokeLost, list(result.events))
    return leave, lost


@pytest.mark.parametrize(("instance_id", "epoch"), [(None, -1), ("static-9", -2)])
def test_poll_timer_expiry_leaves_goes_stale_and_rejoins_on_poll(
    instance_id: str | None, epoch: int
) -> None:
    h = Harness(instance_id=instance_id)
    leave, lost = stale_member(h)
    assert leave.request.member_epoch == epoch
    assert lost.partitions == tps(("a", 0))
    h.respond(leave, epoch=epoch)  # ignored
    h.advance(60_000)
    assert h.no_heartbeat().time_until_next_poll_ms is None  # stale: no heartbeats
    h.m.on_callback_completed(lost.callback_id)
    assert h.m.assignment == frozenset()
    assert h.m.state is S.STALE  # until the application polls
    h.m.on_poll(h.now)
    assert h.m.state is S.JOINING
    body = h.heartbeat().request
    assert body.member_epoch == 0
    assert body.subscribed_topic_names == ("a",)
    assert body.topic_partitions == ()


def test_application_poll_before_lost_completes_rejoins_after_release() -> None:
    h = Harness()
    _leave, lost = stale_member(h)
    h.m.on_poll(h.now)
    assert h.m.state is S.STALE
    h.m.on_callback_completed(lost.callback_id)
    assert h.m.state is S.JOINING


def test_application_poll_resets_the_timer() -> None:
    h = Harness(rebalance_timeout_ms=20_000)
    h.stable_with({"a": [0]})
    h.m.on_poll(h.now)
    for _ in range(10):
        h.advance(5_000)
        h.m.on_poll(h.now)
        h.respond(h.heartbeat(), epoch=1)
    assert h.m.state is S.STABLE
    h.advance(19_999)
    h.m.on_poll(h.now)
    assert h.m.state is S.STABLE


def test_poll_timer_expiry_with_heartbeat_in_flight() -> None:
    h = Harness(rebalance_timeout_ms=10_000)
    h.stable_with({"a": [0]})
    h.m.on_poll(h.now)
    h.advance(5_000)
    in_flight = h.heartbeat()
    h.advance(5_000)
    result = h.poll()
    assert result.requests == ()
    assert h.m.state is S.LEAVING
    h.respond(in_flight, epoch=1)
    leave = h.heartbeat()
    assert leave.request.member_epoch == -1
    assert h.m.state is S.STALE


def test_poll_timer_time_until_next_poll() -> None:
    h = Harness(rebalance_timeout_ms=4_000)
    h.stable_with({"a": [0]})
    h.m.on_poll(h.now)
    assert h.poll().time_until_next_poll_ms == 4_000  # before the 5000 ms heartbeat


def test_rejoin_waits_for_the_release_of_the_previous_assignment() -> None:
    # Found by the state-machine test: a late release must not clear a new assignment.
    h = Harness()
    h.stable_with({"a": [0]})
    h.advance(5_000)
    in_flight = h.heartbeat()
    events = leave_and_release(h)
    (revoked,) = h.of(InvokeRevoked, events)
    h.respond(in_flight, error=25)  # UNKNOWN_MEMBER_ID while preparing to leave
    assert h.m.state is S.UNSUBSCRIBED
    h.m.subscribe(["a"])
    h.m.on_poll(h.now)
    assert h.m.state is S.UNSUBSCRIBED  # onPartitionsRevoked(a-0) has not completed
    h.no_heartbeat()
    h.m.on_callback_completed(revoked.callback_id)
    assert h.m.assignment == frozenset()
    h.m.on_poll(h.now)
    assert h.m.state is S.JOINING
    assert h.heartbeat().request.member_epoch == 0


def test_leave_deadline_with_heartbeat_in_flight_gives_up_the_leave_heartbeat() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    h.advance(5_000)
    in_flight = h.heartbeat()
    h.m.leave_group(h.now, deadline_ms=h.now + 1_000, run_callbacks=False)
    assert h.m.state is S.LEAVING
    h.advance(1_000)
    result = h.poll()
    assert result.requests == ()  # never two in flight, even at the deadline
    assert LeaveCompleted(timed_out=True) in result.events
    assert h.m.state is S.UNSUBSCRIBED
    h.respond(in_flight, epoch=1)
    assert h.no_heartbeat().time_until_next_poll_ms is None


def test_state_transitions_are_logged() -> None:
    from kafka_actors.testing import capture_logs

    with capture_logs() as logs:
        h = Harness()
        h.join("a")
    transitions = [entry for entry in logs if entry["event"] == "member_state_transition"]
    assert transitions == [
        {
            "event": "member_state_transition",
            "log_level": "info",
            "from_state": "UNSUBSCRIBED",
            "to_state": "JOINING",
            "member_epoch": 0,
            "client_id": None,
            "group_id": "group-1",
            "member_id": MEMBER_ID,
        }
    ]
