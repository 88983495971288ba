"""Fetching records: the pure :class:`FetchManager` and its per-node :class:`FetchSessionHandler`.

Owns: which partitions are fetched from which node (the leader, or the preferred read replica
of KIP-392 until it expires or fails), one Fetch request in flight per node, incremental fetch
sessions per node (KIP-227, as Java's ``FetchSessionHandler``), the prefetch buffer of raw
per-partition data (bounded in bytes), decoding of that data with
:func:`kafka_actors.protocol.records.decode.decode_records` at hand-out time (so decoding runs in
the fetch actor, never in the NetworkActor), :meth:`FetchManager.collect` (records handed out only
for partitions still owned, fetchable and at the position the data continues), the reaction to
per-partition Fetch errors, and fetch metrics. It follows the Java client's ``AbstractFetch`` /
``FetchCollector`` / ``FetchBuffer`` (Kafka 4.x) — facts only.
The parts live in their own modules, as Java's: the per-node session in
:mod:`kafka_actors.protocol.fetch.session`, the buffer and :meth:`~FetchManager.collect` in
:mod:`kafka_actors.protocol.fetch.buffer` (the thread-safe
:class:`~kafka_actors.protocol.fetch.buffer.FetchBuffer` a manager holds and fills, shared with
the polling thread that collects from it), the settings in
:mod:`kafka_actors.protocol.fetch.config`; this module keeps the requests,
the responses and the metrics, and re-exports the public names.

May touch: the shared :class:`~kafka_actors.protocol.subscription.SubscriptionState` (positions,
high watermark / last stable offset / log start offset, preferred read replicas, offset resets),
through its atomic methods only. Nothing else: no threads, sockets or clocks; the time is a
parameter (``now_ms``, monotonic milliseconds). The cluster view comes from the metadata layer
(anything satisfying :class:`ClusterView`, such as ``kafka_actors.protocol.metadata.Cluster``).

Driving it (the request-manager contract of :mod:`kafka_actors.protocol.messages`):

* inputs: :meth:`~FetchManager.on_cluster_updated`, :meth:`~FetchManager.set_node_versions` /
  :meth:`~FetchManager.set_default_versions` (negotiated ApiVersions), and the outcome of the
  requests it asked for (:meth:`~FetchManager.on_response` / :meth:`~FetchManager.on_failure`);
* outputs: :meth:`~FetchManager.poll` returns the Fetch requests to send now and the events
  published since the last poll (:class:`MetadataRefreshNeeded`); the actor calls ``poll``
  after every input, after every :meth:`~FetchManager.collect` (it frees buffer space), and
  when ``time_until_next_poll_ms`` has passed;
* :meth:`~FetchManager.collect` hands records to the application (through the facade);
* :meth:`~FetchManager.close` makes the next poll close every fetch session (epoch -1).

Choices, in one place:

* **Which partitions are fetched** (Java's rule): fetchable partitions (SubscriptionState) with
  a known leader, no buffered data, whose node has no Fetch in flight and is not backing off.
  Partitions that got a metadata error wait for the next cluster update.
* **Fetch ahead** (``FetchConfig.fetch_ahead``, on in the consumer; Java has no such step): a
  partition with exactly one buffered response, without error, is fetched once more from the
  offset its buffered data ends at (read from the batch headers: the offset after the last
  complete batch, what decoding will move the position to), so the next data is on its way
  while the application consumes. That data is kept only while it continues the buffered
  chain (position, then each buffered response's end, in order); a seek, reset, revocation or
  a decoding error breaks the chain and the rest is dropped as stale. At most two responses
  per partition are buffered.
* **Sessions**: a partition not in a request is removed from the session (forgotten), as Java:
  a partition with buffered data (two responses, with fetch ahead) therefore leaves the
  session and comes back when drained, so the broker never returns data for it twice. A
  session whose node no longer leads any fetchable partition is closed with a request at
  epoch -1. A topic id that changed under a session
  partition (topic re-created) starts a new session with a full fetch. Fetch versions below 7
  have no sessions (every request is a full sessionless fetch).
* **Topic ids** (v13+) come from the cluster view; when a partition's topic id is not known
  the request is capped at v12 (topic names) if the node supports it, else the partition
  waits for a metadata refresh.
* **Buffer bound**: no new Fetch is sent while the raw bytes buffered reach
  ``prefetch_buffer_bytes`` (default ``fetch.max.bytes``); a response may take the buffer
  over the bound by at most one response (``fetch.max.bytes``).
* **Truncation detection** (KIP-320) is done by the offsets manager with OffsetsForLeaderEpoch
  when a position awaits validation (a leader change, a committed offset with an epoch); Fetch
  requests carry ``last_fetched_epoch = -1``, so brokers never answer with a diverging epoch.
  The current leader epoch is sent (fencing of stale leaders works).
* **No progress**: with record format v2 the broker always returns at least one whole batch,
  even one larger than ``max.partition.fetch.bytes``, so "record too large" cannot happen; data
  that decodes to no complete batch (``bytes_consumed == 0``) is dropped and the partition is
  fetched again from the same offset.
* **Fairness**: the collected partition is moved to the end of the assignment order once its
  buffered data is drained, so the next requests list other partitions first (a response is
  filled in request order up to ``fetch.max.bytes``); ``collect`` drains buffered data in
  arrival order up to ``max.poll.records``.
* **Errors raised at collect** (to the user at poll, as Java): ``OffsetOutOfRangeError`` when
  ``auto.offset.reset`` is none, ``TopicAuthorizationFailedError``, ``CorruptRecordError``
  (records before the bad batch are returned first; the position stays at the bad batch so
  the user may seek past it), and any unexpected partition error code. An error is raised only
  while the partition is still fetchable at the offset it concerns.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from kafka_actors.errors import (
    NO_ERROR,
    FencedLeaderEpochError,
    FetchSessionIdNotFoundError,
    FetchSessionTopicIdError,
    InconsistentTopicIdError,
    InvalidFetchSessionEpochError,
    KafkaError,
    KafkaStorageError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    ReplicaNotAvailableError,
    TopicAuthorizationFailedError,
    UnknownLeaderEpochError,
    UnknownServerError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from kafka_actors.log import get_logger
from kafka_actors.protocol.condition_log import ConditionLog
from kafka_actors.protocol.fetch.buffer import CompletedFetch, FetchBuffer, FetchResult
from kafka_actors.protocol.fetch.config import FetchConfig
from kafka_actors.protocol.fetch.session import (
    _MIN_SESSION_VERSION,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchSessionHandler,
    SessionRequest,
)
from kafka_actors.protocol.messages import PollResult, TopicPartition, UnsentRequest
from kafka_actors.protocol.request_state import Outbox
from kafka_actors.protocol.subscription import (
    FetchPosition,
    LeaderAndEpoch,
    ResetKind,
    SubscriptionState,
)
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.protocol.wire.requests import FetchPartition, ForgottenTopic, fetch_request
from kafka_actors.protocol.wire.versions import NegotiatedVersions

if TYPE_CHECKING:
    import uuid

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "ClusterView",
    "FetchManager",
    "FetchMetrics",
    "FetchResponseStats",
    "FetchResult",
    "FetchSessionHandler",
    "MetadataRefreshNeeded",
    "SessionRequest",
]

_MIN_TOPIC_ID_VERSION: Final = 13
#: While a node whose Fetch failed unanswered leads a fetchable partition, metadata is refreshed
#: this often (Java's default retry.backoff.max.ms; Java's NetworkClient requests an update at
#: every failed connection attempt).
_UNREACHABLE_LEADER_REFRESH_MS: Final = 1_000

# Fetch error codes, by reaction.
_SESSION_ERRORS: Final = frozenset(
    {
        FetchSessionIdNotFoundError.code,
        InvalidFetchSessionEpochError.code,
        FetchSessionTopicIdError.code,
    }
)
#: Partition errors answered by a metadata refresh, then a retry (Java requestMetadataUpdate).
_REFRESH_METADATA_ERRORS: Final = frozenset(
    {
        UnknownTopicOrPartitionError.code,
        LeaderNotAvailableError.code,
        NotLeaderOrFollowerError.code,
        ReplicaNotAvailableError.code,
        KafkaStorageError.code,
        FencedLeaderEpochError.code,
        UnknownLeaderEpochError.code,
        OffsetNotAvailableError.code,
        UnknownTopicIdError.code,
        InconsistentTopicIdError.code,
    }
)


class ClusterView(Protocol):
    """What the fetch manager needs of the metadata layer's cluster snapshot
    (``kafka_actors.protocol.metadata.Cluster`` satisfies it)."""

    def leader_for(self, tp: TopicPartition) -> tuple[int, int | None] | None:
        """(leader node id, leader epoch) or None when the leader or its address is unknown."""
        ...

    def topic_id(self, name: str) -> str | None: ...

    def topic_name(self, topic_id: str | uuid.UUID) -> str | None: ...

    def node(self, node_id: int) -> object | None:
        """The node when its address is known, else None."""
        ...

    @property
    def nodes(self) -> Mapping[int, object]:
        """Every node whose address is known, by id."""
        ...


class _EmptyCluster:
    def leader_for(self, tp: TopicPartition) -> tuple[int, int | None] | None:
        return None

    def topic_id(self, name: str) -> str | None:
        return None

    def topic_name(self, topic_id: str | uuid.UUID) -> str | None:
        return None

    def node(self, node_id: int) -> object | None:
        return None

    @property
    def nodes(self) -> Mapping[int, object]:
        return {}


# -- configuration, events, results ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchResponseStats:
    """One Fetch response handled, for Java's per-response sensors: its latency, its
    ``throttle_time_ms`` and its record bytes by topic (:meth:`FetchManager.on_response`)."""

    latency_ms: int
    throttle_ms: int
    bytes_by_topic: dict[str, int]


@dataclass(frozen=True, slots=True)
class MetadataRefreshNeeded:
    """Fetching these partitions needs fresher metadata (leader moved, epoch fenced, topic
    unknown ...); they are fetched again after the next cluster update."""

    reason: str
    partitions: tuple[TopicPartition, ...] = ()
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class FetchMetrics:
    """Counters and timestamps (``now_ms`` values) so the facade can derive rates."""

    fetch_requests: int = 0
    fetch_responses: int = 0
    fetch_failures: int = 0
    fetch_latency_total_ms: int = 0
    fetch_latency_max_ms: int = 0
    #: throttle_time_ms of the Fetch responses (KIP-219), summed over all of them and the max.
    fetch_throttle_time_total_ms: int = 0
    fetch_throttle_time_max_ms: int = 0
    last_fetch_latency_ms: int | None = None
    first_request_ms: int | None = None
    last_response_ms: int | None = None
    records_consumed: int = 0
    bytes_consumed: int = 0
    bytes_fetched: int = 0
    buffered_bytes: int = 0
    records_lag: Mapping[TopicPartition, int] = field(default_factory=dict)

    @property
    def records_lag_max(self) -> int | None:
        return max(self.records_lag.values()) if self.records_lag else None

    @property
    def fetch_latency_avg_ms(self) -> float | None:
        if not self.fetch_responses:
            return None
        return self.fetch_latency_total_ms / self.fetch_responses

    @property
    def fetch_throttle_time_avg_ms(self) -> float | None:
        if not self.fetch_responses:
            return None
        return self.fetch_throttle_time_total_ms / self.fetch_responses


# -- fetch sessions (KIP-227) ------------------------------------------------------------------


# -- buffered data --------------------------------------------------------------------------


@dataclass(slots=True)
class _InFlight:
    node: int
    version: int
    sent_ms: int
    session: FetchSessionHandler | None
    partitions: Mapping[TopicPartition, FetchPartition]
    names_by_id: Mapping[str, str]
    leaders: Mapping[TopicPartition, int]
    closing: bool = False


# -- the manager ---------------------------------------------------------------------------


class FetchManager:
    """The pure fetch state machine (see the module docstring)."""

    def __init__(
        self,
        subscriptions: SubscriptionState,
        config: FetchConfig | None = None,
        *,
        fetch_version: int | None = None,
        client_id: str = "",
        group_id: str | None = None,
        buffer: FetchBuffer | None = None,
    ) -> None:
        self._subs = subscriptions
        self._config = config if config is not None else FetchConfig()
        #: Where responses' data waits for collect (shared with the polling thread when
        #: given: the consumer's); emptied for this manager.
        self.buffer = (
            buffer
            if buffer is not None
            else FetchBuffer(subscriptions, client_id=client_id, group_id=group_id)
        )
        self._buffer_owner = self.buffer.reset(self._config)
        self._fetch_version = fetch_version
        self._cluster: ClusterView = _EmptyCluster()
        self._default_versions: NegotiatedVersions | None = None
        self._node_versions: dict[int, NegotiatedVersions] = {}
        self._sessions: dict[int, FetchSessionHandler] = {}
        self._in_flight: dict[int, _InFlight] = {}  # by request id
        self._in_flight_nodes: dict[int, int] = {}  # node -> request id
        self._node_backoff_until: dict[int, int] = {}
        #: Nodes whose last Fetch failed without an answer (disconnect, timeout) -> since when.
        self._unanswered: dict[int, int] = {}
        self._next_leader_refresh_ms = 0
        self._awaiting_metadata: set[TopicPartition] = set()
        self._outbox = Outbox()
        self._closing = False
        self._log = get_logger("fetch", client_id=client_id, group_id=group_id)
        # For the log: failures lasting since the last success, keyed ("failed", node),
        # ("error", node, code) or ("unknown_server_error", partition).
        self._failures: ConditionLog[tuple[object, ...]] = ConditionLog()
        # metrics
        self._m_requests = 0
        self._m_responses = 0
        self._m_failures = 0
        self._m_latency_total = 0
        self._m_latency_max = 0
        self._m_throttle_total = 0
        self._m_throttle_max = 0
        self._m_latency_last: int | None = None
        self._m_first_request: int | None = None
        self._m_last_response: int | None = None
        self._m_bytes_fetched = 0

    # -- inputs ------------------------------------------------------------------------------

    @property
    def config(self) -> FetchConfig:
        return self._config

    # -- the buffer (see :class:`FetchBuffer`) ---------------------------------------------

    @property
    def buffered_bytes(self) -> int:
        return self.buffer.buffered_bytes

    @property
    def bytes_consumed(self) -> int:
        return self.buffer.bytes_consumed

    def buffered_partitions(self) -> frozenset[TopicPartition]:
        return self.buffer.buffered_partitions()

    def collect(self, max_records: int | None = None, *, columnar: bool = False) -> FetchResult:
        """:meth:`FetchBuffer.collect` of this manager's buffer."""
        return self.buffer.collect(max_records, columnar=columnar)

    def release_buffer(self) -> None:
        """This manager fills its buffer no more (its actor stopped): collects on the polling
        thread answer None until a new manager resets it."""
        self.buffer.close(self._buffer_owner)

    def session(self, node: int) -> FetchSessionHandler | None:
        return self._sessions.get(node)

    def in_flight_nodes(self) -> frozenset[int]:
        return frozenset(self._in_flight_nodes)

    def in_flight_request_id(self, node: int) -> int | None:
        """The request id of the Fetch in flight to ``node``, if any."""
        return self._in_flight_nodes.get(node)

    def on_cluster_updated(self, cluster: ClusterView) -> None:
        """A new cluster snapshot: partitions waiting for metadata are fetched again."""
        self._cluster = cluster
        self._awaiting_metadata.clear()
        for tp in self._subs.assigned_partitions_list():
            found = cluster.leader_for(tp)
            if found is not None:
                self._subs.update_current_leader(tp, LeaderAndEpoch(found[0], found[1]))

    def set_default_versions(self, versions: NegotiatedVersions | None) -> None:
        """Versions to use for nodes with no versions of their own."""
        self._default_versions = versions

    def set_node_versions(self, node: int, versions: NegotiatedVersions | None) -> None:
        if versions is None:
            self._node_versions.pop(node, None)
        else:
            self._node_versions[node] = versions

    def close(self) -> None:
        """Stop fetching; the next poll sends a close (epoch -1) to every open session."""
        self._closing = True

    # -- poll ------------------------------------------------------------------------------

    def poll(self, now_ms: int) -> PollResult:
        self.buffer.drop_stale()
        requests: list[UnsentRequest] = []
        if self._closing:
            for node, handler in list(self._sessions.items()):
                if node in self._in_flight_nodes:
                    continue  # closed once the request in flight completes
                if handler.session_id != INVALID_SESSION_ID:
                    request = self._close_session(node, handler, now_ms)
                    if request is not None:
                        requests.append(request)
                del self._sessions[node]
        else:
            requests = self._prepare_fetches(now_ms)
        refresh_in = self._refresh_unreachable_leaders(now_ms)
        events = self._outbox.drain()
        wait = self._time_until_next_poll(now_ms)
        if refresh_in is not None:
            wait = refresh_in if wait is None else min(wait, refresh_in)
        return PollResult(requests=tuple(requests), time_until_next_poll_ms=wait, events=events)

    def _refresh_unreachable_leaders(self, now_ms: int) -> int | None:
        """Ask for metadata every ``_UNREACHABLE_LEADER_REFRESH_MS`` while a node whose Fetch
        failed unanswered still leads a fetchable partition: once the controller moved the
        leadership the partition is fetched from its new leader (a Fetch queued for the dead
        node would only fail at its request timeout, and the metadata would name the dead
        leader for ever). Returns the ms until the next refresh, None when none is needed."""
        if not self._unanswered or self._closing:
            return None
        stuck = []
        leading: set[int] = set()
        for tp in self._subs.fetchable_positions():
            found = self._cluster.leader_for(tp)
            if found is not None and found[0] in self._unanswered:
                stuck.append(tp)
                leading.add(found[0])
        for node in self._unanswered.keys() - leading:
            del self._unanswered[node]  # leads nothing we fetch: no check on every poll
        if not stuck:
            return None
        if now_ms >= self._next_leader_refresh_ms:
            self._next_leader_refresh_ms = now_ms + _UNREACHABLE_LEADER_REFRESH_MS
            self._outbox.publish(MetadataRefreshNeeded("leader unreachable", tuple(sorted(stuck))))
        return max(0, self._next_leader_refresh_ms - now_ms)

    def _time_until_next_poll(self, now_ms: int) -> int | None:
        waits = [until - now_ms for until in self._node_backoff_until.values() if until > now_ms]
        return max(0, min(waits)) if waits else None

    def _version_for(self, node: int) -> tuple[int, int] | None:
        """(lowest, highest) usable Fetch version for ``node``, or None when unknown."""
        if self._fetch_version is not None:
            return self._fetch_version, self._fetch_version
        versions = self._node_versions.get(node, self._default_versions)
        if versions is None:
            return None
        common = versions.range_for(ApiKey.FETCH)
        return None if common is None else (common.min, common.max)

    def _prepare_fetches(self, now_ms: int) -> list[UnsentRequest]:
        in_flight = self._in_flight_nodes
        if (
            in_flight
            and all(node in in_flight for node in self._cluster.nodes)
            and all(node in in_flight for node in self._sessions)
        ):
            # Every broker has a Fetch in flight (one broker: most polls): nothing can be
            # sent and no session closed until one answers, and its answer runs this again.
            return []
        buffer_full = self.buffer.buffered_bytes >= self._config.buffer_limit
        chains = self.buffer.chains()
        fetch_ahead = self._config.fetch_ahead
        positions = self._subs.fetchable_positions()
        by_node: dict[int, dict[TopicPartition, FetchPosition]] = {}
        leaders: dict[TopicPartition, int] = {}
        leader_epochs: dict[TopicPartition, int] = {}
        wanted_nodes: set[int] = set()
        missing_leader: list[TopicPartition] = []
        #: Partitions with nothing to fetch now (buffered data, or a full buffer): their
        #: leaders are looked up only if a session's node needs them (below). With hundreds
        #: of partitions most polls find every one buffered: this loop stays a dict lookup
        #: per partition instead of a leader and read-replica lookup each.
        idle: list[TopicPartition] = []
        awaiting_metadata = self._awaiting_metadata
        for tp, position in positions.items():
            if tp in awaiting_metadata:
                continue
            if buffer_full:
                idle.append(tp)
                continue
            chain = chains.get(tp)
            if chain is not None:
                count, end = chain
                if not fetch_ahead or count > 1 or end is None:
                    idle.append(tp)
                    continue
                # fetch ahead: from the data's end (built directly: replace() costs ~10x)
                position = FetchPosition(end, position.offset_epoch, position.current_leader)
            found = self._cluster.leader_for(tp)
            if found is None:
                missing_leader.append(tp)
                continue
            leader, cluster_epoch = found
            if position.current_leader.leader is None:
                # A position set while no leader was known (a committed offset applied
                # before any Metadata answer): it is fetched from this leader, so it carries
                # it; left unknown, the next metadata would put it awaiting validation.
                self._subs.fill_current_leader(tp, LeaderAndEpoch(leader, cluster_epoch))
            node = self._select_read_replica(tp, leader, now_ms)
            wanted_nodes.add(node)
            if node in in_flight:
                continue
            if self._node_backoff_until.get(node, 0) > now_ms:
                continue
            epoch = position.current_leader.epoch
            if epoch is None:
                epoch = cluster_epoch
            leaders[tp] = leader
            leader_epochs[tp] = -1 if epoch is None else epoch
            by_node.setdefault(node, {})[tp] = position
        if missing_leader:
            self._awaiting_metadata.update(missing_leader)
            self._outbox.publish(
                MetadataRefreshNeeded("no known leader", tuple(sorted(missing_leader)))
            )
        requests: list[UnsentRequest] = []
        for node, wanted in by_node.items():
            request = self._build_fetch(node, wanted, leaders, leader_epochs, now_ms)
            if request is not None:
                requests.append(request)
        # Close the sessions of nodes that no longer lead any fetchable partition (an idle
        # partition's node counts: its leaders are looked up until every session is covered).
        uncovered = {
            node
            for node in self._sessions
            if node not in wanted_nodes and node not in self._in_flight_nodes
        }
        for tp in idle if uncovered else ():
            found = self._cluster.leader_for(tp)
            if found is None:
                continue  # looked at again when its data is consumed
            node = self._select_read_replica(tp, found[0], now_ms)
            wanted_nodes.add(node)
            uncovered.discard(node)
            if not uncovered:
                break
        for node, handler in list(self._sessions.items()):
            if node in wanted_nodes or node in self._in_flight_nodes:
                continue
            if handler.session_id != INVALID_SESSION_ID:
                request = self._close_session(node, handler, now_ms)
                if request is not None:
                    requests.append(request)
            del self._sessions[node]
        return requests

    def _select_read_replica(self, tp: TopicPartition, leader: int, now_ms: int) -> int:
        replica = self._subs.preferred_read_replica(tp, now_ms)
        if replica is None:
            return leader
        if self._cluster.node(replica) is None:
            self._subs.clear_preferred_read_replica(tp)
            return leader
        return replica

    def _build_fetch(
        self,
        node: int,
        wanted: Mapping[TopicPartition, FetchPosition],
        leaders: Mapping[TopicPartition, int],
        leader_epochs: Mapping[TopicPartition, int],
        now_ms: int,
    ) -> UnsentRequest | None:
        span = self._version_for(node)
        if span is None:
            self._log.debug("fetch_versions_unknown", node=node)
            return None
        low, version = span
        topic_ids: dict[str, str] = {}
        partitions: dict[TopicPartition, FetchPartition] = {}
        waiting: list[TopicPartition] = []
        if version >= _MIN_TOPIC_ID_VERSION:
            missing = set()
            for tp in wanted:
                topic_id = self._cluster.topic_id(tp.topic)
                if topic_id is None:
                    missing.add(tp)
                else:
                    topic_ids[tp.topic] = topic_id
            if missing:
                if low < _MIN_TOPIC_ID_VERSION:
                    version = _MIN_TOPIC_ID_VERSION - 1
                    topic_ids = {}
                else:
                    waiting = sorted(missing)
        for tp, position in wanted.items():
            if tp in waiting:
                continue
            partitions[tp] = FetchPartition(
                topic=tp.topic,
                partition=tp.partition,
                fetch_offset=position.offset,
                partition_max_bytes=self._config.max_partition_fetch_bytes,
                current_leader_epoch=leader_epochs.get(tp, -1),
            )
        if waiting:
            self._awaiting_metadata.update(waiting)
            self._outbox.publish(MetadataRefreshNeeded("unknown topic id", tuple(waiting)))
        if not partitions:
            return None
        uses_session = version >= _MIN_SESSION_VERSION
        handler: FetchSessionHandler | None = None
        if uses_session:
            handler = self._sessions.get(node)
            if handler is None:
                handler = self._sessions[node] = FetchSessionHandler(node)
            built = handler.build(partitions, topic_ids if version >= 13 else None)
            session_id, epoch = built.session_id, built.epoch
            to_send, to_forget = built.to_send, built.to_forget
            session_partitions = built.session_partitions
            ids_used = dict(handler.session_topic_ids) if version >= 13 else {}
        else:
            session_id, epoch = INVALID_SESSION_ID, FINAL_EPOCH
            to_send, to_forget = tuple(partitions.values()), ()
            session_partitions = partitions
            ids_used = topic_ids
        request = fetch_request(
            version,
            partitions=to_send,
            max_wait_ms=self._config.fetch_max_wait_ms,
            min_bytes=self._config.fetch_min_bytes,
            max_bytes=self._config.fetch_max_bytes,
            isolation_level=int(self._config.isolation_level),
            session_id=session_id,
            session_epoch=epoch,
            forgotten=_forgotten_topics(to_forget),
            rack_id=self._config.client_rack,
            topic_ids=ids_used if version >= _MIN_TOPIC_ID_VERSION else None,
        )
        request_id = self._outbox.new_id()
        self._in_flight[request_id] = _InFlight(
            node=node,
            version=version,
            sent_ms=now_ms,
            session=handler,
            partitions=session_partitions,
            names_by_id={i: t for t, i in ids_used.items()},
            leaders={tp: leaders[tp] for tp in session_partitions if tp in leaders},
        )
        self._in_flight_nodes[node] = request_id
        self._m_requests += 1
        if self._m_first_request is None:
            self._m_first_request = now_ms
        self._log.debug(
            "fetch_request",
            node=node,
            version=version,
            session_id=session_id,
            epoch=epoch,
            sent=len(to_send),
            forgotten=len(to_forget),
        )
        return UnsentRequest(
            node=node,
            request=request,
            request_id=request_id,
            timeout_ms=self._config.request_timeout_ms,
        )

    def _close_session(
        self, node: int, handler: FetchSessionHandler, now_ms: int
    ) -> UnsentRequest | None:
        span = self._version_for(node)
        if span is None or span[1] < _MIN_SESSION_VERSION:
            handler.close_request()
            return None
        version = span[1]
        built = handler.close_request()
        request = fetch_request(
            version,
            partitions=(),
            max_wait_ms=0,
            min_bytes=self._config.fetch_min_bytes,
            max_bytes=self._config.fetch_max_bytes,
            isolation_level=int(self._config.isolation_level),
            session_id=built.session_id,
            session_epoch=FINAL_EPOCH,
            rack_id=self._config.client_rack,
            topic_ids={},
        )
        request_id = self._outbox.new_id()
        self._in_flight[request_id] = _InFlight(
            node=node,
            version=version,
            sent_ms=now_ms,
            session=None,
            partitions={},
            names_by_id={},
            leaders={},
            closing=True,
        )
        self._in_flight_nodes[node] = request_id
        self._log.debug("fetch_session_close", node=node, session_id=built.session_id)
        return UnsentRequest(node=node, request=request, request_id=request_id)

    # -- outcomes --------------------------------------------------------------------------

    def on_failure(self, request_id: int, error: BaseException, now_ms: int) -> None:
        """The request got no answer (disconnect, timeout): retry after retry.backoff.ms with a
        new session; partitions fetched from a preferred read replica go back to the leader."""
        in_flight = self._take(request_id)
        if in_flight is None or in_flight.closing:
            return
        self._m_failures += 1
        if in_flight.session is not None:
            in_flight.session.handle_error()
        self._node_backoff_until[in_flight.node] = now_ms + self._config.retry_backoff_ms
        if in_flight.node not in self._unanswered:
            # The leader may be gone: look for a new one now, and again until it answers.
            self._unanswered[in_flight.node] = now_ms
            self._next_leader_refresh_ms = now_ms
        for tp in in_flight.partitions:
            if in_flight.leaders.get(tp, in_flight.node) != in_flight.node:
                self._subs.clear_preferred_read_replica(tp)
        if (report := self._failures.occurred(("failed", in_flight.node), now_ms)) is not None:
            self._log.info(
                "fetch_failed", node=in_flight.node, error=repr(error), **report.fields()
            )

    def on_response(self, request_id: int, response: Any, now_ms: int) -> FetchResponseStats | None:
        """Handle a Fetch response: its statistics for Java's per-response sensors, or None
        when it was ignored (not in flight any more, or a session close)."""
        in_flight = self._take(request_id)
        if in_flight is None or in_flight.closing:
            return None
        latency = max(0, now_ms - in_flight.sent_ms)
        self._m_responses += 1
        self._m_latency_total += latency
        self._m_latency_max = max(self._m_latency_max, latency)
        self._m_latency_last = latency
        self._m_last_response = now_ms
        throttle = getattr(response, "throttle_time", None)
        throttle_ms = round(throttle.total_seconds() * 1000) if throttle is not None else 0
        # Java's fetch-throttle-time sensor: one sample per Fetch response, zeros included.
        self._m_throttle_total += throttle_ms
        self._m_throttle_max = max(self._m_throttle_max, throttle_ms)
        stats = FetchResponseStats(latency, throttle_ms, {})
        self._node_backoff_until.pop(in_flight.node, None)
        self._unanswered.pop(in_flight.node, None)
        node = in_flight.node
        top_error = int(getattr(response, "error_code", NO_ERROR))  # v7+
        data: list[tuple[TopicPartition, Any]] = []
        unknown_ids = False
        for topic in response.responses:
            if in_flight.version >= _MIN_TOPIC_ID_VERSION:
                name = in_flight.names_by_id.get(str(topic.topic_id))
                if name is None:
                    unknown_ids = True
                    continue
            else:
                name = str(topic.topic)
            for part in topic.partitions:
                data.append((TopicPartition(name, int(part.partition_index)), part))
        throttled = throttle_ms > 0
        if in_flight.session is not None:
            accepted = in_flight.session.handle_response(
                top_error,
                int(getattr(response, "session_id", INVALID_SESSION_ID)),
                [tp for tp, _ in data],
                throttled=throttled,
            )
            if unknown_ids and accepted:
                in_flight.session.handle_error()
                accepted = False
        else:
            accepted = top_error == NO_ERROR
        if top_error != NO_ERROR:
            if top_error not in _SESSION_ERRORS:
                self._node_backoff_until[node] = now_ms + self._config.retry_backoff_ms
            report = self._failures.occurred(("error", node, top_error), now_ms)
            if report is not None:
                self._log.info("fetch_error", node=node, error_code=top_error, **report.fields())
            return stats
        if self._failures:
            self._fetch_recovered(node, now_ms)
        if not accepted:
            self._log.info("fetch_response_rejected", node=node)
            return stats
        refresh: list[TopicPartition] = []
        for tp, part in data:
            requested = in_flight.partitions.get(tp)
            if requested is None:
                continue
            self._handle_partition(
                tp, part, requested.fetch_offset, in_flight, refresh, now_ms, stats.bytes_by_topic
            )
        if refresh:
            self._awaiting_metadata.update(refresh)
            self._outbox.publish(MetadataRefreshNeeded("fetch partition error", tuple(refresh)))
        return stats

    def _fetch_recovered(self, node: int, now_ms: int) -> None:
        """``node`` answered a fetch without a top-level error: its failures have ended."""
        for key in self._failures.keys():
            if key[0] in ("failed", "error") and key[1] == node:
                cleared = self._failures.cleared(key, now_ms)
                if cleared is not None:
                    self._log.info(
                        "fetch_error_cleared", node=node, kind=key[0], **cleared.fields()
                    )

    def _handle_partition(
        self,
        tp: TopicPartition,
        part: Any,
        fetch_offset: int,
        in_flight: _InFlight,
        refresh: list[TopicPartition],
        now_ms: int,
        bytes_by_topic: dict[str, int],
    ) -> None:
        """One partition of a response; ``bytes_by_topic``: the response's record bytes, by
        topic, counted here."""
        code = int(part.error_code)
        if code == NO_ERROR and self._failures:
            cleared = self._failures.cleared(("unknown_server_error", tp), now_ms)
            if cleared is not None:
                self._log.info(
                    "fetch_partition_error_cleared", partition=str(tp), **cleared.fields()
                )
        state = self._subs.partition_state(tp)
        at_position = (
            state is not None
            and state.position is not None
            and state.has_valid_position
            and state.position.offset == fetch_offset
        )
        if code == NO_ERROR:
            continues = state is not None and self.buffer.chain_end(tp) == fetch_offset
            if not at_position and not continues:
                return  # fetched before a seek / reset / revocation: stale
            self._subs.update_partition_offsets(
                tp,
                high_watermark=int(part.high_watermark),
                last_stable_offset=int(getattr(part, "last_stable_offset", -1)),
                log_start_offset=int(getattr(part, "log_start_offset", -1)),
            )
            replica = int(getattr(part, "preferred_read_replica", -1))
            if replica >= 0 and replica != in_flight.node:
                self._subs.update_preferred_read_replica(
                    tp, replica, now_ms + self._config.metadata_max_age_ms
                )
            records = part.records
            if records:
                # a view of the response's frame (wire.fetch_response), else kio's bytes
                raw = records if isinstance(records, memoryview) else bytes(records)
                self._m_bytes_fetched += len(raw)
                bytes_by_topic[tp.topic] = bytes_by_topic.get(tp.topic, 0) + len(raw)
                aborted = part.aborted_transactions
                self.buffer.add(
                    CompletedFetch(
                        tp=tp,
                        fetch_offset=fetch_offset,
                        data=raw,
                        aborted=tuple(aborted) if aborted is not None else None,
                        node=in_flight.node,
                        next_offset=fetch_offset,
                        last_epoch=state.position.offset_epoch
                        if state is not None and state.position is not None
                        else None,
                        end_offset=_data_end_offset(raw, fetch_offset)
                        if self._config.fetch_ahead
                        else None,
                    )
                )
            return
        if code in _REFRESH_METADATA_ERRORS:
            self._subs.clear_preferred_read_replica(tp)
            refresh.append(tp)
            self._log.debug("fetch_partition_refresh", partition=str(tp), error_code=code)
            return
        if code == OffsetOutOfRangeError.code:
            if self._subs.clear_preferred_read_replica(tp) is not None:
                return  # fetched from a follower: try the leader before resetting
            if not at_position:
                return
            strategy = self._subs.default_reset_strategy
            if strategy.kind is not ResetKind.NONE:
                self._log.info("fetch_offset_out_of_range_reset", partition=str(tp))
                self._subs.request_offset_reset(tp, strategy)
                return
            error: KafkaError = OffsetOutOfRangeError(
                f"Fetch position {fetch_offset} is out of range for partition {tp} "
                "and no reset policy is configured (auto.offset.reset=none)",
                topic=tp.topic,
                partition=tp.partition,
                offset=fetch_offset,
            )
        elif code == UnknownServerError.code:
            report = self._failures.occurred(("unknown_server_error", tp), now_ms)
            if report is not None:
                self._log.warning(
                    "fetch_unknown_server_error", partition=str(tp), **report.fields()
                )
            return
        else:
            if not at_position:
                return
            error = error_for_code(
                code, topic=tp.topic, partition=tp.partition, offset=fetch_offset
            )
            if code == TopicAuthorizationFailedError.code:
                error = error_for_code(
                    code,
                    f"Not authorized to read topic {tp.topic}",
                    topic=tp.topic,
                    partition=tp.partition,
                )
        self.buffer.add(
            CompletedFetch(
                tp=tp,
                fetch_offset=fetch_offset,
                data=b"",
                aborted=None,
                node=in_flight.node,
                error=error,
                next_offset=fetch_offset,
            )
        )

    def _take(self, request_id: int) -> _InFlight | None:
        in_flight = self._in_flight.pop(request_id, None)
        if in_flight is not None and self._in_flight_nodes.get(in_flight.node) == request_id:
            del self._in_flight_nodes[in_flight.node]
        return in_flight

    # -- metrics -----------------------------------------------------------------------------

    def metrics(self) -> FetchMetrics:
        return FetchMetrics(
            fetch_requests=self._m_requests,
            fetch_responses=self._m_responses,
            fetch_failures=self._m_failures,
            fetch_latency_total_ms=self._m_latency_total,
            fetch_latency_max_ms=self._m_latency_max,
            fetch_throttle_time_total_ms=self._m_throttle_total,
            fetch_throttle_time_max_ms=self._m_throttle_max,
            last_fetch_latency_ms=self._m_latency_last,
            first_request_ms=self._m_first_request,
            last_response_ms=self._m_last_response,
            records_consumed=self.buffer.records_consumed,
            bytes_consumed=self.buffer.bytes_consumed,
            bytes_fetched=self._m_bytes_fetched,
            buffered_bytes=self.buffer.buffered_bytes,
            records_lag=self.buffer.records_lag(),
        )


_BATCH_START = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_OFFSET_DELTA = struct.Struct(">i")  # at byte 23 of a v2 batch
_MIN_BATCH = 61  # a v2 batch header


def _data_end_offset(data: bytes | memoryview, fetch_offset: int) -> int | None:
    """The offset after the last complete batch of ``data`` (what decoding moves the position
    to), from the batch headers alone; None when no complete v2 batch takes it past
    ``fetch_offset`` (then the partition is not fetched ahead)."""
    total = len(data)
    pos = 0
    end_offset = fetch_offset
    while total - pos >= _MIN_BATCH:
        base_offset, length = _BATCH_START.unpack_from(data, pos)
        end = pos + 12 + length
        if length < _MIN_BATCH - 12 or end > total:
            break  # malformed (decoding reports it) or truncated: the data ends here
        if data[pos + 16] != 2:
            return None
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(data, pos + 23)
        end_offset = max(end_offset, base_offset + delta + 1)
        pos = end
    return end_offset if end_offset > fetch_offset else None


def _forgotten_topics(partitions: Sequence[TopicPartition]) -> list[ForgottenTopic]:
    grouped: dict[str, list[int]] = {}
    for tp in partitions:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return [ForgottenTopic(t, tuple(p)) for t, p in grouped.items()]
