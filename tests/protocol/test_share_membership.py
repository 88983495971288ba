"""The share group member (pure, fake clock): join at epoch 0, heartbeats at the coordinator's
interval, the assignment by topic id resolved to names, leave at -1, fenced -> rejoin, typed
fatal errors."""

from __future__ import annotations

import datetime
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_actors.errors import (
    FencedMemberEpochError,
    GroupAuthorizationFailedError,
    NotCoordinatorError,
    ShareGroupsNotSupportedError,
    UnknownMemberIdError,
    UnsupportedVersionError,
)
from kafka_actors.protocol.group.events import (
    AssignmentChanged,
    CoordinatorUnknown,
    ErrorEvent,
    LeaveCompleted,
    NeedTopicNames,
)
from kafka_actors.protocol.messages import COORDINATOR_NODE, TopicPartition
from kafka_actors.protocol.share.membership import (
    ShareMembershipConfig,
    ShareMembershipManager,
    ShareMemberState,
)
from kafka_actors.protocol.wire.apis import ApiKey

TOPIC_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")


def _manager() -> ShareMembershipManager:
    m = ShareMembershipManager(
        ShareMembershipConfig(group_id="g", rack_id="r1"), member_id="m-1", random=lambda: 0.5
    )
    m.on_coordinator_discovered(0)
    return m


def _response(
    *,
    epoch: int = 1,
    code: int = 0,
    interval_ms: int = 2000,
    partitions: tuple[int, ...] | None = None,
) -> Any:
    assignment = None
    if partitions is not None:
        assignment = SimpleNamespace(
            topic_partitions=(SimpleNamespace(topic_id=TOPIC_ID, partitions=partitions),)
        )
    return SimpleNamespace(
        error_code=code,
        error_message=None,
        member_id="m-1",
        member_epoch=epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=interval_ms),
        assignment=assignment,
    )


def test_join_heartbeats_epoch_zero_with_topics_and_rack_then_only_changes() -> None:
    m = _manager()
    m.subscribe(["b", "a"])
    result = m.poll(0)
    (request,) = result.requests
    assert request.node == COORDINATOR_NODE
    hb = request.request
    assert int(hb.__api_key__) == ApiKey.SHARE_GROUP_HEARTBEAT
    assert (hb.group_id, hb.member_id, hb.member_epoch) == ("g", "m-1", 0)
    assert hb.subscribed_topic_names == ("a", "b")
    assert hb.rack_id == "r1"
    assert m.poll(1).requests == ()  # one in flight at a time
    m.on_response(request.request_id, _response(epoch=3, partitions=(0, 1)), 10)
    assert m.state is ShareMemberState.STABLE and m.member_epoch == 3
    events = m.poll(10).events
    assert NeedTopicNames(frozenset({str(TOPIC_ID)})) in events
    m.on_topic_names({str(TOPIC_ID): "a"})
    events = m.poll(10).events
    assert AssignmentChanged(frozenset({TopicPartition("a", 0), TopicPartition("a", 1)})) in events
    # Next heartbeat at the coordinator's interval, with the epoch, without unchanged fields.
    assert m.poll(2009).requests == ()
    assert m.poll(10).time_until_next_poll_ms == 2000
    (request,) = m.poll(2010).requests
    assert request.request.member_epoch == 3
    assert request.request.subscribed_topic_names is None
    assert request.request.rack_id is None
    # A response without an assignment keeps the assignment.
    m.on_response(request.request_id, _response(epoch=3), 2020)
    assert m.poll(2020).events == ()
    assert m.assignment == frozenset({TopicPartition("a", 0), TopicPartition("a", 1)})
    # A subscription change is sent at once.
    m.subscribe(["a", "c"])
    (request,) = m.poll(2021).requests
    assert request.request.subscribed_topic_names == ("a", "c")


