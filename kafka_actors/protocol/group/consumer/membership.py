"""KIP-848 consumer group membership and heartbeat: the pure state machine.

Owns: the member's state (:class:`MemberState`), member id and epoch, the rebalance-callback
protocol with the application, leaving the group, the poll timer (``max.poll.interval.ms``),
and, through the collaborators it builds, the heartbeat schedule (interval from each response,
backoff after failures, one request in flight at most), the fields of ``ConsumerGroupHeartbeat``
requests (only what changed since the last one) and the reconciliation of target assignments
(topic ids resolved to names, revoke then assign). It is the pure core of the membership
actor; it follows the Java client's ``ConsumerMembershipManager`` /
``ConsumerHeartbeatRequestManager`` (Kafka 4.x).
The manager is composed of collaborators that own their state, as Java's: it builds and polls
its heartbeat request manager
(:class:`~kafka_actors.protocol.group.consumer.heartbeat.ConsumerHeartbeatRequestManager`: schedule,
request fields, answers), which holds the manager and reads it and asks it for transitions, as
Java's ``ConsumerHeartbeatRequestManager`` holds the ``ConsumerMembershipManager``; and the
reconciler (:class:`~kafka_actors.protocol.group.consumer.reconciliation.AssignmentReconciler`:
target and current assignments, topic names, the reconciliation in progress), which returns the
transitions this manager makes. This module keeps the states' transitions, the inputs, the rebalance
callbacks (one outstanding, the rest in order) and the request-manager contract. The states are in
:mod:`kafka_actors.protocol.group.consumer.states`, the events in
:mod:`kafka_actors.protocol.group.events`, the configuration in
:mod:`kafka_actors.protocol.group.consumer.config`. Like the classic manager, it owns its outbox
(:class:`~kafka_actors.protocol.request_state.Outbox`: published events, ids) and the owned
partitions it gives that outbox
(:class:`~kafka_actors.protocol.group.owned_partitions.OwnedPartitions`, shared by both protocols);
the public names are re-exported here.

May touch: nothing outside itself. No threads, sockets or clocks: the current time is always a
parameter (``now_ms``, monotonic milliseconds) and randomness (backoff jitter) is injected.
It builds kio ``ConsumerGroupHeartbeat`` request payloads (v0/v1) and reads their responses;
errors are :mod:`kafka_actors.errors` classes.

How it is driven (the request-manager contract of :mod:`kafka_actors.protocol.messages`):

* inputs: :meth:`~ConsumerMembershipManager.subscribe`,
  :meth:`~ConsumerMembershipManager.on_poll` (each application poll),
  :meth:`~ConsumerMembershipManager.leave_group` (unsubscribe/close),
  :meth:`~ConsumerMembershipManager.on_coordinator_discovered` /
  :meth:`~ConsumerMembershipManager.on_coordinator_unknown`,
  :meth:`~ConsumerMembershipManager.on_topic_names`,
  :meth:`~ConsumerMembershipManager.on_commit_done`,
  :meth:`~ConsumerMembershipManager.on_callback_completed`, and the outcome of requests it
  asked for (:meth:`~ConsumerMembershipManager.on_response` /
  :meth:`~ConsumerMembershipManager.on_failure`). Inputs return nothing;
* outputs: :meth:`~ConsumerMembershipManager.poll` returns a :class:`PollResult` with the
  heartbeat to send (if one is due) and every event published since the last poll, in order.
  The actor calls ``poll`` after each input and when ``time_until_next_poll_ms`` has passed.

Choices where Java leaves room (or where this design differs), in one place:

* **Never two heartbeats in flight**, not even the leave heartbeat: Java sends the leave at once
  even when a heartbeat is in flight; here it goes out as soon as that one completes.
* **Backoff applies to "heartbeat now" states after a failure** (JOINING, ACKNOWLEDGING): Java
  bypasses the backoff for them; here a JOINING member that got COORDINATOR_LOAD_IN_PROGRESS
  waits the backoff. LEAVING never waits for backoff.
* **Rebalance callbacks are events with replies** and are serialized: at most one
  ``Invoke*`` event is outstanding; later ones (a lost callback after a fence that happened while
  a revocation callback ran) wait in order, as on Java's application thread. There is no
  client-side timer on a callback, as in Java: the broker enforces the rebalance timeout by
  fencing the member (heartbeats continue while a callback runs), and a callback that keeps the
  application from polling lets the poll timer expire (leave heartbeat, STALE, rejoin on the
  next poll).
* **Lost partitions are not returned once onPartitionsLost is asked for**: they are marked
  pending revocation (:class:`PauseFetching`) when the ``InvokeLost`` event goes out, since
  the assignment is cleared only when the reply comes back while the application thread polls
  on (a listener that forgot a lost partition must not see its records again, as with the
  classic protocol, where Java clears the assignment right after the callback).
* **A failed callback** leaves the member RECONCILING without acknowledging (as Java); the
  reconciliation is retried on the next application poll (:meth:`on_poll`), never from the
  background :meth:`poll`, so a failing callback cannot spin.
* With auto-commit on, a reconciliation starts only from an application poll (Java's
  ``maybeReconcile(canCommit=true)``, the KAFKA-18641 fix) and always first asks for a commit
  (:class:`CommitBeforeRevocation`, deadline now + rebalance timeout) even when nothing is
  revoked, as Java commits the consumed positions before every reconciliation.
* Unexpected heartbeat error codes are fatal (as Java) unless the code is retriable, which is
  retried with backoff. TOPIC_AUTHORIZATION_FAILED is reported (non-fatal) and retried, as Java.
* Leaving (:meth:`leave_group`) releases the assignment with onPartitionsRevoked (member epoch
  > 0) or onPartitionsLost, then sends one heartbeat with epoch -1 (-2 for a static member);
  it never commits (the facade commits on close). An optional deadline bounds the whole leave.
"""

