"""The metadata actor: the shell of :class:`~kafka_actors.protocol.metadata.MetadataManager`.

Owns: the cluster view it publishes (``ctx.cluster``), the futures of topic-metadata lookups
(``list_topics`` / ``partitions_for``), membership's questions it answers from the cluster view
(topic names for ids, partition counts for the classic leader), and the pattern subscription
it applies to the SubscriptionState when the manager reports a new match. What it feeds the
manager: the subscription, the assigned topics, refresh requests from the other actors.
Where its events go: :data:`kafka_actors.actors.routing.ROUTES`.

May touch: the NetworkActor (``Send``, through the shell), the shared context (``cluster``),
the SubscriptionState (pattern matches), the other actors through the routing table.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from kafka_actors.actors.context import ConsumerContext, complete, fail
from kafka_actors.actors.events import (
    AssignmentChangedEvent,
    PartitionCounts,
    RefreshMetadataEvent,
    SubscriptionChangedEvent,
    TopicMetadataEvent,
    TopicNames,
)
from kafka_actors.actors.routing import RoutingManagerActor
from kafka_actors.protocol.group import events as group_events
from kafka_actors.protocol.metadata import (
    ClusterUpdated,
    MetadataConfig,
    MetadataManager,
    PatternSubscriptionMatched,
    TopicMetadataCompleted,
)
from kafka_actors.protocol.offsets.list_offsets import MetadataUpdateNeeded
from kafka_actors.protocol.subscription import SubscriptionType
from kafka_actors.supervisors import ChildContext

__all__ = ["MetadataActor", "subscription_inputs"]


def subscription_inputs(ctx: ConsumerContext) -> tuple[frozenset[str], str | None]:
    """(topics, pattern) of the current auto subscription, for a new incarnation."""
    subs = ctx.subscriptions
    regex = subs.subscribed_regex
    if subs.subscription_type is SubscriptionType.AUTO_PATTERN and regex is not None:
        return frozenset(), regex
    if subs.subscription_type is SubscriptionType.AUTO_TOPICS:
        return subs.subscription, None
    return frozenset(), None


class MetadataActor(RoutingManagerActor):
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
        topics, pattern = subscription_inputs(self.ctx)
        if topics or pattern:
            self.manager.set_subscription(
                topics, pattern=pattern, broker_evaluated=self.ctx.group_protocol == "consumer"
            )
        self.manager.set_assigned_topics(
            {tp.topic for tp in self.ctx.subscriptions.assigned_partitions()}
        )

    def handle(self, message: Any, now_ms: int) -> Any:
        manager: MetadataManager = self.manager
        if isinstance(message, SubscriptionChangedEvent):
            manager.set_subscription(
                message.topics,
                pattern=message.pattern,
                broker_evaluated=self.ctx.group_protocol == "consumer",
            )
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
        else:
            return super().handle(message, now_ms)
        return None

    # -- events routed here -----------------------------------------------------------------

    def _need_topic_names(self, event: group_events.NeedTopicNames, now_ms: int) -> None:
        self.names_wanted |= event.topic_ids
        self._answer_names(self.manager.cluster)
        if self.names_wanted:
            # Topics outside the view (those of a regex only the broker matched): the next
            # request lists every topic, which names them (answered on ClusterUpdated).
            self.manager.resolve_topic_ids(self.names_wanted)

    def _need_partition_counts(self, event: group_events.NeedPartitionCounts, now_ms: int) -> None:
        key = self.manager.fetch_topic_metadata(
            event.topics, now_ms + self.ctx.config.default_api_timeout_ms, now_ms
        )
        self.count_requests[key] = event.request_id

    def _assignment_changed(self, event: group_events.AssignmentChanged, now_ms: int) -> None:
        self.manager.set_assigned_topics({tp.topic for tp in event.assignment})

    def _refresh(self, event: RefreshMetadataEvent, now_ms: int) -> None:
        self.manager.request_update(event.reason)

    def _update_needed(self, event: MetadataUpdateNeeded, now_ms: int) -> None:
        if event.topics:
            # Leaders of topics outside the subscription (an offsets lookup): a lookup keeps
            # them in the requests until answered.
            self.manager.fetch_topic_metadata(
                event.topics, now_ms + self.ctx.config.default_api_timeout_ms, now_ms
            )
        else:
            self.manager.request_update(event.reason or type(event).__name__)

    receivers = {
        group_events.NeedTopicNames: _need_topic_names,
        group_events.NeedPartitionCounts: _need_partition_counts,
        group_events.AssignmentChanged: _assignment_changed,
        RefreshMetadataEvent: _refresh,
        MetadataUpdateNeeded: _update_needed,
    }

    def _answer_names(self, cluster: Any) -> None:
        if not self.names_wanted:
            return
        names = {tid: cluster.topic_name(tid) for tid in self.names_wanted}
        known = {tid: name for tid, name in names.items() if name is not None}
        if known:
            self.names_wanted -= frozenset(known)
            self.route(TopicNames(known))

    # -- effects of the events the manager publishes (before their route) -----------------------

    def _cluster_updated(self, event: ClusterUpdated) -> None:
        self.ctx.cluster = event.cluster
        self._answer_names(event.cluster)

    def _pattern_matched(self, event: PatternSubscriptionMatched) -> bool:
        """Apply the match to the SubscriptionState; routed on only when it changed it."""
        try:
            return bool(self.ctx.subscriptions.subscribe_from_pattern(event.topics))
        except Exception as exc:  # unsubscribed meanwhile
            self.log.debug("pattern_match_ignored", error=repr(exc))
            return False

    def _metadata_completed(self, event: TopicMetadataCompleted) -> bool:
        """The answer to membership's NeedPartitionCounts goes to it as PartitionCounts (and
        not to a caller)."""
        count_request = self.count_requests.pop(event.request_key, None)
        if count_request is None:
            return True
        counts = {t: len(parts) for t, parts in (event.result or {}).items() if parts}
        self.route(PartitionCounts(count_request, counts))
        return False

    effects = {
        ClusterUpdated: _cluster_updated,
        PatternSubscriptionMatched: _pattern_matched,
        TopicMetadataCompleted: _metadata_completed,
    }

    def answer(self, event: TopicMetadataCompleted) -> None:
        future = self.lookups.pop(event.request_key, None)
        if future is None:
            return
        if event.error is not None:
            fail(future, event.error)
        else:
            complete(future, event.result)
