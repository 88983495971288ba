"""Cluster metadata: the immutable :class:`Cluster` snapshot and the pure :class:`MetadataManager`.

Owns: the consumer's view of the cluster (nodes, controller, cluster id, topics with their ids,
partitions, leaders and leader epochs), which topics that view must cover, when to send a
Metadata request (at start, on demand, every ``metadata.max.age.ms``, after errors, with
exponential backoff and jitter), the leader-epoch rule (an older leader epoch for a partition
never replaces a newer one), regex subscription matching, and the waiters of ad-hoc lookups
(``list_topics`` / ``partitions_for`` / an offsets lookup needing a topic). It follows the Java
client's ``Metadata`` / ``ConsumerMetadata`` / ``TopicMetadataRequestManager`` (Kafka 4.x).

May touch: nothing outside itself. Pure: the time is a parameter (``now_ms``, monotonic
milliseconds) and randomness (backoff jitter) is injected. It builds Metadata requests with
:func:`kafka_actors.protocol.wire.requests.metadata_request` and reads kio responses; errors are
:mod:`kafka_actors.errors` classes.

Driving it (the request-manager contract of :mod:`kafka_actors.protocol.messages`):

* inputs: :meth:`~MetadataManager.set_subscription` (topic names and/or a regex, from
  SubscriptionState), :meth:`~MetadataManager.set_assigned_topics` (topics of assigned
  partitions), :meth:`~MetadataManager.request_update` (another manager saw NOT_LEADER,
  UNKNOWN_TOPIC, FENCED_LEADER_EPOCH ...), :meth:`~MetadataManager.fetch_topic_metadata`
  (an ad-hoc lookup with a deadline), and :meth:`~MetadataManager.on_response` /
  :meth:`~MetadataManager.on_failure` for requests it returned;
* outputs: :meth:`~MetadataManager.poll` returns the Metadata request to send (to
  ``ANY_NODE``; never two in flight) and the events published since the last poll:
  :class:`ClusterUpdated` after every successful response, :class:`PatternSubscriptionMatched`
  when a regex subscription's matching topics change, :class:`TopicMetadataCompleted` for each
  ad-hoc lookup (result or typed error), :class:`MetadataErrorEvent` for errors concerning the
  subscription (raised to the user at the next poll, as Java's ``maybeThrowAnyException``).

Choices, in one place:

* **Topics requested**: the union of the subscribed topics, the topics of assigned partitions
  and the topics of pending lookups; all topics when a regex subscription is active or a
  ``list_topics`` lookup is pending. A response replaces the cluster view (topics that were not
  asked for are dropped), except that partitions whose leader epoch went backwards keep their
  previous information (Java's ``updateLatestMetadata``; such a response also asks for
  another update, with backoff). Leader epochs are trusted from Metadata v9 on (Java:
  ``hasReliableLeaderEpochs``); a new topic id for a name (the topic was deleted and
  re-created) resets the partition's last seen epoch. Other managers report newer epochs they
  saw with :meth:`~MetadataManager.update_last_seen_epoch_if_newer`; topic ids are resolved
  to names with :meth:`~MetadataManager.resolve_topic_ids` (:class:`TopicNamesResolved`).
* **Timing** (Java's ``Metadata.timeToNextUpdate``): the next request goes out when an update
  is needed (requested, wanted topics changed, or ``metadata.max.age.ms`` passed since the last
  success), but never sooner than the backoff after the previous attempt:
  ``ExponentialBackoff(retry.backoff.ms, 2, retry.backoff.max.ms, jitter 0.2)`` by the number
  of failed attempts (0 after a clean success). A failed request, or a response with retriable
  errors for topics still wanted, counts as a failed attempt and asks for another update.
* **Per-topic errors**: LEADER_NOT_AVAILABLE and other retriable (invalid-metadata) errors are
  retried. UNKNOWN_TOPIC_OR_PARTITION is retried too; a lookup waiting for that topic fails
  with ``UnknownTopicOrPartitionError`` after :data:`UNKNOWN_TOPIC_ATTEMPTS` consecutive
  answers saying so. TOPIC_AUTHORIZATION_FAILED and INVALID_TOPIC_EXCEPTION fail a waiting
  lookup at once (typed) and, for subscribed topics, publish a :class:`MetadataErrorEvent`.
* **allow.auto.create.topics** is sent with named requests (Metadata v4+; before that the
  broker decides); requests for all topics never ask for creation.
* **exclude.internal.topics** applies to regex matching (as Java's ``ConsumerMetadata``); an
  all-topics lookup (``list_topics``) returns internal topics too, for the caller to filter.
* **Regex subscriptions** under the consumer group protocol (KIP-848) are evaluated by the
  group's coordinator with RE2J: the regex goes to the broker as given, a pattern in RE2
  syntax Python cannot read (``\\Q...\\E``) is not matched here (``broker_evaluated``), and
  the names of the topics the broker assigns are resolved by an all-topics request. Under the
  classic protocol they are matched here, with Python's :func:`re.fullmatch` (Java's
  ``Matcher.matches()`` is a full match as well). Caveats against Java's ``java.util.regex``:
  ``\\p{...}`` classes other than what Python knows, ``\\Q...\\E`` quoting, ``(?<name>...)``
  named groups (Python: ``(?P<name>...)``) and the Java-only flags are not understood; an
  invalid pattern is refused when set (InvalidRegularExpressionError). Possessive quantifiers
  and atomic groups work (Python 3.11+).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from kafka_actors.errors import (
    NO_ERROR,
    FatalConsumerError,
    InvalidRegularExpressionError,
    KafkaError,
    KafkaTimeoutError,
    UnknownTopicOrPartitionError,
    error_class_for_code,
    error_for_code,
)
from kafka_actors.log import get_logger
from kafka_actors.protocol.condition_log import ConditionLog
from kafka_actors.protocol.messages import ANY_NODE, PollResult, TopicPartition, UnsentRequest
from kafka_actors.protocol.request_state import Outbox, RequestState, retry_backoff
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.protocol.wire.requests import metadata_request

if TYPE_CHECKING:
    from kafka_actors.config import ConsumerConfig
    from kafka_actors.protocol.wire.versions import NegotiatedVersions

__all__ = [
    "UNKNOWN_TOPIC_ATTEMPTS",
    "Cluster",
    "ClusterUpdated",
    "MetadataConfig",
    "MetadataErrorEvent",
    "MetadataManager",
    "Node",
    "PartitionInfo",
    "PatternSubscriptionMatched",
    "TopicInfo",
    "TopicMetadataCompleted",
    "TopicNamesResolved",
    "compile_subscription_pattern",
]

#: Consecutive answers saying UNKNOWN_TOPIC_OR_PARTITION before a lookup for that topic fails.
UNKNOWN_TOPIC_ATTEMPTS: Final = 3
#: Metadata versions whose leader epochs are reliable (Java: ``hasReliableLeaderEpochs``).
_RELIABLE_LEADER_EPOCH_VERSION: Final = 9

_ZERO_UUID: Final = uuid.UUID(int=0)


# -- The cluster snapshot ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Node:
    """A broker as Metadata names it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition: its leader (None when it has none), leader epoch (None when the version
    does not carry it), replicas, in-sync replicas and offline replicas."""

    partition: int
    leader: int | None
    leader_epoch: int | None = None
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One topic: its id (canonical UUID string, None before Metadata v10), its partitions by
    index, and whether it is internal (``__consumer_offsets`` ...)."""

    name: str
    topic_id: str | None
    partitions: Mapping[int, PartitionInfo]
    internal: bool = False


