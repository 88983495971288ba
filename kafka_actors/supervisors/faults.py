"""Fault injection for tests and chaos runs.

Owns: :class:`FaultInjector`, the one switch board through which a test makes actors crash and
makes the network layer delay, drop, fail or sever. May touch: nothing but its own rules (it is
consulted by actors; it never calls them).

Cost when unused: actors hold ``faults: FaultInjector | None`` and guard every consultation
with ``if faults is not None``; an injector with no rules answers from a lock-free fast path.

API (all methods thread-safe, usable while the consumer runs; rules apply in the order added,
``times=None`` means "until cleared")::

    faults = FaultInjector()
    faults.crash("fetch", when=lambda msg: isinstance(msg, FetchResponse), times=2)
        # the actor named "fetch" raises InjectedFault on its next 2 matching messages
        # (SupervisedActor consults faults.should_crash(name, message) before each message)
    faults.delay_response(api_key=1, seconds=0.5, times=1)   # hold a Fetch response 0.5 s
    faults.drop_response(api_key=8, times=1)                 # lose an OffsetCommit response
    faults.error_response(api_key=10, error_code=15, times=3)
        # answer FindCoordinator with COORDINATOR_NOT_AVAILABLE three times
    faults.sever(node_id=1)          # the NetworkActor closes its connection to node 1 once
    faults.clear()                   # remove every rule

Response rules may be limited to one broker with ``node=<node_id>``. The NetworkActor asks,
for each response it has decoded, ``faults.on_response(api_key, node)`` and gets ``None``
(deliver normally), :class:`Delay` (deliver after ``seconds``), :class:`Drop` (never deliver;
the request's own timeout applies) or :class:`ErrorCode` (answer with that Kafka error code);
before each I/O round it asks ``faults.take_sever(node)`` for each connected node.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Delay", "Drop", "ErrorCode", "FaultInjector", "ResponseFault"]


@dataclass(frozen=True)
class Delay:
    """Deliver the response ``seconds`` later."""

    seconds: float


@dataclass(frozen=True)
class Drop:
    """Never deliver the response."""


@dataclass(frozen=True)
class ErrorCode:
    """Answer the request with Kafka error code ``code`` instead of the broker's response."""

    code: int


ResponseFault = Delay | Drop | ErrorCode


@dataclass
class _CrashRule:
    actor: str
    when: Callable[[Any], bool] | None
    remaining: int | None


@dataclass
class _ResponseRule:
    api_key: int
    node: int | None
    action: ResponseFault
    remaining: int | None


def _check_times(times: int | None) -> None:
    if times is not None and times < 1:
        raise ValueError("times must be >= 1 (or None for 'until cleared')")


class FaultInjector:
    """Rules that make actors crash and responses misbehave; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._crashes: list[_CrashRule] = []
        self._responses: list[_ResponseRule] = []
        self._severs: dict[int, int] = {}
        self._active = False  # read without the lock on the fast path

    # -- configuration (test side) -------------------------------------------------------

    def crash(
        self,
        actor_name: str,
        when: Callable[[Any], bool] | None = None,
        times: int | None = 1,
    ) -> None:
        """Make the actor named ``actor_name`` raise InjectedFault on its next matching message."""
        _check_times(times)
        with self._lock:
            self._crashes.append(_CrashRule(actor_name, when, times))
            self._active = True

    def delay_response(
        self, api_key: int, seconds: float, times: int | None = 1, node: int | None = None
    ) -> None:
        """Deliver the next ``times`` responses of ``api_key`` ``seconds`` late."""
        if seconds < 0:
            raise ValueError("seconds must be >= 0")
        self._add_response(api_key, node, Delay(seconds), times)

    def drop_response(self, api_key: int, times: int | None = 1, node: int | None = None) -> None:
        """Lose the next ``times`` responses of ``api_key``."""
        self._add_response(api_key, node, Drop(), times)

    def error_response(
        self, api_key: int, error_code: int, times: int | None = 1, node: int | None = None
    ) -> None:
        """Answer the next ``times`` requests of ``api_key`` with Kafka error ``error_code``."""
        self._add_response(api_key, node, ErrorCode(error_code), times)

    def sever(self, node_id: int, times: int = 1) -> None:
        """Have the network actor close its connection to ``node_id`` (``times`` times)."""
        _check_times(times)
        with self._lock:
            self._severs[node_id] = self._severs.get(node_id, 0) + times
            self._active = True

    def clear(self) -> None:
        """Remove every rule."""
        with self._lock:
            self._crashes.clear()
            self._responses.clear()
            self._severs.clear()
            self._active = False

    def pending(self) -> int:
        """How many rules still have uses left (``times=None`` rules count as one)."""
        with self._lock:
            return len(self._crashes) + len(self._responses) + len(self._severs)

    def _add_response(
        self, api_key: int, node: int | None, action: ResponseFault, times: int | None
    ) -> None:
        _check_times(times)
        with self._lock:
            self._responses.append(_ResponseRule(api_key, node, action, times))
            self._active = True

    # -- consultation (actor side) -------------------------------------------------------

    def should_crash(self, actor_name: str, message: Any) -> bool:
        """True if the actor must raise InjectedFault instead of handling ``message``."""
        if not self._active:
            return False
        with self._lock:
            for i, rule in enumerate(self._crashes):
                if rule.actor != actor_name:
                    continue
                if rule.when is not None and not rule.when(message):
                    continue
                self._consume(self._crashes, i, rule)
                return True
        return False

    def on_response(self, api_key: int, node: int | None = None) -> ResponseFault | None:
        """The fault to apply to a response of ``api_key`` from ``node``, or None."""
        if not self._active:
            return None
        with self._lock:
            for i, rule in enumerate(self._responses):
                if rule.api_key != api_key:
                    continue
                if rule.node is not None and rule.node != node:
                    continue
                self._consume(self._responses, i, rule)
                return rule.action
        return None

    def take_sever(self, node: int) -> bool:
        """True (once per :meth:`sever`) if the connection to ``node`` must be closed now."""
        if not self._active:
            return False
        with self._lock:
            left = self._severs.get(node, 0)
            if left == 0:
                return False
            if left == 1:
                del self._severs[node]
            else:
                self._severs[node] = left - 1
            self._refresh_active()
            return True

    def _consume(self, rules: list[Any], index: int, rule: Any) -> None:
        if rule.remaining is None:
            return
        rule.remaining -= 1
        if rule.remaining == 0:
            del rules[index]
            self._refresh_active()

    def _refresh_active(self) -> None:
        self._active = bool(self._crashes or self._responses or self._severs)
