"""The KIP-848 member's collaborators, each built on its own: the heartbeat's request state
(Java HeartbeatRequestState), its request fields (HeartbeatState), the heartbeat request manager
with a stand-in member, and the reconciler (which returns transitions, never makes them)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from kio.schema.consumer_group_heartbeat.v1 import response as hb_resp
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta
from membership_harness import NAMES_BY_ID, TOPIC_IDS, tps

from kafka_actors.errors import KafkaError
from kafka_actors.log import get_logger
from kafka_actors.protocol.group.consumer.config import MembershipConfig
from kafka_actors.protocol.group.consumer.heartbeat import (
    ConsumerHeartbeatRequestManager,
    HeartbeatRequestState,
    HeartbeatState,
)
from kafka_actors.protocol.group.consumer.reconciliation import (
    NONE_ASSIGNMENT,
    AssignmentReconciler,
    LocalAssignment,
)
from kafka_actors.protocol.group.consumer.states import MemberState
from kafka_actors.protocol.group.events import CoordinatorUnknown
from kafka_actors.protocol.request_state import retry_backoff

S = MemberState
CONFIG = MembershipConfig(group_id="g", server_assignor="uniform", rebalance_timeout_ms=45_000)


@dataclass
class FakeMember:
    """A stand-in for the member the heartbeat request manager holds: records what it is asked."""

    state: MemberState = S.JOINING
    member_id: str = "m-1"
    member_epoch: int = 0
    current_assignment: LocalAssignment = NONE_ASSIGNMENT
    subscription: tuple[str, ...] = ("a",)
    subscribed_regex: str | None = None
    leave_in_progress: bool = False
    leaving_due_to_poll_timer: bool = False
    log: Any = field(default_factory=lambda: get_logger("test"))
    asked: list[str] = field(default_factory=list)
    published: list[Any] = field(default_factory=list)
    next_id: int = 0

    def poll_timer_expired(self, now_ms: int) -> bool:
        return False

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def publish(self, event: Any) -> None:
        self.published.append(event)

    def on_heartbeat_request_generated(self) -> None:
        self.asked.append("generated")

    def on_heartbeat_request_skipped(self) -> None:
        self.asked.append("skipped")

    def on_heartbeat_success(self, response: Any) -> None:
        self.asked.append(f"success epoch {int(response.member_epoch)}")

    def transition_to_sending_leave_group(self, *, due_to_expired_poll_timer: bool) -> None:
        self.asked.append("leave")

    def transition_to_fenced(self) -> None:
        self.asked.append("fenced")

    def transition_to_fatal(
        self, error: KafkaError, *, consumer_protocol_unsupported: bool = False
    ) -> None:
        self.asked.append(f"fatal {type(error).__name__}")

    def complete_leave(self) -> None:
        self.asked.append("leave completed")


def _response(error: int = 0, epoch: int = 1, interval_ms: int = 3_000) -> Any:
    return hb_resp.ConsumerGroupHeartbeatResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=ErrorCode(error),
        error_message=None,
        member_id=None,
        member_epoch=i32(epoch),
        heartbeat_interval=i32Timedelta.parse(datetime.timedelta(milliseconds=interval_ms)),
        assignment=None,
    )


# -- HeartbeatRequestState ----------------------------------------------------------------------


def test_heartbeat_request_state_interval_in_flight_and_backoff() -> None:
    state = HeartbeatRequestState(retry_backoff(CONFIG, lambda: 0.5))
    assert state.can_send_request(0) and state.heartbeat_interval_passed(0)
    state.update_heartbeat_interval_ms(5_000, 0)
    assert state.heartbeat_interval_ms == 5_000
    assert not state.heartbeat_interval_passed(4_999) and state.heartbeat_interval_passed(5_000)
    assert not state.request_in_flight and state.take_in_flight(1) is None
    state.on_failed_attempt(6_000)
    assert not state.can_send_request(6_000) and state.remaining_backoff_ms(6_000) > 0
    assert state.heartbeat_interval_passed(6_000)  # a failure makes the heartbeat due
    state.reset()
    assert state.can_send_request(6_000) and state.remaining_backoff_ms(6_000) == 0


# -- HeartbeatState -----------------------------------------------------------------------------


def test_heartbeat_state_sends_all_when_joining_then_only_changes() -> None:
    fields = HeartbeatState(CONFIG)
    member = FakeMember(state=S.JOINING)
    join = fields.build_request(member)
    assert join.subscribed_topic_names == ("a",)
    assert join.server_assignor == "uniform"
    assert join.topic_partitions == ()
    member.state, member.member_epoch = S.STABLE, 1
    same = fields.build_request(member)
    assert same.subscribed_topic_names is None and same.server_assignor is None
    assert same.topic_partitions is None
    assert join.rebalance_timeout == datetime.timedelta(milliseconds=45_000)
    assert same.rebalance_timeout != join.rebalance_timeout  # kio's default: not sent
    member.subscription = ("a", "b")
    changed = fields.build_request(member)
    assert changed.subscribed_topic_names == ("a", "b") and changed.server_assignor is None
    fields.reset()
    again = fields.build_request(member)
    assert again.server_assignor == "uniform" and again.subscribed_topic_names == ("a", "b")


def test_heartbeat_state_never_sends_an_empty_subscription_in_the_group() -> None:
    """librdkafka's mock cluster aborts the process on topic names without a topic or a
    regex; a member in the group with an empty subscription is about to leave."""
    fields = HeartbeatState(CONFIG)
    member = FakeMember(state=S.JOINING)
    fields.build_request(member)
    member.state, member.member_epoch = S.STABLE, 1
    member.subscription = ()
    emptied = fields.build_request(member)
    assert emptied.subscribed_topic_names is None
    assert emptied.subscribed_topic_regex is None


# -- ConsumerHeartbeatRequestManager ------------------------------------------------------------


def test_heartbeat_manager_asks_the_member_it_holds() -> None:
    member = FakeMember(state=S.JOINING)
    manager = ConsumerHeartbeatRequestManager(CONFIG, member, random=lambda: 0.5)
    assert manager.poll(0) == ()
    assert member.asked == ["skipped"]  # no coordinator yet
    manager.on_coordinator_discovered()
    (request,) = manager.poll(0)
    assert member.asked[-1] == "generated" and manager.request_in_flight
    assert manager.poll(0) == ()  # never two in flight
    manager.on_response(request.request_id, _response(epoch=4, interval_ms=3_000), 10)
    assert member.asked[-1] == "success epoch 4"
    assert manager.heartbeat_interval_ms == 3_000 and not manager.request_in_flight
    member.state = S.STABLE
    assert manager.time_until_next_heartbeat_ms(10) == 3_000
    assert manager.poll(3_009) == ()
    (request,) = manager.poll(3_010)
    manager.on_response(request.request_id, _response(error=ErrorCode.fenced_member_epoch), 3_020)
    assert member.asked[-1] == "fenced"


def test_heartbeat_manager_coordinator_errors_mark_it_unknown() -> None:
    member = FakeMember(state=S.JOINING)
    manager = ConsumerHeartbeatRequestManager(CONFIG, member, random=lambda: 0.5)
    manager.on_coordinator_discovered()
    (request,) = manager.poll(0)
    manager.on_response(request.request_id, _response(error=ErrorCode.not_coordinator), 5)
    assert not manager.coordinator_known
    assert [type(e) for e in member.published] == [CoordinatorUnknown]
    assert manager.time_until_next_heartbeat_ms(5) is None  # waits for a coordinator


def test_heartbeat_manager_fatal_error_goes_to_the_member() -> None:
    member = FakeMember(state=S.JOINING)
    manager = ConsumerHeartbeatRequestManager(CONFIG, member, random=lambda: 0.5)
    manager.on_coordinator_discovered()
    (request,) = manager.poll(0)
    manager.on_response(
        request.request_id, _response(error=ErrorCode.group_authorization_failed), 5
    )
    assert member.asked[-1] == "fatal GroupAuthorizationFailedError"


# -- AssignmentReconciler -----------------------------------------------------------------------


def _ids(*items: tuple[str, int]) -> frozenset[tuple[str, int]]:
    return frozenset((TOPIC_IDS[t], p) for t, p in items)


def test_reconciler_returns_transitions_and_steps() -> None:
    reconciler = AssignmentReconciler(get_logger("test"))
    target = _ids(("a", 0), ("b", 1))
    assert reconciler.on_assignment_received(target, S.JOINING) is S.RECONCILING
    assert reconciler.on_assignment_received(target, S.RECONCILING) is S.RECONCILING
    assert (
        reconciler.maybe_reconcile(S.JOINING, frozenset(), can_commit=True, auto_commit=False)
        is None
    )
    # Names unknown: the step asks for them and reconciles the resolvable part (none).
    step = reconciler.maybe_reconcile(
        S.RECONCILING, frozenset(), can_commit=True, auto_commit=False
    )
    assert step is not None
    assert step.missing_topic_ids == frozenset({TOPIC_IDS["a"], TOPIC_IDS["b"]})
    assert step.transition is None
    assert step.started is not None and step.started.assigned == frozenset()
    assert reconciler.reconciliation_in_progress


def test_reconciler_resolves_names_then_completes_to_acknowledging() -> None:
    reconciler = AssignmentReconciler(get_logger("test"))
    reconciler.on_assignment_received(_ids(("a", 0), ("b", 1)), S.JOINING)
    reconciler.on_topic_names({TOPIC_IDS["a"]: "a"})
    step = reconciler.maybe_reconcile(
        S.RECONCILING, tps(("c", 3)), can_commit=True, auto_commit=False
    )
    assert step is not None and step.missing_topic_ids == frozenset({TOPIC_IDS["b"]})
    rec = step.started
    assert rec is not None
    assert rec.assigned == tps(("a", 0)) and rec.revoked == tps(("c", 3))
    assert step.unresolved_topic_ids == frozenset({TOPIC_IDS["b"]})
    # One reconciliation at a time.
    assert (
        reconciler.maybe_reconcile(S.RECONCILING, tps(), can_commit=True, auto_commit=False) is None
    )
    assert reconciler.complete(rec, S.RECONCILING) is S.ACKNOWLEDGING
    assert reconciler.current_assignment == LocalAssignment(0, _ids(("a", 0)))
    assert not reconciler.reconciliation_in_progress
    # Acknowledged at this local epoch: the missing name is not asked for again.
    again = reconciler.maybe_reconcile(
        S.RECONCILING, tps(("a", 0)), can_commit=True, auto_commit=False
    )
    assert again is not None and again.missing_topic_ids is None and again.started is None
    reconciler.on_topic_names({TOPIC_IDS["b"]: NAMES_BY_ID[TOPIC_IDS["b"]]})
    last = reconciler.maybe_reconcile(
        S.RECONCILING, tps(("a", 0)), can_commit=True, auto_commit=False
    )
    assert last is not None and last.started is not None and last.started.revoked == frozenset()


def test_reconciler_with_auto_commit_starts_only_from_an_application_poll() -> None:
    reconciler = AssignmentReconciler(get_logger("test"))
    reconciler.on_assignment_received(_ids(("a", 0)), S.JOINING)
    reconciler.on_topic_names({TOPIC_IDS["a"]: "a"})
    waiting = reconciler.maybe_reconcile(S.RECONCILING, tps(), can_commit=False, auto_commit=True)
    assert waiting is not None and waiting.started is None
    step = reconciler.maybe_reconcile(S.RECONCILING, tps(), can_commit=True, auto_commit=True)
    assert step is not None and step.started is not None
    step.started.commit_id = 42
    assert reconciler.take_commit(41) is None
    assert reconciler.take_commit(42) is step.started and step.started.commit_id is None


def test_reconciler_interrupted_by_a_rejoin_and_retried_after_a_failure() -> None:
    reconciler = AssignmentReconciler(get_logger("test"))
    reconciler.on_assignment_received(_ids(("a", 0)), S.JOINING)
    reconciler.on_topic_names({TOPIC_IDS["a"]: "a"})
    step = reconciler.maybe_reconcile(S.RECONCILING, tps(), can_commit=True, auto_commit=False)
    assert step is not None and step.started is not None
    rec = step.started
    reconciler.failed(rec)
    # A failed callback: retried on the application's poll only.
    assert (
        reconciler.maybe_reconcile(S.RECONCILING, tps(), can_commit=False, auto_commit=False)
        is None
    )
    retry = reconciler.maybe_reconcile(S.RECONCILING, tps(), can_commit=True, auto_commit=False)
    assert retry is not None and retry.started is not None
    reconciler.on_joining()
    assert retry.started.rejoined and reconciler.target_assignment is NONE_ASSIGNMENT
    assert reconciler.complete(retry.started, S.RECONCILING) is None
    assert not reconciler.reconciliation_in_progress
