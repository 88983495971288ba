"""The offsets actor: the shell of
:class:`~kafka_actors.protocol.offsets.list_offsets.OffsetsManager` (ListOffsets lookups, position
resets, and the validation of positions against the leader epoch with OffsetsForLeaderEpoch,
KIP-320).

Owns: the futures of ``beginning_offsets`` / ``end_offsets`` / ``offsets_for_times`` (by lookup
key) and telling the fetch actor when positions may have changed (after each response, and
when positions were validated without a request). Resets are read from the SubscriptionState
by the manager's next poll. Where its events go: :data:`kafka_actors.actors.routing.ROUTES`.

May touch: the NetworkActor (``Send``, through the shell), the shared context (reads the
cluster view), the SubscriptionState (through the manager), the other actors through the
routing table.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from kafka_actors.actors.context import ConsumerContext, complete, fail
from kafka_actors.actors.events import ListOffsetsEvent, PositionsChangedEvent
from kafka_actors.actors.routing import RoutingManagerActor, feed_cluster
from kafka_actors.protocol.group.consumer.membership import AssignmentChanged
from kafka_actors.protocol.metadata import ClusterUpdated
from kafka_actors.protocol.offsets.commit import PositionsInitialized
from kafka_actors.protocol.offsets.list_offsets import (
    ListOffsetsCompleted,
    LookupKind,
    OffsetsConfig,
    OffsetsManager,
)
from kafka_actors.supervisors import ChildContext

__all__ = ["OffsetsActor"]


class OffsetsActor(RoutingManagerActor):
    component = "offsets"

    def __init__(self, ctx: ConsumerContext, *, context: ChildContext) -> None:
        super().__init__(ctx, context=context)
        self.lookups: dict[int, tuple[str, concurrent.futures.Future[Any]]] = {}

    def build(self) -> OffsetsManager:
        ctx = self.ctx
        assert ctx.versions is not None
        return OffsetsManager(
            OffsetsConfig.from_consumer_config(ctx.config),
            ctx.versions,
            ctx.subscriptions,
            random=ctx.random,
            wall_clock_ms=ctx.clock.wall_ms,
            client_id=ctx.config.client_id,
        )

    def rebuild(self) -> None:
        if self.ctx.cluster is not None:
            self.manager.on_cluster_updated(self.ctx.cluster)

    def handle(self, message: Any, now_ms: int) -> Any:
        manager: OffsetsManager = self.manager
        if isinstance(message, ListOffsetsEvent):
            self.hold(message.future)
            try:
                if message.kind == LookupKind.BEGINNING:
                    key = manager.beginning_offsets(message.timestamps, message.deadline_ms, now_ms)
                elif message.kind == LookupKind.END:
                    key = manager.end_offsets(message.timestamps, message.deadline_ms, now_ms)
                else:
                    key = manager.offsets_for_times(
                        message.timestamps, message.deadline_ms, now_ms
                    )
            except ValueError as exc:
                fail(message.future, exc)
                return None
            self.lookups[key] = (message.kind, message.future)
        elif isinstance(message, PositionsChangedEvent):
            pass  # resets are picked up from SubscriptionState by the next poll
        else:
            return super().handle(message, now_ms)
        return None

    #: A new assignment, positions from committed offsets: the next poll picks them up from
    #: the SubscriptionState.
    receivers = {
        ClusterUpdated: feed_cluster,
        AssignmentChanged: None,
        PositionsInitialized: None,
    }

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        super().on_response(request_id, response, now_ms)
        self.route(PositionsChangedEvent())  # a reset may have given positions
        self.ctx.signal.notify()

    def answer(self, event: ListOffsetsCompleted) -> None:
        entry = self.lookups.pop(event.request_key, None)
        if entry is None:
            return
        kind, future = entry
        if event.error is not None:
            fail(future, event.error)
        elif kind == LookupKind.TIMES:
            complete(future, dict(event.result or {}))
        else:
            complete(future, event.offsets)
