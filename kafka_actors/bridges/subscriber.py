"""``RebalanceHandling``: the rebalance half of a subscriber, shared by the Thespian and
pykka ``StreamSubscriber`` base classes.

Owns: the default answers to the bridge's rebalance notices: on :class:`PartitionsRevoked`,
commit the processed positions of the revoked partitions through the bridge, wait for the
reply, then acknowledge (so the next owner starts exactly after what this subscriber
processed); on :class:`PartitionsAssigned`, acknowledge; on :class:`PartitionsLost`, forget
the partitions (they are owned by others already: never commit them) and acknowledge.

A subscriber class mixes it in and provides :meth:`_to_bridge` (send a message to its bridge),
``commit(offsets, then)``, ``positions`` (processed, next offset per partition) and ``log``.

May touch: the bridge only through the subscriber's own ``_to_bridge`` and ``commit``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka_actors.bridges.messages import (
    CommitFailed,
    CommitOk,
    PartitionsAssigned,
    PartitionsLost,
    PartitionsRevoked,
    RebalanceAck,
)
from kafka_actors.protocol.messages import TopicPartition

__all__ = ["CommitDone", "RebalanceHandling"]

CommitDone = Callable[[CommitOk | CommitFailed], None]


class RebalanceHandling:
    """Default rebalance hooks of a subscriber (see the module docstring)."""

    positions: dict[TopicPartition, int]
    log: Any

    def _to_bridge(self, message: Any) -> None:
        raise NotImplementedError

    def commit(self, offsets: Any, then: CommitDone | None = None) -> int:
        """Ask the bridge to commit ``offsets``; ``then`` runs with the reply."""
        raise NotImplementedError

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
