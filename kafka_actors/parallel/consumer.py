"""``ParallelConsumer``: records handled concurrently inside partitions, on a ``KafkaConsumer``.

Owns: the run loop (poll, hand records to the scheduler, start what may start, apply
outcomes, pause and resume fetching, commit), the handler pool (a thread pool running a
function, or a pykka actor asked once per record), the rebalance listener (assignment reads
the committed maps; revocation stops starting, awaits the running records up to a deadline
within the rebalance timeout, commits, then acknowledges; lost partitions are abandoned
without a commit), the dead-letter producer, ``health()`` and ``metrics()``.
May touch: its :class:`~kafka_actors.consumer.KafkaConsumer` (public API only), the pure
:class:`~kafka_actors.parallel.scheduler.WorkScheduler` (under this object's lock), the
clock it is given, confluent-kafka (dead letters, and the broker's
``offset.metadata.max.bytes`` through its AdminClient).

Threads: ``run()`` runs the loop on the calling thread; handlers run on the pool's threads
(:class:`~kafka_actors.parallel.workers.HandlerPool`), which hand their outcomes back through a
queue and, when they run out of tasks, apply the outcomes and take what may start next
themselves (under the lock): a record's end starts the next one without a round trip through
the loop. They wake a poll that waits only when the loop has something to do (a retry to
time, a dead letter to send, a partition to resume, a revocation to finish). ``stop()``,
``health()``, ``metrics()`` and ``close()`` may be called from any thread, ``stop()`` from a
signal handler too. The poll never waits for a handler, so ``max.poll.interval.ms`` never
expires because of handler time.
"""

from __future__ import annotations

import concurrent.futures
import queue
import random as _random
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pykka

from kafka_actors.clock import Clock, SystemClock
from kafka_actors.config import ConsumerConfig
from kafka_actors.consumer import KafkaConsumer
from kafka_actors.errors import (
    IllegalStateError,
    KafkaError,
    WakeupError,
)
from kafka_actors.log import get_logger
from kafka_actors.parallel.dead_letters import DeadLetterProducer
from kafka_actors.parallel.messages import (
    DeadLetter,
    DeadLetterDue,
    FailureDecision,
    FailurePolicy,
    Ordering,
    ParallelHealth,
    PauseReason,
    Task,
)
from kafka_actors.parallel.report import health_of, log_assigned, metrics_of, report_failure
from kafka_actors.parallel.scheduler import RUN_MAX, WorkScheduler
from kafka_actors.parallel.settings import (
    ParallelSettings,
    offset_metadata_limit,
    read_offset_metadata_max_bytes,
)
from kafka_actors.parallel.workers import HandlerPool
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord
from kafka_actors.structs import ConsumerRebalanceListener
from kafka_actors.supervisors import FaultInjector

__all__ = ["ParallelConsumer", "read_offset_metadata_max_bytes"]  # the latter: settings.py

Handler = Callable[[ConsumerRecord], Any] | pykka.ActorRef[Any]

_IDLE_POLL_S = 0.1
_log = get_logger("parallel")


class _Listener(ConsumerRebalanceListener):
    def __init__(self, owner: ParallelConsumer) -> None:
        self._owner = owner

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        self._owner._on_assigned(assigned)

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        return self._owner._on_revoked(revoked)

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        self._owner._on_lost(lost)


class _Revocation:
    __slots__ = ("deadline_ms", "future", "partitions")

    def __init__(self, partitions: frozenset[TopicPartition], deadline_ms: int) -> None:
        self.partitions = partitions
        self.deadline_ms = deadline_ms
        self.future: concurrent.futures.Future[None] = concurrent.futures.Future()


