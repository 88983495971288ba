"""What may start now: the pure core of parallel processing.

Owns: :class:`WorkConfig` (the options, checked) and :class:`WorkScheduler`: per assigned
partition a :class:`~kafka_actors.parallel.window.CompletionWindow` and its queues, the
records in flight, retries (each record's
:class:`~kafka_actors.protocol.request_state.RetriedRequest` with Java's exponential backoff
and jitter, ``retry_backoff_ms`` .. ``retry_backoff_max_ms``), dead letters, the failure
policy, revocation, what to commit and what to pause. May touch: :mod:`.window`,
:mod:`.offset_map`, :mod:`.messages`, the protocol's request state; no threads, no sockets,
no clock of its own (every call that needs the time takes ``now_ms``) and randomness (the
jitter) injected.

How records move. :meth:`WorkScheduler.offer` takes the records a poll returned for a
partition; records already completed (by the map of the committed metadata) are skipped. A
record waits in its partition's *ready* queue, or, under key ordering, behind the record of
its key that is ahead of it (``held``). :meth:`WorkScheduler.take_ready` hands out up to
``max_concurrency`` running records, partitions in turn, as long as the partition is not
revoking or stopped, has fewer than ``max_in_flight_per_partition`` records in flight, and
its offset map, with every record in flight completed, would still fit
``offset_metadata_max_bytes`` (back-pressure: the partition waits; the map is never dropped).
A record stays *in flight* from its start until it completes: while its handler runs, while
it waits for a retry (its key waits with it; other keys go on), and while its dead letter is
being produced. Only completion (success, dead letter acknowledged, skipped by policy) moves
the partition's committed offset.

What waits is the records themselves; a record's bookkeeping (``_Work``) is made when it
starts and lives while it is in flight. Records are tuples the garbage collector does not
track, and a buffer of thousands of objects it does track, each living long enough to reach
the oldest generation, made a full collection of the whole heap (tens of milliseconds in a
process that imported a Kafka client) every few tens of thousands of records. For the same
reason a key's queue (a deque, which the collector tracks: made when a second record of the
key waits) is kept when it empties, up to :data:`SPARE_QUEUES` of them, and reused for the
next key that needs one: a queue lives as long as the scheduler instead of being made and
dropped once per waiting key.

Null keys under key ordering: each record without a key is its own key. A null key says the
producer asked for no order (Kafka's default partitioner spreads such records over
partitions), so serializing them as one key, as Confluent's Parallel Consumer does (its
issue #183), would only make every keyless record wait for the slowest one.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from kafka_actors.errors import ConfigError, OffsetMapError
from kafka_actors.parallel import offset_map
from kafka_actors.parallel.messages import (
    DeadLetter,
    DeadLetterDue,
    FailureDecision,
    FailurePolicy,
    InFlightRecord,
    Ordering,
    PartitionStopped,
    PausedPartition,
    PauseReason,
    RecordSkipped,
    RetryScheduled,
    StoppedPartition,
    Task,
)
from kafka_actors.parallel.window import CompletionWindow
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord
from kafka_actors.protocol.request_state import ExponentialBackoff, RetriedRequest, retry_backoff

__all__ = ["AssignResult", "WorkConfig", "WorkCounters", "WorkScheduler", "WorkSnapshot"]

#: Kafka's default ``offset.metadata.max.bytes`` (the broker's limit on commit metadata).
DEFAULT_OFFSET_METADATA_MAX_BYTES = 4096
#: Records started in a row by :meth:`WorkScheduler.succeeded_next` on one worker before its
#: slot goes back to :meth:`WorkScheduler.take_ready` (which serves the partitions in turn).
CHAIN_MAX = 64
#: The most records of one key :meth:`WorkScheduler.succeeded_next` starts as one run.
RUN_MAX = 32
_PARTITION_KEY: Hashable = ()  # the one key of a partition under partition ordering
#: Makes a Task from a tuple of its fields without the named tuple's ``__new__`` (a Python
#: function): what ``Task(*fields)`` does, for the one made per record started.
_new_tuple = tuple.__new__


@dataclass(frozen=True, slots=True)
class WorkConfig:
    """The options of parallel processing (``docs/parallel.md``); invalid values raise
    :class:`~kafka_actors.errors.ConfigError` naming the option."""

    ordering: Ordering = Ordering.KEY
    max_concurrency: int = 64
    #: Records in flight in one partition (default: ``max_concurrency``).
    max_in_flight_per_partition: int = 0
    #: Records received and not started in one partition before its fetching pauses (it
    #: resumes once half of them started: :meth:`WorkScheduler.fetch_pauses`).
    max_buffered_per_partition: int = 1000
    #: Offsets above the committed one (received, in flight or completed) in one partition
    #: before its fetching pauses: bounds the window's memory (one byte per offset).
    max_uncommitted_per_partition: int = 100_000
    max_attempts: int = 5
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 30_000
    dead_letters: bool = False
    on_failure: FailurePolicy = FailurePolicy.STOP
    offset_metadata_max_bytes: int = DEFAULT_OFFSET_METADATA_MAX_BYTES

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "ordering", Ordering(self.ordering))
        except ValueError:
            raise ConfigError(
                f"ordering must be one of key, partition, unordered; got {self.ordering!r}",
                key="ordering",
            ) from None
        try:
            object.__setattr__(self, "on_failure", FailurePolicy(self.on_failure))
        except ValueError:
            raise ConfigError(
                f"on_failure must be stop or skip; got {self.on_failure!r}", key="on_failure"
            ) from None
        for name in (
            "max_concurrency",
            "max_buffered_per_partition",
            "max_uncommitted_per_partition",
            "max_attempts",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}", key=name)
        if self.max_in_flight_per_partition < 0:
            raise ConfigError("max_in_flight_per_partition must be >= 0", key="max_in_flight")
        if self.max_in_flight_per_partition == 0:
            object.__setattr__(self, "max_in_flight_per_partition", self.max_concurrency)
        if self.retry_backoff_ms < 0 or self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise ConfigError(
                "retry_backoff_ms must be >= 0 and <= retry_backoff_max_ms",
                key="retry_backoff_ms",
            )
        smallest = offset_map.encoded_size_bound(2**63 - 1, 0, 1)
        if self.offset_metadata_max_bytes < smallest + 8:
            raise ConfigError(
                f"offset_metadata_max_bytes must be at least {smallest + 8} (a map of one "
                f"completed run), got {self.offset_metadata_max_bytes}",
                key="offset_metadata_max_bytes",
            )


@dataclass(slots=True)
class WorkCounters:
    """Totals since the scheduler was made (``metrics()``)."""

    received: int = 0
    skipped_completed: int = 0
    started: int = 0
    succeeded: int = 0
    failed_attempts: int = 0
    retried: int = 0
    exhausted: int = 0
    dead_lettered: int = 0
    dead_letter_failures: int = 0
    abandoned: int = 0
    stopped: int = 0
    abandoned_in_flight: int = 0
    #: Times a partition began holding back its starts because one more record in flight
    #: could make its offset map outgrow ``offset.metadata.max.bytes`` (back-pressure).
    offset_map_full: int = 0


@dataclass(frozen=True, slots=True)
class WorkSnapshot:
    """The scheduler's state at one moment (for ``health()`` and ``metrics()``)."""

    assignment: frozenset[TopicPartition]
    in_flight: int
    running: int
    retrying: int
    dead_lettering: int
    buffered: int
    oldest_in_flight: InFlightRecord | None
    paused: tuple[PausedPartition, ...]
    stopped: tuple[StoppedPartition, ...]
    revoking: frozenset[TopicPartition]
    committed_map_bytes: dict[TopicPartition, int]
    counters: WorkCounters


