"""The prefetch buffer and the hand-out of records: :class:`FetchBuffer`.

Owns: the completed fetches buffered per partition (raw data, bounded in bytes), their order
and chaining (data continues where the partition's position or the previous buffered fetch
ends), dropping data of partitions no longer owned or moved, and :meth:`FetchBuffer.collect`:
decoding at hand-out time, records handed out only for partitions still owned, fetchable and
at the position the data continues, positions advanced, per-partition errors raised in order
(:class:`FetchResult`, which also carries the collect's statistics: lag, lead and bytes per
topic). It follows the Java client's ``FetchBuffer`` / ``FetchCollector``: one object, thread
safe, shared by its producer (the fetch manager, :mod:`kafka_actors.protocol.fetch.manager`, adding
completed fetches on the fetch actor's thread) and its consumer (the collect, on the polling
thread). Its lock (:attr:`FetchBuffer.lock`, re-entrant) guards every method; the fetch actor
holds it while it handles one message, so that the manager's view of the buffer does not
change under it. :attr:`FetchBuffer.generation` grows when data may be waiting
(:meth:`FetchBuffer.wakeup`): a poll that found nothing waits for it to change.

May touch: the shared :class:`~kafka_actors.protocol.subscription.SubscriptionState`
(positions, through its atomic methods), nothing else; pure but for its lock.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_actors.errors import KafkaError
from kafka_actors.log import get_logger
from kafka_actors.protocol.fetch.config import FetchConfig
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.decode import (
    ConsumerRecord,
    DecodedRecords,
    decode_records,
    slice_records,
)
from kafka_actors.protocol.subscription import (
    FetchPosition,
    SubscriptionState,
)

#: A columnar collect takes at most one response's records per partition: each partition's
#: batch is then a zero-copy slice of one decoded response (two would be concatenated, a copy
#: made by pyarrow with the GIL given up); the rest waits for the next call.
ONE_SLICE_PER_PARTITION = True


@dataclass(frozen=True, slots=True)
class ColumnSlice:
    """Records ``start``..``end-1`` of decoded fetched data, handed out without a Python object
    per record (a columnar collect); :func:`kafka_actors.protocol.records.arrow.record_batch` makes
    their Arrow batch."""

    decoded: DecodedRecords
    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start

    @property
    def first_offset(self) -> int:
        return self.decoded.offset_at(self.start)

    @property
    def last_offset(self) -> int:
        return self.decoded.offset_at(self.end - 1)


@dataclass(frozen=True, slots=True)
class FetchResult:
    """What :meth:`FetchBuffer.collect` hands out.

    ``records``: per partition, in offset order; ``columns``: the same from a columnar collect
    (``collect(columnar=True)``, then ``records`` is empty); ``positions``: the new position
    of every partition records were taken from (or that advanced past control / aborted
    batches); ``error``: a typed error for the application, set only when no record is handed
    out.
    """

    records: Mapping[TopicPartition, tuple[ConsumerRecord, ...]] = field(default_factory=dict)
    positions: Mapping[TopicPartition, FetchPosition] = field(default_factory=dict)
    error: KafkaError | None = None
    #: SubscriptionState.assignment_id when the result was collected.
    assignment_id: int = 0
    columns: Mapping[TopicPartition, tuple[ColumnSlice, ...]] = field(default_factory=dict)
    #: The collect's statistics (for the consumed-records sensors): the lag and the lead of
    #: the partitions it advanced, and the raw record bytes of the responses it drained, by
    #: topic.
    lag: Mapping[TopicPartition, int] = field(default_factory=dict)
    lead: Mapping[TopicPartition, int] = field(default_factory=dict)
    bytes_by_topic: Mapping[str, int] = field(default_factory=dict)
    #: Buffered bytes the collect freed (drained or dropped): room for the next fetches.
    freed_bytes: int = 0

    def still_owned(self, subscriptions: SubscriptionState) -> FetchResult:
        """This result without the records of partitions that, since it was collected, stopped
        being fetchable or moved (a seek): what may still be handed to the application. The
        same result when the assignment did not change and every position is as collected."""
        keep: dict[TopicPartition, tuple[Any, ...]] = {}
        handed = self.columns if self.columns else self.records
        for tp, recs in handed.items():
            collected = self.positions.get(tp)
            state = subscriptions.partition_state(tp)
            # A partition whose position awaits validation since (its leader changed,
            # KIP-320) still owns the records collected before: they were read from the log
            # as it was, and the position after them is the one being validated.
            if (
                collected is not None
                and state is not None
                and state.position is not None
                and state.has_position
                and not state.paused
                and not state.pending_revocation
                and not state.pending_on_assigned_callback
                and state.position.offset == collected.offset
            ):
                keep[tp] = recs
        if len(keep) == len(handed) and subscriptions.assignment_id == self.assignment_id:
            return self
        return FetchResult(
            records={} if self.columns else keep,
            positions={tp: p for tp, p in self.positions.items() if tp in keep},
            error=self.error,
            assignment_id=subscriptions.assignment_id,
            columns=keep if self.columns else {},
        )

    @property
    def record_count(self) -> int:
        return sum(len(r) for r in self.records.values()) + sum(
            len(s) for slices in self.columns.values() for s in slices
        )

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error


@dataclass(slots=True, eq=False)
class CompletedFetch:
    """One partition's data (or error) from one response, waiting in the buffer."""

    tp: TopicPartition
    fetch_offset: int
    #: The partition's record batches: a read-only view of the Fetch response's frame (v12
    #: and later, on the consumer's connections), else bytes. A view keeps the whole frame
    #: alive: it is let go once decoded (``b""``; the native path's records are spans into
    #: it until handed out), and a paused partition's data and records get their own copy
    #: when a collect sets them aside (:meth:`FetchBuffer.collect`).
    data: bytes | memoryview
    aborted: tuple[Any, ...] | None
    node: int
    error: KafkaError | None = None
    decoded: DecodedRecords | None = None
    index: int = 0
    #: The offset the partition's position must be at for this data to continue it.
    next_offset: int = 0
    last_epoch: int | None = None
    #: Where the position will be once this data is consumed (after its last complete batch,
    #: from the batch headers); None: not known (an error, no complete batch, fetch ahead off).
    end_offset: int | None = None
    #: The raw bytes of ``data`` as it came (what the buffer's bound counts).
    size: int = field(init=False)

    def __post_init__(self) -> None:
        self.size = len(self.data)


