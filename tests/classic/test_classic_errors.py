"""Classic membership: error paths of JoinGroup, SyncGroup and Heartbeat."""

from __future__ import annotations

import pytest
from kio.schema.heartbeat.v4 import request as hb_req
from kio.schema.join_group.v9 import request as join_req
from kio.schema.sync_group.v5 import request as sync_req

from kafka_actors.errors import (
    DisconnectedError,
    FencedInstanceIdError,
    GroupAuthorizationFailedError,
    GroupMaxSizeReachedError,
    InconsistentGroupProtocolError,
    UnsupportedVersionError,
)
from kafka_actors.protocol.group.classic.assignors import decode_subscription
from kafka_actors.protocol.group.classic.membership import ClassicMemberState
from kafka_actors.protocol.group.consumer.membership import (
    CommitBeforeRevocation,
    CoordinatorUnknown,
    ErrorEvent,
    InvokeAssigned,
    InvokeLost,
    InvokeRevoked,
    MemberEpochChanged,
)

from .classic_harness import (
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    GROUP_AUTHORIZATION_FAILED,
    GROUP_MAX_SIZE_REACHED,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    NOT_COORDINATOR,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    UNSUPPORTED_VERSION,
    Driver,
    heartbeat_response,
    join_response,
    sync_response,
    tp,
    tps,
)

OWNED = tps(("a", 0), ("a", 1))


def _heartbeat(d: Driver) -> object:
    d.advance(3_000)
    return d.one(hb_req.HeartbeatRequest)


@pytest.mark.parametrize(
    ("code", "member_id_after"), [(ILLEGAL_GENERATION, "m-1"), (UNKNOWN_MEMBER_ID, "")]
)
def test_heartbeat_generation_errors_reset_and_lose_partitions(
    code: int, member_id_after: str
) -> None:
    d = Driver(auto_commit_enabled=True)
    d.stable_follower(OWNED)
    hb = _heartbeat(d)
    d.respond(hb, heartbeat_response(code))  # type: ignore[arg-type]
    events = d.take()
    assert d.state() is ClassicMemberState.UNJOINED
    assert d.m.generation_id == -1 and d.m.member_id == member_id_after
    assert MemberEpochChanged(member_id_after, None) in events
    assert d.m.assignment == OWNED  # released at the next rebalance, as lost
    d.advance(3_000)
    d.none()  # not in the group: no heartbeat, and no join before the application polls
    d.m.on_poll(d.now)
    result = d.none()
    assert not [e for e in result.events if isinstance(e, CommitBeforeRevocation)]
    (lost,) = [e for e in result.events if isinstance(e, InvokeLost)]
    assert lost.partitions == OWNED
    d.m.on_callback_completed(lost.callback_id)
    join = d.one(join_req.JoinGroupRequest)
    assert join.request.member_id == member_id_after
    sub = decode_subscription(join.request.protocols[0].metadata)
    assert sub.owned_partitions == () and sub.generation_id == -1
    assert d.m.assignment == frozenset()


def test_heartbeat_error_of_an_older_generation_is_ignored() -> None:
    d = Driver(heartbeat_interval_ms=3_000)
    d.stable_follower([tp("a", 0)])
    hb = _heartbeat(d)  # in flight with generation 1
    d.m.subscribe(["a", "b"])
    d.m.on_poll(d.now)
    d.complete_callbacks()
    join = d.one(join_req.JoinGroupRequest)
    d.respond(join, join_response(generation=2, member_id="m-1"))
    d.respond(hb, heartbeat_response(ILLEGAL_GENERATION))  # type: ignore[arg-type]
    assert d.m.generation_id == 2
    assert d.state() is ClassicMemberState.COMPLETING_REBALANCE
    d.one(sync_req.SyncGroupRequest)


def test_heartbeat_fenced_instance_id_is_fatal() -> None:
    d = Driver(group_instance_id="instance-1")
    d.stable_follower(OWNED)
    hb = _heartbeat(d)
    d.respond(hb, heartbeat_response(FENCED_INSTANCE_ID))  # type: ignore[arg-type]
    result = d.none()
    (error,) = [e for e in result.events if isinstance(e, ErrorEvent)]
    assert error.fatal and isinstance(error.error, FencedInstanceIdError)
    (lost,) = [e for e in result.events if isinstance(e, InvokeLost)]
    assert lost.partitions == OWNED
    d.m.on_callback_completed(lost.callback_id)
    assert d.state() is ClassicMemberState.FATAL and d.m.assignment == frozenset()
    d.m.on_poll(d.now)
    d.advance(60_000)
    d.none()


