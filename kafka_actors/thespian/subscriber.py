"""``StreamSubscriber``: a Thespian actor base class for the subscriber side of a bridge.

Owns: the subscriber's half of the protocol — initial demand and re-requesting after each
batch (a window of ``window`` records in flight), the positions it has *processed* per
partition, and rebalance-safe commits: on :class:`PartitionsRevoked` it commits the processed
positions of the revoked partitions through the bridge, waits for the reply, and only then
acknowledges, so the next owner starts exactly after what this subscriber processed. (Those
default rebalance answers are :class:`~kafka_actors.bridges.subscriber.RebalanceHandling`'s,
shared by the Thespian and pykka subscribers.)

Stream messages are handled in their ``seq`` order (Thespian may reorder messages between
two actors); a message that arrives early waits for its predecessors, and a copy of one
already handled (the bridge redelivers what stays unacknowledged: Thespian can drop a message)
is dropped. Each handled stream message is acknowledged to the bridge (in the next
:class:`Request`, or by :class:`Handled`), which frees the bridge's window of batches in flight.

Failures: a stream message whose handler raises is tried ``attempts`` times (2, as Thespian's
process bases do; ``simpleSystemBase`` delivers 3 times), then returned to the bridge as
Thespian's ``PoisonMessage``; the subscriber never raises out of ``receiveMessage`` for a
stream message (Thespian's retry would run it again out of order). For a record batch the
stream waits for the bridge's :class:`BatchRejected` (the batch and those after it are void,
the bridge sought back), then asks again: the records come again, ``redeliveries`` times at
most while a batch keeps failing at the same position (the same first offset of a partition,
with no batch of that partition handled since); after that the subscriber stops requesting
(:meth:`resume_requesting` restarts), and :meth:`on_batch_rejected` says why. A request the
bridge raised on comes back as a typed error: a :class:`CommitFailed` for a commit,
:meth:`on_stream_error` otherwise.

Subclass it and override :meth:`process` (and any ``on_*`` hook). A batch counts as processed
when :meth:`process` returns; a subclass that processes asynchronously overrides
:meth:`on_batch` and calls :meth:`processed` / :meth:`request` itself.

May touch: its bridge (by address, from :class:`Subscribed`'s sender), nothing else.
"""

from __future__ import annotations

import traceback
from typing import Any

from thespian.actors import Actor, PoisonMessage

from kafka_actors.bridges.subscriber import RebalanceHandling
from kafka_actors.log import get_logger
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord
from kafka_actors.thespian.errors import BridgeRequestFailedError
from kafka_actors.thespian.messages import (
    BatchRejected,
    Commit,
    CommitFailed,
    ErrorInfo,
    Handled,
    RecordBatch,
    Request,
    StreamError,
    Subscribed,
)
from kafka_actors.thespian.stream import first_offsets

__all__ = ["StreamSubscriber"]


