"""The classic rebalance, step by step: JoinGroup, SyncGroup and the work around them.

Owns: the rebalance flow of a classic member (Java's ``AbstractCoordinator.joinGroupIfNeeded``
with ``ConsumerCoordinator.onJoinPrepare`` / ``onJoinComplete``): the preparation (commit,
onPartitionsRevoked/Lost), JoinGroup with its retries and backoff, the leader's assignment (with
the assignors of :mod:`kafka_actors.protocol.assignors`), SyncGroup, the completion
(onPartitionsAssigned, the cooperative follow-up rejoin) and leaving; also the member states
(:class:`ClassicMemberState`) and the request bookkeeping the other halves share. The heartbeat
is :mod:`kafka_actors.protocol.classic_heartbeat`; the inputs, the transitions and the
request-manager contract are the manager's
(:class:`~kafka_actors.protocol.classic_membership.ClassicMembershipManager`), which derives
from both (its module docstring has the choices).

May touch: nothing outside itself; pure (the time is a parameter, backoff jitter injected).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kafka_actors.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FatalConsumerError,
    FencedInstanceIdError,
    GroupAuthorizationFailedError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    KafkaError,
    MemberIdRequiredError,
    NotCoordinatorError,
    ProtocolError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnsupportedVersionError,
    error_class_for_code,
)
from kafka_actors.protocol.assignors import (
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    RebalanceProtocol,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    get_assignor,
)
from kafka_actors.protocol.condition_log import ConditionLog
from kafka_actors.protocol.group_events import (
    CommitBeforeRevocation,
    LeaveCompleted,
    RebalanceCallback,
)
from kafka_actors.protocol.group_member import GroupMemberBase
from kafka_actors.protocol.messages import (
    COORDINATOR_NODE,
    TopicPartition,
    UnsentRequest,
)
from kafka_actors.protocol.request_state import RequestState
from kafka_actors.protocol.requests import (
    join_group_request,
    leave_group_request,
    sync_group_request,
)

if TYPE_CHECKING:
    pass

if TYPE_CHECKING:
    from kafka_actors.protocol.classic_membership import ClassicMembershipConfig


NO_GENERATION_ID: Final = -1


NO_MEMBER_ID: Final = ""


#: JoinGroup may be held by the broker for the whole rebalance timeout: its request timeout is
#: max(request.timeout.ms, rebalance timeout + this lapse), as Java.
JOIN_GROUP_TIMEOUT_LAPSE_MS: Final = 5_000


_MAX_REASON_LENGTH: Final = 255


# Error codes (Kafka's Errors) this manager reacts to by name.
_JOIN_FATAL_CODES: Final = frozenset(
    {
        InconsistentGroupProtocolError.code,
        InvalidSessionTimeoutError.code,
        InvalidGroupIdError.code,
        GroupAuthorizationFailedError.code,
        GroupMaxSizeReachedError.code,
        FencedInstanceIdError.code,
        UnsupportedVersionError.code,
    }
)


_COORDINATOR_CODES: Final = frozenset({CoordinatorNotAvailableError.code, NotCoordinatorError.code})


class ClassicMemberState(enum.Enum):
    """Java's ``AbstractCoordinator.MemberState``, plus FATAL (the member will not recover)."""

    UNJOINED = "UNJOINED"  # not in the group (never joined, left, or generation reset)
    PREPARING_REBALANCE = "PREPARING_REBALANCE"  # JoinGroup sent, waiting for its response
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"  # joined, waiting for the SyncGroup response
    STABLE = "STABLE"  # synced: owns its assignment, heartbeats
    FATAL = "FATAL"


_HEARTBEAT_STATES: Final = frozenset(
    {ClassicMemberState.COMPLETING_REBALANCE, ClassicMemberState.STABLE}
)


@dataclass(frozen=True, slots=True)
class NeedPartitionCounts:
    """The leader needs the partition count of these topics (reply with ``on_partition_counts``
    and this ``request_id``). Ask the cluster fresh: the assignment is computed from the answer;
    topics missing from the answer are left out of the assignment (as Java)."""

    topics: frozenset[str]
    request_id: int


