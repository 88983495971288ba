"""Records from the consumer's fetch buffer to the polling thread: :class:`FetchCollector`.

Owns: collecting from the consumer's one
:class:`~kafka_actors.protocol.fetch.buffer.FetchBuffer` (``ctx.fetch_buffer``) on the caller's
thread, as Java's ``FetchCollector`` runs on the application thread over a thread-safe
``FetchBuffer``; recording each collect's statistics (records, bytes, lag, lead: return values
of the collect) in the consumer's metrics (:func:`count_collected`, also used by the fetch
actor when it collects for a ``CollectEvent``); telling the fetch actor to fetch again when a
collect freed buffer space.

May touch: the shared context (the fetch buffer, metrics, the subscription state's assignment
for the metrics), the fetch actor (a told ``PositionsChangedEvent``).
"""

from __future__ import annotations

from kafka_actors.actors.context import ConsumerContext
from kafka_actors.actors.events import PositionsChangedEvent
from kafka_actors.protocol.fetch.buffer import FetchResult

__all__ = ["FetchCollector", "count_collected"]


def count_collected(ctx: ConsumerContext, result: FetchResult) -> None:
    """Record one collect in the consumer's metrics: raw record bytes (as Java's
    bytes-consumed) and records per topic, lag and lead per partition; no per-record loop,
    one record of the sensors per collect."""
    subs = ctx.subscriptions
    ctx.metrics.update_assignment(subs.assignment_id, subs.assigned_partitions)
    count = result.record_count
    lag, lead = result.lag, result.lead
    if count or lag or lead:
        by_topic: dict[str, tuple[int, int]] = {}
        for tp, records in result.records.items():
            n, size = by_topic.get(tp.topic, (0, 0))
            by_topic[tp.topic] = (n + len(records), size)
        for tp, slices in result.columns.items():
            n, size = by_topic.get(tp.topic, (0, 0))
            by_topic[tp.topic] = (n + sum(len(s) for s in slices), size)
        consumed_bytes = 0
        for topic, size in result.bytes_by_topic.items():
            n, _ = by_topic.get(topic, (0, 0))
            by_topic[topic] = (n, size)
            consumed_bytes += size
        ctx.metrics.consumed(
            count,
            consumed_bytes,
            by_topic=by_topic,
            lag={(tp.topic, tp.partition): v for tp, v in lag.items()},
            lead={(tp.topic, tp.partition): v for tp, v in lead.items()},
        )


class FetchCollector:
    """Collects buffered records on the polling thread (see the module docstring)."""

    def __init__(self, ctx: ConsumerContext) -> None:
        self._ctx = ctx
        self._buffer = ctx.fetch_buffer

    @property
    def generation(self) -> int:
        """The buffer's generation: grows when data may be waiting (a poll that found nothing
        waits for it to change)."""
        return self._buffer.generation

    def collect(
        self, max_records: int, *, columnar: bool = False, wait: bool = True
    ) -> FetchResult | None:
        """Up to ``max_records`` buffered records (``FetchBuffer.collect``), positions
        advanced, counted in the metrics; a collect that freed buffer space tells the fetch
        actor to fetch what was drained. None when no fetch actor fills the buffer, or,
        without ``wait``, when its lock is taken right now (the asyncio loop never waits):
        then the caller asks the fetch actor (``CollectEvent``)."""
        result = self._buffer.try_collect(max_records, columnar=columnar, wait=wait)
        if result is None:
            return None
        ctx = self._ctx
        count_collected(ctx, result)
        if result.freed_bytes > 0:
            ctx.tell("fetch", PositionsChangedEvent())  # poll: fetch what was drained
        return result
