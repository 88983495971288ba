"""Committed offsets of the consumer's group: the pure ``CommitManager``.

Owns: OffsetCommit and OffsetFetch requests to the group coordinator — who the member is
(member id + member epoch for the consumer protocol, member id + generation for the classic
one, neither for a standalone consumer), which node the coordinator is, commit_sync retried
until its deadline, commit_async never retried, auto-commit every ``auto.commit.interval.ms``,
the commit of all consumed positions before a revocation (:class:`CommitBeforeRevocation` in,
:class:`CommitForRevocationDone` out), the commit on close, fetching committed offsets (for
``committed()`` and for partitions that need a position), and the order in which async
commits complete. It follows the Java client's ``CommitRequestManager`` (Kafka 4.x) and, for the
classic protocol's error answers, ``ConsumerCoordinator``.

May touch: the shared :class:`SubscriptionState` (read the consumed positions, seek partitions
to their committed offsets, ask for an offset reset), nothing else. No threads, sockets or
clocks: time is ``now_ms`` (monotonic milliseconds) given by the caller; backoff jitter comes
from an injected ``random``. It builds kio OffsetCommit/OffsetFetch payloads with
:mod:`kafka_actors.protocol.wire.requests` and reads their responses; errors are
:mod:`kafka_actors.errors` classes.

How it is built: the commits are this module's; the OffsetFetch requests are an object of their
own (:class:`~kafka_actors.protocol.offsets.committed.OffsetFetchRequests`) that the manager
composes, feeds and polls, as Java's ``CommitRequestManager`` keeps its commit and OffsetFetch
request states side by side. Both read one
:class:`~kafka_actors.protocol.offsets.config.CoordinatorLink` (member, coordinator, topic ids)
and publish to one :class:`~kafka_actors.protocol.request_state.Outbox`; :class:`CommitConfig`
lives in :mod:`kafka_actors.protocol.offsets.config`, so neither module imports the other's
internals.

How it is driven (the request-manager contract of :mod:`kafka_actors.protocol.messages`):

* inputs: :meth:`CommitManager.on_member_changed` (or :meth:`~CommitManager.on_member_epoch_changed`
  with the membership manager's event), :meth:`~CommitManager.on_coordinator_changed`,
  :meth:`~CommitManager.on_topic_ids`, the application's :meth:`~CommitManager.commit_sync`,
  :meth:`~CommitManager.commit_async`, :meth:`~CommitManager.fetch_committed`,
  :meth:`~CommitManager.initialize_positions`, :meth:`~CommitManager.maybe_auto_commit_on_poll`
  (each application poll), :meth:`~CommitManager.on_commit_before_revocation`,
  :meth:`~CommitManager.commit_on_close` / :meth:`~CommitManager.close`, and the outcome of
  requests (:meth:`~CommitManager.on_response` / :meth:`~CommitManager.on_failure`);
* outputs: :meth:`CommitManager.poll` returns the requests to send now (to the coordinator's
  node id, explicitly) and the events published since the last poll, in order:
  :class:`CommitCompleted`, :class:`AutoCommitCompleted`, :class:`CommittedOffsetsFetched`,
  :class:`PositionsInitialized`, :class:`CommitForRevocationDone` and
  :class:`~kafka_actors.protocol.group.events.CoordinatorUnknown`.

Choices (Java's behaviour unless said otherwise), in one place:

* **No coordinator known**: requests wait, unsent, until :meth:`on_coordinator_changed` names a
  node (Java's ``CommitRequestManager.poll`` returns nothing without a coordinator). A sync
  commit or an offset fetch then fails at its deadline with :class:`KafkaTimeoutError` (its
  ``__cause__`` is :class:`CoordinatorNotAvailableError`). An async commit has no deadline,
  as Java 4.x's ``commitAsync`` (``Long.MAX_VALUE``): it waits for the coordinator, in order,
  until :meth:`close` bounds it with the close deadline or :meth:`fail_pending` fails it.
* **Coordinator errors** (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT,
  a disconnect or a request timeout) make the coordinator unknown here and publish
  ``CoordinatorUnknown``; requests wait for the next :meth:`on_coordinator_changed`, which the
  coordinator manager must publish after every rediscovery (even of the same node).
* **commit_sync** retries every retriable error (COORDINATOR_LOAD_IN_PROGRESS, the coordinator
  errors above, UNKNOWN_TOPIC_OR_PARTITION, disconnects, any other ``RetriableError``) with
  exponential backoff (``retry.backoff.ms`` x2 up to ``retry.backoff.max.ms``, jitter 0.2)
  until its deadline, then fails with :class:`KafkaTimeoutError` whose ``__cause__`` is the
  last error. The attempt in flight at the deadline is abandoned (its answer is ignored).
* **Non-retriable commit answers**: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_MEMBER_EPOCH
  and STALE_MEMBER_EPOCH → :class:`CommitFailedError` (Java 4.x fails a user commit on a stale
  member epoch with ``CommitFailedException``; only the auto-commit before a revocation retries
  it, while the member has an epoch, rebuilding the request with the newest epoch);
  REBALANCE_IN_PROGRESS → :class:`RebalanceInProgressError`; FENCED_INSTANCE_ID →
  :class:`CommitFailedError` (consumer protocol) / :class:`FencedInstanceIdError` (classic);
  GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED (all denied topics collected first),
  OFFSET_METADATA_TOO_LARGE, INVALID_COMMIT_OFFSET_SIZE and any other fatal code → their typed
  error. Errors of one partition name that partition (and the offset committed).
* **Classic member without a stable generation** (subscribed; JoinGroup/SyncGroup in flight,
  or not joined): a commit fails at once without a request, as Java's
  ``sendOffsetCommitRequest`` does when ``generationIfStable()`` is null:
  :class:`RebalanceInProgressError` during a rebalance (complete it with poll() and retry),
  :class:`CommitFailedError` otherwise. Explicit offsets of a standalone (assign()) consumer
  still go out with generation -1. A classic commit answered ILLEGAL_GENERATION while the
  member is by then in a rebalance (the commit raced the JoinGroup to the coordinator), or
  already has a newer generation under the same member id (the membership finished that
  rebalance before the answer was read), is :class:`RebalanceInProgressError` too: the
  member is still in the group.
* **commit_async** makes one attempt and never retries (a retriable answer completes it with
  that retriable error; Java wraps it in ``RetriableCommitFailedException``). Async commits
  are sent in order and their :class:`CommitCompleted` events are published in the order the
  commits were made, whatever order their answers arrive in.
* **Auto-commit** (``enable.auto.commit``) is driven by the application's poll
  (:meth:`maybe_auto_commit_on_poll`, Java's ``updateTimerAndMaybeCommit``): when
  ``auto.commit.interval.ms`` has passed since the last one and none is in flight, all
  consumed positions are committed asynchronously. Unlike Java, nothing is sent when every
  consumed position equals what the last successful commit stored. After a retriable failure
  the next auto-commit is due after the retry backoff instead of a full interval.
* **Before a revocation** (:meth:`on_commit_before_revocation`) all consumed positions are
  committed (as Java, not only the revoked partitions: the partitions being revoked are still
  owned and so in the snapshot), retried until the event's deadline with a fresh snapshot on
  each attempt; UNKNOWN_TOPIC_OR_PARTITION is not retried there (the topic was deleted). The
  outcome goes back to the membership manager as :class:`CommitForRevocationDone`. With
  auto-commit off the reply is immediate (nothing committed).
* **"All consumed"** commits use the :class:`SubscriptionState` snapshot taken when the request
  is made, so a partition no longer owned is never committed by them; explicit offsets may
  name any partition (as Java). The snapshot holds the *consumed* positions (what the front
  ends returned to the application), not the fetch positions: records collected but not yet
  returned, or dropped because their partition is being revoked, are never committed.
* **OffsetFetch** asks for stable offsets (``require_stable``) from v7, retries
  COORDINATOR_LOAD_IN_PROGRESS, the coordinator errors, UNSTABLE_OFFSET_COMMIT, other
  retriable errors and (consumer protocol, member still in the group) STALE_MEMBER_EPOCH
  until the latest deadline of its callers. Identical concurrent fetches (same partitions,
  same member identity) share one request (Java's ``inflightOffsetFetches``); each caller
  times out on its own deadline.
* **Initializing positions** (:meth:`initialize_positions`): partitions without a position
  get their committed offset (seek with the committed leader epoch) or, without one, are
  marked for reset with ``auto.offset.reset`` (``none``: they keep no position and
  :class:`PositionsInitialized` carries :class:`NoOffsetForPartitionError`); only partitions
  that still need a position when the answer arrives are touched. An answer arriving after
  the caller's deadline is still applied (Java keeps the pending fetch for the next poll).
  The "still needs a position" check and the seek are two atomic SubscriptionState calls,
  not one: a user seek landing exactly between them is overwritten (needs a conditional
  seek in SubscriptionState to close).
* **Topic ids** (OffsetCommit/OffsetFetch v10): the request is built by id when every topic's
  id is known (:meth:`on_topic_ids`), otherwise at v9 by name, as Java.
"""

