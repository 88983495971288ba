"""The membership actor: the shell of the group member, KIP-848
(:class:`~kafka_actors.protocol.group.consumer.membership.ConsumerMembershipManager`,
``group.protocol=consumer``) or classic
(:class:`~kafka_actors.protocol.group.classic.membership.ClassicMembershipManager`), chosen by the
config.

Owns: the member's identity that survives a restart (``ctx.member_id`` / ``member_epoch``;
a restarted member rejoins with the member id the broker knows), the assignment it applies to
the SubscriptionState (and the partitions pending revocation), the futures of leave requests,
and the rebalance-latency metric. With ``group.protocol=consumer`` and a broker whose
ApiVersions lack ConsumerGroupHeartbeat (Kafka 3.x without KIP-848) it does not fall back: it
publishes a fatal :class:`~kafka_actors.errors.UnsupportedVersionError` telling the user to set
``group.protocol=classic`` (raised by the next subscribe/poll), as Java's AsyncKafkaConsumer.
Where its events go: :data:`kafka_actors.actors.routing.ROUTES`.

May touch: the NetworkActor (``Send``, through the shell), the shared context (member id and
epoch, metrics), the SubscriptionState (assignment, pending revocation), the other actors
through the routing table.
"""

from __future__ import annotations

import concurrent.futures
import sys
from typing import Any

from kafka_actors.actors.context import ConsumerContext, complete
from kafka_actors.actors.events import (
    CallbackCompletedEvent,
    CommitDone,
    EnforceRebalanceEvent,
    LeaveGroupEvent,
    PartitionCounts,
    PollEvent,
    SubscriptionChangedEvent,
    TopicNames,
)
from kafka_actors.actors.managers.metadata import subscription_inputs
from kafka_actors.actors.routing import RoutingManagerActor
from kafka_actors.errors import UnsupportedVersionError
from kafka_actors.protocol.group import events as group_events
from kafka_actors.protocol.group.consumer import membership as m848
from kafka_actors.protocol.group.consumer.config import MembershipConfig
from kafka_actors.protocol.group.coordinator import CoordinatorChanged
from kafka_actors.protocol.messages import PollResult, TopicPartition
from kafka_actors.protocol.metadata import ClusterUpdated, PatternSubscriptionMatched
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.supervisors import ChildContext

__all__ = ["MembershipActor"]


class _NoMembership:
    """Stands in for a membership manager when the consumer cannot join (no group.id, or the
    broker lacks the group protocol asked for)."""

    def __init__(self, error: UnsupportedVersionError | None) -> None:
        self.error = error
        self.events: list[Any] = []
        self._reported = False

    def report(self, *, subscription_changed: bool = False) -> None:
        """Publish the error once per subscription: a subscription change and a poll told
        before the actor ran are both delivered when it starts, and must not queue the same
        error twice (the core refuses later calls itself, from the negotiated versions)."""
        if subscription_changed:
            self._reported = False
        if self.error is not None and not self._reported:
            self._reported = True
            self.events.append(group_events.ErrorEvent(self.error, True, True))

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


def _partition_counts(cluster: Any) -> dict[str, int]:
    return {name: len(info.partitions) for name, info in cluster.topics.items()}


