"""The skeleton every request manager shares: backoff, request state, event outbox.

Owns: :class:`ExponentialBackoff` (Java's ``org.apache.kafka.common.utils.ExponentialBackoff``),
:class:`RequestState` (Java's consumer ``RequestState``: attempts since the last success, the
time of the last response or failure and the backoff that follows it), :func:`retry_backoff`
(the ``retry.backoff.ms`` / ``retry.backoff.max.ms`` backoff every manager uses),
:class:`RetriedRequest` (one request a manager keeps several of and retries on its own:
attempts, the request in flight, the next retry, the last error) and :class:`Outbox` (the events
a manager publishes through ``PollResult.events`` and its request-id counter: an object the
manager owns and hands to its collaborators).

May touch: nothing outside itself. Pure: the time is always a parameter (``now_ms``, monotonic
milliseconds) and randomness (the backoff jitter) is injected as a ``() -> float`` in [0, 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    from kafka_actors.errors import KafkaError

__all__ = [
    "RETRY_BACKOFF_JITTER",
    "RETRY_BACKOFF_MULTIPLIER",
    "ExponentialBackoff",
    "Outbox",
    "RequestState",
    "RetriedRequest",
    "retry_backoff",
]

#: Java's ``CommonClientConfigs.RETRY_BACKOFF_EXP_BASE`` and ``RETRY_BACKOFF_JITTER``.
RETRY_BACKOFF_MULTIPLIER: Final = 2
RETRY_BACKOFF_JITTER: Final = 0.2


class ExponentialBackoff:
    """Java's ExponentialBackoff: ``min(max, initial * multiplier**n * U(1-jitter, 1+jitter))``.

    ``n`` is capped where the term reaches ``max_ms``; when ``max_ms <= initial_ms`` the backoff
    is ``initial_ms`` without jitter (as Java). ``random`` returns a float in [0, 1).
    """

    def __init__(
        self,
        initial_ms: int,
        multiplier: float,
        max_ms: int,
        jitter: float,
        random: Callable[[], float],
    ) -> None:
        self.initial_ms = initial_ms
        self.multiplier = multiplier
        self.max_ms = max_ms
        self.jitter = jitter
        self._random = random
        if max_ms > initial_ms:
            self._exp_max = math.log(max_ms / max(initial_ms, 1)) / math.log(multiplier)
        else:
            self._exp_max = 0.0

    def backoff(self, attempts: int) -> int:
        if self._exp_max == 0.0:
            return self.initial_ms
        exp = min(float(attempts), self._exp_max)
        term = self.initial_ms * self.multiplier**exp
        factor = 1.0
        if self.jitter > 1e-9:
            factor = (1.0 - self.jitter) + 2.0 * self.jitter * self._random()
        return min(int(factor * term), self.max_ms)


class _RetryBackoffConfig(Protocol):
    @property
    def retry_backoff_ms(self) -> int: ...
    @property
    def retry_backoff_max_ms(self) -> int: ...


def retry_backoff(config: _RetryBackoffConfig, random: Callable[[], float]) -> ExponentialBackoff:
    """``ExponentialBackoff(retry.backoff.ms, 2, retry.backoff.max.ms, 0.2)``: the retry backoff
    of every request manager (Java's ``RequestState`` and ``RequestManagers``)."""
    return ExponentialBackoff(
        config.retry_backoff_ms,
        RETRY_BACKOFF_MULTIPLIER,
        config.retry_backoff_max_ms,
        RETRY_BACKOFF_JITTER,
        random,
    )


class RequestState:
    """Java's consumer ``RequestState`` for one kind of request a manager repeats.

    ``attempts`` counts failures since the last success. After a failure
    (:meth:`on_failed_attempt`) the next request waits ``backoff.backoff(attempts)`` from that
    moment (or from a later send the manager recorded with :meth:`on_send_attempt`); after a
    success (:meth:`on_successful_attempt`) it waits ``backoff.backoff(0)``, as
    Java. :meth:`reset` forgets both (no wait at all), for the managers whose next request
    after a success is due at once or on a timer of their own (heartbeats, JoinGroup).
    Whether a request is in flight is the manager's own business (it knows which request).
    """

    __slots__ = ("_backoff", "attempts", "backoff_ms", "last_received_ms", "last_sent_ms")

    def __init__(self, backoff: ExponentialBackoff) -> None:
        self._backoff = backoff
        self.attempts = 0
        #: The backoff after the last response or failure, from ``last_received_ms``.
        self.backoff_ms = 0
        #: When the last response or failure arrived; None: never, or reset since.
        self.last_received_ms: int | None = None
        #: When the last request went out, if the manager records it; None: not recorded.
        self.last_sent_ms: int | None = None

    @property
    def backoff(self) -> ExponentialBackoff:
        return self._backoff

    @property
    def backoff_until_ms(self) -> int | None:
        """When the backoff is over (None: no backoff pending)."""
        start = self._backoff_start_ms()
        return None if start is None else start + self.backoff_ms

    def remaining_backoff_ms(self, now_ms: int) -> int:
        start = self._backoff_start_ms()
        return 0 if start is None else max(0, start + self.backoff_ms - now_ms)

    def _backoff_start_ms(self) -> int | None:
        received, sent = self.last_received_ms, self.last_sent_ms
        if sent is None:
            return received
        return sent if received is None else max(sent, received)

    def can_send_request(self, now_ms: int) -> bool:
        """True when the backoff is over (the caller checks its own in-flight request)."""
        return self.remaining_backoff_ms(now_ms) == 0

    def on_send_attempt(self, now_ms: int) -> None:
        self.last_sent_ms = now_ms

    def on_successful_attempt(self, now_ms: int) -> None:
        self.last_received_ms = now_ms
        self.attempts = 0
        self.backoff_ms = self._backoff.backoff(0)

    def on_failed_attempt(self, now_ms: int) -> int:
        """Record a failure; returns the backoff it starts (milliseconds from ``now_ms``)."""
        self.last_received_ms = now_ms
        self.backoff_ms = self._backoff.backoff(self.attempts)
        self.attempts += 1
        return self.backoff_ms

    def reset(self) -> None:
        """No failures and no backoff: the next request may go at once."""
        self.attempts = 0
        self.clear_backoff()

    def clear_backoff(self) -> None:
        """No backoff pending, but the failures still count for the next one."""
        self.backoff_ms = 0
        self.last_received_ms = None
        self.last_sent_ms = None


@dataclass(slots=True, kw_only=True)
class RetriedRequest:
    """One request a manager keeps among several and retries on its own (a commit, an offset
    fetch): Java's per-request ``RetriableRequestState`` (attempts, backoff, in flight).

    Subclasses add what the request carries and its deadline. :meth:`on_send_attempt` counts
    an attempt; :meth:`schedule_retry` sets the next one ``backoff.backoff(attempts - 1)``
    after a failure.
    """

    attempts: int = 0
    retry_at_ms: int = 0
    request_id: int | None = None
    last_error: KafkaError | None = None

    @property
    def in_flight(self) -> bool:
        return self.request_id is not None

    def on_send_attempt(self, request_id: int) -> None:
        self.request_id = request_id
        self.attempts += 1

    def schedule_retry(self, now_ms: int, backoff: ExponentialBackoff) -> int:
        """Retry after the backoff of this many failed attempts; returns the retry time."""
        self.retry_at_ms = now_ms + backoff.backoff(self.attempts - 1)
        return self.retry_at_ms


class Outbox:
    """The events a manager published since its last ``poll`` and its request-id counter, as
    an object the manager owns and hands to its collaborators (ids start at 1 and are never
    reused by one outbox)."""

    __slots__ = ("_events", "_next_id")

    def __init__(self) -> None:
        self._events: list[Any] = []
        self._next_id = 1

    def publish(self, event: Any) -> None:
        self._events.append(event)

    def drain(self) -> tuple[Any, ...]:
        """The events published since the last drain, in order."""
        events = tuple(self._events)
        self._events.clear()
        return events

    def new_id(self) -> int:
        value = self._next_id
        self._next_id += 1
        return value
