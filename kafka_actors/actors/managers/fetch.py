"""The fetch actor: the shell of :class:`~kafka_actors.protocol.fetch.FetchManager` (Fetch,
fetch sessions, the prefetch buffer), and the collect the polling thread runs on it.

Owns: the lock every use of the fetch manager holds (the actor's loop, and collects on the
polling thread through ``ctx.fetch_collector`` / ``ctx.fetch_try_collector``), the consumed
and fetch-response metrics, and waking the polling thread when data is buffered
(``ctx.fetch_generation``). The facade's asks to it (:class:`CollectEvent`,
:class:`FetchMetricsEvent`, :class:`CloseFetchEvent`) are defined here. Where its events go:
:data:`kafka_actors.actors.routing.ROUTES` (a metadata refresh it needs).

May touch: the NetworkActor (``Send``, through the shell), the shared context (collectors,
``fetch_generation``, metrics), the SubscriptionState (through the manager), the other actors
through the routing table.
"""

from __future__ import annotations

import concurrent.futures
import threading
from dataclasses import dataclass
from typing import Any

import pykka

from kafka_actors.actors.context import ConsumerContext, complete
from kafka_actors.actors.events import PositionsChangedEvent
from kafka_actors.actors.routing import RoutingManagerActor, feed_cluster
from kafka_actors.errors import KafkaError
from kafka_actors.protocol.commit import PositionsInitialized
from kafka_actors.protocol.fetch import FetchConfig, FetchManager, FetchResult
from kafka_actors.protocol.membership import AssignmentChanged, PauseFetching
from kafka_actors.protocol.metadata import ClusterUpdated
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
    """Fetches ahead of the application into the fetch manager's buffer; decodes at collect.

    Collect runs on the polling thread (:meth:`collect_direct`, published as
    ``ctx.fetch_collector``), as Java's FetchCollector runs on the application thread over a
    thread-safe FetchBuffer: every use of the manager, by this actor or by a collect, holds
    ``self.lock``, and a collect that drained buffered data tells this actor to send the next
    fetches. No actor round trip per poll; ``CollectEvent`` (an ask, or a told event with a
    future) still works. :meth:`try_collect` (``ctx.fetch_try_collector``) is the same collect
    for a caller that may wait for the lock only briefly (the asyncio consumer's loop).

    Positions set from committed offsets carry their leader epoch and so await validation
    (KIP-320), as do positions whose leader (epoch) changed; the offsets manager validates them
    with OffsetsForLeaderEpoch and tells this actor when they may be fetched.
    """

    component = "fetch"

    def __init__(self, ctx: ConsumerContext, *, context: ChildContext) -> None:
        super().__init__(ctx, context=context)
        self.lock = threading.Lock()
        self._ended = False
        self._buffered_before = 0

    def on_start(self) -> None:
        with self.lock:
            super().on_start()
        self.ctx.fetch_collector = self.collect_direct
        self.ctx.fetch_try_collector = self.try_collect

    def _unpublish(self) -> None:
        self._ended = True
        if self.ctx.fetch_collector == self.collect_direct:
            self.ctx.fetch_collector = None
        if self.ctx.fetch_try_collector == self.try_collect:
            self.ctx.fetch_try_collector = None

    def on_stop(self) -> None:
        self._unpublish()
        super().on_stop()

    def on_failure(self, *exc_info: Any) -> None:
        self._unpublish()
        super().on_failure(*exc_info)

    def collect_direct(self, max_records: int, *, columnar: bool = False) -> FetchResult | None:
        """Collect on the caller's thread (see the class docstring); None before the manager
        exists or after this incarnation ended. ``columnar``: see ``FetchBuffer.collect``."""
        with self.lock:
            return self._collect_locked(max_records, columnar)

    def try_collect(
        self, max_records: int, *, columnar: bool = False
    ) -> tuple[bool, FetchResult | None]:
        """:meth:`collect_direct` if the lock is free right now: (True, result); else (False,
        None) and the caller asks with a ``CollectEvent`` instead. Never waits: the asyncio
        loop calls it, and no call may wait on the loop's thread (the lock was found taken
        before about one call in twelve, which then paid a round trip through this actor)."""
        if not self.lock.acquire(blocking=False):
            return False, None
        try:
            return True, self._collect_locked(max_records, columnar)
        finally:
            self.lock.release()

    def _collect_locked(self, max_records: int, columnar: bool = False) -> FetchResult | None:
        manager: FetchManager | None = self.manager
        if manager is None or self._ended:
            return None
        result = self._collect(manager, max_records, columnar)
        if manager.buffered_bytes < self._buffered_before:
            try:
                self.actor_ref.tell(PositionsChangedEvent())  # poll: fetch what was drained
            except pykka.ActorDeadError:
                pass
        return result

    def _collect(
        self, manager: FetchManager, max_records: int, columnar: bool = False
    ) -> FetchResult:
        before = manager.bytes_consumed
        self._buffered_before = manager.buffered_bytes
        result = manager.collect(max_records, columnar=columnar)
        lag, lead = manager.last_collect_lag, manager.last_collect_lead
        subs = self.ctx.subscriptions
        self.ctx.metrics.update_assignment(subs.assignment_id, subs.assigned_partitions)
        count = result.record_count
        if count or lag or lead:
            # Raw record bytes (as Java's bytes-consumed), no per-record loop here: one
            # record of the sensors per collect, per topic and partition it touched.
            by_topic: dict[str, tuple[int, int]] = {}
            for tp, records in result.records.items():
                n, size = by_topic.get(tp.topic, (0, 0))
                by_topic[tp.topic] = (n + len(records), size)
            for tp, slices in result.columns.items():
                n, size = by_topic.get(tp.topic, (0, 0))
                by_topic[tp.topic] = (n + sum(len(s) for s in slices), size)
            for topic, size in manager.last_collect_bytes.items():
                n, _ = by_topic.get(topic, (0, 0))
                by_topic[topic] = (n, size)
            self.ctx.metrics.consumed(
                count,
                manager.bytes_consumed - before,
                by_topic=by_topic,
                lag={(tp.topic, tp.partition): v for tp, v in lag.items()},
                lead={(tp.topic, tp.partition): v for tp, v in lead.items()},
            )
        return result

    def build(self) -> FetchManager:
        ctx = self.ctx
        manager = FetchManager(
            ctx.subscriptions,
            FetchConfig.from_consumer_config(ctx.config),
            client_id=ctx.config.client_id,
            group_id=ctx.config.group_id,
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
        with self.lock:
            return super().on_receive(message)

    def handle(self, message: Any, now_ms: int) -> Any:
        manager: FetchManager = self.manager
        if isinstance(message, CollectEvent):
            result = self._collect(manager, message.max_records, message.columnar)
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
        super().on_response(request_id, response, now_ms)
        handled = manager.last_response
        if handled is not None:
            latency, throttle_ms, bytes_by_topic = handled
            self.ctx.metrics.fetch_response(latency, throttle_ms, bytes_by_topic)
        if manager.buffered_bytes > 0:
            self.ctx.fetch_generation += 1
            self.ctx.signal.notify()

    def on_request_failed(self, request_id: int, error: KafkaError, now_ms: int) -> None:
        super().on_request_failed(request_id, error, now_ms)
        self.ctx.fetch_generation += 1  # an error may be waiting at collect
        self.ctx.signal.notify()
