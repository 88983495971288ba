"""What a group member owns under either group protocol: :class:`OwnedPartitions`.

Owns: the owned partitions, those pending revocation and those awaiting onPartitionsAssigned,
and the events that change them (pause fetching, assignment changed, rebalance callbacks).
The classic manager (:mod:`kafka_actors.protocol.classic_membership`) holds an
:class:`OwnedPartitions`; the KIP-848 manager (:mod:`kafka_actors.protocol.membership`) still
derives from :class:`GroupMemberBase`, the same state as a mixin.

May touch: nothing outside itself; pure.
"""

from __future__ import annotations

from typing import Any, Protocol

from kafka_actors.protocol.group_events import (
    AssignmentChanged,
    InvokeAssigned,
    InvokeLost,
    InvokeRevoked,
    PauseFetching,
    RebalanceCallback,
)
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.request_state import EventOutbox, Outbox

__all__ = ["GroupMemberBase", "OwnedPartitions"]


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


class _GroupIdentity(Protocol):
    @property
    def group_id(self) -> str: ...
    @property
    def group_instance_id(self) -> str | None: ...


class GroupMemberBase(EventOutbox):
    """What a member owns, as a mixin of the KIP-848 manager: the owned partitions
    with those pending revocation or awaiting onPartitionsAssigned, the published events, the
    id counter, and the events for pausing, assignment changes and rebalance callbacks.
    Subclasses initialize the attributes in their ``__init__``."""

    _config: _GroupIdentity
    _assignment: frozenset[TopicPartition]
    _pending_revocation: frozenset[TopicPartition]
    _awaiting_callback: frozenset[TopicPartition]

    @property
    def group_id(self) -> str:
        return self._config.group_id

    @property
    def group_instance_id(self) -> str | None:
        return self._config.group_instance_id

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions the member owns now (including ones awaiting onPartitionsAssigned)."""
        return self._assignment

    @property
    def partitions_awaiting_callback(self) -> frozenset[TopicPartition]:
        """Owned partitions not fetchable yet: their onPartitionsAssigned has not completed."""
        return self._awaiting_callback

    @property
    def partitions_pending_revocation(self) -> frozenset[TopicPartition]:
        """Owned partitions being revoked: no records of them may be returned."""
        return self._pending_revocation

    def _pause_fetching(self, partitions: frozenset[TopicPartition]) -> None:
        new = partitions - self._pending_revocation
        if new:
            self._pending_revocation = self._pending_revocation | new
            self._events.append(PauseFetching(new))

    def _set_assignment(self, assignment: frozenset[TopicPartition]) -> None:
        if assignment == self._assignment:
            return
        self._assignment = assignment
        self._pending_revocation = self._pending_revocation & assignment
        self._awaiting_callback = self._awaiting_callback & assignment
        self._events.append(AssignmentChanged(assignment))

    def _publish_callback(
        self,
        method: RebalanceCallback,
        partitions: frozenset[TopicPartition],
        callback_id: int,
        assignment: frozenset[TopicPartition] = frozenset(),
    ) -> None:
        event: Any
        if method is RebalanceCallback.ON_PARTITIONS_REVOKED:
            event = InvokeRevoked(partitions, callback_id)
        elif method is RebalanceCallback.ON_PARTITIONS_ASSIGNED:
            event = InvokeAssigned(partitions, assignment, callback_id)
        else:
            event = InvokeLost(partitions, callback_id)
        self._events.append(event)
