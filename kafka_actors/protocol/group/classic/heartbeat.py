"""The heartbeat timers of a classic group member: :class:`ClassicHeartbeat`.

Owns: what Java's ``org.apache.kafka.clients.consumer.internals.Heartbeat`` owns: the heartbeat
timer (when the next Heartbeat is due, pushed back by the backoff after a failure), the session
timer (``session.timeout.ms`` without a heartbeat response), the poll timer
(``max.poll.interval.ms`` between application polls), the Heartbeat in flight, and the
Heartbeat request for a :class:`~kafka_actors.protocol.group.classic.rebalance.Generation`. When the
heartbeat runs and what its responses do are the manager's
(:class:`~kafka_actors.protocol.group.classic.membership.ClassicMembershipManager`), as Java's
``HeartbeatThread`` and ``HeartbeatResponseHandler`` are ``AbstractCoordinator``'s.

May touch: nothing outside itself; pure (the time is a parameter, backoff jitter injected).
"""

from __future__ import annotations

from typing import Any

from kafka_actors.protocol.group.classic.config import ClassicMembershipConfig
from kafka_actors.protocol.group.classic.rebalance import Generation
from kafka_actors.protocol.request_state import ExponentialBackoff, RequestState
from kafka_actors.protocol.wire.requests import heartbeat_request

__all__ = ["ClassicHeartbeat"]


class ClassicHeartbeat:
    """Java's ``Heartbeat``: the heartbeat, session and poll timers (see the module docstring)."""

    __slots__ = (
        "_config",
        "_heartbeat_state",
        "_next_heartbeat_ms",
        "_poll_deadline_ms",
        "_request_id",
        "_session_deadline_ms",
    )

    def __init__(self, config: ClassicMembershipConfig, backoff: ExponentialBackoff) -> None:
        self._config = config
        self._request_id: int | None = None
        self._next_heartbeat_ms = 0
        self._heartbeat_state = RequestState(backoff)  # only its failure count is used
        self._session_deadline_ms: int | None = None
        self._poll_deadline_ms: int | None = None

    @property
    def in_flight(self) -> bool:
        """A Heartbeat was sent and its response or failure has not come back yet."""
        return self._request_id is not None

    @property
    def request_id(self) -> int | None:
        return self._request_id

    def reset_timeouts(self, now_ms: int) -> None:
        """Java's ``HeartbeatThread.enable``: reset the heartbeat, session and poll timers (the
        poll timer only once an application poll armed it) and the failure backoff."""
        self._next_heartbeat_ms = now_ms + self._config.heartbeat_interval_ms
        self._session_deadline_ms = now_ms + self._config.session_timeout_ms
        self._heartbeat_state.reset()
        if self._poll_deadline_ms is not None:
            self._poll_deadline_ms = now_ms + self._config.rebalance_timeout_ms

    def reset_session_timeout(self, now_ms: int) -> None:
        """A sign of life from the coordinator: the session lasts ``session.timeout.ms`` more."""
        self._session_deadline_ms = now_ms + self._config.session_timeout_ms

    def reset_poll_timer(self, now_ms: int) -> None:
        """The application polled: the next poll is due within ``max.poll.interval.ms``."""
        self._poll_deadline_ms = now_ms + self._config.rebalance_timeout_ms

    def check_session_timeout(self, now_ms: int) -> bool:
        """True once when the session timer has expired; the timer is then disarmed until
        the next reset."""
        if self._session_deadline_ms is not None and now_ms >= self._session_deadline_ms:
            self._session_deadline_ms = None
            return True
        return False

    def poll_timeout_expired(self, now_ms: int) -> bool:
        return self._poll_deadline_ms is not None and now_ms >= self._poll_deadline_ms

    def should_heartbeat(self, now_ms: int) -> bool:
        """No Heartbeat in flight and the heartbeat timer has expired."""
        return self._request_id is None and now_ms >= self._next_heartbeat_ms

    def heartbeat_request(self, generation: Generation) -> Any:
        """The Heartbeat request of this generation (a kio request)."""
        config = self._config
        return heartbeat_request(
            config.heartbeat_version,
            group_id=config.group_id,
            generation_id=generation.generation_id,
            member_id=generation.member_id,
            group_instance_id=config.group_instance_id,
        )

    def sent_heartbeat(self, request_id: int, now_ms: int) -> None:
        self._request_id = request_id
        self._next_heartbeat_ms = now_ms + self._config.heartbeat_interval_ms

    def clear_in_flight(self) -> None:
        """The Heartbeat in flight has its response or its failure."""
        self._request_id = None

    def receive_heartbeat(self, now_ms: int) -> None:
        """A successful Heartbeat response: no backoff, the session is alive."""
        self._heartbeat_state.reset()
        self._session_deadline_ms = now_ms + self._config.session_timeout_ms

    def fail_heartbeat(self, now_ms: int) -> None:
        """A failed Heartbeat: the next one waits for the backoff of the failures so far."""
        self._next_heartbeat_ms = now_ms + self._heartbeat_state.on_failed_attempt(now_ms)

    def time_until_next_ms(self, now_ms: int) -> int | None:
        """The time until the next timer of the heartbeat expires (None: no timer armed)."""
        candidates: list[int] = []
        if self._request_id is None:
            candidates.append(max(0, self._next_heartbeat_ms - now_ms))
        if self._session_deadline_ms is not None:
            candidates.append(max(0, self._session_deadline_ms - now_ms))
        if self._poll_deadline_ms is not None:
            candidates.append(max(0, self._poll_deadline_ms - now_ms))
        return min(candidates) if candidates else None
