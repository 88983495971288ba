"""The prefetch buffer and the hand-out of records: :class:`FetchBuffer`.

Owns: the completed fetches buffered per partition (raw data, bounded in bytes), their order
and chaining (data continues where the partition's position or the previous buffered fetch
ends), dropping data of partitions no longer owned or moved, and :meth:`FetchBuffer.collect`:
decoding at hand-out time, records handed out only for partitions still owned, fetchable and
at the position the data continues, positions advanced, per-partition errors raised in order
(:class:`FetchResult`). It follows the Java client's ``FetchBuffer`` / ``FetchCollector``; the
requests, sessions and responses are :class:`~kafka_actors.protocol.fetch.FetchManager`'s,
which derives from it (the choices are in :mod:`kafka_actors.protocol.fetch`).

May touch: the shared :class:`~kafka_actors.protocol.subscription.SubscriptionState`
(positions, through its atomic methods), nothing else; pure.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kafka_actors.errors import KafkaError
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records import (
    ConsumerRecord,
    DecodedRecords,
    decode_records,
    slice_records,
)
from kafka_actors.protocol.subscription import (
    FetchPosition,
    SubscriptionState,
)

if TYPE_CHECKING:
    from kafka_actors.protocol.fetch import FetchConfig


#: A columnar collect takes at most one response's records per partition: each partition's
#: batch is then a zero-copy slice of one decoded response (two would be concatenated, a copy
#: made by pyarrow with the GIL given up); the rest waits for the next call.
ONE_SLICE_PER_PARTITION = True


@dataclass(frozen=True, slots=True)
class ColumnSlice:
    """Records ``start``..``end-1`` of decoded fetched data, handed out without a Python object
    per record (a columnar collect); :func:`kafka_actors.protocol.arrow.record_batch` makes
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
    """What :meth:`FetchManager.collect` hands out.

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
class _CompletedFetch:
    """One partition's data (or error) from one response, waiting in the buffer."""

    tp: TopicPartition
    fetch_offset: int
    data: bytes
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

    @property
    def size(self) -> int:
        return len(self.data)


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
    """The buffer and collector half of the fetch manager (see the module docstring).

    :class:`~kafka_actors.protocol.fetch.FetchManager` owns the state below (initialized in
    its ``__init__``) and adds completed fetches from the responses it reads.
    """

    _subs: SubscriptionState
    _config: FetchConfig
    _log: Any
    _completed: deque[_CompletedFetch]
    _buffered_bytes: int
    _last_assignment_id: int
    _m_records: int
    _m_bytes: int
    _m_lag: dict[TopicPartition, int]
    _m_lag_assignment_id: int

    @property
    def buffered_bytes(self) -> int:
        return self._buffered_bytes

    @property
    def bytes_consumed(self) -> int:
        """Raw record bytes of the fetched data handed out so far (counted when drained)."""
        return self._m_bytes

    def buffered_partitions(self) -> frozenset[TopicPartition]:
        return frozenset(cf.tp for cf in self._completed)

    def _add_completed(self, cf: _CompletedFetch) -> None:
        self._completed.append(cf)
        self._buffered_bytes += cf.size

    def _release(self, cf: _CompletedFetch) -> None:
        self._buffered_bytes -= cf.size

    def _drop_stale_buffered(self) -> None:
        """Free buffered data that can never be handed out: partitions no longer assigned,
        pending revocation, or no longer at the offset the data continues."""
        kept: deque[_CompletedFetch] = deque()
        ends: dict[TopicPartition, int | None] = {}
        for cf in self._completed:
            if self._usable(cf, ignore_pause=True) or self._chained(cf, ends):
                kept.append(cf)
                ends[cf.tp] = cf.end_offset if cf.error is None else None
            else:
                self._release(cf)
        self._completed = kept

    def _chained(self, cf: _CompletedFetch, ends: Mapping[TopicPartition, int | None]) -> bool:
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

    def _chains(self) -> dict[TopicPartition, tuple[int, int | None]]:
        """Per buffered partition: (buffered responses, where the last one's data ends)."""
        chains: dict[TopicPartition, tuple[int, int | None]] = {}
        for cf in self._completed:
            count = chains[cf.tp][0] if cf.tp in chains else 0
            chains[cf.tp] = (count + 1, cf.end_offset if cf.error is None else None)
        return chains

    def _chain_end(self, tp: TopicPartition) -> int | None:
        end: int | None = None
        for cf in self._completed:
            if cf.tp == tp:
                end = cf.end_offset if cf.error is None else None
        return end

    def _usable(self, cf: _CompletedFetch, *, ignore_pause: bool) -> bool:
        state = self._subs.partition_state(cf.tp)
        if state is None or state.position is None or not state.has_valid_position:
            return False
        if state.pending_revocation or state.pending_on_assigned_callback:
            return False
        if state.paused and not ignore_pause:
            return False
        return state.position.offset == cf.next_offset

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
        assignment_id = self._subs.assignment_id
        records: dict[TopicPartition, list[Any]] = {}
        positions: dict[TopicPartition, FetchPosition] = {}
        paused: list[_CompletedFetch] = []
        paused_ends: dict[TopicPartition, int | None] = {}
        remaining = limit
        error: KafkaError | None = None
        collected_bytes: dict[str, int] = {}
        self.last_collect_bytes = collected_bytes
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
        self.last_collect_lag, self.last_collect_lead = lags, leads
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
        )

    def _take_records(
        self, cf: _CompletedFetch, limit: int, columnar: bool = False
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
