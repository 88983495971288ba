"""Classic consumer group membership (JoinGroup / SyncGroup / Heartbeat / LeaveGroup): pure.

Owns: the classic member's state (:class:`ClassicMemberState`), its generation (generation id,
member id, protocol name), leadership and the leader's assignment (run with the assignors of
:mod:`kafka_actors.protocol.assignors` over every member's subscription), the eager and the
cooperative rebalance protocols, static membership (``group.instance.id``), the heartbeat
schedule Java runs on its heartbeat thread (here: requests returned by :meth:`poll`), the session
timer and the poll timer (``max.poll.interval.ms``), and leaving the group. It follows the Java
client's ``AbstractCoordinator`` / ``ConsumerCoordinator`` (Kafka 3.x/4.x) and publishes the same
events as the KIP-848 manager (:mod:`kafka_actors.protocol.membership`; the event classes of
:mod:`kafka_actors.protocol.group_events`), so the consumer's membership actor can drive either one.
The manager is built from parts: the rebalance (JoinGroup, SyncGroup, the steps around them,
the member states) is :class:`~kafka_actors.protocol.classic_rebalance.ClassicRebalance`, the
heartbeat :class:`~kafka_actors.protocol.classic_heartbeat.ClassicHeartbeat`; this module keeps
the inputs, the transitions and the request-manager contract, and re-exports the public names.

May touch: nothing outside itself. No threads, sockets or clocks: the current time is always a
parameter (``now_ms``) and randomness (backoff jitter) is injected. It builds kio requests with
:mod:`kafka_actors.protocol.requests` and reads kio responses; errors are
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

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafka_actors.errors import (
    ConfigError,
    FatalConsumerError,
    FencedInstanceIdError,
    GroupAuthorizationFailedError,
    GroupMaxSizeReachedError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    error_for_code,
)
from kafka_actors.log import get_logger
from kafka_actors.protocol.assignors import (
    ASSIGNORS,
    RebalanceProtocol,
    rebalance_protocol,
)
from kafka_actors.protocol.classic_heartbeat import ClassicHeartbeat
from kafka_actors.protocol.classic_rebalance import (
    JOIN_GROUP_TIMEOUT_LAPSE_MS,
    NO_GENERATION_ID,
    NO_MEMBER_ID,
    ClassicMemberState,
    NeedPartitionCounts,
    _Callback,
    _Completion,
    _InFlight,
    _Kind,
    _LeaderPending,
    _Leave,
    _Prepare,
    _Purpose,
)
from kafka_actors.protocol.condition_log import ConditionLog
from kafka_actors.protocol.group_events import (
    CoordinatorUnknown,
    ErrorEvent,
    LeaveCompleted,
    MemberEpochChanged,
    RebalanceCallback,
)
from kafka_actors.protocol.messages import (
    PollResult,
    TopicPartition,
    UnsentRequest,
)
from kafka_actors.protocol.request_state import RequestState, retry_backoff

if TYPE_CHECKING:
    from kafka_actors.config import ConsumerConfig

__all__ = [
    "JOIN_GROUP_TIMEOUT_LAPSE_MS",
    "NO_GENERATION_ID",
    "ClassicMemberState",
    "ClassicMembershipConfig",
    "ClassicMembershipManager",
    "NeedPartitionCounts",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassicMembershipConfig:
    """What the classic membership manager needs from the consumer configuration (Java names)."""

    group_id: str
    group_instance_id: str | None = None  # group.instance.id: static membership
    rack_id: str | None = None  # client.rack
    session_timeout_ms: int = 45_000  # session.timeout.ms
    heartbeat_interval_ms: int = 3_000  # heartbeat.interval.ms
    rebalance_timeout_ms: int = 300_000  # max.poll.interval.ms
    assignors: tuple[str, ...] = ("range", "cooperative-sticky")  # partition.assignment.strategy
    auto_commit_enabled: bool = True  # enable.auto.commit
    retry_backoff_ms: int = 100  # retry.backoff.ms
    retry_backoff_max_ms: int = 1_000  # retry.backoff.max.ms
    request_timeout_ms: int = 30_000  # request.timeout.ms
    # Negotiated API versions (the actor passes the coordinator's).
    join_group_version: int = 9
    sync_group_version: int = 5
    heartbeat_version: int = 4
    leave_group_version: int = 5

    def __post_init__(self) -> None:
        if not self.assignors:
            raise ConfigError(
                "partition.assignment.strategy needs at least one assignor",
                key="partition.assignment.strategy",
            )
        unknown = [name for name in self.assignors if name not in ASSIGNORS]
        if unknown:
            raise ConfigError(
                f"unknown assignors {unknown}; known: {', '.join(ASSIGNORS)}",
                key="partition.assignment.strategy",
            )
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(
                "heartbeat.interval.ms must be lower than session.timeout.ms",
                key="heartbeat.interval.ms",
            )

    @classmethod
    def from_consumer_config(
        cls, config: ConsumerConfig, **versions: int
    ) -> ClassicMembershipConfig:
        """From the consumer's configuration; ``versions`` sets the ``*_version`` fields."""
        if config.group_id is None:
            raise ConfigError("group.id is required to join a consumer group", key="group.id")
        return cls(
            group_id=config.group_id,
            group_instance_id=config.group_instance_id,
            rack_id=config.client_rack or None,
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            rebalance_timeout_ms=config.max_poll_interval_ms,
            assignors=tuple(config.partition_assignment_strategy),
            auto_commit_enabled=config.enable_auto_commit,
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
            request_timeout_ms=config.request_timeout_ms,
            **versions,
        )


