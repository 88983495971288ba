"""``AsyncParallelConsumer``: records handled concurrently inside partitions by coroutines on
the event loop, on an :class:`~kafka_actors.aio.AsyncKafkaConsumer`.

Owns: the run loop (fetch with ``getmany``, hand records to the scheduler, start what may
start as tasks, pause and resume fetching, commit), the handler tasks (at most
``max_concurrency`` at once: the scheduler's bound), the rebalance listener (coroutines on
the loop: assignment reads the committed maps; revocation stops starting, awaits the running
records up to a deadline within the rebalance timeout, commits, then returns, which
acknowledges it; lost partitions are abandoned without a commit), the dead-letter producer,
``health()`` and ``metrics()``.
May touch: its :class:`~kafka_actors.aio.AsyncKafkaConsumer` (public API only), the pure
:class:`~kafka_actors.parallel.scheduler.WorkScheduler` (only from the loop's thread: no
lock), the clock it is given, confluent-kafka (dead letters; the broker's
``offset.metadata.max.bytes`` read in a worker thread).

Everything runs on the loop's thread: a handler task applies its own outcome to the
scheduler when it ends and goes on with the next record started (or, when none waits, starts
what may start next itself), so a slow handler never holds the fetch, and
``max.poll.interval.ms`` never expires because of handler time. A handler task is created
only when records wait and no task is about to take them (a new task creates the next one
while records still wait): handlers that suspend spread over up to ``max_concurrency`` tasks
within a few loop iterations, handlers that return at once run one after another in the same
task (which lets the loop run between two batches). ``stop()`` may be
called from any thread and from a signal handler.
"""

from __future__ import annotations

import asyncio
import inspect
import random as _random
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import CoroutineType, TracebackType
from typing import Any

from kafka_actors.aio import AsyncKafkaConsumer
from kafka_actors.aio_loop import running_loop_of
from kafka_actors.clock import Clock, SystemClock
from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import IllegalStateError, KafkaError
from kafka_actors.log import get_logger
from kafka_actors.parallel.dead_letters import DeadLetterProducer
from kafka_actors.parallel.messages import (
    DeadLetter,
    DeadLetterDue,
    FailurePolicy,
    Ordering,
    ParallelHealth,
    PauseReason,
    Task,
)
from kafka_actors.parallel.report import health_of, log_assigned, metrics_of, report_failure
from kafka_actors.parallel.scheduler import RUN_MAX, WorkScheduler
from kafka_actors.parallel.settings import ParallelSettings, offset_metadata_limit
from kafka_actors.parallel.workers import (
    FAST_HANDLER_S,
    record_context_vars,
    set_record_fields,
)
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord
from kafka_actors.supervisors import FaultInjector

__all__ = ["AsyncParallelConsumer"]

AsyncHandler = Callable[[ConsumerRecord], Awaitable[Any]]

_IDLE_POLL_S = 0.1
_log = get_logger("parallel")


