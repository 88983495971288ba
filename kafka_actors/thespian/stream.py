"""The bridge's stream state: demand, records polled but not delivered, delivered positions.

Owns: :class:`DemandStream`, a pure state machine (no actors, no I/O, no clock). The bridge
actor feeds it what ``poll()`` returned and the subscriber's ``Request(n)``; it says which
records to deliver (never more than the demand, offset order per partition kept), whether the
consumer should fetch (only with demand and an empty buffer, so the buffer never holds more
than one poll), and the positions delivered per partition (what ``Commit(offsets=None)``
commits).

May touch: nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records import ConsumerRecord

__all__ = ["DemandStream", "record_size"]


def record_size(record: ConsumerRecord) -> int:
    """Bytes a record holds (key, value, header keys and values)."""
    size = len(record.key or b"") + len(record.value or b"")
    for name, value in record.headers:
        size += len(name) + len(value or b"")
    return size


class DemandStream:
    """Reactive-streams demand in records, and the records waiting for it."""

    def __init__(self) -> None:
        self.demand = 0
        self._buffer: deque[ConsumerRecord] = deque()
        self.buffered_bytes = 0
        self.delivered_records = 0
        self.delivered: dict[TopicPartition, int] = {}

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
        delivered = self.delivered
        for _ in range(n):
            record = buffer.popleft()
            self.buffered_bytes -= record_size(record)
            delivered[TopicPartition(record.topic, record.partition)] = record.offset + 1
            out.append(record)
        self.demand -= n
        self.delivered_records += n
        return tuple(out)

    def drop(self, partitions: Iterable[TopicPartition]) -> int:
        """Forget ``partitions`` (revoked or lost): their undelivered records and delivered
        positions. Returns how many buffered records were dropped."""
        gone = set(partitions)
        if not gone:
            return 0
        for tp in gone:
            self.delivered.pop(tp, None)
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

    def clear(self) -> None:
        self._buffer.clear()
        self.buffered_bytes = 0
