"""The share fetch actor: the shell of
:class:`~kafka_actors.protocol.share.fetch.ShareFetchManager` (ShareFetch, ShareAcknowledge,
share sessions, the buffer of acquired records, acknowledgements).

Owns: the facade's requests to it (defined here): :class:`ShareCollectEvent` (hand out up to
``max.poll.records`` acquired records), :class:`ShareAcknowledgeEvent` (the application's
acknowledgements, sent with the next ShareFetch), :class:`ShareCommitEvent` (send them now with
ShareAcknowledge; its future gets the per-partition results), :class:`CloseShareEvent` (send
what is pending and close every share session) and :class:`ShareMetricsEvent`; the futures
of commits and of the close; the per-partition acknowledgement results handed to the share
consumer (``on_results``, for the acknowledgement-commit callback on the application's
thread); waking the polling thread when records arrived. The acknowledgement path is this
actor's, not one of its own: ShareFetch and ShareAcknowledge share the session epochs of each
broker, so one manager orders them (as Java's ShareConsumeRequestManager).

A restarted incarnation starts from the current assignment and cluster; the records it had
buffered and the acknowledgements not sent yet are lost with the old one, and the broker
delivers those records again when their acquisition lock expires (nothing is lost).

May touch: the NetworkActor (``Send``, through the shell), the shared context (metrics,
the fetch buffer's generation, the signal), the share assignment, the other actors through
the table.
"""

from __future__ import annotations

import concurrent.futures
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka_actors.actors.context import ConsumerContext, complete, fail
from kafka_actors.actors.managers.share_membership import ShareAssignment
from kafka_actors.actors.routing import RoutingManagerActor, feed_cluster
from kafka_actors.errors import RetriableError
from kafka_actors.protocol.group.events import AssignmentChanged
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.metadata import ClusterUpdated
from kafka_actors.protocol.share.fetch import (
    AcknowledgementsCommitted,
    AckResult,
    ShareCloseCompleted,
    ShareCommitCompleted,
    ShareFetchConfig,
    ShareFetchManager,
)
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.supervisors import ChildContext

__all__ = [
    "CloseShareEvent",
    "ShareAcknowledgeEvent",
    "ShareCollectEvent",
    "ShareCommitEvent",
    "ShareFetchActor",
    "ShareMetricsEvent",
]


@dataclass(frozen=True, slots=True)
class ShareCollectEvent:
    """facade → share fetch: up to ``max_records`` records (a ShareCollectResult, or None
    before the manager exists) complete ``future``."""

    max_records: int
    future: concurrent.futures.Future[Any]
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class ShareAcknowledgeEvent:
    """facade → share fetch: acknowledgements, (first offset, last offset, type) ranges per
    partition."""

    acknowledgements: Mapping[TopicPartition, tuple[tuple[int, int, int], ...]]
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class ShareCommitEvent:
    """commit_sync / commit_async: send the pending acknowledgements now; ``future`` gets
    {partition: error or None}."""

    future: concurrent.futures.Future[Any]
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class CloseShareEvent:
    """close(): send what is pending, close every share session; ``future`` completes then."""

    future: concurrent.futures.Future[Any]
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class ShareMetricsEvent:
    """Ask: the manager's figures (a dict)."""

    trace_id: str | None = None


