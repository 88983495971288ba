"""Classic membership: heartbeats, session and poll timers, static membership, leaving, and the
rule that every rebalance callback completes before the next phase starts."""

from __future__ import annotations

from kio.schema.heartbeat.v4 import request as hb_req
from kio.schema.join_group.v9 import request as join_req
from kio.schema.leave_group.v5 import request as leave_req
from kio.schema.sync_group.v5 import request as sync_req

from kafka_actors.errors import DisconnectedError, KafkaError
from kafka_actors.protocol.group.classic.assignors import (
    Subscription,
    decode_subscription,
    encode_subscription,
)
from kafka_actors.protocol.group.classic.membership import ClassicMemberState, NeedPartitionCounts
from kafka_actors.protocol.group.consumer.membership import (
    CoordinatorUnknown,
    InvokeAssigned,
    InvokeLost,
    InvokeRevoked,
    LeaveCompleted,
    MemberEpochChanged,
    PauseFetching,
)

from .classic_harness import (
    Driver,
    heartbeat_response,
    join_response,
    leave_response,
    sync_response,
    tp,
    tps,
)

OWNED = tps(("a", 0), ("a", 1))


def test_heartbeat_cadence_is_independent_of_application_polls() -> None:
    d = Driver(heartbeat_interval_ms=3_000, session_timeout_ms=10_000, rebalance_timeout_ms=600_000)
    d.stable_follower(OWNED)  # joined at t=0: first heartbeat due at 3000
    sent_at: list[int] = []
    for _ in range(40):  # 20 s of background polls, no application poll
        d.advance(500)
        for request in d.requests():
            assert isinstance(request.request, hb_req.HeartbeatRequest)
            assert request.request.generation_id == 1 and request.request.member_id == "m-1"
            sent_at.append(d.now)
            d.respond(request, heartbeat_response())
    assert sent_at == [3_000, 6_000, 9_000, 12_000, 15_000, 18_000]
    assert d.state() is ClassicMemberState.STABLE


def test_one_heartbeat_in_flight_and_next_due_time() -> None:
    d = Driver(heartbeat_interval_ms=3_000, rebalance_timeout_ms=600_000)
    d.stable_follower(OWNED)
    assert d.last is not None and d.last.time_until_next_poll_ms == 3_000
    d.advance(3_000)
    hb = d.one(hb_req.HeartbeatRequest)
    d.advance(4_000)
    d.none()  # still in flight: no second heartbeat
    d.respond(hb, heartbeat_response())
    d.one(hb_req.HeartbeatRequest)  # overdue since 6000


def test_heartbeat_failure_retries_after_backoff() -> None:
    d = Driver(heartbeat_interval_ms=3_000, retry_backoff_ms=100, rebalance_timeout_ms=600_000)
    d.stable_follower(OWNED)
    d.advance(3_000)
    hb = d.one(hb_req.HeartbeatRequest)
    d.fail(hb, KafkaError("boom"))
    d.none()
    d.advance(150)  # backoff 100 ms +-20%, not the interval
    d.one(hb_req.HeartbeatRequest)


def test_heartbeats_during_completing_rebalance() -> None:
    d = Driver(heartbeat_interval_ms=3_000, rebalance_timeout_ms=600_000)
    join = d.join_request("a")
    mine = join.request.protocols[0].metadata
    d.respond(join, join_response(member_id="m-1", leader="m-1", members=[("m-1", None, mine)]))
    d.none()  # waits for partition counts, COMPLETING_REBALANCE
    assert d.state() is ClassicMemberState.COMPLETING_REBALANCE
    d.advance(3_000)
    d.one(hb_req.HeartbeatRequest)


def test_no_heartbeat_while_preparing_rebalance() -> None:
    d = Driver(heartbeat_interval_ms=3_000, rebalance_timeout_ms=600_000)
    d.join_request("a")
    d.advance(30_000)
    d.none()  # the JoinGroup is still held by the coordinator


def test_session_timeout_marks_coordinator_unknown() -> None:
    d = Driver(heartbeat_interval_ms=3_000, session_timeout_ms=10_000, rebalance_timeout_ms=600_000)
    d.stable_follower(OWNED)
    d.advance(3_000)
    hb = d.one(hb_req.HeartbeatRequest)  # never answered
    d.advance(6_999)
    d.none()
    assert not d.of(CoordinatorUnknown)
    d.advance(1)
    d.none()
    (unknown,) = d.of(CoordinatorUnknown)
    assert "session timed out" in unknown.reason
    assert not d.m.coordinator_known
    # Still a member: it heartbeats again once the coordinator is found (the network fails
    # the unanswered heartbeat first).
    d.fail(hb, DisconnectedError("gone", node=1))
    d.m.on_coordinator_discovered(d.now)
    d.advance(200)
    d.one(hb_req.HeartbeatRequest)
    assert d.state() is ClassicMemberState.STABLE


