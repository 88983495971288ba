"""The handler threads of :class:`~kafka_actors.parallel.consumer.ParallelConsumer`, and the
structlog context of a handler call.

Owns: :class:`HandlerPool` (up to ``size`` threads running tasks from one shared queue) and
:func:`set_record_fields` (the record's fields in structlog's context variables). May touch:
structlog's context variables (the very ones ``bind_contextvars`` sets), threads; nothing of
the scheduler: the owner's ``refill`` is what takes the next tasks.

How work moves. The owner :meth:`~HandlerPool.push`-es tasks the scheduler started; a thread
takes the next task from the shared queue itself as soon as it finished one, so a handler's
end costs no round trip through the owner's loop. When the queue is empty, the thread calls
the owner's ``refill`` (which applies the outcomes reported so far and starts what may start
now, under the owner's lock) and goes on with what it returns, or sleeps until a push.
Threads are woken one at a time, and only while handlers are slow: a thread that takes a
task while more wait wakes one sleeping thread, unless a woken one has not started yet or
the handlers are fast. Whether they are is a score over the handlers that ended, every
thread's: one that took ``fast_handler_s`` or longer adds one, a faster one takes one off,
between 0 and :data:`SLOW_SCORE_MAX` (where it starts: unknown counts as slow); below
:data:`SLOW_SCORE_FAST` the handlers are fast. A fast handler that the GIL's switch
interrupted looks slow now and then; it hardly moves the score, where counting it alone
would wake a thread, whose contention makes more handlers look slow, and so on up to every
thread. Slow (sleeping, I/O bound) handlers thus spread over the threads within a few
wake-ups each; fast ones (that hold the GIL for all their short run) run on the one or two
threads awake, which is what the GIL allows anyway, instead of waking every thread to fight
over it. While handlers are fast, a thread that runs out of tasks while another is awake sleeps
without a refill (the last one awake refills), so that one thread runs them. A push wakes a
thread only when handlers are slow or none is awake (a thread that found
the queue empty looks at it again under the pool's mutex before it sleeps: a push is never
missed). Should every awake thread be held by a handler that turned slow while others wait
(no handler ends to move the score), the owner's :meth:`HandlerPool.nudge` (once per turn of
its loop) sees no task taken for ``stall_ms``, sets the score to slow and wakes one.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from contextvars import Context, ContextVar
from typing import Any

import structlog

from kafka_actors.parallel.messages import Task
from kafka_actors.protocol.records.decode import ConsumerRecord

__all__ = [
    "FAST_HANDLER_S",
    "FAST_SAMPLE",
    "FIELDS",
    "SLOW_SCORE_FAST",
    "SLOW_SCORE_MAX",
    "HandlerPool",
    "record_context_vars",
    "set_record_fields",
]

#: The handlers' slowness score (module doc): its cap (and start), and the value below which
#: they are fast.
SLOW_SCORE_MAX = 8
SLOW_SCORE_FAST = 4
#: While the score is 0 (the handlers fast for a while), one handler in this many is timed.
FAST_SAMPLE = 8
#: A handler that returns within this many seconds is fast (module doc).
FAST_HANDLER_S = 0.0001

#: What a handler call has bound in the structlog context (``docs/parallel.md``).
FIELDS = ("topic", "partition", "offset", "key", "attempt")


@functools.cache
def _structlog_vars() -> tuple[ContextVar[Any], ...]:
    """The context variables ``structlog.contextvars.bind_contextvars`` sets for
    :data:`FIELDS` (found through its public API: the tokens it returns name them)."""
    tokens = structlog.contextvars.bind_contextvars(**dict.fromkeys(FIELDS))
    structlog.contextvars.reset_contextvars(**tokens)
    return tuple(tokens[name].var for name in FIELDS)


def record_context_vars() -> tuple[ContextVar[Any], ...]:
    """The context variables of :data:`FIELDS`, in that order (for a loop that binds them
    per record itself: what :func:`bind_record` does)."""
    return _structlog_vars()


def set_record_fields(
    fields: tuple[ContextVar[Any], ...], record: ConsumerRecord, attempt: int
) -> None:
    """Set the context variables ``fields`` (:func:`record_context_vars`) to ``record``'s,
    leaving those that already hold the value: a record of the last one's partition at the
    same attempt (the usual case) sets only its offset and key. The values are read, not
    remembered, in case the handler bound or cleared these variables itself."""
    topic, partition, offset, key, attempts = fields
    if partition.get(None) != record.partition or topic.get(None) != record.topic:
        topic.set(record.topic)
        partition.set(record.partition)
    offset.set(record.offset)
    key.set(record.key)
    if attempts.get(None) != attempt:
        attempts.set(attempt)


class HandlerPool:
    """Up to ``size`` threads running :class:`Task` s (module doc).

    ``run(task)``: runs the handler and reports its outcome (never raises); it is called
    with the record's fields bound in the structlog context, and may return the task this
    thread runs next (started for it by the owner) instead of taking one from the queue.
    ``refill()``: the owner's next tasks when the queue is empty (``[]``: none now; the
    thread sleeps until a push).
    """

    def __init__(
        self,
        size: int,
        run: Callable[[Task], Task | None],
        refill: Callable[[], list[Task]],
        name: str = "kafka-actors-parallel",
        *,
        fast_handler_s: float = FAST_HANDLER_S,
        stall_ms: int = 20,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if size < 1:
            raise ValueError("a pool of at least one thread")
        self._fast_handler_s = fast_handler_s
        self._clock = clock
        # The handlers' slowness (module doc); unknown at first: slow, every thread may wake.
        self._score = SLOW_SCORE_MAX
        self._fast = False
        self._taken = 0  # tasks taken by the threads, ever (a progress count for nudge())
        self._nudged = 0
        self._stall_ms = stall_ms
        self._stalled_ms: int | None = None  # since when no task was taken while some wait
        self._size = size
        self._run = run
        self._refill = refill
        self._name = name
        self._tasks: deque[Task] = deque()
        self._mutex = threading.Lock()
        self._idle: list[threading.Lock] = []  # the gates of sleeping threads (held)
        self._threads = 0
        self._waking = False  # a thread was woken (or started) and has not taken a task yet
        self._closed = False

    @property
    def threads(self) -> int:
        """Threads started so far (they are started when work waits and none sleeps)."""
        return self._threads

    @property
    def awake(self) -> int:
        """Threads not asleep now (running a handler, or looking for the next task)."""
        with self._mutex:
            return self._threads - len(self._idle)

    @property
    def queued(self) -> int:
        """Tasks pushed and not taken by a thread yet."""
        return len(self._tasks)

    @property
    def fast(self) -> bool:
        """The handlers are fast now: a thread taking a task wakes no other (module doc)."""
        return self._fast

    def nudge(self, now_ms: int) -> None:
        """The owner's periodic check (once per turn of its loop, with its clock's time):
        when tasks waited and none was taken for ``stall_ms``, every awake thread is held by
        a handler: the handlers count as slow again and one sleeping thread is woken."""
        taken = self._taken
        if not self._tasks or taken != self._nudged:
            self._nudged = taken
            self._stalled_ms = None
            return
        if self._stalled_ms is None:
            self._stalled_ms = now_ms
        elif now_ms - self._stalled_ms >= self._stall_ms:
            self._stalled_ms = None
            self._score = SLOW_SCORE_MAX
            self._fast = False
            self._wake_one()

    def push(self, tasks: Iterable[Task]) -> bool:
        """Queue ``tasks`` to run; False (nothing queued) once the pool is shut down."""
        if self._closed:
            return False
        self._tasks.extend(tasks)
        if not self._waking:
            self._wake_one()
        return True

    def shutdown(self) -> list[Task]:
        """No more tasks: the queued ones are dropped (returned), sleeping threads end,
        running ones end after their handler returns."""
        with self._mutex:
            self._closed = True
            dropped = list(self._tasks)
            self._tasks.clear()
            idle, self._idle = self._idle, []
        for gate in idle:
            gate.release()
        return dropped

    def _wake_one(self) -> None:
        with self._mutex:
            if self._waking or self._closed or not self._tasks:
                return
            if self._fast and self._threads > len(self._idle):
                return  # fast handlers: a thread awake takes the tasks (module doc)
            if self._idle:
                self._waking = True
                self._idle.pop().release()
            elif self._threads < self._size:
                self._waking = True
                self._threads += 1
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}-{self._threads}", daemon=True
                )
                thread.start()

    def _step_aside(self, gate: threading.Lock) -> bool:
        """Out of tasks while handlers are fast and another thread is awake: sleep without
        a refill (the last thread awake refills; the mutex orders the decisions, so one
        always does). True: ``gate`` is in the idle list."""
        if not self._fast:
            return False
        with self._mutex:
            if self._closed or self._tasks or self._threads - len(self._idle) < 2:
                return False
            self._idle.append(gate)
            return True

    def _work(self) -> None:
        gate = threading.Lock()
        gate.acquire()
        fields = _structlog_vars()
        tasks = self._tasks
        run = self._run
        clock = self._clock
        fast_s = self._fast_handler_s
        self._waking = False
        following: Task | None = None
        while True:
            if following is not None:
                task = following  # started for this thread by the owner: no hand-off
            else:
                try:
                    task = tasks.popleft()
                except IndexError:
                    task = None
            if task is None:
                if not self._step_aside(gate):
                    # In a context of its own: what the owner logs there is not about the
                    # last record, whose fields stay bound in the thread's context (a pool
                    # thread's context holds nothing else: a thread starts with an empty one).
                    more = Context().run(self._refill) if not self._closed else []
                    if more:
                        tasks.extend(more)
                        continue
                    with self._mutex:
                        if self._closed:
                            return
                        if tasks:
                            continue  # pushed meanwhile
                        self._idle.append(gate)
                gate.acquire()
                self._waking = False
                if self._closed:
                    return
                continue
            taken = self._taken = self._taken + 1
            fast = self._fast
            if tasks and not self._waking and not fast:
                self._wake_one()
            set_record_fields(fields, task.record, task.attempt)
            if not self._score and taken % FAST_SAMPLE:
                # Fast handlers, all of the last ones: one in FAST_SAMPLE is timed; once one
                # is slow, every one is again (the score then moves as before).
                following = run(task)
                continue
            began = clock()
            following = run(task)
            # Threads race on the score: it only needs to be about right.
            score = self._score
            if clock() - began < fast_s:
                if score:
                    self._score = score - 1
                    self._fast = score - 1 < SLOW_SCORE_FAST
            elif score < SLOW_SCORE_MAX:
                self._score = score + 1
                self._fast = score + 1 < SLOW_SCORE_FAST
