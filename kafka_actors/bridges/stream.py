"""A bridge's stream state (Thespian and pykka): demand, records polled but not sent, batches
in flight, and the positions the subscriber acknowledged.

Owns: :class:`DemandStream`, a pure state machine (no actors, no I/O, no clock). The bridge
actor feeds it what ``poll()`` returned, the subscriber's ``Request(n)`` and acknowledgements
(``Request.handled`` / ``Handled``), and the batches that failed in the subscriber
(Thespian's ``PoisonMessage``, pykka's ``BatchFailed``). It says which records to send (never
more than the demand, offset order per partition kept),
whether another batch may be sent (at most ``max_in_flight`` unacknowledged batches), whether
the consumer should fetch (only with demand and an empty buffer, so the buffer never holds more
than one poll), the positions acknowledged per partition (what ``Commit(offsets=None)``
commits), and, for a rejected batch, where each partition must be sought back to.

May touch: nothing.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass

from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord

__all__ = ["DemandStream", "first_offsets", "record_size"]


def record_size(record: ConsumerRecord) -> int:
    """Bytes a record holds (key, value, header keys and values)."""
    size = len(record.key or b"") + len(record.value or b"")
    for name, value in record.headers:
        size += len(name) + len(value or b"")
    return size


def first_offsets(records: Iterable[ConsumerRecord]) -> dict[TopicPartition, int]:
    """The first offset of each partition in ``records`` (offset order per partition)."""
    first: dict[TopicPartition, int] = {}
    for record in records:
        tp = TopicPartition(record.topic, record.partition)
        if tp not in first:
            first[tp] = record.offset
    return first


@dataclass(slots=True)
class _InFlight:
    """A batch sent and not acknowledged: its first offset and its position per partition."""

    first: dict[TopicPartition, int]
    positions: dict[TopicPartition, int]


class DemandStream:
    """Reactive-streams demand in records, the records waiting for it, the batches in flight."""

    def __init__(self, max_in_flight: int = 16) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.max_in_flight = max_in_flight
        self.demand = 0
        self._buffer: deque[ConsumerRecord] = deque()
        self.buffered_bytes = 0
        self.delivered_records = 0  # records sent (acknowledged or not)
        self.delivered: dict[TopicPartition, int] = {}  # acknowledged positions
        self._in_flight: OrderedDict[int, _InFlight] = OrderedDict()
        self.rejected_batches = 0

    @property
    def in_flight(self) -> int:
        """Batches sent and not acknowledged."""
        return len(self._in_flight)

    @property
    def oldest_in_flight(self) -> int | None:
        """The seq of the oldest batch not acknowledged, if any."""
        return next(iter(self._in_flight), None)

    @property
    def can_send(self) -> bool:
        return len(self._in_flight) < self.max_in_flight

    @property
    def buffered_records(self) -> int:
        return len(self._buffer)

    def request(self, n: int) -> None:
        if n <= 0:
            raise ValueError(f"Request(n) needs n > 0 (reactive streams rule 3.9), got {n}")
        self.demand += n

    @property
    def wants_fetch(self) -> bool:
        """Fetch only when every buffered record has been delivered and demand remains."""
        return self.demand > 0 and not self._buffer

    def add(self, records: Iterable[ConsumerRecord]) -> int:
        added = 0
        for record in records:
            self._buffer.append(record)
            self.buffered_bytes += record_size(record)
            added += 1
        return added

    def take(self, limit: int | None = None) -> tuple[ConsumerRecord, ...]:
        """Up to the demand (and ``limit``) records, in buffer order; the demand drops by as
        many, and their positions count as delivered."""
        n = min(self.demand, len(self._buffer))
        if limit is not None:
            n = min(n, limit)
        if n <= 0:
            return ()
        out = []
        buffer = self._buffer
        for _ in range(n):
            record = buffer.popleft()
            self.buffered_bytes -= record_size(record)
            out.append(record)
        self.demand -= n
        self.delivered_records += n
        return tuple(out)

    def sent(self, seq: int, records: Iterable[ConsumerRecord]) -> dict[TopicPartition, int]:
        """``records`` (from :meth:`take`) left as the batch ``seq``: in flight until
        acknowledged. Returns the batch's positions (next offset per partition)."""
        first: dict[TopicPartition, int] = {}
        positions: dict[TopicPartition, int] = {}
        for record in records:
            tp = TopicPartition(record.topic, record.partition)
            if tp not in first:
                first[tp] = record.offset
            positions[tp] = record.offset + 1
        self._in_flight[seq] = _InFlight(first, positions)
        return dict(positions)

    def acknowledge(self, seq: int) -> int:
        """The subscriber handled every batch up to ``seq``: they leave the window and their
        positions become committable. Returns how many batches left the window."""
        freed = 0
        in_flight = self._in_flight
        while in_flight:
            first_seq = next(iter(in_flight))
            if first_seq > seq:
                break
            self.delivered.update(in_flight.pop(first_seq).positions)
            freed += 1
        return freed

    def reject(self, seq: int, records: Iterable[ConsumerRecord]) -> dict[TopicPartition, int]:
        """The batch ``seq`` (its ``records``) came back unhandled: it and every later batch in
        flight are not delivered. Returns where each of their partitions must be sought back
        to (the first offset sent of it). Records buffered for those partitions are dropped
        (they follow the rewind point), acknowledged positions beyond it are pulled back, and
        the demand drops to zero (the subscriber asks again)."""
        rewound = first_offsets(records)
        for later in [s for s in self._in_flight if s >= seq]:
            entry = self._in_flight.pop(later)
            for tp, offset in entry.first.items():
                rewound[tp] = min(offset, rewound.get(tp, offset))
        for tp, offset in rewound.items():
            if self.delivered.get(tp, -1) > offset:
                self.delivered[tp] = offset
        self._drop_buffered(set(rewound))
        self.demand = 0
        self.rejected_batches += 1
        return rewound

    def drop(self, partitions: Iterable[TopicPartition]) -> int:
        """Forget ``partitions`` (revoked or lost): their undelivered records and delivered
        positions. Returns how many buffered records were dropped."""
        gone = set(partitions)
        if not gone:
            return 0
        for tp in gone:
            self.delivered.pop(tp, None)
        for entry in self._in_flight.values():
            for tp in gone:
                entry.first.pop(tp, None)
                entry.positions.pop(tp, None)
        return self._drop_buffered(gone)

    def _drop_buffered(self, gone: set[TopicPartition]) -> int:
        kept: deque[ConsumerRecord] = deque()
        dropped = 0
        for record in self._buffer:
            if TopicPartition(record.topic, record.partition) in gone:
                self.buffered_bytes -= record_size(record)
                dropped += 1
            else:
                kept.append(record)
        self._buffer = kept
        return dropped

    def restart(self) -> None:
        """A new subscriber: no demand, nothing delivered yet; buffered records are kept (the
        consumer's positions are already past them)."""
        self.demand = 0
        self.delivered = {}
        self._in_flight.clear()

    def clear(self) -> None:
        self._buffer.clear()
        self.buffered_bytes = 0