def test_heartbeat_rebalance_in_progress_keeps_cooperative_assignment() -> None:
    d = Driver(assignors=("cooperative-sticky",), auto_commit_enabled=True)
    d.stable_follower(OWNED, protocol="cooperative-sticky")
    hb = _heartbeat(d)
    d.respond(hb, heartbeat_response(REBALANCE_IN_PROGRESS))  # type: ignore[arg-type]
    d.m.on_poll(d.now)
    handled = d.complete_callbacks()
    # Auto-commit before the rebalance, but nothing revoked: the subscription did not change.
    assert [type(e) for e in handled] == [CommitBeforeRevocation]
    assert handled[0].partitions == frozenset()
    join = d.one(join_req.JoinGroupRequest)
    sub = decode_subscription(join.request.protocols[0].metadata)
    assert set(sub.owned_partitions) == OWNED and sub.generation_id == 1
    assert d.m.assignment == OWNED


@pytest.mark.parametrize("code", [COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR])
def test_heartbeat_coordinator_errors(code: int) -> None:
    d = Driver()
    d.stable_follower(OWNED)
    hb = _heartbeat(d)
    d.respond(hb, heartbeat_response(code))  # type: ignore[arg-type]
    d.poll()
    assert d.of(CoordinatorUnknown)
    d.advance(10_000)
    d.none()  # no heartbeat without a coordinator
    d.m.on_coordinator_discovered(d.now)
    d.one(hb_req.HeartbeatRequest)
    assert d.state() is ClassicMemberState.STABLE


@pytest.mark.parametrize(
    ("code", "error_type"),
    [
        (GROUP_AUTHORIZATION_FAILED, GroupAuthorizationFailedError),
        (INCONSISTENT_GROUP_PROTOCOL, InconsistentGroupProtocolError),
        (GROUP_MAX_SIZE_REACHED, GroupMaxSizeReachedError),
        (UNSUPPORTED_VERSION, UnsupportedVersionError),
        (FENCED_INSTANCE_ID, FencedInstanceIdError),
    ],
)
def test_join_group_fatal_errors(code: int, error_type: type) -> None:
    d = Driver()
    join = d.join_request("a")
    d.respond(join, join_response(error=code, generation=-1, member_id=""))
    result = d.none()
    (error,) = [e for e in result.events if isinstance(e, ErrorEvent)]
    assert error.fatal and isinstance(error.error, error_type)
    assert d.state() is ClassicMemberState.FATAL
    d.m.on_poll(d.now)
    d.advance(10_000)
    d.none()


def test_join_group_coordinator_error_waits_for_rediscovery_and_backoff() -> None:
    d = Driver(retry_backoff_ms=100, retry_backoff_max_ms=1_000)
    join = d.join_request("a")
    d.respond(join, join_response(error=COORDINATOR_NOT_AVAILABLE, generation=-1, member_id=""))
    d.poll()
    assert d.of(CoordinatorUnknown)
    assert not d.m.coordinator_known
    d.none()
    d.m.on_coordinator_discovered(d.now)
    d.none()  # backoff (100 ms +-20%)
    assert d.last is not None and d.last.time_until_next_poll_ms is not None
    assert 80 <= d.last.time_until_next_poll_ms <= 120
    d.advance(120)
    d.one(join_req.JoinGroupRequest)


def test_join_group_disconnect_marks_coordinator_unknown_and_retries() -> None:
    d = Driver()
    join = d.join_request("a")
    d.fail(join, DisconnectedError("connection lost", node=1))
    d.poll()
    assert d.of(CoordinatorUnknown)
    d.m.on_coordinator_discovered(d.now)
    d.advance(200)
    d.one(join_req.JoinGroupRequest)