from __future__ import annotations

import enum
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kafka_actors.errors import KafkaError
from kafka_actors.log import get_logger
from kafka_actors.protocol.group.consumer.config import MembershipConfig
from kafka_actors.protocol.group.consumer.heartbeat import (
    CONSUMER_PROTOCOL_NOT_SUPPORTED_MSG,
    ConsumerHeartbeatRequestManager,
)
from kafka_actors.protocol.group.consumer.reconciliation import (
    AssignmentReconciler,
    LocalAssignment,
    Reconciliation,
)
from kafka_actors.protocol.group.consumer.states import (
    NOT_IN_GROUP_STATES,
    SKIP_HEARTBEAT_STATES,
    IllegalStateTransitionError,
    MemberState,
)
from kafka_actors.protocol.group.events import (
    AssignmentChanged,
    CommitBeforeRevocation,
    CoordinatorUnknown,
    ErrorEvent,
    InvokeAssigned,
    InvokeLost,
    InvokeRevoked,
    LeaveCompleted,
    MemberEpochChanged,
    NeedTopicNames,
    PauseFetching,
    RebalanceCallback,
)
from kafka_actors.protocol.group.membership_operation import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    GroupMembershipOperation,
    consumer_leave_epoch,
)
from kafka_actors.protocol.group.owned_partitions import OwnedPartitions
from kafka_actors.protocol.messages import (
    PollResult,
    TopicPartition,
)
from kafka_actors.protocol.request_state import ExponentialBackoff, Outbox

__all__ = [
    "CONSUMER_PROTOCOL_NOT_SUPPORTED_MSG",
    "JOIN_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "AssignmentChanged",
    "CommitBeforeRevocation",
    "ConsumerMembershipManager",
    "CoordinatorUnknown",
    "ErrorEvent",
    "ExponentialBackoff",
    "IllegalStateTransitionError",
    "InvokeAssigned",
    "InvokeLost",
    "InvokeRevoked",
    "LeaveCompleted",
    "LocalAssignment",
    "MemberEpochChanged",
    "MemberState",
    "NeedTopicNames",
    "PauseFetching",
    "RebalanceCallback",
]

JOIN_GROUP_MEMBER_EPOCH: Final = 0

# -- Helpers ------------------------------------------------------------------------------------


def default_member_id() -> str:
    return str(uuid.uuid4())


class _CallbackPurpose(enum.Enum):
    RECONCILE_REVOKE = "reconcile-revoke"
    RECONCILE_ASSIGN = "reconcile-assign"
    RELEASE_ON_LEAVE = "release-on-leave"
    LOST_ON_FENCE = "lost-on-fence"
    LOST_ON_STALE = "lost-on-stale"
    LOST_ON_FATAL = "lost-on-fatal"


_RELEASE_PURPOSES: Final = frozenset(
    {
        _CallbackPurpose.RELEASE_ON_LEAVE,
        _CallbackPurpose.LOST_ON_FENCE,
        _CallbackPurpose.LOST_ON_STALE,
        _CallbackPurpose.LOST_ON_FATAL,
    }
)


