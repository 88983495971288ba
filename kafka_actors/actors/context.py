"""What the consumer's actors share: the context object, the application wake-up, metrics.

Owns: :class:`ConsumerContext` (configuration, clock, scheduler, the shared
:class:`~kafka_actors.protocol.subscription.SubscriptionState`, the handles by which actors find
each other across restarts, and the few facts a restarted actor must find again: the member
id, the known coordinator, the last cluster view, the negotiated API versions),
:class:`AppSignal` (the one condition variable that wakes application threads blocked in
``poll`` or a blocking call), :class:`Outcome` helpers for the ``concurrent.futures.Future``
that carries each application event's result, and :class:`ConsumerMetrics`.

May touch: threading primitives and the supervisors' :class:`ChildTable` (thread-safe). Every
attribute written by an actor after start is either guarded by ``lock`` or a single reference
assignment (atomic in CPython) of an immutable value.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka_actors.clock import Clock, Scheduler
from kafka_actors.config import ConsumerConfig
from kafka_actors.log import get_logger
from kafka_actors.protocol.subscription import SubscriptionState
from kafka_actors.protocol.versions import NegotiatedVersions
from kafka_actors.supervisors import ChildRestartingError, ChildTable, SupervisorFatalError

__all__ = [
    "AppSignal",
    "ConsumerContext",
    "ConsumerMetrics",
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


class _Rate:
    """Events per second over a sliding window (Java's Rate over 30 s samples)."""

    def __init__(self, window_s: float = 30.0) -> None:
        self._window = window_s
        self._samples: deque[tuple[float, float]] = deque()
        self.total = 0.0

    def record(self, value: float, now: float) -> None:
        self._samples.append((now, value))
        self.total += value
        self._trim(now)

    def _trim(self, now: float) -> None:
        while self._samples and self._samples[0][0] < now - self._window:
            self._samples.popleft()

    def rate(self, now: float, started: float) -> float:
        self._trim(now)
        span = min(self._window, max(now - started, 1e-3))
        return sum(v for _t, v in self._samples) / span


class ConsumerMetrics:
    """Counters kept by the fetch actor and the facade; read as a dict by ``metrics()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._fetch_requests = _Rate()
        self._fetch_bytes = _Rate()
        self._records_consumed = _Rate()
        self._bytes_consumed = _Rate()
        self._polls = _Rate()
        self.fetch_latency_ms_total = 0.0
        self.fetch_latency_ms_max = 0.0
        self.commits = 0
        self.commit_latency_ms_total = 0.0
        self.commit_latency_samples = 0
        self.rebalances = 0
        self.last_poll_at: float | None = None
        #: Milliseconds between the last two polls (Java's time-between-poll-last).
        self.time_between_polls_ms: float | None = None

    def fetch_completed(self, latency_ms: float, num_bytes: int) -> None:
        now = time.monotonic()
        with self._lock:
            self._fetch_requests.record(1, now)
            self._fetch_bytes.record(num_bytes, now)
            self.fetch_latency_ms_total += latency_ms
            self.fetch_latency_ms_max = max(self.fetch_latency_ms_max, latency_ms)

    def consumed(self, num_records: int, num_bytes: int) -> None:
        now = time.monotonic()
        with self._lock:
            self._records_consumed.record(num_records, now)
            self._bytes_consumed.record(num_bytes, now)

    def polled(self) -> None:
        now = time.monotonic()
        with self._lock:
            self._polls.record(1, now)
            if self.last_poll_at is not None:
                self.time_between_polls_ms = (now - self.last_poll_at) * 1000.0
            self.last_poll_at = now

    def committed(self, latency_ms: float | None) -> None:
        """A commit succeeded; ``latency_ms`` None when it was not timed (interval
        auto-commits): counted in commit-total, not in commit-latency-avg."""
        with self._lock:
            self.commits += 1
            if latency_ms is not None:
                self.commit_latency_ms_total += latency_ms
                self.commit_latency_samples += 1

    def snapshot(self) -> dict[str, float]:
        now = time.monotonic()
        started = self._started
        with self._lock:
            fetches = self._fetch_requests.total
            return {
                "fetch-rate": self._fetch_requests.rate(now, started),
                "fetch-total": fetches,
                "bytes-consumed-rate": self._bytes_consumed.rate(now, started),
                "bytes-consumed-total": self._bytes_consumed.total,
                "fetch-size-avg": (self._fetch_bytes.total / fetches) if fetches else 0.0,
                "fetch-latency-avg": (self.fetch_latency_ms_total / fetches) if fetches else 0.0,
                "fetch-latency-max": self.fetch_latency_ms_max,
                "records-consumed-rate": self._records_consumed.rate(now, started),
                "records-consumed-total": self._records_consumed.total,
                "poll-rate": self._polls.rate(now, started),
                "poll-total": self._polls.total,
                "time-between-poll-last": self.time_between_polls_ms or 0.0,
                "commit-total": float(self.commits),
                "commit-latency-avg": (
                    self.commit_latency_ms_total / self.commit_latency_samples
                    if self.commit_latency_samples
                    else 0.0
                ),
                "rebalance-total": float(self.rebalances),
            }


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
    metrics: ConsumerMetrics = field(default_factory=ConsumerMetrics)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: The root supervisor's children (the facade actor is found there).
    root_table: ChildTable | None = None
    #: Facts that survive an actor's restart.
    member_id: str | None = None
    member_epoch: int | None = None
    group_metadata: Any = None
    coordinator_id: int | None = None
    cluster: Any = None
    versions: NegotiatedVersions | None = None
    #: Background events for the application thread (appended by the facade actor).
    background: deque[Any] = field(default_factory=deque)
    #: Grows when the fetch actor buffered new data (poll() waits for it to change).
    fetch_generation: int = 0
    #: The running fetch actor's direct collect (``collect(max_records) -> FetchResult | None``)
    #: for the polling thread; None while no fetch actor runs (then poll asks the actor).
    fetch_collector: Callable[[int], Any] | None = None
    #: The same when the fetch actor's lock is free, never waiting for it
    #: (``try_collect(max_records) -> (ran, FetchResult | None)``, ran False when the lock was
    #: taken): the asyncio consumer collects on the loop's thread with it.
    fetch_try_collector: Callable[[int], tuple[bool, Any]] | None = None
    #: Rebalance-safe commits (``rebalance.safe.commits``): RebalanceSafeCommits or None.
    safe_commits: Any = None
    #: Futures of application events not completed yet: failed if the tree gives up.
    outstanding: set[concurrent.futures.Future[Any]] = field(default_factory=set)

    def now_ms(self) -> int:
        return int(self.clock.monotonic() * 1000)

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
