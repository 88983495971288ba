"""``KafkaBridge``: a Thespian actor that owns a :class:`~kafka_actors.KafkaConsumer` and serves
it by messages (see :mod:`kafka_actors.thespian.messages` for the protocol).

Owns: the consumer (created by :class:`Configure`, closed by :class:`Close` or the actor's
exit), pending commits, the ticks (Thespian wakeups) and the ``PoisonMessage`` returns. The
demand-driven stream to one subscriber actor (a
:class:`~kafka_actors.bridges.stream.DemandStream`), one tick's polling, the pending rebalance
acknowledgements and the close's revocation are
:class:`~kafka_actors.bridges.core.BridgeCore`'s, shared with the pykka bridge; this module
gives it Thespian's transport.

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
a stream that way.

Redelivery: Thespian can also drop a message outright when two actors send to each other at
once (issue 22). Its TCP transport keeps one idle socket per peer and, when a transfer on
another socket to that peer completes, shuts the idle one down and keeps the new one
(``TCPTransport._finishIncoming`` / ``_finishIntent``), so one side can close the socket the
other has just started a transmit on. A message larger than the socket buffers (a batch of
1 KiB records is megabytes) then fails in ``send`` with ``EPIPE``, which Thespian takes for a
refused connection: the transmit, and every transmit to that actor waiting for the socket,
ends as ``SendStatus.DeadTarget`` (a dead letter, logged at INFO) and the actor is not told.
The subscriber then waits for that ``seq`` forever. The bridge therefore keeps every stream
message until the subscriber acknowledges it (``Handled`` / ``Request.handled``, cumulative:
the subscriber handles them in ``seq`` order) and, when no acknowledgement came for
``Configure.redeliver_after_ms``, sends the unacknowledged ones again (same ``seq``: the
subscriber drops a copy it already has), waiting twice as long before each further redelivery
up to a minute, as long as nothing is acknowledged. What it keeps is bounded by the window
(``max_in_flight_batches``) plus the few rebalance notices sent since the last batch.

A batch that comes back as Thespian's
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
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from thespian.actors import Actor, ActorExitRequest, PoisonMessage, WakeupMessage

from kafka_actors.bridges.core import (
    BridgeCore,
    check_max_in_flight_batches,
    failure_info,
    failure_reply,
)
from kafka_actors.consumer import KafkaConsumer
from kafka_actors.core import commit_offsets
from kafka_actors.errors import ConsumerClosedError, IllegalStateError
from kafka_actors.log import new_trace_id
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.thespian.errors import SubscriberFailedError
from kafka_actors.thespian.messages import (
    Assign,
    BatchRejected,
    Close,
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
    Subscribe,
    Subscribed,
)

__all__ = ["KafkaBridge"]

_CHECK_COMMITS = "check-commits"
#: The delay of a tick that is due now. Not zero, and not a self-sent message:
#: simpleSystemBase's listen()/ask() loop runs until its queue is empty, so a chain of
#: self-sends (or of wakeups already due) would keep the caller's listen() from returning.
_BUSY_INTERVAL_S = 0.001
#: A batch unacknowledged this long is logged (once): a subscriber stuck on a batch, or dead.
_UNACKNOWLEDGED_WARNING_S = 60.0
#: The longest wait between two redeliveries of unacknowledged stream messages.
_REDELIVER_MAX_S = 60.0


@dataclass(slots=True)
class _PendingCommit:
    request_id: int
    reply_to: Any
    future: concurrent.futures.Future[Any]


class KafkaBridge(BridgeCore, Actor):  # type: ignore[misc]
    """Serves one KafkaConsumer to Thespian actors (see the module docstring; the stream,
    the ticks' polling, rebalances and the close are :class:`BridgeCore`'s)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_core("thespian_bridge")
        self._settings = Configure({})
        self._sent_at: collections.deque[tuple[int, float]] = collections.deque()
        self._warned_seq = 0
        #: stream messages sent and not acknowledged, by seq (redelivered: module docstring)
        self._unacked: collections.OrderedDict[int, Any] = collections.OrderedDict()
        self._progress_at = 0.0  # last acknowledgement (or first send after none was pending)
        self._redeliveries = 0  # redeliveries since the last acknowledgement
        self._tick_serial = 0
        self._commits: list[_PendingCommit] = []
        self._commit_check_armed = False

    # -- dispatch --------------------------------------------------------------------------------

    def receiveMessage(self, message: Any, sender: Any) -> None:
        try:
            self._dispatch(message, sender)
        except Exception as exc:  # a handler error must not poison the actor
            kind = type(message).__name__
            self._log.exception("bridge_message_failed", kind=kind)
            try:
                self.send(sender, failure_reply(message, exc))
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
        elif isinstance(message, (Subscribe, Assign)):
            self._announce(self._start_stream(self._require_consumer(), message), sender)
        elif isinstance(message, Configure):
            self._on_configure(message, sender)
        elif isinstance(message, GetStats):
            self.send(sender, self._core_stats(_rss_bytes(), len(self._commits)))
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
        check_max_in_flight_batches(message.max_in_flight_batches)
        if message.redeliver_after_ms < 1:
            raise ValueError(f"redeliver_after_ms must be >= 1, got {message.redeliver_after_ms}")
        self._settings = message
        self._stream.max_in_flight = message.max_in_flight_batches
        self._poll_timeout_s = message.poll_timeout_ms / 1000
        self._max_batch_records = max(1, message.max_batch_records)
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

    def _set_subscriber(self, subscriber: Any) -> None:
        if subscriber != self._subscriber:
            self._stream.restart()  # a new stream starts with no demand (records stay)
            self._seq = 0
            self._sent_at.clear()
            self._warned_seq = 0
            self._unacked.clear()
            self._redeliveries = 0
        self._subscriber = subscriber

    # -- BridgeCore's transport: Thespian sends, wakeups --------------------------------------

    def _send_stream(self, message: Any) -> bool:
        """Numbered by the core: Thespian may reorder messages (see messages: Ordering), and
        kept until acknowledged: it may also drop them (see Redelivery)."""
        if not self._unacked:
            self._progress_at = time.monotonic()
        self._unacked[message.seq] = message
        self.send(self._subscriber, message)
        return True

    def _reply(self, reply_to: Any, message: Any) -> None:
        self.send(reply_to, message)

    def _before_poll(self) -> None:
        self._complete_commits()
        self._check_unacknowledged()
        self._redeliver_unacknowledged()

    def _batch_sent(self, seq: int) -> None:
        self._sent_at.append((seq, time.monotonic()))

    def _after_close(self) -> None:
        self._complete_commits(closing=True)
        self._unacked.clear()

    def _announce(self, reply: Subscribed, sender: Any) -> None:
        self._to_subscriber(reply)
        if sender != self._subscriber:
            self.send(sender, reply)
        self._schedule(immediate=True)

    # -- the stream ----------------------------------------------------------------------------

    def _on_request(self, message: Request, sender: Any) -> None:
        if sender != self._subscriber:
            raise IllegalStateError("Request from an actor that is not this bridge's subscriber")
        self._forget_acknowledged(message.handled)
        self._add_demand(message)

    def _on_handled(self, seq: int, sender: Any) -> None:
        if sender != self._subscriber:
            raise IllegalStateError("Handled from an actor that is not this bridge's subscriber")
        self._forget_acknowledged(seq)
        self._acknowledge(seq)

    def _forget_acknowledged(self, seq: int) -> None:
        """The subscriber handled every stream message up to ``seq``."""
        unacked = self._unacked
        if not unacked or next(iter(unacked)) > seq:
            return
        while unacked and next(iter(unacked)) <= seq:
            unacked.popitem(last=False)
        self._progress_at = time.monotonic()
        self._redeliveries = 0

    def _redeliver_unacknowledged(self) -> None:
        """Send the unacknowledged stream messages again when nothing was acknowledged for
        ``redeliver_after_ms`` (doubled after each redelivery, up to a minute)."""
        if not self._unacked or self._subscriber is None:
            return
        first = self._settings.redeliver_after_ms / 1000
        wait = min(first * 2 ** min(self._redeliveries, 16), max(first, _REDELIVER_MAX_S))
        now = time.monotonic()
        if now - self._progress_at < wait:
            return
        self._redeliveries += 1
        self._progress_at = now
        self._log.warning(
            "stream_redelivered",
            first_seq=next(iter(self._unacked)),
            messages=len(self._unacked),
            redelivery=self._redeliveries,
            waited_s=round(wait, 1),
        )
        for message in self._unacked.values():
            self.send(self._subscriber, message)

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
        sought = self._seek_back(self._stream.reject(batch.seq, batch.records))
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
            self.send(sender, CommitFailed(message.request_id, failure_info(message, exc)))
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