from __future__ import annotations

import enum
import uuid
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kafka_actors.errors import (
    CommitFailedError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupAuthorizationFailedError,
    IllegalGenerationError,
    KafkaError,
    NotCoordinatorError,
    RebalanceInProgressError,
    RequestTimedOutError,
    StaleMemberEpochError,
    TopicAuthorizationFailedError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from kafka_actors.log import get_logger
from kafka_actors.protocol.condition_log import ConditionLog
from kafka_actors.protocol.group.events import (
    CommitBeforeRevocation,
    MemberEpochChanged,
)
from kafka_actors.protocol.messages import (
    OffsetAndMetadata,
    PollResult,
    TopicPartition,
    UnsentRequest,
)
from kafka_actors.protocol.offsets.committed import (
    CommittedOffsetsFetched,
    OffsetFetchRequests,
    PositionsInitialized,
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
from kafka_actors.protocol.request_state import Outbox, RetriedRequest, retry_backoff
from kafka_actors.protocol.subscription import SubscriptionState
from kafka_actors.protocol.wire.requests import offset_commit_request

__all__ = [
    "AutoCommitCompleted",
    "CommitCompleted",
    "CommitForRevocationDone",
    "CommitManager",
    "CommittedOffsetsFetched",
    "PositionsInitialized",
]

# Error codes (Kafka's Errors) the commit paths treat specially.

_COORDINATOR_CODES: Final = frozenset(
    {NotCoordinatorError.code, CoordinatorNotAvailableError.code, RequestTimedOutError.code}
)
_MEMBER_GONE_CODES: Final = frozenset(
    {
        UnknownMemberIdError.code,
        IllegalGenerationError.code,
        FencedMemberEpochError.code,
        StaleMemberEpochError.code,
    }
)


# -- Events published through PollResult.events ----------------------------------------------


@dataclass(frozen=True, slots=True)
class CommitCompleted:
    """A commit asked for by the application (sync, async or on close) completed.

    ``offsets`` are the offsets the commit carried (empty when nothing needed committing).
    """

    request_key: Hashable
    offsets: Mapping[TopicPartition, OffsetAndMetadata]
    error: KafkaError | None


@dataclass(frozen=True, slots=True)
class AutoCommitCompleted:
    """An interval auto-commit completed (for the commit callbacks and the logs)."""

    offsets: Mapping[TopicPartition, OffsetAndMetadata]
    error: KafkaError | None


@dataclass(frozen=True, slots=True)
class CommitForRevocationDone:
    """The commit asked for by :class:`CommitBeforeRevocation` is over: reply to the membership
    manager with ``on_commit_done(commit_id, error)``."""

    commit_id: int
    error: KafkaError | None


# -- Internal request states -------------------------------------------------------------------


class _CommitKind(enum.Enum):
    SYNC = "sync"  # commit_sync: retried until the deadline
    ASYNC = "async"  # commit_async: one attempt
    AUTO = "auto"  # interval auto-commit: one attempt
    REVOCATION = "revocation"  # before a revocation: retried, fresh snapshot per attempt
    CLOSE = "close"  # auto-commit on close: retried until the close deadline


_RETRIED_KINDS: Final = frozenset({_CommitKind.SYNC, _CommitKind.REVOCATION, _CommitKind.CLOSE})


@dataclass(slots=True)
class _Commit(RetriedRequest):
    kind: _CommitKind
    offsets: dict[TopicPartition, OffsetAndMetadata]
    deadline_ms: int | None
    request_key: Hashable = None
    trace_id: str | None = None
    commit_id: int | None = None  # REVOCATION: the membership manager's id
    topic_names: dict[uuid.UUID, str] = field(default_factory=dict)  # of the request in flight
    sent_epoch: int = -1  # the generation / member epoch the request in flight carries
    sent_member_id: str = ""  # the member id the request in flight carries
    done: bool = False
    result: KafkaError | None = None


class CommitManager:
    """OffsetCommit / OffsetFetch to the group coordinator (see the module docstring).

    It composes, beside its commits, the OffsetFetch requests
    (:class:`~kafka_actors.protocol.offsets.committed.OffsetFetchRequests`, which owns its own
    state), the :class:`~kafka_actors.protocol.offsets.config.CoordinatorLink` both read (who
    the member is, which node the coordinator is, topic ids) and the
    :class:`~kafka_actors.protocol.request_state.Outbox` both publish to (one order of events,
    one request-id counter). The commits stay in this class because the five commit kinds
    (sync, async, auto, before a revocation, on close) share one send / retry / complete path;
    splitting them further would spread one retry policy over several classes.
    """

    def __init__(
        self,
        config: CommitConfig,
        subscriptions: SubscriptionState,
        *,
        random: Callable[[], float],
        client_id: str | None = None,
    ) -> None:
        self._config = config
        self._subs = subscriptions
        self._consumer_protocol = config.group_protocol == "consumer"
        self._backoff = retry_backoff(config, random)
        self._outbox = Outbox()

        # Who the member is (standalone, no group membership: "" and no epoch), where the
        # coordinator is, the topic ids: shared with the offset fetches.
        self._link = CoordinatorLink(
            config,
            self._outbox,
            get_logger(
                "commit",
                client_id=client_id,
                group_id=config.group_id,
                protocol=config.group_protocol,
            ),
        )
        self._rebalancing = False  # classic: JoinGroup/SyncGroup in flight
        self._group_instance_id: str | None = None

        # Committed offsets fetched (committed(), positions): an object of their own.
        self._offset_fetches = OffsetFetchRequests(
            config, subscriptions, self._link, self._outbox, self._backoff
        )

        # Commits in the order they were made; async ones complete in that order.
        self._commits: deque[_Commit] = deque()
        self._async_order: deque[_Commit] = deque()
        self._in_flight: dict[int, _Commit] = {}  # commits only, by request id
        self._commit_failures: ConditionLog[tuple[str, str]] = ConditionLog()

        # Auto-commit.
        self._auto_commit_due_ms: int | None = None
        self._auto_commit_in_flight = False
        self._auto_commit_attempts = 0
        self._committed: dict[TopicPartition, OffsetAndMetadata] = {}
        self._close_deadline_ms: int | None = None

    @property
    def _log(self) -> Any:
        return self._link.log

    # -- Observability ------------------------------------------------------------------------

    @property
    def coordinator(self) -> int | None:
        return self._link.coordinator

    @property
    def member_id(self) -> str:
        return self._link.member_id

    @property
    def member_epoch(self) -> int | None:
        return self._link.member_epoch

    @property
    def auto_commit_in_flight(self) -> bool:
        return self._auto_commit_in_flight

    @property
    def pending_commits(self) -> int:
        """Commits not yet completed (sent or waiting), of every kind."""
        return sum(1 for c in self._commits if not c.done)

    @property
    def pending_fetches(self) -> int:
        return self._offset_fetches.pending

    @property
    def last_committed(self) -> Mapping[TopicPartition, OffsetAndMetadata]:
        """The offsets the successful commits of this manager stored, per partition."""
        return dict(self._committed)

    # -- Inputs: who, where --------------------------------------------------------------------

    def on_member_changed(
        self,
        member_id: str,
        member_epoch_or_generation: int | None,
        group_instance_id: str | None = None,
    ) -> None:
        """The member's identity: member id and member epoch (consumer protocol) or generation
        id (classic). ``None`` (or a negative value) means not in the group: commits then carry
        -1, as Java's standalone commits do, and the consumer-protocol OffsetFetch no member.
        """
        epoch = member_epoch_or_generation
        if epoch is not None and epoch < 0:
            epoch = None
        self._link.member_id = member_id
        self._link.member_epoch = epoch
        self._group_instance_id = group_instance_id
        self._link.log = self._link.log.bind(member_id=member_id, member_epoch=epoch)

    def on_member_epoch_changed(self, event: MemberEpochChanged) -> None:
        """The membership manager's :class:`MemberEpochChanged` event."""
        self.on_member_changed(event.member_id, event.member_epoch, self._group_instance_id)
        self._rebalancing = event.rebalancing

    def set_group_instance_id(self, group_instance_id: str | None) -> None:
        """``group.instance.id`` (static membership), sent with OffsetCommit v7+."""
        self._group_instance_id = group_instance_id

    def on_coordinator_changed(self, node_id: int | None) -> None:
        """The group coordinator's node id, or None when it is not known."""
        if node_id != self._link.coordinator:
            self._log.info("coordinator_changed", coordinator=node_id)
        self._link.coordinator = node_id

    def on_topic_ids(self, topic_ids: Mapping[str, uuid.UUID | str]) -> None:
        """Topic ids known from metadata (merged), for OffsetCommit/OffsetFetch v10."""
        for name, topic_id in topic_ids.items():
            self._link.topic_ids[name] = (
                topic_id if isinstance(topic_id, uuid.UUID) else uuid.UUID(topic_id)
            )

    # -- Inputs: commits -----------------------------------------------------------------------

    def commit_sync(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None,
        deadline_ms: int,
        request_key: Hashable,
        *,
        trace_id: str | None = None,
    ) -> None:
        """Commit ``offsets`` (None: all consumed positions), retried until ``deadline_ms``;
        publishes :class:`CommitCompleted`."""
        self._add_commit(_CommitKind.SYNC, offsets, deadline_ms, request_key, trace_id)

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None,
        request_key: Hashable,
        *,
        trace_id: str | None = None,
    ) -> None:
        """Commit ``offsets`` (None: all consumed) with one attempt; publishes
        :class:`CommitCompleted`, async commits in the order they were made."""
        self._add_commit(_CommitKind.ASYNC, offsets, self._close_deadline_ms, request_key, trace_id)

    def commit_on_close(
        self, deadline_ms: int, request_key: Hashable, *, trace_id: str | None = None
    ) -> None:
        """With auto-commit on, commit all consumed positions before closing (retried until
        ``deadline_ms``); with it off, complete at once. Publishes :class:`CommitCompleted`."""
        if not self._config.auto_commit_enabled:
            self._outbox.publish(CommitCompleted(request_key, {}, None))
            return
        self._add_commit(_CommitKind.CLOSE, None, deadline_ms, request_key, trace_id)

    def close(self, deadline_ms: int) -> None:
        """The consumer is closing: nothing pending may outlive ``deadline_ms``."""
        self._close_deadline_ms = deadline_ms
        for commit in self._commits:
            if commit.deadline_ms is None or commit.deadline_ms > deadline_ms:
                commit.deadline_ms = deadline_ms
        self._offset_fetches.close(deadline_ms)

    def fail_pending(self, error: KafkaError) -> None:
        """Fail every pending commit and fetch with ``error`` (a fatal coordinator error, or
        the consumer closed); requests in flight are abandoned."""
        for commit in list(self._commits):
            if not commit.done:
                self._complete_commit(commit, error)
        self._offset_fetches.fail_pending(error)
        self._in_flight.clear()
        self._flush_async()

    def maybe_auto_commit_on_poll(self, now_ms: int) -> None:
        """The application polled: auto-commit all consumed positions if the interval passed
        and no auto-commit is in flight (Java's ``updateTimerAndMaybeCommit``)."""
        if not self._config.auto_commit_enabled:
            return
        if self._auto_commit_due_ms is None:
            self._auto_commit_due_ms = now_ms + self._config.auto_commit_interval_ms
            return
        if self._auto_commit_in_flight or now_ms < self._auto_commit_due_ms:
            return
        self._auto_commit_due_ms = now_ms + self._config.auto_commit_interval_ms
        consumed = dict(self._subs.all_consumed())
        if not consumed:
            return
        if all(self._committed.get(tp) == offset for tp, offset in consumed.items()):
            self._log.debug("auto_commit_skipped_unchanged", offsets=describe_offsets(consumed))
            return
        self._auto_commit_in_flight = True
        self._log.debug("auto_commit", offsets=describe_offsets(consumed))
        self._commits.append(_Commit(_CommitKind.AUTO, consumed, self._close_deadline_ms))

    def on_commit_before_revocation(self, event: CommitBeforeRevocation) -> None:
        """Commit all consumed positions before the membership manager reconciles; publishes
        :class:`CommitForRevocationDone` with the event's ``commit_id``."""
        if not self._config.auto_commit_enabled:
            self._outbox.publish(CommitForRevocationDone(event.commit_id, None))
            return
        commit = _Commit(
            _CommitKind.REVOCATION,
            dict(self._subs.all_consumed()),
            event.deadline_ms,
            commit_id=event.commit_id,
        )
        self._log.info(
            "commit_before_revocation",
            commit_id=event.commit_id,
            revoking=sorted(str(tp) for tp in event.partitions),
            offsets=describe_offsets(commit.offsets),
            deadline_ms=event.deadline_ms,
        )
        if not commit.offsets:
            self._outbox.publish(CommitForRevocationDone(event.commit_id, None))
            return
        self._commits.append(commit)

    # -- Inputs: committed offsets -------------------------------------------------------------

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
        self._offset_fetches.fetch_committed(
            partitions, deadline_ms, request_key, trace_id=trace_id
        )

    def initialize_positions(
        self, deadline_ms: int, request_key: Hashable = None, *, trace_id: str | None = None
    ) -> None:
        """Give every owned partition without a position its committed offset, or mark it for
        ``auto.offset.reset``; publishes :class:`PositionsInitialized`."""
        self._offset_fetches.initialize_positions(deadline_ms, request_key, trace_id=trace_id)

    # -- Request-manager contract --------------------------------------------------------------

    def poll(self, now_ms: int) -> PollResult:
        """Expire what passed its deadline, send what is due; return it with the events."""
        self._expire(now_ms)
        requests: list[UnsentRequest] = []
        if self._link.coordinator is not None:
            for commit in list(self._commits):  # _send_commit may complete (remove) one
                if commit.done or commit.request_id is not None or commit.retry_at_ms > now_ms:
                    continue
                request = self._send_commit(commit, now_ms)
                if request is not None:
                    requests.append(request)
        requests.extend(self._offset_fetches.send_due(now_ms))
        self._flush_async()
        events = self._outbox.drain()
        return PollResult(
            requests=tuple(requests),
            time_until_next_poll_ms=self._time_until_next_poll(now_ms),
            events=events,
        )

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        commit = self._in_flight.pop(request_id, None)
        if commit is not None:
            commit.request_id = None
            if not commit.done:
                self._on_commit_response(commit, response, now_ms)
        elif self._offset_fetches.owns(request_id):
            self._offset_fetches.on_response(request_id, response, now_ms)
        else:
            self._log.debug("response_ignored", request_id=request_id)
            return
        self._flush_async()

    def on_failure(self, request_id: int, error: BaseException, now_ms: int) -> None:
        commit = self._in_flight.pop(request_id, None)
        if commit is not None:
            commit.request_id = None
            kafka_error = self._link.request_failed(error)
            if not commit.done:
                self._log.info(
                    "offset_commit_failed",
                    kind=commit.kind.value,
                    error=repr(kafka_error),
                    attempts=commit.attempts,
                )
                self._commit_attempt_failed(commit, kafka_error, now_ms)
        elif self._offset_fetches.owns(request_id):
            kafka_error = self._link.request_failed(error)
            self._offset_fetches.on_failure(request_id, kafka_error, now_ms)
        else:
            return
        self._flush_async()

    # -- Commits: building and sending ---------------------------------------------------------

    def _add_commit(
        self,
        kind: _CommitKind,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None,
        deadline_ms: int | None,
        request_key: Hashable,
        trace_id: str | None,
    ) -> None:
        if offsets is not None:
            for key, value in offsets.items():
                if value.offset < 0:  # as Java's commitSync/commitAsync (IllegalArgument)
                    raise ValueError(f"Invalid negative offset {value.offset} for {key}")
        chosen = dict(self._subs.all_consumed() if offsets is None else offsets)
        commit = _Commit(
            kind,
            chosen,
            deadline_ms,
            request_key=request_key,
            trace_id=trace_of(request_key, trace_id),
        )
        self._log.debug(
            "commit_requested",
            kind=kind.value,
            all_consumed=offsets is None,
            offsets=describe_offsets(chosen),
            deadline_ms=deadline_ms,
            trace_id=commit.trace_id,
        )
        if kind is _CommitKind.ASYNC:
            self._async_order.append(commit)
        if not chosen:
            commit.done = True  # nothing to commit: complete at once (as Java)
            if kind is not _CommitKind.ASYNC:
                self._outbox.publish(CommitCompleted(request_key, {}, None))
            return
        self._commits.append(commit)

    def _send_commit(self, commit: _Commit, now_ms: int) -> UnsentRequest | None:
        assert self._link.coordinator is not None
        not_in_group = self._classic_member_without_generation()
        if not_in_group is not None:
            self._log.info(
                "offset_commit_not_sent", kind=commit.kind.value, error=repr(not_in_group)
            )
            self._complete_commit(commit, not_in_group, now_ms=now_ms)
            return None
        if commit.kind is _CommitKind.REVOCATION and commit.attempts > 0:
            # Retry with the latest consumed positions (Java's auto-commit before revocation).
            fresh = dict(self._subs.all_consumed())
            if fresh:
                commit.offsets = fresh
        version = self._config.offset_commit_version
        if version >= TOPIC_ID_VERSION and not self._link.all_topic_ids_known(commit.offsets):
            version = TOPIC_ID_VERSION - 1
        group_instance_id = self._group_instance_id if version >= 7 else None
        try:
            request = offset_commit_request(
                version,
                group_id=self._config.group_id,
                offsets=commit.offsets,
                generation_id_or_member_epoch=(
                    -1 if self._link.member_epoch is None else self._link.member_epoch
                ),
                member_id=self._link.member_id,
                group_instance_id=group_instance_id,
                topic_ids=self._link.topic_ids,
            )
        except KafkaError as exc:
            self._complete_commit(commit, exc, now_ms=now_ms)
            return None
        commit.topic_names = (
            {self._link.topic_ids[tp.topic]: tp.topic for tp in commit.offsets}
            if version >= TOPIC_ID_VERSION
            else {}
        )
        request_id = self._outbox.new_id()
        commit.on_send_attempt(request_id)
        commit.sent_epoch = -1 if self._link.member_epoch is None else self._link.member_epoch
        commit.sent_member_id = self._link.member_id or ""
        self._in_flight[request_id] = commit
        self._log.debug(
            "offset_commit_sent",
            kind=commit.kind.value,
            request_id=request_id,
            version=version,
            attempt=commit.attempts,
            coordinator=self._link.coordinator,
            generation_id_or_member_epoch=self._link.member_epoch,
            offsets=describe_offsets(commit.offsets),
            trace_id=commit.trace_id,
        )
        return UnsentRequest(
            node=self._link.coordinator,
            request=request,
            request_id=request_id,
            trace_id=commit.trace_id,
            timeout_ms=self._link.request_timeout(commit.deadline_ms, now_ms),
        )

    def _on_commit_response(self, commit: _Commit, response: Any, now_ms: int) -> None:
        unauthorized: list[str] = []
        for topic in response.topics:
            name = topic_name(topic, commit.topic_names)
            for partition in topic.partitions:
                code = int(partition.error_code)
                if code == 0:
                    continue
                tp = TopicPartition(name, int(partition.partition_index))
                if code == TopicAuthorizationFailedError.code:
                    if name not in unauthorized:
                        unauthorized.append(name)
                    continue
                offset = commit.offsets.get(tp)
                error = self._commit_error(
                    code,
                    tp,
                    None if offset is None else offset.offset,
                    commit.sent_epoch,
                    commit.sent_member_id,
                )
                self._log.info(
                    "offset_commit_error",
                    kind=commit.kind.value,
                    partition=str(tp),
                    error_code=code,
                    error=repr(error),
                )
                if code in _COORDINATOR_CODES:
                    self._link.mark_coordinator_unknown(f"OffsetCommit error {code}")
                self._commit_attempt_failed(commit, error, now_ms, code)
                return
        if unauthorized:
            error = TopicAuthorizationFailedError(
                f"Not authorized to commit to topics {sorted(unauthorized)}",
                topic=unauthorized[0] if len(unauthorized) == 1 else None,
            )
            self._complete_commit(commit, error, now_ms=now_ms)
            return
        self._log.debug(
            "offset_commit_succeeded",
            kind=commit.kind.value,
            offsets=describe_offsets(commit.offsets),
        )
        self._committed.update(commit.offsets)
        self._complete_commit(commit, None, now_ms=now_ms)

    def _classic_member_without_generation(self) -> KafkaError | None:
        """Classic protocol, subscribed (group-managed), but no stable generation: the commit
        fails here without a request, as Java's ``sendOffsetCommitRequest`` fails it when
        ``generationIfStable()`` is null (a commit carrying generation -1 would only come back
        as ILLEGAL_GENERATION, wrongly telling the user the member left the group)."""
        if (
            self._consumer_protocol
            or self._link.member_epoch is not None
            or not self._subs.has_auto_assigned_partitions()
        ):
            return None
        if self._rebalancing:
            return RebalanceInProgressError(
                "Offset commit cannot be completed since the consumer is undergoing a "
                "rebalance for auto partition assignment; complete the rebalance by calling "
                "poll() and then retry the commit"
            )
        return CommitFailedError(
            "Offset commit cannot be completed since the consumer is not part of an active "
            "group for auto partition assignment; it is likely that the consumer was kicked "
            "out of the group"
        )

    def _commit_error(
        self,
        code: int,
        tp: TopicPartition,
        offset: int | None,
        sent_epoch: int = -1,
        sent_member_id: str = "",
    ) -> KafkaError:
        where: dict[str, Any] = {"topic": tp.topic, "partition": tp.partition, "offset": offset}
        if (
            code == IllegalGenerationError.code
            and not self._consumer_protocol
            and self._took_part_in_another_rebalance(sent_epoch, sent_member_id)
        ):
            # Sent with the generation the member had then; it has since started another
            # rebalance (the JoinGroup went out first), or finished one, so it is still in the
            # group (Java's "generation is already stale" RebalanceInProgressException).
            return RebalanceInProgressError(
                f"Offset commit cannot be completed since the consumer's generation "
                f"{sent_epoch} is already stale: the member has taken part in another "
                "rebalance; complete it by calling poll() and then retry the commit",
                **where,
            )
        if code in _MEMBER_GONE_CODES:
            return CommitFailedError(
                f"Offset commit cannot be completed: {error_for_code(code).message} "
                f"(member {self._link.member_id or '-'}, "
                f"{'member epoch' if self._consumer_protocol else 'generation'} "
                f"{sent_epoch}). The member is "
                "no longer part of the group or its assignment moved on; its partitions may "
                "belong to another member now",
                **where,
            )
        if code == FencedInstanceIdError.code and self._consumer_protocol:
            return CommitFailedError(
                f"Offset commit failed: group instance id {self._group_instance_id} was fenced",
                **where,
            )
        if code == FencedInstanceIdError.code:
            return FencedInstanceIdError(
                f"Group instance id {self._group_instance_id} was fenced by another member",
                **where,
            )
        if code == RebalanceInProgressError.code:
            return RebalanceInProgressError(
                "Offset commit cannot be completed since the consumer group is rebalancing; "
                "complete the rebalance by calling poll() and then retry the commit",
                **where,
            )
        if code == GroupAuthorizationFailedError.code:
            return GroupAuthorizationFailedError(
                f"Not authorized to access group: {self._config.group_id}", **where
            )
        return error_for_code(code, **where)

    def _took_part_in_another_rebalance(self, sent_epoch: int, sent_member_id: str) -> bool:
        """Classic: after the commit left, the member started another rebalance, or finished
        one with the same member id and a newer generation. Java, one thread, never has a
        commit in flight while its own rebalance completes; here the membership runs beside
        the commit (the JoinGroup can go out before this manager hears of it), so the
        coordinator's ILLEGAL_GENERATION can arrive after the member's next generation: the
        member is in the group, and a commit after the next poll can succeed."""
        if self._rebalancing:
            return True
        epoch = self._link.member_epoch
        return (
            epoch is not None
            and sent_epoch >= 0
            and epoch != sent_epoch
            and bool(sent_member_id)
            and self._link.member_id == sent_member_id
        )

    def _commit_attempt_failed(
        self, commit: _Commit, error: KafkaError, now_ms: int, code: int | None = None
    ) -> None:
        commit.last_error = error
        if not self._should_retry_commit(commit, error, code):
            self._complete_commit(commit, error, now_ms=now_ms)
            return
        # Retried after the backoff; a retry due after the deadline never goes out and the
        # commit fails with a timeout at the deadline (poll expires it).
        commit.schedule_retry(now_ms, self._backoff)
        self._log.debug(
            "offset_commit_retry",
            kind=commit.kind.value,
            attempt=commit.attempts,
            retry_at_ms=commit.retry_at_ms,
            error=repr(error),
        )

    def _should_retry_commit(self, commit: _Commit, error: KafkaError, code: int | None) -> bool:
        if commit.kind not in _RETRIED_KINDS:
            return False
        if commit.kind is _CommitKind.REVOCATION:
            if code == UnknownTopicOrPartitionError.code:
                return False  # the topic was deleted: do not hold up the rebalance
            if code == StaleMemberEpochError.code:
                # Retried with the newer epoch the heartbeat brings, while in the group.
                return self._link.member_epoch is not None
        return error.retriable

    def _complete_commit(
        self, commit: _Commit, error: KafkaError | None, *, now_ms: int | None = None
    ) -> None:
        """``now_ms`` None (failing every pending commit at once): the error line is not
        scheduled by ``_commit_failures`` (module ``condition_log``)."""
        if commit.done:
            return
        commit.done = True
        commit.result = error
        if commit.request_id is not None:
            self._in_flight.pop(commit.request_id, None)
            commit.request_id = None
        try:
            self._commits.remove(commit)
        except ValueError:
            pass
        if error is not None:
            key = (commit.kind.value, type(error).__name__)
            report = None if now_ms is None else self._commit_failures.occurred(key, now_ms)
            if now_ms is None or report is not None:
                self._log.warning(
                    "offset_commit_completed_with_error",
                    kind=commit.kind.value,
                    error=repr(error),
                    offsets=describe_offsets(commit.offsets),
                    trace_id=commit.trace_id,
                    **(report.fields() if report is not None else {}),
                )
        elif now_ms is not None:
            for (kind, name), cleared in self._commit_failures.cleared_all(now_ms):
                self._log.info(
                    "offset_commit_error_cleared", kind=kind, error=name, **cleared.fields()
                )
        if commit.kind is _CommitKind.AUTO:
            self._auto_commit_in_flight = False
            if error is not None and error.retriable and self._auto_commit_due_ms is not None:
                self._auto_commit_attempts += 1
                retry_at = self._auto_commit_due_ms - self._config.auto_commit_interval_ms
                retry_at += self._backoff.backoff(self._auto_commit_attempts - 1)
                self._auto_commit_due_ms = min(self._auto_commit_due_ms, retry_at)
            elif error is None:
                self._auto_commit_attempts = 0
            self._outbox.publish(AutoCommitCompleted(dict(commit.offsets), error))
        elif commit.kind is _CommitKind.REVOCATION:
            assert commit.commit_id is not None
            self._outbox.publish(CommitForRevocationDone(commit.commit_id, error))
        elif commit.kind is not _CommitKind.ASYNC:
            self._outbox.publish(CommitCompleted(commit.request_key, dict(commit.offsets), error))

    def _flush_async(self) -> None:
        while self._async_order and self._async_order[0].done:
            commit = self._async_order.popleft()
            self._outbox.publish(
                CommitCompleted(commit.request_key, dict(commit.offsets), commit.result)
            )

    # -- Deadlines, coordinator, helpers -------------------------------------------------------

    def _expire(self, now_ms: int) -> None:
        for commit in list(self._commits):
            if commit.done or commit.deadline_ms is None or now_ms < commit.deadline_ms:
                continue
            cause = commit.last_error
            if cause is None and commit.request_id is None and self._link.coordinator is None:
                cause = CoordinatorNotAvailableError("The group coordinator is not known")
            self._complete_commit(commit, deadline_timeout(cause, "Offset commit"), now_ms=now_ms)
        self._offset_fetches.expire(now_ms)

    def _time_until_next_poll(self, now_ms: int) -> int | None:
        candidates: list[int] = []
        for commit in self._commits:
            if commit.done:
                continue
            if commit.deadline_ms is not None:
                candidates.append(commit.deadline_ms - now_ms)
            if commit.request_id is None and self._link.coordinator is not None:
                candidates.append(commit.retry_at_ms - now_ms)
        candidates.extend(self._offset_fetches.poll_delays(now_ms))
        if not candidates:
            return None
        return max(0, min(candidates))