@dataclass(slots=True)
class _PendingCallback:
    callback_id: int
    method: RebalanceCallback
    partitions: frozenset[TopicPartition]
    purpose: _CallbackPurpose
    reconciliation: Reconciliation | None = None
    assignment: frozenset[TopicPartition] = frozenset()


class ConsumerMembershipManager:
    """The KIP-848 member: state, heartbeats and reconciliation (see the module docstring)."""

    def __init__(
        self,
        config: MembershipConfig,
        *,
        random: Callable[[], float],
        member_id_factory: Callable[[], str] = default_member_id,
        client_id: str | None = None,
    ) -> None:
        if config.heartbeat_api_version not in (0, 1):
            raise ValueError(
                f"unsupported ConsumerGroupHeartbeat version {config.heartbeat_api_version}"
            )
        self._config = config
        self._member_id = member_id_factory()
        self._member_epoch = JOIN_GROUP_MEMBER_EPOCH
        self._state = MemberState.UNSUBSCRIBED
        self._log = get_logger(
            "membership", client_id=client_id, group_id=config.group_id, member_id=self._member_id
        )
        # Events published since the last poll, and the request/callback/commit id counter.
        self._outbox = Outbox()

        # Subscription.
        self._subscribed_topics: tuple[str, ...] = ()
        self._subscribed_regex: str | None = None
        self._subscription_updated = False

        # Assignment: what the member owns (by name); by id and the target: the reconciler.
        self._owned = OwnedPartitions(self._outbox)
        self._reconciler = AssignmentReconciler(self._log)

        # Rebalance callbacks: one outstanding, the rest in order.
        self._callback_outstanding: _PendingCallback | None = None
        self._callback_queue: deque[_PendingCallback] = deque()

        # Poll timer (max.poll.interval.ms) and the stale member it can produce.
        self._poll_deadline_ms: int | None = None
        self._leaving_due_to_poll_timer = False
        self._stale_released = False
        self._stale_rejoin_requested = False

        # Leave in progress.
        self._leave_in_progress = False
        self._leave_deadline_ms: int | None = None
        # What the leave under way does with the membership (close(membership=...)); every
        # other leave (unsubscribe, the poll timer) is "default".
        self._leave_operation: GroupMembershipOperation = "default"

        # The heartbeat (Java HeartbeatRequestState + HeartbeatState), holding this member.
        self._heartbeat = ConsumerHeartbeatRequestManager(config, self, random=random)

    # -- Observability ------------------------------------------------------------------------

    @property
    def group_id(self) -> str:
        return self._config.group_id

    @property
    def group_instance_id(self) -> str | None:
        return self._config.group_instance_id

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions the member owns now (including ones awaiting onPartitionsAssigned)."""
        return self._owned.assignment

    @property
    def partitions_awaiting_callback(self) -> frozenset[TopicPartition]:
        """Owned partitions not fetchable yet: their onPartitionsAssigned has not completed."""
        return self._owned.awaiting_callback

    @property
    def partitions_pending_revocation(self) -> frozenset[TopicPartition]:
        """Owned partitions being revoked: no records of them may be returned."""
        return self._owned.pending_revocation

    @property
    def state(self) -> MemberState:
        return self._state

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def member_epoch(self) -> int:
        return self._member_epoch

    @property
    def current_assignment(self) -> LocalAssignment:
        """The last reconciled assignment by topic id (what the heartbeat reports as owned)."""
        return self._reconciler.current_assignment

    @property
    def target_assignment(self) -> LocalAssignment:
        return self._reconciler.target_assignment

    @property
    def heartbeat_interval_ms(self) -> int:
        return self._heartbeat.heartbeat_interval_ms

    @property
    def request_in_flight(self) -> bool:
        return self._heartbeat.request_in_flight

    @property
    def reconciliation_in_progress(self) -> bool:
        return self._reconciler.reconciliation_in_progress

    @property
    def subscription(self) -> tuple[str, ...]:
        return self._subscribed_topics

    @property
    def subscribed_regex(self) -> str | None:
        return self._subscribed_regex

    @property
    def coordinator_known(self) -> bool:
        return self._heartbeat.coordinator_known

    @property
    def leave_in_progress(self) -> bool:
        return self._leave_in_progress

    @property
    def leaving_due_to_poll_timer(self) -> bool:
        """The leave under way is the poll timer's (the member goes STALE, not UNSUBSCRIBED)."""
        return self._leaving_due_to_poll_timer

    @property
    def log(self) -> Any:
        """The member's logger (bound to its member id), for its heartbeat request manager."""
        return self._log

    # -- Application events -------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] = (), *, regex: str | None = None) -> None:
        """Subscribe to topic names or to one regular expression (RE2J, resolved by the broker).

        The member joins on the next :meth:`on_poll` when it is not in the group; otherwise the
        next heartbeat carries the new subscription.
        """
        names = tuple(sorted(set(topics)))
        if regex is not None and names:
            raise ValueError("subscribe to topic names or to a regular expression, not both")
        if regex is None and not names:
            raise ValueError("an empty subscription is an unsubscribe: call leave_group")
        if regex is not None and not regex:
            raise ValueError("the subscription regular expression must not be empty")
        self._subscribed_topics = names
        self._subscribed_regex = regex
        self._subscription_updated = True
        self._log.debug("subscription_updated", topics=names, regex=regex)

    def on_poll(self, now_ms: int) -> None:
        """The application polled: reset the poll timer, join if subscribed, reconcile."""
        expired = self._poll_deadline_ms is not None and now_ms >= self._poll_deadline_ms
        if expired:
            assert self._poll_deadline_ms is not None
            self._log.warning(
                "poll_interval_exceeded",
                exceeded_by_ms=now_ms - self._poll_deadline_ms,
                state=self._state.value,
            )
            if self._state is MemberState.STALE or self._leaving_due_to_poll_timer:
                self._stale_rejoin_requested = True
        self._poll_deadline_ms = now_ms + self._config.rebalance_timeout_ms
        self._maybe_rejoin_stale_member()
        if (
            self._subscription_updated
            and self._state is MemberState.UNSUBSCRIBED
            and not self._release_pending()
        ):
            # Join only once a previous assignment is released (Java's unsubscribe blocks
            # until then), so a late release never clears partitions of the new membership.
            self._subscription_updated = False
            self._transition_to_joining()
        self._maybe_reconcile(now_ms, can_commit=True)

    def leave_group(
        self,
        now_ms: int,
        *,
        deadline_ms: int | None = None,
        run_callbacks: bool = True,
        operation: GroupMembershipOperation = "default",
    ) -> None:
        """Unsubscribe / close: release the assignment, then send the leave heartbeat.

        :class:`LeaveCompleted` is published when the leave is over: on the leave heartbeat's
        response or failure, when it cannot be sent (no coordinator, fenced, fatal), at once when
        the member is not in the group, or at ``deadline_ms`` (``timed_out=True``).
        ``operation`` (close's membership, KIP-1092) picks the leave epoch, or no leave
        heartbeat at all (a dynamic member that remains):
        :func:`~kafka_actors.protocol.group.membership_operation.consumer_leave_epoch`.
        """
        self._subscribed_topics = ()
        self._subscribed_regex = None
        self._subscription_updated = False
        state = self._state
        if state in NOT_IN_GROUP_STATES:
            if state is MemberState.FENCED:
                # The pending onPartitionsLost clears the assignment when it completes (Java
                # clears at once); it will not rejoin once the member is UNSUBSCRIBED.
                self._transition_to(MemberState.UNSUBSCRIBED)
            if not self._leave_in_progress:
                self._outbox.publish(LeaveCompleted())
            return
        if state in (MemberState.PREPARE_LEAVING, MemberState.LEAVING):
            self._log.debug("leave_already_in_progress")
            if deadline_ms is not None:
                current = self._leave_deadline_ms
                self._leave_deadline_ms = (
                    deadline_ms if current is None else min(current, deadline_ms)
                )
            return
        self._transition_to(MemberState.PREPARE_LEAVING)
        self._leave_in_progress = True
        self._leave_deadline_ms = deadline_ms
        self._leave_operation = operation
        owned = self._owned.assignment
        if not run_callbacks:
            self._on_release_on_leave_done(None)
        elif self._member_epoch > 0:
            self._owned.pause_fetching(owned)
            self._request_callback(
                RebalanceCallback.ON_PARTITIONS_REVOKED, owned, _CallbackPurpose.RELEASE_ON_LEAVE
            )
        else:
            self._request_callback(
                RebalanceCallback.ON_PARTITIONS_LOST, owned, _CallbackPurpose.RELEASE_ON_LEAVE
            )

    def on_coordinator_discovered(self, now_ms: int) -> None:
        self._heartbeat.on_coordinator_discovered()

    def on_coordinator_unknown(self, now_ms: int) -> None:
        self._heartbeat.on_coordinator_unknown()

    def on_topic_names(self, mapping: Mapping[str, str]) -> None:
        """Topic id -> name, as the metadata manager knows them (ids never change names)."""
        self._reconciler.on_topic_names(mapping)

    def on_commit_done(self, commit_id: int, error: BaseException | None = None) -> None:
        rec = self._reconciler.take_commit(commit_id)
        if rec is None:
            self._log.debug("commit_done_ignored", commit_id=commit_id)
            return
        if error is not None:
            self._log.error(
                "auto_commit_before_reconciliation_failed", error=repr(error), proceeding=True
            )
        if self._reconciler.abort_if_interrupted(rec, self._state):
            return
        self._revoke_then_assign(rec)

    def on_callback_completed(self, callback_id: int, error: BaseException | None = None) -> None:
        callback = self._callback_outstanding
        if callback is None or callback.callback_id != callback_id:
            self._log.warning("callback_completion_ignored", callback_id=callback_id)
            return
        self._callback_outstanding = None
        if error is not None:
            self._log.error(
                "rebalance_callback_failed",
                method=callback.method.value,
                partitions=sorted(str(tp) for tp in callback.partitions),
                error=repr(error),
            )
        self._run_callback_continuation(callback, error)
        if self._callback_outstanding is None and self._callback_queue:
            self._emit_callback(self._callback_queue.popleft())

    # -- Request-manager contract -------------------------------------------------------------

    def poll(self, now_ms: int) -> PollResult:
        """Send the heartbeat if one is due; return it with the events published so far."""
        self._check_leave_deadline(now_ms)
        self._maybe_reconcile(now_ms, can_commit=False)
        requests = self._heartbeat.poll(now_ms)
        self._maybe_reconcile(now_ms, can_commit=False)
        events = self._outbox.drain()
        return PollResult(
            requests=requests,
            time_until_next_poll_ms=self._time_until_next_poll(now_ms),
            events=events,
        )

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        self._heartbeat.on_response(request_id, response, now_ms)

    def on_failure(self, request_id: int, error: BaseException, now_ms: int) -> None:
        self._heartbeat.on_failure(request_id, error, now_ms)

    def _time_until_next_poll(self, now_ms: int) -> int | None:
        candidates: list[int] = []
        if self._leave_in_progress and self._leave_deadline_ms is not None:
            candidates.append(max(0, self._leave_deadline_ms - now_ms))
        next_heartbeat = self._heartbeat.time_until_next_heartbeat_ms(now_ms)
        if next_heartbeat is not None:
            candidates.append(next_heartbeat)
        if self._heartbeat.coordinator_known and self._state not in SKIP_HEARTBEAT_STATES:
            leaving = self._state in (MemberState.PREPARE_LEAVING, MemberState.LEAVING)
            if self._poll_deadline_ms is not None and not leaving:
                candidates.append(max(0, self._poll_deadline_ms - now_ms))
        return min(candidates) if candidates else None

    # -- What the heartbeat request manager reads and asks (its HeartbeatMember) ---------------

    def new_id(self) -> int:
        """A request, callback or commit id of this member (never reused)."""
        return self._outbox.new_id()

    def publish(self, event: Any) -> None:
        self._outbox.publish(event)

    def poll_timer_expired(self, now_ms: int) -> bool:
        """max.poll.interval.ms passed since the application's last poll."""
        return self._poll_deadline_ms is not None and now_ms >= self._poll_deadline_ms

    def on_heartbeat_request_generated(self) -> None:
        state = self._state
        if state is MemberState.ACKNOWLEDGING:
            if self._reconciler.target_assignment_reconciled():
                self._transition_to(MemberState.STABLE)
            else:
                self._transition_to(MemberState.RECONCILING)
        elif state is MemberState.LEAVING:
            if self._leaving_due_to_poll_timer:
                self._transition_to_stale()
            else:
                self._transition_to(MemberState.UNSUBSCRIBED)

    def on_heartbeat_request_skipped(self) -> None:
        if self._state is not MemberState.LEAVING:
            return
        self._log.warning(
            "leave_heartbeat_not_sent",
            reason="coordinator unknown",
            member_epoch=self._member_epoch,
        )
        if self._leaving_due_to_poll_timer:
            self._transition_to_stale()
        else:
            self._transition_to(MemberState.UNSUBSCRIBED)
            self.complete_leave()

    def on_heartbeat_success(self, response: Any) -> None:
        state = self._state
        epoch = int(response.member_epoch)
        if state is MemberState.LEAVING or state in NOT_IN_GROUP_STATES:
            self._log.debug("heartbeat_response_ignored", state=state.value)
            return
        if epoch < 0:
            self._log.debug("heartbeat_response_ignored", reason="negative epoch", epoch=epoch)
            return
        member_id = response.member_id
        if member_id and member_id != self._member_id:
            # ConsumerGroupHeartbeat v0: the coordinator may have chosen the member id.
            self._log.info("member_id_from_coordinator", new_member_id=member_id)
            self._member_id = member_id
            self._log = self._log.bind(member_id=member_id)
            self._reconciler.log = self._log
        self._update_member_epoch(epoch)
        assignment = response.assignment
        if assignment is None:
            return
        if not state.can_handle_new_assignment:
            self._log.debug("assignment_ignored", state=state.value)
            return
        partitions = frozenset(
            (str(tp.topic_id), int(p)) for tp in assignment.topic_partitions for p in tp.partitions
        )
        transition = self._reconciler.on_assignment_received(partitions, self._state)
        if transition is not None:
            self._transition_to(transition)

    # -- Reconciliation (the reconciler decides, the member applies) -------------------------

    def _maybe_reconcile(self, now_ms: int, *, can_commit: bool) -> None:
        step = self._reconciler.maybe_reconcile(
            self._state,
            self._owned.assignment,
            can_commit=can_commit,
            auto_commit=self._config.auto_commit_enabled,
        )
        if step is None:
            return
        if step.missing_topic_ids is not None:
            self._outbox.publish(NeedTopicNames(step.missing_topic_ids))
        if step.transition is not None:
            self._transition_to(step.transition)
        rec = step.started
        if rec is None:
            return
        owned = self._owned.assignment
        self._log.info(
            "reconciling",
            local_epoch=rec.resolved.local_epoch,
            assigned=sorted(str(tp) for tp in rec.assigned),
            owned=sorted(str(tp) for tp in owned),
            added=sorted(str(tp) for tp in rec.assigned - owned),
            revoked=sorted(str(tp) for tp in rec.revoked),
            unresolved_topic_ids=sorted(step.unresolved_topic_ids),
        )
        self._owned.pause_fetching(rec.revoked)
        if self._config.auto_commit_enabled:
            rec.commit_id = self._outbox.new_id()
            self._outbox.publish(
                CommitBeforeRevocation(
                    rec.revoked, now_ms + self._config.rebalance_timeout_ms, rec.commit_id
                )
            )
            return
        self._revoke_then_assign(rec)

    def _revoke_then_assign(self, rec: Reconciliation) -> None:
        revoked = rec.revoked & self._owned.assignment  # only what is still owned
        if revoked:
            self._owned.pause_fetching(revoked)
            self._request_callback(
                RebalanceCallback.ON_PARTITIONS_REVOKED,
                revoked,
                _CallbackPurpose.RECONCILE_REVOKE,
                reconciliation=rec,
            )
        else:
            self._assign(rec)

    def _assign(self, rec: Reconciliation) -> None:
        added = rec.assigned - self._owned.assignment
        self._owned.set_assignment(rec.assigned)
        self._owned.await_callback(added)
        self._request_callback(
            RebalanceCallback.ON_PARTITIONS_ASSIGNED,
            added,
            _CallbackPurpose.RECONCILE_ASSIGN,
            reconciliation=rec,
            assignment=rec.assigned,
            always=True,
        )

    def _clear_assignment(self) -> None:
        self._owned.set_assignment(frozenset())
        self._reconciler.clear()

    # -- Rebalance callbacks -----------------------------------------------------------------

    def _request_callback(
        self,
        method: RebalanceCallback,
        partitions: frozenset[TopicPartition],
        purpose: _CallbackPurpose,
        *,
        reconciliation: Reconciliation | None = None,
        assignment: frozenset[TopicPartition] = frozenset(),
        always: bool = False,
    ) -> None:
        callback = _PendingCallback(
            self._outbox.new_id(), method, partitions, purpose, reconciliation, assignment
        )
        if not partitions and not always:
            # Nothing to release: Java does not invoke the listener; continue at once.
            self._run_callback_continuation(callback, None)
            return
        if self._callback_outstanding is None and not self._callback_queue:
            self._emit_callback(callback)
        else:
            self._callback_queue.append(callback)

    def _release_pending(self) -> bool:
        """True while an onPartitionsRevoked/Lost releasing the whole assignment is pending."""
        pending = list(self._callback_queue)
        if self._callback_outstanding is not None:
            pending.append(self._callback_outstanding)
        return any(callback.purpose in _RELEASE_PURPOSES for callback in pending)

    def _emit_callback(self, callback: _PendingCallback) -> None:
        self._callback_outstanding = callback
        event: InvokeRevoked | InvokeAssigned | InvokeLost
        if callback.method is RebalanceCallback.ON_PARTITIONS_REVOKED:
            event = InvokeRevoked(callback.partitions, callback.callback_id)
        elif callback.method is RebalanceCallback.ON_PARTITIONS_ASSIGNED:
            event = InvokeAssigned(callback.partitions, callback.assignment, callback.callback_id)
        else:
            # No record of a lost partition is returned from now on (the assignment is cleared
            # only when the reply comes back, while the application thread polls on).
            self._owned.pause_fetching(callback.partitions & self._owned.assignment)
            event = InvokeLost(callback.partitions, callback.callback_id)
        self._outbox.publish(event)

    def _run_callback_continuation(
        self, callback: _PendingCallback, error: BaseException | None
    ) -> None:
        purpose = callback.purpose
        rec = callback.reconciliation
        reconciler = self._reconciler
        if purpose is _CallbackPurpose.RECONCILE_REVOKE:
            assert rec is not None
            if error is not None:
                reconciler.failed(rec)
            elif not reconciler.abort_if_interrupted(rec, self._state):
                self._assign(rec)
        elif purpose is _CallbackPurpose.RECONCILE_ASSIGN:
            assert rec is not None
            if error is not None:
                # Added partitions stay non-fetchable until a later reconciliation succeeds.
                reconciler.failed(rec)
                return
            self._owned.callback_done(rec.assigned)
            transition = reconciler.complete(rec, self._state)
            if transition is not None:
                self._transition_to(transition)
        elif purpose is _CallbackPurpose.RELEASE_ON_LEAVE:
            self._on_release_on_leave_done(error)
        elif purpose is _CallbackPurpose.LOST_ON_FENCE:
            self._clear_assignment()
            if self._state is MemberState.FENCED:
                self._transition_to_joining()
        elif purpose is _CallbackPurpose.LOST_ON_STALE:
            self._clear_assignment()
            self._stale_released = True
            self._maybe_rejoin_stale_member()
        else:  # LOST_ON_FATAL
            self._clear_assignment()

    def _on_release_on_leave_done(self, error: BaseException | None) -> None:
        self._clear_assignment()
        if self._state is MemberState.PREPARE_LEAVING:
            self._send_leave_or_remain()

    def _send_leave_or_remain(self) -> None:
        """The released member of a leave: LEAVING (its heartbeat is the leave), or, when it
        sends no leave (a dynamic member closed with "remain", as Java's isLeavingGroup),
        out of the group at once; the broker keeps it until its session times out."""
        self.transition_to_sending_leave_group(due_to_expired_poll_timer=False)
        if self._leave_group_epoch() is None and self._state is MemberState.LEAVING:
            self._log.info("leave_heartbeat_not_sent", reason="the member remains in the group")
            self._transition_to(MemberState.UNSUBSCRIBED)
            self.complete_leave()

    # -- Transitions --------------------------------------------------------------------------

    def _transition_to(self, next_state: MemberState) -> None:
        current = self._state
        if not current.can_transition_to(next_state):
            raise IllegalStateTransitionError(
                f"Invalid state transition from {current.value} to {next_state.value}"
            )
        if current is not next_state:
            self._log.info(
                "member_state_transition",
                from_state=current.value,
                to_state=next_state.value,
                member_epoch=self._member_epoch,
            )
        self._state = next_state

    def _update_member_epoch(self, epoch: int) -> None:
        if epoch == self._member_epoch:
            return
        self._member_epoch = epoch
        self._outbox.publish(MemberEpochChanged(self._member_id, epoch if epoch > 0 else None))

    def _leave_group_epoch(self) -> int | None:
        """The epoch of the leave heartbeat; None when the member sends none."""
        operation = "default" if self._leaving_due_to_poll_timer else self._leave_operation
        return consumer_leave_epoch(operation, static=self._config.group_instance_id is not None)

    def _transition_to_joining(self) -> None:
        if self._state is MemberState.FATAL:
            self._log.warning("join_ignored", reason="member is FATAL")
            return
        self._update_member_epoch(JOIN_GROUP_MEMBER_EPOCH)
        self._transition_to(MemberState.JOINING)
        self._reconciler.on_joining()
        self._heartbeat.reset_heartbeat_state()

    def transition_to_fenced(self) -> None:
        state = self._state
        if state is MemberState.PREPARE_LEAVING:
            # Already leaving: stop heartbeating, do not send the leave, do not rejoin.
            self.transition_to_sending_leave_group(due_to_expired_poll_timer=False)
            self._transition_to(MemberState.UNSUBSCRIBED)
            self.complete_leave()
            return
        if state is MemberState.LEAVING:
            if self._leaving_due_to_poll_timer:
                self._transition_to_stale()
            else:
                self._transition_to(MemberState.UNSUBSCRIBED)
                self.complete_leave()
            return
        if state in NOT_IN_GROUP_STATES:
            return
        self._transition_to(MemberState.FENCED)
        self._update_member_epoch(JOIN_GROUP_MEMBER_EPOCH)
        self._request_callback(
            RebalanceCallback.ON_PARTITIONS_LOST,
            self._owned.assignment,
            _CallbackPurpose.LOST_ON_FENCE,
        )

    def transition_to_fatal(
        self, error: KafkaError, *, consumer_protocol_unsupported: bool = False
    ) -> None:
        self._outbox.publish(
            ErrorEvent(
                error, fatal=True, consumer_protocol_unsupported=consumer_protocol_unsupported
            )
        )
        previous = self._state
        if previous is MemberState.FATAL:
            return
        self._transition_to(MemberState.FATAL)
        self._log.error("member_fatal", error=str(error))
        self._outbox.publish(MemberEpochChanged(self._member_id, None))
        if previous in (MemberState.UNSUBSCRIBED, MemberState.LEAVING, MemberState.PREPARE_LEAVING):
            # Already left or leaving: no lost callback (a running release callback clears).
            self.complete_leave()
            return
        self._request_callback(
            RebalanceCallback.ON_PARTITIONS_LOST,
            self._owned.assignment,
            _CallbackPurpose.LOST_ON_FATAL,
        )

    def transition_to_sending_leave_group(self, *, due_to_expired_poll_timer: bool) -> None:
        if self._state in (MemberState.FATAL, MemberState.UNSUBSCRIBED):
            return
        if due_to_expired_poll_timer:
            self._leaving_due_to_poll_timer = True
            # Briefly through PREPARE_LEAVING: a stale member releases (as lost) after leaving.
            self._transition_to(MemberState.PREPARE_LEAVING)
        epoch = self._leave_group_epoch()
        # A member that sends no leave still gives up its epoch here (it is out of the group).
        self._update_member_epoch(LEAVE_GROUP_MEMBER_EPOCH if epoch is None else epoch)
        self._reconciler.reset_current_assignment()
        self._transition_to(MemberState.LEAVING)

    def _transition_to_stale(self) -> None:
        self._leaving_due_to_poll_timer = False
        self._transition_to(MemberState.STALE)
        self._stale_released = False
        self._request_callback(
            RebalanceCallback.ON_PARTITIONS_LOST,
            self._owned.assignment,
            _CallbackPurpose.LOST_ON_STALE,
        )

    def _maybe_rejoin_stale_member(self) -> None:
        if (
            self._state is MemberState.STALE
            and self._stale_released
            and self._stale_rejoin_requested
            and (self._subscribed_topics or self._subscribed_regex is not None)
        ):
            self._stale_rejoin_requested = False
            self._log.info("stale_member_rejoining")
            self._transition_to_joining()

    def complete_leave(self, *, timed_out: bool = False) -> None:
        if self._leave_in_progress:
            self._leave_in_progress = False
            self._leave_deadline_ms = None
            self._leave_operation = "default"
            self._outbox.publish(LeaveCompleted(timed_out=timed_out))

    def _check_leave_deadline(self, now_ms: int) -> None:
        deadline = self._leave_deadline_ms
        if not self._leave_in_progress or deadline is None or now_ms < deadline:
            return
        self._log.warning("leave_deadline_passed", state=self._state.value)
        if self._state is MemberState.PREPARE_LEAVING:
            # Stop waiting for the release callback; its late completion only clears again.
            self._clear_assignment()
            self._send_leave_or_remain()
            if not self._leave_in_progress:
                return  # it remains: no leave to send, LeaveCompleted published
        # Best effort, response ignored: the leave is over for the caller now.
        self._leave_in_progress = False
        self._leave_deadline_ms = None
        self._leave_operation = "default"
        if self._state is MemberState.LEAVING and self._heartbeat.request_in_flight:
            # Never two in flight: give up the leave heartbeat (the session timeout removes us).
            self._transition_to(MemberState.UNSUBSCRIBED)
        # Otherwise a LEAVING member sends its leave (response ignored) in this poll.
        self._outbox.publish(LeaveCompleted(timed_out=True))
