"""The request-manager actors: one thin :class:`~kafka_actors.actors.base.ManagerActor` per pure
manager, children of the NetworkActor's supervision.

Owns: for each manager, which inputs it takes (application events from the facade, events
routed from the other managers), where its published events go (routing by type, through the
shared context's ``SupervisedRef``-like :meth:`ConsumerContext.tell`, so a restarted target is
found again), and what a new incarnation replays to rebuild its state. The pure managers live
in :mod:`kafka_actors.protocol`; nothing here decides protocol behaviour.

Routing (the contract of ``docs/consumer-architecture.md``):

======================  =================================================================
event                   goes to
======================  =================================================================
ClusterUpdated          membership (topic names), commit, fetch, offsets; ctx.cluster
PatternSubscription...  SubscriptionState, membership (classic: topics to join with)
TopicMetadataCompleted  the waiting caller's future
MetadataErrorEvent      facade (raised at the next poll)
CoordinatorChanged      membership, commit; ctx.coordinator_id; NetworkActor (address)
CoordinatorErrorEvent   facade
CoordinatorUnknown      coordinator
NeedTopicNames          metadata (answered from the cluster view, refreshed if needed)
PauseFetching           SubscriptionState (pending revocation), fetch
AssignmentChanged       SubscriptionState, metadata (assigned topics), fetch, offsets
CommitBeforeRevocation  commit (its CommitDone comes back to membership)
MemberEpochChanged      commit; ctx (member id survives restarts)
Invoke*                 facade (the listener runs on the polling thread; reply comes back)
ErrorEvent              facade
LeaveCompleted          the future of the LeaveGroupEvent
======================  =================================================================

Choices: the coordinator gets its own connection id (Java's ``2**31 - 1 - node``), told to the
NetworkActor with ``UpdateNodes``, so heartbeats never queue behind a long-polling Fetch on
the leader's connection. With ``group.protocol=consumer`` and a broker whose ApiVersions lack
ConsumerGroupHeartbeat (Kafka 3.x without KIP-848) the membership actor does not fall back: it
publishes a fatal :class:`~kafka_actors.errors.UnsupportedVersionError` telling the user to set
``group.protocol=classic`` (raised by the next subscribe/poll), as Java's AsyncKafkaConsumer.

May touch: the NetworkActor (``Send``, ``UpdateNodes``), the shared context and
SubscriptionState, the other actors through the context.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
from dataclasses import dataclass
from typing import Any, cast

import pykka

from kafka_actors.actors.base import ManagerActor
from kafka_actors.actors.context import ConsumerContext, Routed, complete, fail
from kafka_actors.actors.events import (
    AssignmentChangedEvent,
    CallbackCompletedEvent,
    CommitEvent,
    CommitOnCloseEvent,
    FetchCommittedEvent,
    LeaveGroupEvent,
    ListOffsetsEvent,
    PollEvent,
    PositionsChangedEvent,
    RefreshMetadataEvent,
    ResetPositionsEvent,
    SubscriptionChangedEvent,
    TopicMetadataEvent,
)
from kafka_actors.actors.network import UpdateNodes
from kafka_actors.errors import KafkaError, UnsupportedVersionError
from kafka_actors.protocol import classic_membership as classic
from kafka_actors.protocol import membership as m848
from kafka_actors.protocol.apis import ApiKey
from kafka_actors.protocol.commit import (
    AutoCommitCompleted,
    CommitCompleted,
    CommitConfig,
    CommitForRevocationDone,
    CommitManager,
    CommittedOffsetsFetched,
    PositionsInitialized,
)
from kafka_actors.protocol.coordinator import (
    CoordinatorChanged,
    CoordinatorConfig,
    CoordinatorErrorEvent,
    CoordinatorManager,
)
from kafka_actors.protocol.fetch import (
    FetchConfig,
    FetchManager,
    FetchResult,
    MetadataRefreshNeeded,
)
from kafka_actors.protocol.messages import PollResult, TopicPartition
from kafka_actors.protocol.metadata import (
    ClusterUpdated,
    MetadataConfig,
    MetadataErrorEvent,
    MetadataManager,
    PatternSubscriptionMatched,
    TopicMetadataCompleted,
)
from kafka_actors.protocol.offsets import (
    ListOffsetsCompleted,
    LookupKind,
    MetadataUpdateNeeded,
    OffsetsConfig,
    OffsetsManager,
    PositionsValidated,
    ResetPositionsError,
)
from kafka_actors.protocol.subscription import SubscriptionType
from kafka_actors.supervisors import ChildContext

__all__ = [
    "CloseFetchEvent",
    "CollectEvent",
    "CommitActor",
    "CoordinatorActor",
    "FetchActor",
    "FetchMetricsEvent",
    "MembershipActor",
    "MetadataActor",
    "OffsetsActor",
]


def _subscription_inputs(ctx: ConsumerContext) -> tuple[frozenset[str], str | None]:
    subs = ctx.subscriptions
    pattern = subs.subscribed_pattern
    if subs.subscription_type is SubscriptionType.AUTO_PATTERN and pattern is not None:
        return frozenset(), pattern.pattern
    if subs.subscription_type is SubscriptionType.AUTO_TOPICS:
        return subs.subscription, None
    return frozenset(), None


# -- metadata -------------------------------------------------------------------------------------


class MetadataActor(ManagerActor):
    component = "metadata"

    def __init__(self, ctx: ConsumerContext, *, context: ChildContext) -> None:
        super().__init__(ctx, context=context)
        self.lookups: dict[int, concurrent.futures.Future[Any]] = {}
        self.count_requests: dict[int, int] = {}
        self.names_wanted: frozenset[str] = frozenset()

    def build(self) -> MetadataManager:
        assert self.ctx.versions is not None
        return MetadataManager(
            MetadataConfig.from_consumer_config(self.ctx.config),
            self.ctx.versions,
            random=self.ctx.random,
            client_id=self.ctx.config.client_id,
        )

    def rebuild(self) -> None:
        topics, pattern = _subscription_inputs(self.ctx)
        if topics or pattern:
            self.manager.set_subscription(topics, pattern=pattern)
        self.manager.set_assigned_topics(
            {tp.topic for tp in self.ctx.subscriptions.assigned_partitions()}
        )

    def handle(self, message: Any, now_ms: int) -> Any:
        manager: MetadataManager = self.manager
        if isinstance(message, SubscriptionChangedEvent):
            manager.set_subscription(message.topics, pattern=message.pattern)
        elif isinstance(message, AssignmentChangedEvent):
            manager.set_assigned_topics(
                {tp.topic for tp in self.ctx.subscriptions.assigned_partitions()}
            )
        elif isinstance(message, RefreshMetadataEvent):
            manager.request_update(message.reason)
        elif isinstance(message, TopicMetadataEvent):
            self.hold(message.future)
            key = manager.fetch_topic_metadata(message.topics, message.deadline_ms, now_ms)
            self.lookups[key] = message.future
        elif isinstance(message, Routed):
            event = message.event
            if isinstance(event, m848.NeedTopicNames):
                self.names_wanted |= event.topic_ids
                self._answer_names(manager.cluster)
                if self.names_wanted:
                    manager.request_update("topic ids to resolve")
            elif isinstance(event, classic.NeedPartitionCounts):
                key = manager.fetch_topic_metadata(
                    event.topics, now_ms + self.ctx.config.default_api_timeout_ms, now_ms
                )
                self.count_requests[key] = event.request_id
            elif isinstance(event, m848.AssignmentChanged):
                manager.set_assigned_topics({tp.topic for tp in event.assignment})
            elif isinstance(event, RefreshMetadataEvent):
                manager.request_update(event.reason)
            elif isinstance(event, MetadataUpdateNeeded) and event.topics:
                # Leaders of topics outside the subscription (an offsets lookup): a lookup
                # keeps them in the requests until answered.
                manager.fetch_topic_metadata(
                    event.topics, now_ms + self.ctx.config.default_api_timeout_ms, now_ms
                )
            else:
                reason = getattr(event, "reason", None) or type(event).__name__
                manager.request_update(str(reason))
        else:
            return super().handle(message, now_ms)
        return None

    def _answer_names(self, cluster: Any) -> None:
        if not self.names_wanted:
            return
        names = {tid: cluster.topic_name(tid) for tid in self.names_wanted}
        known = {tid: name for tid, name in names.items() if name is not None}
        if known:
            self.names_wanted -= frozenset(known)
            self.emit("membership", _TopicNames(known))

    def route(self, event: Any) -> None:
        if isinstance(event, ClusterUpdated):
            self.ctx.cluster = event.cluster
            self._answer_names(event.cluster)
            for target in ("membership", "commit", "fetch", "offsets"):
                self.emit(target, event)
            self.ctx.signal.notify()
        elif isinstance(event, PatternSubscriptionMatched):
            subs = self.ctx.subscriptions
            try:
                changed = subs.subscribe_from_pattern(event.topics)
            except Exception as exc:  # unsubscribed meanwhile
                self.log.debug("pattern_match_ignored", error=repr(exc))
                return
            if changed:
                self.emit("membership", event)
        elif isinstance(event, TopicMetadataCompleted):
            count_request = self.count_requests.pop(event.request_key, None)
            if count_request is not None:
                counts = {t: len(parts) for t, parts in (event.result or {}).items() if parts}
                self.emit("membership", _PartitionCounts(count_request, counts))
                return
            future = self.lookups.pop(event.request_key, None)
            if future is None:
                return
            if event.error is not None:
                fail(future, event.error)
            else:
                complete(future, event.result)
        elif isinstance(event, MetadataErrorEvent):
            self.emit("facade", event)
        else:
            super().route(event)


@dataclass(frozen=True, slots=True)
class _PartitionCounts:
    """metadata → classic membership: the answer to NeedPartitionCounts."""

    request_id: int
    counts: dict[str, int]


def _partition_counts(cluster: Any) -> dict[str, int]:
    return {name: len(info.partitions) for name, info in cluster.topics.items()}


class _TopicNames:
    """metadata → membership: topic id → name for the ids membership asked for."""

    __slots__ = ("mapping",)

    def __init__(self, mapping: dict[str, str]) -> None:
        self.mapping = mapping


# -- coordinator ----------------------------------------------------------------------------------


class CoordinatorActor(ManagerActor):
    component = "coordinator"

    def build(self) -> CoordinatorManager:
        assert self.ctx.versions is not None
        return CoordinatorManager(
            CoordinatorConfig.from_consumer_config(self.ctx.config),
            self.ctx.versions,
            random=self.ctx.random,
            client_id=self.ctx.config.client_id,
        )

    def rebuild(self) -> None:
        if self.ctx.coordinator_id is not None:
            # The new incarnation rediscovers the coordinator; tell the others it is unknown
            # until then only if it turns out to have moved.
            pass

    def handle(self, message: Any, now_ms: int) -> Any:
        if isinstance(message, Routed):
            reason = getattr(message.event, "reason", None) or type(message.event).__name__
            self.manager.mark_coordinator_unknown(str(reason), now_ms)
            return None
        return super().handle(message, now_ms)

    def route(self, event: Any) -> None:
        if isinstance(event, CoordinatorChanged):
            if event.node_id is not None and event.host is not None and event.port is not None:
                connection = event.connection_id
                assert connection is not None
                try:
                    self.network.tell(UpdateNodes(((connection, event.host, event.port),)))
                except Exception:
                    pass
                self.ctx.coordinator_id = connection
            else:
                self.ctx.coordinator_id = None
            self.emit("membership", event)
            self.emit("commit", event)
        elif isinstance(event, CoordinatorErrorEvent):
            self.emit("facade", event)
        else:
            super().route(event)


# -- membership -----------------------------------------------------------------------------------


class _NoMembership:
    """Stands in for a membership manager when the consumer cannot join (no group.id, or the
    broker lacks the group protocol asked for)."""

    def __init__(self, error: UnsupportedVersionError | None) -> None:
        self.error = error
        self.events: list[Any] = []

    def poll(self, now_ms: int) -> PollResult:
        events = tuple(self.events)
        self.events.clear()
        return PollResult(events=events)

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        pass

    def on_failure(self, request_id: int, error: BaseException, now_ms: int) -> None:
        pass


_REBALANCING_STATES = frozenset(
    {"JOINING", "RECONCILING", "ACKNOWLEDGING", "PREPARING_REBALANCE", "COMPLETING_REBALANCE"}
)


class MembershipActor(ManagerActor):
    """KIP-848 (``group.protocol=consumer``) or classic membership, chosen by the config."""

    component = "membership"

    def __init__(self, ctx: ConsumerContext, *, context: ChildContext) -> None:
        super().__init__(ctx, context=context)
        self.leaves: list[concurrent.futures.Future[Any]] = []
        #: When the rebalance in progress began (ms), for rebalance-latency.
        self._rebalance_started_ms: int | None = None

    def poll_manager(self, now_ms: int) -> PollResult:
        result = super().poll_manager(now_ms)
        self._observe_rebalance(now_ms)
        return result

    def _observe_rebalance(self, now_ms: int) -> None:
        """rebalance-latency: from the first rebalancing state (joining, reconciling,
        acknowledging; classic: preparing / completing the rebalance) to STABLE. Seen after
        every message the actor handles (each step of a rebalance is a response or a reply)."""
        state = getattr(self.manager, "state", None)
        name = getattr(state, "value", None)
        if name in _REBALANCING_STATES:
            if self._rebalance_started_ms is None:
                self._rebalance_started_ms = now_ms
        elif name == "STABLE":
            started, self._rebalance_started_ms = self._rebalance_started_ms, None
            if started is not None:
                self.ctx.metrics.rebalance_completed(now_ms - started)
        else:
            self._rebalance_started_ms = None  # left, fenced, fatal: no rebalance completed

    def build(self) -> Any:
        ctx = self.ctx
        versions = ctx.versions
        assert versions is not None
        if ctx.group_protocol == "classic":
            return self._build_classic()
        if not versions.supports(ApiKey.CONSUMER_GROUP_HEARTBEAT):
            error = UnsupportedVersionError(m848.CONSUMER_PROTOCOL_NOT_SUPPORTED_MSG)
            self.log.error("consumer_group_protocol_unsupported", hint="group.protocol=classic")
            return _NoMembership(error)
        version = versions.version_for(ApiKey.CONSUMER_GROUP_HEARTBEAT)
        member_id = ctx.member_id

        def member_id_factory() -> str:
            return member_id if member_id is not None else m848._default_member_id()

        manager = m848.ConsumerMembershipManager(
            m848.MembershipConfig.from_consumer_config(
                ctx.config, heartbeat_api_version=min(version, 1)
            ),
            random=ctx.random,
            member_id_factory=member_id_factory,
            client_id=ctx.config.client_id,
        )
        ctx.member_id = manager.member_id
        return manager

    def _build_classic(self) -> Any:
        ctx = self.ctx
        versions = ctx.versions
        assert versions is not None
        config = classic.ClassicMembershipConfig.from_consumer_config(
            ctx.config,
            join_group_version=versions.version_for(ApiKey.JOIN_GROUP),
            sync_group_version=versions.version_for(ApiKey.SYNC_GROUP),
            heartbeat_version=versions.version_for(ApiKey.HEARTBEAT),
            leave_group_version=versions.version_for(ApiKey.LEAVE_GROUP),
        )
        manager = classic.ClassicMembershipManager(
            config, random=ctx.random, client_id=ctx.config.client_id
        )
        if ctx.member_id:
            # A restarted member rejoins with the member id the broker knows, so the rebalance
            # does not wait for the old incarnation's session to expire.
            manager._set_member_id(ctx.member_id)
        return manager

    def rebuild(self) -> None:
        manager = self.manager
        if isinstance(manager, _NoMembership):
            return
        now = self.ctx.now_ms()
        if self.ctx.coordinator_id is not None:
            manager.on_coordinator_discovered(now)
        cluster = self.ctx.cluster
        if cluster is not None and hasattr(manager, "on_topic_names"):
            manager.on_topic_names(dict(cluster._names_by_id))
        topics, pattern = _subscription_inputs(self.ctx)
        if topics or pattern:
            self._subscribe(topics, pattern)
            if self.generation > 1:
                manager.on_poll(now)  # a restarted member rejoins without waiting for poll()

    def _subscribe(self, topics: frozenset[str], pattern: str | None) -> None:
        manager = self.manager
        if isinstance(manager, _NoMembership):
            if manager.error is not None:
                manager.events.append(m848.ErrorEvent(manager.error, True, True))
            return
        if pattern is not None and self.ctx.group_protocol == "classic":
            # Classic members subscribe to the topics the pattern matches now (client-side
            # matching); PatternSubscriptionMatched updates them.
            manager.subscribe(self.ctx.subscriptions.subscription)
        elif pattern is not None:
            manager.subscribe(regex=_java_regex(pattern))
        elif topics:
            manager.subscribe(topics)

    def handle(self, message: Any, now_ms: int) -> Any:
        manager = self.manager
        if isinstance(message, SubscriptionChangedEvent):
            if message.topics or message.pattern:
                self._subscribe(message.topics, message.pattern)
        elif isinstance(manager, _NoMembership):
            if isinstance(message, LeaveGroupEvent):
                complete(message.future, None)
            elif (
                isinstance(message, PollEvent) and not message.waiting and manager.error is not None
            ):
                if self.ctx.subscriptions.has_auto_assigned_partitions():
                    manager.events.append(m848.ErrorEvent(manager.error, True, True))
        elif isinstance(message, PollEvent):
            manager.on_poll(now_ms)
        elif isinstance(message, LeaveGroupEvent):
            self.hold(message.future)
            self.leaves.append(message.future)
            manager.leave_group(
                now_ms, deadline_ms=message.deadline_ms, run_callbacks=message.run_callbacks
            )
        elif isinstance(message, CallbackCompletedEvent):
            manager.on_callback_completed(message.callback_id, message.error)
        elif isinstance(message, Routed):
            self._routed(message.event, now_ms)
        else:
            return super().handle(message, now_ms)
        return None

    def _routed(self, event: Any, now_ms: int) -> None:
        manager = self.manager
        if isinstance(event, CoordinatorChanged):
            if event.known:
                manager.on_coordinator_discovered(now_ms)
            else:
                manager.on_coordinator_unknown(now_ms)
        elif isinstance(event, _TopicNames):
            if hasattr(manager, "on_topic_names"):
                manager.on_topic_names(event.mapping)
        elif isinstance(event, ClusterUpdated):
            if isinstance(manager, classic.ClassicMembershipManager):
                manager.on_partition_counts(None, _partition_counts(event.cluster))
        elif isinstance(event, _PartitionCounts):
            if isinstance(manager, classic.ClassicMembershipManager):
                manager.on_partition_counts(event.request_id, event.counts)
        elif isinstance(event, PatternSubscriptionMatched):
            if self.ctx.group_protocol == "classic" and event.topics:
                manager.subscribe(event.topics)
        elif isinstance(event, CommitDone):
            manager.on_commit_done(event.commit_id, event.error)

    def route(self, event: Any) -> None:
        ctx = self.ctx
        subs = ctx.subscriptions
        if isinstance(event, m848.PauseFetching):
            subs.mark_pending_revocation(event.partitions)
            self.emit("fetch", event)
        elif isinstance(event, m848.AssignmentChanged):
            self._apply_assignment(event.assignment)
            self.emit("metadata", event)
            self.emit("fetch", event)
            self.emit("offsets", event)
            ctx.signal.notify()
        elif isinstance(event, m848.CommitBeforeRevocation):
            self.emit("commit", event)
        elif isinstance(event, m848.MemberEpochChanged):
            ctx.member_id = event.member_id
            ctx.member_epoch = event.member_epoch
            self.emit("commit", event)
        elif isinstance(event, (m848.InvokeRevoked, m848.InvokeAssigned, m848.InvokeLost)):
            self.emit("facade", event)
        elif isinstance(event, (m848.NeedTopicNames, classic.NeedPartitionCounts)):
            self.emit("metadata", event)
        elif isinstance(event, m848.CoordinatorUnknown):
            self.emit("coordinator", event)
        elif isinstance(event, m848.ErrorEvent):
            self.emit("facade", event)
        elif isinstance(event, m848.LeaveCompleted):
            leaves, self.leaves = self.leaves, []
            for future in leaves:
                complete(future, event)
        else:
            name = type(event).__name__
            if name in ("GroupMetadataChanged",):
                ctx.group_metadata = event
            else:
                super().route(event)

    def _apply_assignment(self, assignment: frozenset[TopicPartition]) -> None:
        subs = self.ctx.subscriptions
        if not subs.has_auto_assigned_partitions():
            if assignment:
                self.log.warning("group_assignment_ignored", reason="not subscribed any more")
            return
        added = assignment - subs.assigned_partitions()
        try:
            subs.assign_from_subscribed_awaiting_callback(assignment, added)
        except Exception as exc:  # the user changed the subscription meanwhile
            self.log.warning("group_assignment_not_applied", error=repr(exc))


def _java_regex(pattern: str) -> str:
    """The regex as the broker (RE2J) reads it: Python's syntax is the same for the common
    subset; the broker matches the whole topic name."""
    return pattern


# -- commit ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommitDone:
    """commit → membership: the commit before a revocation is over."""

    commit_id: int
    error: BaseException | None


class CommitActor(ManagerActor):
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
        elif isinstance(message, Routed):
            event = message.event
            if isinstance(event, CoordinatorChanged):
                manager.on_coordinator_changed(self.ctx.coordinator_id if event.known else None)
            elif isinstance(event, m848.MemberEpochChanged):
                manager.on_member_epoch_changed(event)
            elif isinstance(event, m848.CommitBeforeRevocation):
                manager.on_commit_before_revocation(event)
            elif isinstance(event, ClusterUpdated):
                manager.on_topic_ids(event.cluster.topic_ids())
        else:
            return super().handle(message, now_ms)
        return None

    def route(self, event: Any) -> None:
        safe = self.ctx.safe_commits
        if (
            safe is not None
            and isinstance(event, (CommitCompleted, AutoCommitCompleted, CommitForRevocationDone))
            and event.error is None
        ):
            safe.committed(self.manager.last_committed)
        if isinstance(event, CommitCompleted):
            future = self.waiting.pop(cast(int, event.request_key), None)
            if future is not None:
                if event.error is not None:
                    fail(future, event.error)
                else:
                    complete(future, dict(event.offsets))
        elif isinstance(event, CommittedOffsetsFetched):
            future = self.waiting.pop(cast(int, event.request_key), None)
            if future is not None:
                if event.error is not None:
                    fail(future, event.error)
                else:
                    complete(future, dict(event.offsets))
        elif isinstance(event, PositionsInitialized):
            future = self.waiting.pop(cast(int, event.request_key), None)
            if event.reset or event.seeked:
                # resets to do; committed offsets with a leader epoch to validate (KIP-320)
                self.emit("offsets", event)
            if event.seeked:
                self.emit("fetch", event)
            if future is not None:
                if event.error is not None:
                    fail(future, event.error)
                else:
                    complete(future, event)
            self.ctx.signal.notify()
        elif isinstance(event, CommitForRevocationDone):
            self.emit("membership", CommitDone(event.commit_id, event.error))
        elif isinstance(event, AutoCommitCompleted):
            if event.error is not None:
                self.log.info("auto_commit_failed", error=str(event.error))
        elif isinstance(event, m848.CoordinatorUnknown):
            self.emit("coordinator", event)
        else:
            super().route(event)


# -- offsets --------------------------------------------------------------------------------------


class OffsetsActor(ManagerActor):
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
        elif isinstance(message, Routed):
            if isinstance(message.event, ClusterUpdated):
                manager.on_cluster_updated(message.event.cluster)
        elif isinstance(message, PositionsChangedEvent):
            pass  # resets are picked up from SubscriptionState by the next poll
        else:
            return super().handle(message, now_ms)
        return None

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        super().on_response(request_id, response, now_ms)
        self.emit("fetch", PositionsChangedEvent())  # a reset may have given positions
        self.ctx.signal.notify()

    def route(self, event: Any) -> None:
        if isinstance(event, ListOffsetsCompleted):
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
        elif isinstance(event, MetadataUpdateNeeded):
            self.emit("metadata", event)
        elif isinstance(event, ResetPositionsError):
            self.emit("facade", event)
        elif isinstance(event, PositionsValidated):
            # Fetchable now without a response in between: the fetch actor must poll (it
            # otherwise waits for an event that never comes, and the partitions stall).
            self.emit("fetch", PositionsChangedEvent())
            self.ctx.signal.notify()
        else:
            super().route(event)


# -- fetch ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CollectEvent:
    """Ask (facade → fetch): hand out up to ``max_records`` buffered records (FetchResult).

    Told with a ``future`` instead (the asyncio consumer, which never blocks on an ask): the
    FetchResult (None when nothing is started yet) completes the future."""

    max_records: int
    trace_id: str | None = None
    future: concurrent.futures.Future[Any] | None = None


@dataclass(frozen=True, slots=True)
class CloseFetchEvent:
    """close(): stop fetching and close the fetch sessions."""

    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class FetchMetricsEvent:
    """Ask: the fetch manager's metrics (FetchMetrics)."""

    trace_id: str | None = None