@dataclass(frozen=True, slots=True)
class AssignResult:
    """What an assignment read from its committed metadata: completed offsets inherited, or
    the error of a map that could not be used (then records are handled again)."""

    partition: TopicPartition
    committed: int | None
    inherited_completed: int
    map_error: OffsetMapError | None


def _resume_mark(max_buffered: int) -> int:
    """Records waiting in a partition whose fetching paused for a full buffer at or below
    which it resumes."""
    return max_buffered // 2


#: Empty key queues kept for reuse (module doc); about 0.6 KiB each.
SPARE_QUEUES = 1024


def _is_followed(held: dict[Hashable, deque[ConsumerRecord] | None], key: Hashable) -> bool:
    """Whether a record of ``key`` waits behind the one of that key that starts now
    (:attr:`Task.followed`); a null key is its own key, never followed."""
    return key is not None and bool(held.get(key))


class _Work:
    """One record from its start until it completes (internal, mutable)."""

    __slots__ = (
        "chained",
        "dead_letter",
        "error",
        "id",
        "key",
        "owner",
        "record",
        "request",
        "run",
        "started_ms",
        "state",
    )

    def __init__(self, work_id: int, record: ConsumerRecord, owner: _Partition, key: Hashable):
        self.id = work_id
        self.record = record
        self.owner = owner
        self.key = key
        #: The handler attempts: Java's per-request state (attempts, retry time), made at the
        #: first failure (until then the record was started once: :meth:`attempts`).
        self.request: RetriedRequest | None = None
        #: The dead letter's produce attempts, once there is one.
        self.dead_letter: RetriedRequest | None = None
        self.started_ms = 0
        #: Starts in a row by :meth:`WorkScheduler.succeeded_next` that led to this one.
        self.chained = 0
        #: The run this record was started in (its records in order), until it settles.
        self.run: list[_Work] | None = None
        self.state = "running"  # running | retry | dead_letter | stopped | done
        self.error: BaseException | None = None

    def attempts(self) -> int:
        """Handler attempts started so far (a work is known to the scheduler's books once
        started: 1 until its first failure)."""
        return 1 if self.request is None else self.request.attempts


