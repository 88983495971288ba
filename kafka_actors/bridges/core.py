"""``BridgeCore``: the half of a bridge that does not depend on its actor runtime.

Owns: the state and the logic both bridges (Thespian: :mod:`kafka_actors.thespian.bridge`;
pykka: :mod:`kafka_actors.pykka.bridge`) share: the consumer, the demand stream to one
subscriber (a :class:`~kafka_actors.bridges.stream.DemandStream`), the numbering of stream
messages, the partitions paused for back-pressure, the pending rebalance acknowledgements, one
tick of polling (poll, fill a batch up to the demand, deliver, schedule the next tick), the
bridge-level revocation of a close, and the typed reply to a request that failed.

A bridge subclasses it next to its runtime's actor class and provides the transport:
:meth:`_send_stream` (a stream message to the subscriber), :meth:`_reply` (a reply to a
request's sender), :meth:`_schedule` (the next tick) and, if it needs them, the hooks
:meth:`_before_poll`, :meth:`_batch_sent` and :meth:`_after_close`. Every method runs on the
bridge's own actor thread.

May touch: the consumer's public API; the subscriber and reply addresses only through the
subclass's transport.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kafka_actors.bridges.errors import BridgeRequestFailedError, SubscriberFailedError
from kafka_actors.bridges.messages import (
    Assign,
    BridgeStats,
    Close,
    Closed,
    Commit,
    CommitFailed,
    ErrorInfo,
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
from kafka_actors.bridges.stream import DemandStream
from kafka_actors.consumer import KafkaConsumer
from kafka_actors.errors import (
    ConsumerClosedError,
    FatalConsumerError,
    IllegalStateError,
    KafkaError,
)
from kafka_actors.log import get_logger, new_trace_id, traced
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.structs import ConsumerRebalanceListener, RebalanceReply

__all__ = [
    "MAX_IN_FLIGHT_BATCHES_LIMIT",
    "BridgeCore",
    "check_max_in_flight_batches",
    "failure_info",
    "failure_reply",
]

_ERROR_BACKOFF_S = 1.0
#: The most batches a bridge may keep in flight to its subscriber. The bound is Thespian's
#: need: well under its MAX_QUEUED_TRANSMITS (950, when the transport stops receiving to drain)
#: and DROP_TRANSMITS_LEVEL (1050, when it fails sends), leaving room for commit replies and
#: rebalance notifications; the pykka bridge takes the same bound.
MAX_IN_FLIGHT_BATCHES_LIMIT = 512


def check_max_in_flight_batches(value: int) -> None:
    """Refuse a ``max_in_flight_batches`` outside 1..:data:`MAX_IN_FLIGHT_BATCHES_LIMIT`."""
    if not 1 <= value <= MAX_IN_FLIGHT_BATCHES_LIMIT:
        raise ValueError(
            f"max_in_flight_batches must be within 1..{MAX_IN_FLIGHT_BATCHES_LIMIT}, got {value}"
        )


#: Polls after the first in one tick, to fill a batch message (each poll(0): no blocking).
_MAX_EXTRA_POLLS = 8

NoticeKind = type[PartitionsRevoked] | type[PartitionsAssigned] | type[PartitionsLost]


@dataclass(slots=True)
class _Closing:
    """A Close waiting for the subscriber's acknowledgement of the revocation it sent."""

    reply_to: Any
    rebalance_id: int
    deadline: float


class _BridgeListener(ConsumerRebalanceListener):
    def __init__(self, bridge: BridgeCore) -> None:
        self._bridge = bridge

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        self._bridge._notify(PartitionsRevoked, revoked)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        self._bridge._notify(PartitionsAssigned, assigned)

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        self._bridge._notify(PartitionsLost, lost)


