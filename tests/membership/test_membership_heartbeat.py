"""Joining, heartbeat timing and request fields (Java HeartbeatState: only what changed)."""

from __future__ import annotations

import datetime
import uuid

from kio.schema.consumer_group_heartbeat.v0 import request as hb_v0
from kio.schema.consumer_group_heartbeat.v1 import request as hb_v1
from membership_harness import MEMBER_ID, TOPIC_IDS, Harness, ms, tps

from kafka_actors.errors import UnsupportedVersionError
from kafka_actors.protocol.group.consumer.membership import (
    AssignmentChanged,
    ErrorEvent,
    InvokeAssigned,
    MemberEpochChanged,
    MemberState,
    NeedTopicNames,
)
from kafka_actors.protocol.messages import COORDINATOR_NODE

S = MemberState


def test_subscribe_alone_does_not_join_until_application_poll() -> None:
    h = Harness()
    h.m.subscribe(["a"])
    assert h.no_heartbeat().time_until_next_poll_ms is None
    assert h.m.state is S.UNSUBSCRIBED
    h.m.on_poll(h.now)
    assert h.m.state is S.JOINING
    assert h.heartbeat().request.member_epoch == 0


def test_first_heartbeat_is_immediate_and_full() -> None:
    h = Harness(rack_id="rack-1", rebalance_timeout_ms=45_000)
    request = h.join("b", "a")
    assert request.node == COORDINATOR_NODE
    body = request.request
    assert isinstance(body, hb_v1.ConsumerGroupHeartbeatRequest)
    assert body.group_id == "group-1"
    assert body.member_id == MEMBER_ID
    assert body.member_epoch == 0
    assert body.instance_id is None
    assert body.rack_id == "rack-1"
    assert ms(body.rebalance_timeout) == 45_000
    assert body.subscribed_topic_names == ("a", "b")
    # "" = no regex subscription, sent with the names at join (librdkafka's mock cluster
    # aborts on names with a null regex; a real broker takes "" as no regex).
    assert body.subscribed_topic_regex == ""
    assert body.server_assignor == "uniform"
    assert body.topic_partitions == ()


def test_no_heartbeat_without_coordinator() -> None:
    h = Harness(coordinator=False)
    h.m.subscribe(["a"])
    h.m.on_poll(h.now)
    assert h.no_heartbeat().time_until_next_poll_ms is None  # wait for the coordinator
    h.m.on_coordinator_discovered(h.now)
    assert h.heartbeat().request.member_epoch == 0


def test_join_assignment_callback_ack_stable() -> None:
    h = Harness()
    join = h.join("a")
    h.respond(join, epoch=3, assignment={"a": [0, 1]})
    assert h.m.state is S.RECONCILING
    assert h.m.member_epoch == 3
    events = h.take_events()
    assert MemberEpochChanged(MEMBER_ID, 3) in events
    assert h.of(NeedTopicNames, events) == [NeedTopicNames(frozenset({TOPIC_IDS["a"]}))]
    # Names unknown: the resolvable part (nothing) is reconciled and acknowledged (Java).
    (empty,) = h.of(InvokeAssigned, events)
    assert empty.partitions == frozenset()
    h.m.on_callback_completed(empty.callback_id)
    empty_ack = h.heartbeat()
    assert empty_ack.request.topic_partitions == ()
    assert h.m.state is S.RECONCILING  # the target is not reconciled yet
    h.respond(empty_ack, epoch=3)
    h.no_heartbeat()  # nothing new to acknowledge while the names are unknown

    h.names("a")
    events = h.take_events()
    assigned = h.of(InvokeAssigned, events)
    assert len(assigned) == 1
    assert assigned[0].partitions == tps(("a", 0), ("a", 1))
    assert assigned[0].assignment == tps(("a", 0), ("a", 1))
    assert h.of(AssignmentChanged, events) == [AssignmentChanged(tps(("a", 0), ("a", 1)))]
    assert events.index(h.of(AssignmentChanged, events)[0]) < events.index(assigned[0])
    assert h.m.assignment == tps(("a", 0), ("a", 1))
    assert h.m.partitions_awaiting_callback == tps(("a", 0), ("a", 1))
    assert h.m.state is S.RECONCILING
    h.no_heartbeat()  # the interval has not passed and the ack waits for the callback

    h.m.on_callback_completed(assigned[0].callback_id)
    assert h.m.state is S.ACKNOWLEDGING
    assert h.m.partitions_awaiting_callback == frozenset()
    ack = h.heartbeat().request  # at once, not at the interval
    assert h.m.state is S.STABLE  # as soon as the ack is sent (Java)
    assert ack.member_epoch == 3
    assert [(str(t.topic_id), t.partitions) for t in ack.topic_partitions] == [
        (TOPIC_IDS["a"], (0, 1))
    ]
    assert ack.subscribed_topic_names is None  # unchanged since the join
    assert ms(ack.rebalance_timeout) == -1


