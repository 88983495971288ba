"""The fetch actor: the shell of :class:`~kafka_actors.protocol.fetch.manager.FetchManager` (Fetch,
fetch sessions), the producer of the consumer's fetch buffer.

Owns: filling the consumer's one thread-safe
:class:`~kafka_actors.protocol.fetch.buffer.FetchBuffer` (``ctx.fetch_buffer``, emptied for
each incarnation's manager, closed when it ends) while holding the buffer's lock for every
message it handles, the fetch-response metrics, and waking the polling thread when data is
buffered (``FetchBuffer.wakeup`` and the signal). The polling thread collects from the buffer
itself (:class:`~kafka_actors.actors.fetch_collector.FetchCollector`). The facade's asks to it
(:class:`CollectEvent`, :class:`FetchMetricsEvent`, :class:`CloseFetchEvent`) are defined here.
Where its events go: :data:`kafka_actors.actors.routing.ROUTES` (a metadata refresh it needs).

May touch: the NetworkActor (``Send``, through the shell), the shared context (the fetch
buffer, the signal, metrics), the SubscriptionState (through the manager), the other actors
through the routing table.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from typing import Any

from kafka_actors.actors.context import ConsumerContext, complete
from kafka_actors.actors.events import PositionsChangedEvent
from kafka_actors.actors.fetch_collector import count_collected
from kafka_actors.actors.routing import RoutingManagerActor, feed_cluster
from kafka_actors.errors import KafkaError
from kafka_actors.protocol.fetch.config import FetchConfig
from kafka_actors.protocol.fetch.manager import FetchManager
from kafka_actors.protocol.group.consumer.membership import AssignmentChanged, PauseFetching
from kafka_actors.protocol.metadata import ClusterUpdated
from kafka_actors.protocol.offsets.commit import PositionsInitialized
from kafka_actors.supervisors import ChildContext

__all__ = ["CloseFetchEvent", "CollectEvent", "FetchActor", "FetchMetricsEvent"]


@dataclass(frozen=True, slots=True)
class CollectEvent:
    """Ask (facade → fetch): hand out up to ``max_records`` buffered records (FetchResult).

    Told with a ``future`` instead (the asyncio consumer, which never blocks on an ask): the
    FetchResult (None when nothing is started yet) completes the future."""

    max_records: int
    trace_id: str | None = None
    future: concurrent.futures.Future[Any] | None = None
    #: The records as column slices (FetchResult.columns), not ConsumerRecords.
    columnar: bool = False


@dataclass(frozen=True, slots=True)
class CloseFetchEvent:
    """close(): stop fetching and close the fetch sessions."""

    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class FetchMetricsEvent:
    """Ask: the fetch manager's metrics (FetchMetrics)."""

    trace_id: str | None = None


class FetchActor(RoutingManagerActor):
    """Fetches ahead of the application into the consumer's fetch buffer; decodes at collect.

    Collect runs on the polling thread (:class:`~kafka_actors.actors.fetch_collector.
    FetchCollector` over ``ctx.fetch_buffer``), as Java's FetchCollector runs on the
    application thread over a thread-safe FetchBuffer: this actor holds the buffer's lock while
    it handles a message, so a collect never sees the manager half way; a collect that drained
    buffered data tells this actor to send the next fetches. No actor round trip per poll;
    ``CollectEvent`` (an ask, or a told event with a future) still works, for a caller that
    found the buffer closed or (the asyncio loop, which never waits) its lock taken.

    Positions set from committed offsets carry their leader epoch and so await validation
    (KIP-320), as do positions whose leader (epoch) changed; the offsets manager validates them
    with OffsetsForLeaderEpoch and tells this actor when they may be fetched.
    """

    component = "fetch"

    def __init__(self, ctx: ConsumerContext, *, context: ChildContext) -> None:
        super().__init__(ctx, context=context)
        self.buffer = ctx.fetch_buffer

    def on_start(self) -> None:
        with self.buffer.lock:
            super().on_start()

    def _release(self) -> None:
        manager: FetchManager | None = self.manager
        if manager is not None:
            manager.release_buffer()

    def on_stop(self) -> None:
        self._release()
        super().on_stop()

    def on_failure(self, *exc_info: Any) -> None:
        self._release()
        super().on_failure(*exc_info)

    def build(self) -> FetchManager:
        ctx = self.ctx
        manager = FetchManager(
            ctx.subscriptions,
            FetchConfig.from_consumer_config(ctx.config),
            client_id=ctx.config.client_id,
            group_id=ctx.config.group_id,
            buffer=self.buffer,
        )
        manager.set_default_versions(ctx.versions)
        return manager

    def rebuild(self) -> None:
        if self.ctx.cluster is not None:
            self.manager.on_cluster_updated(self.ctx.cluster)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, (CollectEvent, FetchMetricsEvent)) and self.manager is None:
            if isinstance(message, CollectEvent) and message.future is not None:
                complete(message.future, None)
            return None  # not started yet: nothing buffered (never stash an ask)
        with self.buffer.lock:
            return super().on_receive(message)

    def handle(self, message: Any, now_ms: int) -> Any:
        manager: FetchManager = self.manager
        if isinstance(message, CollectEvent):
            result = manager.collect(message.max_records, columnar=message.columnar)
            count_collected(self.ctx, result)
            if message.future is not None:
                complete(message.future, result)
            return result
        if isinstance(message, FetchMetricsEvent):
            return manager.metrics()
        if isinstance(message, CloseFetchEvent):
            manager.close()
            return None
        if isinstance(message, PositionsChangedEvent):
            return None
        return super().handle(message, now_ms)

    #: Assignment, pause, positions changed: the poll after every message fetches.
    receivers = {
        ClusterUpdated: feed_cluster,
        PauseFetching: None,
        AssignmentChanged: None,
        PositionsInitialized: None,
        PositionsChangedEvent: None,
    }

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        manager: FetchManager = self.manager
        stats = manager.on_response(request_id, response, now_ms)
        if stats is not None:
            self.ctx.metrics.fetch_response(
                stats.latency_ms, stats.throttle_ms, stats.bytes_by_topic
            )
        if manager.buffered_bytes > 0:
            self.buffer.wakeup()
            self.ctx.signal.notify()

    def on_request_failed(self, request_id: int, error: KafkaError, now_ms: int) -> None:
        super().on_request_failed(request_id, error, now_ms)
        self.buffer.wakeup()  # an error may be waiting at collect
        self.ctx.signal.notify()