class _Kind(enum.Enum):
    JOIN = "join"
    SYNC = "sync"
    HEARTBEAT = "heartbeat"
    LEAVE = "leave"  # the leave of leave_group: its outcome completes the leave
    LEAVE_IGNORED = "leave-ignored"  # poll-timer leave, or after the leave deadline


class _Purpose(enum.Enum):
    PREPARE = "join-prepare"
    COMPLETE_REVOKE = "complete-revoke"
    COMPLETE_ASSIGN = "complete-assign"
    LEAVE_RELEASE = "leave-release"
    LOST_ON_FATAL = "lost-on-fatal"


@dataclass(slots=True)
class _InFlight:
    kind: _Kind
    flow: int  # the join flow it belongs to (join/sync); stale flows are ignored
    generation_id: int
    member_id: str


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
    released: bool = False
    sent: bool = False
    request_id: int | None = None


@dataclass(slots=True)
class _Callback:
    callback_id: int
    method: RebalanceCallback
    partitions: frozenset[TopicPartition]
    purpose: _Purpose
    owner: object | None


class ClassicRebalance(GroupMemberBase):
    """JoinGroup / SyncGroup and the rebalance steps (see the module docstring).

    :class:`~kafka_actors.protocol.classic_membership.ClassicMembershipManager` owns the state
    (initialized in its ``__init__``) and the transitions this half asks for.
    """

    _config: ClassicMembershipConfig
    _protocol: RebalanceProtocol
    _log: Any
    _outgoing: list[UnsentRequest]
    _state: ClassicMemberState
    _generation_id: int
    _member_id: str
    _protocol_name: str | None
    _leader_id: str | None
    _is_leader: bool
    _subscription: tuple[str, ...]
    _joined_subscription: tuple[str, ...] | None
    _coordinator_known: bool
    _last_assigned: frozenset[TopicPartition]
    _last_assignment_generation: int
    _rejoin_needed: bool
    _rejoin_reason: str
    _needs_join_prepare: bool
    _join_allowed: bool
    _flow: int
    _join_phase: _Kind | None
    _join_state: RequestState
    _prepare: _Prepare | None
    _leader_pending: _LeaderPending | None
    _completion: _Completion | None
    _assignment_snapshot: dict[str, int] | None
    _callback: _Callback | None
    _in_flight: dict[int, _InFlight]
    _heartbeat_request_id: int | None
    _next_heartbeat_ms: int
    _heartbeat_state: RequestState
    #: Heartbeat errors lasting since the last success (key: error code), for the log.
    _heartbeat_errors: ConditionLog[int]
    _session_deadline_ms: int | None
    _poll_deadline_ms: int | None
    _leave: _Leave | None
    # Defined by the manager (transitions, helpers) and the heartbeat half.
    _transition_to: Callable[[ClassicMemberState], None]
    _transition_to_fatal: Callable[[KafkaError], None]
    _publish_identity: Callable[[], None]
    _set_member_id: Callable[[str], None]
    _request_rejoin: Callable[[str], None]
    _reset_state_and_rejoin: Callable[..., None]
    _mark_coordinator_unknown: Callable[[str], None]
    _fail_for_code: Callable[[int, str | None], None]
    _emit_callback: Callable[..., None]
    _enable_heartbeat: Callable[[int], None]

    @property
    def rebalance_in_progress(self) -> bool:
        return self._state in (
            ClassicMemberState.PREPARING_REBALANCE,
            ClassicMemberState.COMPLETING_REBALANCE,
        )

    def _advance(self, now_ms: int) -> None:
        for _ in range(100):
            if not self._step(now_ms):
                return
        raise AssertionError("classic membership: no fixed point after 100 steps")

    def _step(self, now_ms: int) -> bool:
        """One step of whatever is in progress; False when nothing more can happen now."""
        if self._callback is not None:
            return False
        if self._state is ClassicMemberState.FATAL:
            if self._assignment:
                self._emit_callback(
                    RebalanceCallback.ON_PARTITIONS_LOST,
                    self._assignment,
                    _Purpose.LOST_ON_FATAL,
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
            owned = self._assignment
            lost = self._generation_id == NO_GENERATION_ID or self._member_id == NO_MEMBER_ID
            if lost or self._protocol is RebalanceProtocol.EAGER:
                revoked = owned
            else:
                subscribed = set(self._subscription)
                revoked = frozenset(tp for tp in owned if tp.topic not in subscribed)
            prepare = _Prepare(lost=lost, revoked=revoked)
            self._prepare = prepare
            self._log.info(
                "join_prepare",
                generation_id=self._generation_id,
                lost=lost,
                protocol=self._protocol.name,
                revoking=sorted(str(tp) for tp in revoked),
            )
        if not prepare.commit_started:
            prepare.commit_started = True
            if self._config.auto_commit_enabled and not prepare.lost:
                if self._protocol is RebalanceProtocol.EAGER:
                    self._pause_fetching(self._assignment)
                prepare.commit_id = self._new_id()
                self._events.append(
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
                    self._emit_callback(
                        RebalanceCallback.ON_PARTITIONS_LOST,
                        prepare.revoked,
                        _Purpose.PREPARE,
                        prepare,
                    )
                    return True
            elif prepare.revoked or self._protocol is RebalanceProtocol.EAGER:
                # Eager invokes onPartitionsRevoked at every rebalance, even with nothing.
                self._pause_fetching(prepare.revoked)
                self._emit_callback(
                    RebalanceCallback.ON_PARTITIONS_REVOKED,
                    prepare.revoked,
                    _Purpose.PREPARE,
                    prepare,
                )
                return True
            self._finish_prepare(prepare)
            return True
        return False

    def _finish_prepare(self, prepare: _Prepare) -> None:
        if not prepare.done:
            prepare.done = True
            self._set_assignment(self._assignment - prepare.revoked)
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
            owned = self._assignment
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
                    self._pause_fetching(revoked)
                    self._emit_callback(
                        RebalanceCallback.ON_PARTITIONS_REVOKED,
                        revoked,
                        _Purpose.COMPLETE_REVOKE,
                        completion,
                    )
                    return True
            completion.step = "assign"
        if completion.step == "assign":
            assigned = completion.assigned
            added = assigned - self._assignment
            self._set_assignment(assigned)
            self._awaiting_callback = self._awaiting_callback | added
            self._last_assigned = assigned
            self._last_assignment_generation = completion.generation_id
            completion.step = "assigning"
            self._emit_callback(
                RebalanceCallback.ON_PARTITIONS_ASSIGNED,
                added,
                _Purpose.COMPLETE_ASSIGN,
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
                generation_id=self._generation_id,
                assignment=sorted(str(tp) for tp in self._assignment),
            )

    def _step_leave(self, leave: _Leave, now_ms: int) -> bool:
        if not leave.released:
            leave.released = True
            owned = self._assignment
            if owned and leave.run_callbacks:
                lost = (
                    self._generation_id == NO_GENERATION_ID
                    or self._member_id == NO_MEMBER_ID
                    or self.rebalance_in_progress
                )
                if lost:
                    method = RebalanceCallback.ON_PARTITIONS_LOST
                else:
                    method = RebalanceCallback.ON_PARTITIONS_REVOKED
                    self._pause_fetching(owned)
                self._emit_callback(method, owned, _Purpose.LEAVE_RELEASE, leave)
                return True
            self._set_assignment(frozenset())
            return True
        if not leave.sent:
            leave.sent = True
            request_id = self._maybe_leave_group(leave.reason, _Kind.LEAVE)
            leave.request_id = request_id
            if request_id is None:
                self._complete_leave(None)
            return True
        return False

    def _maybe_leave_group(self, reason: str, kind: _Kind) -> int | None:
        """Java's maybeLeaveGroup: LeaveGroup for a dynamic member in the group, then reset."""
        request_id: int | None = None
        if (
            self._config.group_instance_id is None
            and self._coordinator_known
            and self._state is not ClassicMemberState.UNJOINED
            and self._member_id != NO_MEMBER_ID
        ):
            request_id = self._new_id()
            version = self._config.leave_group_version
            request = leave_group_request(
                version,
                group_id=self._config.group_id,
                member_id=self._member_id,
                reason=reason[:_MAX_REASON_LENGTH],
            )
            self._in_flight[request_id] = _InFlight(
                kind, self._flow, self._generation_id, self._member_id
            )
            self._outgoing.append(
                UnsentRequest(node=COORDINATOR_NODE, request=request, request_id=request_id)
            )
            self._log.info("leave_group_sent", member_id=self._member_id, reason=reason)
        else:
            self._log.info(
                "leave_group_not_sent",
                static=self._config.group_instance_id is not None,
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
        self._events.append(LeaveCompleted(timed_out=timed_out))
        self._log.info("leave_completed", timed_out=timed_out)

    def _check_leave_deadline(self, now_ms: int) -> None:
        leave = self._leave
        if leave is None or leave.deadline_ms is None or now_ms < leave.deadline_ms:
            return
        self._log.warning("leave_deadline_passed", released=leave.released, sent=leave.sent)
        if not leave.released or self._callback is not None:
            # Stop waiting for the release callback (its late reply only clears again).
            leave.released = True
            self._set_assignment(frozenset())
        if not leave.sent:
            leave.sent = True
            self._maybe_leave_group(leave.reason, _Kind.LEAVE_IGNORED)
        elif leave.request_id is not None:
            in_flight = self._in_flight.get(leave.request_id)
            if in_flight is not None:
                in_flight.kind = _Kind.LEAVE_IGNORED
        self._leave = None
        self._events.append(LeaveCompleted(timed_out=True))

    def _send_join_group(self, now_ms: int) -> None:
        config = self._config
        self._joined_subscription = self._subscription
        protocols = []
        for name in config.assignors:
            assignor = get_assignor(name)
            if name == "sticky":
                user_data = assignor.subscription_user_data(
                    self._subscription,
                    sorted(self._last_assigned),
                    self._last_assignment_generation,
                )
            else:
                user_data = assignor.subscription_user_data(
                    self._subscription, sorted(self._assignment), self._last_assignment_generation
                )
            subscription = Subscription(
                topics=self._subscription,
                user_data=user_data,
                owned_partitions=tuple(sorted(self._assignment)),
                generation_id=self._generation_id,
                rack_id=config.rack_id,
            )
            protocols.append((name, encode_subscription(subscription)))
        request = join_group_request(
            config.join_group_version,
            group_id=config.group_id,
            session_timeout_ms=config.session_timeout_ms,
            rebalance_timeout_ms=config.rebalance_timeout_ms,
            member_id=self._member_id,
            protocols=protocols,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            group_instance_id=config.group_instance_id,
            reason=self._rejoin_reason[:_MAX_REASON_LENGTH] or None,
        )
        request_id = self._new_id()
        self._in_flight[request_id] = _InFlight(
            _Kind.JOIN, self._flow, self._generation_id, self._member_id
        )
        self._join_phase = _Kind.JOIN
        self._transition_to(ClassicMemberState.PREPARING_REBALANCE)
        self._log.info(
            "join_group_sent",
            member_id=self._member_id,
            generation_id=self._generation_id,
            owned=len(self._assignment),
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
            self._generation_id = int(response.generation_id)
            self._set_member_id(response.member_id)
            self._protocol_name = response.protocol_name
            self._leader_id = response.leader
            self._is_leader = response.leader == self._member_id
            self._transition_to(ClassicMemberState.COMPLETING_REBALANCE)
            self._enable_heartbeat(now_ms)
            self._log.info(
                "joined_group",
                generation_id=self._generation_id,
                protocol=self._protocol_name,
                leader=self._is_leader,
                members=len(response.members),
            )
            if self._is_leader:
                self._on_leader_elected(response)
            else:
                self._send_sync_group(())
            return
        message = getattr(response, "error_message", None)
        self._log.info("join_group_failed", error_code=code, generation_id=sent.generation_id)
        if code == MemberIdRequiredError.code:
            self._generation_id = NO_GENERATION_ID
            self._set_member_id(response.member_id)
            self._request_rejoin(f"need to re-join with the given member-id: {self._member_id}")
        elif code == UnknownMemberIdError.code:
            if self._generation_unchanged(sent):
                self._reset_state_and_rejoin("JoinGroup: unknown member id", reset_member_id=True)
        elif code == RebalanceInProgressError.code:
            pass  # retry at once
        elif code in _COORDINATOR_CODES:
            self._mark_coordinator_unknown(f"JoinGroup error code {code}")
            self._join_backoff(now_ms)
        elif code == CoordinatorLoadInProgressError.code:
            self._join_backoff(now_ms)
        elif code in _JOIN_FATAL_CODES:
            self._fail_for_code(code, message)
        else:
            self._retry_or_fail(code, message, now_ms)

    def _on_leader_elected(self, response: Any) -> None:
        protocol = self._protocol_name
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
        subscriptions: dict[str, Subscription] = {}
        try:
            for member in response.members:
                decoded = decode_subscription(member.metadata)
                subscriptions[member.member_id] = dataclasses.replace(
                    decoded, group_instance_id=member.group_instance_id
                )
        except ProtocolError as exc:
            self._log.error("member_subscription_undecodable", error=str(exc))
            self._transition_to_fatal(exc)
            return
        topics = frozenset(t for s in subscriptions.values() for t in s.topics)
        request_id = self._new_id()
        self._leader_pending = _LeaderPending(
            request_id, self._flow, protocol, subscriptions, topics
        )
        self._events.append(NeedPartitionCounts(topics, request_id))

    def _assign_as_leader(self, pending: _LeaderPending, counts: Mapping[str, int]) -> None:
        known = {topic: int(counts[topic]) for topic in pending.topics if topic in counts}
        assignor = get_assignor(pending.protocol)
        assignments = assignor.assign(known, pending.subscriptions)
        self._assignment_snapshot = known
        self._log.info(
            "leader_assigned",
            protocol=pending.protocol,
            members=len(pending.subscriptions),
            assignment={
                member: sorted(str(tp) for tp in a.partitions) for member, a in assignments.items()
            },
        )
        encoded = [
            (member, encode_assignment(assignments.get(member, Assignment())))
            for member in pending.subscriptions
        ]
        self._send_sync_group(encoded)

    def _send_sync_group(self, assignments: Iterable[tuple[str, bytes]]) -> None:
        config = self._config
        request = sync_group_request(
            config.sync_group_version,
            group_id=config.group_id,
            generation_id=self._generation_id,
            member_id=self._member_id,
            assignments=tuple(assignments),
            group_instance_id=config.group_instance_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=self._protocol_name,
        )
        request_id = self._new_id()
        self._in_flight[request_id] = _InFlight(
            _Kind.SYNC, self._flow, self._generation_id, self._member_id
        )
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
            if protocol_name is not None and protocol_name != self._protocol_name:
                self._transition_to_fatal(
                    InconsistentGroupProtocolError(
                        f"SyncGroup: protocol name {protocol_name!r}, expected "
                        f"{self._protocol_name!r}"
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
            self._log.info("synced_group", generation_id=self._generation_id)
            self._publish_identity()
            self._completion = _Completion(
                assigned=frozenset(assignment.partitions), generation_id=self._generation_id
            )
            return
        message = getattr(response, "error_message", None)
        self._log.info("sync_group_failed", error_code=code, generation_id=sent.generation_id)
        if code == RebalanceInProgressError.code:
            self._request_rejoin("SyncGroup: the group began another rebalance")
        elif code in (UnknownMemberIdError.code, IllegalGenerationError.code):
            if self._generation_unchanged(sent):
                self._reset_state_and_rejoin(
                    f"SyncGroup error code {code}",
                    reset_member_id=code == UnknownMemberIdError.code,
                )
        elif code in _COORDINATOR_CODES:
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
        return sent.generation_id == self._generation_id and sent.member_id == self._member_id
