"""The events a group member publishes, shared by both group protocols and their listeners.

Owns: the frozen events the membership managers (KIP-848
:mod:`kafka_actors.protocol.group.consumer.membership` and classic
:mod:`kafka_actors.protocol.group.classic.membership`) publish through ``PollResult.events``, and
the ones the commit manager publishes or reads: epoch and assignment changes, rebalance callbacks to
run (``Invoke*``, answered with ``on_callback_completed``), the commit before a revocation,
coordinator loss, errors and the end of a leave.

May touch: nothing; pure data.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kafka_actors.errors import KafkaError
from kafka_actors.protocol.messages import TopicPartition

__all__ = [
    "AssignmentChanged",
    "CommitBeforeRevocation",
    "CoordinatorUnknown",
    "ErrorEvent",
    "InvokeAssigned",
    "InvokeLost",
    "InvokeRevoked",
    "LeaveCompleted",
    "MemberEpochChanged",
    "NeedPartitionCounts",
    "NeedTopicNames",
    "PauseFetching",
    "RebalanceCallback",
]


class RebalanceCallback(enum.Enum):
    """The ConsumerRebalanceListener method an ``Invoke*`` event stands for."""

    ON_PARTITIONS_REVOKED = "onPartitionsRevoked"
    ON_PARTITIONS_ASSIGNED = "onPartitionsAssigned"
    ON_PARTITIONS_LOST = "onPartitionsLost"


@dataclass(frozen=True, slots=True)
class MemberEpochChanged:
    """The member epoch changed; ``member_epoch`` is None when the member is not in the group.

    The commit manager uses it for OffsetCommit/OffsetFetch (Java's MemberStateListener).
    ``rebalancing`` (classic protocol only): the member is in a rebalance (JoinGroup or
    SyncGroup in flight), so its generation is not usable; commits then fail with
    RebalanceInProgressError, as Java's ``generationIfStable()``/``rebalanceInProgress()``.
    """

    member_id: str
    member_epoch: int | None
    rebalancing: bool = False


@dataclass(frozen=True, slots=True)
class AssignmentChanged:
    """The partitions the member owns changed (the subscription state's assignment)."""

    assignment: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class NeedTopicNames:
    """Resolve these topic ids to names (reply with ``on_topic_names``)."""

    topic_ids: frozenset[str]


@dataclass(frozen=True, slots=True)
class PauseFetching:
    """Stop fetching and returning records of these partitions now: they are being revoked."""

    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class CommitBeforeRevocation:
    """Auto-commit the consumed positions before reconciling (reply with ``on_commit_done``).

    ``partitions`` are the ones about to be revoked (possibly none); the commit is retried
    until ``deadline_ms`` (now + rebalance timeout), as Java's maybeAutoCommitSyncBeforeRebalance.
    """

    partitions: frozenset[TopicPartition]
    deadline_ms: int
    commit_id: int


@dataclass(frozen=True, slots=True)
class InvokeRevoked:
    """Run onPartitionsRevoked(partitions); reply with ``on_callback_completed(callback_id)``."""

    partitions: frozenset[TopicPartition]
    callback_id: int
    method: RebalanceCallback = RebalanceCallback.ON_PARTITIONS_REVOKED


@dataclass(frozen=True, slots=True)
class InvokeAssigned:
    """Run onPartitionsAssigned(partitions) (the added ones; ``assignment`` is the full one).

    Published even when nothing was added, as Java. Added partitions are not fetchable until
    the reply arrives.
    """

    partitions: frozenset[TopicPartition]
    assignment: frozenset[TopicPartition]
    callback_id: int
    method: RebalanceCallback = RebalanceCallback.ON_PARTITIONS_ASSIGNED


@dataclass(frozen=True, slots=True)
class InvokeLost:
    """Run onPartitionsLost(partitions); reply with ``on_callback_completed(callback_id)``."""

    partitions: frozenset[TopicPartition]
    callback_id: int
    method: RebalanceCallback = RebalanceCallback.ON_PARTITIONS_LOST


@dataclass(frozen=True, slots=True)
class CoordinatorUnknown:
    """The coordinator moved or went away: rediscover it (FindCoordinator)."""

    reason: str


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """An error for the user's next call. ``fatal``: the member is FATAL and will not recover.

    ``consumer_protocol_unsupported`` is set when the broker does not support the consumer
    group protocol (the consumer should say: use group.protocol=classic).
    """

    error: KafkaError
    fatal: bool
    consumer_protocol_unsupported: bool = False


@dataclass(frozen=True, slots=True)
class LeaveCompleted:
    """The leave started by ``leave_group`` is over (response, failure, skipped or deadline)."""

    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class NeedPartitionCounts:
    """The leader needs the partition count of these topics (reply with ``on_partition_counts``
    and this ``request_id``). Ask the cluster fresh: the assignment is computed from the answer;
    topics missing from the answer are left out of the assignment (as Java).

    Published by the classic protocol's leader only; it lives here, with the group vocabulary,
    so that the routing table and the metadata actor know it without importing the classic
    protocol (imported only by a consumer with ``group.protocol=classic``)."""

    topics: frozenset[str]
    request_id: int