class ClassicMembershipManager(ClassicHeartbeat):
    """A classic consumer group member (see the module docstring)."""

    _config: ClassicMembershipConfig

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
        self._init_outbox()
        self._outgoing: list[UnsentRequest] = []

        self._state = ClassicMemberState.UNJOINED
        self._generation_id = NO_GENERATION_ID
        self._member_id = NO_MEMBER_ID
        self._protocol_name: str | None = None
        self._leader_id: str | None = None
        self._is_leader = False
        self._published_identity: tuple[str, int | None, bool] = (NO_MEMBER_ID, None, False)

        self._subscription: tuple[str, ...] = ()
        self._joined_subscription: tuple[str, ...] | None = None
        self._coordinator_known = False

        # Assignment.
        self._assignment: frozenset[TopicPartition] = frozenset()
        self._pending_revocation: frozenset[TopicPartition] = frozenset()
        self._awaiting_callback: frozenset[TopicPartition] = frozenset()
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
        self._callback: _Callback | None = None

        # Requests in flight by request id.
        self._in_flight: dict[int, _InFlight] = {}

        # Heartbeat (Java's Heartbeat: heartbeat timer, session timer, poll timer).
        self._heartbeat_request_id: int | None = None
        self._next_heartbeat_ms = 0
        self._heartbeat_state = RequestState(backoff)  # only its failure count is used
        self._heartbeat_errors: ConditionLog[int] = ConditionLog()
        self._session_deadline_ms: int | None = None
        self._poll_deadline_ms: int | None = None

        # Leave.
        self._leave: _Leave | None = None

    # -- Observability ------------------------------------------------------------------------

    @property
    def state(self) -> ClassicMemberState:
        return self._state

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def generation_id(self) -> int:
        return self._generation_id

    @property
    def member_epoch(self) -> int:
        """The generation id (the classic protocol's epoch), for symmetry with KIP-848."""
        return self._generation_id

    @property
    def is_leader(self) -> bool:
        return self._is_leader

    @property
    def leader_id(self) -> str | None:
        return self._leader_id

    @property
    def protocol_name(self) -> str | None:
        """The assignor the group chose in the current generation."""
        return self._protocol_name

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
    def leave_in_progress(self) -> bool:
        return self._leave is not None

    @property
    def heartbeat_in_flight(self) -> bool:
        return self._heartbeat_request_id is not None

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

    def on_poll(self, now_ms: int) -> None:
        """The application polled: reset the poll timer; start a rebalance if one is needed."""
        self._poll_deadline_ms = now_ms + self._config.rebalance_timeout_ms
        if self._state is ClassicMemberState.FATAL or not self._subscription:
            return
        if self._leave is not None:
            return
        if self._rejoin_needed and not self._join_allowed:
            self._log.info("rebalance_started", reason=self._rejoin_reason)
            self._join_allowed = True

    def leave_group(
        self, now_ms: int, *, deadline_ms: int | None = None, run_callbacks: bool = True
    ) -> None:
        """Unsubscribe / close: release the assignment, then LeaveGroup (dynamic members only).

        :class:`LeaveCompleted` is published when the leave is over: on the LeaveGroup outcome,
        at once when no LeaveGroup is sent (static member, not in the group, coordinator
        unknown), or at ``deadline_ms`` (``timed_out=True``).
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
            self._events.append(LeaveCompleted())
            return
        self._log.info("leave_requested", state=self._state.value)
        self._leave = _Leave(deadline_ms, run_callbacks, "the consumer unsubscribed or is closing")
        self._cancel_join_flow()
        self._prepare = None
        self._advance(now_ms)

    def on_coordinator_discovered(self, now_ms: int) -> None:
        self._coordinator_known = True
        # Java resets the session timer when it finds the coordinator.
        self._session_deadline_ms = now_ms + self._config.session_timeout_ms

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
        callback = self._callback
        if callback is None or callback.callback_id != callback_id:
            self._log.warning("callback_completion_ignored", callback_id=callback_id)
            return
        self._callback = None
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
        events = self._drain_events()
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
            self._heartbeat_request_id = None
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
            self._heartbeat_request_id = None
            self._fail_heartbeat(now_ms)
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

    # -- JoinGroup / SyncGroup ------------------------------------------------------------------

    # -- Heartbeats ---------------------------------------------------------------------------

    # -- LeaveGroup ---------------------------------------------------------------------------

    # -- Transitions and helpers --------------------------------------------------------------

    def _transition_to(self, state: ClassicMemberState) -> None:
        if state is self._state:
            return
        self._log.info(
            "member_state_transition",
            from_state=self._state.value,
            to_state=state.value,
            generation_id=self._generation_id,
            member_id=self._member_id,
        )
        self._state = state
        self._publish_identity()

    def _publish_identity(self) -> None:
        stable = self._state is ClassicMemberState.STABLE
        rebalancing = self._state in (
            ClassicMemberState.PREPARING_REBALANCE,
            ClassicMemberState.COMPLETING_REBALANCE,
        )
        identity = (self._member_id, self._generation_id if stable else None, rebalancing)
        if identity != self._published_identity:
            self._published_identity = identity
            self._events.append(MemberEpochChanged(*identity))

    def _set_member_id(self, member_id: str) -> None:
        if member_id != self._member_id:
            self._member_id = member_id
            self._log = self._log.bind(member_id=member_id)

    def _request_rejoin(self, reason: str) -> None:
        if not self._rejoin_needed or self._rejoin_reason != reason:
            self._log.info("rejoin_requested", reason=reason)
        self._rejoin_needed = True
        self._rejoin_reason = reason

    def _reset_state_and_rejoin(self, reason: str, *, reset_member_id: bool) -> None:
        """Java's resetStateAndRejoin: UNJOINED, generation -1 (member id too), rejoin."""
        self._log.info("generation_reset", reason=reason, member_id_reset=reset_member_id)
        self._cancel_join_flow()
        self._generation_id = NO_GENERATION_ID
        self._protocol_name = None
        self._is_leader = False
        self._leader_id = None
        self._assignment_snapshot = None
        if reset_member_id:
            self._set_member_id(NO_MEMBER_ID)
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
        self._events.append(CoordinatorUnknown(reason))

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
        self._events.append(ErrorEvent(error, fatal=True))
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
            self._events.append(LeaveCompleted())

    def _emit_callback(
        self,
        method: RebalanceCallback,
        partitions: frozenset[TopicPartition],
        purpose: _Purpose,
        owner: object | None,
        *,
        assignment: frozenset[TopicPartition] = frozenset(),
    ) -> None:
        callback = _Callback(self._new_id(), method, partitions, purpose, owner)
        self._callback = callback
        self._publish_callback(method, partitions, callback.callback_id, assignment)

    def _run_continuation(self, callback: _Callback) -> None:
        purpose = callback.purpose
        owner = callback.owner
        if purpose is _Purpose.PREPARE:
            assert isinstance(owner, _Prepare)
            self._finish_prepare(owner)
        elif purpose is _Purpose.COMPLETE_REVOKE:
            assert isinstance(owner, _Completion)
            self._set_assignment(self._assignment - owner.revoked)
            if self._completion is owner:
                owner.step = "assign"
        elif purpose is _Purpose.COMPLETE_ASSIGN:
            assert isinstance(owner, _Completion)
            self._awaiting_callback = self._awaiting_callback - callback.partitions
            if self._completion is owner:
                owner.step = "done"
        else:  # LEAVE_RELEASE, LOST_ON_FATAL
            self._set_assignment(frozenset())

    def _time_until_next_poll(self, now_ms: int) -> int | None:
        candidates: list[int] = []
        leave = self._leave
        if leave is not None and leave.deadline_ms is not None:
            candidates.append(max(0, leave.deadline_ms - now_ms))
        if self._heartbeat_enabled():
            if self._heartbeat_request_id is None:
                candidates.append(max(0, self._next_heartbeat_ms - now_ms))
            if self._session_deadline_ms is not None:
                candidates.append(max(0, self._session_deadline_ms - now_ms))
            if self._poll_deadline_ms is not None:
                candidates.append(max(0, self._poll_deadline_ms - now_ms))
        if (
            self._join_allowed
            and self._rejoin_needed
            and self._join_phase is None
            and self._join_state.backoff_until_ms is not None
            and self._coordinator_known
        ):
            candidates.append(self._join_state.remaining_backoff_ms(now_ms))
        return min(candidates) if candidates else None
