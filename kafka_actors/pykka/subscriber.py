"""``StreamSubscriber``: a pykka actor base class for the service side of a pykka bridge.

Owns: the subscriber's half of the protocol: initial demand and re-requesting after each
batch (a window of ``window`` records), acknowledging each handled batch (in the next
:class:`Request`), the positions it has *processed* per partition, and rebalance-safe
commits: on :class:`PartitionsRevoked` it commits the processed positions of the revoked
partitions through the bridge, waits for the reply, and only then acknowledges, so the next
owner starts exactly after what this subscriber processed. (Those
default rebalance answers are :class:`~kafka_actors.bridges.subscriber.RebalanceHandling`'s,
shared by the Thespian and pykka subscribers.)

Failures: when :meth:`process` raises, the subscriber tells the bridge :class:`BatchFailed`
and drops the record batches already in its inbox until the bridge's :class:`BatchRejected`
(the bridge sought back to the failed batch); then it asks again, so the records come again,
at most ``redeliveries`` times in a row, after which it stops requesting and logs why.

Subclass it and override :meth:`process` (and any ``on_*`` hook). pykka delivers one
sender's messages in order, so no reordering is needed here (unlike Thespian's).

May touch: its bridge (the ``ActorRef`` it is given), nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pykka

from kafka_actors.bridges.messages import (
    BatchRejected,
    Commit,
    ErrorInfo,
    RecordBatch,
    Request,
    StreamError,
    Subscribe,
    Subscribed,
)
from kafka_actors.bridges.subscriber import RebalanceHandling
from kafka_actors.log import get_logger
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord
from kafka_actors.pykka.messages import BatchFailed, Call

__all__ = ["StreamSubscriber"]


class StreamSubscriber(RebalanceHandling, pykka.ThreadingActor):
    """Requests records from a bridge, processes them, commits safely on revocation."""

    #: records requested in flight (initial demand, then topped up after each batch)
    window: int = 1000
    #: redeliveries of a failing batch, after which requesting stops
    redeliveries: int = 1

    def __init__(self, bridge: pykka.ActorRef[Any]) -> None:
        super().__init__()
        self.bridge = bridge
        self.positions: dict[TopicPartition, int] = {}
        self.requesting = True
        self._init_commits()
        self._handled_seq = 0  # the last record batch handled (acknowledged in Request)
        self._failed_seq = 0  # a batch that failed, awaiting the bridge's BatchRejected
        self._void_below = 0  # record batches with seq below this were taken back
        self.failures_in_a_row = 0
        self.log = get_logger("pykka_subscriber")

    # -- hooks ---------------------------------------------------------------------------------

    def process(self, records: tuple[ConsumerRecord[Any, Any], ...]) -> None:
        """Process one batch (offset order per partition). Override."""

    def on_subscribed(self, message: Subscribed) -> None:
        """The stream started."""

    def on_stream_error(self, message: StreamError) -> None:
        self.log.warning("stream_error", error=str(message.error), fatal=message.fatal)

    def on_other(self, message: Any) -> Any:
        """Messages the protocol does not know (a subclass's own control messages)."""
        return None

    def _to_bridge(self, message: Any) -> None:
        self.bridge.tell(message)

    # -- actions -------------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Ask the bridge to join the group for ``topics`` and stream them to this actor."""
        self.bridge.tell(Subscribe(tuple(topics), self.actor_ref))

    def request(self, n: int) -> None:
        if n > 0:
            self.bridge.tell(Request(n, self._handled_seq))

    def _send_commit(self, message: Commit) -> None:
        self.bridge.tell(Call(message, self.actor_ref.tell))

    # -- dispatch ------------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, RecordBatch):
            self._on_batch(message)
        elif self._handle_shared(message):
            pass
        elif isinstance(message, BatchRejected):
            self._on_rejected(message)
        elif isinstance(message, Subscribed):
            self.on_subscribed(message)
            if self.requesting:
                self.request(self.window)
        elif isinstance(message, StreamError):
            self.on_stream_error(message)
        else:
            return self.on_other(message)
        return None

    def _on_batch(self, message: RecordBatch) -> None:
        if self._failed_seq or message.seq < self._void_below:
            return  # taken back by the bridge (or about to be): it sends these again
        try:
            self.process(message.records)
        except Exception as exc:
            self.log.warning("record_batch_failed", seq=message.seq, error=repr(exc))
            self._failed_seq = message.seq
            self.bridge.tell(BatchFailed(message.seq, ErrorInfo.of(exc)))
            return
        self.failures_in_a_row = 0
        self.positions.update(message.positions)
        self._handled_seq = message.seq
        if self.requesting:
            self.request(len(message.records))

    def _on_rejected(self, message: BatchRejected) -> None:
        if message.failed_seq != self._failed_seq:
            self.log.info("batch_rejected_unexpected", failed_seq=message.failed_seq)
            return
        self._failed_seq = 0
        self._void_below = message.resume_seq
        self.failures_in_a_row += 1
        if self.failures_in_a_row > self.redeliveries:
            self.log.error("stream_stopped_after_redeliveries", error=str(message.error))
            self.requesting = False
            return
        if self.requesting:
            self.request(self.window)
