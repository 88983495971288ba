"""Retries paced by a request state, for code that runs outside the actor system (the CLI's
admin queries, the Spark source's driver and executors).

Owns: :class:`PacedRetry`: one :class:`~kafka_actors.protocol.request_state.RequestState`
(``retry.backoff.ms`` doubling to ``retry.backoff.max.ms``, jitter 0.2, as Java's
``RequestState``) reset only by a success, used two ways:

* :meth:`PacedRetry.call` runs a blocking call again after a retriable error, sleeping the
  backoff in between, until a deadline;
* :meth:`PacedRetry.ready` / :meth:`PacedRetry.failed` / :meth:`PacedRetry.succeeded` gate a
  call that is retried by whoever calls again (the next Spark trigger): it is skipped while
  the backoff runs.

May touch: nothing but the clock and the sleep it is given (``time.monotonic`` and
``time.sleep`` by default; tests pass fakes).
"""

from __future__ import annotations

import random as _random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kafka_actors.errors import RetriableError
from kafka_actors.protocol.request_state import RequestState, retry_backoff

__all__ = ["PacedRetry"]

_T = TypeVar("_T")


class PacedRetry:
    """Retries with exponential backoff and jitter, reset only by a success (module doc).

    ``config``: anything with ``retry_backoff_ms`` and ``retry_backoff_max_ms`` (a
    :class:`~kafka_actors.config.ConsumerConfig`)."""

    def __init__(
        self,
        config: Any,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        random: Callable[[], float] = _random.random,
    ) -> None:
        self._state = RequestState(retry_backoff(config, random))
        self._monotonic = monotonic
        self._sleep = sleep

    def _now_ms(self) -> int:
        return int(self._monotonic() * 1000.0)

    @property
    def attempts(self) -> int:
        """Failures since the last success."""
        return self._state.attempts

    # -- a call retried by the caller's next call ----------------------------------------------

    def ready(self) -> bool:
        """Whether the backoff after the last failure is over."""
        return self._state.can_send_request(self._now_ms())

    def remaining_s(self) -> float:
        return self._state.remaining_backoff_ms(self._now_ms()) / 1000.0

    def failed(self) -> float:
        """Record a failure; returns the backoff it starts, in seconds."""
        return self._state.on_failed_attempt(self._now_ms()) / 1000.0

    def succeeded(self) -> None:
        """A success: the next call may go at once and the backoff starts over."""
        self._state.reset()

    # -- a blocking call retried here ----------------------------------------------------------

    def call(
        self,
        what: Callable[[], _T],
        *,
        timeout_s: float,
        retriable: tuple[type[BaseException], ...] = (RetriableError,),
    ) -> _T:
        """``what()``, again after each ``retriable`` error once the backoff is over; the last
        error is raised when the next attempt would come after ``timeout_s``."""
        deadline = self._monotonic() + timeout_s
        while True:
            wait = self.remaining_s()
            if wait > 0:
                self._sleep(wait)
            try:
                result = what()
            except retriable:
                backoff = self.failed()
                if self._monotonic() + backoff >= deadline:
                    raise
                continue
            self.succeeded()
            return result
