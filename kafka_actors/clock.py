"""Injected time and timers for kafka-actors.

Owns: the :class:`Clock` protocol (monotonic seconds for deadlines and backoff, wall-clock
milliseconds for Kafka timestamps), :class:`SystemClock`, :class:`ManualClock` for
deterministic tests, and the :class:`Scheduler` protocol (``call_later(delay, callback)``
returning a cancellable handle) with two implementations:

* :class:`ThreadScheduler`: one timer thread per scheduler holding a heap of deadlines and
  sleeping on a condition variable until the earliest one (no thread per timer, no polling).
  Callbacks run on the timer thread, so they must be short: the project's callbacks only
  ``actor_ref.tell(message)`` (see :func:`tell_later`). :func:`default_scheduler` returns the
  process-wide instance shared by every actor.
* :class:`ManualScheduler`: driven by :meth:`ManualClock.advance`, which fires due callbacks
  in deadline order on the calling thread, with the clock set to each deadline as it fires.

May touch: ``time`` and ``threading`` (this is the one place in the project that reads the
real clock) and ``ActorRef.tell`` in :func:`tell_later`. State machines never import this
module's real implementations; they are handed a ``Clock`` or the current time.

:class:`SystemClock` reads the monotonic clock bound when this module is imported (as
``threading`` binds its own), not ``time.monotonic`` looked up at each call: a test that
monkeypatches ``time.monotonic`` for the code it tests must not move the deadlines of the
process-wide timer thread, whose waits (``Condition.wait``) always run on real time. Such a
patch once set a far-future wait on the default scheduler's thread, and no timer of the
process fired after it (issue 22). Fake time is injected: :class:`ManualClock`.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pykka

from kafka_actors.log import get_logger

__all__ = [
    "Cancellable",
    "Clock",
    "ManualClock",
    "ManualScheduler",
    "Scheduler",
    "SystemClock",
    "ThreadScheduler",
    "TimerHandle",
    "default_scheduler",
    "tell_later",
]

_log = get_logger("clock")

# Bound at import, not looked up per call: see the module docstring (issue 22).
_real_monotonic = time.monotonic


class Clock(Protocol):
    """A source of time: monotonic seconds (deadlines, backoff) and wall-clock milliseconds."""

    def monotonic(self) -> float:
        """Seconds on a monotonic scale with an arbitrary origin."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch (Kafka timestamps)."""
        ...


class SystemClock:
    """The real clock: :func:`time.monotonic` (as bound at import) and :func:`time.time_ns`."""

    def monotonic(self) -> float:
        return _real_monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


class Cancellable(Protocol):
    """What :meth:`Scheduler.call_later` returns."""

    def cancel(self) -> bool:
        """Cancel the timer; True if it had not fired (and now never will)."""
        ...


class Scheduler(Protocol):
    """Runs callbacks after a delay measured on the scheduler's clock."""

    def call_later(self, delay: float, callback: Callable[[], object]) -> Cancellable:
        """Run ``callback`` once, ``delay`` seconds from now (a negative delay means now)."""
        ...


@dataclass(eq=False)
class TimerHandle:
    """A scheduled callback; ordered by (deadline, sequence) in the schedulers' heaps."""

    deadline: float
    seq: int
    callback: Callable[[], object] | None
    _owner: _HeapScheduler | None = field(default=None, repr=False)

    def __lt__(self, other: TimerHandle) -> bool:
        return (self.deadline, self.seq) < (other.deadline, other.seq)

    @property
    def cancelled(self) -> bool:
        return self.callback is None

    def cancel(self) -> bool:
        owner = self._owner
        if owner is None:
            return False
        return owner._cancel(self)


