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
    faults.delay_response("Fetch", seconds=0.5, times=1)     # hold a Fetch response 0.5 s
    faults.drop_response("OffsetCommit", times=1)            # lose an OffsetCommit response
    faults.error_response("FindCoordinator", "COORDINATOR_NOT_AVAILABLE", times=3)
        # answer FindCoordinator with COORDINATOR_NOT_AVAILABLE three times
    faults.error_response("ConsumerGroupHeartbeat", FencedMemberEpochError)  # an errors.py class
    faults.sever(node_id=1)          # the NetworkActor closes its connection to node 1 once
    faults.clear()                   # remove every rule

APIs are named as Kafka names them (``"ConsumerGroupHeartbeat"``, ``"OffsetCommit"``; the
:class:`~kafka_actors.protocol.wire.apis.ApiKey` member or its name, ``"CONSUMER_GROUP_HEARTBEAT"``,
work too), errors by Kafka's error name (``"FENCED_MEMBER_EPOCH"``, any case) or by their
:mod:`kafka_actors.errors` class (``FencedMemberEpochError``) or an instance of it; the raw
numbers (``error_response(68, 110)``) keep working. An unknown name raises ValueError listing
the names it accepts. Actor names for :meth:`FaultInjector.crash` are in :data:`ACTOR_NAMES`.

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
from typing import Any, Final

__all__ = [
    "ACTOR_NAMES",
    "ApiLike",
    "Delay",
    "Drop",
    "ErrorCode",
    "ErrorLike",
    "FaultInjector",
    "ResponseFault",
    "api_key_of",
    "error_code_of",
]

#: The supervised actors of a consumer, by the name :meth:`FaultInjector.crash` takes: the
#: facade, the NetworkActor and its request managers (``coordinator``, ``membership`` and
#: ``commit`` exist only with a ``group.id``).
ACTOR_NAMES: Final = frozenset(
    {"facade", "network", "metadata", "coordinator", "membership", "commit", "offsets", "fetch"}
)

#: An API: Kafka's name (``"OffsetCommit"``), an ApiKey member or its name, or the number.
ApiLike = str | int
#: A Kafka error: its name (``"FENCED_MEMBER_EPOCH"``), its errors.py class or an instance
#: of one, or the number.
ErrorLike = str | int | type | BaseException


def _norm(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def api_key_of(api: ApiLike) -> int:
    """The API key of ``api`` given by Kafka's name, an ApiKey member or name, or a number."""
    from kafka_actors.protocol.wire.apis import ApiKey

    if isinstance(api, bool):
        raise TypeError(f"not an API: {api!r}")
    if isinstance(api, int):
        return int(api)
    if isinstance(api, str):
        wanted = _norm(api)
        for key in ApiKey:
            if _norm(key.name) == wanted:
                return int(key)
        names = ", ".join(sorted(key.api_name for key in ApiKey))
        raise ValueError(f"unknown API {api!r}; known APIs: {names}")
    raise TypeError(f"an API is a name or a number, not {type(api).__name__}")


def error_code_of(error: ErrorLike) -> int:
    """The Kafka error code of ``error``: Kafka's name (``"FENCED_MEMBER_EPOCH"``, any case),
    a :class:`~kafka_actors.errors.KafkaError` class or instance with a code, or a number."""
    from kio.schema.errors import ErrorCode as KioErrorCode

    from kafka_actors.errors import KafkaError

    if isinstance(error, bool):
        raise TypeError(f"not a Kafka error: {error!r}")
    if isinstance(error, int):
        return int(error)
    if isinstance(error, str):
        wanted = error.strip().lower()
        try:
            return int(KioErrorCode[wanted].value)
        except KeyError:
            raise ValueError(
                f"unknown Kafka error name {error!r} (Kafka's names, e.g. "
                f"FENCED_MEMBER_EPOCH, NOT_COORDINATOR, REBALANCE_IN_PROGRESS)"
            ) from None
    cls = error if isinstance(error, type) else type(error)
    if issubclass(cls, KafkaError):
        code = getattr(error, "code", None)
        if isinstance(code, int):
            return code
        raise ValueError(f"{cls.__name__} stands for no single Kafka error code")
    raise TypeError(f"a Kafka error is a name, an errors.py class or a number, not {error!r}")


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
        """Make the actor named ``actor_name`` raise InjectedFault on its next matching message
        (``when(message)`` true, or any message). A consumer's actors: :data:`ACTOR_NAMES`;
        any supervised actor's name works (the supervisors are generic)."""
        _check_times(times)
        with self._lock:
            self._crashes.append(_CrashRule(actor_name, when, times))
            self._active = True

    def delay_response(
        self, api_key: ApiLike, seconds: float, times: int | None = 1, node: int | None = None
    ) -> None:
        """Deliver the next ``times`` responses of ``api_key`` (``"Fetch"``) ``seconds`` late."""
        if seconds < 0:
            raise ValueError("seconds must be >= 0")
        self._add_response(api_key_of(api_key), node, Delay(seconds), times)

    def drop_response(
        self, api_key: ApiLike, times: int | None = 1, node: int | None = None
    ) -> None:
        """Lose the next ``times`` responses of ``api_key`` (``"OffsetCommit"``)."""
        self._add_response(api_key_of(api_key), node, Drop(), times)

    def error_response(
        self,
        api_key: ApiLike,
        error_code: ErrorLike,
        times: int | None = 1,
        node: int | None = None,
    ) -> None:
        """Answer the next ``times`` requests of ``api_key`` with Kafka error ``error_code``:
        ``error_response("ConsumerGroupHeartbeat", "FENCED_MEMBER_EPOCH")``."""
        code = error_code_of(error_code)
        if code == 0:
            raise ValueError("error_code NONE (0) is no error: use no rule instead")
        self._add_response(api_key_of(api_key), node, ErrorCode(code), times)

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
