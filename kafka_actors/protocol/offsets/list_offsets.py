"""ListOffsets: the pure :class:`OffsetsManager` (offset lookups and position resets).

Owns: ListOffsets requests to partition leaders, grouped by leader from the latest
:class:`~kafka_actors.protocol.metadata.Cluster`, for (a) the user's lookups
(``beginning_offsets`` / ``end_offsets`` / ``offsets_for_times``, each with a deadline, retried on
retriable errors until it) and (b) resetting the positions of partitions awaiting a reset in the
shared :class:`~kafka_actors.protocol.subscription.SubscriptionState` (``auto.offset.reset`` or
an explicit seek to beginning/end), and (c) validating positions that await validation
(KIP-320) with OffsetsForLeaderEpoch to their leaders: a committed offset or a seek with a
leader epoch, or a position whose leader (epoch) changed; on truncation the position moves to
the divergent offset with a reset policy, else :class:`ResetPositionsError` carries a
LogTruncationError (Java's rules, ``SubscriptionState.maybe_complete_validation``). It follows
the Java client's ``OffsetsRequestManager`` and ``OffsetFetcherUtils`` (Kafka 4.x).

May touch: the :class:`SubscriptionState` it is given (reads partitions awaiting reset, writes
positions through ``maybe_seek_unvalidated`` and retry times through ``request_failed``), and
nothing else. Pure otherwise: the time is a parameter (``now_ms``, monotonic milliseconds),
wall-clock milliseconds (for ``by_duration`` resets) come from an injected callable, backoff
jitter from an injected random. Requests are built with
:func:`kafka_actors.protocol.wire.requests.list_offsets_request`.

Driving it (the request-manager contract of :mod:`kafka_actors.protocol.messages`):

* inputs: :meth:`~OffsetsManager.on_cluster_updated` (every ``ClusterUpdated``),
  :meth:`~OffsetsManager.beginning_offsets` / :meth:`~OffsetsManager.end_offsets` /
  :meth:`~OffsetsManager.offsets_for_times` (return a request key),
  :meth:`~OffsetsManager.on_response` / :meth:`~OffsetsManager.on_failure`;
* outputs: :meth:`~OffsetsManager.poll` returns ListOffsets requests (one per leader and
  purpose) and the events: :class:`ListOffsetsCompleted` (per lookup: result or typed error),
  :class:`MetadataUpdateNeeded` (a leader is unknown or moved: refresh metadata; the retry
  follows once the backoff passed), :class:`ResetPositionsError` (raise at the user's next poll:
  NoOffsetForPartitionError for partitions whose strategy is ``none``, naming them; or a
  non-retriable error while resetting).

Choices, in one place:

* **Per-partition errors** (as OffsetFetcherUtils): NOT_LEADER_OR_FOLLOWER,
  REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, OFFSET_NOT_AVAILABLE, LEADER_NOT_AVAILABLE,
  FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH and UNKNOWN_TOPIC_OR_PARTITION (every retriable
  code) → metadata refresh and retry after the backoff; UNSUPPORTED_FOR_MESSAGE_FORMAT → no
  offset (None); TOPIC_AUTHORIZATION_FAILED and other non-retriable codes → the typed error
  (Java retries unknown codes; here they reach the caller at once).
* **Lookups**: ``offsets_for_times`` gives ``OffsetAndTimestamp`` or None when no record has a
  timestamp at or after the one asked for (the broker answers offset -1); beginning/end give
  offsets (end offsets honour ``isolation.level``: the last stable offset for read_committed).
  At the deadline a lookup still missing partitions fails with KafkaTimeoutError naming them.
  Retries use ``ExponentialBackoff(retry.backoff.ms, 2, retry.backoff.max.ms, 0.2)`` by the
  lookup's failed attempts.
* **Resets**: EARLIEST → timestamp -2, LATEST → -1, BY_DURATION → wall clock minus the
  duration; when a by_duration lookup finds no offset (-1: every record is older), the partition
  is reset to the latest offset (KIP-1106). The position set carries no offset epoch (no
  validation needed, as Java) and the current leader with the newer of the metadata's and the
  response's leader epoch. A result is applied only if the partition still awaits a reset with
  the same strategy (a seek in between wins). Failed resets back off per partition through
  ``SubscriptionState.request_failed`` (exponential by the partition's consecutive failures).
* NoOffsetForPartitionError is published once per new set of partitions with strategy ``none``
  (not on every poll), so the user sees it at the next poll.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from kafka_actors.errors import (
    NO_ERROR,
    FatalConsumerError,
    KafkaError,
    KafkaTimeoutError,
    LogTruncationError,
    NoOffsetForPartitionError,
    TopicAuthorizationFailedError,
    UnsupportedForMessageFormatError,
    error_class_for_code,
    error_for_code,
)
from kafka_actors.log import get_logger
from kafka_actors.protocol.messages import PollResult, TopicPartition, UnsentRequest
from kafka_actors.protocol.metadata import EMPTY_CLUSTER, Cluster
from kafka_actors.protocol.records.decode import IsolationLevel
from kafka_actors.protocol.request_state import Outbox, retry_backoff
from kafka_actors.protocol.subscription import (
    FetchPosition,
    LeaderAndEpoch,
    OffsetResetStrategy,
    ResetKind,
    SubscriptionState,
    ValidationOutcome,
)
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.protocol.wire.requests import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    list_offsets_request,
    offset_for_leader_epoch_request,
)

if TYPE_CHECKING:
    from kafka_actors.config import ConsumerConfig
    from kafka_actors.protocol.wire.versions import NegotiatedVersions

__all__ = [
    "ListOffsetsCompleted",
    "LookupKind",
    "MetadataUpdateNeeded",
    "OffsetAndTimestamp",
    "OffsetsConfig",
    "OffsetsManager",
    "PositionsValidated",
    "ResetPositionsError",
]

_UNKNOWN_OFFSET: Final = -1


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    """An offset with the timestamp of its record and the leader epoch (Java's type)."""

    offset: int
    timestamp: int
    leader_epoch: int | None = None


class LookupKind:
    BEGINNING: Final = "beginning_offsets"
    END: Final = "end_offsets"
    TIMES: Final = "offsets_for_times"


# -- Events ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListOffsetsCompleted:
    """A lookup finished. ``result`` maps each partition asked for to its OffsetAndTimestamp,
    or None when there is none (offsets_for_times past the last record, or a message format
    without timestamps); ``error`` is set instead on failure (KafkaTimeoutError at the
    deadline)."""

    request_key: int
    kind: str
    result: Mapping[TopicPartition, OffsetAndTimestamp | None] | None = None
    error: KafkaError | None = None

    @property
    def offsets(self) -> dict[TopicPartition, int | None]:
        """The offsets alone (beginning_offsets / end_offsets results)."""
        if self.result is None:
            return {}
        return {tp: None if v is None else v.offset for tp, v in self.result.items()}


@dataclass(frozen=True, slots=True)
class MetadataUpdateNeeded:
    """Leaders are unknown or moved for these topics: refresh metadata."""

    reason: str
    topics: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class PositionsValidated:
    """Positions became fetchable without a request (validation completed here: the broker
    has no usable OffsetsForLeaderEpoch, or there is no epoch to validate against): the
    fetch manager must be told, as after a response."""

    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ResetPositionsError:
    """Resetting positions failed in a way the user must see at the next poll."""

    error: KafkaError


# -- Configuration -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetsConfig:
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED  # isolation.level
    retry_backoff_ms: int = 100  # retry.backoff.ms
    retry_backoff_max_ms: int = 1_000  # retry.backoff.max.ms
    request_timeout_ms: int = 30_000  # request.timeout.ms (also the ListOffsets v10+ timeout)

    @classmethod
    def from_consumer_config(cls, config: ConsumerConfig) -> OffsetsConfig:
        return cls(
            isolation_level=(
                IsolationLevel.READ_COMMITTED
                if config.isolation_level == "read_committed"
                else IsolationLevel.READ_UNCOMMITTED
            ),
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
            request_timeout_ms=config.request_timeout_ms,
        )


# -- Internal state ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Lookup:
    key: int
    kind: str
    timestamps: dict[TopicPartition, int]
    deadline_ms: int
    results: dict[TopicPartition, OffsetAndTimestamp | None] = field(default_factory=dict)
    in_flight: set[TopicPartition] = field(default_factory=set)
    attempts: int = 0
    next_retry_ms: int = 0

    def remaining(self) -> list[TopicPartition]:
        return [tp for tp in self.timestamps if tp not in self.results]


@dataclass(frozen=True, slots=True)
class _Sent:
    node: int
    timestamps: Mapping[TopicPartition, int]
    lookup_key: int | None  # None: a reset
    strategies: Mapping[TopicPartition, OffsetResetStrategy] = field(
        default_factory=lambda: MappingProxyType({})
    )


@dataclass(frozen=True, slots=True)
class _SentValidation:
    """An OffsetsForLeaderEpoch in flight: the positions it validates."""

    node: int
    positions: Mapping[TopicPartition, FetchPosition]


class OffsetsManager:
    """ListOffsets lookups and position resets (see the module docstring).

    A little over 600 lines: user lookups (offsetsForTimes, beginning/end offsets), position
    resets and position validation (OffsetsForLeaderEpoch) share the per-leader batching,
    the retry backoff and the metadata-refresh requests, as Java's ``OffsetsRequestManager``.
    """

    def __init__(
        self,
        config: OffsetsConfig,
        versions: NegotiatedVersions,
        subscription: SubscriptionState,
        *,
        random: Callable[[], float],
        wall_clock_ms: Callable[[], int],
        client_id: str | None = None,
    ) -> None:
        self._config = config
        self._versions = versions
        self._subscription = subscription
        self._wall_clock_ms = wall_clock_ms
        self._backoff = retry_backoff(config, random)
        self._log = get_logger("offsets", client_id=client_id)
        self._outbox = Outbox()
        self._cluster = EMPTY_CLUSTER
        self._lookups: dict[int, _Lookup] = {}
        self._in_flight: dict[int, _Sent] = {}
        self._resets_in_flight: set[TopicPartition] = set()
        self._validations: dict[int, _SentValidation] = {}
        self._validation_attempts: dict[TopicPartition, int] = {}
        self._reset_attempts: dict[TopicPartition, int] = {}
        # by_duration partitions whose lookup found no offset: reset to latest next.
        self._duration_fallback: set[TopicPartition] = set()
        self._reported_no_reset: frozenset[TopicPartition] = frozenset()
        self._refresh_requested_for: frozenset[str] = frozenset()

    # -- Observability ------------------------------------------------------------------------

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    @property
    def pending_lookups(self) -> int:
        return len(self._lookups)

    @property
    def requests_in_flight(self) -> int:
        return len(self._in_flight) + len(self._validations)

    # -- Inputs --------------------------------------------------------------------------------

    def set_versions(self, versions: NegotiatedVersions) -> None:
        self._versions = versions

    def on_cluster_updated(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._refresh_requested_for = frozenset()
        # A leader (epoch) change puts positions with an offset epoch awaiting validation
        # (the fetch manager does the same with the same snapshot; whichever comes first).
        for tp in self._subscription.assigned_partitions():
            found = cluster.leader_for(tp)
            if found is not None:
                self._subscription.update_current_leader(tp, LeaderAndEpoch(found[0], found[1]))

    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], deadline_ms: int, now_ms: int
    ) -> int:
        return self._add_lookup(
            LookupKind.BEGINNING,
            dict.fromkeys(partitions, EARLIEST_TIMESTAMP),
            deadline_ms,
            now_ms,
        )

    def end_offsets(
        self, partitions: Iterable[TopicPartition], deadline_ms: int, now_ms: int
    ) -> int:
        return self._add_lookup(
            LookupKind.END, dict.fromkeys(partitions, LATEST_TIMESTAMP), deadline_ms, now_ms
        )

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], deadline_ms: int, now_ms: int
    ) -> int:
        """Earliest offset whose record timestamp is at or after each timestamp (ms since the
        epoch, >= 0)."""
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"The target time for partition {tp} is {ts}; it must be >= 0")
        return self._add_lookup(LookupKind.TIMES, dict(timestamps), deadline_ms, now_ms)

    def _add_lookup(
        self, kind: str, timestamps: dict[TopicPartition, int], deadline_ms: int, now_ms: int
    ) -> int:
        key = self._outbox.new_id()
        lookup = _Lookup(key, kind, timestamps, deadline_ms)
        self._lookups[key] = lookup
        if not timestamps:
            self._finish(lookup)
        else:
            self._expire(now_ms)
        return key

    # -- Request-manager contract -------------------------------------------------------------

    def poll(self, now_ms: int) -> PollResult:
        self._expire(now_ms)
        requests = (
            self._poll_lookups(now_ms) + self._poll_resets(now_ms) + self._poll_validations(now_ms)
        )
        events = self._outbox.drain()
        return PollResult(
            requests=requests,
            time_until_next_poll_ms=self._time_until_next_poll(now_ms),
            events=events,
        )

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        validation = self._validations.pop(request_id, None)
        if validation is not None:
            self._on_validation_response(validation, response, now_ms)
            return
        sent = self._in_flight.pop(request_id, None)
        if sent is None:
            return
        answers: dict[TopicPartition, Any] = {}
        for topic in response.topics:
            for p in topic.partitions:
                answers[TopicPartition(str(topic.name), int(p.partition_index))] = p
        if sent.lookup_key is None:
            self._on_reset_response(sent, answers, now_ms)
        else:
            self._on_lookup_response(sent, answers, now_ms)

    def on_failure(self, request_id: int, error: BaseException, now_ms: int) -> None:
        validation = self._validations.pop(request_id, None)
        if validation is not None:
            self._on_validation_failure(validation, error, now_ms)
            return
        sent = self._in_flight.pop(request_id, None)
        if sent is None:
            return
        typed = (
            error
            if isinstance(error, KafkaError)
            else FatalConsumerError(f"ListOffsets failed: {error!r}")
        )
        self._log.info("list_offsets_failed", node=sent.node, error=repr(typed))
        partitions = list(sent.timestamps)
        if typed.retriable:
            self._need_metadata("ListOffsets request failed", partitions)
        if sent.lookup_key is None:
            self._resets_in_flight.difference_update(partitions)
            self._reset_failed(partitions, now_ms)
            if not typed.retriable:
                self._outbox.publish(ResetPositionsError(typed))
            return
        lookup = self._lookups.get(sent.lookup_key)
        if lookup is None:
            return
        lookup.in_flight.difference_update(partitions)
        if typed.retriable:
            self._lookup_retry_later(lookup, now_ms)
        else:
            self._finish(lookup, error=typed)

    # -- Lookups -------------------------------------------------------------------------------

    def _poll_lookups(self, now_ms: int) -> tuple[UnsentRequest, ...]:
        requests: list[UnsentRequest] = []
        for lookup in list(self._lookups.values()):
            if now_ms < lookup.next_retry_ms:
                continue
            todo = {
                tp: lookup.timestamps[tp] for tp in lookup.remaining() if tp not in lookup.in_flight
            }
            if not todo:
                continue
            try:
                batch = self._build_requests(todo, lookup_key=lookup.key)
            except KafkaError as exc:
                self._finish(lookup, error=exc)
                continue
            for request in batch:
                lookup.in_flight.update(self._in_flight[request.request_id].timestamps)
            requests.extend(batch)
        return tuple(requests)

    def _on_lookup_response(
        self, sent: _Sent, answers: Mapping[TopicPartition, Any], now_ms: int
    ) -> None:
        assert sent.lookup_key is not None
        lookup = self._lookups.get(sent.lookup_key)
        if lookup is None:
            return  # finished (deadline) meanwhile
        lookup.in_flight.difference_update(sent.timestamps)
        retry: list[TopicPartition] = []
        for tp in sent.timestamps:
            p = answers.get(tp)
            if p is None:
                retry.append(tp)
                continue
            code = int(p.error_code)
            if code == NO_ERROR:
                lookup.results[tp] = _offset_and_timestamp(p)
            elif code == UnsupportedForMessageFormatError.code:
                lookup.results[tp] = None
            elif _retriable(code):
                self._log.debug("list_offsets_partition_retriable", partition=str(tp), code=code)
                retry.append(tp)
            else:
                self._finish(lookup, error=_partition_error(code, tp))
                return
        if retry:
            self._need_metadata("ListOffsets: leader moved or unknown", retry)
            self._lookup_retry_later(lookup, now_ms)
        elif not lookup.remaining():
            self._finish(lookup)

    def _lookup_retry_later(self, lookup: _Lookup, now_ms: int) -> None:
        lookup.next_retry_ms = now_ms + self._backoff.backoff(lookup.attempts)
        lookup.attempts += 1

    def _expire(self, now_ms: int) -> None:
        for lookup in list(self._lookups.values()):
            if now_ms >= lookup.deadline_ms and lookup.remaining():
                missing = sorted(lookup.remaining())
                named = ", ".join(str(tp) for tp in missing)
                single = missing[0] if len(missing) == 1 else None
                self._finish(
                    lookup,
                    error=KafkaTimeoutError(
                        f"Failed to get offsets ({lookup.kind}) before the deadline for "
                        f"partitions: {named}",
                        topic=None if single is None else single.topic,
                        partition=None if single is None else single.partition,
                    ),
                )

    def _finish(self, lookup: _Lookup, *, error: KafkaError | None = None) -> None:
        if self._lookups.pop(lookup.key, None) is None:
            return
        for request_id in [k for k, s in self._in_flight.items() if s.lookup_key == lookup.key]:
            # Responses to these are ignored from now on.
            del self._in_flight[request_id]
        if error is not None:
            self._log.info("list_offsets_lookup_failed", kind=lookup.kind, error=repr(error))
            self._outbox.publish(ListOffsetsCompleted(lookup.key, lookup.kind, error=error))
            return
        result = {tp: lookup.results.get(tp) for tp in lookup.timestamps}
        self._outbox.publish(
            ListOffsetsCompleted(lookup.key, lookup.kind, result=MappingProxyType(result))
        )

    # -- Resets --------------------------------------------------------------------------------

    def _poll_resets(self, now_ms: int) -> tuple[UnsentRequest, ...]:
        needing = [
            tp
            for tp in self._subscription.partitions_needing_reset(now_ms)
            if tp not in self._resets_in_flight
        ]
        no_reset: list[TopicPartition] = []
        todo: dict[TopicPartition, int] = {}
        strategies: dict[TopicPartition, OffsetResetStrategy] = {}
        wall_ms: int | None = None
        for tp in needing:
            strategy = self._subscription.reset_strategy(tp)
            if strategy is None:
                continue
            if strategy.kind is ResetKind.NONE:
                no_reset.append(tp)
                continue
            if tp in self._duration_fallback:
                timestamp = LATEST_TIMESTAMP
            else:
                if wall_ms is None:
                    wall_ms = self._wall_clock_ms()
                timestamp = strategy.timestamp_ms(wall_ms)
            todo[tp] = timestamp
            strategies[tp] = strategy
        self._report_no_reset(no_reset)
        if not todo:
            return ()
        try:
            requests = self._build_requests(todo, lookup_key=None, strategies=strategies)
        except KafkaError as exc:
            self._reset_failed(list(todo), now_ms)
            self._outbox.publish(ResetPositionsError(exc))
            return ()
        for request in requests:
            self._resets_in_flight.update(self._in_flight[request.request_id].timestamps)
        return tuple(requests)

    def _report_no_reset(self, partitions: list[TopicPartition]) -> None:
        current = frozenset(partitions)
        new = current - self._reported_no_reset
        self._reported_no_reset = current
        if new:
            listed = sorted(current)
            self._log.info("no_offset_reset_policy", partitions=[str(tp) for tp in listed])
            self._outbox.publish(
                ResetPositionsError(
                    NoOffsetForPartitionError(
                        partitions=[(tp.topic, tp.partition) for tp in listed]
                    )
                )
            )

    def _on_reset_response(
        self, sent: _Sent, answers: Mapping[TopicPartition, Any], now_ms: int
    ) -> None:
        self._resets_in_flight.difference_update(sent.timestamps)
        failed: list[TopicPartition] = []
        refresh: list[TopicPartition] = []
        for tp, timestamp in sent.timestamps.items():
            strategy = sent.strategies[tp]
            p = answers.get(tp)
            if p is None:
                failed.append(tp)
                refresh.append(tp)
                continue
            code = int(p.error_code)
            if code == NO_ERROR:
                found = _offset_and_timestamp(p)
                if found is None:
                    if strategy.kind is ResetKind.BY_DURATION and timestamp != LATEST_TIMESTAMP:
                        # No record that recent: reset to the latest offset (KIP-1106).
                        self._duration_fallback.add(tp)
                        continue
                    failed.append(tp)
                    continue
                self._apply_reset(tp, found, strategy)
            elif _retriable(code):
                failed.append(tp)
                refresh.append(tp)
            else:
                failed.append(tp)
                self._outbox.publish(ResetPositionsError(_partition_error(code, tp)))
        if refresh:
            self._need_metadata("offset reset: leader moved or unknown", refresh)
        if failed:
            self._reset_failed(failed, now_ms)

    def _apply_reset(
        self, tp: TopicPartition, found: OffsetAndTimestamp, strategy: OffsetResetStrategy
    ) -> None:
        self._duration_fallback.discard(tp)
        self._reset_attempts.pop(tp, None)
        leader = self._cluster.leader_for(tp)
        node = None if leader is None else leader[0]
        epochs = [
            e for e in (None if leader is None else leader[1], found.leader_epoch) if e is not None
        ]
        position = FetchPosition(
            found.offset,
            offset_epoch=None,
            current_leader=LeaderAndEpoch(node, max(epochs) if epochs else None),
        )
        applied = self._subscription.maybe_seek_unvalidated(tp, position, strategy)
        self._log.info(
            "position_reset",
            partition=str(tp),
            offset=found.offset,
            strategy=strategy.kind.value,
            applied=applied,
        )

    def _reset_failed(self, partitions: list[TopicPartition], now_ms: int) -> None:
        for tp in partitions:
            attempts = self._reset_attempts.get(tp, 0)
            self._reset_attempts[tp] = attempts + 1
            self._subscription.request_failed([tp], now_ms + self._backoff.backoff(attempts))

    # -- Validation (KIP-320) ------------------------------------------------------------------

    def _poll_validations(self, now_ms: int) -> tuple[UnsentRequest, ...]:
        """OffsetsForLeaderEpoch for positions awaiting validation, one request per leader
        (Java's ``validatePositionsIfNeeded``)."""
        subs = self._subscription
        in_flight = {tp for v in self._validations.values() for tp in v.positions}
        needing = [tp for tp in subs.partitions_needing_validation(now_ms) if tp not in in_flight]
        if not needing:
            return ()
        if not self._versions.supports(ApiKey.OFFSET_FOR_LEADER_EPOCH):
            # A broker without a usable OffsetsForLeaderEpoch: no truncation detection.
            self._validated_here([tp for tp in needing if subs.complete_validation(tp)])
            return ()
        by_node: dict[int, dict[TopicPartition, FetchPosition]] = {}
        no_leader: list[TopicPartition] = []
        validated: list[TopicPartition] = []
        for tp in needing:
            position = subs.position(tp)
            if position is None:
                continue
            if position.current_leader.leader is None or position.current_leader.epoch is None:
                found = self._cluster.leader_for(tp)
                if found is not None and found[1] is not None:
                    subs.update_current_leader(tp, LeaderAndEpoch(found[0], found[1]))
                    position = subs.position(tp)
                    if position is None:
                        continue
            leader = position.current_leader
            if leader.leader is None:
                no_leader.append(tp)
                continue
            if position.offset_epoch is None or leader.epoch is None:
                # Nothing to validate against (Java: seekValidated).
                if subs.complete_validation(tp):
                    validated.append(tp)
                continue
            by_node.setdefault(leader.leader, {})[tp] = position
        self._validated_here(validated)
        if no_leader:
            self._need_metadata("offset validation: no known leader", no_leader)
        if not by_node:
            return ()
        version = self._versions.version_for(ApiKey.OFFSET_FOR_LEADER_EPOCH)
        requests: list[UnsentRequest] = []
        for node, positions in sorted(by_node.items()):
            request = offset_for_leader_epoch_request(
                version,
                epochs={
                    tp: (
                        p.offset_epoch if p.offset_epoch is not None else -1,
                        p.current_leader.epoch if p.current_leader.epoch is not None else -1,
                    )
                    for tp, p in positions.items()
                },
            )
            request_id = self._outbox.new_id()
            self._validations[request_id] = _SentValidation(node, MappingProxyType(dict(positions)))
            # Not again before the answer or the request's timeout (Java's
            # setNextAllowedRetry); completion clears it.
            subs.set_next_allowed_retry(positions, now_ms + self._config.request_timeout_ms)
            self._log.debug(
                "validate_positions",
                node=node,
                positions={str(tp): (p.offset, p.offset_epoch) for tp, p in positions.items()},
            )
            requests.append(
                UnsentRequest(
                    node=node,
                    request=request,
                    request_id=request_id,
                    timeout_ms=self._config.request_timeout_ms,
                )
            )
        return tuple(requests)

    def _validated_here(self, partitions: list[TopicPartition]) -> None:
        if partitions:
            self._outbox.publish(PositionsValidated(tuple(partitions)))

    def _on_validation_response(self, sent: _SentValidation, response: Any, now_ms: int) -> None:
        answers: dict[TopicPartition, Any] = {}
        for topic in response.topics:
            for p in topic.partitions:
                answers[TopicPartition(str(topic.topic), int(p.partition))] = p
        subs = self._subscription
        retry: list[TopicPartition] = []
        truncated: dict[TopicPartition, tuple[FetchPosition, int, int]] = {}
        no_offset: list[TopicPartition] = []
        for tp, position in sent.positions.items():
            p = answers.get(tp)
            if p is None:
                retry.append(tp)
                continue
            code = int(p.error_code)
            if code != NO_ERROR:
                if _retriable(code):
                    self._log.debug("validate_partition_retriable", partition=str(tp), code=code)
                    retry.append(tp)
                else:
                    self._validation_failed([tp], now_ms)
                    self._outbox.publish(ResetPositionsError(_partition_error(code, tp)))
                continue
            end_epoch, end_offset = int(p.leader_epoch), int(p.end_offset)
            outcome = subs.maybe_complete_validation(tp, position, end_epoch, end_offset)
            self._log.info(
                "position_validated",
                partition=str(tp),
                offset=position.offset,
                offset_epoch=position.offset_epoch,
                end_offset=end_offset,
                end_epoch=end_epoch,
                outcome=outcome.value,
            )
            self._validation_attempts.pop(tp, None)
            if outcome is ValidationOutcome.TRUNCATED:
                truncated[tp] = (position, end_offset, end_epoch)
            elif outcome is ValidationOutcome.NO_OFFSET:
                no_offset.append(tp)
        if retry:
            self._need_metadata("offset validation: leader moved or unknown", retry)
            self._validation_failed(retry, now_ms)
        if truncated:
            self._outbox.publish(
                ResetPositionsError(
                    LogTruncationError(
                        fetch_offsets={
                            (tp.topic, tp.partition): v[0].offset for tp, v in truncated.items()
                        },
                        divergent_offsets={
                            (tp.topic, tp.partition): (v[1], v[2]) for tp, v in truncated.items()
                        },
                    )
                )
            )
        if no_offset:
            self._outbox.publish(
                ResetPositionsError(
                    NoOffsetForPartitionError(
                        partitions=[(tp.topic, tp.partition) for tp in sorted(no_offset)]
                    )
                )
            )

    def _on_validation_failure(
        self, sent: _SentValidation, error: BaseException, now_ms: int
    ) -> None:
        typed = (
            error
            if isinstance(error, KafkaError)
            else FatalConsumerError(f"OffsetsForLeaderEpoch failed: {error!r}")
        )
        self._log.info("validate_positions_failed", node=sent.node, error=repr(typed))
        partitions = list(sent.positions)
        if typed.retriable:
            self._need_metadata("OffsetsForLeaderEpoch request failed", partitions)
        self._validation_failed(partitions, now_ms)
        if not typed.retriable:
            self._outbox.publish(ResetPositionsError(typed))

    def _validation_failed(self, partitions: list[TopicPartition], now_ms: int) -> None:
        for tp in partitions:
            attempts = self._validation_attempts.get(tp, 0)
            self._validation_attempts[tp] = attempts + 1
            self._subscription.request_failed([tp], now_ms + self._backoff.backoff(attempts))

    # -- Shared --------------------------------------------------------------------------------

    def _build_requests(
        self,
        timestamps: Mapping[TopicPartition, int],
        *,
        lookup_key: int | None,
        strategies: Mapping[TopicPartition, OffsetResetStrategy] | None = None,
    ) -> list[UnsentRequest]:
        """One ListOffsets per leader; partitions without a known leader ask for metadata."""
        by_node: dict[int, dict[TopicPartition, int]] = {}
        epochs: dict[TopicPartition, int] = {}
        no_leader: list[TopicPartition] = []
        for tp, ts in timestamps.items():
            leader = self._cluster.leader_for(tp)
            if leader is None:
                no_leader.append(tp)
                continue
            node, epoch = leader
            by_node.setdefault(node, {})[tp] = ts
            if epoch is not None:
                epochs[tp] = epoch
        if no_leader:
            self._need_metadata("ListOffsets: no known leader", no_leader)
        if not by_node:
            return []
        version = self._versions.version_for(ApiKey.LIST_OFFSETS)
        requests: list[UnsentRequest] = []
        for node, node_timestamps in sorted(by_node.items()):
            request = list_offsets_request(
                version,
                timestamps=node_timestamps,
                isolation_level=int(self._config.isolation_level),
                current_leader_epochs={tp: epochs[tp] for tp in node_timestamps if tp in epochs},
                timeout_ms=self._config.request_timeout_ms,
            )
            request_id = self._outbox.new_id()
            self._in_flight[request_id] = _Sent(
                node=node,
                timestamps=MappingProxyType(dict(node_timestamps)),
                lookup_key=lookup_key,
                strategies=MappingProxyType(
                    {tp: strategies[tp] for tp in node_timestamps} if strategies else {}
                ),
            )
            requests.append(
                UnsentRequest(
                    node=node,
                    request=request,
                    request_id=request_id,
                    timeout_ms=self._config.request_timeout_ms,
                )
            )
        return requests

    def _need_metadata(self, reason: str, partitions: Iterable[TopicPartition]) -> None:
        topics = frozenset(tp.topic for tp in partitions)
        if not topics or topics <= self._refresh_requested_for:
            return  # asked already since the last cluster update
        self._refresh_requested_for |= topics
        self._outbox.publish(MetadataUpdateNeeded(reason, topics))

    def _time_until_next_poll(self, now_ms: int) -> int | None:
        candidates: list[int] = []
        for lookup in self._lookups.values():
            candidates.append(lookup.deadline_ms - now_ms)
            if lookup.next_retry_ms > now_ms and any(
                tp not in lookup.in_flight for tp in lookup.remaining()
            ):
                candidates.append(lookup.next_retry_ms - now_ms)
        for tp in self._subscription.assigned_partitions():
            if tp in self._resets_in_flight:
                continue
            state = self._subscription.partition_state(tp)
            if (
                state is not None
                and (state.awaiting_reset or state.awaiting_validation)
                and state.next_retry_time_ms
            ):
                candidates.append(state.next_retry_time_ms - now_ms)
        return max(0, min(candidates)) if candidates else None


def _offset_and_timestamp(p: Any) -> OffsetAndTimestamp | None:
    offset = int(p.offset)
    if offset == _UNKNOWN_OFFSET:
        return None
    raw_epoch = getattr(p, "leader_epoch", -1)
    epoch = None if raw_epoch is None or int(raw_epoch) < 0 else int(raw_epoch)
    return OffsetAndTimestamp(offset, int(p.timestamp), epoch)


def _retriable(code: int) -> bool:
    cls = error_class_for_code(code)
    return cls is not None and cls.retriable


def _partition_error(code: int, tp: TopicPartition) -> KafkaError:
    if code == TopicAuthorizationFailedError.code:
        return TopicAuthorizationFailedError(
            f"Not authorized to list offsets of topic {tp.topic!r}", topic=tp.topic
        )
    return error_for_code(code, topic=tp.topic, partition=tp.partition)