def _keep_alive_until(d: Driver, end_ms: int) -> None:
    while d.now < end_ms:
        d.advance(1_000)
        for request in d.requests():
            if isinstance(request.request, hb_req.HeartbeatRequest):
                d.respond(request, heartbeat_response())
            else:
                d.unclaimed.append(request)
                return


def test_poll_timer_expiry_leaves_and_rejoins_on_next_poll() -> None:
    d = Driver(heartbeat_interval_ms=3_000, rebalance_timeout_ms=60_000)
    d.stable_follower(OWNED)  # application polled at t=0
    d.events.clear()
    _keep_alive_until(d, 60_000)
    leave = d.one(leave_req.LeaveGroupRequest)
    assert [m.member_id for m in leave.request.members] == ["m-1"]
    assert leave.request.members[0].reason == "consumer poll timeout has expired."
    assert d.state() is ClassicMemberState.UNJOINED
    assert d.m.member_id == "" and d.m.generation_id == -1
    assert MemberEpochChanged("", None) in d.events
    d.respond(leave, leave_response(members=["m-1"]))
    assert not d.of(LeaveCompleted)  # not a user's leave
    d.advance(30_000)
    d.none()  # no heartbeat, no join until the application polls
    d.m.on_poll(d.now)
    d.poll()
    (lost,) = d.of(InvokeLost)
    assert lost.partitions == OWNED
    d.none()  # the join waits for onPartitionsLost
    d.m.on_callback_completed(lost.callback_id)
    join = d.one(join_req.JoinGroupRequest)
    assert join.request.member_id == ""


def test_static_member_poll_timer_expiry_sends_no_leave() -> None:
    d = Driver(
        group_instance_id="instance-1", heartbeat_interval_ms=3_000, rebalance_timeout_ms=60_000
    )
    d.stable_follower(OWNED, member_id="s-1")
    _keep_alive_until(d, 70_000)
    d.none()
    assert d.state() is ClassicMemberState.UNJOINED and d.m.member_id == ""
    d.m.on_poll(d.now)
    d.complete_callbacks()
    assert d.of(InvokeLost)[0].partitions == OWNED
    join = d.one(join_req.JoinGroupRequest)
    assert join.request.group_instance_id == "instance-1" and join.request.member_id == ""


def test_static_member_leave_revokes_but_sends_no_leave_group() -> None:
    d = Driver(group_instance_id="instance-1")
    d.stable_follower(OWNED, member_id="s-1")
    d.m.leave_group(d.now)
    d.none()
    (revoked,) = d.of(InvokeRevoked)
    assert revoked.partitions == OWNED
    assert not d.of(LeaveCompleted)
    d.m.on_callback_completed(revoked.callback_id)
    d.none()  # no LeaveGroup for a static member
    assert d.of(LeaveCompleted) == [LeaveCompleted()]
    assert d.m.assignment == frozenset()
    assert d.state() is ClassicMemberState.UNJOINED


def test_dynamic_member_leave_revokes_then_sends_leave_group() -> None:
    d = Driver(leave_group_version=5)
    d.stable_follower(OWNED)
    d.m.leave_group(d.now)
    result = d.none()
    kinds = [type(e) for e in result.events if isinstance(e, (PauseFetching, InvokeRevoked))]
    assert kinds == [PauseFetching, InvokeRevoked]
    (revoked,) = d.of(InvokeRevoked)
    d.advance(100)
    d.none()  # LeaveGroup waits for onPartitionsRevoked
    d.m.on_callback_completed(revoked.callback_id)
    leave = d.one(leave_req.LeaveGroupRequest)
    (member,) = leave.request.members
    assert (member.member_id, member.group_instance_id) == ("m-1", None)
    assert not d.of(LeaveCompleted)
    d.respond(leave, leave_response(members=["m-1"]))
    d.poll()
    assert d.of(LeaveCompleted) == [LeaveCompleted()]
    d.advance(30_000)
    d.none()  # left: no heartbeats


def test_leave_during_rebalance_releases_as_lost_and_ignores_late_join_response() -> None:
    d = Driver(assignors=("cooperative-sticky",))
    d.stable_follower(OWNED, protocol="cooperative-sticky")
    d.m.subscribe(["a", "b"])
    d.m.on_poll(d.now)
    d.complete_callbacks()
    join = d.one(join_req.JoinGroupRequest)
    d.m.leave_group(d.now)
    d.poll()
    (lost,) = d.of(InvokeLost)  # a rebalance is in progress: lost, as Java
    assert lost.partitions == OWNED
    d.m.on_callback_completed(lost.callback_id)
    leave = d.one(leave_req.LeaveGroupRequest)
    d.respond(join, join_response(generation=2, member_id="m-1", protocol="cooperative-sticky"))
    d.none()  # the late JoinGroup response starts nothing
    assert d.state() is ClassicMemberState.UNJOINED
    d.respond(leave, leave_response(members=["m-1"]))
    d.poll()
    assert d.of(LeaveCompleted) == [LeaveCompleted()]