@pytest.mark.parametrize("error", [FencedMemberEpochError, UnknownMemberIdError])
def test_fenced_or_unknown_member_drops_the_assignment_and_rejoins_at_epoch_zero(
    error: type,
) -> None:
    m = _manager()
    m.subscribe(["a"])
    m.on_topic_names({str(TOPIC_ID): "a"})
    (req,) = m.poll(0).requests
    m.on_response(req.request_id, _response(epoch=5, partitions=(0,)), 1)
    m.poll(1)
    (req,) = m.poll(5000).requests
    m.on_response(req.request_id, _response(code=error.code), 5001)
    result = m.poll(5001)
    assert AssignmentChanged(frozenset()) in result.events
    (rejoin,) = result.requests
    assert rejoin.request.member_epoch == 0
    assert rejoin.request.member_id == "m-1"
    assert rejoin.request.subscribed_topic_names == ("a",)


def test_not_coordinator_marks_it_unknown_and_waits_for_a_new_one() -> None:
    m = _manager()
    m.subscribe(["a"])
    (req,) = m.poll(0).requests
    m.on_response(req.request_id, _response(code=NotCoordinatorError.code), 1)
    result = m.poll(1000)
    assert CoordinatorUnknown in {type(e) for e in result.events}
    assert result.requests == ()
    m.on_coordinator_discovered(1001)
    (req,) = m.poll(1001).requests
    assert req.request.member_epoch == 0


def test_unsupported_version_is_share_groups_not_supported_and_fatal() -> None:
    m = _manager()
    m.subscribe(["a"])
    (req,) = m.poll(0).requests
    m.on_response(req.request_id, _response(code=UnsupportedVersionError.code), 1)
    (event,) = [e for e in m.poll(1).events if isinstance(e, ErrorEvent)]
    assert event.fatal and isinstance(event.error, ShareGroupsNotSupportedError)
    assert isinstance(event.error, UnsupportedVersionError)
    assert "share.version" in str(event.error)
    assert m.state is ShareMemberState.FATAL and m.poll(10_000).requests == ()


def test_a_broker_without_the_api_fails_at_once() -> None:
    m = _manager()
    m.unsupported()
    (event,) = m.poll(0).events
    assert isinstance(event, ErrorEvent) and isinstance(event.error, ShareGroupsNotSupportedError)


def test_authorization_failure_is_fatal_and_typed() -> None:
    m = _manager()
    m.subscribe(["a"])
    (req,) = m.poll(0).requests
    m.on_response(req.request_id, _response(code=GroupAuthorizationFailedError.code), 1)
    (event,) = m.poll(1).events
    assert isinstance(event, ErrorEvent) and event.fatal
    assert isinstance(event.error, GroupAuthorizationFailedError)


def test_leave_sends_epoch_minus_one_and_completes_on_the_answer() -> None:
    m = _manager()
    m.subscribe(["a"])
    m.on_topic_names({str(TOPIC_ID): "a"})
    (req,) = m.poll(0).requests
    m.on_response(req.request_id, _response(epoch=2, partitions=(0,)), 1)
    m.poll(1)
    m.leave_group(2, deadline_ms=10_000)
    result = m.poll(2)
    assert AssignmentChanged(frozenset()) in result.events
    (leave,) = result.requests
    assert leave.request.member_epoch == -1
    assert leave.request.subscribed_topic_names is None
    m.on_response(leave.request_id, _response(epoch=-1), 3)
    assert LeaveCompleted() in m.poll(3).events
    assert m.state is ShareMemberState.UNSUBSCRIBED


def test_leave_without_a_coordinator_ends_at_its_deadline() -> None:
    m = _manager()
    m.subscribe(["a"])
    (req,) = m.poll(0).requests
    m.on_response(req.request_id, _response(epoch=2), 1)
    m.on_coordinator_unknown(2)
    m.leave_group(2, deadline_ms=500)
    assert m.poll(100).requests == ()
    assert LeaveCompleted(timed_out=True) in m.poll(500).events


def test_leave_before_joining_completes_at_once() -> None:
    m = _manager()
    m.leave_group(0, deadline_ms=100)
    assert m.poll(0).events == (LeaveCompleted(),)
