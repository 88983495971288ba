"""KIP-848 consumer group membership and heartbeat: the pure state machine.

Owns: the member's state (:class:`MemberState`), member id and epoch, the heartbeat schedule
(interval from each response, backoff after failures, one request in flight at most), the
fields of ``ConsumerGroupHeartbeat`` requests (only what changed since the last one), the
reconciliation of target assignments (topic ids resolved to names, revoke then assign), the
rebalance-callback protocol with the application, leaving the group, and the poll timer
(``max.poll.interval.ms``). It is the pure core of the membership actor; it follows the Java
client's ``ConsumerMembershipManager`` / ``ConsumerHeartbeatRequestManager`` (Kafka 4.x).
The manager is built from parts, as Java's: the heartbeat (schedule, request fields, answers)
is :class:`~kafka_actors.protocol.heartbeat.HeartbeatRequests`, the reconciliation and the
rebalance callbacks :class:`~kafka_actors.protocol.reconciliation.AssignmentReconciler`; this
module keeps the states' transitions, the inputs and the request-manager contract. The states
are in :mod:`kafka_actors.protocol.member_state`, the events in
:mod:`kafka_actors.protocol.group_events` and the owned-partition bookkeeping both protocols
share in :mod:`kafka_actors.protocol.group_member`; the public names are re-exported here.

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

import datetime
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kafka_actors.errors import (
    ConfigError,
    FatalConsumerError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    UnsupportedVersionError,
)
from kafka_actors.log import get_logger
from kafka_actors.protocol.condition_log import ConditionLog
from kafka_actors.protocol.group_events import (
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
from kafka_actors.protocol.group_member import GroupMemberBase
from kafka_actors.protocol.heartbeat import (
    _HEARTBEAT_NOW_STATES,
    _NOT_IN_GROUP_STATES,
    _SKIP_HEARTBEAT_STATES,
    CONSUMER_PROTOCOL_NOT_SUPPORTED_MSG,
    HeartbeatRequests,
    _InFlight,
    _RequestKind,
    _SentFields,
)
from kafka_actors.protocol.member_state import IllegalStateTransitionError, MemberState
from kafka_actors.protocol.messages import (
    PollResult,
    TopicPartition,
)
from kafka_actors.protocol.reconciliation import (
    NONE_ASSIGNMENT,
    LocalAssignment,
    _CallbackPurpose,
    _PendingCallback,
    _Reconciliation,
)
from kafka_actors.protocol.request_state import (
    ExponentialBackoff,
    RequestState,
    retry_backoff,
)

if TYPE_CHECKING:
    from kafka_actors.config import ConsumerConfig

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
    "GroupMemberBase",
    "IllegalStateTransitionError",
    "InvokeAssigned",
    "InvokeLost",
    "InvokeRevoked",
    "LeaveCompleted",
    "LocalAssignment",
    "MemberEpochChanged",
    "MemberState",
    "MembershipConfig",
    "NeedTopicNames",
    "PauseFetching",
    "RebalanceCallback",
]

JOIN_GROUP_MEMBER_EPOCH: Final = 0
LEAVE_GROUP_MEMBER_EPOCH: Final = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH: Final = -2

# -- Configuration and helpers ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class MembershipConfig:
    """What the membership manager needs from the consumer configuration (Java names)."""

    group_id: str
    group_instance_id: str | None = None  # group.instance.id: static membership
    rack_id: str | None = None  # client.rack
    rebalance_timeout_ms: int = 300_000  # max.poll.interval.ms
    server_assignor: str | None = None  # group.remote.assignor
    auto_commit_enabled: bool = True  # enable.auto.commit
    retry_backoff_ms: int = 100  # retry.backoff.ms
    retry_backoff_max_ms: int = 1_000  # retry.backoff.max.ms
    heartbeat_api_version: int = 1  # negotiated ConsumerGroupHeartbeat version (0 or 1)

    @classmethod
    def from_consumer_config(
        cls, config: ConsumerConfig, *, heartbeat_api_version: int = 1
    ) -> MembershipConfig:
        if config.group_id is None:
            raise ConfigError("group.id is required to join a consumer group", key="group.id")
        return cls(
            group_id=config.group_id,
            group_instance_id=config.group_instance_id,
            rack_id=config.client_rack or None,
            rebalance_timeout_ms=config.max_poll_interval_ms,
            server_assignor=config.group_remote_assignor,
            auto_commit_enabled=config.enable_auto_commit,
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
            heartbeat_api_version=heartbeat_api_version,
        )


def _millis(delta: datetime.timedelta) -> int:
    return delta // datetime.timedelta(milliseconds=1)


def _default_member_id() -> str:
    return str(uuid.uuid4())


class ConsumerMembershipManager(HeartbeatRequests):
    """The KIP-848 member: state, heartbeats and reconciliation (see the module docstring)."""

    _config: MembershipConfig

    def __init__(
        self,
        config: MembershipConfig,
        *,
        random: Callable[[], float],
        member_id_factory: Callable[[], str] = _default_member_id,
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
        self._init_outbox()

        # Subscription.
        self._subscribed_topics: tuple[str, ...] = ()
        self._subscribed_regex: str | None = None
        self._subscription_updated = False

        # Coordinator as the coordinator manager last told us.
        self._coordinator_known = False

        # Assignment: what the member owns (by name), what it reported (by id), the target.
        self._assignment: frozenset[TopicPartition] = frozenset()
        self._awaiting_callback: frozenset[TopicPartition] = frozenset()
        self._pending_revocation: frozenset[TopicPartition] = frozenset()
        self._current_assignment = NONE_ASSIGNMENT
        self._target_assignment = NONE_ASSIGNMENT
        self._topic_names: dict[str, str] = {}
        self._names_requested: frozenset[str] | None = None
        self._reconciliation: _Reconciliation | None = None
        self._retry_reconcile_on_app_poll = False

        # Rebalance callbacks: one outstanding, the rest in order.
        self._callback_outstanding: _PendingCallback | None = None
        self._callback_queue: deque[_PendingCallback] = deque()

        # Heartbeat request state (Java HeartbeatRequestState + HeartbeatState).
        self._in_flight: _InFlight | None = None
        self._heartbeat_interval_ms = 0
        self._next_heartbeat_ms = 0
        self._request_state = RequestState(retry_backoff(config, random))
        self._sent = _SentFields()
        self._heartbeat_errors: ConditionLog[int] = ConditionLog()

        # Poll timer (max.poll.interval.ms) and the stale member it can produce.
        self._poll_deadline_ms: int | None = None
        self._leaving_due_to_poll_timer = False
        self._stale_released = False
        self._stale_rejoin_requested = False

        # Leave in progress.
        self._leave_in_progress = False
        self._leave_deadline_ms: int | None = None

    # -- Observability ------------------------------------------------------------------------

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
        return self._current_assignment

    @property
    def target_assignment(self) -> LocalAssignment:
        return self._target_assignment

    @property
    def heartbeat_interval_ms(self) -> int:
        return self._heartbeat_interval_ms

    @property
    def request_in_flight(self) -> bool:
        return self._in_flight is not None

    @property
    def reconciliation_in_progress(self) -> bool:
        return self._reconciliation is not None

    @property
    def subscription(self) -> tuple[str, ...]:
        return self._subscribed_topics

    @property
    def subscribed_regex(self) -> str | None:
        return self._subscribed_regex

    @property
    def coordinator_known(self) -> bool:
        return self._coordinator_known

    @property
    def leave_in_progress(self) -> bool:
        return self._leave_in_progress

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
        self, now_ms: int, *, deadline_ms: int | None = None, run_callbacks: bool = True
    ) -> None:
        """Unsubscribe / close: release the assignment, then send the leave heartbeat.

        :class:`LeaveCompleted` is published when the leave is over: on the leave heartbeat's
        response or failure, when it cannot be sent (no coordinator, fenced, fatal), at once when
        the member is not in the group, or at ``deadline_ms`` (``timed_out=True``).
        """
        self._subscribed_topics = ()
        self._subscribed_regex = None
        self._subscription_updated = False
        state = self._state
        if state in _NOT_IN_GROUP_STATES:
            if state is MemberState.FENCED:
                # The pending onPartitionsLost clears the assignment when it completes (Java
                # clears at once); it will not rejoin once the member is UNSUBSCRIBED.
                self._transition_to(MemberState.UNSUBSCRIBED)
            if not self._leave_in_progress:
                self._events.append(LeaveCompleted())
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
        owned = self._assignment
        if not run_callbacks:
            self._on_release_on_leave_done(None)
        elif self._member_epoch > 0:
            self._pause_fetching(owned)
            self._request_callback(
                RebalanceCallback.ON_PARTITIONS_REVOKED, owned, _CallbackPurpose.RELEASE_ON_LEAVE
            )
        else:
            self._request_callback(
                RebalanceCallback.ON_PARTITIONS_LOST, owned, _CallbackPurpose.RELEASE_ON_LEAVE
            )

    def on_coordinator_discovered(self, now_ms: int) -> None:
        self._coordinator_known = True

    def on_coordinator_unknown(self, now_ms: int) -> None:
        self._coordinator_known = False

    def on_topic_names(self, mapping: Mapping[str, str]) -> None:
        """Topic id -> name, as the metadata manager knows them (ids never change names)."""
        self._topic_names.update(mapping)
        self._names_requested = None

    def on_commit_done(self, commit_id: int, error: BaseException | None = None) -> None:
        rec = self._reconciliation
        if rec is None or rec.commit_id != commit_id:
            self._log.debug("commit_done_ignored", commit_id=commit_id)
            return
        rec.commit_id = None
        if error is not None:
            self._log.error(
                "auto_commit_before_reconciliation_failed", error=repr(error), proceeding=True
            )
        if self._maybe_abort_reconciliation(rec):
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
        requests = self._poll_heartbeat(now_ms)
        self._maybe_reconcile(now_ms, can_commit=False)
        events = self._drain_events()
        return PollResult(
            requests=requests,
            time_until_next_poll_ms=self._time_until_next_poll(now_ms),
            events=events,
        )

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        in_flight = self._take_in_flight(request_id)
        if in_flight is None:
            return
        code = int(response.error_code)
        message: str | None = response.error_message
        if in_flight.kind is _RequestKind.LEAVE_IGNORED:
            self._log.debug("leave_heartbeat_response_ignored", error_code=code)
            return
        if in_flight.kind is _RequestKind.LEAVE:
            self._log.info("leave_heartbeat_completed", error_code=code)
            self._complete_leave()
            if code != 0:
                self._on_leave_error(code, message)
            return
        if code == 0:
            interval = _millis(response.heartbeat_interval)
            if interval != self._heartbeat_interval_ms:
                self._heartbeat_interval_ms = interval
                self._next_heartbeat_ms = now_ms + interval
            self._reset_request_state()
            self._on_heartbeat_success(response, now_ms)
        else:
            self._on_error_response(code, message, now_ms)

    def on_failure(self, request_id: int, error: BaseException, now_ms: int) -> None:
        in_flight = self._take_in_flight(request_id)
        if in_flight is None:
            return
        retriable = isinstance(error, KafkaError) and error.retriable
        if in_flight.kind is not _RequestKind.HEARTBEAT:
            self._log.info("leave_heartbeat_failed", error=repr(error))
            if in_flight.kind is _RequestKind.LEAVE:
                self._complete_leave()
            if isinstance(error, (KafkaConnectionError, KafkaTimeoutError)):
                self._mark_coordinator_unknown(f"leave heartbeat failed: {error}")
            return
        self._on_failed_attempt(now_ms)
        self._reset_heartbeat_state()
        if retriable:
            if isinstance(error, (KafkaConnectionError, KafkaTimeoutError)):
                self._mark_coordinator_unknown(f"heartbeat failed: {error}")
            self._log.debug(
                "heartbeat_failed_retriable",
                error=repr(error),
                backoff_ms=self._remaining_backoff_ms(now_ms),
            )
            return
        kafka_error = (
            error
            if isinstance(error, KafkaError)
            else FatalConsumerError(f"heartbeat failed: {error!r}")
        )
        if kafka_error is not error:
            kafka_error.__cause__ = error
        self._transition_to_fatal(
            kafka_error, consumer_protocol_unsupported=isinstance(error, UnsupportedVersionError)
        )

    # -- Heartbeats ---------------------------------------------------------------------------

    def _time_until_next_poll(self, now_ms: int) -> int | None:
        candidates: list[int] = []
        if self._leave_in_progress and self._leave_deadline_ms is not None:
            candidates.append(max(0, self._leave_deadline_ms - now_ms))
        if self._coordinator_known and self._state not in _SKIP_HEARTBEAT_STATES:
            if self._in_flight is None:
                if self._state is MemberState.LEAVING:
                    candidates.append(0)
                else:
                    backoff = self._remaining_backoff_ms(now_ms)
                    if self._state in _HEARTBEAT_NOW_STATES:
                        candidates.append(backoff)
                    else:
                        candidates.append(max(backoff, self._next_heartbeat_ms - now_ms, 0))
            leaving = self._state in (MemberState.PREPARE_LEAVING, MemberState.LEAVING)
            if self._poll_deadline_ms is not None and not leaving:
                candidates.append(max(0, self._poll_deadline_ms - now_ms))
        return min(candidates) if candidates else None

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
        self._events.append(MemberEpochChanged(self._member_id, epoch if epoch > 0 else None))

    def _leave_group_epoch(self) -> int:
        if self._config.group_instance_id is not None:
            return LEAVE_GROUP_STATIC_MEMBER_EPOCH
        return LEAVE_GROUP_MEMBER_EPOCH

    def _transition_to_joining(self) -> None:
        if self._state is MemberState.FATAL:
            self._log.warning("join_ignored", reason="member is FATAL")
            return
        if self._reconciliation is not None:
            self._reconciliation.rejoined = True
        self._update_member_epoch(JOIN_GROUP_MEMBER_EPOCH)
        self._transition_to(MemberState.JOINING)
        self._target_assignment = NONE_ASSIGNMENT
        self._names_requested = None
        self._retry_reconcile_on_app_poll = False
        self._reset_heartbeat_state()

    def _transition_to_fenced(self) -> None:
        state = self._state
        if state is MemberState.PREPARE_LEAVING:
            # Already leaving: stop heartbeating, do not send the leave, do not rejoin.
            self._transition_to_sending_leave_group(due_to_expired_poll_timer=False)
            self._transition_to(MemberState.UNSUBSCRIBED)
            self._complete_leave()
            return
        if state is MemberState.LEAVING:
            if self._leaving_due_to_poll_timer:
                self._transition_to_stale()
            else:
                self._transition_to(MemberState.UNSUBSCRIBED)
                self._complete_leave()
            return
        if state in _NOT_IN_GROUP_STATES:
            return
        self._transition_to(MemberState.FENCED)
        self._update_member_epoch(JOIN_GROUP_MEMBER_EPOCH)
        self._request_callback(
            RebalanceCallback.ON_PARTITIONS_LOST, self._assignment, _CallbackPurpose.LOST_ON_FENCE
        )

    def _transition_to_fatal(
        self, error: KafkaError, *, consumer_protocol_unsupported: bool = False
    ) -> None:
        self._events.append(
            ErrorEvent(
                error, fatal=True, consumer_protocol_unsupported=consumer_protocol_unsupported
            )
        )
        previous = self._state
        if previous is MemberState.FATAL:
            return
        self._transition_to(MemberState.FATAL)
        self._log.error("member_fatal", error=str(error))
        self._events.append(MemberEpochChanged(self._member_id, None))
        if previous in (MemberState.UNSUBSCRIBED, MemberState.LEAVING, MemberState.PREPARE_LEAVING):
            # Already left or leaving: no lost callback (a running release callback clears).
            self._complete_leave()
            return
        self._request_callback(
            RebalanceCallback.ON_PARTITIONS_LOST, self._assignment, _CallbackPurpose.LOST_ON_FATAL
        )

    def _transition_to_sending_leave_group(self, *, due_to_expired_poll_timer: bool) -> None:
        if self._state in (MemberState.FATAL, MemberState.UNSUBSCRIBED):
            return
        if due_to_expired_poll_timer:
            self._leaving_due_to_poll_timer = True
            # Briefly through PREPARE_LEAVING: a stale member releases (as lost) after leaving.
            self._transition_to(MemberState.PREPARE_LEAVING)
        self._update_member_epoch(self._leave_group_epoch())
        self._current_assignment = NONE_ASSIGNMENT
        self._transition_to(MemberState.LEAVING)

    def _transition_to_stale(self) -> None:
        self._leaving_due_to_poll_timer = False
        self._transition_to(MemberState.STALE)
        self._stale_released = False
        self._request_callback(
            RebalanceCallback.ON_PARTITIONS_LOST, self._assignment, _CallbackPurpose.LOST_ON_STALE
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

    def _complete_leave(self, *, timed_out: bool = False) -> None:
        if self._leave_in_progress:
            self._leave_in_progress = False
            self._leave_deadline_ms = None
            self._events.append(LeaveCompleted(timed_out=timed_out))

    def _check_leave_deadline(self, now_ms: int) -> None:
        deadline = self._leave_deadline_ms
        if not self._leave_in_progress or deadline is None or now_ms < deadline:
            return
        self._log.warning("leave_deadline_passed", state=self._state.value)
        if self._state is MemberState.PREPARE_LEAVING:
            # Stop waiting for the release callback; its late completion only clears again.
            self._clear_assignment()
            self._transition_to_sending_leave_group(due_to_expired_poll_timer=False)
        # Best effort, response ignored: the leave is over for the caller now.
        self._leave_in_progress = False
        self._leave_deadline_ms = None
        if self._state is MemberState.LEAVING and self._in_flight is not None:
            # Never two in flight: give up the leave heartbeat (the session timeout removes us).
            self._transition_to(MemberState.UNSUBSCRIBED)
        # Otherwise a LEAVING member sends its leave (response ignored) in this poll.
        self._events.append(LeaveCompleted(timed_out=True))
