"""The commit actor: the shell of :class:`~kafka_actors.protocol.offsets.commit.CommitManager`
(OffsetCommit and OffsetFetch: commit_sync / commit_async / auto-commit, committed offsets,
positions from committed offsets).

Owns: the futures of the commit and offset-fetch calls (by request key), what rebalance-safe
commits (``ctx.safe_commits``) learn of each successful commit, and what a new incarnation
replays (group instance id, member id and epoch, coordinator, topic ids). Where its events go:
:data:`kafka_actors.actors.routing.ROUTES` (the commit before a revocation answers membership
with a :class:`~kafka_actors.actors.events.CommitDone`).

May touch: the NetworkActor (``Send``, through the shell), the shared context (reads the
member and coordinator; ``safe_commits``), the SubscriptionState (through the manager), the
other actors through the routing table.
"""

from __future__ import annotations

import concurrent.futures
import itertools
from typing import Any, cast

from kafka_actors.actors.context import ConsumerContext, complete, fail
from kafka_actors.actors.events import (
    CommitDone,
    CommitEvent,
    CommitOnCloseEvent,
    FetchCommittedEvent,
    PollEvent,
    ResetPositionsEvent,
)
from kafka_actors.actors.routing import RoutingManagerActor
from kafka_actors.protocol.group import events as group_events
from kafka_actors.protocol.group.coordinator import CoordinatorChanged
from kafka_actors.protocol.metadata import ClusterUpdated
from kafka_actors.protocol.offsets.commit import (
    AutoCommitCompleted,
    CommitCompleted,
    CommitForRevocationDone,
    CommitManager,
    PositionsInitialized,
)
from kafka_actors.protocol.offsets.config import CommitConfig
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.supervisors import ChildContext

__all__ = ["CommitActor", "CommitDone"]


class CommitActor(RoutingManagerActor):
    component = "commit"

    def __init__(self, ctx: ConsumerContext, *, context: ChildContext) -> None:
        super().__init__(ctx, context=context)
        self.waiting: dict[int, concurrent.futures.Future[Any]] = {}
        self._keys = itertools.count(1)

    def build(self) -> CommitManager:
        ctx = self.ctx
        versions = ctx.versions
        assert versions is not None
        manager = CommitManager(
            CommitConfig.from_consumer_config(
                ctx.config,
                offset_commit_version=versions.version_for(ApiKey.OFFSET_COMMIT),
                offset_fetch_version=versions.version_for(ApiKey.OFFSET_FETCH),
            ),
            ctx.subscriptions,
            random=ctx.random,
            client_id=ctx.config.client_id,
        )
        return manager

    def rebuild(self) -> None:
        ctx = self.ctx
        manager: CommitManager = self.manager
        manager.set_group_instance_id(ctx.config.group_instance_id)
        if ctx.member_id is not None:
            manager.on_member_changed(ctx.member_id, ctx.member_epoch, ctx.config.group_instance_id)
        manager.on_coordinator_changed(ctx.coordinator_id)
        if ctx.cluster is not None:
            manager.on_topic_ids(ctx.cluster.topic_ids())

    def _key(self, future: concurrent.futures.Future[Any]) -> int:
        key = next(self._keys)
        self.hold(future)
        self.waiting[key] = future
        return key

    def handle_unbuilt(self, message: Any, now_ms: int) -> bool:
        """The commit on close before the manager exists: with nothing consumed there is
        nothing to commit, and it completes at once (as the manager would, and as Java's
        commit of an empty map); consumed positions wait for the manager (until the close's
        deadline)."""
        if isinstance(message, CommitOnCloseEvent) and (
            not self.ctx.config.enable_auto_commit or not self.ctx.subscriptions.all_consumed()
        ):
            complete(message.future, {})
            return True
        return False

    def handle(self, message: Any, now_ms: int) -> Any:
        manager: CommitManager = self.manager
        if isinstance(message, CommitEvent):
            key = self._key(message.future)
            if message.sync:
                manager.commit_sync(
                    message.offsets, message.deadline_ms, key, trace_id=message.trace_id
                )
            else:
                manager.commit_async(message.offsets, key, trace_id=message.trace_id)
        elif isinstance(message, CommitOnCloseEvent):
            key = self._key(message.future)
            manager.close(message.deadline_ms)
            manager.commit_on_close(message.deadline_ms, key, trace_id=message.trace_id)
        elif isinstance(message, FetchCommittedEvent):
            key = self._key(message.future)
            manager.fetch_committed(
                message.partitions, message.deadline_ms, key, trace_id=message.trace_id
            )
        elif isinstance(message, ResetPositionsEvent):
            key = self._key(message.future)
            manager.initialize_positions(message.deadline_ms, key, trace_id=message.trace_id)
        elif isinstance(message, PollEvent):
            manager.maybe_auto_commit_on_poll(now_ms)
        else:
            return super().handle(message, now_ms)
        return None

    # -- events routed here -----------------------------------------------------------------

    def _coordinator_changed(self, event: CoordinatorChanged, now_ms: int) -> None:
        self.manager.on_coordinator_changed(self.ctx.coordinator_id if event.known else None)

    def _member_epoch_changed(self, event: group_events.MemberEpochChanged, now_ms: int) -> None:
        self.manager.on_member_epoch_changed(event)

    def _commit_before_revocation(
        self, event: group_events.CommitBeforeRevocation, now_ms: int
    ) -> None:
        self.manager.on_commit_before_revocation(event)

    def _cluster_updated(self, event: ClusterUpdated, now_ms: int) -> None:
        self.manager.on_topic_ids(event.cluster.topic_ids())

    receivers = {
        CoordinatorChanged: _coordinator_changed,
        group_events.MemberEpochChanged: _member_epoch_changed,
        group_events.CommitBeforeRevocation: _commit_before_revocation,
        ClusterUpdated: _cluster_updated,
    }

    # -- effects of the events the manager publishes (before their route) -----------------------

    def _note_committed(
        self, event: CommitCompleted | CommitForRevocationDone | AutoCommitCompleted
    ) -> None:
        """Rebalance-safe commits learn of every successful commit first."""
        safe = self.ctx.safe_commits
        if safe is not None and event.error is None:
            safe.committed(self.manager.last_committed)

    def _auto_commit_completed(self, event: AutoCommitCompleted) -> None:
        self._note_committed(event)
        if event.error is not None:
            self.log.info("auto_commit_failed", error=str(event.error))

    effects = {
        CommitCompleted: _note_committed,
        CommitForRevocationDone: _note_committed,
        AutoCommitCompleted: _auto_commit_completed,
    }

    def answer(self, event: Any) -> None:
        """CommitCompleted and CommittedOffsetsFetched complete with the offsets,
        PositionsInitialized with itself."""
        future = self.waiting.pop(cast(int, event.request_key), None)
        if future is None:
            return
        if event.error is not None:
            fail(future, event.error)
        elif isinstance(event, PositionsInitialized):
            complete(future, event)
        else:
            complete(future, dict(event.offsets))
