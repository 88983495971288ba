"""The heartbeat of a KIP-848 member: :class:`HeartbeatRequests`.

Owns: when a ``ConsumerGroupHeartbeat`` is due (interval, "heartbeat now" states, backoff after
failures, never two in flight), the request's fields (only what changed since the last one
sent, Java's ``HeartbeatState``), the leave heartbeat, and the reactions to heartbeat answers
and errors (by error code, through :mod:`kafka_actors.errors`). It follows Java's
``ConsumerHeartbeatRequestManager``; the states, transitions and inputs stay in
:class:`~kafka_actors.protocol.membership.ConsumerMembershipManager`, which derives from it
(the choices are in :mod:`kafka_actors.protocol.membership`).

May touch: nothing outside itself; pure (the time is a parameter, backoff jitter injected).
"""

from __future__ import annotations

import datetime
import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kio.schema.consumer_group_heartbeat.v0 import request as _hb_v0
from kio.schema.consumer_group_heartbeat.v1 import request as _hb_v1
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i32Timedelta

from kafka_actors.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupAuthorizationFailedError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    KafkaError,
    NotCoordinatorError,
    TopicAuthorizationFailedError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
    UnsupportedVersionError,
    error_class_for_code,
    error_for_code,
)
from kafka_actors.protocol.condition_log import ConditionLog
from kafka_actors.protocol.group_events import (
    CoordinatorUnknown,
    ErrorEvent,
)
from kafka_actors.protocol.member_state import MemberState
from kafka_actors.protocol.messages import (
    COORDINATOR_NODE,
    UnsentRequest,
)
from kafka_actors.protocol.reconciliation import (
    AssignmentReconciler,
    LocalAssignment,
)
from kafka_actors.protocol.request_state import (
    RequestState,
)

if TYPE_CHECKING:
    from kafka_actors.protocol.membership import MembershipConfig


CONSUMER_PROTOCOL_NOT_SUPPORTED_MSG: Final = (
    "The broker does not support the consumer group protocol (KIP-848). "
    "Set group.protocol=classic to use the classic protocol until the cluster is upgraded."
)


_REGEX_NOT_SUPPORTED_MSG: Final = (
    "Subscribing to a regular expression needs ConsumerGroupHeartbeat version 1 or newer; "
    "the broker only supports version 0. Upgrade the cluster or subscribe to topic names."
)


# Heartbeat error codes (Kafka's Errors), by the reaction they get.
_FATAL_CODES: Final = frozenset(
    {
        GroupAuthorizationFailedError.code,
        InvalidRequestError.code,
        GroupMaxSizeReachedError.code,
        UnsupportedAssignorError.code,
        UnreleasedInstanceIdError.code,
        FencedInstanceIdError.code,
        InvalidRegularExpressionError.code,
        UnsupportedVersionError.code,
    }
)

_S = MemberState
# States in which no heartbeat is sent (Java shouldSkipHeartbeat).
_SKIP_HEARTBEAT_STATES: Final = frozenset({_S.UNSUBSCRIBED, _S.FATAL, _S.STALE, _S.FENCED})
# States in which the member is not part of the group (Java isNotInGroup).
_NOT_IN_GROUP_STATES: Final = _SKIP_HEARTBEAT_STATES
# States that heartbeat without waiting for the interval (Java shouldHeartbeatNow).
_HEARTBEAT_NOW_STATES: Final = frozenset({_S.JOINING, _S.ACKNOWLEDGING, _S.LEAVING})


class _RequestKind(enum.Enum):
    HEARTBEAT = "heartbeat"
    LEAVE = "leave"  # the leave of leave_group: its outcome completes the leave
    LEAVE_IGNORED = "leave-ignored"  # poll-timer leave or after the leave deadline


@dataclass(slots=True)
class _InFlight:
    request_id: int
    kind: _RequestKind
    sent_ms: int


