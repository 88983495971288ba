"""Classic membership: close(membership=...) (KIP-1092) decides whether LeaveGroup is sent, and
enforce_rebalance() rejoins with its reason (KIP-800)."""

from __future__ import annotations

import pytest
from kio.schema.join_group.v9 import request as join_req
from kio.schema.leave_group.v5 import request as leave_req
from kio.schema.sync_group.v5 import request as sync_req

from kafka_actors.protocol.group.classic.membership import ClassicMemberState
from kafka_actors.protocol.group.consumer.membership import InvokeRevoked, LeaveCompleted
from kafka_actors.protocol.group.membership_operation import GroupMembershipOperation

from .classic_harness import Driver, join_response, leave_response, sync_response, tps

OWNED = tps(("a", 0), ("a", 1))


def _release(d: Driver, operation: GroupMembershipOperation) -> None:
    d.m.leave_group(d.now, operation=operation)
    d.none()
    (revoked,) = d.of(InvokeRevoked)  # released in every case
    assert revoked.partitions == OWNED
    d.m.on_callback_completed(revoked.callback_id)


@pytest.mark.parametrize(
    ("operation", "instance_id"),
    [("default", None), ("leave", None), ("leave", "instance-1")],
)
def test_leave_group_sent(operation: GroupMembershipOperation, instance_id: str | None) -> None:
    d = Driver(group_instance_id=instance_id, leave_group_version=5)
    d.stable_follower(OWNED, member_id="m-1")
    _release(d, operation)
    leave = d.one(leave_req.LeaveGroupRequest)
    (member,) = leave.request.members
    # A static member leaves with its identity (LeaveGroup v3+): member id and instance id.
    assert (member.member_id, member.group_instance_id) == ("m-1", instance_id)
    assert not d.of(LeaveCompleted)
    d.respond(leave, leave_response(members=["m-1"]))
    d.poll()
    assert d.of(LeaveCompleted) == [LeaveCompleted()]


@pytest.mark.parametrize(
    ("operation", "instance_id"),
    [("default", "instance-1"), ("remain", None), ("remain", "instance-1")],
)
def test_no_leave_group(operation: GroupMembershipOperation, instance_id: str | None) -> None:
    d = Driver(group_instance_id=instance_id)
    d.stable_follower(OWNED, member_id="m-1")
    _release(d, operation)
    d.none()  # no LeaveGroup: the member stays until its session times out
    assert d.of(LeaveCompleted) == [LeaveCompleted()]
    assert d.m.assignment == frozenset()
    assert d.state() is ClassicMemberState.UNJOINED


def test_enforce_rebalance_rejoins_with_the_reason() -> None:
    d = Driver()
    d.stable_follower(OWNED, member_id="m-1", generation=3)
    d.m.enforce_rebalance("resize the worker pool")
    d.none()  # the rejoin waits for the application's poll
    d.m.on_poll(d.now)
    d.complete_callbacks()  # range is eager: onPartitionsRevoked before the JoinGroup
    join = d.one(join_req.JoinGroupRequest)
    assert join.request.member_id == "m-1"
    assert join.request.reason == "resize the worker pool"
    d.respond(join, join_response(generation=4, member_id="m-1"))
    sync = d.one(sync_req.SyncGroupRequest)
    d.respond(sync, sync_response(OWNED))
    d.complete_callbacks()
    assert d.state() is ClassicMemberState.STABLE
    assert d.m.generation.generation_id == 4


def test_enforce_rebalance_is_ignored_while_leaving() -> None:
    d = Driver(group_instance_id="instance-1")
    d.stable_follower(OWNED, member_id="m-1")
    d.m.leave_group(d.now)
    d.m.enforce_rebalance("too late")
    d.none()
    (revoked,) = d.of(InvokeRevoked)
    d.m.on_callback_completed(revoked.callback_id)
    d.m.on_poll(d.now)
    d.none()  # left: no JoinGroup
