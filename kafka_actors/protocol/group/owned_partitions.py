"""What a group member owns under either group protocol: :class:`OwnedPartitions`.

Owns: the owned partitions, those pending revocation and those awaiting onPartitionsAssigned,
and the events that change them (pause fetching, assignment changed).
Each group manager holds one: the classic manager
(:mod:`kafka_actors.protocol.group.classic.membership`) and the KIP-848 manager
(:mod:`kafka_actors.protocol.group.consumer.membership`), each giving it the outbox it owns.

May touch: nothing outside itself; pure.
"""

from __future__ import annotations

from kafka_actors.protocol.group.events import AssignmentChanged, PauseFetching
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.request_state import Outbox

__all__ = ["OwnedPartitions"]


class OwnedPartitions:
    """The partitions a member owns, with those pending revocation (no records of them may be
    returned) and those awaiting onPartitionsAssigned (not fetchable yet); every change is
    published on the outbox it is given (:class:`PauseFetching`, :class:`AssignmentChanged`)."""

    __slots__ = ("_assignment", "_awaiting_callback", "_outbox", "_pending_revocation")

    def __init__(self, outbox: Outbox) -> None:
        self._outbox = outbox
        self._assignment: frozenset[TopicPartition] = frozenset()
        self._pending_revocation: frozenset[TopicPartition] = frozenset()
        self._awaiting_callback: frozenset[TopicPartition] = frozenset()

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions owned now (including ones awaiting onPartitionsAssigned)."""
        return self._assignment

    @property
    def awaiting_callback(self) -> frozenset[TopicPartition]:
        return self._awaiting_callback

    @property
    def pending_revocation(self) -> frozenset[TopicPartition]:
        return self._pending_revocation

    def pause_fetching(self, partitions: frozenset[TopicPartition]) -> None:
        """Mark these partitions pending revocation (published once per partition)."""
        new = partitions - self._pending_revocation
        if new:
            self._pending_revocation = self._pending_revocation | new
            self._outbox.publish(PauseFetching(new))

    def set_assignment(self, assignment: frozenset[TopicPartition]) -> None:
        if assignment == self._assignment:
            return
        self._assignment = assignment
        self._pending_revocation = self._pending_revocation & assignment
        self._awaiting_callback = self._awaiting_callback & assignment
        self._outbox.publish(AssignmentChanged(assignment))

    def await_callback(self, partitions: frozenset[TopicPartition]) -> None:
        """These partitions wait for onPartitionsAssigned before they are fetched."""
        self._awaiting_callback = self._awaiting_callback | partitions

    def callback_done(self, partitions: frozenset[TopicPartition]) -> None:
        """onPartitionsAssigned for these partitions has completed."""
        self._awaiting_callback = self._awaiting_callback - partitions
