"""Driver side of the Spark source: a consumer-group member that plans micro-batches.

Owns: :class:`GroupMember`, which lives in Spark's long-lived driver-side Python worker of one
streaming source. It hosts a :class:`~kafka_actors.KafkaConsumer` subscribed with a rebalance
listener, a thread that polls it (keeping the member alive and running the listener; every
owned partition is paused, so the consumer fetches nothing: executors read the data), and an
:class:`~kafka_actors.spark.offsets.OffsetPlanner` guarded by a lock. It also reads the query's
checkpoint commit log when told where it is. May touch: the consumer, the planner, the
checkpoint directory (read only), logging configuration of this worker process.

Commits: Spark calls ``latestOffset(start)`` only after the batch ending at ``start`` is in
its commit log, and ``commit(end)`` later still; both commit those offsets to the group
(``commit_sync``, owned partitions only, never backwards).

Revocations: the listener defers its acknowledgement; the partitions stop getting new data and
the acknowledgement is sent once the offsets already planned for them are committed to Kafka,
or when the group's rebalance timeout (``max.poll.interval.ms``) passes.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kafka_actors.consumer import KafkaConsumer
from kafka_actors.errors import FatalError, KafkaError, WakeupError
from kafka_actors.log import get_logger
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.retrying import PacedRetry
from kafka_actors.spark.offsets import (
    OffsetPlanner,
    OffsetRange,
    Offsets,
    offsets_from_json,
    offsets_to_json,
)
from kafka_actors.spark.options import SourceOptions
from kafka_actors.spark.positions import resolve_bound
from kafka_actors.spark.reader import DataLossError
from kafka_actors.structs import ConsumerRebalanceListener, RebalanceReply

__all__ = ["GroupMember", "last_committed_batch_end"]

_log = get_logger("spark")
#: How long an empty first assignment must last before the source plans without partitions.
_EMPTY_SETTLE_S = 3.0
#: Timeout of each poll of the polling thread: the member joins, runs the listener and
#: acknowledges while one poll waits, so the start-up waits for no poll to return.
_POLL_TIMEOUT_S = 0.5


def last_committed_batch_end(checkpoint: str, candidates: list[Offsets]) -> Offsets | None:
    """The end offsets (among ``candidates``, the ends this source planned) of the newest batch
    in the query's commit log, read from ``<checkpoint>/commits`` and ``<checkpoint>/offsets``
    (local file system). None when not found."""
    path = checkpoint[len("file:") :] if checkpoint.startswith("file:") else checkpoint
    path = path.lstrip("/") if path.startswith("///") else path
    commits = os.path.join(path, "commits")
    try:
        ids = [int(name) for name in os.listdir(commits) if name.isdigit()]
    except OSError:
        return None
    if not ids:
        return None
    try:
        with open(os.path.join(path, "offsets", str(max(ids))), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines[2:]:
        try:
            offsets = offsets_from_json(line)
        except (ValueError, TypeError):
            continue
        if offsets in candidates:
            return offsets
    return None


def _fmt(offsets: Mapping[TopicPartition, int]) -> dict[str, int]:
    return {f"{tp.topic}-{tp.partition}": offset for tp, offset in sorted(offsets.items())}


class _Listener(ConsumerRebalanceListener):
    def __init__(self, member: GroupMember) -> None:
        self._member = member

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        self._member._on_assigned(assigned)

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        return self._member._on_revoked(revoked)

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        self._member._on_lost(lost)


class GroupMember:
    """The source's group member on the driver (see module docstring)."""

    def __init__(
        self, options: SourceOptions, consumer: KafkaConsumer[Any, Any] | None = None
    ) -> None:
        self.options = options
        self._lock = threading.RLock()
        self._planner = OffsetPlanner()
        self._assigned_once = threading.Event()
        self._empty_assignment_at: float | None = None
        self._stopping = threading.Event()
        self._error: BaseException | None = None
        self._issued: list[Offsets] = []
        self._target: Offsets | None = None
        self._available: Offsets = {}
        #: When the last batch with new data was planned (minOffsetsPerTrigger's delay runs
        #: from there; from the member's start before the first one).
        self._last_trigger = time.monotonic()
        #: When this member was created; None once it was ready (see _note_ready).
        self._started: float | None = time.monotonic()
        self.consumer = (
            consumer if consumer is not None else KafkaConsumer(options.consumer_config())
        )
        config = self.consumer.config
        self._commit_timeout_s = config.request_timeout_ms / 1000.0
        # Every call retried after a failure waits retry.backoff.ms doubling to
        # retry.backoff.max.ms (jitter 0.2) since the last failure, reset by a success: the
        # polling thread's polls, and the lookups and commits Spark's next trigger would
        # otherwise repeat at once (a trigger without new data comes every few milliseconds).
        self._poll_retry = PacedRetry(config)
        self._resolve_retry = PacedRetry(config)
        self._end_offsets_retry = PacedRetry(config)
        self._commit_retry = PacedRetry(config)
        #: The polling thread's wait after a failed poll (True: stopping).
        self._wait: Callable[[float], bool] = self._stopping.wait
        if options.pattern is not None:
            self.consumer.subscribe(pattern=options.pattern, listener=_Listener(self))
        else:
            self.consumer.subscribe(list(options.topics), listener=_Listener(self))
        self._thread = threading.Thread(
            target=self._poll_loop, name=f"kafka-actors-spark-{options.group_id}", daemon=True
        )
        self._thread.start()

    # -- the polling thread ------------------------------------------------------------------

    def _poll_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.consumer.poll(_POLL_TIMEOUT_S)
            except WakeupError:
                continue
            except FatalError as exc:
                if self._stopping.is_set():
                    return
                _log.error("group_member_failed", error=str(exc))
                self._error = exc
                return
            except KafkaError as exc:
                if self._stopping.is_set():
                    return
                backoff = self._poll_retry.failed()
                _log.warning(
                    "poll_failed_retrying", error=str(exc), backoff_ms=round(backoff * 1000.0)
                )
                if self._wait(backoff):
                    return
                continue
            except Exception as exc:  # the consumer closed under us, or a bug: report it
                if self._stopping.is_set():
                    return
                _log.error("group_member_failed", error=repr(exc))
                self._error = exc
                return
            self._poll_retry.succeeded()

    def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        if not assigned:
            if self._empty_assignment_at is None:
                self._empty_assignment_at = time.monotonic()
            return
        self.consumer.pause(assigned)
        with self._lock:
            self._planner.assigned(assigned)
        self._assigned_once.set()

    def _on_revoked(self, revoked: set[TopicPartition]) -> Any:
        if not revoked:
            return None
        if self._stopping.is_set():
            # leaving: what Spark completed is committed already; nothing else will be
            return None
        reply = self.consumer.defer_rebalance_ack()
        with self._lock:
            done = self._planner.revoking(revoked, reply)
        _ack(done)
        return None

    def _on_lost(self, lost: set[TopicPartition]) -> None:
        with self._lock:
            self._planner.lost(lost)

    # -- Spark's calls ---------------------------------------------------------------------

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    def _await_assignment(self) -> None:
        """Wait (up to ``groupAssignmentTimeoutMs``) for the first non-empty assignment; an
        empty one counts once it has lasted ``_EMPTY_SETTLE_S`` (the group may have more
        members than partitions, or another member is still revoking them), except under
        Trigger.AvailableNow, which would end at once with nothing to read."""
        deadline = time.monotonic() + self.options.assignment_timeout_ms / 1000.0
        while not self._assigned_once.is_set():
            now = time.monotonic()
            seen = self._empty_assignment_at
            settled = seen is not None and now - seen >= _EMPTY_SETTLE_S
            if now >= deadline or (settled and self._target is None):
                return
            self._assigned_once.wait(0.05)

    def initial_offsets(self) -> dict[str, dict[str, int]]:
        """Where a new query starts: each owned partition at the group's committed offset, or
        at ``startingOffsets`` when the group has none."""
        self._check()
        self._await_assignment()
        self._resolve()
        with self._lock:
            end = self._planner.latest({}, {})
            self._issued.append(dict(end))
        _log.debug("initial_offsets", end=_fmt(end))
        self._note_ready()
        return offsets_to_json(end)

    def _note_ready(self) -> None:
        """Log ``group_member_ready`` once: the group joined, partitions assigned and their
        starting offsets known (``startup_ms`` from this member's creation)."""
        started = self._started
        if started is None:
            return
        with self._lock:
            owned = [tp for tp, s in self._planner.owned.items() if s.resolved]
            if not owned or self._planner.unresolved():
                return
        self._started = None
        _log.info(
            "group_member_ready",
            startup_ms=round((time.monotonic() - started) * 1000.0, 1),
            partitions=len(owned),
        )

    def latest_offsets(
        self, start_json: Mapping[str, Any], limit: int | None
    ) -> dict[str, dict[str, int]]:
        """End offsets of the next batch (``start_json`` is committed in Spark's log).

        The lock is never held across a call to the consumer: the rebalance listener (on the
        polling thread) takes it too, and a revocation must never wait for a lookup."""
        self._check()
        start = offsets_from_json(start_json)
        self._commit(start)
        self._await_assignment()
        with self._lock:
            expired = [
                t
                for t in self._planner.revocation_tokens()
                if isinstance(t, RebalanceReply) and t.done
            ]
            for token in expired:
                gone = self._planner.abandon(token)
                _log.warning(
                    "revocation_acknowledged_at_deadline", partitions=sorted(map(str, gone))
                )
        assignment = self.consumer.assignment()
        with self._lock:
            self._planner.forget_unowned(assignment)
        self._resolve()
        with self._lock:
            active = [tp for tp, s in self._planner.owned.items() if s.resolved and tp in start]
        available = self._end_offsets(active)
        shrunk = {tp: (start[tp], end) for tp, end in available.items() if end < start[tp]}
        if shrunk:
            # the log ends before what this query already read: the topic was recreated or
            # truncated (unclean leader election)
            detail = ", ".join(
                f"{tp.topic}-{tp.partition} {was}->{now}" for tp, (was, now) in shrunk.items()
            )
            if self.options.fail_on_data_loss:
                raise DataLossError(
                    f"Partitions now end before the query's offsets ({detail}); set "
                    "failOnDataLoss=false to continue from their new end"
                )
            _log.warning("partitions_shrunk_continuing", partitions=detail)
            start = {**start, **{tp: now for tp, (_, now) in shrunk.items()}}
        with self._lock:
            self._available = dict(available)
            if not shrunk and self._delay_batch(start, available):
                return offsets_to_json(start)
            end = self._planner.latest(start, available, limit, self._target)
            if end != start:
                self._last_trigger = time.monotonic()
            self._issued.append(dict(end))
            del self._issued[:-64]
        _log.debug("latest_offsets", start=_fmt(start), end=_fmt(end), available=_fmt(available))
        self._note_ready()
        return offsets_to_json(end)

    def _delay_batch(self, start: Offsets, available: Offsets) -> bool:
        """``minOffsetsPerTrigger``: hold the batch back while fewer new records than that are
        available, until ``maxTriggerDelay`` has passed since the last batch (not under
        Trigger.AvailableNow, which reads to its bound)."""
        minimum = self.options.min_offsets_per_trigger
        if minimum is None or self._target is not None:
            return False
        active = {tp for tp, s in self._planner.owned.items() if s.resolved}
        if any(tp not in start for tp in active):
            return False  # a partition enters (no records read): never held back
        new = sum(max(0, end - start[tp]) for tp, end in available.items() if tp in start)
        if new >= minimum:
            return False
        waited_ms = (time.monotonic() - self._last_trigger) * 1000.0
        if waited_ms >= self.options.max_trigger_delay_ms:
            return False
        _log.debug("batch_delayed", new_records=new, min_offsets_per_trigger=minimum)
        return True

    def reported_latest(self) -> dict[str, dict[str, int]] | None:
        return offsets_to_json(self._available) if self._available else None

    def ranges(
        self, start_json: Mapping[str, Any], end_json: Mapping[str, Any]
    ) -> list[OffsetRange]:
        """The offset ranges of the batch ``(start, end]``. A batch this member did not plan
        (Spark replaying its last batch after a restart) skips what the group has committed
        past ``start`` (records another member already delivered)."""
        self._check()
        start = offsets_from_json(start_json)
        end = offsets_from_json(end_json)
        floor: Offsets | None = None
        if end not in self._issued:
            wanted = [tp for tp in end if tp in start and end[tp] > start[tp]]
            if wanted:
                committed = self.consumer.committed(wanted)
                floor = {tp: om.offset for tp, om in committed.items() if om is not None}
        return OffsetPlanner.ranges(start, end, floor)

    def commit(self, end_json: Mapping[str, Any]) -> None:
        self._check()
        self._commit(offsets_from_json(end_json))

    def prepare_available_now(self) -> None:
        """Bound every partition of the subscribed topics at its current end offset."""
        self._check()
        topics: list[str]
        if self.options.pattern is not None:
            import re

            regex = re.compile(self.options.pattern)
            topics = [t for t in self.consumer.list_topics() if regex.fullmatch(t)]
        else:
            topics = list(self.options.topics)
        partitions = [
            TopicPartition(topic, info.partition)
            for topic in topics
            for info in self.consumer.partitions_for(topic)
        ]
        target = self.consumer.end_offsets(partitions) if partitions else {}
        with self._lock:
            self._target = dict(target)

    def stop(self) -> None:
        """Commit the last batch Spark completed (when the checkpoint is known), acknowledge
        pending revocations, leave the group. Safe to call from a signal handler that
        interrupted another call of this member (no lock is waited for without a bound)."""
        if self._stopping.is_set():
            return
        if self.options.checkpoint_location and self._error is None:
            try:
                end = last_committed_batch_end(self.options.checkpoint_location, self._issued)
                _log.info("stopping", last_committed_batch_end=_fmt(end) if end else None)
                if end is not None:
                    self._commit(end, paced=False)  # the last one: not left for later
            except Exception as exc:
                _log.warning("commit_at_stop_failed", error=str(exc))
        self._stopping.set()
        if self._lock.acquire(timeout=2.0):
            try:
                tokens = self._planner.release_all()
            finally:
                self._lock.release()
            _ack(tokens)
        self.consumer.wakeup()
        self._thread.join(5)
        try:
            self.consumer.close(timeout=30)
        except Exception as exc:
            _log.warning("close_failed", error=str(exc))

    # -- helpers ------------------------------------------------------------------------------

    def _end_offsets(self, active: list[TopicPartition]) -> Offsets:
        """The end offsets of ``active``; none (no new data this trigger) after a retriable
        failure, and while the backoff after it runs."""
        if not active:
            return {}
        if not self._end_offsets_retry.ready():
            return {}
        try:
            available = self.consumer.end_offsets(active)
        except KafkaError as exc:
            if not exc.retriable:
                raise
            backoff = self._end_offsets_retry.failed()
            _log.warning(
                "end_offsets_failed_no_new_data_this_trigger",
                error=str(exc),
                backoff_ms=round(backoff * 1000.0),
            )
            return {}
        self._end_offsets_retry.succeeded()
        return dict(available)

    def _commit(self, offsets: Offsets, *, paced: bool = True) -> None:
        with self._lock:
            wanted = self._planner.to_commit(offsets)
        if not wanted:
            return
        if paced and not self._commit_retry.ready():
            return  # tried again at a trigger once the backoff after the last failure is over
        try:
            self.consumer.commit_sync(wanted, timeout=self._commit_timeout_s)
        except KafkaError as exc:
            # The checkpoint stays the source of truth; the group's offsets catch up at the next
            # commit (a revocation waiting for this one waits on, up to its deadline).
            backoff = self._commit_retry.failed()
            _log.warning(
                "commit_failed",
                error=str(exc),
                offsets=_fmt(wanted),
                backoff_ms=round(backoff * 1000.0),
            )
            return
        self._commit_retry.succeeded()
        with self._lock:
            done = self._planner.kafka_committed(wanted)
        _ack(done)

    def _resolve(self) -> None:
        """Committed offset and fallback start of newly acquired partitions."""
        with self._lock:
            pending = sorted(self._planner.unresolved(), key=lambda t: (t.topic, t.partition))
        if not pending:
            return
        if not self._resolve_retry.ready():
            return  # still backing off: resolved at a later trigger
        try:
            self._lookup_and_resolve(pending)
        except KafkaError as exc:
            if not exc.retriable:
                raise
            # the partitions keep their place in the offsets and are resolved at a later call,
            # once the backoff after this failure is over
            backoff = self._resolve_retry.failed()
            _log.warning(
                "resolve_failed_retrying_next_trigger",
                error=str(exc),
                backoff_ms=round(backoff * 1000.0),
            )
            return
        self._resolve_retry.succeeded()

    def _lookup_and_resolve(self, pending: list[TopicPartition]) -> None:
        committed = self.consumer.committed(pending)
        fresh = [tp for tp in pending if committed.get(tp) is None]
        fallback = resolve_bound(
            self.consumer,
            self.options.starting,
            fresh,
            side="starting",
            strategy_latest=self.options.starting_strategy_latest,
        )
        with self._lock:
            for tp in pending:
                om = committed.get(tp)
                self._planner.resolved(
                    tp, om.offset if om is not None else None, fallback.get(tp, 0)
                )


def _ack(tokens: list[object]) -> None:
    for token in tokens:
        assert isinstance(token, RebalanceReply)
        token.ack()
