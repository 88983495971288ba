"""close(membership=...) (KIP-1092) of a KIP-848 member: the leave heartbeat's epoch, or none,
for each group membership operation, dynamic and static (group.instance.id)."""

from __future__ import annotations

import pytest
from membership_harness import MEMBER_ID, Harness

from kafka_actors.errors import InvalidArgumentError
from kafka_actors.protocol.group.consumer.membership import (
    InvokeRevoked,
    LeaveCompleted,
    MemberState,
)
from kafka_actors.protocol.group.membership_operation import (
    GroupMembershipOperation,
    check_membership_operation,
    classic_sends_leave_group,
    consumer_leave_epoch,
)

S = MemberState


@pytest.mark.parametrize(
    ("operation", "instance_id", "epoch"),
    [
        ("default", None, -1),
        ("default", "static-1", -2),
        ("leave", None, -1),
        ("leave", "static-1", -1),  # a static member leaves for good: epoch -1, instance id
        ("remain", "static-1", -2),  # a static member that remains leaves for a while
    ],
)
def test_close_leave_heartbeat_epoch(
    operation: GroupMembershipOperation, instance_id: str | None, epoch: int
) -> None:
    h = Harness(instance_id=instance_id)
    h.stable_with({"a": [0, 1]}, epoch=6)
    h.m.leave_group(h.now, operation=operation)
    (revoked,) = h.of(InvokeRevoked, h.take_events())  # the partitions are released anyway
    h.m.on_callback_completed(revoked.callback_id)
    assert h.m.state is S.LEAVING
    (leave,) = h.poll().requests
    assert leave.request.member_epoch == epoch
    assert leave.request.member_id == MEMBER_ID
    assert leave.request.instance_id == instance_id
    h.events.clear()
    h.respond(leave, epoch=epoch)
    assert h.take_events() == [LeaveCompleted()]


def test_close_remain_dynamic_member_sends_no_leave_heartbeat() -> None:
    h = Harness()
    h.stable_with({"a": [0, 1]}, epoch=6)
    h.m.leave_group(h.now, operation="remain")
    events = h.take_events()
    (revoked,) = h.of(InvokeRevoked, events)  # released on the client, as Java
    h.m.on_callback_completed(revoked.callback_id)
    assert h.m.state is S.UNSUBSCRIBED
    assert LeaveCompleted() in h.take_events()
    h.advance(60_000)
    h.no_heartbeat()  # the broker keeps the member until its session times out


def test_the_next_leave_is_default_again() -> None:
    """The operation belongs to one leave: a later unsubscribe of a rejoined static member
    sends the default (temporary) leave, not the close's."""
    h = Harness(instance_id="static-1")
    h.stable_with({"a": [0]}, epoch=6)
    h.m.leave_group(h.now, operation="leave")
    (revoked,) = h.of(InvokeRevoked, h.take_events())
    h.m.on_callback_completed(revoked.callback_id)
    (leave,) = h.poll().requests
    assert leave.request.member_epoch == -1
    h.respond(leave, epoch=-1)
    h.take_events()
    h.stable_with({"a": [0]}, epoch=8)
    h.m.leave_group(h.now)
    (revoked,) = h.of(InvokeRevoked, h.take_events())
    h.m.on_callback_completed(revoked.callback_id)
    (leave,) = h.poll().requests
    assert leave.request.member_epoch == -2


@pytest.mark.parametrize(
    ("operation", "static", "classic", "epoch"),
    [
        ("default", False, True, -1),
        ("default", True, False, -2),
        ("leave", False, True, -1),
        ("leave", True, True, -1),
        ("remain", False, False, None),
        ("remain", True, False, -2),
    ],
)
def test_membership_operation_rules(
    operation: GroupMembershipOperation, static: bool, classic: bool, epoch: int | None
) -> None:
    assert classic_sends_leave_group(operation, static=static) is classic
    assert consumer_leave_epoch(operation, static=static) == epoch


@pytest.mark.parametrize("value", ["LEAVE_GROUP", "", None, 1, "leave-group"])
def test_invalid_membership_operation(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match="group membership operation"):
        check_membership_operation(value)
    with pytest.raises(ValueError):
        check_membership_operation(value)