@dataclass(frozen=True, slots=True, eq=False)
class Cluster:
    """An immutable snapshot of the cluster as the last Metadata response described it."""

    nodes: Mapping[int, Node] = field(default_factory=lambda: MappingProxyType({}))
    topics: Mapping[str, TopicInfo] = field(default_factory=lambda: MappingProxyType({}))
    controller_id: int | None = None
    cluster_id: str | None = None
    _names_by_id: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({}), repr=False
    )

    @classmethod
    def build(
        cls,
        *,
        nodes: Iterable[Node] = (),
        topics: Iterable[TopicInfo] = (),
        controller_id: int | None = None,
        cluster_id: str | None = None,
    ) -> Cluster:
        topic_map = {t.name: t for t in topics}
        return cls(
            nodes=MappingProxyType({n.node_id: n for n in nodes}),
            topics=MappingProxyType(topic_map),
            controller_id=controller_id,
            cluster_id=cluster_id,
            _names_by_id=MappingProxyType(
                {t.topic_id: t.name for t in topic_map.values() if t.topic_id is not None}
            ),
        )

    def node(self, node_id: int) -> Node | None:
        return self.nodes.get(node_id)

    def topic_id(self, name: str) -> str | None:
        info = self.topics.get(name)
        return None if info is None else info.topic_id

    def topic_name(self, topic_id: str | uuid.UUID) -> str | None:
        return self._names_by_id.get(str(topic_id))

    def topic_names(self) -> dict[str, str]:
        """Topic id → name for every topic whose id is known (for responses by id)."""
        return dict(self._names_by_id)

    def topic_ids(self) -> dict[str, str]:
        """Topic name → id for every topic whose id is known (for requests by id)."""
        return {name: info.topic_id for name, info in self.topics.items() if info.topic_id}

    def partitions_for(self, topic: str) -> tuple[PartitionInfo, ...] | None:
        """The topic's partitions in index order, or None when the topic is not known."""
        info = self.topics.get(topic)
        if info is None:
            return None
        return tuple(info.partitions[p] for p in sorted(info.partitions))

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        info = self.topics.get(tp.topic)
        return None if info is None else info.partitions.get(tp.partition)

    def leader_for(self, tp: TopicPartition) -> tuple[int, int | None] | None:
        """(leader node id, leader epoch) of the partition, or None when the partition, its
        leader, or the leader's address is not known."""
        part = self.partition(tp)
        if part is None or part.leader is None or part.leader not in self.nodes:
            return None
        return part.leader, part.leader_epoch


