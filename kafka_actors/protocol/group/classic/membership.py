"""Classic consumer group membership (JoinGroup / SyncGroup / Heartbeat / LeaveGroup): pure.

Owns: the classic member's state (:class:`ClassicMemberState`), its generation (generation id,
member id, protocol name), leadership and the leader's assignment (run with the assignors of
:mod:`kafka_actors.protocol.group.classic.assignors` over every member's subscription), the eager
and the cooperative rebalance protocols, static membership (``group.instance.id``), the heartbeat
schedule Java runs on its heartbeat thread (here: requests returned by :meth:`poll`), the session
timer and the poll timer (``max.poll.interval.ms``), and leaving the group. It follows the Java
client's ``AbstractCoordinator`` / ``ConsumerCoordinator`` (Kafka 3.x/4.x) and publishes the same
events as the KIP-848 manager (:mod:`kafka_actors.protocol.group.consumer.membership`; the event
classes of :mod:`kafka_actors.protocol.group.events`), so the consumer's membership actor can
drive either one.
The manager is one class, as Java's ``AbstractCoordinator``: the rebalance flow (join prepare,
JoinGroup, SyncGroup, join complete, leave), the transitions and the request-manager contract
read and write the same fields. It composes objects that own their state: the heartbeat timers
(:class:`~kafka_actors.protocol.group.classic.heartbeat.ClassicHeartbeat`, Java's ``Heartbeat``),
the owned partitions (:class:`~kafka_actors.protocol.group.owned_partitions.OwnedPartitions`), the
outstanding rebalance callback
(:class:`~kafka_actors.protocol.group.classic.rebalance.RebalanceCallbacks`) and the outbox
(:class:`~kafka_actors.protocol.request_state.Outbox`); the generation is a value
(:class:`~kafka_actors.protocol.group.classic.rebalance.Generation`) the rebalance replaces and the
heartbeat sends. The rebalance's vocabulary and pure parts (member states, JoinGroup metadata, the
leader's assignment) are :mod:`kafka_actors.protocol.group.classic.rebalance`, the configuration
:mod:`kafka_actors.protocol.group.classic.config`.

May touch: nothing outside itself. No threads, sockets or clocks: the current time is always a
parameter (``now_ms``) and randomness (backoff jitter) is injected. It builds kio requests with
:mod:`kafka_actors.protocol.wire.requests` and reads kio responses; errors are
:mod:`kafka_actors.errors` classes.

How it is driven (the request-manager contract of :mod:`kafka_actors.protocol.messages`):

* inputs: :meth:`~ClassicMembershipManager.subscribe`, :meth:`~ClassicMembershipManager.on_poll`
  (each application poll), :meth:`~ClassicMembershipManager.leave_group` (unsubscribe/close),
  :meth:`~ClassicMembershipManager.on_coordinator_discovered` /
  :meth:`~ClassicMembershipManager.on_coordinator_unknown`,
  :meth:`~ClassicMembershipManager.on_partition_counts` (the answer to
  :class:`NeedPartitionCounts`, or a cluster update),
  :meth:`~ClassicMembershipManager.on_commit_done`,
  :meth:`~ClassicMembershipManager.on_callback_completed`, and the outcome of requests
  (:meth:`~ClassicMembershipManager.on_response` / :meth:`~ClassicMembershipManager.on_failure`);
* outputs: :meth:`~ClassicMembershipManager.poll` returns the requests to send now and every
  event published since the last poll, in order. The actor calls ``poll`` after each input and
  when ``time_until_next_poll_ms`` has passed.

The rebalance, step by step (as Java's ``joinGroupIfNeeded``):

1. A rejoin is needed (first subscription, REBALANCE_IN_PROGRESS in a heartbeat, a reset
   generation, a changed subscription, a leader's metadata change). As Java, the rebalance starts
   from an application poll (:meth:`on_poll`); once started it runs to its end without further
   polls (retries, the cooperative second round).
2. Join prepare (Java ``onJoinPrepare``): with auto-commit and a valid generation,
   :class:`CommitBeforeRevocation` first (eager: :class:`PauseFetching` of everything before);
   then, if the generation was reset, onPartitionsLost for everything owned; else eager:
   onPartitionsRevoked for everything owned (even nothing, as Java), cooperative:
   onPartitionsRevoked only for partitions of topics no longer subscribed. The JoinGroup waits
   for the callback's reply.
3. JoinGroup (one protocol per configured assignor: subscription with owned partitions,
   generation and rack). MEMBER_ID_REQUIRED: join again at once with the given member id.
4. The leader asks for partition counts of every member's topics (:class:`NeedPartitionCounts`),
   runs the broker-chosen assignor and sends every assignment in SyncGroup; followers send none.
5. SyncGroup succeeded: STABLE. Cooperative: onPartitionsRevoked for owned partitions not in the
   new assignment (then a rejoin is requested: the second round starts as soon as this one ends),
   then onPartitionsAssigned with the added partitions (always, even none, as Java).

Choices where Java leaves room (or where this design differs), in one place:

* Rebalance callbacks are events with replies (one outstanding at a time); a callback's error is
  logged and the rebalance continues, as Java continues and rethrows at the end of the poll (the
  facade, which ran the listener, reports it to the user).
* Partitions given up (onPartitionsRevoked or onPartitionsLost) are marked pending revocation
  (:class:`PauseFetching`) before the callback is asked for: the assignment changes only when
  the callback's reply comes back, and the application thread polls on meanwhile; Java clears
  the assignment on that thread as soon as onPartitionsLost returns, so no record of a lost
  partition may be returned after it.
* The onJoinComplete sequence (revoke, assign) is never cut short by a heartbeat error (in Java it
  runs atomically on the application thread); the next join prepare then sees the reset
  generation and releases the partitions as lost. A leave or a fatal error does cut it short.
* The leader's metadata: Java waits for a fresh metadata response; here the leader publishes
  :class:`NeedPartitionCounts` and waits for :meth:`on_partition_counts` with its request id.
  A later cluster update (``request_id=None``) that changes the partition count of a group topic
  makes the leader rejoin (Java's assignment snapshot check) at the next application poll.
* Unexpected heartbeat error codes are logged and retried after backoff (Java's heartbeat
  thread), except GROUP_AUTHORIZATION_FAILED, FENCED_INSTANCE_ID and UNSUPPORTED_VERSION, which
  are fatal. Unexpected non-retriable JoinGroup/SyncGroup codes are fatal (Java throws them from
  poll); retriable ones are retried after backoff.
* The cooperative assignment is not re-validated by the leader (Java's
  validateCooperativeAssignment): the assignors of this package never move an owned partition
  directly.
* Subscribing to a pattern is the caller's business: it resolves the pattern against metadata
  and calls :meth:`subscribe` with the matching names (as Java's classic consumer does).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kafka_actors.errors import (
    CoordinatorLoadInProgressError,
    FatalConsumerError,
    FencedInstanceIdError,
    GroupAuthorizationFailedError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MemberIdRequiredError,
    ProtocolError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnsupportedVersionError,
    error_class_for_code,
    error_for_code,
)
from kafka_actors.log import get_logger
from kafka_actors.protocol.condition_log import ConditionLog
from kafka_actors.protocol.group.classic.assignors import (
    CONSUMER_PROTOCOL_TYPE,
    RebalanceProtocol,
    Subscription,
    decode_assignment,
    rebalance_protocol,
)
from kafka_actors.protocol.group.classic.config import ClassicMembershipConfig
from kafka_actors.protocol.group.classic.heartbeat import ClassicHeartbeat
from kafka_actors.protocol.group.classic.rebalance import (
    COORDINATOR_ERROR_CODES,
    JOIN_FATAL_CODES,
    JOIN_GROUP_TIMEOUT_LAPSE_MS,
    MAX_REASON_LENGTH,
    NO_GENERATION,
    NO_GENERATION_ID,
    NO_MEMBER_ID,
    CallbackPurpose,
    ClassicMemberState,
    Generation,
    NeedPartitionCounts,
    PendingCallback,
    RebalanceCallbacks,
    assign_as_leader,
    decode_member_subscriptions,
    join_protocols,
)
from kafka_actors.protocol.group.events import (
    CommitBeforeRevocation,
    CoordinatorUnknown,
    ErrorEvent,
    LeaveCompleted,
    MemberEpochChanged,
    RebalanceCallback,
)
from kafka_actors.protocol.group.membership_operation import (
    GroupMembershipOperation,
    classic_sends_leave_group,
)
from kafka_actors.protocol.group.owned_partitions import OwnedPartitions
from kafka_actors.protocol.messages import (
    COORDINATOR_NODE,
    PollResult,
    TopicPartition,
    UnsentRequest,
)
from kafka_actors.protocol.request_state import Outbox, RequestState, retry_backoff
from kafka_actors.protocol.wire.requests import (
    join_group_request,
    leave_group_request,
    sync_group_request,
)

__all__ = [
    "JOIN_GROUP_TIMEOUT_LAPSE_MS",
    "NO_GENERATION_ID",
    "ClassicMemberState",
    "ClassicMembershipManager",
    "NeedPartitionCounts",
]


_HEARTBEAT_STATES: Final = frozenset(
    {ClassicMemberState.COMPLETING_REBALANCE, ClassicMemberState.STABLE}
)


class _Kind(enum.Enum):
    JOIN = "join"
    SYNC = "sync"
    HEARTBEAT = "heartbeat"
    LEAVE = "leave"  # the leave of leave_group: its outcome completes the leave
    LEAVE_IGNORED = "leave-ignored"  # poll-timer leave, or after the leave deadline


@dataclass(slots=True)
class _InFlight:
    kind: _Kind
    flow: int  # the join flow it belongs to (join/sync); stale flows are ignored
    generation: Generation  # the generation it was sent in


@dataclass(slots=True)
class _Prepare:
    """Java's onJoinPrepare in progress."""

    lost: bool
    revoked: frozenset[TopicPartition]
    commit_id: int | None = None
    commit_started: bool = False
    callback_started: bool = False
    done: bool = False


