"""The heartbeat of a KIP-848 member: :class:`ConsumerHeartbeatRequestManager`.

Owns: when a ``ConsumerGroupHeartbeat`` is due and whether one is in flight
(:class:`HeartbeatRequestState`: interval, backoff after failures, never two in flight), the
request's fields (:class:`HeartbeatState`: only what changed since the last one sent), whether
the coordinator is known, the leave heartbeat, and the reactions to heartbeat answers and errors
(by error code, through :mod:`kafka_actors.errors`; lasting errors logged through a
:class:`~kafka_actors.protocol.condition_log.ConditionLog`). It follows Java's
``ConsumerHeartbeatRequestManager``, which holds the member: the states, their transitions and
the assignment stay in the member
(:class:`~kafka_actors.protocol.group.consumer.membership.ConsumerMembershipManager`), which this
manager reads and asks for transitions through :class:`HeartbeatMember`. The member builds it and
polls it (the choices are in :mod:`kafka_actors.protocol.group.consumer.membership`).

May touch: nothing outside itself and the member it is given; pure (the time is a parameter,
backoff jitter injected).
"""

from __future__ import annotations

import datetime
import enum
import importlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final, Protocol

from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i32Timedelta

from kafka_actors.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FatalConsumerError,
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupAuthorizationFailedError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
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
from kafka_actors.protocol.group.consumer.config import MembershipConfig
from kafka_actors.protocol.group.consumer.reconciliation import LocalAssignment
from kafka_actors.protocol.group.consumer.states import (
    HEARTBEAT_NOW_STATES,
    SKIP_HEARTBEAT_STATES,
    MemberState,
)
from kafka_actors.protocol.group.events import (
    CoordinatorUnknown,
    ErrorEvent,
)
from kafka_actors.protocol.messages import (
    COORDINATOR_NODE,
    UnsentRequest,
)
from kafka_actors.protocol.request_state import (
    ExponentialBackoff,
    RequestState,
    retry_backoff,
)

__all__ = [
    "CONSUMER_PROTOCOL_NOT_SUPPORTED_MSG",
    "ConsumerHeartbeatRequestManager",
    "HeartbeatMember",
    "HeartbeatRequestState",
    "HeartbeatState",
]


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


def _millis(delta: datetime.timedelta) -> int:
    return delta // datetime.timedelta(milliseconds=1)


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


class HeartbeatMember(Protocol):
    """What the heartbeat request manager reads from the member and asks of it (Java's
    ``ConsumerMembershipManager`` as its heartbeat request manager sees it)."""

    @property
    def state(self) -> MemberState: ...
    @property
    def member_id(self) -> str: ...
    @property
    def member_epoch(self) -> int: ...
    @property
    def current_assignment(self) -> LocalAssignment: ...
    @property
    def subscription(self) -> tuple[str, ...]: ...
    @property
    def subscribed_regex(self) -> str | None: ...
    @property
    def leave_in_progress(self) -> bool: ...
    @property
    def leaving_due_to_poll_timer(self) -> bool: ...
    @property
    def log(self) -> Any: ...
    def poll_timer_expired(self, now_ms: int) -> bool: ...
    def new_id(self) -> int: ...
    def publish(self, event: Any) -> None: ...
    def on_heartbeat_request_generated(self) -> None: ...
    def on_heartbeat_request_skipped(self) -> None: ...
    def on_heartbeat_success(self, response: Any) -> None: ...
    def transition_to_sending_leave_group(self, *, due_to_expired_poll_timer: bool) -> None: ...
    def transition_to_fenced(self) -> None: ...
    def transition_to_fatal(
        self, error: KafkaError, *, consumer_protocol_unsupported: bool = False
    ) -> None: ...
    def complete_leave(self) -> None: ...


