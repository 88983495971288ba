"""``KafkaBridge``: a pykka actor that owns a :class:`~kafka_actors.KafkaConsumer` and streams
its records to one service actor by messages (protocol: :mod:`kafka_actors.pykka.messages`,
the same messages and contract as the Thespian bridge).

Owns: the consumer (created when the bridge is built, so a bad configuration raises at
``KafkaBridge.start(config)``; closed by :class:`Close` or when the actor stops), the
demand-driven stream to one subscriber actor (a
:class:`~kafka_actors.bridges.stream.DemandStream`), pending commits (and the one worker
thread that runs them), pending rebalance acknowledgements and the timer of its next poll.

How the bridge polls
--------------------
The consumer's own actors (network I/O, fetching ahead, heartbeats) run on their own threads;
the bridge only *collects* what they fetched. It polls from its own message loop, driven by
tick messages, each a ``poll(poll_timeout_ms)`` (default 0: a poll never blocks the loop).
While records flow and the subscriber has demand, the next tick is told to the bridge itself
at once: pykka's inbox is a FIFO queue, so a self-told tick waits behind every message
already queued (a ``Request``, a ``Commit``, a ``RebalanceAck`` never starves). When a poll
found nothing, or there is no demand, the next tick comes from a timer after
``idle_interval_ms`` (the process-wide timer thread of :func:`kafka_actors.clock.
default_scheduler`, which only ``tell``\\ s): the rebalance callbacks and the consumer's poll
timer still need polls while nothing flows. Each tick carries a serial number and only the
latest counts, so a ``Request`` that brings demand back starts a tick at once and the idle
timer's tick, when it fires, is ignored. A dedicated polling thread would put the listener
callbacks on a thread other than the actor's; ticks keep every consumer call except commits,
every listener callback and every send on the actor's own thread.

Back-pressure: the consumer fetches only for the subscriber's demand. With no demand, or with
records still buffered, the bridge pauses every assigned partition (``consumer.pause``) and
keeps polling (nothing of a paused partition is returned); it resumes them when demand returns
and the buffer is empty. The bridge holds at most the demand plus one poll
(``max.poll.records``); at most ``max_in_flight_batches`` record batches are in flight to the
subscriber (sent, not acknowledged by ``Request.handled`` / ``Handled``), whatever the demand,
so a slow subscriber's inbox stays bounded too.

Commits never block the actor: ``consumer.commit_sync`` (its retries until the commit timeout)
runs on one worker thread the bridge owns, in the order the commits came; its result comes
back to the bridge as a message and is answered from there. So the subscriber can commit
through the bridge while a revocation waits for its acknowledgement (the bridge keeps polling
and handling messages meanwhile): no deadlock.

Rebalances: the bridge's listener runs inside ``poll()`` on the actor thread. It drops the
undelivered records of revoked/lost partitions, defers the callback's acknowledgement
(``consumer.defer_rebalance_ack()``), tells :class:`PartitionsRevoked` / ``Assigned`` /
``Lost`` to the subscriber and returns; the reconciliation waits until the subscriber's
:class:`RebalanceAck` (or ``max.poll.interval.ms``).

Failures: no exception leaves ``on_receive`` (pykka would stop the bridge); a request the
bridge fails is answered with a typed error (:class:`CommitFailed` for a commit, else
:class:`StreamError`). A subscriber's :class:`BatchFailed` voids that batch and every later
unacknowledged one: the bridge seeks their partitions back, drops the demand to zero and
tells :class:`BatchRejected`. A subscriber actor that dies (pykka stops an actor whose
``on_receive`` raised) is noticed at the next send or tick: its unacknowledged batches are
sought back the same way, its pending rebalance acknowledgements are given (with an error),
and the stream waits, paused, for the next ``Subscribe``.

May touch: the consumer's public API only; the subscriber's and reply addresses; its own
ref (ticks, commit results) and the default scheduler's timer.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import pykka

from kafka_actors.actors.facade import ConsumerRebalanceListener, RebalanceReply
from kafka_actors.bridges.errors import BridgeRequestFailedError, SubscriberFailedError
from kafka_actors.bridges.stream import DemandStream
from kafka_actors.clock import Cancellable, Scheduler, default_scheduler
from kafka_actors.consumer import KafkaConsumer
from kafka_actors.errors import (
    ConsumerClosedError,
    FatalConsumerError,
    IllegalStateError,
    KafkaError,
)
from kafka_actors.log import get_logger, new_trace_id, traced
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.pykka.messages import (
    Assign,
    BatchFailed,
    BatchRejected,
    BridgeStats,
    Call,
    Close,
    Closed,
    Commit,
    CommitFailed,
    CommitOk,
    ErrorInfo,
    GetStats,
    Handled,
    PartitionsAssigned,
    PartitionsLost,
    PartitionsRevoked,
    RebalanceAck,
    RecordBatch,
    Reply,
    Request,
    StreamError,
    Subscribe,
    Subscribed,
)

__all__ = ["MAX_IN_FLIGHT_BATCHES_LIMIT", "KafkaBridge", "call"]

_ERROR_BACKOFF_S = 1.0
#: Polls after the first in one tick, to fill a batch message (each poll(0): no blocking).
_MAX_EXTRA_POLLS = 8
#: The most batches a bridge may keep in flight to its subscriber.
MAX_IN_FLIGHT_BATCHES_LIMIT = 512


@dataclass(frozen=True, slots=True)
class _Tick:
    serial: int


@dataclass(frozen=True, slots=True)
class _CommitDone:
    request_id: int
    reply_to: Reply | None
    future: concurrent.futures.Future[dict[TopicPartition, OffsetAndMetadata]]


@dataclass(slots=True)
class _Closing:
    reply_to: Reply | None
    rebalance_id: int
    deadline: float


class _BridgeListener(ConsumerRebalanceListener):
    def __init__(self, bridge: KafkaBridge) -> None:
        self._bridge = bridge

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        self._bridge._notify(PartitionsRevoked, revoked)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        self._bridge._notify(PartitionsAssigned, assigned)

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        self._bridge._notify(PartitionsLost, lost)


def call(bridge: pykka.ActorRef[Any], message: Any, timeout: float | None = 60.0) -> Any:
    """For code outside an actor: send ``message`` in a :class:`Call` and wait for its reply
    (``pykka.Timeout`` after ``timeout`` seconds)."""
    future: pykka.ThreadingFuture[Any] = pykka.ThreadingFuture()
    bridge.tell(Call(message, future.set))
    return future.get(timeout=timeout)


class KafkaBridge(pykka.ThreadingActor):
    """Serves one KafkaConsumer to one pykka service actor (see the module docstring).

    ``config``: Kafka configuration keys (``bootstrap.servers``...). ``poll_timeout_ms``: how
    long one ``poll()`` may block the bridge's loop while the subscriber has demand (default
    0); ``idle_interval_ms``: how often the bridge polls when records do not flow;
    ``max_batch_records``: the most records in one :class:`RecordBatch`;
    ``max_in_flight_batches``: the most batches sent and not acknowledged (1 .. 512);
    ``commit_timeout_ms``: how long a commit retries (default ``default.api.timeout.ms``);
    ``faults``: a :class:`~kafka_actors.supervisors.FaultInjector` for tests.
    """

    def __init__(
        self,
        config: Mapping[str, object],
        *,
        poll_timeout_ms: int = 0,
        idle_interval_ms: int = 20,
        max_batch_records: int = 2000,
        max_in_flight_batches: int = 16,
        commit_timeout_ms: int | None = None,
        faults: Any = None,
        scheduler: Scheduler | None = None,
    ) -> None:
        super().__init__()
        if not 1 <= max_in_flight_batches <= MAX_IN_FLIGHT_BATCHES_LIMIT:
            raise ValueError(
                f"max_in_flight_batches must be within 1..{MAX_IN_FLIGHT_BATCHES_LIMIT}, "
                f"got {max_in_flight_batches}"
            )
        if max_batch_records < 1 or idle_interval_ms < 1 or poll_timeout_ms < 0:
            raise ValueError(
                "max_batch_records and idle_interval_ms must be >= 1, poll_timeout_ms >= 0"
            )
        self._poll_timeout_s = poll_timeout_ms / 1000
        self._idle_s = idle_interval_ms / 1000
        self._batch_limit = max_batch_records
        self._commit_timeout_s = None if commit_timeout_ms is None else commit_timeout_ms / 1000
        self._scheduler = scheduler or default_scheduler()
        self._consumer: KafkaConsumer | None = KafkaConsumer(dict(config), faults=faults)
        self._stream = DemandStream(max_in_flight_batches)
        self._subscriber: pykka.ActorRef[Any] | None = None
        self._seq = 0  # the last stream message's seq
        self._tick_serial = 0
        self._timer: Cancellable | None = None
        self._committer: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending_commits = 0
        self._rebalances: dict[int, RebalanceReply] = {}
        self._rebalance_ids = itertools.count(1)
        self._paused: set[TopicPartition] = set()
        self._polls = 0
        self._closing: _Closing | None = None
        self._no_defer = False
        self._stopped = False
        self._stopping = False
        consumer = self._consumer
        self._log = get_logger("pykka_bridge").bind(
            client_id=consumer.config.client_id, group_id=consumer.config.group_id
        )

    # -- pykka hooks -------------------------------------------------------------------------------

    def on_start(self) -> None:
        self._log.info("bridge_started")

    def on_stop(self) -> None:
        self._stopping = True
        self._finish_close(None, 5.0)

    def on_failure(self, *_args: Any) -> None:  # not reached: on_receive catches everything
        self._stopping = True
        self._finish_close(None, 5.0)

    def on_receive(self, message: Any) -> Any:
        reply_to: Reply | None = None
        inner = message
        if isinstance(message, Call):
            inner, reply_to = message.message, message.reply_to
        try:
            return self._dispatch(inner, reply_to)
        except Exception as exc:  # a handler error must not stop the bridge
            kind = type(inner).__name__
            self._log.exception("bridge_message_failed", kind=kind)
            target = reply_to if reply_to is not None else self._subscriber_tell()
            if target is not None:
                try:
                    target(_failure_reply(inner, exc))
                except Exception:
                    self._log.exception("bridge_failure_reply_failed", kind=kind)
            return None

    def _dispatch(self, message: Any, reply_to: Reply | None) -> Any:
        if isinstance(message, _Tick):
            if message.serial == self._tick_serial:
                self._tick()
        elif isinstance(message, Request):
            self._on_request(message)
        elif isinstance(message, Handled):
            was_idle = not self._stream.wants_fetch
            self._stream.acknowledge(message.seq)
            self._resume_stream(was_idle)
        elif isinstance(message, _CommitDone):
            self._on_commit_done(message)
        elif isinstance(message, Commit):
            self._on_commit(message, reply_to)
        elif isinstance(message, RebalanceAck):
            self._on_ack(message)
        elif isinstance(message, BatchFailed):
            self._on_batch_failed(message)
        elif isinstance(message, Subscribe):
            return self._on_subscribe(message, reply_to)
        elif isinstance(message, Assign):
            return self._on_assign(message, reply_to)
        elif isinstance(message, GetStats):
            stats = self._stats()
            if reply_to is not None:
                reply_to(stats)
            return stats
        elif isinstance(message, Close):
            self._on_close(message, reply_to)
        else:
            self._log.debug("bridge_message_ignored", kind=type(message).__name__)
        return None

    # -- subscription ------------------------------------------------------------------------------

    def _require_consumer(self) -> KafkaConsumer:
        if self._consumer is None:
            raise ConsumerClosedError("The bridge is closed")
        if self._closing is not None:
            raise ConsumerClosedError("The bridge is closing")
        return self._consumer

    def _on_subscribe(self, message: Subscribe, reply_to: Reply | None) -> Subscribed:
        consumer = self._require_consumer()
        self._set_subscriber(message.subscriber)
        topics: Any = message.pattern if message.pattern is not None else list(message.topics)
        consumer.subscribe(topics, listener=_BridgeListener(self))
        return self._announce(
            Subscribed(topics=tuple(message.topics), pattern=message.pattern), reply_to
        )

    def _on_assign(self, message: Assign, reply_to: Reply | None) -> Subscribed:
        consumer = self._require_consumer()
        self._set_subscriber(message.subscriber)
        wanted = set(message.partitions)
        self._stream.drop(tp for tp in consumer.assignment() if tp not in wanted)
        self._paused &= wanted
        consumer.assign(message.partitions)
        return self._announce(Subscribed(partitions=tuple(message.partitions)), reply_to)

    def _set_subscriber(self, subscriber: Any) -> None:
        if not isinstance(subscriber, pykka.ActorRef):
            raise TypeError(
                f"the subscriber must be a pykka ActorRef, got {type(subscriber).__name__}"
            )
        current = self._subscriber
        if current is None or current.actor_urn != subscriber.actor_urn:
            if current is not None:
                self._rewind_in_flight()
            self._stream.restart()  # a new stream starts with no demand (records stay)
            self._seq = 0
        self._subscriber = subscriber

    def _announce(self, reply: Subscribed, reply_to: Reply | None) -> Subscribed:
        self._to_subscriber(reply)
        if reply_to is not None:
            reply_to(reply)
        self._schedule(immediate=True)
        return reply

    def _subscriber_tell(self) -> Reply | None:
        subscriber = self._subscriber
        return None if subscriber is None else subscriber.tell

    def _to_subscriber(self, message: Any) -> bool:
        """Tell a stream message (numbered) to the subscriber; False when it is gone."""
        subscriber = self._subscriber
        if subscriber is None:
            return False
        self._seq += 1
        try:
            subscriber.tell(replace(message, seq=self._seq))
        except pykka.ActorDeadError:
            self._subscriber_gone()
            return False
        return True

    def _subscriber_gone(self) -> None:
        """The subscriber actor stopped: nothing in flight counts as delivered, nobody will
        acknowledge a rebalance; the stream waits, paused, for the next Subscribe."""
        self._log.warning("subscriber_stopped", in_flight=self._stream.in_flight)
        self._rewind_in_flight()
        self._subscriber = None
        self._stream.restart()
        for reply in self._rebalances.values():
            reply.ack(SubscriberFailedError("the subscriber actor stopped"))
        self._rebalances.clear()

    def _rewind_in_flight(self) -> dict[TopicPartition, int]:
        oldest = self._stream.oldest_in_flight
        if oldest is None or self._consumer is None:
            return {}
        return self._seek_back(self._stream.reject(oldest, ()))

    def _seek_back(self, rewound: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        consumer = self._consumer
        sought: dict[TopicPartition, int] = {}
        if consumer is None:
            return sought
        assignment = consumer.assignment()
        for tp, offset in rewound.items():
            if tp in assignment:  # a revoked partition is no longer ours to seek
                consumer.seek(tp, offset)
                sought[tp] = offset
        return sought

    # -- the stream --------------------------------------------------------------------------------

    def _on_request(self, message: Request) -> None:
        if not isinstance(message.n, int) or isinstance(message.n, bool):
            raise TypeError(f"Request(n) needs an int, got {type(message.n).__name__}")
        was_idle = not self._stream.wants_fetch
        if message.handled > 0:
            self._stream.acknowledge(message.handled)
        self._stream.request(message.n)
        self._resume_stream(was_idle)

    def _resume_stream(self, was_idle: bool) -> None:
        """After demand or an acknowledgement: send what may go, fetch again if it may."""
        self._deliver()
        if was_idle and self._stream.wants_fetch and self._closing is None:
            self._schedule(immediate=True)

    def _deliver(self) -> int:
        if self._subscriber is None or self._consumer is None:
            return 0
        stream = self._stream
        total = 0
        while stream.can_send:
            batch = stream.take(self._batch_limit)
            if not batch:
                break
            positions = stream.sent(self._seq + 1, batch)
            if not self._to_subscriber(RecordBatch(batch, positions)):
                break  # gone: _subscriber_gone rewound this batch with the others
            total += len(batch)
        return total

    def _schedule(self, *, immediate: bool, delay_s: float | None = None) -> None:
        """Schedule the next tick; any tick scheduled before is now stale."""
        if self._stopped:
            return
        self._tick_serial += 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        tick = _Tick(self._tick_serial)
        if immediate:
            self.actor_ref.tell(tick)
            return
        ref = self.actor_ref

        def fire() -> None:
            try:
                ref.tell(tick)
            except pykka.ActorDeadError:
                pass

        self._timer = self._scheduler.call_later(self._idle_s if delay_s is None else delay_s, fire)

    def _tick(self) -> None:
        consumer = self._consumer
        if consumer is None or self._stopped:
            return
        self._prune_rebalances()
        subscriber = self._subscriber
        if subscriber is not None and not subscriber.is_alive():
            self._subscriber_gone()
        closing = self._closing
        if closing is not None and time.monotonic() >= closing.deadline:
            self._log.warning("close_revocation_not_acknowledged")
            self._finish_close(closing.reply_to, 1.0)
            return
        fetch = self._stream.wants_fetch and closing is None and self._subscriber is not None
        self._apply_backpressure(consumer, fetch)
        try:
            with traced(new_trace_id()):
                records = consumer.poll(self._poll_timeout_s if fetch else 0.0)
        except KafkaError as exc:
            fatal = isinstance(exc, (FatalConsumerError, ConsumerClosedError))
            self._log.warning("bridge_poll_failed", error=repr(exc), fatal=fatal)
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
        extra = 0
        while (
            records
            and extra < _MAX_EXTRA_POLLS
            and stream.buffered_records < min(stream.demand, self._batch_limit)
        ):
            try:
                records = consumer.poll(0)
            except KafkaError:
                break  # the next tick's poll raises it again and reports it
            self._polls += 1
            extra += 1
            stream.add(records)
        delivered = self._deliver()
        flowing = bool(records) or delivered > 0
        self._schedule(immediate=flowing and stream.wants_fetch and self._closing is None)

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

    def _on_batch_failed(self, message: BatchFailed) -> None:
        if self._subscriber is None or not 0 < message.seq <= self._seq:
            self._log.info("stale_batch_failure", seq=message.seq)
            return
        sought = self._seek_back(self._stream.reject(message.seq, ()))
        error = SubscriberFailedError(
            f"the subscriber raised on record batch {message.seq}: {message.error}"
        )
        self._log.warning(
            "record_batch_rejected",
            seq=message.seq,
            rewound={str(tp): offset for tp, offset in sought.items()},
            error=str(message.error),
        )
        try:
            self._subscriber.tell(
                BatchRejected(message.seq, self._seq + 1, sought, ErrorInfo.of(error))
            )
        except pykka.ActorDeadError:
            self._subscriber_gone()

    # -- commits -----------------------------------------------------------------------------

    def _on_commit(self, message: Commit, reply_to: Reply | None) -> None:
        reply = reply_to if reply_to is not None else self._subscriber_tell()
        consumer = self._consumer
        if consumer is None:
            raise ConsumerClosedError("The bridge is closed")
        offsets = message.offsets if message.offsets is not None else self._stream.delivered
        if not offsets:
            if reply is not None:
                reply(CommitOk(message.request_id, {}))
            return
        if self._committer is None:
            self._committer = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="kafka-actors-pykka-bridge-commit"
            )
        future = self._committer.submit(consumer.commit_sync, dict(offsets), self._commit_timeout_s)
        self._pending_commits += 1
        done = _CommitDone(message.request_id, reply, future)
        ref = self.actor_ref

        def back(_: object) -> None:
            try:
                ref.tell(done)
            except pykka.ActorDeadError:
                if reply is not None:  # the bridge stopped: answer from here
                    reply(_commit_reply(done))

        future.add_done_callback(back)

    def _on_commit_done(self, message: _CommitDone) -> None:
        self._pending_commits -= 1
        if message.reply_to is not None:
            message.reply_to(_commit_reply(message))

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
        if not self._to_subscriber(kind(parts, rid)):
            reply.ack(SubscriberFailedError("the subscriber actor stopped"))
            self._rebalances.pop(rid, None)

    def _on_ack(self, message: RebalanceAck) -> None:
        closing = self._closing
        if closing is not None and message.rebalance_id == closing.rebalance_id:
            self._finish_close(closing.reply_to, max(1.0, closing.deadline - time.monotonic()))
            return
        reply = self._rebalances.pop(message.rebalance_id, None)
        if reply is None:
            self._log.info("rebalance_ack_late", rebalance_id=message.rebalance_id)
            return
        reply.ack(RuntimeError(message.error) if message.error is not None else None)
        self._schedule(immediate=True)

    def _prune_rebalances(self) -> None:
        for rid, reply in list(self._rebalances.items()):
            if reply.done:  # expired: max.poll.interval.ms passed without the ack
                del self._rebalances[rid]
                self._log.warning("rebalance_ack_expired", rebalance_id=rid)

    # -- closing -----------------------------------------------------------------------------------

    def _on_close(self, message: Close, reply_to: Reply | None) -> None:
        consumer = self._consumer
        if consumer is None:
            if reply_to is not None:
                reply_to(Closed())
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
            self._closing = _Closing(reply_to, rid, time.monotonic() + message.timeout_s)
            if self._to_subscriber(PartitionsRevoked(assigned, rid)):
                self._schedule(immediate=True)
                return
        self._finish_close(reply_to, message.timeout_s)

    def _finish_close(self, reply_to: Reply | None, timeout_s: float) -> None:
        consumer = self._consumer
        if consumer is not None:
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
                if self._timer is not None:
                    self._timer.cancel()
                if self._committer is not None:
                    self._committer.shutdown(wait=False, cancel_futures=True)
                self._log.info("bridge_closed")
        if reply_to is not None:
            reply_to(Closed())
        if not self._stopping:
            self._stopping = True
            self.stop()

    # -- observation -------------------------------------------------------------------------------

    def _stats(self) -> BridgeStats:
        consumer = self._consumer
        consumer_bytes = 0
        assignment: tuple[TopicPartition, ...] = ()
        if consumer is not None:
            consumer_bytes = int(consumer.metrics().get("buffered-bytes", 0))
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
            rss_bytes=-1,  # not measured: the bridge shares the service's process
            pending_rebalance_acks=len(self._rebalances),
            pending_commits=self._pending_commits,
            in_flight_batches=stream.in_flight,
            rejected_batches=stream.rejected_batches,
        )


def _commit_reply(done: _CommitDone) -> CommitOk | CommitFailed:
    future = done.future
    error = future.exception() if not future.cancelled() else ConsumerClosedError()
    if error is None:
        return CommitOk(done.request_id, dict(future.result()))
    return CommitFailed(done.request_id, ErrorInfo.of(error))


def _failure_reply(message: Any, exc: Exception) -> CommitFailed | StreamError:
    """The typed reply to a request the bridge raised on."""
    if isinstance(exc, KafkaError):
        info = ErrorInfo.of(exc)
    else:  # a bad request or a bug: named as the bridge's failure, the cause in the message
        kind = type(message).__name__
        info = ErrorInfo.of(BridgeRequestFailedError(f"{kind} failed: {type(exc).__name__}: {exc}"))
    if isinstance(message, Commit):
        return CommitFailed(message.request_id, info)
    return StreamError(info)
