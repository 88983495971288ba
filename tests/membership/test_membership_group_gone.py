"""GROUP_ID_NOT_FOUND answers a KIP-848 heartbeat: the group is gone.

The broker (Kafka 4.4) answers a ConsumerGroupHeartbeat with a member epoch other than 0 for a
group it does not know with GROUP_ID_NOT_FOUND ("Consumer group <id> not found."): the group
was deleted, or the client moved to another cluster (re-bootstrap). Java's consumer (4.4,
``AbstractHeartbeatRequestManager``) ignores that answer once the member is unsubscribed and
otherwise fails the member (fatal, ``GroupIdNotFoundException``; a FATAL member never rejoins).
The leave heartbeat's answer never fails the consumer (nothing is left to fail).
"""

from __future__ import annotations

from membership_harness import MEMBER_ID, Harness, tps

from kafka_actors import errors
from kafka_actors.protocol.group.consumer import membership as pm

S = pm.MemberState
GROUP_ID_NOT_FOUND = 69
MESSAGE = "Consumer group group-1 not found."


def test_in_the_group_it_is_fatal_and_names_the_group() -> None:
    h = Harness()
    h.stable_with({"a": [0]}, epoch=4)
    h.advance(5_000)
    h.respond(h.heartbeat(), error=GROUP_ID_NOT_FOUND, message=MESSAGE, epoch=-1)
    assert h.m.state is S.FATAL
    events = h.take_events()
    (error,) = h.of(pm.ErrorEvent, events)
    assert error.fatal and isinstance(error.error, errors.GroupIdNotFoundError)
    assert "group-1" in str(error.error) and not error.error.retriable
    assert pm.MemberEpochChanged(MEMBER_ID, None) in events
    (lost,) = h.of(pm.InvokeLost, events)
    assert lost.partitions == tps(("a", 0))


def test_a_heartbeat_answered_after_the_member_left_is_ignored() -> None:
    """The member left while a heartbeat was in flight (no coordinator known: the leave
    completed at once); that heartbeat's GROUP_ID_NOT_FOUND does not fail the consumer, and
    the member joins again when subscribed again (before: FATAL, never joining again)."""
    h = Harness()
    h.stable_with({"a": [0]}, epoch=4)
    h.advance(5_000)
    in_flight = h.heartbeat()
    h.m.on_coordinator_unknown(h.now)
    h.m.leave_group(h.now)
    (revoked,) = h.of(pm.InvokeRevoked, h.take_events())
    h.m.on_callback_completed(revoked.callback_id)
    assert pm.LeaveCompleted() in h.take_events()
    assert h.m.state is S.UNSUBSCRIBED
    h.respond(in_flight, error=GROUP_ID_NOT_FOUND, message=MESSAGE, epoch=-1)
    assert h.m.state is S.UNSUBSCRIBED
    assert h.of(pm.ErrorEvent, h.take_events()) == []
    h.m.on_coordinator_discovered(h.now)
    h.advance(1_000)  # past the backoff of the failed attempt
    join = h.join("a")
    assert h.m.state is S.JOINING and join.request.member_epoch == 0


def test_the_leave_heartbeat_answer_completes_the_leave() -> None:
    h = Harness()
    h.stable_with({"a": [0]}, epoch=4)
    h.m.leave_group(h.now)
    (revoked,) = h.of(pm.InvokeRevoked, h.take_events())
    h.m.on_callback_completed(revoked.callback_id)
    leave = h.heartbeat()
    assert leave.request.member_epoch == -1
    h.respond(leave, error=GROUP_ID_NOT_FOUND, message=MESSAGE, epoch=-1)
    events = h.take_events()
    assert pm.LeaveCompleted() in events and h.of(pm.ErrorEvent, events) == []
    assert h.m.state is S.UNSUBSCRIBED