def test_leave_deadline_when_the_callback_never_completes() -> None:
    d = Driver()
    d.stable_follower(OWNED)
    d.m.leave_group(d.now, deadline_ms=d.now + 2_000)
    d.none()
    assert d.of(InvokeRevoked)
    d.advance(1_999)
    d.none()
    d.advance(1)
    leave = d.one(leave_req.LeaveGroupRequest)  # best effort
    assert d.of(LeaveCompleted) == [LeaveCompleted(timed_out=True)]
    assert d.m.assignment == frozenset()
    d.respond(leave, leave_response(members=["m-1"]))
    d.poll()
    assert d.of(LeaveCompleted) == [LeaveCompleted(timed_out=True)]


def test_leave_when_not_in_group_completes_at_once() -> None:
    d = Driver()
    d.m.leave_group(d.now)
    d.none()
    assert d.of(LeaveCompleted) == [LeaveCompleted()]


def test_cooperative_callbacks_complete_before_the_next_phase() -> None:
    d = Driver(assignors=("cooperative-sticky",))
    d.stable_follower(OWNED, protocol="cooperative-sticky")
    d.m.subscribe(["a"])
    # The coordinator starts a rebalance; this member loses a-1 to another member.
    d.advance(3_000)
    d.respond(d.one(hb_req.HeartbeatRequest), heartbeat_response(27))
    d.m.on_poll(d.now)
    join = d.one(join_req.JoinGroupRequest)
    d.respond(join, join_response(generation=2, member_id="m-1", protocol="cooperative-sticky"))
    sync = d.one(sync_req.SyncGroupRequest)
    d.respond(sync, sync_response([tp("a", 0)], protocol="cooperative-sticky"))
    d.none()
    (revoked,) = d.of(InvokeRevoked)
    assert revoked.partitions == tps(("a", 1))
    assert not d.of(InvokeAssigned)  # not before onPartitionsRevoked completed
    assert d.m.assignment == OWNED and d.m.partitions_pending_revocation == tps(("a", 1))
    d.advance(100)
    d.none()
    d.m.on_callback_completed(revoked.callback_id)
    d.none()  # the second round waits for onPartitionsAssigned
    (assigned,) = d.of(InvokeAssigned)
    assert assigned.partitions == frozenset() and assigned.assignment == tps(("a", 0))
    assert d.m.assignment == tps(("a", 0))
    d.m.on_callback_completed(assigned.callback_id)
    join = d.one(join_req.JoinGroupRequest)  # second round, no application poll needed
    sub = decode_subscription(join.request.protocols[0].metadata)
    assert sub.owned_partitions == (tp("a", 0),) and sub.generation_id == 2


def test_leader_subscription_metadata_from_other_members_is_used() -> None:
    # A follower's subscription to a topic the leader does not subscribe to: still assigned.
    d = Driver(assignors=("roundrobin",))
    join = d.join_request("a")
    mine = join.request.protocols[0].metadata
    other = encode_subscription(Subscription(topics=("b",)))
    d.respond(
        join,
        join_response(
            member_id="m-1",
            leader="m-1",
            protocol="roundrobin",
            members=[("m-1", None, mine), ("m-2", "static-2", other)],
        ),
    )
    d.poll()
    (need,) = d.of(NeedPartitionCounts)
    d.m.on_partition_counts(need.request_id, {"a": 1, "b": 2})
    sync = d.one(sync_req.SyncGroupRequest)
    assert {a.member_id for a in sync.request.assignments} == {"m-1", "m-2"}


def test_a_failing_callback_does_not_stop_the_rebalance() -> None:
    d = Driver()
    d.stable_follower(OWNED)
    d.m.subscribe(["a", "b"])
    d.m.on_poll(d.now)
    d.poll()
    (revoked,) = d.of(InvokeRevoked)
    d.m.on_callback_completed(revoked.callback_id, RuntimeError("listener failed"))
    join = d.one(join_req.JoinGroupRequest)  # as Java: the error is the facade's to report
    assert d.m.assignment == frozenset()
    d.respond(join, join_response(generation=2, member_id="m-1"))
    d.respond(d.one(sync_req.SyncGroupRequest), sync_response([tp("b", 0)]))
    d.poll()
    (assigned,) = d.of(InvokeAssigned)
    d.m.on_callback_completed(assigned.callback_id, RuntimeError("listener failed again"))
    d.none()
    assert d.state() is ClassicMemberState.STABLE and d.m.assignment == tps(("b", 0))
    assert d.m.partitions_awaiting_callback == frozenset()