class MembershipActor(RoutingManagerActor):
    """KIP-848 (``group.protocol=consumer``) or classic membership, chosen by the config."""

    component = "membership"

    def __init__(self, ctx: ConsumerContext, *, context: ChildContext) -> None:
        super().__init__(ctx, context=context)
        self.leaves: list[concurrent.futures.Future[Any]] = []
        #: When the rebalance in progress began (ms), for rebalance-latency.
        self._rebalance_started_ms: int | None = None
        #: A leave was answered before the manager existed (see handle_unbuilt).
        self._left_before_build = False

    def poll_manager(self, now_ms: int) -> PollResult:
        result = super().poll_manager(now_ms)
        self._observe_rebalance(now_ms)
        self._publish_member()
        return result

    def _publish_member(self) -> None:
        """The member's state, id and epoch (generation) for ``health()``."""
        manager = self.manager
        if _is_classic(manager):
            epoch = manager.generation_id
        elif isinstance(manager, m848.ConsumerMembershipManager):
            epoch = manager.member_epoch
        else:
            return
        self.ctx.publish_member(manager.state.value, manager.member_id, epoch)

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
            return member_id if member_id is not None else m848.default_member_id()

        manager = m848.ConsumerMembershipManager(
            MembershipConfig.from_consumer_config(
                ctx.config, heartbeat_api_version=min(version, 1)
            ),
            random=ctx.random,
            member_id_factory=member_id_factory,
            client_id=ctx.config.client_id,
        )
        ctx.member_id = manager.member_id
        return manager

    def _build_classic(self) -> Any:
        # The classic protocol is imported by the consumers that use it (group.protocol=classic).
        from kafka_actors.protocol.group.classic import membership as classic
        from kafka_actors.protocol.group.classic.config import ClassicMembershipConfig

        ctx = self.ctx
        versions = ctx.versions
        assert versions is not None
        config = ClassicMembershipConfig.from_consumer_config(
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
            manager.on_topic_names(cluster.topic_names())
        topics, pattern = subscription_inputs(self.ctx)
        if (topics or pattern) and not self._left_before_build:
            self._subscribe(topics, pattern)
            if self.generation > 1:
                manager.on_poll(now)  # a restarted member rejoins without waiting for poll()

    def _subscribe(self, topics: frozenset[str], pattern: str | None) -> None:
        manager = self.manager
        if isinstance(manager, _NoMembership):
            manager.report(subscription_changed=True)
            return
        if pattern is not None and self.ctx.group_protocol == "classic":
            # Classic members subscribe to the topics the pattern matches now (client-side
            # matching); PatternSubscriptionMatched updates them.
            manager.subscribe(self.ctx.subscriptions.subscription)
        elif pattern is not None:
            manager.subscribe(regex=pattern)  # the broker (RE2J) matches the whole name
        elif topics:
            manager.subscribe(topics)

    def handle_unbuilt(self, message: Any, now_ms: int) -> bool:
        """A leave before the manager exists: this member sent no heartbeat (JoinGroup) yet,
        so it is in no group and there is nothing to leave (as Java: a leave needs a known
        coordinator, and is skipped when none is known)."""
        if isinstance(message, LeaveGroupEvent):
            self.log.info("leave_skipped", reason="not in the group: no broker reachable yet")
            # Built later (a broker answers before the actors stop), the manager must not
            # join with the subscription this leave ended.
            self.unstash(SubscriptionChangedEvent)
            self._left_before_build = True
            complete(message.future, group_events.LeaveCompleted())
            return True
        return False

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
                    manager.report()
        elif isinstance(message, PollEvent):
            manager.on_poll(now_ms)
        elif isinstance(message, LeaveGroupEvent):
            self.hold(message.future)
            self.leaves.append(message.future)
            manager.leave_group(
                now_ms,
                deadline_ms=message.deadline_ms,
                run_callbacks=message.run_callbacks,
                operation=message.membership,
            )
        elif isinstance(message, EnforceRebalanceEvent):
            if _is_classic(manager):
                manager.enforce_rebalance(message.reason)
            # The consumer protocol has no client-triggered rebalance (the front end warns).
        elif isinstance(message, CallbackCompletedEvent):
            manager.on_callback_completed(message.callback_id, message.error)
        else:
            return super().handle(message, now_ms)
        return None

    # -- events routed here (not with _NoMembership: its handle() takes them) -----------------

    def _coordinator_changed(self, event: CoordinatorChanged, now_ms: int) -> None:
        if event.known:
            self.manager.on_coordinator_discovered(now_ms)
        else:
            self.manager.on_coordinator_unknown(now_ms)

    def _topic_names(self, event: TopicNames, now_ms: int) -> None:
        if hasattr(self.manager, "on_topic_names"):
            self.manager.on_topic_names(event.mapping)

    def _cluster_updated(self, event: ClusterUpdated, now_ms: int) -> None:
        manager = self.manager
        if _is_classic(manager):
            manager.on_partition_counts(None, _partition_counts(event.cluster))

    def _partition_counts(self, event: PartitionCounts, now_ms: int) -> None:
        manager = self.manager
        if _is_classic(manager):
            manager.on_partition_counts(event.request_id, event.counts)

    def _pattern_matched(self, event: PatternSubscriptionMatched, now_ms: int) -> None:
        if self.ctx.group_protocol == "classic" and event.topics:
            self.manager.subscribe(event.topics)

    def _commit_done(self, event: CommitDone, now_ms: int) -> None:
        self.manager.on_commit_done(event.commit_id, event.error)

    receivers = {
        CoordinatorChanged: _coordinator_changed,
        TopicNames: _topic_names,
        ClusterUpdated: _cluster_updated,
        PartitionCounts: _partition_counts,
        PatternSubscriptionMatched: _pattern_matched,
        CommitDone: _commit_done,
    }

    # -- effects of the events the manager publishes (before their route) -----------------------

    def _pause_fetching(self, event: group_events.PauseFetching) -> None:
        self.ctx.subscriptions.mark_pending_revocation(event.partitions)

    def _assignment_changed(self, event: group_events.AssignmentChanged) -> None:
        self._apply_assignment(event.assignment)

    def _member_epoch_changed(self, event: group_events.MemberEpochChanged) -> None:
        self.ctx.member_id = event.member_id
        self.ctx.member_epoch = event.member_epoch

    effects = {
        group_events.PauseFetching: _pause_fetching,
        group_events.AssignmentChanged: _assignment_changed,
        group_events.MemberEpochChanged: _member_epoch_changed,
    }

    def answer(self, event: group_events.LeaveCompleted) -> None:
        leaves, self.leaves = self.leaves, []
        for future in leaves:
            complete(future, event)

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


def _is_classic(manager: Any) -> bool:
    """Whether ``manager`` is the classic protocol's membership manager (without importing the
    classic protocol: while no consumer of this process uses it, it is not loaded)."""
    classic = sys.modules.get("kafka_actors.protocol.group.classic.membership")
    return classic is not None and isinstance(manager, classic.ClassicMembershipManager)
