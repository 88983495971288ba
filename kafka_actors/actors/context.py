"""What the consumer's actors share: the context object, the application wake-up, metrics.

Owns: :class:`ConsumerContext` (configuration, clock, scheduler, the shared
:class:`~kafka_actors.protocol.subscription.SubscriptionState`, the handles by which actors find
each other across restarts, and the few facts a restarted actor must find again: the member
id, the known coordinator, the last cluster view, the negotiated API versions and the one
ApiVersions ask that learns them; the consumer's one thread-safe fetch buffer),
:class:`AppSignal` (the one condition variable that wakes application threads blocked in
``poll`` or a blocking call), :class:`Outcome` helpers for the ``concurrent.futures.Future``
that carries each application event's result; the context holds the consumer's
:class:`~kafka_actors.metrics.ConsumerMetrics` (defined in :mod:`kafka_actors.metrics`).

May touch: threading primitives and the supervisors' :class:`ChildTable` (thread-safe). Every
attribute written by an actor after start is either guarded by ``lock`` or a single reference
assignment (atomic in CPython) of an immutable value.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka_actors.actors.network.status import ConnectionStates
from kafka_actors.clock import Clock, Scheduler
from kafka_actors.config import ConsumerConfig
from kafka_actors.log import get_logger
from kafka_actors.metrics import ConsumerMetrics, MetricConfig
from kafka_actors.protocol.fetch.buffer import FetchBuffer
from kafka_actors.protocol.request_state import retry_backoff
from kafka_actors.protocol.subscription import SubscriptionState
from kafka_actors.protocol.wire.versions import NegotiatedVersions, VersionsAsk
from kafka_actors.supervisors import ChildRestartingError, ChildTable, SupervisorFatalError

__all__ = [
    "AppSignal",
    "ConsumerContext",
    "ConsumerMetrics",
    "MemberStatus",
    "Routed",
    "complete",
    "fail",
]

_log = get_logger("context")


class AppSignal:
    """Wakes application threads: new background event, fetched data, a completed future,
    ``wakeup()``, a fatal error. Waiters re-check their own condition after each wake-up."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0
        self._observers: tuple[Callable[[], None], ...] = ()

    def notify(self) -> None:
        with self._cond:
            self._generation += 1
            self._cond.notify_all()
        for observer in self._observers:
            observer()

    def add_observer(self, observer: Callable[[], None]) -> None:
        """Also call ``observer()`` (on the notifying thread, without the lock) on each
        notify: how an event loop learns that something changed without a blocked thread.
        It must be quick and never raise (e.g. ``loop.call_soon_threadsafe``)."""
        with self._cond:
            self._observers = (*self._observers, observer)

    def remove_observer(self, observer: Callable[[], None]) -> None:
        with self._cond:
            self._observers = tuple(o for o in self._observers if o is not observer)

    def wait_until(self, ready: Callable[[], bool], deadline: float) -> bool:
        """Block until ``ready()`` (checked under the signal's lock after each wake-up) or the
        monotonic ``deadline``; returns ``ready()``'s last value."""
        with self._cond:
            while True:
                if ready():
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return ready()
                self._cond.wait(remaining)


def complete(future: concurrent.futures.Future[Any], value: Any) -> None:
    """Set a result; a future already completed (first wins) is left as it is."""
    try:
        future.set_result(value)
    except concurrent.futures.InvalidStateError:
        pass


def fail(future: concurrent.futures.Future[Any], error: BaseException) -> None:
    try:
        future.set_exception(error)
    except concurrent.futures.InvalidStateError:
        pass


@dataclass(frozen=True, slots=True)
class Routed:
    """An event one manager published, delivered to the actor that handles it."""

    event: Any
    source: str
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class MemberStatus:
    """What the membership actor last published of its member (read by ``health()``):
    the state machine's state name, the member id, and the member epoch (KIP-848, share) or
    the generation (classic)."""

    state: str
    member_id: str | None
    epoch: int | None