@dataclass(slots=True)
class _LeaderPending:
    """A leader waiting for partition counts before it can assign."""

    request_id: int
    flow: int
    protocol: str
    subscriptions: dict[str, Subscription]
    topics: frozenset[str]


@dataclass(slots=True)
class _Completion:
    """Java's onJoinComplete in progress (after a successful SyncGroup)."""

    assigned: frozenset[TopicPartition]
    generation_id: int
    step: str = "start"  # start -> revoking -> assign -> assigning -> done
    revoked: frozenset[TopicPartition] = frozenset()


@dataclass(slots=True)
class _Leave:
    deadline_ms: int | None
    run_callbacks: bool
    reason: str
    operation: GroupMembershipOperation = "default"
    released: bool = False
    sent: bool = False
    request_id: int | None = None


class ClassicMembershipManager:
    """A classic consumer group member (see the module docstring).

    Composed of the objects that own their state: the outbox (events and request ids), the owned
    partitions, the rebalance callbacks and the heartbeat timers; the generation is a value the
    rebalance replaces and the heartbeat sends. The fields below are the rebalance's own.
    """

    def __init__(
        self,
        config: ClassicMembershipConfig,
        *,
        random: Callable[[], float],
        client_id: str | None = None,
    ) -> None:
        self._config = config
        self._protocol = rebalance_protocol(config.assignors)
        self._log = get_logger(
            "classic_membership",
            client_id=client_id,
            group_id=config.group_id,
            group_instance_id=config.group_instance_id,
        )
        backoff = retry_backoff(config, random)
        self._outbox = Outbox()
        self._outgoing: list[UnsentRequest] = []

        self._state = ClassicMemberState.UNJOINED
        self._generation = NO_GENERATION
        self._leader_id: str | None = None
        self._is_leader = False
        self._published_identity: tuple[str, int | None, bool] = (NO_MEMBER_ID, None, False)

        self._subscription: tuple[str, ...] = ()
        self._joined_subscription: tuple[str, ...] | None = None
        self._coordinator_known = False

        # Assignment.
        self._owned = OwnedPartitions(self._outbox)
        self._last_assigned: frozenset[TopicPartition] = frozenset()
        self._last_assignment_generation = NO_GENERATION_ID

        # Rebalance (Java: rejoinNeeded, needsJoinPrepare, the join future).
        self._rejoin_needed = True
        self._rejoin_reason = "initialized"
        self._needs_join_prepare = True
        self._join_allowed = False  # an application poll started the rebalance
        self._flow = 0
        self._join_phase: _Kind | None = None  # JOIN / SYNC in flight, or None
        self._join_state = RequestState(backoff)  # JoinGroup/SyncGroup failures and backoff
        self._prepare: _Prepare | None = None
        self._leader_pending: _LeaderPending | None = None
        self._completion: _Completion | None = None
        self._assignment_snapshot: dict[str, int] | None = None

        # Callbacks: at most one outstanding.
        self._callbacks = RebalanceCallbacks(self._outbox)

        # Requests in flight by request id.
        self._in_flight: dict[int, _InFlight] = {}

        # Heartbeat (Java's Heartbeat: heartbeat timer, session timer, poll timer).
        self._heartbeat = ClassicHeartbeat(config, backoff)
        #: Heartbeat errors lasting since the last success (key: error code), for the log.
        self._heartbeat_errors: ConditionLog[int] = ConditionLog()

        # Leave.
        self._leave: _Leave | None = None

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
    def generation(self) -> Generation:
        """The current generation (id, member id, protocol name)."""
        return self._generation

    @property
    def state(self) -> ClassicMemberState:
        return self._state

    @property
    def member_id(self) -> str:
        return self._generation.member_id

    @property
    def generation_id(self) -> int:
        return self._generation.generation_id

    @property
    def member_epoch(self) -> int:
        """The generation id (the classic protocol's epoch), for symmetry with KIP-848."""
        return self._generation.generation_id

    @property
    def is_leader(self) -> bool:
        return self._is_leader

    @property
    def leader_id(self) -> str | None:
        return self._leader_id

    @property
    def protocol_name(self) -> str | None:
        """The assignor the group chose in the current generation."""
        return self._generation.protocol_name

    @property
    def rebalance_protocol(self) -> RebalanceProtocol:
        return self._protocol

    @property
    def subscription(self) -> tuple[str, ...]:
        return self._subscription

    @property
    def coordinator_known(self) -> bool:
        return self._coordinator_known

    @property
    def rejoin_needed(self) -> bool:
        return self._rejoin_needed

    @property
    def rebalance_in_progress(self) -> bool:
        return self._state in (
            ClassicMemberState.PREPARING_REBALANCE,
            ClassicMemberState.COMPLETING_REBALANCE,
        )

    @property
    def leave_in_progress(self) -> bool:
        return self._leave is not None

    @property
    def heartbeat_in_flight(self) -> bool:
        return self._heartbeat.in_flight

    # -- Application events -------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Subscribe to topic names; joins (or rejoins, if they changed) on the next poll."""
        names = tuple(sorted(set(topics)))
        if not names:
            raise ValueError("an empty subscription is an unsubscribe: call leave_group")
        self._subscription = names
        if self._joined_subscription is not None and self._joined_subscription != names:
            self._request_rejoin("subscription changed")
        elif self._state is ClassicMemberState.UNJOINED and self._completion is None:
            self._request_rejoin("subscribed")
        self._log.debug("subscription_updated", topics=names)

    def enforce_rebalance(self, reason: str) -> None:
        """enforceRebalance: rejoin (JoinGroup carrying ``reason``, KIP-800) on the next poll;
        a member already rejoining keeps its rebalance; ignored while leaving or FATAL."""
        if self._leave is not None or self._state is ClassicMemberState.FATAL:
            self._log.info("enforce_rebalance_ignored", state=self._state.value)
            return
        self._request_rejoin(reason)

    def on_poll(self, now_ms: int) -> None:
        """The application polled: reset the poll timer; start a rebalance if one is needed."""
        self._heartbeat.reset_poll_timer(now_ms)
        if self._state is ClassicMemberState.FATAL or not self._subscription:
            return
        if self._leave is not None:
            return
        if self._rejoin_needed and not self._join_allowed:
            self._log.info("rebalance_started", reason=self._rejoin_reason)
            self._join_allowed = True

    def leave_group(
        self,
        now_ms: int,
        *,
        deadline_ms: int | None = None,
        run_callbacks: bool = True,
        operation: GroupMembershipOperation = "default",
    ) -> None:
        """Unsubscribe / close: release the assignment, then LeaveGroup (by default dynamic
        members only; ``operation``, close's membership (KIP-1092), decides:
        :func:`~kafka_actors.protocol.group.membership_operation.classic_sends_leave_group`).

        :class:`LeaveCompleted` is published when the leave is over: on the LeaveGroup outcome,
        at once when no LeaveGroup is sent (static member, "remain", not in the group,
        coordinator unknown), or at ``deadline_ms`` (``timed_out=True``).
        """
        self._subscription = ()
        self._joined_subscription = None
        self._join_allowed = False
        if self._leave is not None:
            if deadline_ms is not None:
                current = self._leave.deadline_ms
                self._leave.deadline_ms = (
                    deadline_ms if current is None else min(current, deadline_ms)
                )
            return
        if self._state is ClassicMemberState.FATAL:
            self._outbox.publish(LeaveCompleted())
            return
        self._log.info("leave_requested", state=self._state.value)
        self._leave = _Leave(
            deadline_ms, run_callbacks, "the consumer unsubscribed or is closing", operation
        )
        self._cancel_join_flow()
        self._prepare = None
        self._advance(now_ms)

    def on_coordinator_discovered(self, now_ms: int) -> None:
        self._coordinator_known = True
        # Java resets the session timer when it finds the coordinator.
        self._heartbeat.reset_session_timeout(now_ms)

    def on_coordinator_unknown(self, now_ms: int) -> None:
        self._coordinator_known = False

    def on_partition_counts(self, request_id: int | None, counts: Mapping[str, int]) -> None:
        """Partition counts per topic: the answer to :class:`NeedPartitionCounts` (its id), or a
        cluster update (``None``) that makes the leader rejoin when a group topic changed."""
        pending = self._leader_pending
        if request_id is not None:
            if pending is None or pending.request_id != request_id:
                self._log.debug("partition_counts_ignored", request_id=request_id)
                return
            self._leader_pending = None
            if pending.flow != self._flow:
                return
            self._assign_as_leader(pending, counts)
            return
        snapshot = self._assignment_snapshot
        if snapshot is None or not self._is_leader or self._state is not ClassicMemberState.STABLE:
            return
        current = {topic: counts[topic] for topic in snapshot if topic in counts}
        if current != snapshot:
            self._log.info("leader_metadata_changed", before=snapshot, after=current)
            self._request_rejoin("cached metadata has changed")

    def on_commit_done(self, commit_id: int, error: BaseException | None = None) -> None:
        prepare = self._prepare
        if prepare is None or prepare.commit_id != commit_id:
            self._log.debug("commit_done_ignored", commit_id=commit_id)
            return
        prepare.commit_id = None
        if error is not None:
            self._log.error("auto_commit_before_rebalance_failed", error=repr(error))

    def on_callback_completed(self, callback_id: int, error: BaseException | None = None) -> None:
        callback = self._callbacks.complete(callback_id)
        if callback is None:
            self._log.warning("callback_completion_ignored", callback_id=callback_id)
            return
        if error is not None:
            self._log.error(
                "rebalance_callback_failed",
                method=callback.method.value,
                partitions=sorted(str(tp) for tp in callback.partitions),
                error=repr(error),
            )
        self._run_continuation(callback)

    # -- Request-manager contract -------------------------------------------------------------

    def poll(self, now_ms: int) -> PollResult:
        """Requests due now (join, sync, heartbeat, leave) and the events published so far."""
        self._check_leave_deadline(now_ms)
        self._advance(now_ms)
        self._poll_heartbeat(now_ms)
        self._advance(now_ms)
        requests = tuple(self._outgoing)
        self._outgoing.clear()
        self._publish_identity()
        events = self._outbox.drain()
        return PollResult(
            requests=requests,
            time_until_next_poll_ms=self._time_until_next_poll(now_ms),
            events=events,
        )

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        in_flight = self._in_flight.pop(request_id, None)
        if in_flight is None:
            self._log.warning("response_for_unknown_request", request_id=request_id)
            return
        kind = in_flight.kind
        if kind is _Kind.HEARTBEAT:
            self._heartbeat.clear_in_flight()
            self._on_heartbeat_response(in_flight, response, now_ms)
        elif kind is _Kind.JOIN:
            self._on_join_response(in_flight, response, now_ms)
        elif kind is _Kind.SYNC:
            self._on_sync_response(in_flight, response, now_ms)
        else:
            self._on_leave_response(in_flight, response, request_id)

    def on_failure(self, request_id: int, error: BaseException, now_ms: int) -> None:
        in_flight = self._in_flight.pop(request_id, None)
        if in_flight is None:
            self._log.warning("failure_for_unknown_request", request_id=request_id)
            return
        disconnected = isinstance(error, (KafkaConnectionError, KafkaTimeoutError))
        kind = in_flight.kind
        self._log.info("request_failed", kind=kind.value, error=repr(error))
        if disconnected:
            self._mark_coordinator_unknown(f"{kind.value} request failed: {error}")
        if kind is _Kind.HEARTBEAT:
            self._heartbeat.clear_in_flight()
            self._heartbeat.fail_heartbeat(now_ms)
        elif kind in (_Kind.JOIN, _Kind.SYNC):
            if in_flight.flow != self._flow:
                return
            self._join_phase = None
            if isinstance(error, KafkaError) and error.retriable:
                self._join_backoff(now_ms)
            else:
                kafka_error = (
                    error
                    if isinstance(error, KafkaError)
                    else FatalConsumerError(f"{kind.value} request failed: {error!r}")
                )
                self._transition_to_fatal(kafka_error)
        elif kind is _Kind.LEAVE:
            self._complete_leave(request_id)

    # -- The rebalance, step by step ----------------------------------------------------------

    def _advance(self, now_ms: int) -> None:
        for _ in range(100):
            if not self._step(now_ms):
                return
        raise AssertionError("classic membership: no fixed point after 100 steps")

    def _step(self, now_ms: int) -> bool:
        """One step of whatever is in progress; False when nothing more can happen now."""
        if self._callbacks.pending is not None:
            return False
        if self._state is ClassicMemberState.FATAL:
            if self._owned.assignment:
                self._owned.pause_fetching(self._owned.assignment)
                self._callbacks.invoke(
                    RebalanceCallback.ON_PARTITIONS_LOST,
                    self._owned.assignment,
                    CallbackPurpose.LOST_ON_FATAL,
                    None,
                )
                return True
            return False
        completion = self._completion
        if completion is not None:
            return self._step_completion(completion)
        if self._leave is not None:
            return self._step_leave(self._leave, now_ms)
        if not self._subscription or not self._rejoin_needed or not self._join_allowed:
            return False
        if self._prepare is not None or self._needs_join_prepare:
            return self._step_prepare(now_ms)
        if self._join_phase is not None or self._leader_pending is not None:
            return False
        if not self._coordinator_known:
            return False
        if not self._join_state.can_send_request(now_ms):
            return False
        self._send_join_group(now_ms)
        return True

    def _step_prepare(self, now_ms: int) -> bool:
        prepare = self._prepare
        if prepare is None:
            self._needs_join_prepare = False
            owned = self._owned.assignment
            lost = (
                self._generation.generation_id == NO_GENERATION_ID
                or self._generation.member_id == NO_MEMBER_ID
            )
            if lost or self._protocol is RebalanceProtocol.EAGER:
                revoked = owned
            else:
                subscribed = set(self._subscription)
                revoked = frozenset(tp for tp in owned if tp.topic not in subscribed)
            prepare = _Prepare(lost=lost, revoked=revoked)
            self._prepare = prepare
            self._log.info(
                "join_prepare",
                generation_id=self._generation.generation_id,
                lost=lost,
                protocol=self._protocol.name,
                revoking=sorted(str(tp) for tp in revoked),
            )
        if not prepare.commit_started:
            prepare.commit_started = True
            if self._config.auto_commit_enabled and not prepare.lost:
                if self._protocol is RebalanceProtocol.EAGER:
                    self._owned.pause_fetching(self._owned.assignment)
                prepare.commit_id = self._outbox.new_id()
                self._outbox.publish(
                    CommitBeforeRevocation(
                        prepare.revoked,
                        now_ms + self._config.rebalance_timeout_ms,
                        prepare.commit_id,
                    )
                )
            return True
        if prepare.commit_id is not None:
            return False  # waiting for the commit
        if not prepare.callback_started:
            prepare.callback_started = True
            if prepare.lost:
                if prepare.revoked:
                    # No record of a lost partition is returned from now on: the assignment
                    # is cleared only when the callback's completion comes back to this actor,
                    # while the application thread polls on (Java clears it on that thread
                    # right after onPartitionsLost returns).
                    self._owned.pause_fetching(prepare.revoked)
                    self._callbacks.invoke(
                        RebalanceCallback.ON_PARTITIONS_LOST,
                        prepare.revoked,
                        CallbackPurpose.PREPARE,
                        prepare,
                    )
                    return True
            elif prepare.revoked or self._protocol is RebalanceProtocol.EAGER:
                # Eager invokes onPartitionsRevoked at every rebalance, even with nothing.
                self._owned.pause_fetching(prepare.revoked)
                self._callbacks.invoke(
                    RebalanceCallback.ON_PARTITIONS_REVOKED,
                    prepare.revoked,
                    CallbackPurpose.PREPARE,
                    prepare,
                )
                return True
            self._finish_prepare(prepare)
            return True
        return False

    def _finish_prepare(self, prepare: _Prepare) -> None:
        if not prepare.done:
            prepare.done = True
            self._owned.set_assignment(self._owned.assignment - prepare.revoked)
        if self._prepare is prepare:
            self._prepare = None
            self._is_leader = False
            self._assignment_snapshot = None

    def _step_completion(self, completion: _Completion) -> bool:
        if self._leave is not None:
            # Leaving: stop here; the leave releases whatever is owned.
            self._completion = None
            self._finish_completion()
            return True
        if completion.step == "start":
            assigned = completion.assigned
            subscribed = set(self._subscription)
            unmatched = sorted(str(tp) for tp in assigned if tp.topic not in subscribed)
            if unmatched:
                self._log.info(
                    "assignment_does_not_match_subscription",
                    unmatched=unmatched,
                    subscription=self._subscription,
                )
                self._completion = None
                self._finish_completion()
                self._request_rejoin("received assignment does not match the subscription")
                return True
            owned = self._owned.assignment
            self._log.info(
                "assignment_received",
                generation_id=completion.generation_id,
                assigned=sorted(str(tp) for tp in assigned),
                owned=sorted(str(tp) for tp in owned),
            )
            if self._protocol is RebalanceProtocol.COOPERATIVE:
                revoked = owned - assigned
                if revoked:
                    completion.revoked = revoked
                    completion.step = "revoking"
                    self._request_rejoin(
                        f"need to revoke partitions {sorted(str(tp) for tp in revoked)} "
                        "as indicated by the current assignment and re-join"
                    )
                    self._owned.pause_fetching(revoked)
                    self._callbacks.invoke(
                        RebalanceCallback.ON_PARTITIONS_REVOKED,
                        revoked,
                        CallbackPurpose.COMPLETE_REVOKE,
                        completion,
                    )
                    return True
            completion.step = "assign"
        if completion.step == "assign":
            assigned = completion.assigned
            added = assigned - self._owned.assignment
            self._owned.set_assignment(assigned)
            self._owned.await_callback(added)
            self._last_assigned = assigned
            self._last_assignment_generation = completion.generation_id
            completion.step = "assigning"
            self._callbacks.invoke(
                RebalanceCallback.ON_PARTITIONS_ASSIGNED,
                added,
                CallbackPurpose.COMPLETE_ASSIGN,
                completion,
                assignment=assigned,
            )
            return True
        if completion.step == "done":
            self._completion = None
            self._finish_completion()
            return True
        return False

    def _finish_completion(self) -> None:
        self._needs_join_prepare = True
        if not self._rejoin_needed:
            self._join_allowed = False
            self._log.info(
                "rebalance_completed",
                generation_id=self._generation.generation_id,
                assignment=sorted(str(tp) for tp in self._owned.assignment),
            )

    # -- JoinGroup / SyncGroup ------------------------------------------------------------------

    def _send_join_group(self, now_ms: int) -> None:
        config = self._config
        self._joined_subscription = self._subscription
        protocols = join_protocols(
            config,
            subscription=self._subscription,
            owned=self._owned.assignment,
            last_assigned=self._last_assigned,
            last_assignment_generation=self._last_assignment_generation,
            generation_id=self._generation.generation_id,
        )
        request = join_group_request(
            config.join_group_version,
            group_id=config.group_id,
            session_timeout_ms=config.session_timeout_ms,
            rebalance_timeout_ms=config.rebalance_timeout_ms,
            member_id=self._generation.member_id,
            protocols=protocols,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            group_instance_id=config.group_instance_id,
            reason=self._rejoin_reason[:MAX_REASON_LENGTH] or None,
        )
        request_id = self._outbox.new_id()
        self._in_flight[request_id] = _InFlight(_Kind.JOIN, self._flow, self._generation)
        self._join_phase = _Kind.JOIN
        self._transition_to(ClassicMemberState.PREPARING_REBALANCE)
        self._log.info(
            "join_group_sent",
            member_id=self._generation.member_id,
            generation_id=self._generation.generation_id,
            owned=len(self._owned.assignment),
            reason=self._rejoin_reason,
        )
        timeout = max(
            config.request_timeout_ms, config.rebalance_timeout_ms + JOIN_GROUP_TIMEOUT_LAPSE_MS
        )
        self._outgoing.append(
            UnsentRequest(
                node=COORDINATOR_NODE, request=request, request_id=request_id, timeout_ms=timeout
            )
        )

    def _on_join_response(self, sent: _InFlight, response: Any, now_ms: int) -> None:
        if sent.flow != self._flow:
            self._log.debug("stale_join_response_ignored")
            return
        self._join_phase = None
        code = int(response.error_code)
        if code == 0:
            protocol_type = getattr(response, "protocol_type", None)
            if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE:
                self._transition_to_fatal(
                    InconsistentGroupProtocolError(
                        f"JoinGroup: protocol type {protocol_type!r}, expected "
                        f"{CONSUMER_PROTOCOL_TYPE!r}"
                    )
                )
                return
            if self._state is not ClassicMemberState.PREPARING_REBALANCE:
                self._log.info("join_response_ignored", state=self._state.value)
                return
            self._join_state.reset()
            self._set_generation(
                Generation(int(response.generation_id), response.member_id, response.protocol_name)
            )
            self._leader_id = response.leader
            self._is_leader = response.leader == self._generation.member_id
            self._transition_to(ClassicMemberState.COMPLETING_REBALANCE)
            self._heartbeat.reset_timeouts(now_ms)  # Java's HeartbeatThread.enable
            self._log.info(
                "joined_group",
                generation_id=self._generation.generation_id,
                protocol=self._generation.protocol_name,
                leader=self._is_leader,
                members=len(response.members),
            )
            if self._is_leader:
                self._on_leader_elected(response)
            else:
                self._send_sync_group(())
            return
        message = getattr(response, "error_message", None)
        self._log.info(
            "join_group_failed", error_code=code, generation_id=sent.generation.generation_id
        )
        if code == MemberIdRequiredError.code:
            self._set_generation(
                dataclasses.replace(
                    self._generation, generation_id=NO_GENERATION_ID, member_id=response.member_id
                )
            )
            self._request_rejoin(
                f"need to re-join with the given member-id: {self._generation.member_id}"
            )
        elif code == UnknownMemberIdError.code:
            if self._generation_unchanged(sent):
                self._reset_state_and_rejoin("JoinGroup: unknown member id", reset_member_id=True)
        elif code == RebalanceInProgressError.code:
            pass  # retry at once
        elif code in COORDINATOR_ERROR_CODES:
            self._mark_coordinator_unknown(f"JoinGroup error code {code}")
            self._join_backoff(now_ms)
        elif code == CoordinatorLoadInProgressError.code:
            self._join_backoff(now_ms)
        elif code in JOIN_FATAL_CODES:
            self._fail_for_code(code, message)
        else:
            self._retry_or_fail(code, message, now_ms)

    def _on_leader_elected(self, response: Any) -> None:
        protocol = self._generation.protocol_name
        if protocol is None or protocol not in self._config.assignors:
            self._transition_to_fatal(
                FatalConsumerError(
                    f"Coordinator selected invalid assignment protocol: {protocol!r}"
                )
            )
            return
        if getattr(response, "skip_assignment", False):
            # KIP-814: a static leader rejoining with unchanged metadata keeps the assignment.
            self._log.info("leader_skips_assignment")
            self._send_sync_group(())
            return
        try:
            subscriptions = decode_member_subscriptions(response.members)
        except ProtocolError as exc:
            self._log.error("member_subscription_undecodable", error=str(exc))
            self._transition_to_fatal(exc)
            return
        topics = frozenset(t for s in subscriptions.values() for t in s.topics)
        request_id = self._outbox.new_id()
        self._leader_pending = _LeaderPending(
            request_id, self._flow, protocol, subscriptions, topics
        )
        self._outbox.publish(NeedPartitionCounts(topics, request_id))

    def _assign_as_leader(self, pending: _LeaderPending, counts: Mapping[str, int]) -> None:
        known, assignments, encoded = assign_as_leader(
            pending.protocol, pending.subscriptions, pending.topics, counts
        )
        self._assignment_snapshot = known
        self._log.info(
            "leader_assigned",
            protocol=pending.protocol,
            members=len(pending.subscriptions),
            assignment={
                member: sorted(str(tp) for tp in a.partitions) for member, a in assignments.items()
            },
        )
        self._send_sync_group(encoded)

    def _send_sync_group(self, assignments: Iterable[tuple[str, bytes]]) -> None:
        config = self._config
        request = sync_group_request(
            config.sync_group_version,
            group_id=config.group_id,
            generation_id=self._generation.generation_id,
            member_id=self._generation.member_id,
            assignments=tuple(assignments),
            group_instance_id=config.group_instance_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=self._generation.protocol_name,
        )
        request_id = self._outbox.new_id()
        self._in_flight[request_id] = _InFlight(_Kind.SYNC, self._flow, self._generation)
        self._join_phase = _Kind.SYNC
        self._outgoing.append(
            UnsentRequest(node=COORDINATOR_NODE, request=request, request_id=request_id)
        )

    def _on_sync_response(self, sent: _InFlight, response: Any, now_ms: int) -> None:
        if sent.flow != self._flow:
            self._log.debug("stale_sync_response_ignored")
            return
        self._join_phase = None
        code = int(response.error_code)
        if code == 0:
            protocol_type = getattr(response, "protocol_type", None)
            protocol_name = getattr(response, "protocol_name", None)
            if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE:
                self._transition_to_fatal(
                    InconsistentGroupProtocolError(
                        f"SyncGroup: protocol type {protocol_type!r}, expected "
                        f"{CONSUMER_PROTOCOL_TYPE!r}"
                    )
                )
                return
            if protocol_name is not None and protocol_name != self._generation.protocol_name:
                self._transition_to_fatal(
                    InconsistentGroupProtocolError(
                        f"SyncGroup: protocol name {protocol_name!r}, expected "
                        f"{self._generation.protocol_name!r}"
                    )
                )
                return
            if self._state is not ClassicMemberState.COMPLETING_REBALANCE:
                self._log.info("sync_response_ignored", state=self._state.value)
                return
            try:
                assignment = decode_assignment(response.assignment)
            except ProtocolError as exc:
                self._transition_to_fatal(exc)
                return
            self._transition_to(ClassicMemberState.STABLE)
            self._rejoin_needed = False
            self._rejoin_reason = ""
            self._log.info("synced_group", generation_id=self._generation.generation_id)
            self._publish_identity()
            self._completion = _Completion(
                assigned=frozenset(assignment.partitions),
                generation_id=self._generation.generation_id,
            )
            return
        message = getattr(response, "error_message", None)
        self._log.info(
            "sync_group_failed", error_code=code, generation_id=sent.generation.generation_id
        )
        if code == RebalanceInProgressError.code:
            self._request_rejoin("SyncGroup: the group began another rebalance")
        elif code in (UnknownMemberIdError.code, IllegalGenerationError.code):
            if self._generation_unchanged(sent):
                self._reset_state_and_rejoin(
                    f"SyncGroup error code {code}",
                    reset_member_id=code == UnknownMemberIdError.code,
                )
        elif code in COORDINATOR_ERROR_CODES:
            self._mark_coordinator_unknown(f"SyncGroup error code {code}")
            self._join_backoff(now_ms)
        elif code in (
            GroupAuthorizationFailedError.code,
            FencedInstanceIdError.code,
            UnsupportedVersionError.code,
        ):
            self._fail_for_code(code, message)
        else:
            self._retry_or_fail(code, message, now_ms)

    def _retry_or_fail(self, code: int, message: str | None, now_ms: int) -> None:
        cls = error_class_for_code(code)
        if cls is not None and cls.retriable:
            self._join_backoff(now_ms)
        else:
            self._fail_for_code(code, message)

    def _join_backoff(self, now_ms: int) -> None:
        self._join_state.on_failed_attempt(now_ms)

    def _generation_unchanged(self, sent: _InFlight) -> bool:
        return sent.generation.same_member(self._generation)

    # -- Heartbeats ---------------------------------------------------------------------------

    def _heartbeat_enabled(self) -> bool:
        return self._state in _HEARTBEAT_STATES and self._coordinator_known

    def _poll_heartbeat(self, now_ms: int) -> None:
        """Java's ``HeartbeatThread.run``, one turn: the session and poll timers, then a
        Heartbeat when one is due."""
        if not self._heartbeat_enabled():
            return
        heartbeat = self._heartbeat
        if heartbeat.check_session_timeout(now_ms):
            self._log.warning(
                "session_timed_out",
                session_timeout_ms=self._config.session_timeout_ms,
            )
            self._mark_coordinator_unknown(
                "session timed out without receiving a heartbeat response"
            )
            return
        if heartbeat.poll_timeout_expired(now_ms):
            self._log.warning(
                "poll_timer_expired",
                max_poll_interval_ms=self._config.rebalance_timeout_ms,
                hint="the poll loop spends too long processing records: increase "
                "max.poll.interval.ms or reduce max.poll.records",
            )
            self._maybe_leave_group("consumer poll timeout has expired.", _Kind.LEAVE_IGNORED)
            # Rejoin on the next application poll (which releases the partitions as lost).
            self._join_allowed = False
            return
        if not heartbeat.should_heartbeat(now_ms):
            return
        request = heartbeat.heartbeat_request(self._generation)
        request_id = self._outbox.new_id()
        self._in_flight[request_id] = _InFlight(_Kind.HEARTBEAT, self._flow, self._generation)
        heartbeat.sent_heartbeat(request_id, now_ms)
        self._log.debug("heartbeat_sent", generation_id=self._generation.generation_id)
        self._outgoing.append(
            UnsentRequest(node=COORDINATOR_NODE, request=request, request_id=request_id)
        )

    def _on_heartbeat_response(self, sent: _InFlight, response: Any, now_ms: int) -> None:
        code = int(response.error_code)
        if self._state is ClassicMemberState.FATAL:
            return
        if code == 0:
            self._heartbeat.receive_heartbeat(now_ms)
            for error_code, cleared in self._heartbeat_errors.cleared_all(now_ms):
                self._log.info("heartbeat_error_cleared", error_code=error_code, **cleared.fields())
            return
        if (report := self._heartbeat_errors.occurred(code, now_ms)) is not None:
            self._log.info(
                "heartbeat_error",
                error_code=code,
                state=self._state.value,
                generation_id=sent.generation.generation_id,
                **report.fields(),
            )
        if code == RebalanceInProgressError.code:
            # Counts as a received heartbeat (the session is alive).
            self._heartbeat.reset_session_timeout(now_ms)
            if self._state is ClassicMemberState.STABLE:
                self._request_rejoin("group is already rebalancing")
            return
        self._heartbeat.fail_heartbeat(now_ms)
        if code in COORDINATOR_ERROR_CODES:
            self._mark_coordinator_unknown(f"heartbeat error code {code}")
        elif code in (
            IllegalGenerationError.code,
            UnknownMemberIdError.code,
            FencedInstanceIdError.code,
        ):
            if not self._generation_unchanged(sent):
                self._log.info("stale_heartbeat_error_ignored", error_code=code)
                return
            self._reset_state_and_rejoin(
                f"heartbeat error code {code}", reset_member_id=code != IllegalGenerationError.code
            )
            if code == FencedInstanceIdError.code:
                self._fail_for_code(code, None)
        elif code in (GroupAuthorizationFailedError.code, UnsupportedVersionError.code):
            self._fail_for_code(code, None)
        elif report is not None:
            self._log.warning("unexpected_heartbeat_error", error_code=code, **report.fields())

    # -- LeaveGroup ---------------------------------------------------------------------------

    def _step_leave(self, leave: _Leave, now_ms: int) -> bool:
        if not leave.released:
            leave.released = True
            owned = self._owned.assignment
            if owned and leave.run_callbacks:
                lost = (
                    self._generation.generation_id == NO_GENERATION_ID
                    or self._generation.member_id == NO_MEMBER_ID
                    or self.rebalance_in_progress
                )
                method = (
                    RebalanceCallback.ON_PARTITIONS_LOST
                    if lost
                    else RebalanceCallback.ON_PARTITIONS_REVOKED
                )
                self._owned.pause_fetching(owned)
                self._callbacks.invoke(method, owned, CallbackPurpose.LEAVE_RELEASE, leave)
                return True
            self._owned.set_assignment(frozenset())
            return True
        if not leave.sent:
            leave.sent = True
            request_id = self._maybe_leave_group(leave.reason, _Kind.LEAVE, leave.operation)
            leave.request_id = request_id
            if request_id is None:
                self._complete_leave(None)
            return True
        return False

    def _maybe_leave_group(
        self, reason: str, kind: _Kind, operation: GroupMembershipOperation = "default"
    ) -> int | None:
        """Java's maybeLeaveGroup: LeaveGroup for a member in the group (by default a dynamic
        one; a static one too with "leave", as its LeaveGroup v3+ identity), then reset."""
        request_id: int | None = None
        instance_id = self._config.group_instance_id
        version = self._config.leave_group_version
        if (
            classic_sends_leave_group(operation, static=instance_id is not None)
            and (instance_id is None or version >= 3)
            and self._coordinator_known
            and self._state is not ClassicMemberState.UNJOINED
            and self._generation.member_id != NO_MEMBER_ID
        ):
            request_id = self._outbox.new_id()
            request = leave_group_request(
                version,
                group_id=self._config.group_id,
                member_id=self._generation.member_id,
                group_instance_id=instance_id,
                reason=reason[:MAX_REASON_LENGTH],
            )
            self._in_flight[request_id] = _InFlight(kind, self._flow, self._generation)
            self._outgoing.append(
                UnsentRequest(node=COORDINATOR_NODE, request=request, request_id=request_id)
            )
            self._log.info("leave_group_sent", member_id=self._generation.member_id, reason=reason)
        else:
            self._log.info(
                "leave_group_not_sent",
                static=instance_id is not None,
                operation=operation,
                coordinator_known=self._coordinator_known,
                state=self._state.value,
            )
        self._reset_state_and_rejoin(reason, reset_member_id=True)
        return request_id

    def _complete_leave(self, request_id: int | None, *, timed_out: bool = False) -> None:
        leave = self._leave
        if leave is None or (request_id is not None and leave.request_id != request_id):
            return
        self._leave = None
        self._outbox.publish(LeaveCompleted(timed_out=timed_out))
        self._log.info("leave_completed", timed_out=timed_out)

    def _check_leave_deadline(self, now_ms: int) -> None:
        leave = self._leave
        if leave is None or leave.deadline_ms is None or now_ms < leave.deadline_ms:
            return
        self._log.warning("leave_deadline_passed", released=leave.released, sent=leave.sent)
        if not leave.released or self._callbacks.pending is not None:
            # Stop waiting for the release callback (its late reply only clears again).
            leave.released = True
            self._owned.set_assignment(frozenset())
        if not leave.sent:
            leave.sent = True
            self._maybe_leave_group(leave.reason, _Kind.LEAVE_IGNORED, leave.operation)
        elif leave.request_id is not None:
            in_flight = self._in_flight.get(leave.request_id)
            if in_flight is not None:
                in_flight.kind = _Kind.LEAVE_IGNORED
        self._leave = None
        self._outbox.publish(LeaveCompleted(timed_out=True))

    def _on_leave_response(self, sent: _InFlight, response: Any, request_id: int) -> None:
        code = int(response.error_code)
        member_codes = [int(m.error_code) for m in getattr(response, "members", ())]
        self._log.info("leave_group_response", error_code=code, member_error_codes=member_codes)
        if code in COORDINATOR_ERROR_CODES:
            self._mark_coordinator_unknown(f"LeaveGroup error code {code}")
        if sent.kind is _Kind.LEAVE:
            self._complete_leave(request_id)

    # -- Transitions and helpers --------------------------------------------------------------

    def _transition_to(self, state: ClassicMemberState) -> None:
        if state is self._state:
            return
        self._log.info(
            "member_state_transition",
            from_state=self._state.value,
            to_state=state.value,
            generation_id=self._generation.generation_id,
            member_id=self._generation.member_id,
        )
        self._state = state
        self._publish_identity()

    def _publish_identity(self) -> None:
        stable = self._state is ClassicMemberState.STABLE
        rebalancing = self._state in (
            ClassicMemberState.PREPARING_REBALANCE,
            ClassicMemberState.COMPLETING_REBALANCE,
        )
        identity = (
            self._generation.member_id,
            self._generation.generation_id if stable else None,
            rebalancing,
        )
        if identity != self._published_identity:
            self._published_identity = identity
            self._outbox.publish(MemberEpochChanged(*identity))

    def _set_member_id(self, member_id: str) -> None:
        self._set_generation(dataclasses.replace(self._generation, member_id=member_id))

    def _set_generation(self, generation: Generation) -> None:
        if generation.member_id != self._generation.member_id:
            self._log = self._log.bind(member_id=generation.member_id)
        self._generation = generation

    def _request_rejoin(self, reason: str) -> None:
        if not self._rejoin_needed or self._rejoin_reason != reason:
            self._log.info("rejoin_requested", reason=reason)
        self._rejoin_needed = True
        self._rejoin_reason = reason

    def _reset_state_and_rejoin(self, reason: str, *, reset_member_id: bool) -> None:
        """Java's resetStateAndRejoin: UNJOINED, generation -1 (member id too), rejoin."""
        self._log.info("generation_reset", reason=reason, member_id_reset=reset_member_id)
        self._cancel_join_flow()
        self._set_generation(
            Generation(member_id=NO_MEMBER_ID if reset_member_id else self._generation.member_id)
        )
        self._is_leader = False
        self._leader_id = None
        self._assignment_snapshot = None
        self._transition_to(ClassicMemberState.UNJOINED)
        self._request_rejoin(reason)
        self._needs_join_prepare = True

    def _cancel_join_flow(self) -> None:
        self._flow += 1
        self._join_phase = None
        self._leader_pending = None
        self._join_state.clear_backoff()

    def _mark_coordinator_unknown(self, reason: str) -> None:
        if self._coordinator_known:
            self._log.info("coordinator_unknown", reason=reason)
        self._coordinator_known = False
        self._outbox.publish(CoordinatorUnknown(reason))

    def _fail_for_code(self, code: int, message: str | None) -> None:
        error: KafkaError
        if code == GroupAuthorizationFailedError.code:
            error = GroupAuthorizationFailedError(
                f"Not authorized to access group: {self._config.group_id}"
            )
        elif code == GroupMaxSizeReachedError.code:
            error = GroupMaxSizeReachedError(
                f"Consumer group {self._config.group_id} already has the configured maximum "
                "number of members."
            )
        elif code == FencedInstanceIdError.code:
            error = FencedInstanceIdError(
                f"The group instance id {self._config.group_instance_id} has been fenced by "
                "another instance"
            )
        else:
            error = error_for_code(code, message)
        self._transition_to_fatal(error)

    def _transition_to_fatal(self, error: KafkaError) -> None:
        self._outbox.publish(ErrorEvent(error, fatal=True))
        if self._state is ClassicMemberState.FATAL:
            return
        self._log.error("member_fatal", error=str(error))
        self._cancel_join_flow()
        self._prepare = None
        self._completion = None
        self._join_allowed = False
        self._transition_to(ClassicMemberState.FATAL)
        if self._leave is not None:
            self._leave = None
            self._outbox.publish(LeaveCompleted())

    def _run_continuation(self, callback: PendingCallback) -> None:
        purpose = callback.purpose
        owner = callback.owner
        if purpose is CallbackPurpose.PREPARE:
            assert isinstance(owner, _Prepare)
            self._finish_prepare(owner)
        elif purpose is CallbackPurpose.COMPLETE_REVOKE:
            assert isinstance(owner, _Completion)
            self._owned.set_assignment(self._owned.assignment - owner.revoked)
            if self._completion is owner:
                owner.step = "assign"
        elif purpose is CallbackPurpose.COMPLETE_ASSIGN:
            assert isinstance(owner, _Completion)
            self._owned.callback_done(callback.partitions)
            if self._completion is owner:
                owner.step = "done"
        else:  # LEAVE_RELEASE, LOST_ON_FATAL
            self._owned.set_assignment(frozenset())

    def _time_until_next_poll(self, now_ms: int) -> int | None:
        candidates: list[int] = []
        leave = self._leave
        if leave is not None and leave.deadline_ms is not None:
            candidates.append(max(0, leave.deadline_ms - now_ms))
        if self._heartbeat_enabled():
            heartbeat = self._heartbeat.time_until_next_ms(now_ms)
            if heartbeat is not None:
                candidates.append(heartbeat)
        if (
            self._join_allowed
            and self._rejoin_needed
            and self._join_phase is None
            and self._join_state.backoff_until_ms is not None
            and self._coordinator_known
        ):
            candidates.append(self._join_state.remaining_backoff_ms(now_ms))
        return min(candidates) if candidates else None