class HeartbeatRequestState:
    """When the next heartbeat is due (Java's ``HeartbeatRequestState``): the interval the
    broker gave, the retry backoff after failures, and the one heartbeat in flight."""

    def __init__(self, backoff: ExponentialBackoff) -> None:
        self._request_state = RequestState(backoff)
        self._in_flight: _InFlight | None = None
        self._heartbeat_interval_ms = 0
        self._next_heartbeat_ms = 0

    @property
    def heartbeat_interval_ms(self) -> int:
        return self._heartbeat_interval_ms

    @property
    def request_in_flight(self) -> bool:
        return self._in_flight is not None

    def can_send_request(self, now_ms: int) -> bool:
        return self._request_state.can_send_request(now_ms)

    def heartbeat_interval_passed(self, now_ms: int) -> bool:
        return now_ms >= self._next_heartbeat_ms

    def on_send_attempt(self, request_id: int, kind: _RequestKind, now_ms: int) -> None:
        self._in_flight = _InFlight(request_id, kind, now_ms)
        self._next_heartbeat_ms = now_ms + self._heartbeat_interval_ms

    def take_in_flight(self, request_id: int) -> _InFlight | None:
        """The heartbeat in flight if it is ``request_id`` (then nothing is in flight)."""
        in_flight = self._in_flight
        if in_flight is None or in_flight.request_id != request_id:
            return None
        self._in_flight = None
        return in_flight

    def update_heartbeat_interval_ms(self, interval_ms: int, now_ms: int) -> None:
        if interval_ms != self._heartbeat_interval_ms:
            self._heartbeat_interval_ms = interval_ms
            self._next_heartbeat_ms = now_ms + interval_ms

    def on_failed_attempt(self, now_ms: int) -> None:
        # Java onFailedAttempt: heartbeat timer reset to 0, then exponential backoff.
        self._next_heartbeat_ms = now_ms
        self._request_state.on_failed_attempt(now_ms)

    def reset(self) -> None:
        self._request_state.reset()

    def remaining_backoff_ms(self, now_ms: int) -> int:
        return self._request_state.remaining_backoff_ms(now_ms)

    def time_to_next_heartbeat_ms(self, now_ms: int) -> int:
        return max(self.remaining_backoff_ms(now_ms), self._next_heartbeat_ms - now_ms, 0)


class HeartbeatState:
    """The fields of the next heartbeat request (Java's ``HeartbeatState``): all of them when
    joining, otherwise only those changed since the last heartbeat sent."""

    def __init__(self, config: MembershipConfig) -> None:
        self._config = config
        self._sent = _SentFields()

    def reset(self) -> None:
        self._sent = _SentFields()

    def build_request(self, member: HeartbeatMember) -> Any:
        config = self._config
        sent = self._sent
        send_all = member.state is MemberState.JOINING
        fields: dict[str, Any] = {
            "group_id": GroupId(config.group_id),
            "member_id": member.member_id,
            "member_epoch": i32(member.member_epoch),
            "instance_id": config.group_instance_id,
        }
        if send_all and config.rack_id is not None:
            fields["rack_id"] = config.rack_id
        if send_all or sent.rebalance_timeout_ms != config.rebalance_timeout_ms:
            fields["rebalance_timeout"] = i32Timedelta.parse(
                datetime.timedelta(milliseconds=config.rebalance_timeout_ms)
            )
            sent.rebalance_timeout_ms = config.rebalance_timeout_ms
        names = member.subscription
        regex = member.subscribed_regex
        send_names = send_all or names != sent.subscribed_topic_names
        send_regex = config.heartbeat_api_version >= 1 and (
            send_all or regex != sent.subscribed_topic_regex
        )
        if config.heartbeat_api_version >= 1 and (send_names or send_regex):
            # The subscription goes as a pair: the topic names and the regex together or
            # neither, as librdkafka sends them. Java sends only the one that changed, which
            # a broker takes alike (each is the member's current value), but librdkafka's
            # mock cluster (the embedded default) asserts that both or neither are null and
            # aborts the whole process otherwise: on the heartbeat after a failed one (the
            # sent fields are reset) or after a new subscription of a member in the group.
            send_names = send_regex = True
        if (send_names or send_regex) and not names and regex is None and not send_all:
            # An empty subscription in the group (the subscription was cleared, its leave
            # not sent yet): say nothing of it. The member leaves next; an empty list would
            # mean "subscribed to nothing" to a broker, and librdkafka's mock cluster asserts
            # on names without a topic or a regex and aborts the process (seen in a full run:
            # examples/asyncio_service.py on the mock, while closing).
            send_names = send_regex = False
        if send_names:
            fields["subscribed_topic_names"] = tuple(TopicName(name) for name in names)
            sent.subscribed_topic_names = names
        if send_regex:
            # An empty string tells the broker there is no regex subscription (or no longer
            # one).
            fields["subscribed_topic_regex"] = regex if regex is not None else ""
            sent.subscribed_topic_regex = regex
        assignor = config.server_assignor
        if assignor is not None and (send_all or assignor != sent.server_assignor):
            fields["server_assignor"] = assignor
            sent.server_assignor = assignor
        local = member.current_assignment
        if send_all or local != sent.local_assignment:
            fields["topic_partitions"] = self._topic_partitions_field(local)
            sent.local_assignment = local
        else:
            fields["topic_partitions"] = None
        module = _request_schema(config.heartbeat_api_version)
        return module.ConsumerGroupHeartbeatRequest(**fields)

    def build_leave_request(self, member: HeartbeatMember) -> Any:
        module = _request_schema(self._config.heartbeat_api_version)
        return module.ConsumerGroupHeartbeatRequest(
            group_id=GroupId(self._config.group_id),
            member_id=member.member_id,
            member_epoch=i32(member.member_epoch),
            instance_id=self._config.group_instance_id,
            topic_partitions=None,
        )

    def _topic_partitions_field(self, local: LocalAssignment) -> tuple[Any, ...]:
        module = _request_schema(self._config.heartbeat_api_version)
        return tuple(
            module.TopicPartitions(
                topic_id=uuid.UUID(topic_id), partitions=tuple(i32(p) for p in partitions)
            )
            for topic_id, partitions in local.by_topic().items()
        )