def test_empty_assignment_on_join_still_invokes_assigned_and_acks() -> None:
    h = Harness()
    h.respond(h.join("a"), epoch=1, assignment={})
    events = h.take_events()
    (assigned,) = h.of(InvokeAssigned, events)
    assert assigned.partitions == frozenset()
    h.m.on_callback_completed(assigned.callback_id)
    assert h.heartbeat().request.topic_partitions == ()
    assert h.m.state is S.STABLE


def test_same_assignment_again_is_not_reconciled() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    h.advance(5_000)
    h.respond(h.heartbeat(), epoch=1, assignment={"a": [0]})
    assert h.m.state is S.STABLE
    assert h.of(InvokeAssigned, h.take_events()) == []


def test_heartbeat_interval_from_response() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    h.advance(100)
    # The interval was already 5000: the next heartbeat is due 5000 after the last send.
    sent_at = h.now
    h.advance(1_000)
    h.no_heartbeat()
    h.now = sent_at + 4_899
    result = h.no_heartbeat()
    assert result.time_until_next_poll_ms == 1
    h.now = sent_at + 4_900
    hb = h.heartbeat()
    h.advance(50)
    h.respond(hb, epoch=1, interval_ms=2_000)  # changed: due 2000 after this response
    h.advance(1_999)
    assert h.no_heartbeat().time_until_next_poll_ms == 1
    h.advance(1)
    h.heartbeat()


def test_interval_unchanged_counts_from_send() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    h.advance(5_000)
    sent_at = h.now
    hb = h.heartbeat()
    h.advance(300)
    h.respond(hb, epoch=1, interval_ms=5_000)
    h.now = sent_at + 4_999
    h.no_heartbeat()
    h.now = sent_at + 5_000
    h.heartbeat()


def test_never_two_heartbeats_in_flight() -> None:
    h = Harness()
    join = h.join("a")
    for _ in range(3):
        h.advance(10_000)
        result = h.no_heartbeat()
        assert result.time_until_next_poll_ms is not None  # the poll timer only
    assert h.m.request_in_flight
    h.respond(join, epoch=1, assignment={})
    h.m.on_poll(h.now)
    events = h.take_events()
    (assigned,) = h.of(InvokeAssigned, events)
    h.m.on_callback_completed(assigned.callback_id)
    assert h.m.state is S.ACKNOWLEDGING
    h.heartbeat()
    # ACKNOWLEDGING again after a new target: still waits for the in-flight one.
    assert h.no_heartbeat().requests == ()


def test_changed_fields_only() -> None:
    h = Harness(instance_id="static-1")
    h.stable_with({"a": [0]})
    h.advance(5_000)
    body = h.heartbeat().request
    assert body.instance_id == "static-1"  # always sent
    assert body.member_epoch == 1
    assert body.subscribed_topic_names is None
    assert body.subscribed_topic_regex is None
    assert body.server_assignor is None
    assert body.topic_partitions is None
    assert body.rack_id is None
    assert ms(body.rebalance_timeout) == -1
    h.respond(h.requests[-1], epoch=1)
    h.m.subscribe(["a", "c"])
    h.advance(5_000)
    body = h.heartbeat().request
    assert body.subscribed_topic_names == ("a", "c")
    assert body.subscribed_topic_regex == ""  # with the names (see test_subscription_pair)
    assert body.topic_partitions is None
    h.respond(h.requests[-1], epoch=1)
    h.advance(5_000)
    body = h.heartbeat().request
    assert body.subscribed_topic_names is None
    assert body.subscribed_topic_regex is None