class FetchActor(ManagerActor):
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

    def collect_direct(self, max_records: int) -> FetchResult | None:
        """Collect on the caller's thread (see the class docstring); None before the manager
        exists or after this incarnation ended."""
        with self.lock:
            return self._collect_locked(max_records)

    def try_collect(self, max_records: int) -> tuple[bool, FetchResult | None]:
        """:meth:`collect_direct` if the lock is free right now: (True, result); else (False,
        None) and the caller asks with a ``CollectEvent`` instead. Never waits: the asyncio
        loop calls it, and no call may wait on the loop's thread (the lock was found taken
        before about one call in twelve, which then paid a round trip through this actor)."""
        if not self.lock.acquire(blocking=False):
            return False, None
        try:
            return True, self._collect_locked(max_records)
        finally:
            self.lock.release()

    def _collect_locked(self, max_records: int) -> FetchResult | None:
        manager: FetchManager | None = self.manager
        if manager is None or self._ended:
            return None
        result = self._collect(manager, max_records)
        if manager.buffered_bytes < self._buffered_before:
            try:
                self.actor_ref.tell(PositionsChangedEvent())  # poll: fetch what was drained
            except pykka.ActorDeadError:
                pass
        return result

    def _collect(self, manager: FetchManager, max_records: int) -> FetchResult:
        before = manager.bytes_consumed
        self._buffered_before = manager.buffered_bytes
        result = manager.collect(max_records)
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
            result = self._collect(manager, message.max_records)
            if message.future is not None:
                complete(message.future, result)
            return result
        if isinstance(message, FetchMetricsEvent):
            return manager.metrics()
        if isinstance(message, CloseFetchEvent):
            manager.close()
            return None
        if isinstance(message, Routed):
            event = message.event
            if isinstance(event, ClusterUpdated):
                manager.on_cluster_updated(event.cluster)
            return None  # assignment / pause / positions changed: the poll below fetches
        if isinstance(message, PositionsChangedEvent):
            return None
        return super().handle(message, now_ms)

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

    def route(self, event: Any) -> None:
        if isinstance(event, MetadataRefreshNeeded):
            self.emit("metadata", RefreshMetadataEvent(event.reason))
        else:
            super().route(event)