class StreamSubscriber(RebalanceHandling, Actor):  # type: ignore[misc]
    """Requests records from a bridge, processes them, commits safely on revocation."""

    #: records requested in flight (initial demand, then topped up after each batch)
    window: int = 1000
    #: times a stream message's handler runs before it goes back to the bridge as poison
    attempts: int = 2
    #: redeliveries of a batch failing at the same position, after which requesting stops
    redeliveries: int = 1

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bridge: Any = None
        self.requesting = True
        self.positions: dict[TopicPartition, int] = {}
        self._owed = 0  # processed records not yet re-requested (while not requesting)
        self._init_commits()
        self._next_seq = 1
        self._early: dict[int, Any] = {}  # stream messages that overtook earlier ones
        self.reordered = 0  # how many stream messages arrived before their predecessors
        self._handled_seq = 0  # the last record batch handled (acknowledged cumulatively)
        self._acked_seq = 0  # the last acknowledgement sent
        #: the last redelivered copy of a handled message (none yet: any copy is the first)
        self._last_copy_seq = 1 << 62
        self._failed_seq = 0  # a batch returned as poison, awaiting the bridge's BatchRejected
        self._void: tuple[int, int] = (0, 0)  # record batches with seq in (lo, hi) are void
        #: per partition: the first offset of the last batch that failed, and how many times a
        #: batch failed there (forgotten once a batch of the partition is handled)
        self.failed_at: dict[TopicPartition, tuple[int, int]] = {}
        self.rejections_at_position = 0  # the most failures at one position (last failure)
        self.log = get_logger("thespian_subscriber")

    # -- hooks ---------------------------------------------------------------------------------

    def process(self, records: tuple[ConsumerRecord[Any, Any], ...]) -> None:
        """Process one batch (offset order per partition). Override."""

    def on_subscribed(self, message: Subscribed) -> None:
        """The stream started."""

    def on_stream_error(self, message: StreamError) -> None:
        self.log.warning("stream_error", error=str(message.error), fatal=message.fatal)

    def on_batch_rejected(self, message: BatchRejected) -> None:
        """The bridge took back a batch this subscriber raised on (and those after it). Default:
        ask again (the records are redelivered), unless they were redelivered ``redeliveries``
        times and failed at the same position again: then stop requesting."""
        self.log.warning(
            "record_batch_rejected",
            failed_seq=message.failed_seq,
            error=str(message.error),
            failures_at_position=self.rejections_at_position,
        )
        if self.rejections_at_position > self.redeliveries:
            self.log.error("stream_stopped_after_redeliveries", error=str(message.error))
            self.requesting = False
            self._owed = self.window
            return
        if self.requesting:
            self.request(self.window)
        else:
            self._owed = self.window

    def on_other(self, message: Any, sender: Any) -> None:
        """Messages the protocol does not know (a subclass's own control messages)."""

    def _to_bridge(self, message: Any) -> None:
        self.send(self.bridge, message)

    # -- actions -------------------------------------------------------------------------------

    def request(self, n: int) -> None:
        if n > 0 and self.bridge is not None:
            self._acked_seq = self._handled_seq
            self.send(self.bridge, Request(n, self._handled_seq))

    def processed(self, positions: dict[TopicPartition, int]) -> None:
        """Record ``positions`` (next offset per partition) as processed."""
        self.positions.update(positions)

    def _send_commit(self, message: Commit) -> None:
        self.send(self.bridge, message)

    def on_batch(self, message: RecordBatch) -> None:
        self.process(message.records)
        self.processed(dict(message.positions))
        if self.requesting:
            self.request(len(message.records) + self._owed)
            self._owed = 0
        else:
            self._owed += len(message.records)

    def resume_requesting(self) -> None:
        self.requesting = True
        self.request(self._owed)
        self._owed = 0

    # -- dispatch ------------------------------------------------------------------------------

    def receiveMessage(self, message: Any, sender: Any) -> None:
        if isinstance(message, PoisonMessage):
            self._on_poison(message)
            return
        if isinstance(message, BatchRejected):
            self._on_rejected(message)
            return
        seq = getattr(message, "seq", 0)
        if not isinstance(seq, int) or seq <= 0:
            self._handle(message, sender)
            return
        if seq != self._next_seq or self._failed_seq:
            if seq > self._next_seq and seq not in self._early:
                self.reordered += 1
                self._early[seq] = (message, sender)
            elif seq < self._next_seq:
                self._copy_of_handled(seq, sender)
            return  # seq below, or held already: a copy (redelivered)
        self._early[seq] = (message, sender)
        self._drain()

    def _copy_of_handled(self, seq: int, sender: Any) -> None:
        """A redelivered copy of a stream message handled already: the bridge did not get the
        acknowledgement (Thespian lost it, as it can lose any message). Acknowledge again,
        once per redelivery (the bridge sends the unacknowledged ones in ``seq`` order, so a
        copy not above the previous one starts a new redelivery): without it, a window whose
        acknowledgements were all lost would stall the stream for good."""
        first_of_redelivery = seq <= self._last_copy_seq
        self._last_copy_seq = seq
        if first_of_redelivery and self._handled_seq > 0:
            self.send(sender, Handled(self._handled_seq))

    def _drain(self) -> None:
        """Handle the stream messages that are next in order, until one is missing or a batch
        failed (then the stream waits for the bridge's BatchRejected)."""
        while not self._failed_seq and self._next_seq in self._early:
            seq = self._next_seq
            message, sender = self._early.pop(seq)
            if self._in_order(message, sender, seq):
                self._next_seq += 1

    def _in_order(self, message: Any, sender: Any, seq: int) -> bool:
        """Handle one stream message; False when it is a batch that failed (not passed)."""
        batch = isinstance(message, RecordBatch)
        if batch and self._void[0] < seq < self._void[1]:
            return True  # taken back by the bridge: it sends these records again
        before = self._handled_seq
        self._handled_seq = seq  # a Request sent while handling it acknowledges it
        details = ""
        for attempt in range(1, max(1, self.attempts) + 1):
            try:
                self._handle(message, sender)
            except Exception:
                details = traceback.format_exc()
                self.log.warning(
                    "stream_message_failed",
                    kind=type(message).__name__,
                    seq=seq,
                    attempt=attempt,
                    error=details.strip().splitlines()[-1],
                )
                continue
            if batch:
                for tp in message.positions:
                    self.failed_at.pop(tp, None)
            if self._acked_seq < seq:  # every stream message: the bridge redelivers the rest
                self._acked_seq = seq
                self.send(sender, Handled(seq))
            return True
        # Given up: back to the bridge, as Thespian itself returns what an actor raised on.
        self.send(sender, PoisonMessage(message, details))
        if not batch:
            return True  # a rebalance notification: the bridge acknowledges it with the error
        self._handled_seq = before
        self._failed_seq = seq
        worst = 0
        for tp, offset in first_offsets(message.records).items():
            last, times = self.failed_at.get(tp, (-1, 0))
            times = times + 1 if last == offset else 1
            self.failed_at[tp] = (offset, times)
            worst = max(worst, times)
        self.rejections_at_position = worst
        return False

    def _on_rejected(self, message: BatchRejected) -> None:
        if not self._failed_seq or message.failed_seq != self._failed_seq:
            self.log.info("batch_rejected_unexpected", failed_seq=message.failed_seq)
            return
        self._failed_seq = 0
        self._next_seq = message.failed_seq + 1
        self._void = (message.failed_seq, message.resume_seq)
        self.on_batch_rejected(message)
        self._drain()

    def _on_poison(self, message: PoisonMessage) -> None:
        """A request of ours the bridge raised on (Thespian returned it): a typed error."""
        poison = message.poisonMessage
        kind = type(poison).__name__
        lines = str(message.details or "").strip().splitlines()
        cause = lines[-1] if lines else "no details"
        error = ErrorInfo.of(BridgeRequestFailedError(f"the bridge raised on {kind}: {cause}"))
        self.log.warning("request_returned_by_bridge", kind=kind, error=str(error))
        if isinstance(poison, Commit):
            self._commit_replied(CommitFailed(poison.request_id, error))
        else:
            self.on_stream_error(StreamError(error))

    def _handle(self, message: Any, sender: Any) -> None:
        if isinstance(message, RecordBatch):
            self.on_batch(message)
        elif self._handle_shared(message):
            pass
        elif isinstance(message, Subscribed):
            if self.bridge is None:
                self.bridge = sender
                self.on_subscribed(message)
                if self.requesting:
                    self.request(self.window)
                else:
                    self._owed += self.window
        elif isinstance(message, StreamError):
            self.on_stream_error(message)
        else:
            self.on_other(message, sender)
