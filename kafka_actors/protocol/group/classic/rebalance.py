"""The classic rebalance's vocabulary and its pure parts.

Owns: the member states (:class:`ClassicMemberState`, Java's ``AbstractCoordinator.MemberState``),
the generation (:class:`Generation`, Java's ``AbstractCoordinator.Generation``: the value the
rebalance sets and the heartbeat sends), what the leader asks the cluster
(:class:`NeedPartitionCounts`), the JoinGroup metadata a member sends (:func:`join_protocols`),
the leader's assignment (:func:`decode_member_subscriptions`, :func:`assign_as_leader`, with the
assignors of :mod:`kafka_actors.protocol.group.classic.assignors`) and the one outstanding rebalance
callback (:class:`RebalanceCallbacks`, Java's ``ConsumerRebalanceListenerInvoker`` as events with
replies). The rebalance flow itself (onJoinPrepare, JoinGroup, SyncGroup, onJoinComplete,
leaving) reads and writes every field of the member, as Java's ``AbstractCoordinator`` does in
one class: it is :class:`~kafka_actors.protocol.group.classic.membership.ClassicMembershipManager`.

May touch: nothing outside itself; pure.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kafka_actors.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupAuthorizationFailedError,
    GroupMaxSizeReachedError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    NotCoordinatorError,
    UnsupportedVersionError,
)
from kafka_actors.protocol.group.classic.assignors import (
    Assignment,
    Subscription,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    get_assignor,
)
from kafka_actors.protocol.group.classic.config import ClassicMembershipConfig
from kafka_actors.protocol.group.events import (
    InvokeAssigned,
    InvokeLost,
    InvokeRevoked,
    NeedPartitionCounts,
    RebalanceCallback,
)
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.request_state import Outbox

__all__ = [
    "COORDINATOR_ERROR_CODES",
    "JOIN_FATAL_CODES",
    "JOIN_GROUP_TIMEOUT_LAPSE_MS",
    "MAX_REASON_LENGTH",
    "NO_GENERATION",
    "NO_GENERATION_ID",
    "NO_MEMBER_ID",
    "CallbackPurpose",
    "ClassicMemberState",
    "Generation",
    "NeedPartitionCounts",
    "PendingCallback",
    "RebalanceCallbacks",
    "assign_as_leader",
    "decode_member_subscriptions",
    "join_protocols",
]


NO_GENERATION_ID: Final = -1


NO_MEMBER_ID: Final = ""


#: JoinGroup may be held by the broker for the whole rebalance timeout: its request timeout is
#: max(request.timeout.ms, rebalance timeout + this lapse), as Java.
JOIN_GROUP_TIMEOUT_LAPSE_MS: Final = 5_000


#: The longest reason sent in JoinGroup / LeaveGroup (as Java).
MAX_REASON_LENGTH: Final = 255


#: JoinGroup error codes (Kafka's Errors) that end the member.
JOIN_FATAL_CODES: Final = frozenset(
    {
        InconsistentGroupProtocolError.code,
        InvalidSessionTimeoutError.code,
        InvalidGroupIdError.code,
        GroupAuthorizationFailedError.code,
        GroupMaxSizeReachedError.code,
        FencedInstanceIdError.code,
        UnsupportedVersionError.code,
    }
)


#: The error codes that mean "find the coordinator again".
COORDINATOR_ERROR_CODES: Final = frozenset(
    {CoordinatorNotAvailableError.code, NotCoordinatorError.code}
)


class ClassicMemberState(enum.Enum):
    """Java's ``AbstractCoordinator.MemberState``, plus FATAL (the member will not recover)."""

    UNJOINED = "UNJOINED"  # not in the group (never joined, left, or generation reset)
    PREPARING_REBALANCE = "PREPARING_REBALANCE"  # JoinGroup sent, waiting for its response
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"  # joined, waiting for the SyncGroup response
    STABLE = "STABLE"  # synced: owns its assignment, heartbeats
    FATAL = "FATAL"


@dataclass(frozen=True, slots=True)
class Generation:
    """Java's ``AbstractCoordinator.Generation``: set by the rebalance, sent by the heartbeat."""

    generation_id: int = NO_GENERATION_ID
    member_id: str = NO_MEMBER_ID
    protocol_name: str | None = None

    def same_member(self, other: Generation) -> bool:
        """Same generation id and member id (a response to ``other`` is not stale)."""
        return self.generation_id == other.generation_id and self.member_id == other.member_id


#: No generation: before the first join, and after a reset.
NO_GENERATION: Final = Generation()