def test_static_member_unknown_member_id_on_join_retries_with_empty_member_id() -> None:
    d = Driver(group_instance_id="instance-1", assignors=("cooperative-sticky",))
    join = d.join_request("a")
    assert join.request.group_instance_id == "instance-1"
    d.respond(
        join,
        join_response(generation=5, member_id="s-1", protocol="cooperative-sticky"),
    )
    d.respond(
        d.one(sync_req.SyncGroupRequest),
        sync_response([tp("a", 0)], protocol="cooperative-sticky"),
    )
    d.complete_callbacks()
    d.m.subscribe(["a", "b"])
    d.m.on_poll(d.now)
    d.complete_callbacks()
    join = d.one(join_req.JoinGroupRequest)
    assert join.request.member_id == "s-1"
    d.respond(join, join_response(error=UNKNOWN_MEMBER_ID, generation=-1, member_id=""))
    assert not d.of(ErrorEvent)
    assert d.m.member_id == "" and d.m.generation_id == -1
    # the join prepare runs again: the owned partition is lost
    d.poll()
    (lost,) = d.of(InvokeLost)
    assert lost.partitions == tps(("a", 0))
    d.m.on_callback_completed(lost.callback_id)
    again = d.one(join_req.JoinGroupRequest)
    assert again.request.member_id == "" and again.request.group_instance_id == "instance-1"


def test_sync_group_rebalance_in_progress_rejoins_at_once_without_callbacks() -> None:
    d = Driver(assignors=("cooperative-sticky",))
    d.stable_follower(OWNED, protocol="cooperative-sticky")
    d.m.subscribe(["a", "b"])
    d.m.on_poll(d.now)
    d.complete_callbacks()
    join = d.one(join_req.JoinGroupRequest)
    d.respond(join, join_response(generation=2, member_id="m-1", protocol="cooperative-sticky"))
    sync = d.one(sync_req.SyncGroupRequest)
    d.events.clear()
    d.respond(sync, sync_response(error=REBALANCE_IN_PROGRESS, protocol="cooperative-sticky"))
    join = d.one(join_req.JoinGroupRequest)
    assert not d.of(InvokeRevoked) and not d.of(InvokeLost) and not d.of(InvokeAssigned)
    assert set(decode_subscription(join.request.protocols[0].metadata).owned_partitions) == OWNED


@pytest.mark.parametrize(
    ("code", "member_id_after"), [(ILLEGAL_GENERATION, "m-1"), (UNKNOWN_MEMBER_ID, "")]
)
def test_sync_group_generation_errors_reset_and_rejoin(code: int, member_id_after: str) -> None:
    d = Driver()
    join = d.join_request("a")
    d.respond(join, join_response(generation=4, member_id="m-1"))
    sync = d.one(sync_req.SyncGroupRequest)
    d.respond(sync, sync_response(error=code))
    assert d.state() is ClassicMemberState.UNJOINED
    assert d.m.generation_id == -1 and d.m.member_id == member_id_after
    again = d.one(join_req.JoinGroupRequest)  # at once, within the same rebalance
    assert again.request.member_id == member_id_after


def test_sync_group_protocol_name_mismatch_is_fatal() -> None:
    d = Driver()
    join = d.join_request("a")
    d.respond(join, join_response(member_id="m-1", protocol="range"))
    sync = d.one(sync_req.SyncGroupRequest)
    d.respond(sync, sync_response([tp("a", 0)], protocol="roundrobin"))
    d.poll()
    (error,) = d.of(ErrorEvent)
    assert error.fatal and isinstance(error.error, InconsistentGroupProtocolError)
    assert d.state() is ClassicMemberState.FATAL
    assert d.m.assignment == frozenset()


def test_join_group_protocol_type_mismatch_is_fatal() -> None:
    d = Driver()
    join = d.join_request("a")
    d.respond(join, join_response(member_id="m-1", protocol_type="connect"))
    d.poll()
    (error,) = d.of(ErrorEvent)
    assert isinstance(error.error, InconsistentGroupProtocolError)
    assert d.state() is ClassicMemberState.FATAL


def test_sync_group_coordinator_error_rejoins_after_rediscovery() -> None:
    d = Driver()
    join = d.join_request("a")
    d.respond(join, join_response(member_id="m-1"))
    sync = d.one(sync_req.SyncGroupRequest)
    d.respond(sync, sync_response(error=NOT_COORDINATOR))
    d.poll()
    assert d.of(CoordinatorUnknown)
    d.none()
    d.m.on_coordinator_discovered(d.now)
    d.advance(200)
    again = d.one(join_req.JoinGroupRequest)
    assert again.request.member_id == "m-1"
