"""Application events: the messages API calls become (facade → request-manager actors), and the
few events one manager actor builds for another.

Owns: one frozen dataclass per kind of application event. Each carries the trace id created at
the API call and, when the caller waits for an answer, a ``concurrent.futures.Future`` that
the handling actor completes (result or typed error) and a deadline (monotonic ms), as Java's
``CompletableApplicationEvent``. Background events (manager → facade) are the managers' own
event types, wrapped in :class:`~kafka_actors.actors.context.Routed`; where they go is the
table in :mod:`kafka_actors.actors.routing`. The events at the end of this module
(:class:`TopicNames`, :class:`PartitionCounts`, :class:`CommitDone`) are built by an actor, not
a manager, for another actor; they are routed by the same table.

May touch: nothing (plain values).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_actors.protocol.group.membership_operation import GroupMembershipOperation
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition

__all__ = [
    "AssignmentChangedEvent",
    "CallbackCompletedEvent",
    "ClientInstanceIdEvent",
    "CommitDone",
    "CommitEvent",
    "EnforceRebalanceEvent",
    "FetchCommittedEvent",
    "LeaveGroupEvent",
    "ListOffsetsEvent",
    "PartitionCounts",
    "PollEvent",
    "PollLatch",
    "PositionsChangedEvent",
    "RefreshMetadataEvent",
    "ResetPositionsEvent",
    "SubscriptionChangedEvent",
    "TelemetryCloseEvent",
    "TopicMetadataEvent",
    "TopicNames",
]

Future = concurrent.futures.Future


@dataclass(frozen=True, slots=True)
class SubscriptionChangedEvent:
    """subscribe()/unsubscribe(): the SubscriptionState changed (topics or pattern)."""

    topics: frozenset[str]
    pattern: str | None
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class AssignmentChangedEvent:
    """assign(): the user's manual assignment changed."""

    partitions: frozenset[TopicPartition]
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class PollEvent:
    """The application polled: reset the poll timer, maybe auto-commit, join if needed.

    ``waiting``: sent again by a poll() still waiting for records (not a new poll): errors
    reported once per poll (the group protocol refused) are not reported again for it."""

    trace_id: str | None = None
    waiting: bool = False
    #: Set by a poll that may skip telling again while this event is not yet received.
    latch: PollLatch | None = field(default=None, compare=False)


class PollLatch:
    """One actor's last :class:`PollEvent` from a poll loop, until the actor receives it.

    The actor clears ``pending`` before it reads its clock for the event (in
    ``before_receive``), so a poll that finds ``pending`` set needs no event of its own: the
    one queued is handled at a time after this poll, as the poll's own would be. The sync
    consumer then skips the tell (a queue put and a thread wake-up per poll and actor);
    ``told_at`` bounds how long it trusts an event that a restarting actor may have lost."""

    __slots__ = ("pending", "told_at")

    def __init__(self) -> None:
        self.pending = False
        self.told_at = 0.0


@dataclass(frozen=True, slots=True)
class PositionsChangedEvent:
    """seek / pause / resume changed what is fetchable: fetch again."""

    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class CommitEvent:
    """commit_sync / commit_async (``offsets`` None: all consumed positions)."""

    offsets: Mapping[TopicPartition, OffsetAndMetadata] | None
    sync: bool
    deadline_ms: int
    future: Future[Any]
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class FetchCommittedEvent:
    partitions: frozenset[TopicPartition]
    deadline_ms: int
    future: Future[Any]
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class ListOffsetsEvent:
    """beginning_offsets / end_offsets (``kind``), offsets_for_times (``timestamps``)."""

    kind: str  # "beginning_offsets" | "end_offsets" | "offsets_for_times"
    timestamps: Mapping[TopicPartition, int]
    deadline_ms: int
    future: Future[Any]
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class ClientInstanceIdEvent:
    """client_instance_id(): the id the broker assigned this client (KIP-714), once the
    telemetry subscription is loaded; the caller's wait has its own deadline."""

    future: Future[Any]
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class TelemetryCloseEvent:
    """close(): the terminating telemetry push (KIP-714); completed (None) once it was
    answered or when there is none to send."""

    future: Future[Any]
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class ResetPositionsEvent:
    """Make sure every assigned partition has a position: committed offsets, then resets."""

    deadline_ms: int
    future: Future[Any]
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class TopicMetadataEvent:
    """list_topics / partitions_for (``topics`` None: every topic)."""

    topics: frozenset[str] | None
    deadline_ms: int
    future: Future[Any]
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class RefreshMetadataEvent:
    reason: str
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class CallbackCompletedEvent:
    """The listener (or its deferred reply) finished the callback ``callback_id``."""

    callback_id: int
    error: BaseException | None
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupEvent:
    """unsubscribe()/close(): leave the group (``future`` completes when the leave is over).
    ``membership``: close's group membership operation (KIP-1092); "default" for unsubscribe."""

    deadline_ms: int | None
    future: Future[Any]
    run_callbacks: bool = True
    trace_id: str | None = None
    membership: GroupMembershipOperation = "default"


@dataclass(frozen=True, slots=True)
class EnforceRebalanceEvent:
    """enforce_rebalance() of a classic member: rejoin, the JoinGroup carrying ``reason``."""

    reason: str
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class CommitOnCloseEvent:
    """close(): with auto-commit, commit the consumed positions before leaving."""

    deadline_ms: int
    future: Future[Any]
    trace_id: str | None = None


# -- between manager actors -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicNames:
    """metadata → membership: topic id → name for the ids membership asked for
    (``NeedTopicNames``)."""

    mapping: dict[str, str]


@dataclass(frozen=True, slots=True)
class PartitionCounts:
    """metadata → classic membership: the answer to ``NeedPartitionCounts``."""

    request_id: int
    counts: dict[str, int]


@dataclass(frozen=True, slots=True)
class CommitDone:
    """commit → membership: the commit before a revocation is over."""

    commit_id: int
    error: BaseException | None