EMPTY_CLUSTER: Final = Cluster()


# -- Events ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterUpdated:
    """A Metadata response was applied; ``cluster`` is the new snapshot."""

    cluster: Cluster


@dataclass(frozen=True, slots=True)
class PatternSubscriptionMatched:
    """The topics matching the regex subscription changed (for SubscriptionState)."""

    pattern: str
    topics: frozenset[str]


@dataclass(frozen=True, slots=True)
class TopicMetadataCompleted:
    """An ad-hoc lookup finished: ``result`` (topic → partitions) or ``error`` (typed).

    For a ``list_topics`` lookup (``topics`` None) the result holds every topic of the cluster.
    """

    request_key: int
    result: Mapping[str, tuple[PartitionInfo, ...]] | None = None
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class TopicNamesResolved:
    """Answer to :meth:`MetadataManager.resolve_topic_ids`: topic id → name for the ids the
    cluster knows (ids it does not know after an all-topics refresh are left out)."""

    names: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class MetadataErrorEvent:
    """An error concerning the subscription (not authorized, invalid topic), or a failure of
    the metadata requests that retrying cannot fix: raise it at the user's next poll."""

    error: KafkaError


# -- Configuration -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataConfig:
    """What the metadata manager needs from the consumer configuration (Java names)."""

    metadata_max_age_ms: int = 300_000  # metadata.max.age.ms
    retry_backoff_ms: int = 100  # retry.backoff.ms
    retry_backoff_max_ms: int = 1_000  # retry.backoff.max.ms
    allow_auto_create_topics: bool = True  # allow.auto.create.topics
    exclude_internal_topics: bool = True  # exclude.internal.topics
    request_timeout_ms: int | None = None  # request.timeout.ms (None: the network's default)

    @classmethod
    def from_consumer_config(cls, config: ConsumerConfig) -> MetadataConfig:
        return cls(
            metadata_max_age_ms=config.metadata_max_age_ms,
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
            allow_auto_create_topics=config.allow_auto_create_topics,
            exclude_internal_topics=config.exclude_internal_topics,
            request_timeout_ms=config.request_timeout_ms,
        )


