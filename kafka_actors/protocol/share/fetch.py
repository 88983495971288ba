"""Fetching and acknowledging in a share group (KIP-932): :class:`ShareFetchManager`.

Owns: one share session per leader broker (:class:`ShareSession`: epoch 0 opens it with every
partition to fetch there, then 1, 2, ... after each answered request, -1 closes it; partitions
added and forgotten as the assignment and the leaders change; a session error
(SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED) or a
failed request starts a new one at epoch 0), one request in flight per broker, the buffer of
fetched data (bounded: a broker is fetched from again while its partitions have records
buffered only to prefetch, see below, and no broker is while ``fetch.max.bytes`` are
buffered; the buffer and the hand-out of acquired records with their delivery counts are a
:class:`~kafka_actors.protocol.share.buffer.ShareFetchBuffer` object it owns), the
assignment, the acknowledgements pending per
partition (piggybacked on the next ShareFetch to the broker the records came from, or sent
with ShareAcknowledge by :meth:`ShareFetchManager.commit` and at close), and the per-partition
results of every acknowledgement (:class:`AcknowledgementsCommitted`, for the
acknowledgement-commit callback; :class:`ShareCommitCompleted` answers a commit). It follows
Java's ``ShareConsumeRequestManager`` / ``ShareSessionHandler`` (facts only).

Rules, in one place:

* RENEW acknowledgements (KIP-1222) go with ShareAcknowledge, never piggybacked: a ShareFetch
  that carries them may not fetch. One that fails (INVALID_RECORD_STATE from a group with
  ``share.renew.acknowledge.enable=false``, say) ends its record's delivery, as Java's: the
  record is no longer held (its lock expires and the broker delivers it again).
* A request that carries acknowledgements is never at epoch 0 (the broker refuses them when a
  session opens): acknowledgements wait for the session to be open; when it cannot be (no
  partition to fetch there any more) they fail with SHARE_SESSION_NOT_FOUND.
* Acknowledgements go to the broker the records were fetched from: with the next ShareFetch
  when that broker is fetched from at once, else (records of its partitions still buffered)
  with ShareAcknowledge as soon as no request is in flight there.
* Prefetch: while the application has records of a broker's partitions (buffered, or handed
  out and not acknowledged yet) and has started on every buffered response of them (decoded,
  no error waiting), that broker is fetched from with a ShareFetch that does not wait
  (MaxWaitMs 0) carrying the acknowledgements so far (instead of ShareAcknowledge): the
  broker settles them and acquires the next records as soon as its limit of records in
  flight per share partition allows, so they are on their way before the application runs
  out. One that acquired nothing and carried no acknowledgements is not followed by another
  until there are acknowledgements to send. A ShareFetch that may wait (``fetch.max.wait.ms``)
  goes only when the application holds none of those records: parked at a broker whose
  limit is reached, it would hold back the acknowledgements that free it. At most one
  response per partition is buffered ahead of the one handed out (records acquired early
  wait at most that long for the application).
* A partition no longer assigned is forgotten in its session at the next request to its
  broker. Its records acquired for this member (buffered, or in the response to a request
  that fetched it) are still handed out and acknowledged, as Java's share consumer does: the
  broker's acquisition locks are the member's, and neither the assignment moving nor the
  session forgetting the partition releases them. Their acknowledgements go to the broker the
  records came from (ShareAcknowledge, the session stays open), which settles them while
  this member still holds their locks; one for records whose lock expired meanwhile comes back
  with the broker's error (INVALID_RECORD_STATE) in the acknowledgement-commit callback.
* Per-partition fetch errors NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
  UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID, UNKNOWN_LEADER_EPOCH → a metadata refresh
  (``MetadataRefreshNeeded``); the partition waits for the next cluster update.
  TOPIC_AUTHORIZATION_FAILED and other non-retriable partition errors are raised to the
  application at collect.
* Nothing is sent again right after a failure (:class:`~kafka_actors.protocol.share.pacing.
  SharePacing`): a broker whose request failed or was answered with a top-level error waits
  ``retry.backoff.ms`` doubling to ``retry.backoff.max.ms`` (jitter 0.2) until it answers
  without one; a partition answered with an error is left out of its broker's session as
  long; a lost share session is reopened at once once; a partition refused by a broker that
  is not its leader follows the new leader at once.
* Nothing from the network decides an allocation before it is bounded: acquired ranges are
  checked (first <= last, at most :data:`MAX_ACQUIRED_PER_PARTITION` offsets per partition
  and response), record data is decoded with the decompression bound.

May touch: nothing outside itself; pure (the time is a parameter).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from kafka_actors.errors import (
    NO_ERROR,
    FencedLeaderEpochError,
    InvalidShareSessionEpochError,
    KafkaError,
    NotLeaderOrFollowerError,
    ShareSessionLimitReachedError,
    ShareSessionNotFoundError,
    UnknownLeaderEpochError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from kafka_actors.log import get_logger
from kafka_actors.protocol.fetch.manager import FetchResponseStats, MetadataRefreshNeeded
from kafka_actors.protocol.messages import PollResult, TopicPartition, UnsentRequest
from kafka_actors.protocol.records.decode import (
    DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES,
)
from kafka_actors.protocol.request_state import Outbox, retry_backoff
from kafka_actors.protocol.share.acknowledgements import GAP, Acknowledgements, AcknowledgeType
from kafka_actors.protocol.share.buffer import (
    MAX_ACQUIRED_PER_PARTITION,
    ShareCollectResult,
    ShareConsumerRecord,
    ShareFetchBuffer,
)
from kafka_actors.protocol.share.events import (
    AcknowledgementsCommitted,
    AckResult,
    ShareCloseCompleted,
    ShareCommitCompleted,
)
from kafka_actors.protocol.share.pacing import SharePacing
from kafka_actors.protocol.wire.requests import share_acknowledge_request, share_fetch_request

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "MAX_ACQUIRED_PER_PARTITION",
    "AckResult",
    "AcknowledgementsCommitted",
    "ShareCloseCompleted",
    "ShareCollectResult",
    "ShareCommitCompleted",
    "ShareConsumerRecord",
    "ShareFetchConfig",
    "ShareFetchManager",
    "ShareSession",
    "next_epoch",
]

INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
_INT32_MAX: Final = 2**31 - 1
_SESSION_ERRORS: Final = frozenset(
    {
        ShareSessionNotFoundError.code,
        InvalidShareSessionEpochError.code,
        ShareSessionLimitReachedError.code,
    }
)
_METADATA_ERRORS: Final = frozenset(
    {
        NotLeaderOrFollowerError.code,
        FencedLeaderEpochError.code,
        UnknownTopicOrPartitionError.code,
        UnknownTopicIdError.code,
        UnknownLeaderEpochError.code,
    }
)


def next_epoch(epoch: int) -> int:
    """The share session epoch after an answered request at ``epoch`` (Java's
    ``ShareRequestMetadata.nextEpoch``): 0 → 1, n → n + 1, wrapping to 1."""
    if epoch < 0:
        return INITIAL_EPOCH
    return 1 if epoch >= _INT32_MAX else epoch + 1


class ClusterView(Protocol):
    def leader_for(self, tp: TopicPartition) -> tuple[int, int | None] | None: ...
    def topic_id(self, name: str) -> str | None: ...
    def topic_name(self, topic_id: str | uuid.UUID) -> str | None: ...
    def node(self, node_id: int) -> object | None: ...


@dataclass(frozen=True, slots=True)
class ShareFetchConfig:
    group_id: str
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 52_428_800
    max_poll_records: int = 500
    record_limit: bool = False
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    check_crcs: bool = True
    max_decompressed_batch_bytes: int = DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES

    @classmethod
    def from_consumer_config(cls, config: Any) -> ShareFetchConfig:
        assert config.group_id is not None
        return cls(
            group_id=config.group_id,
            max_wait_ms=config.fetch_max_wait_ms,
            min_bytes=config.fetch_min_bytes,
            max_bytes=config.fetch_max_bytes,
            max_poll_records=config.max_poll_records,
            record_limit=config.share_acquire_mode.upper() == "RECORD_LIMIT",
            request_timeout_ms=config.request_timeout_ms,
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
            check_crcs=config.check_crcs,
            max_decompressed_batch_bytes=config.max_decompressed_batch_bytes,
        )


@dataclass(slots=True)
class ShareSession:
    """The client's side of one broker's share session."""

    epoch: int = INITIAL_EPOCH
    partitions: frozenset[TopicPartition] = frozenset()

    def reset(self) -> None:
        self.epoch = INITIAL_EPOCH
        self.partitions = frozenset()


@dataclass(slots=True)
class _InFlight:
    node: int
    kind: str  # "fetch" | "ack" | "close"
    epoch: int
    sent_ms: int
    session_partitions: frozenset[TopicPartition]
    fetched: frozenset[TopicPartition]
    acks: dict[TopicPartition, Acknowledgements]
    names_by_id: dict[str, str]


class ShareFetchManager:
    """Share sessions, the buffer and acknowledgements (see the module docstring)."""

    def __init__(
        self,
        config: ShareFetchConfig,
        *,
        member_id: str,
        fetch_version: int,
        acknowledge_version: int,
        client_id: str = "",
        random: Callable[[], float] = lambda: 0.5,
    ) -> None:
        self._outbox = Outbox()
        self._buffer = ShareFetchBuffer(
            check_crcs=config.check_crcs,
            max_decompressed_batch_bytes=config.max_decompressed_batch_bytes,
        )
        self._assignment: frozenset[TopicPartition] = frozenset()
        self._config = config
        self._member_id = member_id
        self._fetch_version = fetch_version
        self._ack_version = acknowledge_version
        self._cluster: ClusterView | None = None
        self._sessions: dict[int, ShareSession] = {}
        self._in_flight: dict[int, _InFlight] = {}
        self._by_request: dict[int, int] = {}
        #: Backoff after failures, per broker and per partition.
        self._pacing = SharePacing(retry_backoff(config, random))
        self._awaiting_metadata: set[TopicPartition] = set()
        #: Acknowledgements not sent yet, per partition, and the broker they go to.
        self._pending: dict[TopicPartition, Acknowledgements] = {}
        self._ack_node: dict[TopicPartition, int] = {}
        #: Records handed out (collected) and not acknowledged yet, per partition: while the
        #: application holds some, a broker is fetched from only without waiting.
        self._held: dict[TopicPartition, int] = {}
        #: Brokers whose last ShareFetch without acknowledgements (and without waiting)
        #: acquired nothing while records were held: not fetched from again until there are
        #: acknowledgements to send or nothing is held (no empty fetches in a loop).
        self._dry: set[int] = set()
        #: Brokers whose pending acknowledgements are to go now (a commit, close).
        self._ack_now: set[int] = set()
        #: commit id -> (brokers still to answer, results so far).
        self._commits: dict[int, tuple[set[int], dict[TopicPartition, KafkaError | None]]] = {}
        self._closing = False
        self._closed_nodes: set[int] = set()
        self._close_reported = False
        self._log = get_logger("share_fetch", client_id=client_id, group_id=config.group_id)
        # Metrics.
        #: Records handed out.
        self.records_fetched = 0
        self.bytes_fetched = 0
        self.fetch_requests = 0
        self.fetch_latency_total_ms = 0
        self.fetch_latency_max_ms = 0
        self.acknowledgements_sent = 0
        self.acknowledgements_failed = 0
        self.acquisition_lock_timeout_ms: int | None = None

    # -- state ------------------------------------------------------------------------------

    @property
    def buffered_bytes(self) -> int:
        return self._buffer.buffered_bytes

    @property
    def buffered_count(self) -> int:
        """Partition responses buffered (records or an error waiting for collect)."""
        return self._buffer.buffered_count

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        return self._assignment

    def session(self, node: int) -> ShareSession | None:
        return self._sessions.get(node)

    def pending_acknowledgements(self) -> dict[TopicPartition, Acknowledgements]:
        return {tp: acks for tp, acks in self._pending.items() if acks}

    @property
    def closed(self) -> bool:
        return self._closing and not self._in_flight and not self._open_sessions()

    # -- inputs -----------------------------------------------------------------------------

    def on_cluster_updated(self, cluster: ClusterView) -> None:
        self._cluster = cluster
        self._awaiting_metadata.clear()

    def on_assignment(self, assignment: Iterable[TopicPartition]) -> None:
        self._assignment = frozenset(assignment)
        self._pacing.retain(self._assignment)
        self._buffer.drop_unassigned(self._assignment)
        self._held = {tp: n for tp, n in self._held.items() if tp in self._assignment}

    def collect(self, max_records: int) -> ShareCollectResult:
        """Up to ``max_records`` acquired records from the buffer (see
        :meth:`~kafka_actors.protocol.share.buffer.ShareFetchBuffer.collect`); the gap
        acknowledgements found on the way join the pending ones."""
        hand_out = self._buffer.collect(max_records, self._assignment)
        for gap in hand_out.gaps:
            self._pending.setdefault(gap.tp, Acknowledgements()).merge(gap.acknowledgements)
            self._ack_node[gap.tp] = gap.node
        result = hand_out.result
        self.records_fetched += result.record_count
        for tp, records in result.records.items():
            self._held[tp] = self._held.get(tp, 0) + len(records)
        return result

    def _holds(self, partitions: Iterable[TopicPartition]) -> bool:
        held = self._held
        return any(held.get(tp, 0) > 0 for tp in partitions)

    def _settled(self, tp: TopicPartition, count: int, kind: int) -> None:
        """``count`` handed-out records of ``tp`` acknowledged with ``kind``."""
        if kind == GAP or kind == AcknowledgeType.RENEW:
            return  # not records handed out / still held
        left = self._held.get(tp, 0) - count
        if left > 0:
            self._held[tp] = left
        else:
            self._held.pop(tp, None)

    def set_member_id(self, member_id: str) -> None:
        self._member_id = member_id

    def acknowledge(self, acks: Mapping[TopicPartition, Iterable[tuple[int, int]]]) -> None:
        """Record the application's acknowledgements ((offset, type) per partition); they go
        with the next request to the broker each partition's records came from."""
        for tp, items in acks.items():
            pending = self._pending.setdefault(tp, Acknowledgements())
            for offset, kind in items:
                pending.add(offset, kind)
                self._settled(tp, 1, kind)

    def acknowledge_ranges(
        self, acks: Mapping[TopicPartition, Iterable[tuple[int, int, int]]]
    ) -> None:
        """As :meth:`acknowledge`, with (first offset, last offset, type) ranges."""
        for tp, items in acks.items():
            pending = self._pending.setdefault(tp, Acknowledgements())
            for first, last, kind in items:
                pending.add_range(first, last, kind)
                self._settled(tp, last - first + 1, kind)

    def commit(self, commit_id: int) -> None:
        """Send every pending acknowledgement now; ``ShareCommitCompleted(commit_id)`` once
        all of them (and those in flight) are answered."""
        nodes = {self._ack_node.get(tp, -1) for tp, acks in self._pending.items() if acks}
        nodes |= {n for n, f in self._in_flight.items() if f.acks}
        nodes.discard(-1)
        self._ack_now |= nodes
        self._commits[commit_id] = (nodes, {})
        self._fail_unsendable()
        self._check_commits()

    def close(self) -> None:
        """Stop fetching; the next polls send the pending acknowledgements and close every
        share session (epoch -1); ``ShareCloseCompleted`` when done."""
        self._closing = True
        self._ack_now |= set(self._sessions)
        self._buffer.clear()

    # -- the request-manager contract -------------------------------------------------------

    def poll(self, now_ms: int) -> PollResult:
        requests: list[UnsentRequest] = []
        cluster = self._cluster
        wanted = self._wanted_by_node(now_ms)
        nodes = (
            set(wanted)
            | set(self._sessions)
            | {
                self._ack_node[tp]
                for tp, acks in self._pending.items()
                if acks and tp in self._ack_node
            }
        )
        next_ms = None
        if not self._closing:
            next_ms = self._pacing.partition_wait_ms(self._assignment, now_ms)
        for node in sorted(nodes):
            if node in self._in_flight:
                continue
            wait = self._pacing.node_wait_ms(node, now_ms)
            if wait > 0:
                next_ms = wait if next_ms is None else min(next_ms, wait)
                continue
            if cluster is not None and node not in self._sessions and cluster.node(node) is None:
                self._fail_acks_of(node, ShareSessionNotFoundError("The broker left the cluster"))
                continue
            request = self._request_for(node, wanted.get(node, frozenset()), now_ms)
            if request is not None:
                requests.append(request)
        if self._closing and not self._close_reported and not self._in_flight:
            if not self._open_sessions():
                self._close_reported = True
                self._fail_all_pending(ShareSessionNotFoundError("The share consumer closed"))
                self._outbox.publish(ShareCloseCompleted())
        self._check_commits()
        return PollResult(tuple(requests), next_ms, self._outbox.drain())

    def _open_sessions(self) -> list[int]:
        return [n for n, s in self._sessions.items() if s.epoch > 0 and n not in self._closed_nodes]

    def _wanted_by_node(self, now_ms: int) -> dict[int, frozenset[TopicPartition]]:
        cluster = self._cluster
        out: dict[int, set[TopicPartition]] = {}
        if cluster is None or self._closing:
            return {}
        for tp in self._assignment:
            if tp in self._awaiting_metadata or cluster.topic_id(tp.topic) is None:
                continue
            leader = cluster.leader_for(tp)
            if leader is None or self._pacing.partition_waits(tp, leader[0], now_ms):
                continue
            out.setdefault(leader[0], set()).add(tp)
        return {node: frozenset(tps) for node, tps in out.items()}

    def _acks_for(
        self, node: int, only: frozenset[TopicPartition] | None = None
    ) -> dict[TopicPartition, Acknowledgements]:
        return {
            tp: acks
            for tp, acks in self._pending.items()
            if acks and self._ack_node.get(tp) == node and (only is None or tp in only)
        }

    def _request_for(
        self, node: int, wanted: frozenset[TopicPartition], now_ms: int
    ) -> UnsentRequest | None:
        session = self._sessions.setdefault(node, ShareSession())
        all_acks = self._acks_for(node)
        if self._closing:
            if session.epoch > INITIAL_EPOCH and node not in self._closed_nodes:
                return self._ack_request(node, session, all_acks, FINAL_EPOCH, now_ms)
            self._fail_acks_of(node, ShareSessionNotFoundError("No share session to close"))
            self._sessions.pop(node, None)
            return None
        buffered = self._buffer.partitions_from(node)
        room = self._buffer.buffered_bytes < self._config.max_bytes
        may_fetch = bool(wanted) and not (buffered & wanted) and room
        if session.epoch > INITIAL_EPOCH:
            other = {tp: a for tp, a in all_acks.items() if tp not in wanted}
            # A ShareFetch with RENEW acknowledgements may not fetch (KIP-1222: its fetch
            # parameters must be 0): those go with ShareAcknowledge.
            renew = any(a.has_type(AcknowledgeType.RENEW) for a in all_acks.values())
            busy = bool(buffered & wanted) or self._holds(wanted)
            if (
                busy
                and (all_acks or node not in self._dry)
                and not other
                and not renew
                and self._may_prefetch(node, wanted, room)
            ):
                # Prefetch: while the application has records of these partitions (buffered
                # or handed out and not acknowledged), a ShareFetch that does not wait
                # (MaxWaitMs 0), with the acknowledgements so far: the broker settles them
                # and, as soon as its limit of records in flight allows, acquires the next
                # records, which are then on their way before the application runs out.
                return self._fetch_request(node, session, wanted, all_acks, now_ms, max_wait_ms=0)
            if busy:
                may_fetch = False  # a fetch that may wait would hold back acknowledgements
            # Acknowledgements while the broker is not fetched from (records still buffered)
            # go at once with ShareAcknowledge: the broker settles them (and frees their
            # acquisition locks) while the application works, not when the next fetch goes.
            if other or renew or (all_acks and not may_fetch):
                return self._ack_request(node, session, all_acks, session.epoch, now_ms)
            if may_fetch or (session.partitions - wanted):
                wait = 0 if busy else None  # (forgetting partitions while records are held)
                return self._fetch_request(
                    node, session, wanted, all_acks, now_ms, max_wait_ms=wait
                )
            return None
        # No session open: open one (without acknowledgements) when there is something to
        # fetch; acknowledgements for this broker wait for it, or fail when it cannot open.
        if may_fetch:
            return self._fetch_request(node, session, wanted, {}, now_ms)
        if all_acks and not wanted:
            self._fail_acks_of(
                node, ShareSessionNotFoundError("The share session the records came from is gone")
            )
        if not wanted and not all_acks:
            self._sessions.pop(node, None)
        return None

    def _may_prefetch(self, node: int, wanted: frozenset[TopicPartition], room: bool) -> bool:
        """Whether ``node``'s partitions may be fetched from while some of their records are
        still buffered: the application has started on every buffered response of them
        (decoded, no error waiting), so at most one response per partition is ahead."""
        if not wanted or not room:
            return False
        return self._buffer.started_on(node, wanted)

    def _topic_ids(self, partitions: Iterable[TopicPartition]) -> dict[str, uuid.UUID]:
        cluster = self._cluster
        out: dict[str, uuid.UUID] = {}
        for tp in partitions:
            if tp.topic in out:
                continue
            tid = cluster.topic_id(tp.topic) if cluster is not None else None
            if tid is not None:
                out[tp.topic] = uuid.UUID(str(tid))
        return out

    def _by_topic_id(
        self, partitions: Iterable[TopicPartition], ids: Mapping[str, uuid.UUID]
    ) -> dict[uuid.UUID, list[int]]:
        out: dict[uuid.UUID, list[int]] = {}
        for tp in sorted(partitions):
            if tp.topic in ids:
                out.setdefault(ids[tp.topic], []).append(tp.partition)
        return out

    def _acks_by_topic_id(
        self, acks: Mapping[TopicPartition, Acknowledgements], ids: Mapping[str, uuid.UUID]
    ) -> dict[uuid.UUID, dict[int, Any]]:
        out: dict[uuid.UUID, dict[int, Any]] = {}
        for tp, a in sorted(acks.items()):
            out.setdefault(ids[tp.topic], {})[tp.partition] = a.batches()
        return out

    def _take_acks(
        self, acks: Mapping[TopicPartition, Acknowledgements], ids: Mapping[str, uuid.UUID]
    ) -> dict[TopicPartition, Acknowledgements]:
        """Move ``acks`` out of the pending set (those whose topic id is known)."""
        taken: dict[TopicPartition, Acknowledgements] = {}
        for tp in acks:
            if tp.topic in ids:
                taken[tp] = self._pending.pop(tp)
        return taken

    def _fetch_request(
        self,
        node: int,
        session: ShareSession,
        wanted: frozenset[TopicPartition],
        acks: Mapping[TopicPartition, Acknowledgements],
        now_ms: int,
        *,
        max_wait_ms: int | None = None,
    ) -> UnsentRequest:
        epoch = session.epoch
        wait = self._config.max_wait_ms if max_wait_ms is None else max_wait_ms
        self._dry.discard(node)
        if epoch == INITIAL_EPOCH:
            add, forget = wanted, frozenset[TopicPartition]()
        else:
            add, forget = wanted - session.partitions, session.partitions - wanted
        ids = self._topic_ids([*wanted, *forget, *acks])
        taken = self._take_acks(acks, ids)
        request = share_fetch_request(
            self._fetch_version,
            group_id=self._config.group_id,
            member_id=self._member_id,
            share_session_epoch=epoch,
            max_wait_ms=wait,
            min_bytes=self._config.min_bytes,
            max_bytes=self._config.max_bytes,
            max_records=self._config.max_poll_records,
            batch_size=self._config.max_poll_records,
            fetch=self._by_topic_id(add, ids),
            acknowledgements=self._acks_by_topic_id(taken, ids),
            forgotten=self._by_topic_id(forget, ids),
            record_limit=self._config.record_limit,
        )
        self.fetch_requests += 1
        return self._track(node, "fetch", epoch, request, wanted, wanted, taken, ids, now_ms)

    def _ack_request(
        self,
        node: int,
        session: ShareSession,
        acks: Mapping[TopicPartition, Acknowledgements],
        epoch: int,
        now_ms: int,
    ) -> UnsentRequest:
        ids = self._topic_ids(acks)
        taken = self._take_acks(acks, ids)
        request = share_acknowledge_request(
            self._ack_version,
            group_id=self._config.group_id,
            member_id=self._member_id,
            share_session_epoch=epoch,
            acknowledgements=self._acks_by_topic_id(taken, ids),
        )
        kind = "close" if epoch == FINAL_EPOCH else "ack"
        return self._track(
            node, kind, epoch, request, session.partitions, frozenset(), taken, ids, now_ms
        )

    def _track(
        self,
        node: int,
        kind: str,
        epoch: int,
        request: Any,
        session_partitions: frozenset[TopicPartition],
        fetched: frozenset[TopicPartition],
        acks: dict[TopicPartition, Acknowledgements],
        ids: Mapping[str, uuid.UUID],
        now_ms: int,
    ) -> UnsentRequest:
        request_id = self._outbox.new_id()
        self._in_flight[node] = _InFlight(
            node,
            kind,
            epoch,
            now_ms,
            session_partitions,
            fetched,
            acks,
            {str(tid): name for name, tid in ids.items()},
        )
        self._by_request[request_id] = node
        self.acknowledgements_sent += sum(len(a) for a in acks.values())
        timeout = self._config.request_timeout_ms + (
            self._config.max_wait_ms if kind == "fetch" else 0
        )
        return UnsentRequest(node, request, request_id, timeout_ms=timeout)

    # -- outcomes -----------------------------------------------------------------------------

    def _take(self, request_id: int) -> _InFlight | None:
        node = self._by_request.pop(request_id, None)
        if node is None:
            return None
        return self._in_flight.pop(node, None)

    def on_failure(self, request_id: int, error: BaseException, now_ms: int) -> None:
        in_flight = self._take(request_id)
        if in_flight is None:
            return
        kafka_error = (
            error if isinstance(error, KafkaError) else ShareSessionNotFoundError(str(error))
        )
        self._log.info("share_request_failed", node=in_flight.node, error=str(error))
        session = self._sessions.get(in_flight.node)
        if session is not None:
            session.reset()
        if in_flight.kind == "close":
            self._closed_nodes.add(in_flight.node)
        self._pacing.node_failed(in_flight.node, now_ms)
        self._complete_acks(in_flight, {tp: kafka_error for tp in in_flight.acks})

    def on_response(self, request_id: int, response: Any, now_ms: int) -> FetchResponseStats | None:
        """Handle a ShareFetch / ShareAcknowledge response: for a ShareFetch handled, its
        statistics for Java's per-response fetch sensors; else None."""
        in_flight = self._take(request_id)
        if in_flight is None:
            return None
        node = in_flight.node
        lock = getattr(response, "acquisition_lock_timeout", None)
        if lock is not None:
            self.acquisition_lock_timeout_ms = round(lock.total_seconds() * 1000)
        top = int(response.error_code)
        session = self._sessions.setdefault(node, ShareSession())
        if top != NO_ERROR:
            error = error_for_code(top, response.error_message, node=node)
            self._log.info("share_response_error", node=node, kind=in_flight.kind, error=str(error))
            session.reset()
            # A lost session (an open one) is reopened at once, once; every other top-level
            # error, and a session error again before a success, backs off.
            reopen = top in _SESSION_ERRORS and in_flight.epoch > INITIAL_EPOCH
            self._pacing.node_failed(node, now_ms, at_once=reopen)
            if in_flight.kind == "close":
                self._closed_nodes.add(node)
            self._complete_acks(in_flight, {tp: error for tp in in_flight.acks})
            if not error.retriable and top not in _SESSION_ERRORS and in_flight.kind == "fetch":
                self._buffer_error(in_flight, error)
            return None
        self._pacing.node_succeeded(node)
        if in_flight.kind == "close":
            self._closed_nodes.add(node)
            self._sessions.pop(node, None)
        else:
            session.partitions = in_flight.session_partitions
            session.epoch = next_epoch(in_flight.epoch)
        results: dict[TopicPartition, KafkaError | None] = {}
        refresh: list[TopicPartition] = []
        fetched_bytes: dict[str, int] = {}
        for topic in response.responses:
            name = in_flight.names_by_id.get(str(topic.topic_id))
            if name is None:
                continue
            for part in topic.partitions:
                tp = TopicPartition(name, int(part.partition_index))
                if in_flight.kind == "fetch":
                    ack_code = int(part.acknowledge_error_code)
                    if tp in in_flight.acks:
                        results[tp] = (
                            None
                            if ack_code == NO_ERROR
                            else error_for_code(
                                ack_code,
                                part.acknowledge_error_message,
                                topic=name,
                                partition=tp.partition,
                                node=node,
                            )
                        )
                    size = self._fetched_partition(in_flight, tp, part, refresh, now_ms)
                    if size:
                        fetched_bytes[name] = fetched_bytes.get(name, 0) + size
                else:
                    code = int(part.error_code)
                    if tp in in_flight.acks:
                        results[tp] = (
                            None
                            if code == NO_ERROR
                            else error_for_code(
                                code,
                                part.error_message,
                                topic=name,
                                partition=tp.partition,
                                node=node,
                            )
                        )
                    if code in _METADATA_ERRORS:
                        refresh.append(tp)
        for tp in in_flight.acks:
            results.setdefault(tp, None)
        stats: FetchResponseStats | None = None
        if in_flight.kind == "fetch":
            latency = max(0, now_ms - in_flight.sent_ms)
            self.fetch_latency_total_ms += latency
            self.fetch_latency_max_ms = max(self.fetch_latency_max_ms, latency)
            throttle = getattr(response, "throttle_time", None)
            throttle_ms = round(throttle.total_seconds() * 1000) if throttle is not None else 0
            stats = FetchResponseStats(latency, throttle_ms, fetched_bytes)
            if not fetched_bytes and not in_flight.acks:
                self._dry.add(node)
        if refresh:
            self._awaiting_metadata.update(refresh)
            self._outbox.publish(
                MetadataRefreshNeeded("share fetch partition error", tuple(refresh))
            )
        self._complete_acks(in_flight, results)
        return stats

    def _fetched_partition(
        self,
        in_flight: _InFlight,
        tp: TopicPartition,
        part: Any,
        refresh: list[TopicPartition],
        now_ms: int,
    ) -> int:
        code = int(part.error_code)
        if code != NO_ERROR:
            if code in _METADATA_ERRORS:
                refresh.append(tp)
                # Fetched again from a new leader at once, from this broker after a backoff.
                self._pacing.partition_failed(tp, now_ms, refused_by=in_flight.node)
                return 0
            self._pacing.partition_failed(tp, now_ms)
            error = error_for_code(code, part.error_message, topic=tp.topic, partition=tp.partition)
            if not error.retriable and tp in self._assignment:
                self._buffer.add_error(tp, in_flight.node, error)
            return 0
        if tp not in in_flight.fetched:
            return 0  # not asked for: nothing was acquired for it
        self._pacing.partition_succeeded(tp)
        ranges: list[tuple[int, int, int]] = []
        total = 0
        for acquired in part.acquired_records:
            first, last, count = (
                int(acquired.first_offset),
                int(acquired.last_offset),
                int(acquired.delivery_count),
            )
            if first < 0 or last < first:
                continue
            total += last - first + 1
            if total > MAX_ACQUIRED_PER_PARTITION:
                self._log.warning("share_acquired_ranges_too_large", partition=str(tp))
                return 0
            ranges.append((first, last, max(1, count)))
        if not ranges:
            return 0
        ranges.sort()
        merged: list[tuple[int, int, int]] = []
        for first, last, count in ranges:
            if merged and first <= merged[-1][1]:
                # Overlapping ranges: an offset once (the first range's), the rest kept.
                first = merged[-1][1] + 1
                if first > last:
                    continue
            merged.append((first, last, count))
        data = part.records if part.records is not None else b""
        data = bytes(data)
        self._ack_node[tp] = in_flight.node
        self._buffer.add_records(tp, in_flight.node, data, merged)
        self.bytes_fetched += len(data)
        return len(data)

    def _buffer_error(self, in_flight: _InFlight, error: KafkaError) -> None:
        for tp in sorted(in_flight.fetched):
            if tp in self._assignment:
                self._buffer.add_error(tp, in_flight.node, error)
                break

    # -- acknowledgement results ------------------------------------------------------------

    def _complete_acks(
        self, in_flight: _InFlight, results: Mapping[TopicPartition, KafkaError | None]
    ) -> None:
        node = in_flight.node
        for tp, acks in in_flight.acks.items():
            if results.get(tp) is not None:
                self._renewals_refused(tp, acks)
        if in_flight.acks:
            self._report(
                [
                    AckResult(tp, frozenset(acks.record_offsets()), results.get(tp))
                    for tp, acks in sorted(in_flight.acks.items())
                ]
            )
        if not self._acks_for(node):
            self._ack_now.discard(node)
            for waiting, _found in self._commits.values():
                waiting.discard(node)
        for _waiting, found in self._commits.values():
            for tp in in_flight.acks:
                found[tp] = results.get(tp)
        self._check_commits()

    def _renewals_refused(self, tp: TopicPartition, acks: Acknowledgements) -> None:
        """A partition's acknowledgements failed: its RENEW records are no longer held (as
        Java's share consumer, the application's core ends their delivery: their locks
        expire and the broker delivers them again), so they hold back no waiting fetch."""
        renewed = sum(b - a + 1 for a, b, kind in acks if kind == AcknowledgeType.RENEW)
        if renewed:
            left = self._held.get(tp, 0) - renewed
            if left > 0:
                self._held[tp] = left
            else:
                self._held.pop(tp, None)

    def _report(self, results: list[AckResult]) -> None:
        """Results for the callback: partitions whose acknowledgements settled records (not
        only gaps)."""
        results = [r for r in results if r.offsets]
        if not results:
            return
        self.acknowledgements_failed += sum(len(r.offsets) for r in results if r.error is not None)
        self._outbox.publish(AcknowledgementsCommitted(tuple(results)))

    def _fail_acks_of(self, node: int, error: KafkaError) -> None:
        failed = {tp: acks for tp, acks in self._acks_for(node).items()}
        for tp, acks in failed.items():
            self._pending.pop(tp, None)
            self._renewals_refused(tp, acks)
        if failed:
            self._report(
                [
                    AckResult(tp, frozenset(a.record_offsets()), error)
                    for tp, a in sorted(failed.items())
                ]
            )
            for _waiting, found in self._commits.values():
                for tp in failed:
                    found[tp] = error
        self._ack_now.discard(node)
        for waiting, _found in self._commits.values():
            waiting.discard(node)

    def _fail_all_pending(self, error: KafkaError) -> None:
        for node in {self._ack_node.get(tp, -1) for tp in list(self._pending)}:
            self._fail_acks_of(node, error)
        self._pending.clear()

    def _fail_unsendable(self) -> None:
        """Pending acknowledgements of partitions whose broker is not known (never fetched)."""
        orphans = [tp for tp, a in self._pending.items() if a and tp not in self._ack_node]
        if orphans:
            error = ShareSessionNotFoundError("No share session for the acknowledged records")
            self._report(
                [
                    AckResult(tp, frozenset(self._pending[tp].record_offsets()), error)
                    for tp in orphans
                ]
            )
            for tp in orphans:
                self._renewals_refused(tp, self._pending.pop(tp))
                for _waiting, found in self._commits.values():
                    found[tp] = error

    def _check_commits(self) -> None:
        done = [cid for cid, (waiting, _found) in self._commits.items() if not waiting]
        for cid in done:
            _waiting, found = self._commits.pop(cid)
            self._outbox.publish(ShareCommitCompleted(cid, dict(found)))