def join_protocols(
    config: ClassicMembershipConfig,
    *,
    subscription: tuple[str, ...],
    owned: frozenset[TopicPartition],
    last_assigned: frozenset[TopicPartition],
    last_assignment_generation: int,
    generation_id: int,
) -> list[tuple[str, bytes]]:
    """The JoinGroup protocols: one per configured assignor, each with the encoded subscription
    (topics, the assignor's user data, owned partitions, generation and rack)."""
    protocols = []
    for name in config.assignors:
        assignor = get_assignor(name)
        if name == "sticky":
            user_data = assignor.subscription_user_data(
                subscription, sorted(last_assigned), last_assignment_generation
            )
        else:
            user_data = assignor.subscription_user_data(
                subscription, sorted(owned), last_assignment_generation
            )
        encoded = Subscription(
            topics=subscription,
            user_data=user_data,
            owned_partitions=tuple(sorted(owned)),
            generation_id=generation_id,
            rack_id=config.rack_id,
        )
        protocols.append((name, encode_subscription(encoded)))
    return protocols


def decode_member_subscriptions(members: Iterable[Any]) -> dict[str, Subscription]:
    """Every member's subscription from a JoinGroup response (the leader's); raises
    :class:`~kafka_actors.errors.ProtocolError` on undecodable metadata."""
    subscriptions: dict[str, Subscription] = {}
    for member in members:
        decoded = decode_subscription(member.metadata)
        subscriptions[member.member_id] = dataclasses.replace(
            decoded, group_instance_id=member.group_instance_id
        )
    return subscriptions


def assign_as_leader(
    protocol: str,
    subscriptions: Mapping[str, Subscription],
    topics: frozenset[str],
    counts: Mapping[str, int],
) -> tuple[dict[str, int], dict[str, Assignment], list[tuple[str, bytes]]]:
    """The leader's assignment with the group's assignor: the partition counts it used (the
    assignment snapshot), the assignment per member and the SyncGroup assignments (encoded,
    one per member)."""
    known = {topic: int(counts[topic]) for topic in topics if topic in counts}
    assignor = get_assignor(protocol)
    assignments = assignor.assign(known, subscriptions)
    encoded = [
        (member, encode_assignment(assignments.get(member, Assignment())))
        for member in subscriptions
    ]
    return known, assignments, encoded


class CallbackPurpose(enum.Enum):
    """What a rebalance callback's completion continues."""

    PREPARE = "join-prepare"
    COMPLETE_REVOKE = "complete-revoke"
    COMPLETE_ASSIGN = "complete-assign"
    LEAVE_RELEASE = "leave-release"
    LOST_ON_FATAL = "lost-on-fatal"


@dataclass(slots=True)
class PendingCallback:
    """A rebalance callback published and not completed yet."""

    callback_id: int
    method: RebalanceCallback
    partitions: frozenset[TopicPartition]
    purpose: CallbackPurpose
    owner: object | None  # the step it continues (the manager's prepare, completion or leave)


class RebalanceCallbacks:
    """The rebalance callbacks of a member: at most one outstanding; published as events
    (:class:`~kafka_actors.protocol.group.events.InvokeRevoked` /
    :class:`~kafka_actors.protocol.group.events.InvokeAssigned` /
    :class:`~kafka_actors.protocol.group.events.InvokeLost`) on the outbox it is given, with
    ids from it; :meth:`complete` hands the completed one back to run its continuation."""

    __slots__ = ("_outbox", "_pending")

    def __init__(self, outbox: Outbox) -> None:
        self._outbox = outbox
        self._pending: PendingCallback | None = None

    @property
    def pending(self) -> PendingCallback | None:
        """The outstanding callback, if any."""
        return self._pending

    def invoke(
        self,
        method: RebalanceCallback,
        partitions: frozenset[TopicPartition],
        purpose: CallbackPurpose,
        owner: object | None,
        *,
        assignment: frozenset[TopicPartition] = frozenset(),
    ) -> None:
        callback = PendingCallback(self._outbox.new_id(), method, partitions, purpose, owner)
        self._pending = callback
        event: InvokeRevoked | InvokeAssigned | InvokeLost
        if method is RebalanceCallback.ON_PARTITIONS_REVOKED:
            event = InvokeRevoked(partitions, callback.callback_id)
        elif method is RebalanceCallback.ON_PARTITIONS_ASSIGNED:
            event = InvokeAssigned(partitions, assignment, callback.callback_id)
        else:
            event = InvokeLost(partitions, callback.callback_id)
        self._outbox.publish(event)

    def complete(self, callback_id: int) -> PendingCallback | None:
        """The outstanding callback with this id, now completed; None if no such callback."""
        callback = self._pending
        if callback is None or callback.callback_id != callback_id:
            return None
        self._pending = None
        return callback
