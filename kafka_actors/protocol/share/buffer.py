"""The buffer of a share consumer's fetched data and the hand-out of acquired records:
:class:`ShareFetchBuffer`.

Owns: the completed share fetches buffered per partition (raw data and the acquired ranges
the broker sent with it, bounded in bytes by the manager), and
:meth:`ShareFetchBuffer.collect`: decoding at hand-out time with
:func:`kafka_actors.protocol.records.decode.decode_records` (its native path when built), only the
records inside an acquired range handed out, each a :class:`ShareConsumerRecord` with the
range's delivery count; acquired offsets without a record become GAP acknowledgements, and
from a corrupt batch on RELEASE ones (the records before it are handed out first, the error
then).

Records of a partition no longer assigned stay buffered and are handed out, as Java's
ShareFetchBuffer / ShareFetchCollector do: the broker acquired them for this member (its
acquisition locks are the member's, not the assignment's: a partition leaving the
assignment, or the share session forgetting it, releases nothing), so they are this member's
to deliver and acknowledge (their acknowledgements go to the broker they came from); dropped,
they would wait for their acquisition lock to expire before anyone got them. Only a buffered
error of such a partition (no records) is dropped. The requests, sessions and acknowledgements are
:class:`~kafka_actors.protocol.share.fetch.ShareFetchManager`'s, which owns one buffer (as
Java's ShareConsumeRequestManager and ShareFetchCollector share one ShareFetchBuffer): it adds
what responses bring (:meth:`ShareFetchBuffer.add_records`, :meth:`ShareFetchBuffer.add_error`),
passes the assignment in, and takes back from :meth:`ShareFetchBuffer.collect` the records and
the gap acknowledgements (:class:`GapAcknowledgements`) to send.

May touch: nothing outside itself; pure.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Generic, NamedTuple

from kafka_actors.errors import KafkaError
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.decode import (
    ConsumerRecord,
    DecodedRecords,
    Headers,
    K_co,
    TimestampType,
    V_co,
    decode_records,
)
from kafka_actors.protocol.share.acknowledgements import GAP, Acknowledgements, AcknowledgeType

__all__ = [
    "MAX_ACQUIRED_PER_PARTITION",
    "GapAcknowledgements",
    "ShareCollectResult",
    "ShareCompletedFetch",
    "ShareConsumerRecord",
    "ShareFetchBuffer",
    "ShareHandOut",
]

#: The most acquired offsets one partition of one response may carry (a broker acquires about
#: max.poll.records at a time, rounded to whole batches).
MAX_ACQUIRED_PER_PARTITION: Final = 1 << 20


class ShareConsumerRecord(NamedTuple, Generic[K_co, V_co]):
    """A record delivered to a share consumer: a ConsumerRecord's fields and
    ``delivery_count`` (how many times the broker delivered it, this time included).
    Generic in the key and value types as ``ConsumerRecord`` is."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: K_co
    value: V_co
    headers: Headers
    leader_epoch: int | None
    delivery_count: int


@dataclass(slots=True)
class ShareCompletedFetch:
    """One partition's data from one ShareFetch response, handed out by collect."""

    tp: TopicPartition
    node: int
    data: bytes
    #: Sorted, disjoint acquired ranges: (first, last, delivery count).
    acquired: list[tuple[int, int, int]]
    size: int
    #: The acquired records, decoded at the first collect (None until then).
    records: list[ShareConsumerRecord] | None = None
    next_index: int = 0
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class ShareCollectResult:
    records: Mapping[TopicPartition, tuple[ShareConsumerRecord, ...]]
    error: KafkaError | None = None

    @property
    def record_count(self) -> int:
        return sum(len(r) for r in self.records.values())


@dataclass(frozen=True, slots=True)
class GapAcknowledgements:
    """Acquired offsets of ``tp`` that are no record (GAP), or from a corrupt batch on
    (RELEASE), found while decoding a response from broker ``node``: they go to that broker
    with the partition's next acknowledgements."""

    tp: TopicPartition
    node: int
    acknowledgements: Acknowledgements


@dataclass(frozen=True, slots=True)
class ShareHandOut:
    """What :meth:`ShareFetchBuffer.collect` handed out, and the gap acknowledgements the
    responses it decoded on the way produced (in decode order)."""

    result: ShareCollectResult
    gaps: tuple[GapAcknowledgements, ...]


