"""Committed offsets fetched from the group coordinator: the OffsetFetch requests of the commit
manager, as an object it composes.

Owns: the OffsetFetch requests of :meth:`~OffsetFetchRequests.fetch_committed` (``committed()``)
and :meth:`~OffsetFetchRequests.initialize_positions` (partitions that need a position), with
their waiters, retries, deadlines and requests in flight, their answers
(:class:`CommittedOffsetsFetched`, :class:`PositionsInitialized`) and the log lines of their
lasting failures. It is what Java's ``CommitRequestManager`` keeps beside its commit request
states as ``OffsetFetchRequestState`` objects;
:class:`~kafka_actors.protocol.offsets.commit.CommitManager` builds one, hands it the coordinator
link and the outbox it shares with the commits, and routes inputs, answers, failures and deadlines
to it. The choices (retries, shared identical fetches, positions) are in that module's docstring.

May touch: the shared :class:`SubscriptionState` (seek partitions to their committed offsets,
ask for an offset reset); the :class:`~kafka_actors.protocol.offsets.config.CoordinatorLink`
(reads the member and the coordinator, makes the coordinator unknown); the
:class:`~kafka_actors.protocol.request_state.Outbox` (publishes its answers, takes request ids).
Nothing else. Pure, like the commit manager: the time is ``now_ms`` given by the caller.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kafka_actors.errors import (
    CoordinatorNotAvailableError,
    GroupAuthorizationFailedError,
    InvalidRequestError,
    KafkaError,
    NoOffsetForPartitionError,
    NotCoordinatorError,
    StaleMemberEpochError,
    TopicAuthorizationFailedError,
    UnstableOffsetCommitError,
    error_for_code,
)
from kafka_actors.protocol.condition_log import ConditionLog
from kafka_actors.protocol.messages import (
    OffsetAndMetadata,
    TopicPartition,
    UnsentRequest,
)
from kafka_actors.protocol.offsets.config import (
    TOPIC_ID_VERSION,
    CommitConfig,
    CoordinatorLink,
    deadline_timeout,
    describe_offsets,
    topic_name,
    trace_of,
)
from kafka_actors.protocol.request_state import Outbox, RetriedRequest
from kafka_actors.protocol.subscription import FetchPosition, FetchState, SubscriptionState
from kafka_actors.protocol.wire.requests import offset_fetch_request

if TYPE_CHECKING:
    from kafka_actors.protocol.request_state import ExponentialBackoff

__all__ = ["CommittedOffsetsFetched", "OffsetFetchRequests", "PositionsInitialized"]


@dataclass(frozen=True, slots=True)
class CommittedOffsetsFetched:
    """The committed offsets of ``fetch_committed``: None for a partition without one."""

    request_key: Hashable
    offsets: Mapping[TopicPartition, OffsetAndMetadata | None]
    error: KafkaError | None


@dataclass(frozen=True, slots=True)
class PositionsInitialized:
    """``initialize_positions`` is over: ``seeked`` got their committed offset, ``reset`` were
    marked for ``auto.offset.reset`` (both empty on error or when nothing needed a position)."""

    request_key: Hashable
    seeked: Mapping[TopicPartition, OffsetAndMetadata]
    reset: frozenset[TopicPartition]
    error: KafkaError | None


@dataclass(slots=True)
class _Waiter:
    request_key: Hashable
    deadline_ms: int
    trace_id: str | None
    init_positions: bool


@dataclass(slots=True)
class _Fetch(RetriedRequest):
    partitions: frozenset[TopicPartition]
    member: tuple[str, int | None]
    waiters: list[_Waiter]
    deadline_ms: int
    topic_names: dict[uuid.UUID, str] = field(default_factory=dict)
    init_positions: bool = False  # apply the answer to the positions, even after the deadline

    @property
    def trace_id(self) -> str | None:
        return next((w.trace_id for w in self.waiters if w.trace_id), None)


class OffsetFetchRequests:
    """The OffsetFetch requests of the commit manager (see the module docstring).

    Driven by its owner: the callers' :meth:`fetch_committed` and :meth:`initialize_positions`;
    each poll :meth:`expire`, then :meth:`send_due` (the requests to send) and
    :meth:`poll_delays` (when the next poll is due); the answers of the requests it sent
    (:meth:`owns` tells which) to :meth:`on_response` / :meth:`on_failure`; :meth:`close`
    and :meth:`fail_pending`. Its answers go to the outbox.
    """

    def __init__(
        self,
        config: CommitConfig,
        subscriptions: SubscriptionState,
        link: CoordinatorLink,
        outbox: Outbox,
        backoff: ExponentialBackoff,
    ) -> None:
        self._config = config
        self._subs = subscriptions
        self._link = link
        self._outbox = outbox
        self._backoff = backoff
        self._consumer_protocol = config.group_protocol == "consumer"
        # Pending fetches (identical ones shared) and those in flight, by request id.
        self._fetches: list[_Fetch] = []
        self._in_flight: dict[int, _Fetch] = {}
        #: Failures lasting since the last success (key: an error's class name), for the log.
        self._failures: ConditionLog[str] = ConditionLog()

    @property
    def _log(self) -> Any:
        return self._link.log

    @property
    def pending(self) -> int:
        """Fetches not yet completed (waiting, sent, or kept for their positions)."""
        return len(self._fetches)

    def owns(self, request_id: int) -> bool:
        """Whether ``request_id`` is an OffsetFetch of this object still in flight."""
        return request_id in self._in_flight

    def fetch_committed(
        self,
        partitions: Iterable[TopicPartition],
        deadline_ms: int,
        request_key: Hashable,
        *,
        trace_id: str | None = None,
    ) -> None:
        """Fetch the committed offsets of ``partitions``; publishes
        :class:`CommittedOffsetsFetched`."""
        wanted = frozenset(partitions)
        waiter = _Waiter(request_key, deadline_ms, trace_of(request_key, trace_id), False)
        if not wanted:
            self._outbox.publish(CommittedOffsetsFetched(request_key, {}, None))
            return
        self._add_fetch(wanted, waiter)

    def initialize_positions(
        self, deadline_ms: int, request_key: Hashable = None, *, trace_id: str | None = None
    ) -> None:
        """Give every owned partition without a position its committed offset, or mark it for
        ``auto.offset.reset``; publishes :class:`PositionsInitialized`."""
        wanted = frozenset(self._subs.initializing_partitions())
        if not wanted:
            self._outbox.publish(PositionsInitialized(request_key, {}, frozenset(), None))
            return
        waiter = _Waiter(request_key, deadline_ms, trace_of(request_key, trace_id), True)
        self._add_fetch(wanted, waiter)

    # -- Driven by the commit manager ----------------------------------------------------------

    def send_due(self, now_ms: int) -> list[UnsentRequest]:
        """The fetches due now (someone waits, no attempt in flight, backoff over), sent to the
        coordinator; nothing while it is unknown."""
        requests: list[UnsentRequest] = []
        if self._link.coordinator is None:
            return requests
        for fetch in self._fetches:
            if fetch.request_id is not None or fetch.retry_at_ms > now_ms:
                continue
            if not fetch.waiters:
                continue
            request = self._send_fetch(fetch, now_ms)
            if request is not None:
                requests.append(request)
        return requests

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        fetch = self._in_flight.pop(request_id)
        fetch.request_id = None
        self._on_fetch_response(fetch, response, now_ms)

    def on_failure(self, request_id: int, error: KafkaError, now_ms: int) -> None:
        """The request failed without an answer (``error`` as typed by
        :meth:`CoordinatorLink.request_failed`)."""
        fetch = self._in_flight.pop(request_id)
        fetch.request_id = None
        self._log.info("offset_fetch_failed", error=repr(error), attempts=fetch.attempts)
        self._fetch_attempt_failed(fetch, error, now_ms, retry=error.retriable)

    def expire(self, now_ms: int) -> None:
        """Callers whose deadline passed get a timeout."""
        for fetch in list(self._fetches):
            expired = [w for w in fetch.waiters if now_ms >= w.deadline_ms]
            if not expired:
                continue
            cause = fetch.last_error
            if cause is None and fetch.request_id is None and self._link.coordinator is None:
                cause = CoordinatorNotAvailableError("The group coordinator is not known")
            error = deadline_timeout(cause, "Offset fetch")
            for waiter in expired:
                fetch.waiters.remove(waiter)
                self._emit_fetch_result(waiter, fetch.partitions, None, error, {}, ())
            if not fetch.waiters and (not fetch.init_positions or fetch.request_id is None):
                # Nobody waits any more. A fetch for positions in flight is kept: its answer
                # is still applied when it arrives.
                self._fetches.remove(fetch)
                if fetch.request_id is not None:
                    self._in_flight.pop(fetch.request_id, None)
                    fetch.request_id = None

    def poll_delays(self, now_ms: int) -> list[int]:
        """Milliseconds from ``now_ms`` to each deadline and retry ahead."""
        delays: list[int] = []
        for fetch in self._fetches:
            delays.extend(w.deadline_ms - now_ms for w in fetch.waiters)
            if fetch.request_id is None and self._link.coordinator is not None and fetch.waiters:
                delays.append(fetch.retry_at_ms - now_ms)
        return delays

    def close(self, deadline_ms: int) -> None:
        """The consumer is closing: no caller waits past ``deadline_ms``."""
        for fetch in self._fetches:
            fetch.deadline_ms = min(fetch.deadline_ms, deadline_ms)
            for waiter in fetch.waiters:
                waiter.deadline_ms = min(waiter.deadline_ms, deadline_ms)

    def fail_pending(self, error: KafkaError) -> None:
        """Fail every pending fetch with ``error``; requests in flight are abandoned."""
        for fetch in list(self._fetches):
            self._complete_fetch(fetch, None, error)
        self._in_flight.clear()

    # -- Building, sending, answers ------------------------------------------------------------

    def _add_fetch(self, partitions: frozenset[TopicPartition], waiter: _Waiter) -> None:
        member = self._link.member_key()
        for fetch in self._fetches:
            if fetch.partitions == partitions and fetch.member == member:
                self._log.debug(
                    "offset_fetch_deduplicated",
                    partitions=sorted(str(tp) for tp in partitions),
                    in_flight=fetch.request_id is not None,
                )
                fetch.waiters.append(waiter)
                fetch.deadline_ms = max(fetch.deadline_ms, waiter.deadline_ms)
                fetch.init_positions = fetch.init_positions or waiter.init_positions
                return
        self._fetches.append(
            _Fetch(
                partitions,
                member,
                [waiter],
                waiter.deadline_ms,
                init_positions=waiter.init_positions,
            )
        )

    def _send_fetch(self, fetch: _Fetch, now_ms: int) -> UnsentRequest | None:
        assert self._link.coordinator is not None
        version = self._config.offset_fetch_version
        if version >= TOPIC_ID_VERSION and not self._link.all_topic_ids_known(fetch.partitions):
            version = TOPIC_ID_VERSION - 1
        member_id: str | None = None
        member_epoch = -1
        if self._consumer_protocol and self._link.member_epoch is not None and version >= 9:
            member_id, member_epoch = self._link.member_id, self._link.member_epoch
        try:
            request = offset_fetch_request(
                version,
                group_id=self._config.group_id,
                partitions=sorted(fetch.partitions),
                require_stable=version >= 7,
                member_id=member_id,
                member_epoch=member_epoch,
                topic_ids=self._link.topic_ids,
            )
        except KafkaError as exc:
            self._complete_fetch(fetch, None, exc, now_ms=now_ms)
            return None
        fetch.topic_names = (
            {self._link.topic_ids[tp.topic]: tp.topic for tp in fetch.partitions}
            if version >= TOPIC_ID_VERSION
            else {}
        )
        request_id = self._outbox.new_id()
        fetch.on_send_attempt(request_id)
        self._in_flight[request_id] = fetch
        self._log.debug(
            "offset_fetch_sent",
            request_id=request_id,
            version=version,
            attempt=fetch.attempts,
            coordinator=self._link.coordinator,
            partitions=sorted(str(tp) for tp in fetch.partitions),
            trace_id=fetch.trace_id,
        )
        return UnsentRequest(
            node=self._link.coordinator,
            request=request,
            request_id=request_id,
            trace_id=fetch.trace_id,
            timeout_ms=self._link.request_timeout(fetch.deadline_ms, now_ms),
        )

    def _on_fetch_response(self, fetch: _Fetch, response: Any, now_ms: int) -> None:
        if hasattr(response, "groups"):
            group = next((g for g in response.groups if g.group_id == self._config.group_id), None)
            if group is None:
                error: KafkaError = InvalidRequestError(
                    "OffsetFetch response does not name the group"
                )
                self._fetch_attempt_failed(fetch, error, now_ms, retry=False)
                return
            group_code = int(group.error_code)
            topics = group.topics
        else:
            group_code = int(getattr(response, "error_code", 0))
            topics = response.topics
        if group_code != 0:
            self._on_fetch_group_error(fetch, group_code, now_ms)
            return
        offsets: dict[TopicPartition, OffsetAndMetadata | None] = {}
        unauthorized: list[str] = []
        unstable: list[TopicPartition] = []
        for topic in topics:
            name = topic_name(topic, fetch.topic_names)
            for partition in topic.partitions:
                tp = TopicPartition(name, int(partition.partition_index))
                code = int(partition.error_code)
                if code == TopicAuthorizationFailedError.code:
                    if name not in unauthorized:
                        unauthorized.append(name)
                elif code == UnstableOffsetCommitError.code:
                    unstable.append(tp)
                elif code != 0:
                    error = error_for_code(code, topic=tp.topic, partition=tp.partition)
                    self._log.info("offset_fetch_partition_error", partition=str(tp), code=code)
                    self._fetch_attempt_failed(fetch, error, now_ms, retry=False)
                    return
                elif int(partition.committed_offset) >= 0:
                    epoch = int(getattr(partition, "committed_leader_epoch", -1))
                    offsets[tp] = OffsetAndMetadata(
                        int(partition.committed_offset),
                        partition.metadata or "",
                        None if epoch < 0 else epoch,
                    )
                else:
                    offsets[tp] = None
        if unauthorized:
            error = TopicAuthorizationFailedError(
                f"Not authorized to fetch committed offsets of topics {sorted(unauthorized)}",
                topic=unauthorized[0] if len(unauthorized) == 1 else None,
            )
            self._fetch_attempt_failed(fetch, error, now_ms, retry=False)
            return
        if unstable:
            self._log.info(
                "offset_fetch_unstable",
                partitions=sorted(str(tp) for tp in unstable),
                note="pending transactional offsets or offsets awaiting replication",
            )
            first = unstable[0]
            error = error_for_code(
                UnstableOffsetCommitError.code, topic=first.topic, partition=first.partition
            )
            self._fetch_attempt_failed(fetch, error, now_ms, retry=True)
            return
        for tp in fetch.partitions:
            offsets.setdefault(tp, None)
        self._log.debug("offset_fetch_succeeded", offsets=describe_offsets(offsets))
        self._complete_fetch(fetch, offsets, None, now_ms=now_ms)

    def _on_fetch_group_error(self, fetch: _Fetch, code: int, now_ms: int) -> None:
        self._log.info("offset_fetch_group_error", error_code=code, attempts=fetch.attempts)
        if code in (NotCoordinatorError.code, CoordinatorNotAvailableError.code):
            self._link.mark_coordinator_unknown(f"OffsetFetch error {code}")
        if code == GroupAuthorizationFailedError.code:
            error: KafkaError = GroupAuthorizationFailedError(
                f"Not authorized to access group: {self._config.group_id}"
            )
            retry = False
        elif code == StaleMemberEpochError.code:
            error = error_for_code(code)
            retry = self._consumer_protocol and self._link.member_epoch is not None
        else:
            error = error_for_code(code)
            retry = error.retriable
        self._fetch_attempt_failed(fetch, error, now_ms, retry=retry)

    def _fetch_attempt_failed(
        self, fetch: _Fetch, error: KafkaError, now_ms: int, *, retry: bool
    ) -> None:
        fetch.last_error = error
        if not retry or not fetch.waiters:
            self._complete_fetch(fetch, None, error, now_ms=now_ms)
            return
        # A retry uses the member identity of its time; one due after every caller's deadline
        # never goes out (the callers time out at their deadlines).
        fetch.schedule_retry(now_ms, self._backoff)
        fetch.member = self._link.member_key()
        self._log.debug("offset_fetch_retry", retry_at_ms=fetch.retry_at_ms, error=repr(error))

    def _complete_fetch(
        self,
        fetch: _Fetch,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | None] | None,
        error: KafkaError | None,
        *,
        now_ms: int | None = None,
    ) -> None:
        """``now_ms`` None (failing every pending fetch at once): the error line is not
        scheduled by ``_failures`` (module ``condition_log``)."""
        if fetch in self._fetches:
            self._fetches.remove(fetch)
        if fetch.request_id is not None:
            self._in_flight.pop(fetch.request_id, None)
            fetch.request_id = None
        seeked: dict[TopicPartition, OffsetAndMetadata] = {}
        reset: set[TopicPartition] = set()
        init_error: KafkaError | None = None
        if offsets is not None and fetch.init_positions:
            seeked, reset, init_error = self._apply_positions(offsets)
        if error is not None:
            report = (
                None if now_ms is None else self._failures.occurred(type(error).__name__, now_ms)
            )
            if now_ms is None or report is not None:
                self._log.warning(
                    "offset_fetch_completed_with_error",
                    error=repr(error),
                    partitions=sorted(str(tp) for tp in fetch.partitions),
                    **(report.fields() if report is not None else {}),
                )
        elif now_ms is not None:
            for name, cleared in self._failures.cleared_all(now_ms):
                self._log.info("offset_fetch_error_cleared", error=name, **cleared.fields())
        for waiter in fetch.waiters:
            self._emit_fetch_result(
                waiter,
                fetch.partitions,
                offsets,
                error if error is not None or not waiter.init_positions else init_error,
                seeked,
                reset,
            )
        fetch.waiters.clear()

    def _emit_fetch_result(
        self,
        waiter: _Waiter,
        partitions: frozenset[TopicPartition],
        offsets: Mapping[TopicPartition, OffsetAndMetadata | None] | None,
        error: KafkaError | None,
        seeked: Mapping[TopicPartition, OffsetAndMetadata],
        reset: Iterable[TopicPartition],
    ) -> None:
        if waiter.init_positions:
            self._outbox.publish(
                PositionsInitialized(waiter.request_key, dict(seeked), frozenset(reset), error)
            )
        else:
            result = {} if offsets is None else {tp: offsets.get(tp) for tp in partitions}
            self._outbox.publish(CommittedOffsetsFetched(waiter.request_key, result, error))

    def _apply_positions(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | None]
    ) -> tuple[dict[TopicPartition, OffsetAndMetadata], set[TopicPartition], KafkaError | None]:
        seeked: dict[TopicPartition, OffsetAndMetadata] = {}
        without: set[TopicPartition] = set()
        for tp, committed in sorted(offsets.items()):
            state = self._subs.partition_state(tp)
            if state is None or state.fetch_state is not FetchState.INITIALIZING:
                continue  # no longer owned, or positioned meanwhile (a seek by the user wins)
            if committed is None:
                without.add(tp)
                continue
            self._subs.seek_unvalidated(tp, FetchPosition(committed.offset, committed.leader_epoch))
            seeked[tp] = committed
        no_reset_policy = self._subs.reset_initializing_positions(only=without.__contains__)
        reset = without - set(no_reset_policy)
        error: KafkaError | None = None
        if no_reset_policy:
            error = NoOffsetForPartitionError(
                partitions=[(tp.topic, tp.partition) for tp in sorted(no_reset_policy)]
            )
        if seeked or reset or no_reset_policy:
            self._log.info(
                "positions_initialized",
                committed=describe_offsets(seeked),
                reset=sorted(str(tp) for tp in reset),
                no_reset_policy=sorted(str(tp) for tp in no_reset_policy),
            )
        return seeked, reset, error