class BridgeCore:
    """The runtime-neutral half of a bridge (see the module docstring)."""

    def _init_core(self, logger: str) -> None:
        self._consumer: KafkaConsumer[Any, Any] | None = None
        self._stream = DemandStream()
        self._subscriber: Any = None
        self._seq = 0  # the last stream message's seq
        self._rebalances: dict[int, RebalanceReply] = {}
        self._rebalance_ids = itertools.count(1)
        self._paused: set[TopicPartition] = set()
        self._polls = 0
        self._closing: _Closing | None = None
        self._no_defer = False
        self._stopped = False
        self._poll_timeout_s = 0.0
        self._max_batch_records = 2000
        self._log = get_logger(logger)

    # -- the runtime's transport (each bridge provides it) -------------------------------------

    def _send_stream(self, message: Any) -> bool:
        """Send a numbered stream message to the subscriber; False when it is gone."""
        raise NotImplementedError

    def _reply(self, reply_to: Any, message: Any) -> None:
        """Send ``message`` to the sender of a request."""
        raise NotImplementedError

    def _schedule(self, *, immediate: bool, delay_s: float | None = None) -> None:
        """Schedule the next tick; any tick scheduled before is now stale."""
        raise NotImplementedError

    def _before_poll(self) -> None:
        """Housekeeping at the start of each tick."""

    def _batch_sent(self, seq: int) -> None:
        """A record batch left as ``seq``."""

    def _after_close(self) -> None:
        """The consumer closed (pending commits fail, timers stop)."""

    # -- subscription ------------------------------------------------------------------------------

    def _set_subscriber(self, subscriber: Any) -> None:
        raise NotImplementedError

    def _start_stream(
        self, consumer: KafkaConsumer[Any, Any], message: Subscribe | Assign
    ) -> Subscribed:
        """Subscribe or assign for ``message``'s subscriber; returns the Subscribed to
        announce."""
        self._set_subscriber(message.subscriber)
        if isinstance(message, Subscribe):
            topics: Any = message.pattern if message.pattern is not None else list(message.topics)
            consumer.subscribe(topics, listener=_BridgeListener(self))
            return Subscribed(topics=tuple(message.topics), pattern=message.pattern)
        wanted = set(message.partitions)
        self._stream.drop(tp for tp in consumer.assignment() if tp not in wanted)
        self._paused &= wanted
        consumer.assign(message.partitions)
        return Subscribed(partitions=tuple(message.partitions))

    def _to_subscriber(self, message: Any) -> bool:
        """Send a message of the stream, numbered; False when there is nobody to send to."""
        if self._subscriber is None:
            return False
        self._seq += 1
        return self._send_stream(replace(message, seq=self._seq))

    def _seek_back(self, rewound: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Seek each still assigned partition of ``rewound`` to its offset; returns those."""
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

    def _add_demand(self, message: Request) -> None:
        if not isinstance(message.n, int) or isinstance(message.n, bool):
            raise TypeError(f"Request(n) needs an int, got {type(message.n).__name__}")
        was_idle = not self._stream.wants_fetch
        if message.handled > 0:
            self._stream.acknowledge(message.handled)
        self._stream.request(message.n)
        self._resume_stream(was_idle)

    def _acknowledge(self, seq: int) -> None:
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
        stream = self._stream
        total = 0
        while stream.can_send:
            batch = stream.take(self._max_batch_records)
            if not batch:
                break
            positions = stream.sent(self._seq + 1, batch)
            if not self._to_subscriber(RecordBatch(batch, positions)):
                break  # the subscriber is gone; the bridge rewound what it had in flight
            self._batch_sent(self._seq)
            total += len(batch)
        return total

    def _tick(self) -> None:
        consumer = self._consumer
        if consumer is None or self._stopped:
            return
        self._prune_rebalances()
        self._before_poll()
        closing = self._closing
        if closing is not None and time.monotonic() >= closing.deadline:
            self._log.warning("close_revocation_not_acknowledged")
            self._finish_close(closing.reply_to, 1.0)
            return
        stream = self._stream
        fetch = stream.wants_fetch and closing is None and self._subscriber is not None
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
        if records:
            stream.add(records)
        # Fill one batch message up to the demand with a few more polls (never blocking):
        # the buffer stays within the demand plus one poll.
        extra = 0
        while (
            records
            and extra < _MAX_EXTRA_POLLS
            and stream.buffered_records < min(stream.demand, self._max_batch_records)
        ):
            try:
                records = consumer.poll(0)
            except KafkaError:
                break  # the next tick's poll raises it again and reports it
            self._polls += 1
            extra += 1
            stream.add(records)
        delivered = self._deliver()
        # Tick again at once only while records flow: an empty poll waits for the idle interval.
        flowing = bool(records) or delivered > 0
        self._schedule(immediate=flowing and stream.wants_fetch and self._closing is None)

    def _apply_backpressure(self, consumer: KafkaConsumer[Any, Any], fetch: bool) -> None:
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

    # -- rebalance notifications -----------------------------------------------------------------

    def _notify(self, kind: NoticeKind, partitions: set[TopicPartition]) -> None:
        """Called by the listener inside ``poll()``/``close()``, on the bridge's thread."""
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
        if not self._to_subscriber(kind(parts, rid)) and rid in self._rebalances:
            del self._rebalances[rid]  # nobody to answer it: the reconciliation goes on
            reply.ack(SubscriberFailedError("the subscriber actor stopped"))

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

    def _on_close(self, message: Close, reply_to: Any) -> None:
        consumer = self._consumer
        if consumer is None:
            if reply_to is not None:
                self._reply(reply_to, Closed())
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
            self._closing = None
        self._finish_close(reply_to, message.timeout_s)

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
            self._after_close()
            self._log.info("bridge_closed")
        if reply_to is not None:
            self._reply(reply_to, Closed())

    # -- observation -------------------------------------------------------------------------------

    def _core_stats(self, rss_bytes: int, pending_commits: int) -> BridgeStats:
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
            rss_bytes=rss_bytes,
            pending_rebalance_acks=len(self._rebalances),
            pending_commits=pending_commits,
            in_flight_batches=stream.in_flight,
            rejected_batches=stream.rejected_batches,
        )


def failure_info(message: Any, exc: Exception) -> ErrorInfo:
    """The error a request the bridge raised on is answered with."""
    if isinstance(exc, KafkaError):
        return ErrorInfo.of(exc)
    # A bad request or a bug: named as the bridge's failure, the cause in the message.
    kind = type(message).__name__
    return ErrorInfo.of(BridgeRequestFailedError(f"{kind} failed: {type(exc).__name__}: {exc}"))


def failure_reply(message: Any, exc: Exception) -> CommitFailed | StreamError:
    """The typed reply to a request the bridge raised on."""
    info = failure_info(message, exc)
    request_id = getattr(message, "request_id", None)
    if isinstance(message, Commit) and isinstance(request_id, int):
        return CommitFailed(request_id, info)
    return StreamError(info)