class ShareFetchActor(RoutingManagerActor):
    #: A share consumer runs it under the consumer's name for this role, so the routing
    #: table's rows reach it (see :data:`kafka_actors.actors.routing.ACTORS`).
    component = "fetch"

    def __init__(
        self,
        ctx: ConsumerContext,
        assignment: ShareAssignment,
        on_results: Callable[[tuple[AckResult, ...]], None],
        *,
        context: ChildContext,
    ) -> None:
        super().__init__(ctx, context=context)
        self.assignment = assignment
        self.on_results = on_results
        self._ids = itertools.count(1)
        self.commits: dict[int, concurrent.futures.Future[Any]] = {}
        self.closes: list[concurrent.futures.Future[Any]] = []

    def build(self) -> ShareFetchManager:
        ctx = self.ctx
        versions = ctx.versions
        assert versions is not None and ctx.member_id is not None

        def version(api: ApiKey) -> int:
            return versions.version_for(api) if versions.supports(api) else 1

        return ShareFetchManager(
            ShareFetchConfig.from_consumer_config(ctx.config),
            member_id=ctx.member_id,
            fetch_version=version(ApiKey.SHARE_FETCH),
            acknowledge_version=version(ApiKey.SHARE_ACKNOWLEDGE),
            client_id=ctx.config.client_id,
            random=ctx.random,
        )

    def rebuild(self) -> None:
        manager: ShareFetchManager = self.manager
        if self.ctx.cluster is not None:
            manager.on_cluster_updated(self.ctx.cluster)
        manager.on_assignment(self.assignment.partitions)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, ShareMetricsEvent) and self.manager is None:
            return None
        return super().on_receive(message)

    def on_crash(self, exception: BaseException | None) -> None:
        """This instance dies (its supervisor starts a new one): the commits and closes it
        took are answered now, as nothing else would answer them."""
        super().on_crash(exception)
        commits, self.commits = self.commits, {}
        for future in commits.values():
            fail(future, _restarted())
        closes, self.closes = self.closes, []
        for future in closes:
            complete(future, None)

    def on_undelivered(self, message: Any) -> None:
        """A request still in the inbox when this instance stopped (a crash) is answered, not
        lost: a collect gets no records (the poll goes on; what the crashed instance had
        acquired comes again once its acquisition lock expires), a close has nothing left to
        close, a commit fails retriably."""
        if isinstance(message, (ShareCollectEvent, CloseShareEvent)):
            complete(message.future, None)
        elif isinstance(message, ShareCommitEvent):
            fail(message.future, _restarted())

    def handle_unbuilt(self, message: Any, now_ms: int) -> bool:
        """Before the manager exists nothing was fetched: a collect gets None (no records),
        a close has no session to close and no acknowledgement to send."""
        if isinstance(message, (ShareCollectEvent, CloseShareEvent)):
            complete(message.future, None)
            return True
        return False

    def handle(self, message: Any, now_ms: int) -> Any:
        manager: ShareFetchManager = self.manager
        if isinstance(message, ShareCollectEvent):
            result = manager.collect(message.max_records)
            complete(message.future, result)
        elif isinstance(message, ShareAcknowledgeEvent):
            manager.acknowledge_ranges(message.acknowledgements)
        elif isinstance(message, ShareCommitEvent):
            commit_id = next(self._ids)
            self.commits[commit_id] = message.future
            manager.commit(commit_id)
        elif isinstance(message, CloseShareEvent):
            self.closes.append(message.future)
            manager.close()
        elif isinstance(message, ShareMetricsEvent):
            return self.figures()
        else:
            return super().handle(message, now_ms)
        return None

    def figures(self) -> dict[str, float]:
        m: ShareFetchManager = self.manager
        requests = max(1, m.fetch_requests)
        out: dict[str, float] = {
            "share-fetch-requests-total": float(m.fetch_requests),
            "share-records-fetched-total": float(m.records_fetched),
            "share-bytes-fetched-total": float(m.bytes_fetched),
            "share-fetch-latency-avg": m.fetch_latency_total_ms / requests,
            "share-fetch-latency-max": float(m.fetch_latency_max_ms),
            "share-acknowledgements-sent-total": float(m.acknowledgements_sent),
            "share-acknowledgements-failed-total": float(m.acknowledgements_failed),
            "share-buffered-bytes": float(m.buffered_bytes),
        }
        if m.acquisition_lock_timeout_ms is not None:
            out["share-acquisition-lock-timeout-ms"] = float(m.acquisition_lock_timeout_ms)
        return out

    # -- events routed here -----------------------------------------------------------------

    def _assignment_changed(self, event: AssignmentChanged, now_ms: int) -> None:
        self.manager.on_assignment(event.assignment)

    receivers = {
        ClusterUpdated: feed_cluster,
        AssignmentChanged: _assignment_changed,
    }

    # -- effects and answers ----------------------------------------------------------------

    def _acknowledged(self, event: AcknowledgementsCommitted) -> None:
        self.on_results(event.results)

    effects = {AcknowledgementsCommitted: _acknowledged}

    def answer(self, event: Any) -> None:
        if isinstance(event, ShareCommitCompleted):
            future = self.commits.pop(event.commit_id, None)
            if future is not None:
                complete(future, dict(event.results))
        elif isinstance(event, ShareCloseCompleted):
            closes, self.closes = self.closes, []
            for future in closes:
                complete(future, None)

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        manager: ShareFetchManager = self.manager
        stats = manager.on_response(request_id, response, now_ms)
        if stats is not None:
            self.ctx.metrics.fetch_response(
                stats.latency_ms, stats.throttle_ms, stats.bytes_by_topic
            )
        if manager.buffered_count:
            self.ctx.fetch_buffer.wakeup()
            self.ctx.signal.notify()


def _restarted() -> RetriableError:
    return RetriableError(
        "The share fetch actor restarted before the acknowledgements were sent; the "
        "records they were for are delivered again once their acquisition lock expires"
    )
