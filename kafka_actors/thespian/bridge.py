"""``KafkaBridge``: a Thespian actor that owns a :class:`~kafka_actors.KafkaConsumer` and serves
it by messages (see :mod:`kafka_actors.thespian.messages` for the protocol).

Owns: the consumer (created by :class:`Configure`, closed by :class:`Close` or the actor's
exit), the demand-driven stream to one subscriber actor (a
:class:`~kafka_actors.thespian.stream.DemandStream`), pending commits and pending rebalance
acknowledgements.

How the bridge polls
--------------------
The consumer's own actors (pykka threads: network I/O, fetching ahead, heartbeats) live in the
bridge's process; the bridge's message handler only *collects* what they fetched. It polls
from its own message loop, driven by ticks, each a ``WakeupMessage`` (``wakeupAfter``) and
each a ``poll(poll_timeout_ms)`` (default 0: the loop is never blocked by a poll): every
millisecond while records flow and the subscriber has demand, every ``idle_interval_ms`` when a
poll found nothing or there is no demand (rebalance callbacks and the poll timer still need
polls while paused), and at once when a ``Request`` brings demand back. Each
scheduled tick carries a serial number and only the latest counts, so a ``Request`` can cut an
idle wait short although Thespian wakeups cannot be cancelled. Ticks are wakeups, never
self-sent messages: ``simpleSystemBase`` runs its queue until it is empty, so a chain of
self-sends would keep the caller's ``listen()`` / ``ask()`` from ever returning.

A dedicated polling thread would be wrong for both bases: Thespian's ``send`` is not
thread-safe (under ``simpleSystemBase`` every actor runs on the thread that calls into the
ActorSystem; under ``multiprocTCPBase`` the actor process's transport belongs to its main
loop), and an ``ActorSystem()`` handle opened from inside an actor process is a new external
client, not the actor. Ticks keep every send, every listener callback and every consumer call
on the actor's own thread.

Back-pressure: the consumer fetches only for the subscriber's demand. With no demand, or with
records still buffered, the bridge pauses every assigned partition (``consumer.pause``) and
keeps polling (nothing of a paused partition is returned); it resumes them when demand
returns and the buffer is empty. A tick polls again (``poll(0)``, at most a few times) only
while the buffer holds less than the demand, so the bridge holds at most the demand plus one
poll (``max.poll.records``), and after delivering less than one poll; the consumer's own
prefetch buffer is bounded in bytes (``fetch.max.bytes``).

Flow control and failures: at most ``max_in_flight_batches`` record batches are in flight to
the subscriber (sent, not acknowledged by ``Request.handled`` / ``Handled``), whatever the
demand. Thespian's TCP transport (``thespian/system/transport/asyncTransportBase.py``) runs
``MAX_PENDING_TRANSMITS`` (20) transmits of one actor process at once and queues the rest; from
``MAX_QUEUED_TRANSMITS`` (950) queued, ``send`` blocks in a transmit-only loop (no message is
handled: no poll, no commit, no ack) until the queue is back to 780; beyond
``DROP_TRANSMITS_LEVEL`` (1050) a send fails, and so does a transmit not done within
``THESPIAN_TRANSMIT_TIMEOUT_PERIOD`` (five minutes), with ``SendStatus.Failed``, which the
sending actor is never told about. An unbounded bridge ahead of a slow subscriber lost most of
a stream that way. A batch that comes back as Thespian's
``PoisonMessage`` (the subscriber raised on it) is not delivered: the bridge seeks its
partitions (and those of every later unacknowledged batch) back, drops the demand to zero and
sends :class:`BatchRejected`. A poisoned rebalance notification is acknowledged with the error
(the reconciliation goes on). A request the bridge raises on is answered with a typed error; no
exception leaves ``receiveMessage`` (Thespian would run the handler twice).

Rebalances: the bridge's listener runs inside ``poll()`` on the actor thread. It drops the
undelivered records of revoked/lost partitions, defers the callback's acknowledgement
(``consumer.defer_rebalance_ack()``), sends :class:`PartitionsRevoked` / ``Assigned`` /
``Lost`` to the subscriber and returns; the reconciliation waits until the subscriber's
:class:`RebalanceAck` (or ``max.poll.interval.ms``). Meanwhile the bridge keeps handling
messages, so the subscriber can commit through it before acknowledging.

May touch: the consumer's public API, and its core's (:mod:`kafka_actors.core`) to start a
commit without waiting (commit_sync's request with its retries and deadline, a future the
ticks check); the sender's and subscriber's addresses.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from thespian.actors import Actor, ActorExitRequest, PoisonMessage, WakeupMessage

from kafka_actors.actors.facade import ConsumerRebalanceListener, RebalanceReply
from kafka_actors.consumer import KafkaConsumer
from kafka_actors.core import commit_offsets
from kafka_actors.errors import (
    ConsumerClosedError,
    FatalConsumerError,
    IllegalStateError,
    KafkaError,
)
from kafka_actors.log import get_logger, new_trace_id, traced
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.thespian.errors import BridgeRequestFailedError, SubscriberFailedError
from kafka_actors.thespian.messages import (
    Assign,
    BatchRejected,
    BridgeStats,
    Close,
    Closed,
    Commit,
    CommitFailed,
    CommitOk,
    Configure,
    Configured,
    ErrorInfo,
    GetStats,
    Handled,
    PartitionsAssigned,
    PartitionsLost,
    PartitionsRevoked,
    RebalanceAck,
    RecordBatch,
    Request,
    StreamError,
    Subscribe,
    Subscribed,
)
from kafka_actors.thespian.stream import DemandStream

__all__ = ["KafkaBridge"]

_CHECK_COMMITS = "check-commits"
_ERROR_BACKOFF_S = 1.0
#: The delay of a tick that is due now. Not zero, and not a self-sent message:
#: simpleSystemBase's listen()/ask() loop runs until its queue is empty, so a chain of
#: self-sends (or of wakeups already due) would keep the caller's listen() from returning.
_BUSY_INTERVAL_S = 0.001
#: Polls after the first in one tick, to fill a batch message (each poll(0): no blocking).
_MAX_EXTRA_POLLS = 8
#: The most batches a bridge may keep in flight: well under Thespian's MAX_QUEUED_TRANSMITS
#: (950, when the transport stops receiving to drain) and DROP_TRANSMITS_LEVEL (1050, when it
#: fails sends), leaving room for commit replies and rebalance notifications.
MAX_IN_FLIGHT_BATCHES_LIMIT = 512
#: A batch unacknowledged this long is logged (once): a subscriber stuck on a batch, dead, or a
#: transmit Thespian failed without telling us (the window then stays full: a stall, no loss).
_UNACKNOWLEDGED_WARNING_S = 60.0


@dataclass(slots=True)
class _PendingCommit:
    request_id: int
    reply_to: Any
    future: concurrent.futures.Future[Any]


@dataclass(slots=True)
class _Closing:
    reply_to: Any
    rebalance_id: int
    deadline: float
    timeout_s: float


class _BridgeListener(ConsumerRebalanceListener):
    def __init__(self, bridge: KafkaBridge) -> None:
        self._bridge = bridge

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        self._bridge._notify(PartitionsRevoked, revoked)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        self._bridge._notify(PartitionsAssigned, assigned)

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        self._bridge._notify(PartitionsLost, lost)


class KafkaBridge(Actor):  # type: ignore[misc]
    """Serves one KafkaConsumer to Thespian actors (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._consumer: KafkaConsumer | None = None
        self._settings = Configure({})
        self._stream = DemandStream()
        self._subscriber: Any = None
        self._seq = 0  # the last stream message's seq (see messages: Ordering)
        self._sent_at: collections.deque[tuple[int, float]] = collections.deque()
        self._warned_seq = 0
        self._tick_serial = 0
        self._commits: list[_PendingCommit] = []
        self._commit_check_armed = False
        self._rebalances: dict[int, RebalanceReply] = {}
        self._rebalance_ids = itertools.count(1)
        self._paused: set[TopicPartition] = set()
        self._polls = 0
        self._closing: _Closing | None = None
        self._no_defer = False
        self._stopped = False
        self._log = get_logger("thespian_bridge")

    # -- dispatch --------------------------------------------------------------------------------

    def receiveMessage(self, message: Any, sender: Any) -> None:
        try:
            self._dispatch(message, sender)
        except Exception as exc:  # a handler error must not poison the actor
            kind = type(message).__name__
            self._log.exception("bridge_message_failed", kind=kind)
            try:
                self.send(sender, _failure_reply(message, exc))
            except Exception:  # not even the reply: Thespian's retry would run it twice
                self._log.exception("bridge_failure_reply_failed", kind=kind)

    def _dispatch(self, message: Any, sender: Any) -> None:
        if isinstance(message, WakeupMessage):
            if message.payload == _CHECK_COMMITS:
                self._commit_check_armed = False
                self._complete_commits()
            elif message.payload == self._tick_serial:
                self._tick()
        elif isinstance(message, Request):
            self._on_request(message, sender)
        elif isinstance(message, Handled):
            self._on_handled(message.seq, sender)
        elif isinstance(message, PoisonMessage):
            self._on_poison(message, sender)
        elif isinstance(message, Commit):
            self._on_commit(message, sender)
        elif isinstance(message, RebalanceAck):
            self._on_ack(message)
        elif isinstance(message, Subscribe):
            self._on_subscribe(message, sender)
        elif isinstance(message, Assign):
            self._on_assign(message, sender)
        elif isinstance(message, Configure):
            self._on_configure(message, sender)
        elif isinstance(message, GetStats):
            self.send(sender, self._stats())
        elif isinstance(message, Close):
            self._on_close(message, sender)
        elif isinstance(message, ActorExitRequest):
            if self._consumer is not None:
                self._finish_close(None, 5.0)
        else:
            self._log.debug("bridge_message_ignored", kind=type(message).__name__)

    # -- lifecycle ---------------------------------------------------------------------------------

    def _on_configure(self, message: Configure, sender: Any) -> None:
        if self._consumer is not None:
            raise IllegalStateError("This bridge already has a consumer")
        if not 1 <= message.max_in_flight_batches <= MAX_IN_FLIGHT_BATCHES_LIMIT:
            raise ValueError(
                f"max_in_flight_batches must be within 1..{MAX_IN_FLIGHT_BATCHES_LIMIT}, "
                f"got {message.max_in_flight_batches}"
            )
        self._settings = message
        self._stream.max_in_flight = message.max_in_flight_batches
        consumer = KafkaConsumer(dict(message.config), faults=message.faults)
        self._consumer = consumer
        self._log = self._log.bind(
            client_id=consumer.config.client_id, group_id=consumer.config.group_id
        )
        self._log.info("bridge_configured")
        self.send(sender, Configured(consumer.config.client_id, consumer.config.group_id))

    def _require_consumer(self) -> KafkaConsumer:
        if self._consumer is None:
            raise IllegalStateError("The bridge has no consumer: send Configure first")
        if self._closing is not None:
            raise ConsumerClosedError("The bridge is closing")
        return self._consumer

    def _on_subscribe(self, message: Subscribe, sender: Any) -> None:
        consumer = self._require_consumer()
        self._set_subscriber(message.subscriber)
        topics: Any = message.pattern if message.pattern is not None else list(message.topics)
        consumer.subscribe(topics, listener=_BridgeListener(self))
        reply = Subscribed(topics=tuple(message.topics), pattern=message.pattern)
        self._announce(reply, sender)

    def _on_assign(self, message: Assign, sender: Any) -> None:
        consumer = self._require_consumer()
        self._set_subscriber(message.subscriber)
        wanted = set(message.partitions)
        self._stream.drop(tp for tp in consumer.assignment() if tp not in wanted)
        self._paused &= wanted
        consumer.assign(message.partitions)
        self._announce(Subscribed(partitions=tuple(message.partitions)), sender)

    def _set_subscriber(self, subscriber: Any) -> None:
        if subscriber != self._subscriber:
            self._stream.restart()  # a new stream starts with no demand (records stay)
            self._seq = 0
            self._sent_at.clear()
            self._warned_seq = 0
        self._subscriber = subscriber

    def _to_subscriber(self, message: Any) -> None:
        """Send a message of the stream, numbered (Thespian may reorder messages)."""
        self._seq += 1
        self.send(self._subscriber, replace(message, seq=self._seq))

    def _announce(self, reply: Subscribed, sender: Any) -> None:
        self._to_subscriber(reply)
        if sender != self._subscriber:
            self.send(sender, reply)
        self._schedule(immediate=True)

    def _on_close(self, message: Close, sender: Any) -> None:
        consumer = self._consumer
        if consumer is None:
            self.send(sender, Closed())
            return
        if self._closing is not None:
            return
        self._stream.clear()
        self._stream.demand = 0
        assigned = frozenset(consumer.assignment())
        if self._subscriber is not None and consumer.subscription() and assigned:
            # Revoke everything at the bridge's level first, so the subscriber can commit
            # through us; consumer.close() then runs its own revocation without waiting.
            rid = next(self._rebalance_ids)
            self._closing = _Closing(
                sender, rid, time.monotonic() + message.timeout_s, message.timeout_s
            )
            self._to_subscriber(PartitionsRevoked(assigned, rid))
            self._schedule(immediate=True)
            return
        self._finish_close(sender, message.timeout_s)

    def _finish_close(self, reply_to: Any, timeout_s: float) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        self._no_defer = True
        for reply in list(self._rebalances.values()):
            reply.ack()
        self._rebalances.clear()
        try:
            consumer.close(timeout=timeout_s)
        finally:
            self._consumer = None
            self._closing = None
            self._stopped = True
            self._stream.clear()
            self._complete_commits(closing=True)
            self._log.info("bridge_closed")
        if reply_to is not None:
            self.send(reply_to, Closed())

    # -- the stream ----------------------------------------------------------------------------

    def _on_request(self, message: Request, sender: Any) -> None:
        if sender != self._subscriber:
            raise IllegalStateError("Request from an actor that is not this bridge's subscriber")
        if not isinstance(message.n, int) or isinstance(message.n, bool):
            raise TypeError(f"Request(n) needs an int, got {type(message.n).__name__}")
        was_idle = not self._stream.wants_fetch
        if message.handled > 0:
            self._stream.acknowledge(message.handled)
        self._stream.request(message.n)
        self._resume_stream(was_idle)

    def _on_handled(self, seq: int, sender: Any) -> None:
        if sender != self._subscriber:
            raise IllegalStateError("Handled from an actor that is not this bridge's subscriber")
        was_idle = not self._stream.wants_fetch
        self._stream.acknowledge(seq)
        self._resume_stream(was_idle)

    def _resume_stream(self, was_idle: bool) -> None:
        """After demand or an acknowledgement: send what may go, fetch again if it may."""
        self._deliver()
        if was_idle and self._stream.wants_fetch and self._closing is None:
            self._schedule(immediate=True)

    def _deliver(self) -> int:
        if self._subscriber is None or self._consumer is None:
            return 0
        limit = self._batch_limit()
        stream = self._stream
        total = 0
        while stream.can_send:
            batch = stream.take(limit)
            if not batch:
                return total
            positions = stream.sent(self._seq + 1, batch)
            self._to_subscriber(RecordBatch(batch, positions))  # numbered self._seq + 1
            self._sent_at.append((self._seq, time.monotonic()))
            total += len(batch)
        return total

    def _batch_limit(self) -> int:
        return max(1, self._settings.max_batch_records)

    def _schedule(self, *, immediate: bool, delay_s: float | None = None) -> None:
        """Schedule the next tick; any tick scheduled before is now stale."""
        if self._stopped:
            return
        self._tick_serial += 1
        if immediate:
            seconds = _BUSY_INTERVAL_S
        else:
            seconds = delay_s if delay_s is not None else self._settings.idle_interval_ms / 1000
        self.wakeupAfter(timedelta(seconds=seconds), self._tick_serial)

    def _tick(self) -> None:
        consumer = self._consumer
        if consumer is None or self._stopped:
            return
        self._complete_commits()
        self._prune_rebalances()
        self._check_unacknowledged()
        closing = self._closing
        if closing is not None and time.monotonic() >= closing.deadline:
            self._log.warning("close_revocation_not_acknowledged")
            self._finish_close(closing.reply_to, 1.0)
            return
        fetch = self._stream.wants_fetch and closing is None
        self._apply_backpressure(consumer, fetch)
        timeout = self._settings.poll_timeout_ms / 1000 if fetch else 0.0
        try:
            with traced(new_trace_id()):
                records = consumer.poll(timeout)
        except KafkaError as exc:
            fatal = isinstance(exc, (FatalConsumerError, ConsumerClosedError))
            self._log.warning("bridge_poll_failed", error=repr(exc), fatal=fatal)
            if self._subscriber is not None:
                self._to_subscriber(StreamError(ErrorInfo.of(exc), fatal))
            if fatal:
                self._stopped = True
                return
            self._schedule(immediate=False, delay_s=_ERROR_BACKOFF_S)
            return
        self._polls += 1
        stream = self._stream
        if records:
            stream.add(records)
        # Fill one batch message up to the demand with a few more polls (never blocking):
        # the buffer stays within the demand plus one poll.
        extra = 0
        while (
            records
            and extra < _MAX_EXTRA_POLLS
            and stream.buffered_records < min(stream.demand, self._batch_limit())
        ):
            try:
                records = consumer.poll(0)
            except KafkaError:
                break  # the next tick's poll raises it again and reports it
            self._polls += 1
            extra += 1
            stream.add(records)
        delivered = self._deliver()
        # Tick again at once only while records flow: an empty poll waits for the idle
        # interval (under simpleSystemBase, ticks always due would keep listen() running).
        flowing = bool(records) or delivered > 0
        self._schedule(immediate=flowing and self._stream.wants_fetch and self._closing is None)

    def _check_unacknowledged(self) -> None:
        oldest = self._stream.oldest_in_flight
        sent_at = self._sent_at
        while sent_at and (oldest is None or sent_at[0][0] < oldest):
            sent_at.popleft()
        if not sent_at:
            return
        seq, at = sent_at[0]
        age = time.monotonic() - at
        if age >= _UNACKNOWLEDGED_WARNING_S and seq != self._warned_seq:
            self._warned_seq = seq
            self._log.warning(
                "record_batch_unacknowledged",
                seq=seq,
                age_s=round(age, 1),
                in_flight=self._stream.in_flight,
            )

    def _apply_backpressure(self, consumer: KafkaConsumer, fetch: bool) -> None:
        try:
            assignment = consumer.assignment()
            self._paused &= assignment
            if fetch:
                if self._paused:
                    consumer.resume(self._paused)
                    self._paused = set()
            else:
                more = assignment - self._paused
                if more:
                    consumer.pause(more)
                    self._paused |= more
        except IllegalStateError:
            pass  # the assignment changed under us (reconciliation): next tick

    # -- poison: a message its receiver raised on, returned by Thespian ------------------------

    def _on_poison(self, message: PoisonMessage, sender: Any) -> None:
        poison = message.poisonMessage
        details = _last_line(message.details)
        kind = type(poison).__name__
        if isinstance(poison, RecordBatch) and sender == self._subscriber:
            self._on_batch_rejected(poison, details)
        elif isinstance(poison, (PartitionsRevoked, PartitionsAssigned, PartitionsLost)):
            self._log.warning(
                "rebalance_notification_failed", kind=kind, rebalance_id=poison.rebalance_id
            )
            # The subscriber raised in its callback: acknowledge with that error so the
            # reconciliation goes on now rather than at max.poll.interval.ms.
            self._on_ack(RebalanceAck(poison.rebalance_id, f"the subscriber raised: {details}"))
        else:
            self._log.warning("bridge_message_returned", kind=kind, details=details)

    def _on_batch_rejected(self, batch: RecordBatch, details: str) -> None:
        consumer = self._consumer
        if consumer is None or not 0 < batch.seq <= self._seq:
            self._log.info("stale_batch_returned", seq=batch.seq)
            return
        rewound = self._stream.reject(batch.seq, batch.records)
        assignment = consumer.assignment()
        sought: dict[TopicPartition, int] = {}
        for tp, offset in rewound.items():
            if tp in assignment:  # a revoked partition is no longer ours to seek
                consumer.seek(tp, offset)
                sought[tp] = offset
        error = SubscriberFailedError(
            f"the subscriber raised on record batch {batch.seq} ({len(batch.records)} "
            f"records): {details}"
        )
        self._log.warning(
            "record_batch_rejected",
            seq=batch.seq,
            records=len(batch.records),
            rewound={str(tp): offset for tp, offset in sought.items()},
            details=details,
        )
        self.send(
            self._subscriber,
            BatchRejected(batch.seq, self._seq + 1, sought, ErrorInfo.of(error)),
        )

    # -- commits -----------------------------------------------------------------------------

    def _on_commit(self, message: Commit, sender: Any) -> None:
        consumer = self._consumer
        if consumer is None:
            self.send(
                sender,
                CommitFailed(
                    message.request_id,
                    ErrorInfo.of(IllegalStateError("The bridge has no consumer")),
                ),
            )
            return
        offsets = message.offsets if message.offsets is not None else self._stream.delivered
        if not offsets:
            self.send(sender, CommitOk(message.request_id, {}))
            return
        try:
            future = _start_commit(consumer, offsets, self._settings.commit_timeout_ms)
        except Exception as exc:
            self.send(sender, CommitFailed(message.request_id, _failure_info(message, exc)))
            return
        self._commits.append(_PendingCommit(message.request_id, sender, future))
        self._arm_commit_check()

    def _arm_commit_check(self) -> None:
        if self._commits and not self._commit_check_armed:
            self._commit_check_armed = True
            self.wakeupAfter(timedelta(milliseconds=2), _CHECK_COMMITS)

    def _complete_commits(self, *, closing: bool = False) -> None:
        still: list[_PendingCommit] = []
        for pending in self._commits:
            future = pending.future
            if not future.done():
                if closing:
                    future.cancel()
                    self.send(
                        pending.reply_to,
                        CommitFailed(
                            pending.request_id,
                            ErrorInfo.of(ConsumerClosedError("The bridge closed")),
                        ),
                    )
                else:
                    still.append(pending)
                continue
            error = future.exception() if not future.cancelled() else ConsumerClosedError()
            if error is None:
                result: Mapping[TopicPartition, OffsetAndMetadata] = future.result()
                self.send(pending.reply_to, CommitOk(pending.request_id, dict(result)))
            else:
                self.send(pending.reply_to, CommitFailed(pending.request_id, ErrorInfo.of(error)))
        self._commits = still
        if not closing:
            self._arm_commit_check()

    # -- rebalance notifications -----------------------------------------------------------------

    def _notify(
        self,
        kind: type[PartitionsRevoked] | type[PartitionsAssigned] | type[PartitionsLost],
        partitions: set[TopicPartition],
    ) -> None:
        """Called by the listener inside ``poll()``/``close()``, on this actor's thread."""
        parts = frozenset(partitions)
        if kind is not PartitionsAssigned:
            dropped = self._stream.drop(parts)
            self._paused -= parts
            if dropped:
                self._log.info("undelivered_records_dropped", count=dropped)
        if self._no_defer or self._subscriber is None or self._consumer is None:
            return  # closing (the subscriber had its revocation already), or nobody to ask
        reply = self._consumer.defer_rebalance_ack()
        rid = next(self._rebalance_ids)
        self._rebalances[rid] = reply
        self._log.info("rebalance_notified", kind=kind.__name__, rebalance_id=rid)
        self._to_subscriber(kind(parts, rid))

    def _on_ack(self, message: RebalanceAck) -> None:
        closing = self._closing
        if closing is not None and message.rebalance_id == closing.rebalance_id:
            self._finish_close(closing.reply_to, max(1.0, closing.deadline - time.monotonic()))
            return
        reply = self._rebalances.pop(message.rebalance_id, None)
        if reply is None:
            self._log.info("rebalance_ack_late", rebalance_id=message.rebalance_id)
            return
        error = RuntimeError(message.error) if message.error is not None else None
        reply.ack(error)
        self._schedule(immediate=True)

    def _prune_rebalances(self) -> None:
        for rid, reply in list(self._rebalances.items()):
            if reply.done:  # expired: max.poll.interval.ms passed without the ack
                del self._rebalances[rid]
                self._log.warning("rebalance_ack_expired", rebalance_id=rid)

    # -- observation -------------------------------------------------------------------------------

    def _stats(self) -> BridgeStats:
        consumer = self._consumer
        consumer_bytes = 0
        assignment: tuple[TopicPartition, ...] = ()
        if consumer is not None:
            try:
                consumer_bytes = int(consumer.metrics().get("buffered-bytes", 0))
            except Exception:
                consumer_bytes = -1
            assignment = tuple(sorted(consumer.assignment(), key=str))
        stream = self._stream
        return BridgeStats(
            demand=stream.demand,
            buffered_records=stream.buffered_records,
            buffered_bytes=stream.buffered_bytes,
            delivered_records=stream.delivered_records,
            polls=self._polls,
            paused=tuple(sorted(self._paused, key=str)),
            assignment=assignment,
            consumer_buffered_bytes=consumer_bytes,
            rss_bytes=_rss_bytes(),
            pending_rebalance_acks=len(self._rebalances),
            pending_commits=len(self._commits),
            in_flight_batches=stream.in_flight,
            rejected_batches=stream.rejected_batches,
        )


def _start_commit(
    consumer: KafkaConsumer,
    offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
    timeout_ms: int | None,
) -> concurrent.futures.Future[Any]:
    """commit_sync's request (retried until its deadline) without the wait: a future."""
    core = consumer.core
    core.require_group("commit")
    wanted = commit_offsets(offsets)
    core.ensure_open()
    deadline = core.deadline(None if timeout_ms is None else timeout_ms / 1000)
    return core.commit(wanted, deadline, new_trace_id(), "commit")


def _failure_info(message: Any, exc: Exception) -> ErrorInfo:
    if isinstance(exc, KafkaError):
        return ErrorInfo.of(exc)
    # A bad request or a bug: named as the bridge's failure, the cause in the message.
    kind = type(message).__name__
    return ErrorInfo.of(BridgeRequestFailedError(f"{kind} failed: {type(exc).__name__}: {exc}"))


def _failure_reply(message: Any, exc: Exception) -> CommitFailed | StreamError:
    """The typed reply to a request the bridge raised on."""
    info = _failure_info(message, exc)
    request_id = getattr(message, "request_id", None)
    if isinstance(message, Commit) and isinstance(request_id, int):
        return CommitFailed(request_id, info)
    return StreamError(info)


def _last_line(details: object) -> str:
    """The last non-empty line of a PoisonMessage's details (a traceback's exception line)."""
    lines = [line.strip() for line in str(details or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no details"


def _rss_bytes() -> int:
    try:
        with open(f"/proc/{os.getpid()}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return -1