class _Progress:
    """Wakes the coroutines waiting for a record to end (revocations, close)."""

    def __init__(self) -> None:
        #: The futures waiting (one set for the object's life: a handler task may test it
        #: for emptiness before calling :meth:`fire`).
        self.waiters: set[asyncio.Future[None]] = set()

    async def wait(self, timeout: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.add(future)
        try:
            await asyncio.wait_for(future, max(0.0, timeout))
        except TimeoutError:
            pass
        finally:
            self.waiters.discard(future)

    def fire(self) -> None:
        if not self.waiters:
            return
        for future in self.waiters:
            if not future.done():
                future.set_result(None)
        self.waiters.clear()


class _Listener:
    """The rebalance listener given to the AsyncKafkaConsumer (its methods are coroutines)."""

    def __init__(self, owner: AsyncParallelConsumer) -> None:
        self._owner = owner

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._owner._on_assigned(assigned)

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._owner._on_revoked(revoked)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self._owner._on_lost(lost)


class AsyncParallelConsumer:
    """Records handled concurrently inside partitions by a coroutine function, in key order
    (``docs/parallel.md``); the asyncio twin of
    :class:`~kafka_actors.parallel.consumer.ParallelConsumer`, with the same options.

    ``handler``: ``async def handle(record) -> None``; returning completes the record,
    raising fails the attempt. At most ``max_concurrency`` handlers run at once, as tasks on
    the loop that runs :meth:`run`.

    ::

        async with AsyncParallelConsumer(config, handler=handle, max_concurrency=256) as pc:
            pc.subscribe(["orders"])
            await pc.run()      # until pc.stop(); leaving the block closes
    """

    def __init__(
        self,
        config: Mapping[str, object] | ConsumerConfig,
        *,
        handler: AsyncHandler,
        ordering: Ordering | str = "key",
        max_concurrency: int = 64,
        max_attempts: int = 5,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 30_000,
        dead_letter_topic: str | None = None,
        on_failure: FailurePolicy | str = "stop",
        max_in_flight_per_partition: int = 0,
        max_buffered_per_partition: int = 1000,
        max_uncommitted_per_partition: int = 100_000,
        offset_metadata_max_bytes: int | None = None,
        producer_config: Mapping[str, Any] | None = None,
        revocation_timeout_ms: int | None = None,
        clock: Clock | None = None,
        random: Callable[[], float] | None = None,
        faults: FaultInjector | None = None,
    ) -> None:
        if not callable(handler):
            raise TypeError("handler must be a coroutine function of one record")
        settings = ParallelSettings.build(
            config,
            owner="an AsyncParallelConsumer",
            ordering=ordering,
            max_concurrency=max_concurrency,
            max_attempts=max_attempts,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            dead_letter_topic=dead_letter_topic,
            on_failure=on_failure,
            max_in_flight_per_partition=max_in_flight_per_partition,
            max_buffered_per_partition=max_buffered_per_partition,
            max_uncommitted_per_partition=max_uncommitted_per_partition,
            offset_metadata_max_bytes=offset_metadata_max_bytes,
            producer_config=producer_config,
            revocation_timeout_ms=revocation_timeout_ms,
        )
        self._settings = settings
        user = settings.user
        # The broker's limit on commit metadata replaces the default before the group is joined.
        self._work_config = settings.work_config
        self._metadata_max_bytes = settings.metadata_max_bytes
        self._clock: Clock = clock or SystemClock()
        self._random = random or _random.random
        self._handler = handler
        self._consumer = AsyncKafkaConsumer(config=settings.consumer_config, faults=faults)
        self._scheduler = WorkScheduler(self._work_config, self._random)
        self._producer: DeadLetterProducer | None = None
        self._topics: list[str] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._stopping = False
        self._wake_event: asyncio.Event | None = None
        self._progress = _Progress()
        self._tasks: set[asyncio.Task[None]] = set()
        self._queued: deque[Task] = deque()  # started records no handler task took yet
        self._spawning = False  # a handler task was created and has not taken a record yet
        self._running = False
        self._run_done: asyncio.Event | None = None
        self._closed = False
        self._paused: dict[TopicPartition, PauseReason] = {}
        self._revoking = 0
        self._next_commit_ms = 0
        self._commit_task: asyncio.Task[None] | None = None
        self._last_poll_ms: int | None = None
        self._error: BaseException | None = None
        self._commits = 0
        self._commit_failures = 0
        self._log = _log.bind(group_id=user.group_id, client_id=user.client_id)

    # -- context manager -------------------------------------------------------------------

    async def __aenter__(self) -> AsyncParallelConsumer:
        self._bind()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def consumer(self) -> AsyncKafkaConsumer:
        """The consumer underneath (``assignment()``, ``committed()``, ``metrics()``); do not
        fetch, commit, pause or resume it yourself."""
        return self._consumer

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = running_loop_of(self._loop, "AsyncParallelConsumer")
        if self._loop is None:
            self._loop = loop
            self._loop_thread = threading.get_ident()
            self._wake_event = asyncio.Event()
            self._run_done = asyncio.Event()
            self._run_done.set()
        return loop

    def _now_ms(self) -> int:
        return int(self._clock.monotonic() * 1000)

    # -- subscription ----------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] | str) -> None:
        """Subscribe to ``topics`` (the group is joined when :meth:`run` starts, after the
        broker's ``offset.metadata.max.bytes`` is read, unless it was given)."""
        wanted = [topics] if isinstance(topics, str) else list(topics)
        if not wanted:
            raise ValueError("an empty subscription")
        if self._closed:
            raise IllegalStateError("the AsyncParallelConsumer is closed")
        self._topics = wanted

    async def _prepare(self) -> None:
        if self._metadata_max_bytes is None:
            limit = await asyncio.to_thread(
                offset_metadata_limit, self._settings.client_config, self._log
            )
            self._metadata_max_bytes = limit
            self._work_config = self._settings.with_metadata_limit(limit)
            self._scheduler = WorkScheduler(self._work_config, self._random)
        if self._settings.dead_letter_topic is not None and self._producer is None:
            self._producer = DeadLetterProducer(
                self._settings.dead_letter_topic,
                self._settings.client_config,
                self._dead_letter_delivered,
            )
        assert self._topics is not None
        self._consumer.subscribe(self._topics, listener=_Listener(self))

    # -- running ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Handle records until :meth:`stop`; then return (``close()`` finishes what is in
        flight and commits). A fatal error of the consumer is raised here (``health()``
        says ``failed``)."""
        self._bind()
        if self._topics is None:
            raise IllegalStateError("subscribe() before run()")
        if self._closed:
            raise IllegalStateError("the AsyncParallelConsumer is closed")
        if self._running:
            raise IllegalStateError("run() is running already")
        assert self._run_done is not None
        self._running = True
        self._run_done.clear()
        try:
            if not self._consumer.subscription():
                await self._prepare()
            while not self._stopping:
                await self._turn()
        except KafkaError as exc:
            self._error = exc
            self._log.error("parallel_consumer_failed", error=repr(exc))
            raise
        finally:
            self._running = False
            self._run_done.set()

    def stop(self) -> None:
        """Make :meth:`run` return soon (from any thread, or a signal handler)."""
        self._stopping = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        if self._wake_event is not None:
            self._wake_event.set()

    async def _turn(self) -> None:
        """One turn: dead letters, starts, pauses, commits, then records (waiting until some
        arrive, a handler ends, a retry is due, or the poll timeout)."""
        if self._producer is not None:
            self._producer.poll()
        self._start_ready()
        self._apply_pauses()
        self._auto_commit_if_due()
        records = await self._fetch(self._poll_timeout())
        self._last_poll_ms = self._now_ms()
        if records:
            scheduler = self._scheduler
            for tp, recs in records.items():
                scheduler.offer(tp, recs)
            self._start_ready()

    def _poll_timeout(self) -> float:
        assert self._wake_event is not None
        if self._wake_event.is_set() or self._stopping:
            return 0.0
        now = self._now_ms()
        wait_ms: float = _IDLE_POLL_S * 1000
        due = self._scheduler.next_due_ms()
        if due is not None:
            wait_ms = min(wait_ms, due - now)
        if self._settings.user.enable_auto_commit:
            wait_ms = min(wait_ms, self._next_commit_ms - now)
        return max(0.0, wait_ms / 1000.0)

    async def _fetch(self, timeout: float) -> dict[TopicPartition, list[ConsumerRecord]]:
        wake = self._wake_event
        assert wake is not None
        limit = self._settings.user.max_poll_records
        if timeout <= 0.0:
            wake.clear()
            return await self._consumer.getmany(timeout_ms=0, max_records=limit)
        get = asyncio.ensure_future(
            self._consumer.getmany(timeout_ms=int(timeout * 1000), max_records=limit)
        )
        woken = asyncio.ensure_future(wake.wait())
        try:
            await asyncio.wait({get, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            if not get.done():
                get.cancel()  # what it collected stays in the consumer for the next call
        wake.clear()
        try:
            return await get
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return {}

    # -- handlers --------------------------------------------------------------------------

    def _start_ready(self) -> None:
        self._queued.extend(self._take_ready())
        if self._queued and not self._spawning:
            self._spawn()

    def _take_ready(self) -> list[Task]:
        """What may start now: the tasks (due dead letters are sent)."""
        tasks: list[Task] = []
        for item in self._scheduler.take_ready(self._now_ms()):
            if isinstance(item, Task):
                tasks.append(item)
            else:
                self._send_dead_letter(item)
        return tasks

    def _spawn(self) -> None:
        loop = self._loop
        assert loop is not None
        self._spawning = True
        task = loop.create_task(self._handle())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self) -> None:
        """A handler task: runs started records one after another while some wait, each
        with its fields bound in the structlog context (the task's own context)."""
        self._spawning = False
        queued = self._queued
        handler = self._handler
        scheduler = self._scheduler
        progress = self._progress
        # The record's fields in this task's structlog context (it ends with the task).
        fields = record_context_vars()
        waiters = progress.waiters
        following: Task | None = None
        # Handlers run since `began` (the clock read once per chained start): while they
        # take less than FAST_HANDLER_S each, a chained start may be a run (RUN_MAX).
        began = time.perf_counter()
        ran = 0
        while True:
            if following is not None:
                task, following = following, None
            else:
                if not queued:
                    if self._stopping:
                        return
                    more = self._take_ready()
                    if not more:
                        return
                    queued.extend(more)
                    await asyncio.sleep(0)  # let the loop run between two batches
                    if not queued:
                        return
                task = queued.popleft()
                if queued and not self._spawning:
                    self._spawn()
            record = task.record
            set_record_fields(fields, record, task.attempt)
            try:
                result = handler(record)
                if type(result) is CoroutineType or inspect.isawaitable(result):
                    await result
            except Exception as exc:
                self._outcome(task.work_id, exc)
                continue
            ran += 1
            following = task.run_next
            if following is not None:
                if following.interruptions == scheduler.interruptions and not self._stopping:
                    continue  # a run goes on: this success is settled by a later outcome
                following = None  # interrupted: the run ends here (the rest go back)
                scheduler.succeeded(task.work_id)
            # A success, as _outcome(work_id, None) handles it; when nothing else waits and
            # one of its key waited behind it, that one starts at once, in this task.
            elif task.followed and not queued and not self._stopping:
                now = time.perf_counter()
                fast = now - began < FAST_HANDLER_S * ran
                began, ran = now, 0
                following, _ = scheduler.succeeded_next(
                    task.work_id, self._now_ms(), RUN_MAX if fast else 1
                )
            else:
                scheduler.succeeded(task.work_id)
            if waiters:
                progress.fire()
            if self._paused:
                self._wake()  # a paused partition may resume

    def _outcome(self, work_id: int, error: BaseException | None) -> None:
        """A handler ended (on the loop's thread): complete or fail the record, wake the
        waiting revocations and, when it has work, the run loop."""
        scheduler = self._scheduler
        if error is None:
            scheduler.succeeded(work_id)
        else:
            record = scheduler.record(work_id)
            decision = scheduler.failed(work_id, error, self._now_ms())
            if decision is not None and record is not None:
                report_failure(self._log, decision, record, error, self._settings.dead_letter_topic)
                if isinstance(decision, DeadLetterDue):
                    self._send_dead_letter(decision.dead_letter)
            self._wake()  # a retry's time goes into the poll timeout
        self._progress.fire()
        if self._paused:
            self._wake()  # a paused partition may resume

    # -- dead letters ----------------------------------------------------------------------

    def _send_dead_letter(self, letter: DeadLetter) -> None:
        producer = self._producer
        if producer is None:
            self._scheduler.dead_letter_failed(letter.work_id, self._now_ms())
            return
        producer.send(letter)

    def _dead_letter_delivered(self, work_id: int, error: BaseException | None) -> None:
        """The producer's delivery callback (on the loop's thread, inside its poll)."""
        record = self._scheduler.record(work_id)
        if error is None:
            if self._scheduler.dead_lettered(work_id) and record is not None:
                self._log.error(
                    "dead_letter_sent",
                    topic=record.topic,
                    partition=record.partition,
                    offset=record.offset,
                    key=record.key,
                    dead_letter_topic=self._settings.dead_letter_topic,
                )
        else:
            retry_at = self._scheduler.dead_letter_failed(work_id, self._now_ms())
            self._log.warning(
                "dead_letter_failed", work_id=work_id, error=repr(error), retry_at_ms=retry_at
            )
        self._progress.fire()

    # -- pauses ----------------------------------------------------------------------------

    def _apply_pauses(self) -> None:
        wanted = self._scheduler.fetch_pauses()
        assigned = self._scheduler.assignment()
        resume = [tp for tp in self._paused if tp not in wanted and tp in assigned]
        pause = [tp for tp in wanted if tp not in self._paused]
        if pause:
            self._consumer.pause(*pause)
        if resume:
            self._consumer.resume(*resume)
        self._paused = dict(wanted)

    # -- commits ---------------------------------------------------------------------------

    def _auto_commit_if_due(self) -> None:
        if not self._settings.user.enable_auto_commit or self._revoking:
            return
        if self._commit_task is not None and not self._commit_task.done():
            return
        now = self._now_ms()
        if now < self._next_commit_ms:
            return
        self._next_commit_ms = now + self._settings.user.auto_commit_interval_ms
        offsets = self._scheduler.commit_offsets()
        if not offsets:
            return
        assert self._loop is not None
        self._commit_task = self._loop.create_task(
            self._commit(offsets, self._settings.user.default_api_timeout_ms / 1000)
        )

    async def _commit(
        self, offsets: dict[TopicPartition, OffsetAndMetadata], timeout_s: float
    ) -> None:
        """Commit ``offsets``; the scheduler learns what was stored. Never raises (a failed
        commit is counted and logged; the next one carries the same or more)."""
        if not offsets:
            return
        try:
            await self._consumer.commit(offsets, timeout=max(0.1, timeout_s))
        except KafkaError as exc:
            self._commit_failures += 1
            self._log.warning("commit_failed", error=repr(exc), partitions=len(offsets))
            return
        self._commits += 1
        self._scheduler.committed(offsets)

    # -- rebalances ------------------------------------------------------------------------

    async def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        if not assigned:
            return
        committed = await self._consumer.committed(
            assigned, timeout=self._settings.user.default_api_timeout_ms / 1000
        )
        for tp in sorted(assigned, key=lambda t: (t.topic, t.partition)):
            log_assigned(self._log, self._scheduler.assign(tp, committed.get(tp)))

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        if not revoked:
            return
        partitions = frozenset(revoked)
        scheduler = self._scheduler
        scheduler.begin_revoke(partitions)
        self._revoking += 1
        try:
            deadline = self._now_ms() + self._settings.revocation_timeout_ms
            if scheduler.revoke_pending(partitions):
                self._log.info(
                    "revocation_waiting",
                    partitions=sorted(map(str, partitions)),
                    running=scheduler.revoke_pending(partitions),
                )
            while scheduler.revoke_pending(partitions) and self._now_ms() < deadline:
                if self._producer is not None:
                    self._producer.poll()
                await self._progress.wait(min(0.05, (deadline - self._now_ms()) / 1000))
            pending = scheduler.revoke_pending(partitions)
            if pending:
                self._log.warning(
                    "revocation_deadline",
                    partitions=sorted(map(str, partitions)),
                    abandoned=pending,
                )
            commit_s = (
                min(
                    self._settings.user.default_api_timeout_ms,
                    self._settings.user.max_poll_interval_ms // 4,
                )
                / 1000
            )
            await self._commit(scheduler.commit_offsets(partitions), commit_s)
            scheduler.remove(partitions)
            for tp in partitions:
                self._paused.pop(tp, None)
            self._log.info("partitions_revoked", partitions=sorted(map(str, partitions)))
        finally:
            self._revoking -= 1

    def _on_lost(self, lost: set[TopicPartition]) -> None:
        abandoned = self._scheduler.remove(lost)
        for tp in lost:
            self._paused.pop(tp, None)
        self._progress.fire()
        self._log.warning("partitions_lost", partitions=sorted(map(str, lost)), abandoned=abandoned)

    # -- close -----------------------------------------------------------------------------

    async def close(self, timeout: float | None = 30.0) -> None:
        """Stop, wait for the records in flight at most ``timeout`` seconds, commit what
        completed, leave the group and close. Never waits longer than ``timeout`` (plus the
        consumer's own close, bounded by what remains of it)."""
        if self._closed:
            return
        self._bind()
        self._closed = True
        seconds = 30.0 if timeout is None else max(0.0, float(timeout))
        deadline = self._clock.monotonic() + seconds
        self.stop()
        assert self._run_done is not None
        if self._running:
            try:
                await asyncio.wait_for(
                    self._run_done.wait(), max(0.0, deadline - self._clock.monotonic())
                )
            except TimeoutError:
                pass
        try:
            await self._drain(deadline)
        finally:
            for task in list(self._tasks):
                task.cancel()
            if self._producer is not None:
                while self._producer.pending() and self._clock.monotonic() < deadline:
                    self._producer.poll()
                    await asyncio.sleep(0.01)
                if self._producer.pending():
                    self._log.warning("dead_letters_not_flushed", count=self._producer.pending())
            await self._consumer.close(max(0.5, deadline - self._clock.monotonic()))
            self._log.info("parallel_consumer_closed")

    async def _drain(self, deadline: float) -> None:
        scheduler = self._scheduler
        everything = scheduler.assignment()
        scheduler.begin_revoke(everything)
        while scheduler.revoke_pending(everything) and self._clock.monotonic() < deadline:
            if self._producer is not None:
                self._producer.poll()
            self._start_ready()  # due dead letters (no record of a revoking partition)
            await self._progress.wait(min(0.05, max(0.0, deadline - self._clock.monotonic())))
        if self._commit_task is not None and not self._commit_task.done():
            try:
                await asyncio.wait_for(
                    asyncio.shield(self._commit_task),
                    max(0.0, deadline - self._clock.monotonic()),
                )
            except TimeoutError:
                pass
        if self._error is None and self._topics is not None:
            remaining = max(0.5, deadline - self._clock.monotonic())
            await self._commit(scheduler.commit_offsets(everything), remaining)
        scheduler.remove(everything)
        self._paused.clear()

    # -- observability ---------------------------------------------------------------------

    def health(self) -> ParallelHealth:
        """As :meth:`ParallelConsumer.health` (read it from the loop's thread)."""
        now = self._now_ms()
        return health_of(
            self._scheduler.snapshot(now),
            now_ms=now,
            last_poll_ms=self._last_poll_ms,
            error=self._error,
            closed=self._closed,
            revoking=self._revoking > 0,
        )

    def metrics(self) -> dict[str, float]:
        """As :meth:`ParallelConsumer.metrics` (read it from the loop's thread)."""
        now = self._now_ms()
        return metrics_of(
            self._scheduler.snapshot(now),
            now_ms=now,
            last_poll_ms=self._last_poll_ms,
            commits=self._commits,
            commit_failures=self._commit_failures,
            offset_metadata_max_bytes=self._work_config.offset_metadata_max_bytes,
        )

    def __repr__(self) -> str:
        return (
            f"<AsyncParallelConsumer {self._work_config.ordering.value} "
            f"{self.health().state.value}>"
        )
