"""``RebalanceHandling``: the rebalance half of a subscriber, shared by the Thespian and
pykka ``StreamSubscriber`` base classes.

Owns: the default answers to the bridge's rebalance notices: on :class:`PartitionsRevoked`,
commit the processed positions of the revoked partitions through the bridge, wait for the
reply, then acknowledge (so the next owner starts exactly after what this subscriber
processed); on :class:`PartitionsAssigned`, acknowledge; on :class:`PartitionsLost`, forget
the partitions (they are owned by others already: never commit them) and acknowledge.

Also owns the subscriber's commits through the bridge: :meth:`commit` numbers a
:class:`Commit`, keeps its ``then`` and runs it with the reply.

A subscriber class mixes it in, calls :meth:`_init_commits` once, hands each protocol message
to :meth:`_handle_shared` and provides :meth:`_to_bridge` (send a message to its bridge),
:meth:`_send_commit`, ``positions`` (processed, next offset per partition) and ``log``.

May touch: the bridge only through the subscriber's own ``_to_bridge`` and ``commit``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from kafka_actors.bridges.messages import (
    Commit,
    CommitFailed,
    CommitOk,
    PartitionsAssigned,
    PartitionsLost,
    PartitionsRevoked,
    RebalanceAck,
)
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition

__all__ = ["CommitDone", "RebalanceHandling"]

CommitDone = Callable[[CommitOk | CommitFailed], None]


class RebalanceHandling:
    """Default rebalance hooks of a subscriber (see the module docstring)."""

    positions: dict[TopicPartition, int]
    log: Any

    def _to_bridge(self, message: Any) -> None:
        raise NotImplementedError

    def _send_commit(self, message: Commit) -> None:
        """Send a Commit to the bridge so that its reply comes back to this actor."""
        raise NotImplementedError

    def _init_commits(self) -> None:
        self._commit_ids = itertools.count(1)
        self._commit_waiters: dict[int, CommitDone] = {}

    def commit(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
        then: CommitDone | None = None,
    ) -> int:
        """Ask the bridge to commit ``offsets`` (None: the processed positions); ``then``
        runs on this actor's thread with the reply. Returns the request id."""
        rid = next(self._commit_ids)
        if then is not None:
            self._commit_waiters[rid] = then
        wanted = dict(self.positions) if offsets is None else dict(offsets)
        self._send_commit(Commit(rid, wanted))
        return rid

    def _commit_replied(self, reply: CommitOk | CommitFailed) -> None:
        waiter = self._commit_waiters.pop(reply.request_id, None)
        if waiter is not None:
            waiter(reply)

    def _handle_shared(self, message: Any) -> bool:
        """Handle a commit reply or a rebalance notice; False for any other message."""
        if isinstance(message, (CommitOk, CommitFailed)):
            self._commit_replied(message)
        elif isinstance(message, PartitionsRevoked):
            self.on_revoked(message)
        elif isinstance(message, PartitionsAssigned):
            self.on_assigned(message)
        elif isinstance(message, PartitionsLost):
            self.on_lost(message)
        else:
            return False
        return True

    def on_revoked(self, message: PartitionsRevoked) -> None:
        """Default: commit what was processed of the revoked partitions, then acknowledge."""
        offsets = {tp: self.positions[tp] for tp in message.partitions if tp in self.positions}
        for tp in message.partitions:
            self.positions.pop(tp, None)

        def then(result: CommitOk | CommitFailed) -> None:
            error = str(result.error) if isinstance(result, CommitFailed) else None
            if error is not None:
                self.log.warning("revocation_commit_failed", error=error)
            self._to_bridge(RebalanceAck(message.rebalance_id, error))

        if offsets:
            self.commit(offsets, then)
        else:
            self._to_bridge(RebalanceAck(message.rebalance_id))

    def on_assigned(self, message: PartitionsAssigned) -> None:
        self._to_bridge(RebalanceAck(message.rebalance_id))

    def on_lost(self, message: PartitionsLost) -> None:
        """Lost partitions belong to others already: forget them, never commit them."""
        for tp in message.partitions:
            self.positions.pop(tp, None)
        self._to_bridge(RebalanceAck(message.rebalance_id))