class ParallelConsumer:
    """Records handled concurrently inside partitions, in key order (``docs/parallel.md``).

    ``config``: the consumer's configuration, Kafka's names (``group.id`` is required; the
    consumer commits itself: ``enable.auto.commit`` only says whether it also commits every
    ``auto.commit.interval.ms``, it always commits at revocation and close). ``handler``: a
    function of one :class:`~kafka_actors.structs.ConsumerRecord` (run by a pool of
    ``max_concurrency`` threads; returning completes the record, raising fails the attempt),
    or a pykka ``ActorRef`` (each record an ``ask``; the reply completes it).

    ``offset_metadata_max_bytes``: the broker's limit on commit metadata; None (the default)
    reads ``offset.metadata.max.bytes`` from the broker at ``subscribe()`` (DescribeConfigs,
    needs confluent-kafka) and falls back to Kafka's default 4096 when it cannot.
    ``producer_config``: settings of the dead-letter producer and the admin client beside
    ``bootstrap.servers`` (security settings in librdkafka's names).
    ``revocation_timeout_ms``: how long a revocation waits for running records (default half
    of ``max.poll.interval.ms``, the rebalance timeout; the commit gets a quarter).
    """

    def __init__(
        self,
        config: Mapping[str, object] | ConsumerConfig,
        *,
        handler: Handler,
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
        settings = ParallelSettings.build(
            config,
            owner="a ParallelConsumer",
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
        # The broker's limit on commit metadata replaces the default at subscribe().
        self._work_config = settings.work_config
        self._metadata_max_bytes = settings.metadata_max_bytes
        self._clock: Clock = clock or SystemClock()
        self._random = random or _random.random
        self._handler = handler
        self._call: Callable[[ConsumerRecord], Any]
        if isinstance(handler, pykka.ActorRef):
            ref = handler
            self._call = lambda record: ref.ask(record)
        elif callable(handler):
            self._call = handler
        else:
            raise TypeError("handler must be a function of one record or a pykka ActorRef")
        self._consumer = KafkaConsumer(settings.consumer_config, faults=faults)
        self._lock = threading.RLock()
        self._scheduler = WorkScheduler(self._work_config, self._random)
        self._pool = HandlerPool(max_concurrency, self._handle, self._refill)
        # Handlers' outcomes, appended by the pool's threads, applied under the lock: the
        # work ids that succeeded (the usual case: no tuple per record) and the failures.
        # Separate queues lose no order that matters: a record's key successor starts only
        # once the record completed, so the two are never pending together.
        self._succeeded: deque[int] = deque()
        self._outcomes: deque[tuple[int, BaseException]] = deque()
        # Dead letters due, to send on the loop's thread (the producer's).
        self._letters: list[DeadLetter] = []
        self._progress = threading.Event()  # outcomes applied (close() waits on it)
        self._commit_results: queue.SimpleQueue[
            tuple[dict[TopicPartition, OffsetAndMetadata], BaseException | None, bool]
        ] = queue.SimpleQueue()
        self._producer: DeadLetterProducer | None = None
        self._stop = threading.Event()
        self._closed = False
        self._close_lock = threading.Lock()
        self._run_thread: int | None = None
        self._run_done = threading.Event()
        self._run_done.set()
        self._wake_lock = threading.Lock()
        self._in_poll = False
        self._woken = False
        self._wake_pending = False  # a wake-up came between two polls: the next returns
        self._subscribed = False
        self._paused: dict[TopicPartition, PauseReason] = {}
        self._revocations: list[_Revocation] = []
        self._next_commit_ms = 0
        self._last_poll_ms: int | None = None
        self._error: BaseException | None = None
        self._commits = 0
        self._commit_failures = 0
        self._log = _log.bind(group_id=user.group_id, client_id=user.client_id)

    # -- context manager -------------------------------------------------------------------

    def __enter__(self) -> ParallelConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def consumer(self) -> KafkaConsumer:
        """The consumer underneath (for ``assignment()``, ``committed()``, ``metrics()``);
        do not poll, commit, pause or resume it yourself."""
        return self._consumer

    def _now_ms(self) -> int:
        return int(self._clock.monotonic() * 1000)

    # -- subscription ----------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] | str) -> None:
        """Subscribe to ``topics``; reads the broker's ``offset.metadata.max.bytes`` first
        (unless it was given)."""
        if self._metadata_max_bytes is None:
            limit = offset_metadata_limit(self._settings.client_config, self._log)
            self._metadata_max_bytes = limit
            with self._lock:
                self._work_config = self._settings.with_metadata_limit(limit)
                self._scheduler = WorkScheduler(self._work_config, self._random)
        if self._settings.dead_letter_topic is not None and self._producer is None:
            self._producer = DeadLetterProducer(
                self._settings.dead_letter_topic,
                self._settings.client_config,
                self._dead_letter_delivered,
            )
        self._consumer.subscribe(topics, _Listener(self))
        self._subscribed = True

    # -- running ---------------------------------------------------------------------------

    def run(self) -> None:
        """Handle records until :meth:`stop` (from any thread or a signal handler); then
        return (``close()`` finishes what is in flight and commits). A fatal error of the
        consumer is raised here (``health()`` says ``failed``)."""
        if not self._subscribed:
            raise IllegalStateError("subscribe() before run()")
        if self._closed:
            raise IllegalStateError("the ParallelConsumer is closed")
        self._run_thread = threading.get_ident()
        self._run_done.clear()
        try:
            while not self._stop.is_set():
                self._turn(poll=True)
        except KafkaError as exc:
            self._error = exc
            self._log.error("parallel_consumer_failed", error=repr(exc))
            raise
        finally:
            self._run_thread = None
            self._run_done.set()

    def stop(self) -> None:
        """Make :meth:`run` return soon (safe from any thread and from a signal handler).

        On the loop's own thread (a signal handler interrupting ``run()``) it only sets a
        flag: taking the wake lock there could wait for the very frame it interrupted; the
        poll's timeout (at most 100 ms) ends the turn."""
        self._stop.set()
        if threading.get_ident() != self._run_thread:
            self._wake()

    def _wake(self) -> None:
        """Interrupt the poll in progress, once; between two polls, make the next one return
        at once (a wake-up is never lost: the loop may have decided its timeout already)."""
        self._wake_pending = True
        if not self._in_poll or self._woken:
            return
        with self._wake_lock:
            if self._in_poll and not self._woken:
                self._woken = True
                self._consumer.wakeup()

    def _turn(self, *, poll: bool) -> None:
        """One turn of the loop: outcomes, starts, dead letters, pauses, revocations,
        commits, and (with ``poll``) one poll."""
        with self._lock:
            self._apply_outcomes()
            if self._producer is not None:
                self._producer.poll()
            self._start_ready()
            self._send_letters()
            self._apply_pauses()
            finished = self._due_revocations()
            self._auto_commit_if_due()
            timeout = self._poll_timeout()
        for revocation in finished:
            self._finish(revocation)
        self._pool.nudge(self._now_ms())
        if not poll:
            return
        with self._wake_lock:
            self._in_poll = True
            self._woken = False
            if self._wake_pending:  # consumed here only: never cleared unseen
                self._wake_pending = False
                timeout = 0.0
        try:
            records = self._consumer.poll(timeout)
        except WakeupError:
            records = None
        finally:
            with self._wake_lock:
                self._in_poll = False
        self._last_poll_ms = self._now_ms()
        if records:
            with self._lock:
                for tp, recs in records.by_partition().items():
                    self._scheduler.offer(tp, recs)

    def _poll_timeout(self) -> float:
        if self._letters or self._stop.is_set():
            return 0.0
        now = self._now_ms()
        wait_ms = _IDLE_POLL_S * 1000
        due = self._scheduler.next_due_ms()
        if due is not None:
            wait_ms = min(wait_ms, due - now)
        if self._settings.user.enable_auto_commit:
            wait_ms = min(wait_ms, self._next_commit_ms - now)
        return max(0.0, wait_ms / 1000.0)

    # -- handlers --------------------------------------------------------------------------

    def _start_ready(self) -> None:
        tasks = self._take_ready()
        if tasks and not self._pool.push(tasks):  # the pool is shut down (closing)
            error = RuntimeError("the handler pool is shut down")
            self._outcomes.extend((task.work_id, error) for task in tasks)

    def _take_ready(self) -> list[Task]:
        """What may start now (under the lock): the tasks; due dead letters go to the
        loop's list."""
        tasks: list[Task] = []
        for item in self._scheduler.take_ready(self._now_ms()):
            if isinstance(item, Task):
                tasks.append(item)
            else:
                self._letters.append(item)
        return tasks

    def _handle(self, task: Task) -> Task | None:
        """Run the handler (on a pool thread, the record's fields bound in the structlog
        context by the pool) and report its outcome. When no task waits in the pool (the
        thread would ask for more) and another record of its key waited behind this one
        (partition ordering's usual case), the success is applied at once and the record it
        lets start, if any, is returned for this thread to run next
        (:meth:`WorkScheduler.succeeded_next`: no hand-off per record; while the handlers
        are fast, a run of the key's waiting records: :attr:`Task.run_next`, run with no
        report until the last); other successes are applied in batches by the next refill
        or turn."""
        try:
            self._call(task.record)
        except Exception as exc:
            self._outcomes.append((task.work_id, exc))
            return None
        scheduler = self._scheduler
        following = task.run_next
        if following is not None:
            if following.interruptions == scheduler.interruptions and not self._stop.is_set():
                return following  # this success is settled by a later outcome of the run
            # A partition began revoking, was removed or stopped, or the consumer stops:
            # the run ends here (its records not begun go back, unstarted).
            with self._lock:
                scheduler.succeeded(task.work_id)
            self._wake()
            return None
        if not task.followed or self._pool.queued or self._stop.is_set():
            self._succeeded.append(task.work_id)
            return None
        run_max = RUN_MAX if self._pool.fast else 1
        with self._lock:
            following, resumable = scheduler.succeeded_next(task.work_id, self._now_ms(), run_max)
        if resumable:
            self._wake()  # a paused partition may resume
        return following

    def _refill(self) -> list[Task]:
        """A pool thread ran out of tasks: apply the outcomes so far and take what may start
        now (none once stopping: ``close()`` drains). Wakes the loop when it has work."""
        with self._lock:
            failures = self._apply_outcomes()
            tasks = [] if self._stop.is_set() else self._take_ready()
            wake = bool(failures or self._letters or self._revocations) or (
                # a paused partition that may resume now (not one that stays full)
                bool(self._paused) and self._scheduler.fetch_pauses().keys() != self._paused.keys()
            )
        if wake:
            self._wake()
        return tasks

    def _apply_outcomes(self) -> bool:
        """Apply the commits' and the handlers' results (under the lock); True when an
        attempt failed (the loop times its retry or sends its dead letter)."""
        scheduler = self._scheduler
        while not self._commit_results.empty():
            offsets, error, cancelled = self._commit_results.get_nowait()
            if error is None and not cancelled:
                scheduler.committed(offsets)
                self._commits += 1
            else:
                self._commit_failures += 1
                self._log.warning("commit_failed", error=repr(error))
        succeeded = self._succeeded
        outcomes = self._outcomes
        if not succeeded and not outcomes:
            return False
        if succeeded:
            # Only what is there now: the threads append meanwhile (popleft is atomic).
            popleft = succeeded.popleft
            scheduler.succeeded_all([popleft() for _ in range(len(succeeded))])
        failures = False
        if outcomes:
            now = self._now_ms()
            while outcomes:
                work_id, error = outcomes.popleft()
                failures = True
                record = self._record_of(work_id)
                decision = scheduler.failed(work_id, error, now)
                if decision is not None and record is not None:
                    self._report_failure(decision, record, error)
        if self._closed:
            self._progress.set()
        return failures

    def _record_of(self, work_id: int) -> ConsumerRecord | None:
        return self._scheduler.record(work_id)

    def _report_failure(
        self, decision: FailureDecision, record: ConsumerRecord, error: BaseException
    ) -> None:
        report_failure(self._log, decision, record, error, self._settings.dead_letter_topic)
        if isinstance(decision, DeadLetterDue):
            self._letters.append(decision.dead_letter)

    def _send_letters(self) -> None:
        """Send the dead letters due (on the loop's thread, under the lock)."""
        letters, self._letters = self._letters, []
        for letter in letters:
            self._send_dead_letter(letter)

    # -- dead letters ----------------------------------------------------------------------

    def _send_dead_letter(self, letter: DeadLetter) -> None:
        producer = self._producer
        if producer is None:  # closed meanwhile
            self._scheduler.dead_letter_failed(letter.work_id, self._now_ms())
            return
        producer.send(letter)

    def _dead_letter_delivered(self, work_id: int, error: BaseException | None) -> None:
        """The producer's delivery callback (on the loop's thread, inside its poll)."""
        with self._lock:
            record = self._record_of(work_id)
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

    # -- pauses ----------------------------------------------------------------------------

    def _apply_pauses(self) -> None:
        wanted = self._scheduler.fetch_pauses()
        consumer = self._consumer
        assigned = self._scheduler.assignment()
        resume = [tp for tp in self._paused if tp not in wanted and tp in assigned]
        pause = [tp for tp in wanted if tp not in self._paused]
        if pause:
            consumer.pause(pause)
        if resume:
            consumer.resume(resume)
        self._paused = {tp: reason for tp, reason in wanted.items()}

    # -- commits ---------------------------------------------------------------------------

    def _auto_commit_if_due(self) -> None:
        if not self._settings.user.enable_auto_commit:
            return
        now = self._now_ms()
        if now < self._next_commit_ms:
            return
        self._next_commit_ms = now + self._settings.user.auto_commit_interval_ms
        revoking = {tp for r in self._revocations for tp in r.partitions}
        offsets = {
            tp: v for tp, v in self._scheduler.commit_offsets().items() if tp not in revoking
        }
        if not offsets:
            return
        future = self._consumer.commit_async(offsets)

        def done(
            f: concurrent.futures.Future[dict[TopicPartition, OffsetAndMetadata]],
        ) -> None:
            self._committed(f, offsets)

        future.add_done_callback(done)

    def _committed(
        self,
        future: concurrent.futures.Future[dict[TopicPartition, OffsetAndMetadata]],
        offsets: dict[TopicPartition, OffsetAndMetadata],
    ) -> None:
        # On the thread that completed the commit (an actor's): never take the lock here,
        # the loop applies it (a commit_sync under the lock would wait for that actor).
        error = future.exception() if not future.cancelled() else None
        self._commit_results.put((offsets, error, future.cancelled()))
        self._wake()

    def _commit_sync(
        self, offsets: dict[TopicPartition, OffsetAndMetadata], timeout_s: float
    ) -> bool:
        if not offsets:
            return True
        for attempt in range(2):  # a wakeup meant for a poll may hit this call once
            try:
                self._consumer.commit_sync(offsets, timeout=max(0.1, timeout_s))
            except WakeupError:
                if attempt:
                    return False
                continue
            except KafkaError as exc:
                self._commit_failures += 1
                self._log.warning("commit_failed", error=repr(exc), partitions=len(offsets))
                return False
            self._commits += 1
            return True
        return False

    # -- rebalances ------------------------------------------------------------------------

    def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        if not assigned:
            return
        committed: dict[TopicPartition, OffsetAndMetadata | None] = {}
        for attempt in range(2):
            try:
                committed = self._consumer.committed(
                    assigned, timeout=self._settings.user.default_api_timeout_ms / 1000
                )
                break
            except WakeupError:
                if attempt:
                    raise
        with self._lock:
            for tp in sorted(assigned, key=lambda t: (t.topic, t.partition)):
                log_assigned(self._log, self._scheduler.assign(tp, committed.get(tp)))

    def _on_revoked(self, revoked: set[TopicPartition]) -> Any:
        if not revoked:
            return None
        partitions = frozenset(revoked)
        with self._lock:
            self._scheduler.begin_revoke(partitions)
            revocation = _Revocation(
                partitions, self._now_ms() + self._settings.revocation_timeout_ms
            )
            idle = self._scheduler.revoke_pending(partitions) == 0
            if not idle:
                self._revocations.append(revocation)
        if idle:
            self._finish(revocation)
            return None
        with self._lock:
            self._log.info(
                "revocation_waiting",
                partitions=sorted(map(str, partitions)),
                running=self._scheduler.revoke_pending(partitions),
            )
            return revocation.future

    def _due_revocations(self) -> list[_Revocation]:
        """Revocations whose running records are done or whose deadline passed (taken off
        the list; the caller finishes them outside the lock)."""
        due: list[_Revocation] = []
        if not self._revocations:
            return due
        now = self._now_ms()
        for revocation in list(self._revocations):
            pending = self._scheduler.revoke_pending(revocation.partitions)
            if pending and now < revocation.deadline_ms:
                continue
            self._revocations.remove(revocation)
            if pending:
                self._log.warning(
                    "revocation_deadline",
                    partitions=sorted(map(str, revocation.partitions)),
                    abandoned=pending,
                )
            due.append(revocation)
        return due

    def _finish(self, revocation: _Revocation) -> None:
        """Commit a revocation's partitions, forget them, acknowledge (never called with the
        lock held: the commit waits for the consumer's actors)."""
        partitions = revocation.partitions
        with self._lock:
            offsets = self._scheduler.commit_offsets(partitions)
        commit_s = (
            min(
                self._settings.user.default_api_timeout_ms,
                self._settings.user.max_poll_interval_ms // 4,
            )
            / 1000
        )
        ok = self._commit_sync(offsets, commit_s)
        with self._lock:
            if ok:
                self._scheduler.committed(offsets)
            self._scheduler.remove(partitions)
            for tp in partitions:
                self._paused.pop(tp, None)
        self._log.info("partitions_revoked", partitions=sorted(map(str, partitions)))
        if not revocation.future.done():
            revocation.future.set_result(None)

    def _on_lost(self, lost: set[TopicPartition]) -> None:
        with self._lock:
            abandoned = self._scheduler.remove(lost)
            for tp in lost:
                self._paused.pop(tp, None)
            for revocation in list(self._revocations):
                if revocation.partitions & lost:
                    self._revocations.remove(revocation)
                    if not revocation.future.done():
                        revocation.future.set_result(None)
        self._log.warning("partitions_lost", partitions=sorted(map(str, lost)), abandoned=abandoned)

    # -- close -----------------------------------------------------------------------------

    def close(self, timeout: float | None = 30.0) -> None:
        """Stop, wait for the records in flight at most ``timeout`` seconds, commit what
        completed, leave the group and close. Never waits longer than ``timeout`` (plus the
        consumer's own close, bounded by what remains of it)."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            seconds = 30.0 if timeout is None else max(0.0, float(timeout))
            deadline = self._clock.monotonic() + seconds
            self.stop()
            if self._run_thread is not None and self._run_thread != threading.get_ident():
                self._run_done.wait(max(0.0, deadline - self._clock.monotonic()))
            try:
                self._drain(deadline)
            finally:
                self._pool.shutdown()
                if self._producer is not None:
                    left = self._producer.flush(max(0.0, deadline - self._clock.monotonic()))
                    if left:
                        self._log.warning("dead_letters_not_flushed", count=left)
                self._consumer.close(max(0.5, deadline - self._clock.monotonic()))
                self._log.info("parallel_consumer_closed")

    def _drain(self, deadline: float) -> None:
        with self._lock:
            everything = self._scheduler.assignment()
            self._scheduler.begin_revoke(everything)
        while self._clock.monotonic() < deadline:
            with self._lock:
                self._apply_outcomes()
                if self._producer is not None:
                    self._producer.poll()
                self._start_ready()  # due dead letters (no record of a revoking partition)
                self._send_letters()
                if self._scheduler.revoke_pending(everything) == 0:
                    break
                self._progress.clear()
            self._wait_outcome(min(0.05, max(0.0, deadline - self._clock.monotonic())))
        with self._lock:
            self._apply_outcomes()
            offsets = self._scheduler.commit_offsets(everything)
        if self._error is None and self._subscribed:
            remaining = max(0.5, deadline - self._clock.monotonic())
            if self._commit_sync(offsets, remaining):
                with self._lock:
                    self._scheduler.committed(offsets)
        with self._lock:
            self._scheduler.remove(everything)
            for revocation in self._revocations:
                if not revocation.future.done():
                    revocation.future.set_result(None)
            self._revocations.clear()

    def _wait_outcome(self, timeout: float) -> None:
        if not self._outcomes and not self._succeeded:
            self._progress.wait(timeout)

    # -- observability ---------------------------------------------------------------------

    def health(self) -> ParallelHealth:
        """Running / rebalancing / stalled / failed, with the assignment, the last poll's
        age, the oldest record in flight, records retrying, dead letters sent, and the
        partitions paused and why."""
        now = self._now_ms()
        with self._lock:
            snap = self._scheduler.snapshot(now)
            revoking = bool(self._revocations)
        return health_of(
            snap,
            now_ms=now,
            last_poll_ms=self._last_poll_ms,
            error=self._error,
            closed=self._closed,
            revoking=revoking,
        )

    def metrics(self) -> dict[str, float]:
        """The same as ``health()`` and the totals, by Java-style names (``docs/parallel.md``)."""
        now = self._now_ms()
        with self._lock:
            snap = self._scheduler.snapshot(now)
            commits, failures = self._commits, self._commit_failures
        return metrics_of(
            snap,
            now_ms=now,
            last_poll_ms=self._last_poll_ms,
            commits=commits,
            commit_failures=failures,
            offset_metadata_max_bytes=self._work_config.offset_metadata_max_bytes,
        )

    def __repr__(self) -> str:
        return f"<ParallelConsumer {self._work_config.ordering.value} {self.health().state.value}>"