def compile_subscription_pattern(pattern: str) -> re.Pattern[str]:
    """Compile a regex subscription; InvalidRegularExpressionError when Python cannot read it
    (see the module docstring for the Java-regex caveats)."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidRegularExpressionError(
            f"Invalid subscription regex {pattern!r} (Python re syntax): {exc}"
        ) from exc


# -- The manager -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Waiter:
    key: int
    topics: frozenset[str] | None  # None: all topics
    deadline_ms: int
    unknown_counts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _InFlight:
    request_id: int
    version: int
    topics: frozenset[str] | None  # None: all topics


class MetadataManager:
    """Keeps the cluster view fresh for what the consumer needs (see the module docstring)."""

    def __init__(
        self,
        config: MetadataConfig,
        versions: NegotiatedVersions,
        *,
        random: Callable[[], float],
        client_id: str | None = None,
    ) -> None:
        self._config = config
        self._versions = versions
        self._log = get_logger("metadata", client_id=client_id)
        self._outbox = Outbox()

        self._cluster = EMPTY_CLUSTER
        self._cluster_covers_all = False  # the last response listed every topic
        self._last_seen_epochs: dict[TopicPartition, int] = {}
        self._stale_epochs_seen = False

        # Wanted topics.
        self._subscribed: frozenset[str] = frozenset()
        self._pattern: re.Pattern[str] | None = None
        #: The subscribed regex as given (None: none), also when it is not matched here.
        self._pattern_text: str | None = None
        self._matched: frozenset[str] | None = None
        self._assigned_topics: frozenset[str] = frozenset()
        self._waiters: dict[int, _Waiter] = {}
        self._ids_to_resolve: set[str] = set()
        # For the log: wanted topics the cluster does not know (warned about once each, again
        # only after they appeared in between, as Java's consumer warns once per topic), and
        # non-retriable topic errors (key: topic, error code).
        self._missing_topics: ConditionLog[str] = ConditionLog(interval_ms=None)
        self._topic_errors: ConditionLog[tuple[str, int]] = ConditionLog()

        # Request state (Java Metadata: needFullUpdate, lastRefreshMs, lastSuccessfulRefreshMs).
        self._need_update = True
        self._update_reasons: list[str] = ["bootstrap"]
        self._last_success_ms: int | None = None
        self._request_state = RequestState(retry_backoff(config, random))
        self._in_flight: _InFlight | None = None

    # -- Observability ------------------------------------------------------------------------

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    @property
    def update_requested(self) -> bool:
        return self._need_update

    @property
    def request_in_flight(self) -> bool:
        return self._in_flight is not None

    @property
    def failed_attempts(self) -> int:
        return self._request_state.attempts

    @property
    def matched_topics(self) -> frozenset[str] | None:
        """Topics matching the regex subscription (None without one or before a response)."""
        return self._matched

    def last_seen_leader_epoch(self, tp: TopicPartition) -> int | None:
        return self._last_seen_epochs.get(tp)

    def wanted_topics(self) -> frozenset[str] | None:
        """The topics the next request asks for; None means all topics."""
        if self._pattern is not None:
            return None
        if self._ids_to_resolve:
            return None
        wanted = set(self._subscribed) | set(self._assigned_topics)
        for waiter in self._waiters.values():
            if waiter.topics is None:
                return None
            wanted |= waiter.topics
        return frozenset(wanted)

    # -- Inputs --------------------------------------------------------------------------------

    def set_versions(self, versions: NegotiatedVersions) -> None:
        self._versions = versions

    def set_subscription(
        self,
        topics: Iterable[str] = (),
        *,
        pattern: str | None = None,
        broker_evaluated: bool = False,
    ) -> None:
        """The subscribed topic names, or a regex (names are then ignored); () and None to
        unsubscribe. A change asks for an update. ``broker_evaluated``: the group's
        coordinator matches the regex (KIP-848, RE2J): one Python's ``re`` cannot read is not
        matched here (the assignment's topics are kept in the view as usual) instead of
        raising InvalidRegularExpressionError."""
        compiled = None
        if pattern is not None:
            try:
                compiled = compile_subscription_pattern(pattern)
            except InvalidRegularExpressionError:
                if not broker_evaluated:
                    raise
        names = frozenset(topics) if pattern is None else frozenset()
        if names == self._subscribed and pattern == self._pattern_text:
            return
        self._subscribed = names
        self._pattern = compiled
        self._pattern_text = pattern
        self._matched = None
        if compiled is not None and self._cluster_covers_all:
            # Match against what is known now; the update asked for below refines it.
            self._update_pattern_matches(self._cluster, covers_all=True)
        self.request_update("subscription changed")

    def set_assigned_topics(self, topics: Iterable[str]) -> None:
        """Topics of the assigned partitions (they must stay in the view)."""
        names = frozenset(topics)
        if names == self._assigned_topics:
            return
        added = names - self._assigned_topics - frozenset(self._cluster.topics)
        self._assigned_topics = names
        if added:
            self.request_update("assigned topics changed")

    def resolve_topic_ids(self, topic_ids: Iterable[str]) -> None:
        """Names for topic ids (the membership's ``NeedTopicNames``): answered with a
        :class:`TopicNamesResolved` at once for the ids known, else after an all-topics
        refresh (needs Metadata v10+ for topic ids)."""
        wanted = {str(t) for t in topic_ids}
        known = {t: n for t in wanted if (n := self._cluster.topic_name(t)) is not None}
        if len(known) == len(wanted):
            self._outbox.publish(TopicNamesResolved(MappingProxyType(known)))
            return
        self._ids_to_resolve |= wanted
        self.request_update("topic ids to resolve")

    def update_last_seen_epoch_if_newer(self, tp: TopicPartition, leader_epoch: int) -> bool:
        """A Fetch / ListOffsets / OffsetFetch answer named a newer leader epoch than the
        metadata holds: remember it (older metadata will be ignored) and ask for an update.
        True when it was newer (Java ``updateLastSeenEpochIfNewer``)."""
        current = self._last_seen_epochs.get(tp)
        if leader_epoch < 0 or (current is not None and leader_epoch <= current):
            return False
        self._last_seen_epochs[tp] = leader_epoch
        self.request_update(f"newer leader epoch seen for {tp}")
        return True

    def request_update(self, reason: str = "requested") -> None:
        """Ask for a refresh as soon as the backoff allows (Java ``requestUpdate``)."""
        self._need_update = True
        if reason not in self._update_reasons:
            self._update_reasons.append(reason)

    def fetch_topic_metadata(
        self, topics: Iterable[str] | None, deadline_ms: int, now_ms: int
    ) -> int:
        """Look up ``topics`` (None: all topics) before ``deadline_ms``.

        Returns the request key; a :class:`TopicMetadataCompleted` with that key follows (the
        partitions, or a typed error: KafkaTimeoutError at the deadline).
        """
        key = self._outbox.new_id()
        wanted = None if topics is None else frozenset(topics)
        self._waiters[key] = _Waiter(key, wanted, deadline_ms)
        if wanted is not None and not wanted:
            self._complete(key, result={})
            return key
        self.request_update("topic metadata lookup")
        self._expire_waiters(now_ms)
        return key

    # -- Request-manager contract -------------------------------------------------------------

    def poll(self, now_ms: int) -> PollResult:
        self._expire_waiters(now_ms)
        requests: tuple[UnsentRequest, ...] = ()
        if self._in_flight is None and self.time_to_next_update(now_ms) == 0:
            try:
                requests = (self._send(now_ms),)
            except KafkaError as exc:  # no common Metadata version with the broker
                self._on_failed_attempt(now_ms)
                self._outbox.publish(MetadataErrorEvent(exc))
                for key in list(self._waiters):
                    self._complete(key, error=exc)
        events = self._outbox.drain()
        return PollResult(
            requests=requests,
            time_until_next_poll_ms=self._time_until_next_poll(now_ms),
            events=events,
        )

    def time_to_next_update(self, now_ms: int) -> int:
        """Milliseconds until the next Metadata request may go out (0: now)."""
        if self._need_update or self._last_success_ms is None:
            expire = 0
        else:
            expire = max(0, self._last_success_ms + self._config.metadata_max_age_ms - now_ms)
        return max(expire, self._request_state.remaining_backoff_ms(now_ms))

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        in_flight = self._in_flight
        if in_flight is None or in_flight.request_id != request_id:
            return
        self._in_flight = None
        top_error = int(getattr(response, "error_code", 0) or 0)
        if top_error != NO_ERROR:
            self._on_failed_attempt(now_ms)
            self._need_update = True
            error = error_for_code(top_error)
            self._log.info("metadata_request_failed", error=repr(error))
            if not error.retriable:
                self._outbox.publish(MetadataErrorEvent(error))
            return
        self._apply(response, in_flight, now_ms)
        self._expire_waiters(now_ms)

    def on_failure(self, request_id: int, error: BaseException, now_ms: int) -> None:
        in_flight = self._in_flight
        if in_flight is None or in_flight.request_id != request_id:
            return
        self._in_flight = None
        self._on_failed_attempt(now_ms)
        self._need_update = True
        retriable = isinstance(error, KafkaError) and error.retriable
        self._log.info(
            "metadata_request_failed",
            error=repr(error),
            retriable=retriable,
            backoff_ms=self._request_state.backoff_ms,
        )
        if not retriable:
            typed = (
                error
                if isinstance(error, KafkaError)
                else FatalConsumerError(f"Metadata request failed: {error!r}")
            )
            self._outbox.publish(MetadataErrorEvent(typed))
            for key in list(self._waiters):
                self._complete(key, error=typed)

    # -- Sending -------------------------------------------------------------------------------

    def _send(self, now_ms: int) -> UnsentRequest:
        version = self._versions.version_for(ApiKey.METADATA)
        wanted = self.wanted_topics()
        names: list[str] | None = None if wanted is None else sorted(wanted)
        if version == 0 and names is not None and not names:
            names = None  # v0 cannot ask for "no topics": ask for all
            wanted = None
        request = metadata_request(
            version,
            topics=names,
            allow_auto_topic_creation=(names is not None and self._config.allow_auto_create_topics),
        )
        request_id = self._outbox.new_id()
        self._in_flight = _InFlight(request_id, version, wanted)
        self._request_state.on_send_attempt(now_ms)
        self._log.debug(
            "metadata_request",
            version=version,
            topics=names,
            reasons=list(self._update_reasons),
        )
        self._need_update = False
        self._update_reasons = []
        return UnsentRequest(
            node=ANY_NODE,
            request=request,
            request_id=request_id,
            timeout_ms=self._config.request_timeout_ms,
        )

    # -- Applying a response -------------------------------------------------------------------

    def _apply(self, response: Any, in_flight: _InFlight, now_ms: int) -> None:
        old = self._cluster
        reliable_epochs = in_flight.version >= _RELIABLE_LEADER_EPOCH_VERSION
        nodes = [
            Node(int(b.node_id), str(b.host), int(b.port), getattr(b, "rack", None))
            for b in response.brokers
        ]
        topics: list[TopicInfo] = []
        errors: dict[str, int] = {}
        self._stale_epochs_seen = False
        for t in response.topics:
            code = int(t.error_code)
            name = t.name
            if name is None:
                continue
            name = str(name)
            if code != NO_ERROR:
                errors[name] = code
                continue
            topics.append(self._topic_info(t, old, reliable_epochs))

        controller = getattr(response, "controller_id", None)
        controller_id = None if controller is None or int(controller) < 0 else int(controller)
        cluster = Cluster.build(
            nodes=nodes,
            topics=topics,
            controller_id=controller_id,
            cluster_id=getattr(response, "cluster_id", None),
        )
        self._cluster = cluster
        self._cluster_covers_all = in_flight.topics is None
        self._last_success_ms = now_ms

        wanted_now = self.wanted_topics()
        retry = self._handle_topic_errors(errors, cluster, now_ms) or self._stale_epochs_seen
        self._stale_epochs_seen = False
        if in_flight.topics is not None and (
            wanted_now is None or not wanted_now <= in_flight.topics
        ):
            retry = True  # the wanted set grew while the request was in flight
        if retry:
            self._on_failed_attempt(now_ms)
            self.request_update("retriable topic errors or new topics")
        else:
            self._request_state.on_successful_attempt(now_ms)

        self._outbox.publish(ClusterUpdated(cluster))
        if self._pattern is not None:
            self._update_pattern_matches(cluster, covers_all=in_flight.topics is None)
        self._complete_waiters(cluster, errors, covers_all=in_flight.topics is None)
        if self._ids_to_resolve and in_flight.topics is None:
            names = {t: n for t in self._ids_to_resolve if (n := cluster.topic_name(t)) is not None}
            self._ids_to_resolve.clear()
            self._outbox.publish(TopicNamesResolved(MappingProxyType(names)))

    def _topic_info(self, t: Any, old: Cluster, reliable_epochs: bool) -> TopicInfo:
        name = str(t.name)
        raw_id = getattr(t, "topic_id", None)
        topic_id = None if raw_id is None or raw_id == _ZERO_UUID else str(raw_id)
        old_topic = old.topics.get(name)
        topic_id_changed = (
            topic_id is not None
            and old_topic is not None
            and old_topic.topic_id is not None
            and old_topic.topic_id != topic_id
        )
        partitions: dict[int, PartitionInfo] = {}
        for p in t.partitions:
            index = int(p.partition_index)
            tp = TopicPartition(name, index)
            raw_epoch = getattr(p, "leader_epoch", None)
            epoch = None if raw_epoch is None or int(raw_epoch) < 0 else int(raw_epoch)
            leader = int(p.leader_id)
            info = PartitionInfo(
                partition=index,
                leader=None if leader < 0 else leader,
                leader_epoch=epoch,
                replicas=tuple(int(r) for r in p.replica_nodes),
                isr=tuple(int(r) for r in p.isr_nodes),
                offline=tuple(int(r) for r in getattr(p, "offline_replicas", ())),
            )
            if reliable_epochs and epoch is not None:
                current = self._last_seen_epochs.get(tp)
                if current is None or topic_id_changed or epoch >= current:
                    self._last_seen_epochs[tp] = epoch
                else:
                    # An older leader epoch: keep what we knew (Java updateLatestMetadata).
                    self._log.debug(
                        "stale_leader_epoch_ignored",
                        partition=str(tp),
                        epoch=epoch,
                        current=current,
                    )
                    self._stale_epochs_seen = True
                    kept = old_topic.partitions.get(index) if old_topic is not None else None
                    if kept is not None and kept.leader_epoch == current:
                        partitions[index] = kept
                    continue
            partitions[index] = info
        return TopicInfo(
            name=name,
            topic_id=topic_id,
            partitions=MappingProxyType(partitions),
            internal=bool(getattr(t, "is_internal", False)),
        )

    def _handle_topic_errors(
        self, errors: Mapping[str, int], cluster: Cluster, now_ms: int
    ) -> bool:
        """Log / publish per-topic errors of wanted topics; True when a retry is needed."""
        wanted = self.wanted_topics()
        retry = False
        self._log_topics_found(cluster, now_ms)
        for name, code in errors.items():
            if wanted is not None and name not in wanted:
                continue
            cls = error_class_for_code(code)
            retriable = cls is not None and cls.retriable
            named = name in self._subscribed or name in self._assigned_topics
            if retriable:
                retry = True
                if (
                    code == UnknownTopicOrPartitionError.code
                    and named
                    and self._missing_topics.occurred(name, now_ms) is not None
                ):
                    self._log.warning(
                        "topic_not_found",
                        topic=name,
                        subscribed=name in self._subscribed,
                        assigned=name in self._assigned_topics,
                        allow_auto_create_topics=self._config.allow_auto_create_topics,
                        error="UNKNOWN_TOPIC_OR_PARTITION",
                    )
                else:
                    log = self._log.debug if self._missing_topics.active(name) else self._log.info
                    log("topic_metadata_error_retriable", topic=name, error_code=code)
            elif named:
                if (report := self._topic_errors.occurred((name, code), now_ms)) is not None:
                    self._log.warning(
                        "topic_metadata_error", topic=name, error_code=code, **report.fields()
                    )
                self._outbox.publish(MetadataErrorEvent(error_for_code(code, topic=name)))
        # A wanted topic with a partition lacking a leader: ask again.
        if wanted is not None:
            for name in wanted:
                info = cluster.topics.get(name)
                if info is not None and any(p.leader is None for p in info.partitions.values()):
                    self._log.info("partition_without_leader", topic=name)
                    retry = True
        return retry

    def _log_topics_found(self, cluster: Cluster, now_ms: int) -> None:
        """Topics warned about (missing, or a topic error) that the cluster now knows, or that
        are no longer wanted: their conditions end."""
        named = self._subscribed | self._assigned_topics
        for name in self._missing_topics.keys():
            if name in cluster.topics:
                if (cleared := self._missing_topics.cleared(name, now_ms)) is not None:
                    self._log.info("topic_found", topic=name, **cleared.fields())
            elif name not in named:
                self._missing_topics.forget(name)
        for key in self._topic_errors.keys():
            if key[0] in cluster.topics:
                if (cleared := self._topic_errors.cleared(key, now_ms)) is not None:
                    self._log.info(
                        "topic_metadata_error_cleared",
                        topic=key[0],
                        error_code=key[1],
                        **cleared.fields(),
                    )
            elif key[0] not in named:
                self._topic_errors.forget(key)

    def _update_pattern_matches(self, cluster: Cluster, *, covers_all: bool) -> None:
        assert self._pattern is not None
        if not covers_all:
            return
        matched = frozenset(
            name
            for name, info in cluster.topics.items()
            if not (info.internal and self._config.exclude_internal_topics)
            and self._pattern.fullmatch(name) is not None
        )
        if matched != self._matched:
            self._matched = matched
            self._outbox.publish(PatternSubscriptionMatched(self._pattern.pattern, matched))

    # -- Waiters -------------------------------------------------------------------------------

    def _complete_waiters(
        self, cluster: Cluster, errors: Mapping[str, int], *, covers_all: bool
    ) -> None:
        for key, waiter in list(self._waiters.items()):
            if waiter.topics is None:
                if covers_all:
                    result = {
                        name: cluster.partitions_for(name) or () for name in sorted(cluster.topics)
                    }
                    self._complete(key, result=result)
                continue
            result = {}
            pending = False
            failed: KafkaError | None = None
            for name in sorted(waiter.topics):
                code = errors.get(name)
                if code is None:
                    waiter.unknown_counts.pop(name, None)
                    parts = cluster.partitions_for(name)
                    if parts is None:
                        pending = True  # not in this response: the next one asks for it
                    else:
                        result[name] = parts
                    continue
                if code == UnknownTopicOrPartitionError.code:
                    count = waiter.unknown_counts.get(name, 0) + 1
                    waiter.unknown_counts[name] = count
                    if count >= UNKNOWN_TOPIC_ATTEMPTS:
                        failed = UnknownTopicOrPartitionError(
                            f"Topic not found after {count} metadata responses", topic=name
                        )
                        break
                    pending = True
                    continue
                cls = error_class_for_code(code)
                if cls is not None and cls.retriable:
                    pending = True
                    continue
                failed = error_for_code(code, topic=name)
                break
            if failed is not None:
                self._complete(key, error=failed)
            elif not pending:
                self._complete(key, result=result)
        if any(w.unknown_counts for w in self._waiters.values()):
            self.request_update("topic lookup: unknown topic")

    def _expire_waiters(self, now_ms: int) -> None:
        for key, waiter in list(self._waiters.items()):
            if now_ms >= waiter.deadline_ms:
                what = "all topics" if waiter.topics is None else ", ".join(sorted(waiter.topics))
                self._complete(
                    key,
                    error=KafkaTimeoutError(
                        f"Timeout expired while fetching topic metadata for {what}"
                    ),
                )

    def _complete(
        self,
        key: int,
        *,
        result: Mapping[str, tuple[PartitionInfo, ...]] | None = None,
        error: KafkaError | None = None,
    ) -> None:
        if self._waiters.pop(key, None) is None:
            return
        frozen = None if result is None else MappingProxyType(dict(result))
        self._outbox.publish(TopicMetadataCompleted(key, result=frozen, error=error))

    # -- Timing --------------------------------------------------------------------------------

    def _on_failed_attempt(self, now_ms: int) -> None:
        self._request_state.on_failed_attempt(now_ms)

    def _time_until_next_poll(self, now_ms: int) -> int | None:
        if self._in_flight is not None:
            candidates = []
        else:
            candidates = [self.time_to_next_update(now_ms)]
        candidates += [max(0, w.deadline_ms - now_ms) for w in self._waiters.values()]
        return min(candidates) if candidates else None