def test_full_request_after_a_failure() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    h.advance(5_000)
    h.respond(h.heartbeat(), error=14)  # COORDINATOR_LOAD_IN_PROGRESS
    h.advance(1_000)
    body = h.heartbeat().request
    assert body.member_epoch == 1
    assert body.subscribed_topic_names == ("a",)
    assert body.subscribed_topic_regex == ""
    assert ms(body.rebalance_timeout) == 300_000
    assert body.server_assignor == "uniform"
    assert [(str(t.topic_id), t.partitions) for t in body.topic_partitions] == [
        (TOPIC_IDS["a"], (0,))
    ]


def test_regex_subscription_v1() -> None:
    h = Harness()
    h.m.subscribe(regex="orders-.*")
    h.m.on_poll(h.now)
    body = h.heartbeat().request
    assert body.subscribed_topic_regex == "orders-.*"
    assert body.subscribed_topic_names == ()
    h.respond(h.requests[-1], epoch=1, assignment={})
    h.complete_all_callbacks()
    h.respond(h.ack(), epoch=1)
    # Back to names: the regex is cleared with an empty string.
    h.m.subscribe(["a"])
    h.advance(5_000)
    body = h.heartbeat().request
    assert body.subscribed_topic_regex == ""
    assert body.subscribed_topic_names == ("a",)


def test_subscription_pair() -> None:
    # Topic names and regex go together or not at all (librdkafka's way): librdkafka's mock
    # cluster aborts the process on a heartbeat with one of them null and the other not
    # (Java sends only the changed one; a broker takes both alike).
    h = Harness()
    h.stable_with({"a": [0]})
    for change in ("failure", "names", "regex", "names again"):
        h.advance(5_000)
        if change == "failure":
            h.respond(h.heartbeat(), error=14)  # COORDINATOR_LOAD_IN_PROGRESS
            h.advance(1_000)
        elif change == "names":
            h.m.subscribe(["a", "b"])
        elif change == "regex":
            h.m.subscribe(regex="a.*")
        else:
            h.m.subscribe(["a"])
        body = h.heartbeat().request
        assert (body.subscribed_topic_names is None) == (body.subscribed_topic_regex is None)
        assert body.subscribed_topic_names is not None, change
        if change == "regex":
            assert (body.subscribed_topic_names, body.subscribed_topic_regex) == ((), "a.*")
        else:
            assert body.subscribed_topic_regex == ""
        h.respond(h.requests[-1], epoch=1)
        h.advance(5_000)
        body = h.heartbeat().request
        assert body.subscribed_topic_names is None and body.subscribed_topic_regex is None
        h.respond(h.requests[-1], epoch=1)


def test_regex_needs_version_1() -> None:
    h = Harness(version=0)
    h.m.subscribe(regex="orders-.*")
    h.m.on_poll(h.now)
    result = h.poll()
    assert result.requests == ()
    assert h.m.state is S.FATAL
    (error,) = h.of(ErrorEvent, list(result.events))
    assert error.fatal
    assert isinstance(error.error, UnsupportedVersionError)


def test_version_0_request_and_member_id_from_coordinator() -> None:
    h = Harness(version=0)
    body = h.join("a").request
    assert isinstance(body, hb_v0.ConsumerGroupHeartbeatRequest)
    assert body.member_id == MEMBER_ID
    h.respond(h.requests[-1], epoch=1, member_id="coordinator-chosen", assignment={})
    assert h.m.member_id == "coordinator-chosen"
    h.complete_all_callbacks()
    assert h.ack().request.member_id == "coordinator-chosen"


def test_owned_partitions_grouped_by_topic_id() -> None:
    h = Harness()
    h.stable_with({"a": [2, 0], "b": [1]})
    assert h.m.current_assignment.by_topic() == {TOPIC_IDS["a"]: (0, 2), TOPIC_IDS["b"]: (1,)}
    ack = h.requests[-1].request
    assert {(t.topic_id, t.partitions) for t in ack.topic_partitions} == {
        (uuid.UUID(TOPIC_IDS["a"]), (0, 2)),
        (uuid.UUID(TOPIC_IDS["b"]), (1,)),
    }


def test_rebalance_timeout_is_a_timedelta_field() -> None:
    body = Harness(rebalance_timeout_ms=1_234).join("a").request
    assert body.rebalance_timeout == datetime.timedelta(milliseconds=1_234)
