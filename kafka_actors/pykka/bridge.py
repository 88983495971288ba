"""``KafkaBridge``: a pykka actor that owns a :class:`~kafka_actors.KafkaConsumer` and streams
its records to one service actor by messages (protocol: :mod:`kafka_actors.pykka.messages`,
the same messages and contract as the Thespian bridge).

Owns: the consumer (created when the bridge is built, so a bad configuration raises at
``KafkaBridge.start(config)``; closed by :class:`Close` or when the actor stops), pending
commits (and the one worker thread that runs them) and the timer of its next poll; the
demand-driven stream to one subscriber actor, the ticks' polling, the rebalance notices and
the close's revocation are :class:`~kafka_actors.bridges.core.BridgeCore`'s, shared with the
Thespian bridge; this module gives it pykka's transport.

How the bridge polls
--------------------
The consumer's own actors (network I/O, fetching ahead, heartbeats) run on their own threads;
the bridge only *collects* what they fetched. It polls from its own message loop, driven by
tick messages, each a ``poll()``: while the subscriber has demand and nothing is buffered it
may wait up to ``poll_timeout_ms`` (default 10) for records, otherwise ``poll(0)``. That
bounded wait is on the consumer, never on the service: a message to the bridge waits at most
that long (on the embedded mock it took a stream from ~120,000 to ~320,000 records/s
against polling with 0 and waking on the idle timer).
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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pykka

from kafka_actors.bridges.core import (
    MAX_IN_FLIGHT_BATCHES_LIMIT,
    BridgeCore,
    check_max_in_flight_batches,
    failure_reply,
)
from kafka_actors.bridges.errors import SubscriberFailedError
from kafka_actors.bridges.messages import (
    Assign,
    BatchRejected,
    Close,
    Commit,
    CommitFailed,
    CommitOk,
    ErrorInfo,
    GetStats,
    Handled,
    RebalanceAck,
    Request,
    Subscribe,
    Subscribed,
)
from kafka_actors.clock import Cancellable, Scheduler, default_scheduler
from kafka_actors.consumer import KafkaConsumer
from kafka_actors.errors import ConsumerClosedError
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.pykka.messages import BatchFailed, Call, Reply

__all__ = ["MAX_IN_FLIGHT_BATCHES_LIMIT", "KafkaBridge", "call"]


@dataclass(frozen=True, slots=True)
class _Tick:
    serial: int


@dataclass(frozen=True, slots=True)
class _CommitDone:
    request_id: int
    reply_to: Reply | None
    future: concurrent.futures.Future[dict[TopicPartition, OffsetAndMetadata]]


def call(bridge: pykka.ActorRef[Any], message: Any, timeout: float | None = 60.0) -> Any:
    """For code outside an actor: send ``message`` in a :class:`Call` and wait for its reply
    (``pykka.Timeout`` after ``timeout`` seconds)."""
    future: pykka.ThreadingFuture[Any] = pykka.ThreadingFuture()
    bridge.tell(Call(message, future.set))
    return future.get(timeout=timeout)


class KafkaBridge(BridgeCore, pykka.ThreadingActor):
    """Serves one KafkaConsumer to one pykka service actor (see the module docstring).

    ``config``: Kafka configuration keys (``bootstrap.servers``...). ``poll_timeout_ms``: how
    long one ``poll()`` may block the bridge's loop while the subscriber has demand (default
    10); ``idle_interval_ms``: how often the bridge polls when records do not flow;
    ``max_batch_records``: the most records in one :class:`RecordBatch`;
    ``max_in_flight_batches``: the most batches sent and not acknowledged (1 .. 512);
    ``commit_timeout_ms``: how long a commit retries (default ``default.api.timeout.ms``);
    ``faults``: a :class:`~kafka_actors.supervisors.FaultInjector` for tests.
    """

    def __init__(
        self,
        config: Mapping[str, object],
        *,
        poll_timeout_ms: int = 10,
        idle_interval_ms: int = 20,
        max_batch_records: int = 2000,
        max_in_flight_batches: int = 16,
        commit_timeout_ms: int | None = None,
        faults: Any = None,
        scheduler: Scheduler | None = None,
    ) -> None:
        super().__init__()
        check_max_in_flight_batches(max_in_flight_batches)
        if max_batch_records < 1 or idle_interval_ms < 1 or poll_timeout_ms < 0:
            raise ValueError(
                "max_batch_records and idle_interval_ms must be >= 1, poll_timeout_ms >= 0"
            )
        self._init_core("pykka_bridge")
        self._poll_timeout_s = poll_timeout_ms / 1000
        self._max_batch_records = max_batch_records
        self._stream.max_in_flight = max_in_flight_batches
        self._idle_s = idle_interval_ms / 1000
        self._commit_timeout_s = None if commit_timeout_ms is None else commit_timeout_ms / 1000
        self._scheduler = scheduler or default_scheduler()
        self._tick_serial = 0
        self._timer: Cancellable | None = None
        self._committer: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending_commits = 0
        self._stopping = False
        consumer = KafkaConsumer(dict(config), faults=faults)
        self._consumer = consumer
        self._log = self._log.bind(
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
                    target(failure_reply(inner, exc))
                except Exception:
                    self._log.exception("bridge_failure_reply_failed", kind=kind)
            return None

    def _dispatch(self, message: Any, reply_to: Reply | None) -> Any:
        if isinstance(message, _Tick):
            if message.serial == self._tick_serial:
                self._tick()
        elif isinstance(message, Request):
            self._add_demand(message)
        elif isinstance(message, Handled):
            self._acknowledge(message.seq)
        elif isinstance(message, _CommitDone):
            self._pending_commits -= 1
            if message.reply_to is not None:
                message.reply_to(_commit_reply(message))
        elif isinstance(message, Commit):
            self._on_commit(message, reply_to)
        elif isinstance(message, RebalanceAck):
            self._on_ack(message)
        elif isinstance(message, BatchFailed):
            self._on_batch_failed(message)
        elif isinstance(message, (Subscribe, Assign)):
            return self._announce(self._start_stream(self._require_consumer(), message), reply_to)
        elif isinstance(message, GetStats):
            # rss_bytes -1: not measured, the bridge shares the service's process
            stats = self._core_stats(-1, self._pending_commits)
            if reply_to is not None:
                reply_to(stats)
            return stats
        elif isinstance(message, Close):
            self._on_close(message, reply_to)
        else:
            self._log.debug("bridge_message_ignored", kind=type(message).__name__)
        return None

    # -- subscription ------------------------------------------------------------------------------

    def _require_consumer(self) -> KafkaConsumer[Any, Any]:
        if self._consumer is None or self._closing is not None:
            raise ConsumerClosedError("The bridge is closed or closing")
        return self._consumer

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
        if oldest is None:
            return {}
        return self._seek_back(self._stream.reject(oldest, ()))

    # -- BridgeCore's transport: tell, a self-told tick or a timer ---------------------------------

    def _send_stream(self, message: Any) -> bool:
        try:
            self._subscriber.tell(message)
        except pykka.ActorDeadError:
            self._subscriber_gone()
            return False
        return True

    def _reply(self, reply_to: Any, message: Any) -> None:
        reply_to(message)

    def _before_poll(self) -> None:
        subscriber = self._subscriber
        if subscriber is not None and not subscriber.is_alive():
            self._subscriber_gone()

    def _schedule(self, *, immediate: bool, delay_s: float | None = None) -> None:
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

    def _after_close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._committer is not None:
            self._committer.shutdown(wait=False, cancel_futures=True)

    def _finish_close(self, reply_to: Any, timeout_s: float) -> None:
        super()._finish_close(reply_to, timeout_s)
        if not self._stopping:
            self._stopping = True
            self.stop()

    # -- failures of the subscriber ----------------------------------------------------------------

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

    # -- commits: commit_sync on the bridge's worker thread ----------------------------------------

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


def _commit_reply(done: _CommitDone) -> CommitOk | CommitFailed:
    future = done.future
    error = future.exception() if not future.cancelled() else ConsumerClosedError()
    if error is None:
        return CommitOk(done.request_id, dict(future.result()))
    return CommitFailed(done.request_id, ErrorInfo.of(error))