@dataclass(slots=True, eq=False)
class _Partition:
    """One assigned partition's work (internal)."""

    tp: TopicPartition
    committed: OffsetAndMetadata | None
    inherited: offset_map.OffsetMap | None
    window: CompletionWindow | None = None
    #: Records that may start, and under key ordering the ones waiting behind the record of
    #: their key that is ahead of them: records, not :class:`_Work` (made when one starts), so
    #: that what waits is no object the garbage collector tracks (module doc).
    ready: deque[ConsumerRecord] = field(default_factory=deque)
    held: dict[Hashable, deque[ConsumerRecord] | None] = field(default_factory=dict)
    buffered: int = 0
    in_flight: int = 0
    running: int = 0
    dead_lettering: int = 0
    revoking: bool = False
    stopped: StoppedPartition | None = None
    last_committed: tuple[int, str] | None = None
    committed_map_bytes: int = 0
    #: A start is held back now because the offset map would outgrow the broker's limit.
    map_full: bool = False
    #: The window's base when the ready queue was last searched for its record
    #: (:meth:`WorkScheduler._start_base`).
    base_searched: int = -1
    #: Fetching paused for a full buffer, until the buffer is down to half of its bound.
    buffer_full: bool = False


class WorkScheduler:
    """The pure core of parallel processing (module doc). Not thread-safe: its owner calls
    it from one thread (or under a lock)."""

    def __init__(self, config: WorkConfig, random: Callable[[], float]) -> None:
        self.config = config
        self._backoff: ExponentialBackoff = retry_backoff(config, random)
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._works: dict[int, _Work] = {}
        self._ids = itertools.count(1)
        self._due: list[tuple[int, int, int]] = []  # (due ms, seq, work id)
        self._seq = itertools.count()
        self._running = 0
        self._turn = 0
        self.counters = WorkCounters()
        #: Changes that stop a run (:attr:`Task.interruptions`): a partition began revoking,
        #: was removed or stopped. Read by workers without the lock (an int).
        self.interruptions = 0
        #: The widest window whose map fits the limit whatever its completions (the bitmap's
        #: worst case): a window this narrow needs no bound computed per start.
        self._span_always_fits = offset_map.span_always_fitting(config.offset_metadata_max_bytes)
        #: Key queues that emptied, for the next key whose record waits (module doc).
        self._spare_queues: list[deque[ConsumerRecord]] = []

    @property
    def backoff(self) -> ExponentialBackoff:
        return self._backoff

    # -- assignment ------------------------------------------------------------------------

    def assign(self, tp: TopicPartition, committed: OffsetAndMetadata | None) -> AssignResult:
        """Take ``tp`` with its committed offset (None: none yet); the map in the committed
        metadata marks records that need no handling. A map that cannot be read is reported
        and ignored (its records are handled again: at least once)."""
        inherited: offset_map.OffsetMap | None = None
        error: OffsetMapError | None = None
        if committed is not None:
            try:
                inherited = offset_map.decode(
                    committed.metadata,
                    committed.offset,
                    max_span=self.config.max_uncommitted_per_partition
                    + offset_map.DEFAULT_MAX_SPAN,
                )
            except OffsetMapError as exc:
                exc.topic, exc.partition, exc.offset = tp.topic, tp.partition, committed.offset
                error = exc
        part = _Partition(tp, committed, inherited)
        if committed is not None:
            part.window = CompletionWindow(committed.offset, inherited)
            part.last_committed = (committed.offset, committed.metadata)
        self._partitions[tp] = part
        return AssignResult(
            tp,
            None if committed is None else committed.offset,
            0 if inherited is None else inherited.completed_count,
            error,
        )

    def assignment(self) -> frozenset[TopicPartition]:
        return frozenset(self._partitions)

    def begin_revoke(self, partitions: Iterable[TopicPartition]) -> None:
        """Start no more records of ``partitions`` (their in-flight ones go on)."""
        for tp in partitions:
            part = self._partitions.get(tp)
            if part is not None:
                part.revoking = True
                self.interruptions += 1

    def revoke_pending(self, partitions: Iterable[TopicPartition]) -> int:
        """Records of ``partitions`` whose handler runs or whose dead letter is being
        produced: what a revocation waits for (records waiting for a retry are not awaited:
        they are not completed, so the next owner handles them)."""
        total = 0
        for tp in partitions:
            part = self._partitions.get(tp)
            if part is not None:
                total += part.running + part.dead_lettering
        return total

    def remove(self, partitions: Iterable[TopicPartition]) -> int:
        """Forget ``partitions`` (revoked after their commit, or lost): their records in
        flight are abandoned (a late result is ignored). Returns how many were in flight."""
        abandoned = 0
        for tp in partitions:
            part = self._partitions.pop(tp, None)
            if part is None:
                continue
            self.interruptions += 1
            for work in [w for w in self._works.values() if w.owner is part]:
                del self._works[work.id]
                abandoned += 1
                if work.state == "running":
                    self._running -= 1
        self.counters.abandoned_in_flight += abandoned
        return abandoned

    # -- records in ------------------------------------------------------------------------

    def offer(self, tp: TopicPartition, records: Sequence[ConsumerRecord]) -> int:
        """Records a poll returned for ``tp``, in offset order; returns how many are work
        (the others were completed before, by the inherited map, or are not ours)."""
        part = self._partitions.get(tp)
        if part is None or not records:
            return 0
        window = part.window
        if window is None:
            window = part.window = CompletionWindow(records[0].offset, part.inherited)
        ordering = self.config.ordering
        counters = self.counters
        counters.received += len(records)
        # Consecutive offsets right after the last ones received (the usual fetch) are all
        # work: the window takes them in one step.
        first = records[0].offset
        run = records[-1].offset - first == len(records) - 1 and window.receive_run(
            first, len(records)
        )
        if run:
            fresh: Sequence[ConsumerRecord] = records
        else:
            fresh = [r for r in records if window.receive(r.offset)]
            counters.skipped_completed += len(records) - len(fresh)
        ready = part.ready
        part.buffered += len(fresh)
        if ordering is Ordering.UNORDERED:
            ready.extend(fresh)
            return len(fresh)
        held = part.held
        for record in fresh:
            key: Hashable = record.key if ordering is Ordering.KEY else _PARTITION_KEY
            if key is None:
                ready.append(record)  # a null key is its own key (module doc)
            elif key not in held:
                # No record of its key is ahead of it: it may start (None: none waits
                # behind it yet, so that most keys cost no queue).
                held[key] = None
                ready.append(record)
            else:
                queue = held[key]
                if queue is None:
                    held[key] = queue = self._new_queue()
                queue.append(record)
        return len(fresh)

    def _new_queue(self) -> deque[ConsumerRecord]:
        """An empty key queue: a spare one when there is one (module doc)."""
        spare = self._spare_queues
        return spare.pop() if spare else deque()

    def _key_of(self, record: ConsumerRecord) -> Hashable:
        """The key whose records run in turn: the record's key, its partition's one key, or
        none (unordered)."""
        ordering = self.config.ordering
        if ordering is Ordering.KEY:
            return record.key
        return _PARTITION_KEY if ordering is Ordering.PARTITION else None

    # -- what starts -----------------------------------------------------------------------

    def take_ready(self, now_ms: int) -> list[Task | DeadLetter]:
        """What starts now: due retries and dead letters first, then new records, partitions
        in turn, within the bounds (module doc)."""
        out: list[Task | DeadLetter] = []
        limit = self.config.max_concurrency
        due = self._due
        while due and due[0][0] <= now_ms:
            work = self._works.get(due[0][2])
            if work is not None and work.state == "retry":
                if self._running >= limit and not work.owner.revoking:
                    break
                heapq.heappop(due)
                if work.owner.revoking:
                    continue  # not awaited by the revocation; the next owner handles it
                work.state = "running"
                work.owner.running += 1
                self._running += 1
                request = work.request
                assert request is not None  # a retry follows a failure
                request.on_send_attempt(work.id)
                followed = _is_followed(work.owner.held, work.key)
                out.append(Task(work.id, work.record, request.attempts, followed, None, 0))
                continue
            heapq.heappop(due)
            if work is not None and work.state == "dead_letter":
                out.append(self._dead_letter(work))
        if self._running >= limit or not self._partitions:
            return out
        parts = list(self._partitions.values())
        n = len(parts)
        self._turn = (self._turn + 1) % n
        per_partition = self.config.max_in_flight_per_partition
        started = self._works
        ids = self._ids
        ordering = self.config.ordering
        by_key = ordering is Ordering.KEY
        fixed_key = _PARTITION_KEY if ordering is Ordering.PARTITION else None
        progress = True
        while progress and self._running < limit:
            progress = False
            # Partitions in turn, each up to an even share of what may still start per pass
            # (then shares of one): the same records start as one by one in turn would.
            share = max(1, (limit - self._running) // n)
            for k in range(n):
                part = parts[(self._turn + k) % n]
                ready = part.ready
                if not ready or part.revoking or part.stopped is not None:
                    continue
                want = min(len(ready), per_partition - part.in_flight, share, limit - self._running)
                if want <= 0:
                    continue
                count = self._fitting(part, want)
                if count:
                    part.map_full = False
                if count < want and not part.map_full:
                    part.map_full = True
                    self.counters.offset_map_full += 1
                if not count:
                    base = self._start_base(part, now_ms)
                    if base is not None:
                        out.append(base)
                        progress = True
                    continue
                self._count_starts(part, count)
                popleft = ready.popleft
                append = out.append
                held = part.held
                for _ in range(count):
                    record = popleft()
                    # _key_of and _is_followed, inline (once per record started)
                    key = record.key if by_key else fixed_key
                    work_id = next(ids)
                    work = _Work(work_id, record, part, key)
                    work.started_ms = now_ms
                    started[work_id] = work
                    followed = key is not None and bool(held.get(key))
                    append(_new_tuple(Task, (work_id, record, 1, followed, None, 0)))
                progress = True
                if self._running >= limit:
                    break
        return out

    def _start_base(self, part: _Partition, now_ms: int) -> Task | None:
        """The map keeps ``part`` from starting records: start the one at its window's base
        (its lowest incomplete offset) if it waits in the ready queue. Its completion moves
        the base past it and the completed run above it, which only shrinks the map, so it
        may always start; without it, a partition whose in-flight records all completed
        would wait for a completion that nothing can bring (under key ordering the record at
        the base is then in the ready queue, not always at its head: every earlier record of
        its key is completed). The queue is searched when the base moved since the last
        search, and whenever nothing of the partition is in flight (the search then finds
        it: this is what keeps the partition live)."""
        window = part.window
        assert window is not None
        base = window.base
        if part.base_searched == base and part.in_flight:
            return None
        part.base_searched = base
        ready = part.ready
        for index, record in enumerate(ready):  # noqa: B007 (used after the loop)
            if record.offset == base:
                break
        else:
            return None
        del ready[index]
        self._count_starts(part, 1)
        key = self._key_of(record)
        work_id = next(self._ids)
        work = _Work(work_id, record, part, key)
        work.started_ms = now_ms
        self._works[work_id] = work
        return Task(work_id, record, 1, _is_followed(part.held, key), None, 0)

    def _count_starts(self, part: _Partition, count: int) -> None:
        """``count`` records of ``part`` leave its buffer and start (in flight, running)."""
        part.buffered -= count
        part.in_flight += count
        part.running += count
        self._running += count
        self.counters.started += count

    def _fitting(self, part: _Partition, want: int) -> int:
        """How many of ``want`` records may start in ``part`` with its offset map, every
        record in flight completed, still within ``offset_metadata_max_bytes`` (the bound
        grows with each start, so the largest count that fits is searched)."""
        window = part.window
        assert window is not None
        if window.span <= self._span_always_fits:
            return want
        max_bytes = self.config.offset_metadata_max_bytes
        in_flight = part.in_flight
        if window.size_bound(in_flight + want) <= max_bytes:
            return want
        low, high = 0, want - 1  # the largest count that fits is in [low, high]
        while low < high:
            middle = (low + high + 1) // 2
            if window.size_bound(in_flight + middle) <= max_bytes:
                low = middle
            else:
                high = middle - 1
        return low

    def next_due_ms(self) -> int | None:
        """When the earliest retry or dead-letter resend is due (None: none waits)."""
        while self._due and self._due[0][2] not in self._works:
            heapq.heappop(self._due)
        return self._due[0][0] if self._due else None

    # -- outcomes --------------------------------------------------------------------------

    def succeeded(self, work_id: int) -> bool:
        """The handler returned for ``work_id``; False when the record was abandoned (its
        partition was revoked or lost meanwhile): the result is ignored."""
        work = self._works.get(work_id)
        if work is None or work.state != "running":
            return False
        if work.run is not None:
            self._settle_run(work)
        part = work.owner
        part.running -= 1
        self._running -= 1
        self.counters.succeeded += 1
        self._complete(work)
        return True

    def succeeded_all(self, work_ids: Iterable[int]) -> int:
        """:meth:`succeeded` for each of ``work_ids`` in turn (the outcomes of a batch of
        handlers, applied in one call); returns how many counted (the others were
        abandoned)."""
        works = self._works
        counted = 0
        for work_id in work_ids:
            work = works.get(work_id)
            if work is None or work.state != "running":
                continue
            if work.run is not None:
                self._settle_run(work)
            work.owner.running -= 1
            counted += 1
            self._complete(work)
        self._running -= counted
        self.counters.succeeded += counted
        return counted

    def succeeded_next(
        self, work_id: int, now_ms: int, run_max: int = 1
    ) -> tuple[Task | None, bool]:
        """:meth:`succeeded`, then the next record of the same partition started at once when
        it may start now: its task, for the worker that ran ``work_id`` to run next with no
        hand-off (under partition ordering every record waits for the one before it, so a
        hand-off per record would be the whole cost of a fast handler). None when nothing
        of that partition may start now, when a retry is due (:meth:`take_ready` starts it
        first), or after :data:`CHAIN_MAX` such starts in a row: the slot then goes back to
        :meth:`take_ready`, which serves the partitions in turn. The flag: these starts took
        a partition paused for a full buffer to the mark where that pause lifts
        (:meth:`fetch_pauses`), its fetching may resume (a pause for a full window lifts at
        the owner's next look at :meth:`fetch_pauses`).

        With ``run_max`` > 1 (the owner's handlers are fast), up to that many records of the
        next record's key that wait behind it start with it as one *run*, within the same
        bounds: the returned task links the next ones (:attr:`Task.run_next`). The worker runs
        them in turn and reports only the outcome of the last one it ran; that outcome
        settles the run (:meth:`_settle_run`): the records before it succeeded, the ones after
        it go back, unstarted, ahead of their key's queue. A worker stops a run when
        :attr:`interruptions` changed since it began (a revocation, a removal, a stop), so
        one of them may start nothing more of it."""
        work = self._works.get(work_id)
        if work is None or not self.succeeded(work_id):
            return None, False
        part = work.owner
        ready = part.ready
        config = self.config
        if (
            not ready
            or work.chained >= CHAIN_MAX
            or part.revoking
            or part.stopped is not None
            or self._running >= config.max_concurrency
            or part.in_flight >= config.max_in_flight_per_partition
            or (self._due and self._due[0][0] <= now_ms)
        ):
            return None, False
        want = 1
        queue: deque[ConsumerRecord] | None = None
        key = self._key_of(ready[0])
        if run_max > 1:
            queue = None if key is None else part.held.get(key)
            if queue:
                want = min(
                    run_max,
                    1 + len(queue),
                    CHAIN_MAX - work.chained,
                    config.max_concurrency - self._running,
                    config.max_in_flight_per_partition - part.in_flight,
                )
        count = self._fitting(part, want)
        if not count:
            return None, False
        part.map_full = False
        buffered = part.buffered
        self._count_starts(part, count)
        works = self._works
        ids = self._ids
        chained = work.chained + count
        records = [ready.popleft()]
        if count > 1:
            assert queue is not None
            popleft = queue.popleft
            records += [popleft() for _ in range(count - 1)]
        run = [_Work(next(ids), r, part, key) for r in records]
        for member in run:
            member.chained = chained
            member.started_ms = now_ms
            works[member.id] = member
            if count > 1:
                member.run = run
        # Built from the last one: each task links the next; the last one is followed when
        # a record of its key still waits behind the run.
        interruptions = self.interruptions
        last = run[-1]
        followed = _is_followed(part.held, key)
        task = _new_tuple(Task, (last.id, last.record, 1, followed, None, interruptions))
        for member in run[-2::-1]:
            task = _new_tuple(Task, (member.id, member.record, 1, True, task, interruptions))
        resume_at = _resume_mark(config.max_buffered_per_partition)
        return task, part.buffer_full and buffered > resume_at >= buffered - count

    def _settle_run(self, work: _Work) -> None:
        """The outcome of ``work``, a record of a run, is known (its worker ran the run up to
        it): the records of the run before it succeeded (they complete, their key stays held
        by ``work``), and the ones after it never began: they go back, unstarted, ahead of
        their key's queue, which ``work``'s own completion or retry then moves as usual."""
        run = work.run
        assert run is not None
        index = run.index(work)
        counted = 0
        for member in run[:index]:
            member.run = None
            if member.state == "running":
                member.owner.running -= 1
                counted += 1
                self._complete(member, release=False)
        self._running -= counted
        self.counters.succeeded += counted
        work.run = None
        rest = run[index + 1 :]
        if not rest:
            return
        part = work.owner
        works = self._works
        back: list[ConsumerRecord] = []
        for member in rest:
            member.run = None
            if member.state != "running" or works.pop(member.id, None) is None:
                continue  # abandoned: its partition was removed
            member.state = "done"
            back.append(member.record)
        if not back:
            return
        n = len(back)
        part.running -= n
        part.in_flight -= n
        part.buffered += n
        self._running -= n
        self.counters.started -= n
        held = part.held
        queue = held.get(work.key)
        if queue is None:
            held[work.key] = queue = self._new_queue()
        queue.extendleft(reversed(back))

    def failed(self, work_id: int, error: BaseException, now_ms: int) -> FailureDecision | None:
        """The handler raised ``error`` for ``work_id``: a retry after the backoff (its key
        waits), a dead letter, the partition stopped, or the record skipped (policy). None
        when the record was abandoned meanwhile."""
        work = self._works.get(work_id)
        if work is None or work.state != "running":
            return None
        if work.run is not None:
            self._settle_run(work)
        self._stop_running(work)
        self.counters.failed_attempts += 1
        work.error = error
        config = self.config
        request = work.request
        if request is None:  # the first failure: the first attempt
            request = work.request = RetriedRequest(attempts=1, request_id=work.id)
        if request.attempts < config.max_attempts:
            retry_at = request.schedule_retry(now_ms, self._backoff)
            work.state = "retry"
            heapq.heappush(self._due, (retry_at, next(self._seq), work.id))
            self.counters.retried += 1
            return RetryScheduled(work.id, request.attempts, retry_at - now_ms, retry_at)
        self.counters.exhausted += 1
        tp = work.owner.tp
        if config.dead_letters:
            work.state = "dead_letter"
            work.owner.dead_lettering += 1
            work.dead_letter = RetriedRequest()
            return DeadLetterDue(self._dead_letter(work))
        if config.on_failure is FailurePolicy.SKIP:
            self.counters.abandoned += 1
            self._complete(work)
            return RecordSkipped(tp, work.record.offset, request.attempts)
        work.state = "stopped"
        stopped = StoppedPartition(
            tp, work.record.offset, request.attempts, type(error).__name__, str(error)
        )
        work.owner.stopped = stopped
        self.counters.stopped += 1
        self.interruptions += 1
        return PartitionStopped(stopped)

    def dead_lettered(self, work_id: int) -> bool:
        """The broker acknowledged the dead letter of ``work_id``: the record completes."""
        work = self._works.get(work_id)
        if work is None or work.state != "dead_letter":
            return False
        work.owner.dead_lettering -= 1
        self.counters.dead_lettered += 1
        self._complete(work)
        return True

    def dead_letter_failed(self, work_id: int, now_ms: int) -> int | None:
        """Producing the dead letter of ``work_id`` failed: it is produced again after the
        backoff (the record stays in flight, its key waits). Returns the retry time."""
        work = self._works.get(work_id)
        if work is None or work.state != "dead_letter" or work.dead_letter is None:
            return None
        self.counters.dead_letter_failures += 1
        retry_at = work.dead_letter.schedule_retry(now_ms, self._backoff)
        heapq.heappush(self._due, (retry_at, next(self._seq), work.id))
        return retry_at

    def _dead_letter(self, work: _Work) -> DeadLetter:
        request = work.dead_letter
        assert request is not None
        request.on_send_attempt(work.id)
        error = work.error
        return DeadLetter(
            work.id,
            work.record,
            work.attempts(),
            type(error).__name__ if error is not None else "",
            str(error) if error is not None else "",
            request.attempts,
        )

    def _stop_running(self, work: _Work) -> None:
        work.owner.running -= 1
        self._running -= 1

    def _complete(self, work: _Work, *, release: bool = True) -> None:
        """``work`` is done: off the books, its offset completed in the window and, with
        ``release`` (not for a record of a run before the last one that ran), the next record
        of its key, if any, ready to start."""
        part = work.owner
        del self._works[work.id]
        work.state = "done"
        part.in_flight -= 1
        window = part.window
        assert window is not None
        window.complete(work.record.offset)
        key = work.key
        if key is not None and release:
            held = part.held
            queue = held[key]
            if queue:
                part.ready.append(queue.popleft())
            else:
                del held[key]
                if queue is not None and len(self._spare_queues) < SPARE_QUEUES:
                    self._spare_queues.append(queue)

    # -- commits ---------------------------------------------------------------------------

    def commit_offsets(
        self, partitions: Iterable[TopicPartition] | None = None, *, force: bool = False
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Per partition, its lowest incomplete offset with the map of the completed ones
        above it in the metadata, where it changed since the last commit (or ``force``). A
        partition whose map does not fit is left out (its last commit stands: the map is
        never dropped); back-pressure keeps that from happening."""
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        max_bytes = self.config.offset_metadata_max_bytes
        wanted = self._partitions if partitions is None else partitions
        for tp in wanted:
            part = self._partitions.get(tp)
            if part is None or part.window is None:
                continue
            window = part.window
            metadata = window.encode() if window.span else ""
            if not offset_map.fits(metadata, max_bytes):
                continue
            value = (window.base, metadata)
            if force or value != part.last_committed:
                out[tp] = OffsetAndMetadata(window.base, metadata)
        return out

    def committed(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """The broker stored ``offsets`` (a commit of :meth:`commit_offsets` succeeded)."""
        for tp, value in offsets.items():
            part = self._partitions.get(tp)
            if part is not None:
                part.last_committed = (value.offset, value.metadata)
                part.committed_map_bytes = len(value.metadata)

    # -- pauses and health -----------------------------------------------------------------

    def fetch_pauses(self) -> dict[TopicPartition, PauseReason]:
        """Partitions whose fetching should pause now, and why. A pause for a full buffer
        (``max_buffered_per_partition`` records waiting to start) lasts until the buffer is
        down to half of that: pausing and resuming at the same mark made a partition whose
        handlers keep up with its fetching pause and resume at almost every poll (each a
        change of the fetch session)."""
        out: dict[TopicPartition, PauseReason] = {}
        for tp, part in self._partitions.items():
            reason = self._fetch_pause(part)
            if reason is not None:
                out[tp] = reason
        return out

    def _fetch_pause(self, part: _Partition) -> PauseReason | None:
        config = self.config
        if part.stopped is not None:
            return PauseReason.STOPPED
        buffered = part.buffered
        if part.buffer_full:
            if buffered <= _resume_mark(config.max_buffered_per_partition):
                part.buffer_full = False
        elif buffered >= config.max_buffered_per_partition:
            part.buffer_full = True
        if part.buffer_full:
            return PauseReason.BUFFER_FULL
        window = part.window
        if window is not None and window.uncommitted >= config.max_uncommitted_per_partition:
            return PauseReason.WINDOW_FULL
        return None

    def pending(self, partitions: Iterable[TopicPartition] | None = None) -> int:
        """Records received and not completed (buffered or in flight)."""
        wanted = self._partitions if partitions is None else partitions
        total = 0
        for tp in wanted:
            part = self._partitions.get(tp)
            if part is not None:
                total += part.buffered + part.in_flight
        return total

    def running(self) -> int:
        return self._running

    def record(self, work_id: int) -> ConsumerRecord | None:
        """The record of a started, not yet completed ``work_id`` (None: completed or
        abandoned)."""
        work = self._works.get(work_id)
        return None if work is None else work.record

    def snapshot(self, now_ms: int) -> WorkSnapshot:
        config = self.config
        paused: list[PausedPartition] = []
        fetch = self.fetch_pauses()
        buffered = in_flight = dead_lettering = 0
        for tp, part in self._partitions.items():
            buffered += part.buffered
            in_flight += part.in_flight
            dead_lettering += part.dead_lettering
            reason: PauseReason | None = None
            if part.revoking:
                reason = PauseReason.REVOKING
            elif part.stopped is not None:
                reason = PauseReason.STOPPED
            elif (
                part.ready
                and part.window is not None
                and part.in_flight < config.max_in_flight_per_partition
                and part.window.size_bound(part.in_flight + 1) > config.offset_metadata_max_bytes
            ):
                reason = PauseReason.OFFSET_MAP_FULL
            else:
                reason = fetch.get(tp)
            if reason is not None:
                paused.append(PausedPartition(tp, reason))
        retrying = sum(1 for w in self._works.values() if w.state == "retry")
        oldest: InFlightRecord | None = None
        candidates = [w for w in self._works.values() if w.state != "stopped"]
        if candidates:
            work = min(candidates, key=lambda w: (w.started_ms, w.id))
            r = work.record
            oldest = InFlightRecord(
                r.topic,
                r.partition,
                r.offset,
                r.key,
                max(0, now_ms - work.started_ms),
                work.attempts(),
            )
        stopped = tuple(p.stopped for p in self._partitions.values() if p.stopped is not None)
        return WorkSnapshot(
            assignment=frozenset(self._partitions),
            in_flight=in_flight,
            running=self._running,
            retrying=retrying,
            dead_lettering=dead_lettering,
            buffered=buffered,
            oldest_in_flight=oldest,
            paused=tuple(sorted(paused, key=lambda p: (p.partition.topic, p.partition.partition))),
            stopped=stopped,
            revoking=frozenset(tp for tp, p in self._partitions.items() if p.revoking),
            committed_map_bytes={tp: p.committed_map_bytes for tp, p in self._partitions.items()},
            counters=replace(self.counters),
        )