def _request_schema(version: int) -> ModuleType:
    """kio's ConsumerGroupHeartbeat request module for ``version`` (v0 or v1), imported on the
    first heartbeat built: a consumer that only assigns partitions never loads it."""
    return importlib.import_module(
        f"kio.schema.consumer_group_heartbeat.v{1 if version >= 1 else 0}.request"
    )


class ConsumerHeartbeatRequestManager:
    """The heartbeat of one KIP-848 member (see the module docstring): ``poll`` returns the
    heartbeat to send, if one is due; ``on_response`` / ``on_failure`` take its outcome."""

    def __init__(
        self,
        config: MembershipConfig,
        member: HeartbeatMember,
        *,
        random: Callable[[], float],
    ) -> None:
        self._config = config
        self._member = member
        self._heartbeat_request_state = HeartbeatRequestState(retry_backoff(config, random))
        self._heartbeat_state = HeartbeatState(config)
        # Coordinator as the coordinator manager last told the member.
        self._coordinator_known = False
        #: The heartbeat errors lasting since the last success (key: error code), for the log.
        self._heartbeat_errors: ConditionLog[int] = ConditionLog()

    @property
    def coordinator_known(self) -> bool:
        return self._coordinator_known

    @property
    def heartbeat_interval_ms(self) -> int:
        return self._heartbeat_request_state.heartbeat_interval_ms

    @property
    def request_in_flight(self) -> bool:
        return self._heartbeat_request_state.request_in_flight

    def on_coordinator_discovered(self) -> None:
        self._coordinator_known = True

    def on_coordinator_unknown(self) -> None:
        self._coordinator_known = False

    def poll(self, now_ms: int) -> tuple[UnsentRequest, ...]:
        member = self._member
        if not self._coordinator_known or member.state in SKIP_HEARTBEAT_STATES:
            member.on_heartbeat_request_skipped()
            return ()
        if member.poll_timer_expired(now_ms) and member.state not in (
            MemberState.PREPARE_LEAVING,
            MemberState.LEAVING,
        ):
            member.log.warning(
                "poll_timer_expired",
                max_poll_interval_ms=self._config.rebalance_timeout_ms,
                hint="the poll loop spends too long processing records: increase "
                "max.poll.interval.ms or reduce max.poll.records",
            )
            member.transition_to_sending_leave_group(due_to_expired_poll_timer=True)
        request_state = self._heartbeat_request_state
        if request_state.request_in_flight:
            return ()
        if member.state is MemberState.LEAVING:
            return (self._send_heartbeat(now_ms),)
        if not request_state.can_send_request(now_ms):
            return ()
        if member.state in HEARTBEAT_NOW_STATES or request_state.heartbeat_interval_passed(now_ms):
            if member.subscribed_regex is not None and self._config.heartbeat_api_version < 1:
                member.transition_to_fatal(UnsupportedVersionError(_REGEX_NOT_SUPPORTED_MSG))
                return ()
            return (self._send_heartbeat(now_ms),)
        return ()

    def time_until_next_heartbeat_ms(self, now_ms: int) -> int | None:
        """How long until ``poll`` may send a heartbeat; None when it waits for an outcome or
        for an input (no coordinator, not in the group)."""
        state = self._member.state
        if not self._coordinator_known or state in SKIP_HEARTBEAT_STATES:
            return None
        request_state = self._heartbeat_request_state
        if request_state.request_in_flight:
            return None
        if state is MemberState.LEAVING:
            return 0
        if state in HEARTBEAT_NOW_STATES:
            return request_state.remaining_backoff_ms(now_ms)
        return request_state.time_to_next_heartbeat_ms(now_ms)

    def _send_heartbeat(self, now_ms: int) -> UnsentRequest:
        member = self._member
        leaving = member.state is MemberState.LEAVING
        if leaving:
            request = self._heartbeat_state.build_leave_request(member)
        else:
            request = self._heartbeat_state.build_request(member)
        request_id = member.new_id()
        if not leaving:
            kind = _RequestKind.HEARTBEAT
        elif member.leaving_due_to_poll_timer or not member.leave_in_progress:
            kind = _RequestKind.LEAVE_IGNORED
        else:
            kind = _RequestKind.LEAVE
        self._heartbeat_request_state.on_send_attempt(request_id, kind, now_ms)
        member.log.debug(
            "heartbeat_sent",
            request_id=request_id,
            member_epoch=member.member_epoch,
            state=member.state.value,
            kind=kind.value,
        )
        member.on_heartbeat_request_generated()
        if leaving:
            self._reset_request_state()
            self.reset_heartbeat_state()
        return UnsentRequest(node=COORDINATOR_NODE, request=request, request_id=request_id)

    def _take_in_flight(self, request_id: int) -> _InFlight | None:
        in_flight = self._heartbeat_request_state.take_in_flight(request_id)
        if in_flight is None:
            self._member.log.warning("heartbeat_outcome_for_unknown_request", request_id=request_id)
        return in_flight

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        in_flight = self._take_in_flight(request_id)
        if in_flight is None:
            return
        member = self._member
        code = int(response.error_code)
        message: str | None = response.error_message
        if in_flight.kind is _RequestKind.LEAVE_IGNORED:
            member.log.debug("leave_heartbeat_response_ignored", error_code=code)
            return
        if in_flight.kind is _RequestKind.LEAVE:
            member.log.info("leave_heartbeat_completed", error_code=code)
            member.complete_leave()
            if code != 0:
                self._on_leave_error(code, message)
            return
        if code == 0:
            self._heartbeat_request_state.update_heartbeat_interval_ms(
                _millis(response.heartbeat_interval), now_ms
            )
            self._reset_request_state()
            for error_code, cleared in self._heartbeat_errors.cleared_all(now_ms):
                member.log.info(
                    "heartbeat_error_cleared", error_code=error_code, **cleared.fields()
                )
            member.on_heartbeat_success(response)
        else:
            self._on_error_response(code, message, now_ms)

    def on_failure(self, request_id: int, error: BaseException, now_ms: int) -> None:
        in_flight = self._take_in_flight(request_id)
        if in_flight is None:
            return
        member = self._member
        retriable = isinstance(error, KafkaError) and error.retriable
        if in_flight.kind is not _RequestKind.HEARTBEAT:
            member.log.info("leave_heartbeat_failed", error=repr(error))
            if in_flight.kind is _RequestKind.LEAVE:
                member.complete_leave()
            if isinstance(error, (KafkaConnectionError, KafkaTimeoutError)):
                self._mark_coordinator_unknown(f"leave heartbeat failed: {error}")
            return
        self._on_failed_attempt(now_ms)
        self.reset_heartbeat_state()
        if retriable:
            if isinstance(error, (KafkaConnectionError, KafkaTimeoutError)):
                self._mark_coordinator_unknown(f"heartbeat failed: {error}")
            member.log.debug(
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
        member.transition_to_fatal(
            kafka_error, consumer_protocol_unsupported=isinstance(error, UnsupportedVersionError)
        )

    def _on_error_response(self, code: int, message: str | None, now_ms: int) -> None:
        member = self._member
        if member.state in (MemberState.FENCED, MemberState.STALE, MemberState.FATAL):
            member.log.debug("heartbeat_error_ignored", error_code=code, state=member.state.value)
            return
        self.reset_heartbeat_state()
        self._on_failed_attempt(now_ms)
        if (report := self._heartbeat_errors.occurred(code, now_ms)) is not None:
            member.log.info(
                "heartbeat_error",
                error_code=code,
                error_message=message,
                state=member.state.value,
                member_epoch=member.member_epoch,
                **report.fields(),
            )
        if code in (NotCoordinatorError.code, CoordinatorNotAvailableError.code):
            # The next heartbeat waits for the new coordinator and for the backoff of the
            # failures since the last successful heartbeat (Java resets the backoff here, which
            # lets a coordinator that keeps answering this error be heartbeated ~10 times a
            # second: the backoff grows instead, up to retry.backoff.max.ms).
            self._mark_coordinator_unknown(message or f"heartbeat error code {code}")
        elif code == CoordinatorLoadInProgressError.code:
            pass  # back off and retry
        elif code in (FencedMemberEpochError.code, UnknownMemberIdError.code):
            member.transition_to_fenced()
            # Skip the backoff: rejoin as soon as the assignment is released.
            self._reset_request_state()
        elif code == GroupIdNotFoundError.code and member.state is MemberState.UNSUBSCRIBED:
            # The group is gone (deleted, or another cluster answers) and the member already
            # left it: nothing to fail (Java 4.4 too). In the group, the member cannot go on
            # with its epoch: fatal, as any non-retriable code (below), as Java does.
            member.log.info("heartbeat_group_id_not_found_ignored", state=member.state.value)
        elif code == TopicAuthorizationFailedError.code:
            # Reported on the next call; the member stays so it recovers when ACLs are fixed.
            member.publish(ErrorEvent(error_for_code(code, message), fatal=False))
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
        elif code in _FATAL_CODES and self._member.state not in (
            MemberState.FENCED,
            MemberState.STALE,
            MemberState.FATAL,
        ):
            self._fail_for_code(code, message)
        else:
            self._member.log.info(
                "leave_heartbeat_error_ignored", error_code=code, error_message=message
            )

    def _fail_for_code(self, code: int, message: str | None) -> None:
        if code == GroupAuthorizationFailedError.code:
            error: KafkaError = GroupAuthorizationFailedError(
                f"Not authorized to access group: {self._config.group_id}"
            )
        elif code == UnsupportedVersionError.code:
            error = UnsupportedVersionError(CONSUMER_PROTOCOL_NOT_SUPPORTED_MSG)
        else:
            error = error_for_code(code, message)
        self._member.log.error("heartbeat_fatal_error", error_code=code, error_message=message)
        self._member.transition_to_fatal(
            error, consumer_protocol_unsupported=code == UnsupportedVersionError.code
        )

    def _mark_coordinator_unknown(self, reason: str) -> None:
        self._coordinator_known = False
        self._member.publish(CoordinatorUnknown(reason))

    def _on_failed_attempt(self, now_ms: int) -> None:
        self._heartbeat_request_state.on_failed_attempt(now_ms)

    def _reset_request_state(self) -> None:
        self._heartbeat_request_state.reset()

    def reset_heartbeat_state(self) -> None:
        """Send every field in the next heartbeat (after a failure, a join or a leave)."""
        self._heartbeat_state.reset()

    def _remaining_backoff_ms(self, now_ms: int) -> int:
        return self._heartbeat_request_state.remaining_backoff_ms(now_ms)
