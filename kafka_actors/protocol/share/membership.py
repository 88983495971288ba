"""The member of a share group (KIP-932): :class:`ShareMembershipManager`.

Owns: the share member's state (unsubscribed, joining, stable, leaving, fatal), its
``ShareGroupHeartbeat`` requests to the group coordinator (epoch 0 to join with the
client-generated member id, then the member epoch the coordinator gave; -1 to leave), the
heartbeat interval the coordinator sets, the subscribed topic names sent only when they changed
since the last heartbeat (and on every join), the assignment (topic ids resolved to names
through the metadata actor: ``NeedTopicNames``), and the reactions to heartbeat errors by code
(:mod:`kafka_actors.errors`): NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE → rediscover the
coordinator; COORDINATOR_LOAD_IN_PROGRESS and other retriable errors → retry after the backoff;
FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID → drop the assignment and rejoin at epoch 0 with the
same member id; UNSUPPORTED_VERSION (or a broker whose ApiVersions lack the API) →
:class:`~kafka_actors.errors.ShareGroupsNotSupportedError`; authorization, invalid request,
group full, a group id of another group type → fatal typed errors. It follows Java's
``ShareMembershipManager`` / ``ShareHeartbeatRequestManager`` (facts only).

A share group has no reconciliation with callbacks: a new assignment is applied at once (the
share fetch manager fetches the new partitions, forgets the old ones; records acquired from
a partition no longer assigned are acknowledged or released as before).

Events it publishes (``PollResult.events``; routed by :data:`kafka_actors.actors.routing.ROUTES`):
``AssignmentChanged`` (the partitions now assigned), ``NeedTopicNames``,
``CoordinatorUnknown``, ``ErrorEvent`` (fatal or not), ``LeaveCompleted`` — the vocabulary of
:mod:`kafka_actors.protocol.group.events`.

May touch: nothing outside itself; pure (time is a parameter, jitter injected).
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kafka_actors.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedMemberEpochError,
    KafkaConnectionError,
    KafkaError,
    NotCoordinatorError,
    ShareGroupsNotSupportedError,
    TopicAuthorizationFailedError,
    UnknownMemberIdError,
    UnsupportedVersionError,
    error_for_code,
)
from kafka_actors.log import get_logger
from kafka_actors.protocol.condition_log import ConditionLog
from kafka_actors.protocol.group.events import (
    AssignmentChanged,
    CoordinatorUnknown,
    ErrorEvent,
    LeaveCompleted,
    NeedTopicNames,
)
from kafka_actors.protocol.messages import (
    COORDINATOR_NODE,
    PollResult,
    TopicPartition,
    UnsentRequest,
)
from kafka_actors.protocol.request_state import Outbox, RequestState, retry_backoff
from kafka_actors.protocol.wire.requests import share_group_heartbeat_request

__all__ = [
    "JOIN_EPOCH",
    "LEAVE_EPOCH",
    "ShareMemberState",
    "ShareMembershipConfig",
    "ShareMembershipManager",
]

JOIN_EPOCH: Final = 0
LEAVE_EPOCH: Final = -1


class ShareMemberState(enum.Enum):
    UNSUBSCRIBED = "UNSUBSCRIBED"
    JOINING = "JOINING"
    STABLE = "STABLE"
    LEAVING = "LEAVING"
    FATAL = "FATAL"


@dataclass(frozen=True, slots=True)
class ShareMembershipConfig:
    group_id: str
    heartbeat_api_version: int = 1
    rack_id: str | None = None
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000

    @classmethod
    def from_consumer_config(
        cls, config: Any, *, heartbeat_api_version: int
    ) -> ShareMembershipConfig:
        assert config.group_id is not None
        return cls(
            group_id=config.group_id,
            heartbeat_api_version=heartbeat_api_version,
            rack_id=config.client_rack or None,
            request_timeout_ms=config.request_timeout_ms,
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
        )


#: Codes after which the member rejoins at epoch 0 with its member id.
_REJOIN_CODES: Final = frozenset({FencedMemberEpochError.code, UnknownMemberIdError.code})
_COORDINATOR_CODES: Final = frozenset({NotCoordinatorError.code, CoordinatorNotAvailableError.code})


class ShareMembershipManager:
    """The share group member (see the module docstring)."""

    def __init__(
        self,
        config: ShareMembershipConfig,
        *,
        member_id: str,
        random: Callable[[], float],
        client_id: str = "",
    ) -> None:
        self._outbox = Outbox()
        self._config = config
        self._member_id = member_id
        self._epoch = JOIN_EPOCH
        self._state = ShareMemberState.UNSUBSCRIBED
        self._topics: tuple[str, ...] = ()
        self._sent_topics: tuple[str, ...] | None = None
        self._sent_rack = False
        self._coordinator_known = False
        self._interval_ms = 5_000
        self._request_state = RequestState(retry_backoff(config, random))
        self._in_flight: int | None = None
        self._in_flight_epoch = 0
        self._last_sent_ms: int | None = None
        self._heartbeat_now = False
        #: topic id -> partitions, as the coordinator last sent it.
        self._target: dict[str, tuple[int, ...]] = {}
        self._names: dict[str, str] = {}
        self._assignment: frozenset[TopicPartition] = frozenset()
        self._leave_deadline_ms: int | None = None
        self._log = get_logger("share_membership", client_id=client_id, group_id=config.group_id)
        self._heartbeat_errors: ConditionLog[int] = ConditionLog()  # by error code, for the log

    # -- state -----------------------------------------------------------------------------

    @property
    def state(self) -> ShareMemberState:
        return self._state

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def member_epoch(self) -> int:
        return self._epoch

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        return self._assignment

    @property
    def heartbeat_interval_ms(self) -> int:
        return self._interval_ms

    @property
    def request_in_flight(self) -> bool:
        return self._in_flight is not None

    # -- inputs ----------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join (or update the subscription of) the share group."""
        names = tuple(sorted(set(topics)))
        if not names:
            return
        self._topics = names
        if self._state in (ShareMemberState.UNSUBSCRIBED, ShareMemberState.LEAVING):
            self._join()
        elif self._state is not ShareMemberState.FATAL:
            self._heartbeat_now = True

    def on_coordinator_discovered(self, now_ms: int) -> None:
        self._coordinator_known = True

    def on_coordinator_unknown(self, now_ms: int) -> None:
        self._coordinator_known = False

    def on_topic_names(self, mapping: Mapping[str, str]) -> None:
        self._names.update(mapping)
        self._update_assignment()

    def leave_group(self, now_ms: int, *, deadline_ms: int) -> None:
        """Leave (heartbeat at epoch -1); ``LeaveCompleted`` when answered, when there was
        nothing to leave, or at ``deadline_ms``."""
        self._topics = ()
        if self._state in (ShareMemberState.UNSUBSCRIBED, ShareMemberState.FATAL) or (
            self._epoch == JOIN_EPOCH and self._in_flight is None
        ):
            self._state = ShareMemberState.UNSUBSCRIBED
            self._set_assignment(frozenset())
            self._outbox.publish(LeaveCompleted())
            return
        self._state = ShareMemberState.LEAVING
        self._leave_deadline_ms = deadline_ms
        self._heartbeat_now = True
        self._set_assignment(frozenset())

    def unsupported(self) -> None:
        """The broker's ApiVersions lack ShareGroupHeartbeat: fail for good."""
        self._fatal(ShareGroupsNotSupportedError())

    # -- the request-manager contract -------------------------------------------------------

    def poll(self, now_ms: int) -> PollResult:
        requests: tuple[UnsentRequest, ...] = ()
        if self._state is ShareMemberState.LEAVING and self._leave_deadline_ms is not None:
            if now_ms >= self._leave_deadline_ms:
                self._complete_leave(timed_out=True)
        if self._due(now_ms):
            requests = (self._send(now_ms),)
        return PollResult(requests, self._next_poll_ms(now_ms), self._outbox.drain())

    def _due(self, now_ms: int) -> bool:
        if self._state in (ShareMemberState.UNSUBSCRIBED, ShareMemberState.FATAL):
            return False
        if self._in_flight is not None or not self._coordinator_known:
            return False
        if not self._request_state.can_send_request(now_ms):
            return False
        if self._heartbeat_now or self._state is ShareMemberState.JOINING:
            return True
        return self._last_sent_ms is None or now_ms - self._last_sent_ms >= self._interval_ms

    def _next_poll_ms(self, now_ms: int) -> int | None:
        if self._state in (ShareMemberState.UNSUBSCRIBED, ShareMemberState.FATAL):
            return None
        waits: list[int] = []
        if self._state is ShareMemberState.LEAVING and self._leave_deadline_ms is not None:
            waits.append(max(0, self._leave_deadline_ms - now_ms))
        if self._in_flight is None and self._coordinator_known:
            backoff = self._request_state.remaining_backoff_ms(now_ms)
            if self._heartbeat_now or self._state is ShareMemberState.JOINING:
                waits.append(backoff)
            else:
                since = 0 if self._last_sent_ms is None else now_ms - self._last_sent_ms
                waits.append(max(backoff, self._interval_ms - since))
        return min(waits) if waits else None

    def _send(self, now_ms: int) -> UnsentRequest:
        leaving = self._state is ShareMemberState.LEAVING
        epoch = LEAVE_EPOCH if leaving else self._epoch
        joining = epoch == JOIN_EPOCH
        topics: tuple[str, ...] | None = None
        if not leaving and (joining or self._sent_topics != self._topics):
            topics = self._topics
        rack = None
        if not leaving and (joining or not self._sent_rack):
            rack = self._config.rack_id
        request = share_group_heartbeat_request(
            self._config.heartbeat_api_version,
            group_id=self._config.group_id,
            member_id=self._member_id,
            member_epoch=epoch,
            subscribed_topic_names=topics,
            rack_id=rack,
        )
        if topics is not None:
            self._sent_topics = topics
        self._sent_rack = True
        request_id = self._outbox.new_id()
        self._in_flight = request_id
        self._in_flight_epoch = epoch
        self._last_sent_ms = now_ms
        self._heartbeat_now = False
        self._request_state.on_send_attempt(now_ms)
        return UnsentRequest(
            COORDINATOR_NODE, request, request_id, timeout_ms=self._config.request_timeout_ms
        )

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        if request_id != self._in_flight:
            return
        self._in_flight = None
        sent_epoch = self._in_flight_epoch
        code = int(response.error_code)
        if sent_epoch == LEAVE_EPOCH:
            self._complete_leave()
            return
        if code != 0:
            self._on_error(code, response.error_message, now_ms)
            return
        self._request_state.on_successful_attempt(now_ms)
        self._request_state.clear_backoff()
        for code, cleared in self._heartbeat_errors.cleared_all(now_ms):
            self._log.info("share_heartbeat_error_cleared", error_code=code, **cleared.fields())
        self._last_sent_ms = now_ms  # the interval counts from the answer (as Java's timer)
        interval = response.heartbeat_interval
        if isinstance(interval, datetime.timedelta):
            self._interval_ms = max(1, interval // datetime.timedelta(milliseconds=1))
        if self._state is ShareMemberState.LEAVING or self._state is ShareMemberState.FATAL:
            return
        self._epoch = int(response.member_epoch)
        if response.member_id:
            self._member_id = str(response.member_id)
        self._state = ShareMemberState.STABLE
        assignment = response.assignment
        if assignment is not None:
            target: dict[str, tuple[int, ...]] = {}
            for topic in assignment.topic_partitions:
                if topic.topic_id is None:
                    continue
                target[str(topic.topic_id)] = tuple(sorted({int(p) for p in topic.partitions}))
            self._target = target
            self._update_assignment()

    def on_failure(self, request_id: int, error: BaseException, now_ms: int) -> None:
        if request_id != self._in_flight:
            return
        self._in_flight = None
        if self._in_flight_epoch == LEAVE_EPOCH:
            self._complete_leave()
            return
        if isinstance(error, KafkaConnectionError) or isinstance(
            error, CoordinatorNotAvailableError
        ):
            self._coordinator_lost(str(error))
        self._request_state.on_failed_attempt(now_ms)
        self._heartbeat_now = True

    # -- reactions --------------------------------------------------------------------------

    def _on_error(self, code: int, message: str | None, now_ms: int) -> None:
        error = error_for_code(code, message)
        if (report := self._heartbeat_errors.occurred(code, now_ms)) is not None:
            self._log.info("share_heartbeat_error", error=str(error), **report.fields())
        if code in _COORDINATOR_CODES:
            self._coordinator_lost(str(error))
            self._request_state.on_failed_attempt(now_ms)
            self._heartbeat_now = True
        elif code in _REJOIN_CODES:
            self._set_assignment(frozenset())
            self._target = {}
            self._join()
            self._request_state.reset()
        elif code == UnsupportedVersionError.code:
            self._fatal(ShareGroupsNotSupportedError())
        elif code == CoordinatorLoadInProgressError.code or error.retriable:
            self._request_state.on_failed_attempt(now_ms)
            self._heartbeat_now = True
        elif code == TopicAuthorizationFailedError.code:
            # Reported to the application; the member keeps heartbeating (as Java).
            self._outbox.publish(ErrorEvent(error, False))
            self._request_state.on_failed_attempt(now_ms)
            self._heartbeat_now = True
        else:
            self._fatal(error)

    def _coordinator_lost(self, reason: str) -> None:
        if self._coordinator_known:
            self._coordinator_known = False
            self._outbox.publish(CoordinatorUnknown(reason))

    def _fatal(self, error: KafkaError) -> None:
        self._log.error("share_membership_fatal", error=str(error))
        leaving = self._state is ShareMemberState.LEAVING
        self._state = ShareMemberState.FATAL
        self._set_assignment(frozenset())
        self._outbox.publish(ErrorEvent(error, True))
        if leaving:
            self._outbox.publish(LeaveCompleted())

    def _join(self) -> None:
        self._state = ShareMemberState.JOINING
        self._epoch = JOIN_EPOCH
        self._sent_topics = None
        self._sent_rack = False
        self._heartbeat_now = True

    def _complete_leave(self, *, timed_out: bool = False) -> None:
        self._state = ShareMemberState.UNSUBSCRIBED
        self._epoch = JOIN_EPOCH
        self._leave_deadline_ms = None
        self._target = {}
        self._set_assignment(frozenset())
        self._outbox.publish(LeaveCompleted(timed_out))

    def _update_assignment(self) -> None:
        if self._state is not ShareMemberState.STABLE:
            return
        missing = frozenset(tid for tid in self._target if tid not in self._names)
        if missing:
            self._outbox.publish(NeedTopicNames(missing))
        resolved = frozenset(
            TopicPartition(self._names[tid], p)
            for tid, parts in self._target.items()
            if tid in self._names
            for p in parts
        )
        self._set_assignment(resolved)

    def _set_assignment(self, assignment: frozenset[TopicPartition]) -> None:
        if assignment != self._assignment:
            self._assignment = assignment
            self._outbox.publish(AssignmentChanged(assignment))