def _slice(decoded: DecodedRecords, start: int, end: int) -> list[ConsumerRecord]:
    """Records ``start``..``end-1`` of ``decoded`` as ConsumerRecords (built in C on the
    native record path; see records.slice_records)."""
    return slice_records(decoded, start, end)


def _with_context(error: KafkaError, tp: TopicPartition, offset: int) -> KafkaError:
    if error.topic is None:
        error.topic = tp.topic
    if error.partition is None:
        error.partition = tp.partition
    if error.offset is None:
        error.offset = offset
    return error


class FetchBuffer:
    """The buffer of completed fetches and their collect (see the module docstring).

    Built with the subscription state it advances; :meth:`reset` empties it for a new fetch
    manager (with that manager's config) and opens it; :meth:`close` marks it as having no
    producer (then :meth:`try_collect` answers None: the caller asks the fetch actor)."""

    def __init__(
        self,
        subscriptions: SubscriptionState,
        config: FetchConfig | None = None,
        *,
        client_id: str = "",
        group_id: str | None = None,
    ) -> None:
        self._subs = subscriptions
        self._log = get_logger("fetch", client_id=client_id, group_id=group_id)
        #: Held by every method, and by the fetch actor while it handles one message.
        self.lock = threading.RLock()
        #: Grows when data (or an error) may be waiting at collect (:meth:`wakeup`).
        self.generation = 0
        self._open = False
        #: Grows at every reset: which manager the buffer is open for.
        self._owner = 0
        self._config = config if config is not None else FetchConfig()
        self._completed: deque[CompletedFetch] = deque()
        #: Per buffered partition: (its buffered responses, where the last one's data ends),
        #: kept as data is added, handed out and dropped (:meth:`chains`, :meth:`chain_end`).
        self._chains: dict[TopicPartition, tuple[int, int | None]] = {}
        self._buffered_bytes = 0
        self._m_records = 0
        self._m_bytes = 0
        self._m_lag: dict[TopicPartition, int] = {}
        self._m_lag_assignment_id = -1
        #: SubscriptionState.usability_changes at the last full :meth:`drop_stale` (None:
        #: never, or data added since): while it holds, nothing buffered became stale.
        self._checked_at: int | None = None

    def reset(self, config: FetchConfig) -> int:
        """Empty, with the counters at zero and ``config``, and open: a new fetch manager.
        Returns the token its :meth:`close` takes."""
        with self.lock:
            self._owner += 1
            self._config = config
            self._completed = deque()
            self._chains = {}
            self._buffered_bytes = 0
            self._m_records = 0
            self._m_bytes = 0
            self._m_lag = {}
            self._m_lag_assignment_id = -1
            self._checked_at = None
            self._open = True
            return self._owner

    def close(self, owner: int) -> None:
        """The fetch manager that :meth:`reset` it (``owner``, its token) fills it no more (its
        actor stopped); nothing when another manager reset it since."""
        with self.lock:
            if owner == self._owner:
                self._open = False

    def wakeup(self) -> None:
        """Data or an error may be waiting at collect: a waiting poll collects again."""
        with self.lock:
            self.generation += 1

    @property
    def is_open(self) -> bool:
        """Whether a fetch manager fills it (its actor runs)."""
        return self._open

    @property
    def buffered_bytes(self) -> int:
        return self._buffered_bytes

    @property
    def bytes_consumed(self) -> int:
        """Raw record bytes of the fetched data handed out so far (counted when drained)."""
        return self._m_bytes

    @property
    def records_consumed(self) -> int:
        return self._m_records

    def records_lag(self) -> dict[TopicPartition, int]:
        """The last lag of every partition collected from and still assigned."""
        with self.lock:
            return dict(self._m_lag)

    def buffered_partitions(self) -> frozenset[TopicPartition]:
        with self.lock:
            return frozenset(self._chains)

    def add(self, cf: CompletedFetch) -> None:
        """A completed fetch (data or a partition error) from a response, in arrival order."""
        with self.lock:
            self._completed.append(cf)
            chain = self._chains.get(cf.tp)
            self._chains[cf.tp] = (
                1 if chain is None else chain[0] + 1,
                cf.end_offset if cf.error is None else None,
            )
            self._buffered_bytes += cf.size
            self._checked_at = None

    def _release(self, cf: CompletedFetch) -> None:
        """``cf`` leaves the buffer: the first of its partition's buffered data (a collect)
        or any (:meth:`drop_stale`, which rebuilds the chains afterwards)."""
        self._buffered_bytes -= cf.size
        chain = self._chains.get(cf.tp)
        if chain is not None:
            if chain[0] <= 1:
                del self._chains[cf.tp]
            else:
                self._chains[cf.tp] = (chain[0] - 1, chain[1])

    def drop_stale(self) -> None:
        """Free buffered data that can never be handed out: partitions no longer assigned,
        pending revocation, or no longer at the offset the data continues.

        Scans the buffer only when data arrived or a partition's usability may have changed
        since the last scan (:attr:`SubscriptionState.usability_changes`): a poll that only
        handed out records costs nothing here, whatever the number of partitions."""
        with self.lock:
            changes = self._subs.usability_changes
            if changes == self._checked_at:
                return
            self._checked_at = changes
            kept: deque[CompletedFetch] = deque()
            ends: dict[TopicPartition, int | None] = {}
            for cf in self._completed:
                if self._usable(cf, ignore_pause=True) or self._chained(cf, ends):
                    kept.append(cf)
                    ends[cf.tp] = cf.end_offset if cf.error is None else None
                else:
                    self._release(cf)
            self._completed = kept
            chains: dict[TopicPartition, tuple[int, int | None]] = {}
            for cf in kept:
                chain = chains.get(cf.tp)
                chains[cf.tp] = (
                    1 if chain is None else chain[0] + 1,
                    cf.end_offset if cf.error is None else None,
                )
            self._chains = chains

    def _chained(self, cf: CompletedFetch, ends: Mapping[TopicPartition, int | None]) -> bool:
        """Whether ``cf`` continues the data before it (fetch ahead) of a partition still
        owned; ``ends``: where the data kept so far of each partition ends."""
        end = ends.get(cf.tp)
        if end is None or end != cf.next_offset:
            return False
        state = self._subs.partition_state(cf.tp)
        return not (
            state is None
            or not state.has_valid_position
            or state.pending_revocation
            or state.pending_on_assigned_callback
        )

    def chains(self) -> dict[TopicPartition, tuple[int, int | None]]:
        """Per buffered partition: (buffered responses, where the last one's data ends)."""
        with self.lock:
            return dict(self._chains)

    def chain_end(self, tp: TopicPartition) -> int | None:
        """Where the last buffered data of ``tp`` ends (None: none, or not known)."""
        with self.lock:
            chain = self._chains.get(tp)
            return None if chain is None else chain[1]

    def _usable(self, cf: CompletedFetch, *, ignore_pause: bool) -> bool:
        state = self._subs.partition_state(cf.tp)
        if state is None or state.position is None or not state.has_valid_position:
            return False
        if state.pending_revocation or state.pending_on_assigned_callback:
            return False
        if state.paused and not ignore_pause:
            return False
        return state.position.offset == cf.next_offset

    def try_collect(
        self, max_records: int | None = None, *, columnar: bool = False, wait: bool = True
    ) -> FetchResult | None:
        """:meth:`collect` on the caller's thread while a fetch manager fills this buffer;
        None when none does (not started, or its actor stopped), or, without ``wait``, when
        the lock is taken right now (the asyncio loop never waits for it). On None the caller
        asks the fetch actor instead."""
        lock = self.lock
        if not lock.acquire(blocking=wait):
            return None
        try:
            if not self._open:
                return None
            return self.collect(max_records, columnar=columnar)
        finally:
            lock.release()

    def collect(self, max_records: int | None = None, *, columnar: bool = False) -> FetchResult:
        """Hand out up to ``max_records`` (default max.poll.records) buffered records.

        ``columnar``: as :class:`ColumnSlice` values in ``FetchResult.columns`` (data not
        decoded yet is decoded into Arrow buffers, no Python object per record), with the same
        positions and bookkeeping.

        Only partitions assigned, fetchable and at the offset the buffered data continues are
        served; other data is discarded (stale), except that of paused partitions, which is
        kept until they are resumed. Positions advance in SubscriptionState as records are
        handed out (atomically: a concurrent seek wins and the records are dropped); consumed
        positions do not (the front end moves them as it returns the records), except over
        batches without records when nothing before them waits to be returned.
        """
        limit = self._config.max_poll_records if max_records is None else max_records
        if limit <= 0:
            raise ValueError("max_records must be positive")
        with self.lock:
            return self._collect(limit, columnar)

    def _collect(self, limit: int, columnar: bool) -> FetchResult:
        buffered_before = self._buffered_bytes
        assignment_id = self._subs.assignment_id
        records: dict[TopicPartition, list[Any]] = {}
        positions: dict[TopicPartition, FetchPosition] = {}
        paused: list[CompletedFetch] = []
        paused_ends: dict[TopicPartition, int | None] = {}
        remaining = limit
        error: KafkaError | None = None
        collected_bytes: dict[str, int] = {}
        while remaining > 0 and self._completed:
            cf = self._completed[0]
            state = self._subs.partition_state(cf.tp)
            if (
                state is not None
                and state.paused
                and (self._usable(cf, ignore_pause=True) or self._chained(cf, paused_ends))
            ):
                paused.append(self._completed.popleft())
                paused_ends[cf.tp] = cf.end_offset if cf.error is None else None
                # It may stay for long: its own copy, so that it does not keep the rest of its
                # response's frame alive (what is held stays within the limits).
                if type(cf.data) is memoryview:
                    cf.data = bytes(cf.data)
                if cf.decoded is not None:
                    cf.decoded.own_records(cf.index)
                continue
            if not self._usable(cf, ignore_pause=False):
                self._release(self._completed.popleft())
                continue
            if columnar and ONE_SLICE_PER_PARTITION and cf.tp in records:
                break  # the next response of a partition taken: its batch stays one slice
            if cf.error is not None and cf.decoded is None:
                # A partition error from the response (no data).
                if records:
                    break
                self._release(self._completed.popleft())
                error = cf.error
                break
            if cf.decoded is None:
                cf.decoded = decode_records(
                    cf.data,
                    cf.tp.topic,
                    cf.tp.partition,
                    fetch_offset=cf.fetch_offset,
                    check_crcs=self._config.check_crcs,
                    isolation_level=self._config.isolation_level,
                    aborted_transactions=cf.aborted,
                    partial_on_error=True,
                    max_decompressed_size=self._config.max_decompressed_batch_bytes,
                    materialize=not columnar,
                    columnar=columnar,
                )
                # The decoded records keep what they need (their spans keep a view's frame
                # until they are handed out or own their bytes: own_records).
                cf.data = b""
            decoded = cf.decoded
            taken, count, new_position, drained = self._take_records(cf, remaining, columnar)
            if new_position is not None and state is not None and state.position is not None:
                new_position = FetchPosition(
                    new_position.offset, new_position.offset_epoch, state.position.current_leader
                )
            if new_position is not None:
                if self._subs.advance_position(cf.tp, cf.next_offset, new_position):
                    if not taken:  # nothing to return: the consumed position may follow
                        self._subs.advance_consumed(cf.tp, new_position, from_offset=cf.next_offset)
                    cf.next_offset = new_position.offset
                    cf.last_epoch = new_position.offset_epoch
                    positions[cf.tp] = new_position
                    if taken:
                        records.setdefault(cf.tp, []).extend(taken)
                        remaining -= count
                        self._m_records += count
                else:
                    self._release(self._completed.popleft())  # a seek came first
                    continue
            if not drained:
                continue
            if decoded.error is not None:
                # Records before the bad batch are out; the error is raised while the
                # position stays at the bad batch (the user may seek past it).
                if records:
                    break
                error = _with_context(decoded.error, cf.tp, cf.next_offset)
                break
            self._release(self._completed.popleft())
            self._m_bytes += cf.size
            collected_bytes[cf.tp.topic] = collected_bytes.get(cf.tp.topic, 0) + cf.size
            if decoded.bytes_consumed == 0:
                self._log.debug("fetch_no_progress", partition=str(cf.tp), offset=cf.fetch_offset)
            self._subs.move_partition_to_end(cf.tp)
        # Paused partitions' data goes back, in order, after what is left.
        self._completed.extend(paused)
        lags: dict[TopicPartition, int] = {}
        leads: dict[TopicPartition, int] = {}
        for tp in positions:
            lag = self._subs.partition_lag(tp, self._config.isolation_level)
            if lag is not None:
                self._m_lag[tp] = lags[tp] = lag
            lead = self._subs.partition_lead(tp)
            if lead is not None:
                leads[tp] = lead
        # Lags of partitions no longer assigned go (the assigned set changes only with the
        # assignment id: checked again only then, not at every collect).
        current_id = self._subs.assignment_id
        if current_id != self._m_lag_assignment_id:
            for tp in list(self._m_lag):
                if not self._subs.is_assigned(tp):
                    del self._m_lag[tp]
            self._m_lag_assignment_id = current_id
        by_partition = {tp: tuple(r) for tp, r in records.items()}
        return FetchResult(
            records={} if columnar else by_partition,
            positions=positions,
            error=error if not records else None,
            assignment_id=assignment_id,
            columns=by_partition if columnar else {},
            lag=lags,
            lead=leads,
            bytes_by_topic=collected_bytes,
            freed_bytes=buffered_before - self._buffered_bytes,
        )

    def _take_records(
        self, cf: CompletedFetch, limit: int, columnar: bool = False
    ) -> tuple[list[Any], int, FetchPosition | None, bool]:
        """Up to ``limit`` records from ``cf``: (records, or one ColumnSlice when
        ``columnar``; how many records; new position or None; drained)."""
        decoded = cf.decoded
        assert decoded is not None
        total = len(decoded)
        start = cf.index
        end = min(total, start + limit)
        taken: list[Any] = []
        epoch = cf.last_epoch
        next_offset = cf.next_offset
        if end > start:
            if columnar:
                taken = [ColumnSlice(decoded, start, end)]
                last_offset = decoded.offset_at(end - 1)
                last_epoch = decoded.leader_epoch_at(end - 1)
            else:
                taken = _slice(decoded, start, end)
                last_offset, last_epoch = taken[-1].offset, taken[-1].leader_epoch
            next_offset = last_offset + 1
            epoch = last_epoch if last_epoch is not None else epoch
            cf.index = end
        drained = cf.index >= total
        if drained:
            # Past trailing control / aborted batches; with an error: up to the bad batch.
            next_offset = max(next_offset, decoded.next_fetch_offset)
        if next_offset == cf.next_offset:
            return taken, max(0, end - start), None, drained
        return taken, max(0, end - start), FetchPosition(next_offset, epoch), drained