class ShareFetchBuffer:
    """Buffered share fetches and their hand-out (see the module docstring)."""

    def __init__(self, *, check_crcs: bool, max_decompressed_batch_bytes: int) -> None:
        self._completed: deque[ShareCompletedFetch] = deque()
        self._bytes = 0
        self._check_crcs = check_crcs
        self._max_decompressed = max_decompressed_batch_bytes

    @property
    def buffered_bytes(self) -> int:
        return self._bytes

    @property
    def buffered_count(self) -> int:
        """Partition responses buffered (records or an error waiting for collect)."""
        return len(self._completed)

    def partitions_from(self, node: int) -> set[TopicPartition]:
        """The partitions with a response from broker ``node`` buffered."""
        return {b.tp for b in self._completed if b.node == node}

    def started_on(self, node: int, partitions: frozenset[TopicPartition]) -> bool:
        """Whether every buffered response of ``partitions`` from broker ``node`` was started
        on by a collect (decoded, no error waiting)."""
        for b in self._completed:
            if b.node == node and b.tp in partitions and (b.records is None or b.error is not None):
                return False
        return True

    def add_records(
        self, tp: TopicPartition, node: int, data: bytes, acquired: list[tuple[int, int, int]]
    ) -> None:
        """Buffer one partition's record data from broker ``node`` with its acquired ranges
        (sorted, disjoint: (first, last, delivery count))."""
        self._add(ShareCompletedFetch(tp, node, data, acquired, len(data)))

    def add_error(self, tp: TopicPartition, node: int, error: KafkaError) -> None:
        """Buffer an error for ``tp``, raised to the application at collect."""
        self._add(ShareCompletedFetch(tp, node, b"", [], 0, records=[], error=error))

    def _add(self, buffered: ShareCompletedFetch) -> None:
        self._completed.append(buffered)
        self._bytes += buffered.size

    def drop_unassigned(self, assignment: frozenset[TopicPartition]) -> None:
        """Drop the buffered errors of partitions not in ``assignment`` (their records stay:
        see the module docstring)."""
        kept: deque[ShareCompletedFetch] = deque()
        for buffered in self._completed:
            if buffered.tp in assignment or buffered.acquired:
                kept.append(buffered)
            else:
                self._bytes -= buffered.size
        self._completed = kept

    def clear(self) -> None:
        self._completed.clear()
        self._bytes = 0

    def collect(self, max_records: int, assignment: frozenset[TopicPartition]) -> ShareHandOut:
        """Up to ``max_records`` acquired records, in buffer order, decoded now; an error is
        returned (not raised) once the records before it are handed out. A buffered error of
        a partition not in ``assignment`` is dropped."""
        out: dict[TopicPartition, list[ShareConsumerRecord]] = {}
        gaps: list[GapAcknowledgements] = []
        remaining = max_records
        error: KafkaError | None = None
        while self._completed and remaining > 0:
            buffered = self._completed[0]
            if buffered.tp not in assignment and not buffered.acquired:
                self._drop_head()  # an error of a partition no longer assigned
                continue
            if buffered.records is None:
                acks = self._decode(buffered)
                if acks:
                    gaps.append(GapAcknowledgements(buffered.tp, buffered.node, acks))
            assert buffered.records is not None
            records = buffered.records
            if buffered.next_index < len(records):
                end = min(len(records), buffered.next_index + remaining)
                out.setdefault(buffered.tp, []).extend(records[buffered.next_index : end])
                remaining -= end - buffered.next_index
                buffered.next_index = end
            if buffered.next_index >= len(records):
                if buffered.error is not None and not out:
                    error = buffered.error
                    self._drop_head()
                    break
                if buffered.error is not None:
                    break  # raised at the next collect, after these records
                self._drop_head()
        result = ShareCollectResult({tp: tuple(v) for tp, v in out.items()}, error)
        return ShareHandOut(result, tuple(gaps))

    def _drop_head(self) -> None:
        buffered = self._completed.popleft()
        self._bytes -= buffered.size

    def _decode(self, buffered: ShareCompletedFetch) -> Acknowledgements:
        """Decode ``buffered``'s records (those inside an acquired range kept); returns the
        acquired offsets that are no record, as gap (or release) acknowledgements."""
        tp = buffered.tp
        first_acquired = buffered.acquired[0][0] if buffered.acquired else 0
        decoded: DecodedRecords = decode_records(
            buffered.data,
            tp.topic,
            tp.partition,
            fetch_offset=first_acquired,
            check_crcs=self._check_crcs,
            partial_on_error=True,
            max_decompressed_size=self._max_decompressed,
            materialize=True,
        )
        records: list[ConsumerRecord] = decoded.records()  # built once (native: when read)
        ranges = buffered.acquired
        # The records inside each acquired range (records and ranges are in offset order),
        # with the range's delivery count.
        all_offsets = [r.offset for r in records]
        kept: list[ShareConsumerRecord] = []
        for first, last, count in ranges:
            lo = bisect.bisect_left(all_offsets, first)
            hi = bisect.bisect_right(all_offsets, last, lo)
            kept.extend([ShareConsumerRecord(*r, count) for r in records[lo:hi]])
        buffered.records = kept
        # Acquired offsets that are no record: gaps (or, from a bad batch on, released so
        # another delivery may succeed).
        bad_from = decoded.next_fetch_offset if decoded.error is not None else None
        acks = Acknowledgements()
        offsets = [r.offset for r in kept]
        for first, last, _count in ranges:
            start = first
            j = bisect.bisect_left(offsets, first)
            if bisect.bisect_right(offsets, last, j) - j == last - first + 1:
                continue  # a record at every offset of the range (offsets are distinct)
            while start <= last:
                if j < len(offsets) and offsets[j] <= last:
                    if offsets[j] > start:
                        self._settle_gap(acks, start, offsets[j] - 1, bad_from)
                    start = offsets[j] + 1
                    j += 1
                else:
                    self._settle_gap(acks, start, last, bad_from)
                    break
        if decoded.error is not None:
            buffered.error = decoded.error
        return acks

    @staticmethod
    def _settle_gap(acks: Acknowledgements, first: int, last: int, bad_from: int | None) -> None:
        if bad_from is None or last < bad_from:
            acks.add_range(first, last, GAP)
            return
        if first < bad_from:
            acks.add_range(first, bad_from - 1, GAP)
            first = bad_from
        acks.add_range(first, last, AcknowledgeType.RELEASE)