@dataclass(slots=True)
class _SentFields:
    """Fields of the last heartbeat sent (Java HeartbeatState.SentFields); None = not sent."""

    rebalance_timeout_ms: int | None = None
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    local_assignment: LocalAssignment | None = None


class HeartbeatRequests(AssignmentReconciler):
    """The heartbeat half of the KIP-848 member (see the module docstring).

    :class:`~kafka_actors.protocol.membership.ConsumerMembershipManager` owns the state below
    (initialized in its ``__init__``) and the state transitions this half asks for.
    """

    _config: MembershipConfig
    _request_state: RequestState
    _in_flight: _InFlight | None
    _heartbeat_interval_ms: int
    _next_heartbeat_ms: int
    _sent: _SentFields
    _coordinator_known: bool
    _subscribed_topics: tuple[str, ...]
    _subscribed_regex: str | None
    _subscription_updated: bool
    _poll_deadline_ms: int | None
    _leaving_due_to_poll_timer: bool
    _leave_in_progress: bool
    _leave_deadline_ms: int | None
    #: The heartbeat errors lasting since the last success (key: error code), for the log.
    _heartbeat_errors: ConditionLog[int]
    # State transitions, defined by the manager.
    _transition_to_fenced: Callable[[], None]
    _transition_to_fatal: Callable[..., None]
    _transition_to_stale: Callable[[], None]
    _update_member_epoch: Callable[[int], None]
    _leave_group_epoch: Callable[[], int]
    _complete_leave: Callable[..., None]

    def _poll_heartbeat(self, now_ms: int) -> tuple[UnsentRequest, ...]:
        if not self._coordinator_known or self._state in _SKIP_HEARTBEAT_STATES:
            self._on_heartbeat_request_skipped()
            return ()
        if (
            self._poll_deadline_ms is not None
            and now_ms >= self._poll_deadline_ms
            and self._state not in (MemberState.PREPARE_LEAVING, MemberState.LEAVING)
        ):
            self._log.warning(
                "poll_timer_expired",
                max_poll_interval_ms=self._config.rebalance_timeout_ms,
                hint="the poll loop spends too long processing records: increase "
                "max.poll.interval.ms or reduce max.poll.records",
            )
            self._transition_to_sending_leave_group(due_to_expired_poll_timer=True)
        if self._in_flight is not None:
            return ()
        if self._state is MemberState.LEAVING:
            return (self._send_heartbeat(now_ms),)
        if not self._request_state.can_send_request(now_ms):
            return ()
        if self._state in _HEARTBEAT_NOW_STATES or now_ms >= self._next_heartbeat_ms:
            if self._subscribed_regex is not None and self._config.heartbeat_api_version < 1:
                self._transition_to_fatal(UnsupportedVersionError(_REGEX_NOT_SUPPORTED_MSG))
                return ()
            return (self._send_heartbeat(now_ms),)
        return ()

    def _send_heartbeat(self, now_ms: int) -> UnsentRequest:
        leaving = self._state is MemberState.LEAVING
        request = self._build_leave_request() if leaving else self._build_request()
        request_id = self._new_id()
        if not leaving:
            kind = _RequestKind.HEARTBEAT
        elif self._leaving_due_to_poll_timer or not self._leave_in_progress:
            kind = _RequestKind.LEAVE_IGNORED
        else:
            kind = _RequestKind.LEAVE
        self._in_flight = _InFlight(request_id, kind, now_ms)
        self._next_heartbeat_ms = now_ms + self._heartbeat_interval_ms
        self._log.debug(
            "heartbeat_sent",
            request_id=request_id,
            member_epoch=self._member_epoch,
            state=self._state.value,
            kind=kind.value,
        )
        self._on_heartbeat_request_generated()
        if leaving:
            self._reset_request_state()
            self._reset_heartbeat_state()
        return UnsentRequest(node=COORDINATOR_NODE, request=request, request_id=request_id)

    def _build_request(self) -> Any:
        config = self._config
        sent = self._sent
        send_all = self._state is MemberState.JOINING
        fields: dict[str, Any] = {
            "group_id": GroupId(config.group_id),
            "member_id": self._member_id,
            "member_epoch": i32(self._member_epoch),
            "instance_id": config.group_instance_id,
        }
        if send_all and config.rack_id is not None:
            fields["rack_id"] = config.rack_id
        if send_all or sent.rebalance_timeout_ms != config.rebalance_timeout_ms:
            fields["rebalance_timeout"] = i32Timedelta.parse(
                datetime.timedelta(milliseconds=config.rebalance_timeout_ms)
            )
            sent.rebalance_timeout_ms = config.rebalance_timeout_ms
        names = self._subscribed_topics
        if send_all or names != sent.subscribed_topic_names:
            fields["subscribed_topic_names"] = tuple(TopicName(name) for name in names)
            sent.subscribed_topic_names = names
        regex = self._subscribed_regex
        if config.heartbeat_api_version >= 1 and (send_all or regex != sent.subscribed_topic_regex):
            # An empty string tells the broker there is no regex subscription (or no longer
            # one). The join sends it with the topic names, as librdkafka does: its mock
            # cluster (the embedded default) aborts the process on a join heartbeat that has
            # names and a null regex.
            fields["subscribed_topic_regex"] = regex if regex is not None else ""
            sent.subscribed_topic_regex = regex
        assignor = config.server_assignor
        if assignor is not None and (send_all or assignor != sent.server_assignor):
            fields["server_assignor"] = assignor
            sent.server_assignor = assignor
        local = self._current_assignment
        if send_all or local != sent.local_assignment:
            fields["topic_partitions"] = self._topic_partitions_field(local)
            sent.local_assignment = local
        else:
            fields["topic_partitions"] = None
        module = _hb_v1 if config.heartbeat_api_version >= 1 else _hb_v0
        return module.ConsumerGroupHeartbeatRequest(**fields)

    def _build_leave_request(self) -> Any:
        module = _hb_v1 if self._config.heartbeat_api_version >= 1 else _hb_v0
        return module.ConsumerGroupHeartbeatRequest(
            group_id=GroupId(self._config.group_id),
            member_id=self._member_id,
            member_epoch=i32(self._member_epoch),
            instance_id=self._config.group_instance_id,
            topic_partitions=None,
        )

    def _topic_partitions_field(self, local: LocalAssignment) -> tuple[Any, ...]:
        module = _hb_v1 if self._config.heartbeat_api_version >= 1 else _hb_v0
        return tuple(
            module.TopicPartitions(
                topic_id=uuid.UUID(topic_id), partitions=tuple(i32(p) for p in partitions)
            )
            for topic_id, partitions in local.by_topic().items()
        )

    def _take_in_flight(self, request_id: int) -> _InFlight | None:
        in_flight = self._in_flight
        if in_flight is None or in_flight.request_id != request_id:
            self._log.warning("heartbeat_outcome_for_unknown_request", request_id=request_id)
            return None
        self._in_flight = None
        return in_flight

    def _on_heartbeat_request_generated(self) -> None:
        state = self._state
        if state is MemberState.ACKNOWLEDGING:
            if self._target_assignment_reconciled():
                self._transition_to(MemberState.STABLE)
            else:
                self._transition_to(MemberState.RECONCILING)
        elif state is MemberState.LEAVING:
            if self._leaving_due_to_poll_timer:
                self._transition_to_stale()
            else:
                self._transition_to(MemberState.UNSUBSCRIBED)

    def _on_heartbeat_request_skipped(self) -> None:
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
            self._complete_leave()

    def _on_heartbeat_success(self, response: Any, now_ms: int) -> None:
        for code, cleared in self._heartbeat_errors.cleared_all(now_ms):
            self._log.info("heartbeat_error_cleared", error_code=code, **cleared.fields())
        state = self._state
        epoch = int(response.member_epoch)
        if state is MemberState.LEAVING or state in _NOT_IN_GROUP_STATES:
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
        self._process_assignment_received(partitions)

    def _on_error_response(self, code: int, message: str | None, now_ms: int) -> None:
        if self._state in (MemberState.FENCED, MemberState.STALE, MemberState.FATAL):
            self._log.debug("heartbeat_error_ignored", error_code=code, state=self._state.value)
            return
        self._reset_heartbeat_state()
        self._on_failed_attempt(now_ms)
        if (report := self._heartbeat_errors.occurred(code, now_ms)) is not None:
            self._log.info(
                "heartbeat_error",
                error_code=code,
                error_message=message,
                state=self._state.value,
                member_epoch=self._member_epoch,
                **report.fields(),
            )
        if code in (NotCoordinatorError.code, CoordinatorNotAvailableError.code):
            self._mark_coordinator_unknown(message or f"heartbeat error code {code}")
            # Skip the backoff: heartbeat as soon as the new coordinator is known.
            self._reset_request_state()
        elif code == CoordinatorLoadInProgressError.code:
            pass  # back off and retry
        elif code in (FencedMemberEpochError.code, UnknownMemberIdError.code):
            self._transition_to_fenced()
            # Skip the backoff: rejoin as soon as the assignment is released.
            self._reset_request_state()
        elif code == GroupIdNotFoundError.code and self._state is MemberState.UNSUBSCRIBED:
            # The group is gone (deleted, or another cluster answers) and the member already
            # left it: nothing to fail (Java 4.4 too). In the group, the member cannot go on
            # with its epoch: fatal, as any non-retriable code (below), as Java does.
            self._log.info("heartbeat_group_id_not_found_ignored", state=self._state.value)
        elif code == TopicAuthorizationFailedError.code:
            # Reported on the next call; the member stays so it recovers when ACLs are fixed.
            self._events.append(ErrorEvent(error_for_code(code, message), fatal=False))
        elif code in _FATAL_CODES:
            self._fail_for_code(code, message)
        else:
            cls = error_class_for_code(code)
            if cls is not None and cls.retriable:
                pass  # back off and retry
            else:
                self._fail_for_code(code, message)

    def _on_leave_error(self, code: int, message: str | None) -> None:
        if code in (NotCoordinatorError.code, CoordinatorNotAvailableError.code):
            self._mark_coordinator_unknown(message or f"leave heartbeat error code {code}")
        elif code in _FATAL_CODES and self._state not in (
            MemberState.FENCED,
            MemberState.STALE,
            MemberState.FATAL,
        ):
            self._fail_for_code(code, message)
        else:
            self._log.info("leave_heartbeat_error_ignored", error_code=code, error_message=message)

    def _fail_for_code(self, code: int, message: str | None) -> None:
        if code == GroupAuthorizationFailedError.code:
            error: KafkaError = GroupAuthorizationFailedError(
                f"Not authorized to access group: {self._config.group_id}"
            )
        elif code == UnsupportedVersionError.code:
            error = UnsupportedVersionError(CONSUMER_PROTOCOL_NOT_SUPPORTED_MSG)
        else:
            error = error_for_code(code, message)
        self._log.error("heartbeat_fatal_error", error_code=code, error_message=message)
        self._transition_to_fatal(
            error, consumer_protocol_unsupported=code == UnsupportedVersionError.code
        )

    def _mark_coordinator_unknown(self, reason: str) -> None:
        self._coordinator_known = False
        self._events.append(CoordinatorUnknown(reason))

    def _on_failed_attempt(self, now_ms: int) -> None:
        # Java onFailedAttempt: heartbeat timer reset to 0, then exponential backoff.
        self._next_heartbeat_ms = now_ms
        self._request_state.on_failed_attempt(now_ms)

    def _reset_request_state(self) -> None:
        self._request_state.reset()

    def _reset_heartbeat_state(self) -> None:
        self._sent = _SentFields()

    def _remaining_backoff_ms(self, now_ms: int) -> int:
        return self._request_state.remaining_backoff_ms(now_ms)
