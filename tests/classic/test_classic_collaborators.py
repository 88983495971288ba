"""The collaborators of the classic membership manager, each built on its own: the heartbeat
timers, the generation value, the rebalance callbacks, the owned partitions, the outbox and the
pure parts of the rebalance (JoinGroup metadata, the leader's assignment)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kafka_actors.errors import ProtocolError
from kafka_actors.protocol.group.classic.assignors import (
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_subscription,
)
from kafka_actors.protocol.group.classic.config import ClassicMembershipConfig
from kafka_actors.protocol.group.classic.heartbeat import ClassicHeartbeat
from kafka_actors.protocol.group.classic.rebalance import (
    NO_GENERATION,
    NO_GENERATION_ID,
    NO_MEMBER_ID,
    CallbackPurpose,
    Generation,
    RebalanceCallbacks,
    assign_as_leader,
    decode_member_subscriptions,
    join_protocols,
)
from kafka_actors.protocol.group.events import (
    AssignmentChanged,
    InvokeAssigned,
    InvokeLost,
    InvokeRevoked,
    PauseFetching,
    RebalanceCallback,
)
from kafka_actors.protocol.group.owned_partitions import OwnedPartitions
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.request_state import Outbox, retry_backoff

CONFIG = ClassicMembershipConfig(
    group_id="g",
    group_instance_id="i-1",
    rack_id="r1",
    session_timeout_ms=10_000,
    heartbeat_interval_ms=1_000,
    rebalance_timeout_ms=60_000,
    retry_backoff_ms=100,
    retry_backoff_max_ms=1_000,
)


def _tps(*items: tuple[str, int]) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(t, p) for t, p in items)


def _heartbeat() -> ClassicHeartbeat:
    # random() = 0.5: the jitter factor is exactly 1, the backoff is 100, 200, 400... ms.
    return ClassicHeartbeat(CONFIG, retry_backoff(CONFIG, lambda: 0.5))


# -- ClassicHeartbeat (Java's Heartbeat) ---------------------------------------------------------


def test_heartbeat_is_due_one_interval_after_reset_and_not_while_in_flight() -> None:
    heartbeat = _heartbeat()
    heartbeat.reset_timeouts(0)
    assert not heartbeat.should_heartbeat(999)
    assert heartbeat.should_heartbeat(1_000)
    heartbeat.sent_heartbeat(7, 1_000)
    assert heartbeat.in_flight and heartbeat.request_id == 7
    assert not heartbeat.should_heartbeat(5_000)  # one Heartbeat in flight at a time
    heartbeat.clear_in_flight()
    assert not heartbeat.in_flight
    assert not heartbeat.should_heartbeat(1_999)
    assert heartbeat.should_heartbeat(2_000)


def test_heartbeat_failures_back_off_exponentially_until_a_success() -> None:
    heartbeat = _heartbeat()
    heartbeat.reset_timeouts(0)
    heartbeat.fail_heartbeat(1_000)
    assert not heartbeat.should_heartbeat(1_099)
    assert heartbeat.should_heartbeat(1_100)
    heartbeat.fail_heartbeat(1_100)
    assert not heartbeat.should_heartbeat(1_299)
    assert heartbeat.should_heartbeat(1_300)
    heartbeat.receive_heartbeat(1_300)  # a success resets the backoff
    heartbeat.fail_heartbeat(1_400)
    assert heartbeat.should_heartbeat(1_500)


def test_session_timer_expires_once_and_is_pushed_back_by_responses() -> None:
    heartbeat = _heartbeat()
    assert not heartbeat.check_session_timeout(10**9)  # not armed before a reset
    heartbeat.reset_timeouts(0)
    heartbeat.receive_heartbeat(5_000)
    assert not heartbeat.check_session_timeout(14_999)
    heartbeat.reset_session_timeout(6_000)  # e.g. REBALANCE_IN_PROGRESS or a found coordinator
    assert not heartbeat.check_session_timeout(15_999)
    assert heartbeat.check_session_timeout(16_000)
    assert not heartbeat.check_session_timeout(16_001)  # disarmed until the next reset


def test_poll_timer_is_armed_by_the_application_poll() -> None:
    heartbeat = _heartbeat()
    heartbeat.reset_timeouts(0)
    assert not heartbeat.poll_timeout_expired(10**9)  # no application poll yet
    heartbeat.reset_poll_timer(1_000)
    assert not heartbeat.poll_timeout_expired(60_999)
    assert heartbeat.poll_timeout_expired(61_000)
    heartbeat.reset_timeouts(2_000)  # rejoining resets an armed poll timer
    assert not heartbeat.poll_timeout_expired(61_999)
    assert heartbeat.poll_timeout_expired(62_000)


def test_time_until_next_is_the_earliest_timer() -> None:
    heartbeat = _heartbeat()
    assert heartbeat.time_until_next_ms(0) == 0  # the heartbeat timer starts expired
    heartbeat.reset_timeouts(0)
    heartbeat.reset_poll_timer(0)
    assert heartbeat.time_until_next_ms(200) == 800
    heartbeat.sent_heartbeat(1, 1_000)
    assert heartbeat.time_until_next_ms(1_000) == 9_000  # in flight: the session timer
    assert heartbeat.time_until_next_ms(20_000) == 0


def test_heartbeat_request_carries_the_generation() -> None:
    request = _heartbeat().heartbeat_request(Generation(5, "m-1", "range"))
    assert request.group_id == "g"
    assert request.generation_id == 5
    assert request.member_id == "m-1"
    assert request.group_instance_id == "i-1"


# -- Generation ----------------------------------------------------------------------------------


def test_generation_is_a_value() -> None:
    assert NO_GENERATION == Generation(NO_GENERATION_ID, NO_MEMBER_ID, None)
    assert Generation(3, "m", "range").same_member(Generation(3, "m", None))
    assert not Generation(3, "m").same_member(Generation(4, "m"))
    assert not Generation(3, "m").same_member(Generation(3, "n"))


# -- RebalanceCallbacks --------------------------------------------------------------------------


def test_callbacks_publish_one_event_each_and_complete_by_id() -> None:
    outbox = Outbox()
    callbacks = RebalanceCallbacks(outbox)
    owner = object()
    revoked = _tps(("t", 0))
    callbacks.invoke(
        RebalanceCallback.ON_PARTITIONS_REVOKED, revoked, CallbackPurpose.PREPARE, owner
    )
    pending = callbacks.pending
    assert pending is not None and pending.owner is owner
    assert outbox.drain() == (InvokeRevoked(revoked, pending.callback_id),)
    assert callbacks.complete(pending.callback_id + 1) is None  # not the outstanding one
    assert callbacks.pending is pending
    assert callbacks.complete(pending.callback_id) is pending
    assert callbacks.pending is None
    assert callbacks.complete(pending.callback_id) is None  # completed once


def test_callbacks_carry_the_assignment_to_on_partitions_assigned() -> None:
    outbox = Outbox()
    callbacks = RebalanceCallbacks(outbox)
    added, assigned = _tps(("t", 1)), _tps(("t", 0), ("t", 1))
    callbacks.invoke(
        RebalanceCallback.ON_PARTITIONS_ASSIGNED,
        added,
        CallbackPurpose.COMPLETE_ASSIGN,
        None,
        assignment=assigned,
    )
    first = callbacks.pending
    assert first is not None
    callbacks.invoke(
        RebalanceCallback.ON_PARTITIONS_LOST, assigned, CallbackPurpose.LOST_ON_FATAL, None
    )
    second = callbacks.pending
    assert second is not None and second.callback_id == first.callback_id + 1
    assert outbox.drain() == (
        InvokeAssigned(added, assigned, first.callback_id),
        InvokeLost(assigned, second.callback_id),
    )


# -- OwnedPartitions -----------------------------------------------------------------------------


def test_owned_partitions_publish_changes_and_trim_their_subsets() -> None:
    outbox = Outbox()
    owned = OwnedPartitions(outbox)
    a, b = _tps(("t", 0)), _tps(("t", 1))
    owned.set_assignment(a | b)
    owned.set_assignment(a | b)  # unchanged: nothing published
    owned.await_callback(b)
    owned.pause_fetching(a)
    owned.pause_fetching(a)  # already pending: nothing published
    assert owned.awaiting_callback == b and owned.pending_revocation == a
    owned.set_assignment(b)
    assert owned.pending_revocation == frozenset()
    assert owned.awaiting_callback == b
    owned.callback_done(b)
    assert owned.awaiting_callback == frozenset()
    assert outbox.drain() == (
        AssignmentChanged(a | b),
        PauseFetching(a),
        AssignmentChanged(b),
    )


# -- Outbox --------------------------------------------------------------------------------------


def test_outbox_drains_in_order_and_never_reuses_an_id() -> None:
    outbox = Outbox()
    assert [outbox.new_id() for _ in range(3)] == [1, 2, 3]
    outbox.publish("a")
    outbox.publish("b")
    assert outbox.drain() == ("a", "b")
    assert outbox.drain() == ()
    assert outbox.new_id() == 4


# -- JoinGroup metadata and the leader's assignment ----------------------------------------------


def test_join_protocols_one_per_assignor_with_owned_partitions_and_generation() -> None:
    config = ClassicMembershipConfig(group_id="g", rack_id="r1", assignors=("range", "sticky"))
    owned = _tps(("a", 1), ("a", 0))
    protocols = join_protocols(
        config,
        subscription=("a", "b"),
        owned=owned,
        last_assigned=owned,
        last_assignment_generation=4,
        generation_id=4,
    )
    assert [name for name, _ in protocols] == ["range", "sticky"]
    for _, metadata in protocols:
        subscription = decode_subscription(metadata)
        assert subscription.topics == ("a", "b")
        assert subscription.owned_partitions == tuple(sorted(owned))
        assert subscription.generation_id == 4
        assert subscription.rack_id == "r1"


def _member(member_id: str, topics: tuple[str, ...], instance: str | None = None) -> object:
    metadata = encode_subscription(Subscription(topics=topics))
    return SimpleNamespace(member_id=member_id, metadata=metadata, group_instance_id=instance)


def test_leader_decodes_every_member_and_assigns_from_the_known_counts() -> None:
    subscriptions = decode_member_subscriptions(
        [_member("m-1", ("a",), "i-1"), _member("m-2", ("a", "gone"))]
    )
    assert subscriptions["m-1"].group_instance_id == "i-1"
    topics = frozenset({"a", "gone"})
    known, assignments, encoded = assign_as_leader(
        "range", subscriptions, topics, {"a": 2, "other": 9}
    )
    assert known == {"a": 2}  # topics missing from the answer are left out
    assert {m: tuple(a.partitions) for m, a in assignments.items()} == {
        "m-1": (TopicPartition("a", 0),),
        "m-2": (TopicPartition("a", 1),),
    }
    assert [member for member, _ in encoded] == ["m-1", "m-2"]
    assert [tuple(decode_assignment(data).partitions) for _, data in encoded] == [
        (TopicPartition("a", 0),),
        (TopicPartition("a", 1),),
    ]


def test_undecodable_member_metadata_raises_a_protocol_error() -> None:
    broken = SimpleNamespace(member_id="m-1", metadata=b"\x00", group_instance_id=None)
    with pytest.raises(ProtocolError):
        decode_member_subscriptions([broken])