class _HeapScheduler:
    """Heap bookkeeping shared by the real and the manual scheduler."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._heap: list[TimerHandle] = []
        self._seq = itertools.count()

    def _push(self, deadline: float, callback: Callable[[], object]) -> TimerHandle:
        handle = TimerHandle(deadline, next(self._seq), callback, self)
        heapq.heappush(self._heap, handle)
        return handle

    def _cancel(self, handle: TimerHandle) -> bool:
        with self._lock:
            if handle.callback is None:
                return False
            handle.callback = None
            handle._owner = None
            # Lazy deletion: the entry stays in the heap and is skipped when popped.
            return True

    def _pop_due(self, now: float) -> TimerHandle | None:
        """Pop the earliest live handle with deadline <= now (caller holds the lock)."""
        while self._heap:
            head = self._heap[0]
            if head.callback is None:
                heapq.heappop(self._heap)
                continue
            if head.deadline > now:
                return None
            heapq.heappop(self._heap)
            return head
        return None

    def _next_deadline(self) -> float | None:
        """The earliest live deadline (caller holds the lock)."""
        while self._heap and self._heap[0].callback is None:
            heapq.heappop(self._heap)
        return self._heap[0].deadline if self._heap else None

    def pending(self) -> int:
        """Number of timers not yet fired or cancelled."""
        with self._lock:
            return sum(1 for h in self._heap if h.callback is not None)


def _run_callback(handle: TimerHandle, callback: Callable[[], object]) -> None:
    try:
        callback()
    except Exception:
        _log.exception("timer_callback_failed", deadline=handle.deadline)


#: The longest the timer thread sleeps at once; it sleeps again if nothing is due.
_MAX_TIMER_WAIT_S = 3600.0


class ThreadScheduler(_HeapScheduler):
    """One daemon timer thread waiting on a condition variable for the earliest deadline.

    The thread starts on the first :meth:`call_later` and ends on :meth:`close`. A callback
    that raises is logged and does not stop the thread.
    """

    def __init__(self, clock: Clock | None = None, name: str = "kafka-actors-timer") -> None:
        super().__init__()
        self._clock: Clock = clock or SystemClock()
        self._name = name
        self._thread: threading.Thread | None = None
        self._closed = False

    def call_later(self, delay: float, callback: Callable[[], object]) -> TimerHandle:
        with self._lock:
            if self._closed:
                raise RuntimeError("scheduler is closed")
            handle = self._push(self._clock.monotonic() + max(0.0, delay), callback)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            if self._heap[0] is handle:
                self._lock.notify()
            return handle

    def close(self, timeout: float | None = 5.0) -> None:
        """Stop the timer thread; timers not yet fired never fire."""
        with self._lock:
            self._closed = True
            for handle in self._heap:
                handle.callback = None
            self._heap.clear()
            self._lock.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._lock:
                while True:
                    if self._closed:
                        return
                    due = self._pop_due(self._clock.monotonic())
                    if due is not None:
                        break
                    deadline = self._next_deadline()
                    if deadline is None:
                        self._lock.wait()
                    else:
                        # capped: an infinite or huge delay (a caller's timeout passed
                        # through) would raise OverflowError here and end the thread for good
                        wait = deadline - self._clock.monotonic()
                        self._lock.wait(min(max(0.0, wait), _MAX_TIMER_WAIT_S))
                callback = due.callback
                due.callback = None
                due._owner = None
            if callback is not None:
                _run_callback(due, callback)


class ManualClock:
    """A clock that moves only when told to; drives the :class:`ManualScheduler` s bound to it."""

    def __init__(self, monotonic: float = 0.0, wall_ms: int = 1_700_000_000_000) -> None:
        self._lock = threading.Lock()
        self._monotonic = float(monotonic)
        self._wall_origin_ms = wall_ms
        self._monotonic_origin = self._monotonic
        self._schedulers: list[ManualScheduler] = []

    def monotonic(self) -> float:
        with self._lock:
            return self._monotonic

    def wall_ms(self) -> int:
        with self._lock:
            elapsed = self._monotonic - self._monotonic_origin
            return self._wall_origin_ms + round(elapsed * 1000)

    def scheduler(self) -> ManualScheduler:
        """A new scheduler driven by this clock."""
        return ManualScheduler(self)

    def _attach(self, scheduler: ManualScheduler) -> None:
        with self._lock:
            self._schedulers.append(scheduler)

    def _set(self, value: float) -> None:
        with self._lock:
            self._monotonic = max(self._monotonic, value)

    def advance(self, seconds: float) -> int:
        """Move time forward, firing due callbacks in deadline order; returns how many fired.

        Each callback runs with the clock set to its own deadline, so it observes the time at
        which it was due; callbacks it schedules inside the window fire in the same call.
        """
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        target = self.monotonic() + seconds
        fired = 0
        while True:
            best: tuple[float, int, ManualScheduler] | None = None
            with self._lock:
                schedulers = list(self._schedulers)
            for sched in schedulers:
                peek = sched._peek()
                if peek is not None and peek[0] <= target:
                    if best is None or peek < best[:2]:
                        best = (peek[0], peek[1], sched)
            if best is None:
                break
            self._set(best[0])
            if best[2]._fire_one(best[0]):
                fired += 1
        self._set(target)
        return fired


class ManualScheduler(_HeapScheduler):
    """A scheduler whose timers fire only inside :meth:`ManualClock.advance`."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__()
        self.clock = clock
        clock._attach(self)

    def call_later(self, delay: float, callback: Callable[[], object]) -> TimerHandle:
        with self._lock:
            return self._push(self.clock.monotonic() + max(0.0, delay), callback)

    def _peek(self) -> tuple[float, int] | None:
        with self._lock:
            self._next_deadline()
            if not self._heap:
                return None
            return (self._heap[0].deadline, self._heap[0].seq)

    def _fire_one(self, now: float) -> bool:
        with self._lock:
            due = self._pop_due(now)
            if due is None:
                return False
            callback = due.callback
            due.callback = None
            due._owner = None
        if callback is None:
            return False
        _run_callback(due, callback)
        return True

    def run_due(self) -> int:
        """Fire callbacks already due at the clock's current time (without advancing)."""
        return self.clock.advance(0.0)


def tell_later(scheduler: Scheduler, delay: float, actor_ref: Any, message: Any) -> Cancellable:
    """Deliver ``message`` to ``actor_ref`` with ``tell`` after ``delay`` seconds.

    A dead actor is not an error: the message is dropped (the actor's successor has its own
    timers).
    """

    def deliver() -> None:
        try:
            actor_ref.tell(message)
        except pykka.ActorDeadError:
            pass

    return scheduler.call_later(delay, deliver)


_default_lock = threading.Lock()
_default: ThreadScheduler | None = None


def default_scheduler() -> ThreadScheduler:
    """The process-wide timer thread shared by every actor that is not given a scheduler."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = ThreadScheduler()
        return _default


def _forget_default_after_fork() -> None:
    """A forked child has no timer thread: the parent's scheduler would never fire there
    (a consumer created in a child of a process that had one would never heartbeat)."""
    global _default, _default_lock
    _default = None
    _default_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_default_after_fork)