@dataclass(eq=False)
class ConsumerContext:
    """Shared by the facade, the consumer and every request-manager actor of one consumer."""

    config: ConsumerConfig
    clock: Clock
    scheduler: Scheduler
    subscriptions: SubscriptionState
    random: Callable[[], float]
    network_table: ChildTable
    group_protocol: str
    signal: AppSignal = field(default_factory=AppSignal)
    #: Java-named metrics (``kafka_actors.metrics``), built from config and clock.
    metrics: ConsumerMetrics = field(init=False)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: The root supervisor's children (the facade actor is found there).
    root_table: ChildTable | None = None
    #: Facts that survive an actor's restart.
    member_id: str | None = None
    member_epoch: int | None = None
    coordinator_id: int | None = None
    #: The coordinator's broker id (``coordinator_id`` is the id of its own connection).
    coordinator_node: int | None = None
    #: The member as the membership actor last published it (None: not built yet).
    member_status: MemberStatus | None = None
    #: The client instance id the broker assigned for telemetry (KIP-714), once known.
    client_instance_id: uuid.UUID | None = None
    #: Each broker connection's state, written by the NetworkActor.
    connection_states: ConnectionStates = field(default_factory=ConnectionStates)
    cluster: Any = None
    versions: NegotiatedVersions | None = None
    #: The consumer's one ApiVersions ask (all manager actors, every incarnation); under
    #: ``lock``.
    versions_ask: VersionsAsk = field(init=False)
    #: Background events for the application thread (appended by the facade actor).
    background: deque[Any] = field(default_factory=deque)
    #: The consumer's one fetch buffer: filled by the fetch actor's manager, collected from
    #: on the polling thread (:class:`~kafka_actors.actors.fetch_collector.FetchCollector`);
    #: its ``generation`` grows when data may be waiting (a poll that found nothing waits for
    #: it to change; the share fetch actor keeps its records but grows it too).
    fetch_buffer: FetchBuffer = field(init=False)
    #: Rebalance-safe commits (``rebalance.safe.commits``): RebalanceSafeCommits or None.
    safe_commits: Any = None
    #: Futures of application events not completed yet: failed if the tree gives up.
    outstanding: set[concurrent.futures.Future[Any]] = field(default_factory=set)

    def __post_init__(self) -> None:
        subscriptions = self.subscriptions
        self.metrics = ConsumerMetrics(
            self.config.client_id,
            MetricConfig.from_consumer_config(self.config),
            self.clock,
            assigned_partitions=subscriptions.num_assigned_partitions,
        )
        self.fetch_buffer = FetchBuffer(
            subscriptions, client_id=self.config.client_id, group_id=self.config.group_id
        )
        self.versions_ask = VersionsAsk(
            retry_backoff(self.config, self.random), timeout_ms=self.config.request_timeout_ms
        )

    def now_ms(self) -> int:
        return int(self.clock.monotonic() * 1000)

    def publish_member(self, state: str, member_id: str | None, epoch: int | None) -> None:
        """The membership actor's member after each message it handled (one reference
        assignment, only when something changed)."""
        status = MemberStatus(state, member_id or None, epoch)
        if status != self.member_status:
            self.member_status = status

    def version_for(self, api: int) -> int:
        """The highest version of ``api`` both sides support (KafkaError if none)."""
        versions = self.versions
        if versions is None:
            from kafka_actors.errors import KafkaConnectionError

            raise KafkaConnectionError("API versions not negotiated yet")
        return versions.version_for(api)

    def track(self, future: concurrent.futures.Future[Any]) -> None:
        with self.lock:
            self.outstanding.add(future)
        future.add_done_callback(self._untrack)

    def _untrack(self, future: concurrent.futures.Future[Any]) -> None:
        with self.lock:
            self.outstanding.discard(future)
        self.signal.notify()

    def fail_outstanding(self, error: BaseException) -> None:
        with self.lock:
            waiting = list(self.outstanding)
        for future in waiting:
            fail(future, error)
        self.signal.notify()

    def tell(self, name: str, message: Any) -> bool:
        """Tell a manager actor (by child name) or the facade (``"facade"``); False when it is
        down (restarting: it rebuilds its state on start) or the tree gave up."""
        table = self.root_table if name == "facade" else self.network_table
        if table is None:
            return False
        try:
            table.tell(name, message)
        except KeyError:
            return False  # no such actor in this consumer (no group: no membership, commit)
        except (ChildRestartingError, SupervisorFatalError) as exc:
            _log.debug("tell_dropped", target=name, message=type(message).__name__, why=repr(exc))
            return False
        return True

    def ask(self, name: str, message: Any, timeout: float) -> Any:
        return self.network_table.ask(name, message, timeout)
