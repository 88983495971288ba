"""The heartbeat of a classic group member: :class:`ClassicHeartbeat`.

Owns: the heartbeat Java runs on its heartbeat thread (here: requests returned by ``poll``):
the heartbeat, session and poll timers, when a Heartbeat is due, its backoff after failures,
the answers to Heartbeat and LeaveGroup. The rebalance is
:mod:`kafka_actors.protocol.classic_rebalance`; the manager
(:class:`~kafka_actors.protocol.classic_membership.ClassicMembershipManager`) derives from both.

May touch: nothing outside itself; pure (the time is a parameter, backoff jitter injected).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka_actors.errors import (
    FencedInstanceIdError,
    GroupAuthorizationFailedError,
    IllegalGenerationError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnsupportedVersionError,
)
from kafka_actors.protocol.classic_rebalance import (
    _COORDINATOR_CODES,
    _HEARTBEAT_STATES,
    ClassicMemberState,
    ClassicRebalance,
    _InFlight,
    _Kind,
)
from kafka_actors.protocol.messages import (
    COORDINATOR_NODE,
    UnsentRequest,
)
from kafka_actors.protocol.requests import (
    heartbeat_request,
)

if TYPE_CHECKING:
    pass


class ClassicHeartbeat(ClassicRebalance):
    """The heartbeat half of the classic member (see the module docstring).

    :class:`~kafka_actors.protocol.classic_membership.ClassicMembershipManager` owns the state
    (initialized in its ``__init__``) and the transitions this half asks for.
    """

    def _enable_heartbeat(self, now_ms: int) -> None:
        # Java's HeartbeatThread.enable: reset the heartbeat, session and poll timers.
        self._next_heartbeat_ms = now_ms + self._config.heartbeat_interval_ms
        self._session_deadline_ms = now_ms + self._config.session_timeout_ms
        self._heartbeat_state.reset()
        if self._poll_deadline_ms is not None:
            self._poll_deadline_ms = now_ms + self._config.rebalance_timeout_ms

    def _heartbeat_enabled(self) -> bool:
        return self._state in _HEARTBEAT_STATES and self._coordinator_known

    def _poll_heartbeat(self, now_ms: int) -> None:
        if not self._heartbeat_enabled():
            return
        if self._session_deadline_ms is not None and now_ms >= self._session_deadline_ms:
            self._log.warning(
                "session_timed_out",
                session_timeout_ms=self._config.session_timeout_ms,
            )
            self._session_deadline_ms = None
            self._mark_coordinator_unknown(
                "session timed out without receiving a heartbeat response"
            )
            return
        if self._poll_deadline_ms is not None and now_ms >= self._poll_deadline_ms:
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
        if self._heartbeat_request_id is not None or now_ms < self._next_heartbeat_ms:
            return
        config = self._config
        request = heartbeat_request(
            config.heartbeat_version,
            group_id=config.group_id,
            generation_id=self._generation_id,
            member_id=self._member_id,
            group_instance_id=config.group_instance_id,
        )
        request_id = self._new_id()
        self._in_flight[request_id] = _InFlight(
            _Kind.HEARTBEAT, self._flow, self._generation_id, self._member_id
        )
        self._heartbeat_request_id = request_id
        self._next_heartbeat_ms = now_ms + config.heartbeat_interval_ms
        self._log.debug("heartbeat_sent", generation_id=self._generation_id)
        self._outgoing.append(
            UnsentRequest(node=COORDINATOR_NODE, request=request, request_id=request_id)
        )

    def _on_heartbeat_response(self, sent: _InFlight, response: Any, now_ms: int) -> None:
        code = int(response.error_code)
        if self._state is ClassicMemberState.FATAL:
            return
        if code == 0:
            self._heartbeat_state.reset()
            self._session_deadline_ms = now_ms + self._config.session_timeout_ms
            for error_code, cleared in self._heartbeat_errors.cleared_all(now_ms):
                self._log.info("heartbeat_error_cleared", error_code=error_code, **cleared.fields())
            return
        if (report := self._heartbeat_errors.occurred(code, now_ms)) is not None:
            self._log.info(
                "heartbeat_error",
                error_code=code,
                state=self._state.value,
                generation_id=sent.generation_id,
                **report.fields(),
            )
        if code == RebalanceInProgressError.code:
            # Counts as a received heartbeat (the session is alive).
            self._session_deadline_ms = now_ms + self._config.session_timeout_ms
            if self._state is ClassicMemberState.STABLE:
                self._request_rejoin("group is already rebalancing")
            return
        self._fail_heartbeat(now_ms)
        if code in _COORDINATOR_CODES:
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

    def _fail_heartbeat(self, now_ms: int) -> None:
        self._next_heartbeat_ms = now_ms + self._heartbeat_state.on_failed_attempt(now_ms)

    def _on_leave_response(self, sent: _InFlight, response: Any, request_id: int) -> None:
        code = int(response.error_code)
        member_codes = [int(m.error_code) for m in getattr(response, "members", ())]
        self._log.info("leave_group_response", error_code=code, member_error_codes=member_codes)
        if code in _COORDINATOR_CODES:
            self._mark_coordinator_unknown(f"LeaveGroup error code {code}")
        if sent.kind is _Kind.LEAVE:
            self._complete_leave(request_id)
