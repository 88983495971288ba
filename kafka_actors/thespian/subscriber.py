"""``StreamSubscriber``: a Thespian actor base class for the subscriber side of a bridge.

Owns: the subscriber's half of the protocol — initial demand and re-requesting after each
batch (a window of ``window`` records in flight), the positions it has *processed* per
partition, and rebalance-safe commits: on :class:`PartitionsRevoked` it commits the processed
positions of the revoked partitions through the bridge, waits for the reply, and only then
acknowledges, so the next owner starts exactly after what this subscriber processed.

Stream messages are handled in their ``seq`` order (Thespian may reorder messages between
two actors); a message that arrives early waits for its predecessors.

Subclass it and override :meth:`process` (and any ``on_*`` hook). A batch counts as processed
when :meth:`process` returns; a subclass that processes asynchronously overrides
:meth:`on_batch` and calls :meth:`processed` / :meth:`request` itself.

May touch: its bridge (by address, from :class:`Subscribed`'s sender), nothing else.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from thespian.actors import Actor

from kafka_actors.log import get_logger
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.records import ConsumerRecord
from kafka_actors.thespian.messages import (
    Commit,
    CommitFailed,
    CommitOk,
    PartitionsAssigned,
    PartitionsLost,
    PartitionsRevoked,
    RebalanceAck,
    RecordBatch,
    Request,
    StreamError,
    Subscribed,
)

__all__ = ["StreamSubscriber"]

CommitDone = Callable[[CommitOk | CommitFailed], None]


class StreamSubscriber(Actor):  # type: ignore[misc]
    """Requests records from a bridge, processes them, commits safely on revocation."""

    #: records requested in flight (initial demand, then topped up after each batch)
    window: int = 1000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bridge: Any = None
        self.requesting = True
        self.positions: dict[TopicPartition, int] = {}
        self._owed = 0  # processed records not yet re-requested (while not requesting)
        self._commit_ids = itertools.count(1)
        self._commit_waiters: dict[int, CommitDone] = {}
        self._next_seq = 1
        self._early: dict[int, Any] = {}  # stream messages that overtook earlier ones
        self.reordered = 0  # how many stream messages arrived before their predecessors
        self.log = get_logger("thespian_subscriber")

    # -- hooks ---------------------------------------------------------------------------------

    def process(self, records: tuple[ConsumerRecord, ...]) -> None:
        """Process one batch (offset order per partition). Override."""

    def on_subscribed(self, message: Subscribed) -> None:
        """The stream started."""

    def on_revoked(self, message: PartitionsRevoked) -> None:
        """Default: commit what was processed of the revoked partitions, then acknowledge."""
        offsets = {tp: self.positions[tp] for tp in message.partitions if tp in self.positions}
        for tp in message.partitions:
            self.positions.pop(tp, None)

        def then(result: CommitOk | CommitFailed) -> None:
            error = str(result.error) if isinstance(result, CommitFailed) else None
            if error is not None:
                self.log.warning("revocation_commit_failed", error=error)
            self.send(self.bridge, RebalanceAck(message.rebalance_id, error))

        if offsets:
            self.commit(offsets, then)
        else:
            self.send(self.bridge, RebalanceAck(message.rebalance_id))

    def on_assigned(self, message: PartitionsAssigned) -> None:
        self.send(self.bridge, RebalanceAck(message.rebalance_id))

    def on_lost(self, message: PartitionsLost) -> None:
        """Lost partitions belong to others already: forget them, never commit them."""
        for tp in message.partitions:
            self.positions.pop(tp, None)
        self.send(self.bridge, RebalanceAck(message.rebalance_id))

    def on_stream_error(self, message: StreamError) -> None:
        self.log.warning("stream_error", error=str(message.error), fatal=message.fatal)

    def on_other(self, message: Any, sender: Any) -> None:
        """Messages the protocol does not know (a subclass's own control messages)."""

    # -- actions -------------------------------------------------------------------------------

    def request(self, n: int) -> None:
        if n > 0 and self.bridge is not None:
            self.send(self.bridge, Request(n))

    def processed(self, positions: dict[TopicPartition, int]) -> None:
        """Record ``positions`` (next offset per partition) as processed."""
        self.positions.update(positions)

    def commit(
        self,
        offsets: dict[TopicPartition, int | OffsetAndMetadata] | dict[TopicPartition, int] | None,
        then: CommitDone | None = None,
    ) -> int:
        """Ask the bridge to commit ``offsets`` (None: the processed positions); ``then``
        runs with the reply. Returns the request id."""
        rid = next(self._commit_ids)
        if then is not None:
            self._commit_waiters[rid] = then
        wanted = dict(self.positions) if offsets is None else dict(offsets)
        self.send(self.bridge, Commit(rid, wanted))
        return rid

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
        seq = getattr(message, "seq", 0)
        if not isinstance(seq, int) or seq <= 0:
            self._handle(message, sender)
            return
        if seq != self._next_seq:
            if seq > self._next_seq:
                self.reordered += 1
                self._early[seq] = (message, sender)
            return  # seq below: a duplicate
        self._handle(message, sender)
        self._next_seq += 1
        while self._next_seq in self._early:
            early, early_sender = self._early.pop(self._next_seq)
            self._handle(early, early_sender)
            self._next_seq += 1

    def _handle(self, message: Any, sender: Any) -> None:
        if isinstance(message, RecordBatch):
            self.on_batch(message)
        elif isinstance(message, (CommitOk, CommitFailed)):
            waiter = self._commit_waiters.pop(message.request_id, None)
            if waiter is not None:
                waiter(message)
        elif isinstance(message, PartitionsRevoked):
            self.on_revoked(message)
        elif isinstance(message, PartitionsAssigned):
            self.on_assigned(message)
        elif isinstance(message, PartitionsLost):
            self.on_lost(message)
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
