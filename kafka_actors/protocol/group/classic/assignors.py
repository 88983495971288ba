"""The classic group protocol's "consumer" embedded protocol and the client-side assignors.

Owns: the encoding of the subscription a member sends in JoinGroup and of the assignment the
leader sends in SyncGroup (Kafka's ``ConsumerProtocol``: a 2-byte version, then the non-flexible
``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment`` body, v0..v3), the assignors
``range``, ``roundrobin``, ``sticky`` and ``cooperative-sticky`` with Java's semantics, the
choice of the rebalance protocol (EAGER / COOPERATIVE) from a member's assignors, and the
broker's choice of the group's assignor. Pure: no threads, sockets or clocks.
May touch: kio's generated consumer-protocol types, :mod:`kafka_actors.protocol.messages`
(``TopicPartition``) and :mod:`kafka_actors.errors`.

Compatibility with Java members of the same group:

* Encoding writes the requested version (default 3, Java's highest) and decoding reads any
  version >= 0; a version above 3 is read with the v3 schema and trailing bytes are ignored,
  which is how Java reads newer versions (new versions may only append fields).
* ``cooperative-sticky`` puts the member's generation in the user data as a 4-byte int (as
  Java's CooperativeStickyAssignor, for leaders that read v0/v1 subscriptions); ``sticky``
  puts its previous assignment and generation there (Java's StickyAssignor user data v1).
* ``range`` and ``roundrobin`` sort members as Java's ``MemberInfo``: static members
  (group.instance.id) first by instance id, then dynamic members by member id; their results
  equal Java's. The sticky assignors order members by member id, as Java's do.
* ``sticky`` / ``cooperative-sticky`` with identical subscriptions follow Java's constrained
  algorithm step by step (claim resolution by generation, quotas, which owned partitions are
  kept, round-robin filling, partitions transferring ownership); the one freedom left is where
  Java iterates a HashMap (which members take the ceiling quota first): we use member-id
  order. tests/consumer_units/test_java_judge.py compares with kafka-clients directly.
* With differing subscriptions the sticky assignors use our own algorithm (keep valid owned
  partitions, place the rest on the least loaded eligible member, then shift partitions along
  chains of eligible members until no member can gain from one with two more). It has the
  properties of Java's general algorithm (valid, balanced as far as subscriptions allow,
  sticky, two-phase moves for cooperative) but not always the same partition choices. Our
  cooperative round withholds every partition another member still claims (Java: those
  another member claims and loses), so it never hands out a partition before its owner
  revoked it.
* Not implemented: rack-aware assignment (KIP-881); ``client.rack`` is still sent (rack_id).
"""

from __future__ import annotations

import enum
import io
import struct
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from kio.schema.consumer_protocol_assignment.v0.data import (
    ConsumerProtocolAssignment as AssignmentV0,
)
from kio.schema.consumer_protocol_assignment.v0.data import TopicPartition as AssignedTopicV0
from kio.schema.consumer_protocol_assignment.v1.data import (
    ConsumerProtocolAssignment as AssignmentV1,
)
from kio.schema.consumer_protocol_assignment.v1.data import TopicPartition as AssignedTopicV1
from kio.schema.consumer_protocol_assignment.v2.data import (
    ConsumerProtocolAssignment as AssignmentV2,
)
from kio.schema.consumer_protocol_assignment.v2.data import TopicPartition as AssignedTopicV2
from kio.schema.consumer_protocol_assignment.v3.data import (
    ConsumerProtocolAssignment as AssignmentV3,
)
from kio.schema.consumer_protocol_assignment.v3.data import TopicPartition as AssignedTopicV3
from kio.schema.consumer_protocol_subscription.v0.data import (
    ConsumerProtocolSubscription as SubscriptionV0,
)
from kio.schema.consumer_protocol_subscription.v1.data import (
    ConsumerProtocolSubscription as SubscriptionV1,
)
from kio.schema.consumer_protocol_subscription.v1.data import TopicPartition as OwnedTopicV1
from kio.schema.consumer_protocol_subscription.v2.data import (
    ConsumerProtocolSubscription as SubscriptionV2,
)
from kio.schema.consumer_protocol_subscription.v2.data import TopicPartition as OwnedTopicV2
from kio.schema.consumer_protocol_subscription.v3.data import (
    ConsumerProtocolSubscription as SubscriptionV3,
)
from kio.schema.consumer_protocol_subscription.v3.data import TopicPartition as OwnedTopicV3
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.primitive import i32

from kafka_actors.errors import InconsistentGroupProtocolError, ProtocolError
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.wire.bounds import check_entity

__all__ = [
    "ASSIGNORS",
    "CONSUMER_PROTOCOL_TYPE",
    "DEFAULT_GENERATION",
    "HIGHEST_SUPPORTED_VERSION",
    "Assignment",
    "CooperativeStickyAssignor",
    "PartitionAssignor",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "decode_assignment",
    "decode_sticky_user_data",
    "decode_subscription",
    "encode_assignment",
    "encode_sticky_user_data",
    "encode_subscription",
    "get_assignor",
    "rebalance_protocol",
    "select_group_protocol",
]

CONSUMER_PROTOCOL_TYPE = "consumer"
HIGHEST_SUPPORTED_VERSION = 3
DEFAULT_GENERATION = -1

PartitionsPerTopic = Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a member sends in JoinGroup (and what the leader receives for every member).

    ``generation_id`` is -1 when unknown (v0/v1, or a member that never joined).
    ``group_instance_id`` is not part of the embedded protocol: the JoinGroup response carries
    it beside each member's metadata; assignors use it to order members as Java does.
    """

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = DEFAULT_GENERATION
    rack_id: str | None = None
    group_instance_id: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the leader sends each member in SyncGroup."""

    partitions: tuple[TopicPartition, ...] = ()
    user_data: bytes | None = None


# --------------------------------------------------------------------------------------------
# encoding


_SUBSCRIPTION_TYPES = (SubscriptionV0, SubscriptionV1, SubscriptionV2, SubscriptionV3)
_OWNED_TOPIC_TYPES = (None, OwnedTopicV1, OwnedTopicV2, OwnedTopicV3)
_ASSIGNMENT_TYPES = (AssignmentV0, AssignmentV1, AssignmentV2, AssignmentV3)
_ASSIGNED_TOPIC_TYPES = (AssignedTopicV0, AssignedTopicV1, AssignedTopicV2, AssignedTopicV3)
_VERSION = struct.Struct(">h")


def _group_by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partitions grouped by topic, topics in first-seen order (Java: groupPartitionsByTopic)."""
    grouped: dict[str, list[int]] = {}
    for tp in partitions:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return grouped


def _check_version(version: int, what: str) -> None:
    if not 0 <= version <= HIGHEST_SUPPORTED_VERSION:
        raise ValueError(f"cannot encode {what} version {version} (0..{HIGHEST_SUPPORTED_VERSION})")


def encode_subscription(
    subscription: Subscription, version: int = HIGHEST_SUPPORTED_VERSION
) -> bytes:
    """Bytes for JoinGroup's protocol metadata: int16 version + ConsumerProtocolSubscription.

    Fields the version lacks are dropped (owned partitions before v1, generation before v2,
    rack before v3), and topics and owned partitions are sorted, as Java does, so the bytes are
    the ones a Java member would send.
    """
    _check_version(version, "subscription")
    entity: object
    common = {"topics": tuple(sorted(subscription.topics)), "user_data": subscription.user_data}
    if version == 0:
        entity = SubscriptionV0(**common)  # type: ignore[arg-type]
    else:
        topic_type = _OWNED_TOPIC_TYPES[version]
        assert topic_type is not None
        owned = tuple(
            topic_type(topic=topic, partitions=tuple(i32(p) for p in partitions))  # type: ignore[arg-type]
            for topic, partitions in _group_by_topic(sorted(subscription.owned_partitions)).items()
        )
        extra: dict[str, object] = {"owned_partitions": owned}
        if version >= 2:
            extra["generation_id"] = i32(subscription.generation_id)
        if version >= 3:
            extra["rack_id"] = subscription.rack_id
        entity = _SUBSCRIPTION_TYPES[version](**common, **extra)  # type: ignore[arg-type]
    out = io.BytesIO()
    out.write(_VERSION.pack(version))
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def _read_version(data: bytes, what: str) -> int:
    if len(data) < 2:
        raise ProtocolError(f"{what}: buffer underflow while reading the consumer protocol header")
    (version,) = _VERSION.unpack_from(data, 0)
    if version < 0:
        raise ProtocolError(f"Unsupported {what} version: {version}")
    return int(version)


def decode_subscription(data: bytes) -> Subscription:
    """Read a member's JoinGroup metadata. Versions above 3 are read as v3 (Java's rule)."""
    version = _read_version(data, "subscription")
    schema = _SUBSCRIPTION_TYPES[min(version, HIGHEST_SUPPORTED_VERSION)]
    entity: Any
    # Bound every count by the bytes that remain before kio's native reader allocates.
    check_entity(data, 2, schema, f"consumer protocol subscription v{version}")
    try:
        entity, _size = entity_reader(schema)(data, 2)
    except (SerialError, ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"Malformed consumer protocol subscription v{version}: {exc}") from exc
    owned: tuple[TopicPartition, ...] = ()
    if hasattr(entity, "owned_partitions"):
        owned = tuple(
            TopicPartition(t.topic, int(p)) for t in entity.owned_partitions for p in t.partitions
        )
    return Subscription(
        topics=tuple(entity.topics),
        user_data=entity.user_data,
        owned_partitions=owned,
        generation_id=int(getattr(entity, "generation_id", DEFAULT_GENERATION)),
        rack_id=getattr(entity, "rack_id", None),
    )


def encode_assignment(assignment: Assignment, version: int = HIGHEST_SUPPORTED_VERSION) -> bytes:
    """Bytes for SyncGroup's assignment: int16 version + ConsumerProtocolAssignment."""
    _check_version(version, "assignment")
    topic_type = _ASSIGNED_TOPIC_TYPES[version]
    assigned = tuple(
        topic_type(topic=topic, partitions=tuple(i32(p) for p in partitions))  # type: ignore[arg-type]
        for topic, partitions in _group_by_topic(assignment.partitions).items()
    )
    entity = _ASSIGNMENT_TYPES[version](
        assigned_partitions=assigned,  # type: ignore[arg-type]
        user_data=assignment.user_data,
    )
    out = io.BytesIO()
    out.write(_VERSION.pack(version))
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def decode_assignment(data: bytes) -> Assignment:
    """Read a SyncGroup assignment. Empty bytes (no assignment for us) are an empty assignment."""
    if not data:
        return Assignment()
    version = _read_version(data, "assignment")
    schema = _ASSIGNMENT_TYPES[min(version, HIGHEST_SUPPORTED_VERSION)]
    entity: Any
    # Bound every count by the bytes that remain before kio's native reader allocates.
    check_entity(data, 2, schema, f"consumer protocol assignment v{version}")
    try:
        entity, _size = entity_reader(schema)(data, 2)
    except (SerialError, ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"Malformed consumer protocol assignment v{version}: {exc}") from exc
    return Assignment(
        partitions=tuple(
            TopicPartition(t.topic, int(p))
            for t in entity.assigned_partitions
            for p in t.partitions
        ),
        user_data=entity.user_data,
    )


# --------------------------------------------------------------------------------------------
# rebalance protocol and group protocol selection


class RebalanceProtocol(enum.IntEnum):
    """Java's ``ConsumerPartitionAssignor.RebalanceProtocol``; the id orders how advanced."""

    EAGER = 0
    COOPERATIVE = 1


def rebalance_protocol(assignor_names: Sequence[str]) -> RebalanceProtocol:
    """The rebalance protocol a member with these assignors uses (Java's ConsumerCoordinator).

    Only protocols every configured assignor supports count; of those, the highest id wins. So
    ``["range", "cooperative-sticky"]`` (Java's default) is EAGER and
    ``["cooperative-sticky"]`` alone is COOPERATIVE.
    """
    if not assignor_names:
        raise ValueError("at least one assignor is needed to choose a rebalance protocol")
    common = set(RebalanceProtocol)
    for name in assignor_names:
        common &= set(get_assignor(name).supported_protocols)
    if not common:  # cannot happen with the built-in assignors: all support EAGER
        raise ValueError(f"assignors {list(assignor_names)} share no rebalance protocol")
    return max(common)


def select_group_protocol(member_protocols: Mapping[str, Sequence[str]]) -> str:
    """The assignor the broker chooses for a classic group (ClassicGroup.selectProtocol).

    Candidates are the protocols every member supports; each member votes for the first
    candidate in its own preference list; the most votes win. The broker breaks a tie in hash
    order; we break it by the candidates' order in the smallest member id's list.
    Raises :class:`InconsistentGroupProtocolError` when the members share no protocol.
    """
    if not member_protocols:
        raise ValueError("no members")
    members = sorted(member_protocols)
    candidates = set(member_protocols[members[0]])
    for member in members[1:]:
        candidates &= set(member_protocols[member])
    if not candidates:
        raise InconsistentGroupProtocolError(
            "The group members share no partition assignor: "
            + "; ".join(f"{m}: {list(member_protocols[m])}" for m in members)
        )
    votes: dict[str, int] = defaultdict(int)
    for member in members:
        vote = next(p for p in member_protocols[member] if p in candidates)
        votes[vote] += 1
    order = [p for p in member_protocols[members[0]] if p in candidates]
    return max(order, key=lambda p: (votes[p], -order.index(p)))


# --------------------------------------------------------------------------------------------
# assignors


class PartitionAssignor(Protocol):
    """A client-side assignor: the leader runs ``assign`` for the whole group."""

    name: ClassVar[str]
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]]

    def subscription_user_data(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        """The user data this member puts in its subscription (None for none)."""
        ...

    def assign(
        self, partitions_per_topic: PartitionsPerTopic, subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        """One assignment per member (every member present, possibly empty)."""
        ...


def _member_order(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Java's MemberInfo order: static members by instance id first, then member ids."""

    def key(member: str) -> tuple[int, str, str]:
        instance = subscriptions[member].group_instance_id
        return (0, instance, member) if instance is not None else (1, member, member)

    return sorted(subscriptions, key=key)


def _subscribed_partitions(
    topics: Iterable[str], partitions_per_topic: PartitionsPerTopic
) -> list[TopicPartition]:
    """Partitions of the topics known in metadata, sorted by topic then partition."""
    return [
        TopicPartition(topic, p)
        for topic in sorted(set(topics))
        if topic in partitions_per_topic
        for p in range(partitions_per_topic[topic])
    ]


def _to_assignments(
    members: Iterable[str], assigned: Mapping[str, Iterable[TopicPartition]]
) -> dict[str, Assignment]:
    return {m: Assignment(partitions=tuple(sorted(assigned.get(m, ())))) for m in members}


class RangeAssignor:
    """Java's RangeAssignor: per topic, contiguous ranges to the sorted subscribed members.

    With N partitions and C members, the first N % C members get N // C + 1, the rest N // C.
    """

    name: ClassVar[str] = "range"
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (RebalanceProtocol.EAGER,)

    def subscription_user_data(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        return None

    def assign(
        self, partitions_per_topic: PartitionsPerTopic, subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        order = _member_order(subscriptions)
        assigned: dict[str, list[TopicPartition]] = {m: [] for m in order}
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        for topic in topics:
            count = partitions_per_topic.get(topic)
            if count is None:
                continue  # no metadata: Java skips the topic
            members = [m for m in order if topic in subscriptions[m].topics]
            per_member, extra = divmod(count, len(members))
            start = 0
            for i, member in enumerate(members):
                length = per_member + (1 if i < extra else 0)
                assigned[member].extend(
                    TopicPartition(topic, p) for p in range(start, start + length)
                )
                start += length
        return _to_assignments(order, assigned)


class RoundRobinAssignor:
    """Java's RoundRobinAssignor: all partitions sorted, dealt to the sorted members in turn,
    skipping members not subscribed to a partition's topic."""

    name: ClassVar[str] = "roundrobin"
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (RebalanceProtocol.EAGER,)

    def subscription_user_data(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        return None

    def assign(
        self, partitions_per_topic: PartitionsPerTopic, subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        order = _member_order(subscriptions)
        assigned: dict[str, list[TopicPartition]] = {m: [] for m in order}
        if not order:
            return {}
        all_topics = {t for s in subscriptions.values() for t in s.topics}
        cursor = 0
        for tp in _subscribed_partitions(all_topics, partitions_per_topic):
            while tp.topic not in subscriptions[order[cursor]].topics:
                cursor = (cursor + 1) % len(order)
            assigned[order[cursor]].append(tp)
            cursor = (cursor + 1) % len(order)
        return _to_assignments(order, assigned)


# ---------------------------------------------------------------- sticky assignors


@dataclass(frozen=True, slots=True)
class _MemberData:
    owned: tuple[TopicPartition, ...]
    generation: int  # DEFAULT_GENERATION when unknown


_Claims = tuple[
    dict[str, list[TopicPartition]], set[TopicPartition], dict[TopicPartition, set[str]]
]


@dataclass
class _StickyResult:
    assignment: dict[str, list[TopicPartition]]
    # Partitions given to a member other than one that claims to own them (cooperative: these
    # are withheld for one round so the old owner revokes them first).
    transferring: dict[TopicPartition, str]


class _AbstractSticky:
    """Balanced and sticky assignment shared by ``sticky`` and ``cooperative-sticky``.

    1. Resolve ownership claims (members in id order): a partition claimed by several members
       goes to the claim with the highest generation; a claim with the same generation as the
       previous claim invalidates the partition for everybody (Java logs this as an error and
       treats the partition as moving).
    2. Identical subscriptions: keep owned partitions up to the quota (floor or ceil of
       partitions/members, with exactly ``partitions % members`` members at the ceiling),
       then deal unassigned partitions to members under the floor, then to members at the
       floor. Otherwise: keep valid owned partitions, place each unassigned partition (most
       constrained first) on its least loaded eligible member, then rebalance by moving
       partitions along chains of eligible members until no member could take a partition,
       directly or through others, from a member with at least two more.
    """

    name: ClassVar[str]
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]]

    def _member_data(self, subscription: Subscription) -> _MemberData:
        raise NotImplementedError

    def _sticky_assign(
        self, partitions_per_topic: PartitionsPerTopic, subscriptions: Mapping[str, Subscription]
    ) -> _StickyResult:
        order = sorted(subscriptions)  # sticky assignors order by member id only
        if not order:
            return _StickyResult({}, {})
        topics_of = {
            m: {t for t in subscriptions[m].topics if t in partitions_per_topic} for m in order
        }
        owned, contested, claimants = self._claims(
            partitions_per_topic, subscriptions, order, topics_of
        )
        first_topics = topics_of[order[0]] if order else set()
        if all(topics_of[m] == first_topics for m in order):
            assignment = self._constrained(partitions_per_topic, order, owned, first_topics)
        else:
            assignment = self._general(partitions_per_topic, order, owned, topics_of)
        # A partition moves when it goes to a member other than one that claims it (or when
        # its claims were an equal-generation tie): the cooperative protocol withholds it.
        transferring: dict[TopicPartition, str] = {}
        for member, partitions in assignment.items():
            kept = set(owned[member])
            for tp in partitions:
                if tp in contested or (claimants.get(tp, set()) - {member} and tp not in kept):
                    transferring[tp] = member
        return _StickyResult(assignment, transferring)

    def _claims(
        self,
        partitions_per_topic: PartitionsPerTopic,
        subscriptions: Mapping[str, Subscription],
        order: Sequence[str],
        topics_of: Mapping[str, set[str]],
    ) -> _Claims:
        owned: dict[str, list[TopicPartition]] = {m: [] for m in order}
        # The last member to claim each partition and its generation (as Java's
        # allPreviousPartitionsToOwner: on a tie the later claimant is recorded).
        last_claim: dict[TopicPartition, tuple[str, int]] = {}
        contested: set[TopicPartition] = set()
        claimants: dict[TopicPartition, set[str]] = defaultdict(set)
        for member in order:
            data = self._member_data(subscriptions[member])
            generation = data.generation
            seen: set[TopicPartition] = set()
            for tp in data.owned:
                # Every claim counts for "who must revoke first", valid or not.
                claimants[tp].add(member)
                if tp in seen or tp.topic not in topics_of[member]:
                    continue
                if not 0 <= tp.partition < partitions_per_topic[tp.topic]:
                    continue
                seen.add(tp)
                previous = last_claim.get(tp)
                if previous is not None:
                    # Java compares with the previous claimant's generation *field* (v2+),
                    # not its user-data generation; the two differ only for old members.
                    previous = (previous[0], subscriptions[previous[0]].generation_id)
                if previous is None:
                    owned[member].append(tp)
                    last_claim[tp] = (member, generation)
                elif generation == previous[1]:
                    # Two members of one generation claim it: nobody keeps it (Java logs an
                    # error); it stays invalid even if a later, newer member claims it.
                    contested.add(tp)
                    if tp in owned[previous[0]]:
                        owned[previous[0]].remove(tp)
                    last_claim[tp] = (member, generation)
                elif generation > previous[1]:
                    if tp in owned[previous[0]]:
                        owned[previous[0]].remove(tp)
                    owned[member].append(tp)
                    last_claim[tp] = (member, generation)
        for member in order:
            owned[member] = [tp for tp in owned[member] if tp not in contested]
        return owned, contested, dict(claimants)

    def _constrained(
        self,
        partitions_per_topic: PartitionsPerTopic,
        order: Sequence[str],
        owned: Mapping[str, list[TopicPartition]],
        topics: set[str],
    ) -> dict[str, list[TopicPartition]]:
        all_partitions = _subscribed_partitions(topics, partitions_per_topic)
        total, members = len(all_partitions), len(order)
        min_quota, extra = divmod(total, members)
        max_quota = min_quota + (1 if extra else 0)
        over_quota_members = 0
        assignment: dict[str, list[TopicPartition]] = {m: [] for m in order}
        under_min: list[str] = []
        at_min: deque[str] = deque()
        # Keep owned partitions up to the quota; members owning at least max_quota keep
        # max_quota while ceiling slots remain.
        for member in order:
            # Java keeps the owned partitions with the lowest partition ids first.
            mine = sorted(owned[member], key=lambda tp: (tp.partition, tp.topic))
            if len(mine) < min_quota:
                assignment[member].extend(mine)
                under_min.append(member)
            elif len(mine) >= max_quota and over_quota_members < extra:
                over_quota_members += 1
                assignment[member].extend(mine[:max_quota])
            else:
                assignment[member].extend(mine[:min_quota])
                at_min.append(member)
        taken = {tp for partitions in assignment.values() for tp in partitions}
        unassigned = deque(tp for tp in all_partitions if tp not in taken)
        # Fill members under the floor, one partition each in turn.
        while under_min and unassigned:
            still_under: list[str] = []
            for member in under_min:
                if not unassigned:
                    still_under.append(member)
                    continue
                assignment[member].append(unassigned.popleft())
                if len(assignment[member]) < min_quota:
                    still_under.append(member)
                else:
                    at_min.append(member)
            under_min = still_under
        if under_min:  # cannot happen: quotas add up to the partition count
            raise AssertionError("sticky assignor: members under quota with no partitions left")
        # Then one more each to members at the floor, while ceiling slots remain.
        while unassigned:
            if over_quota_members >= extra or not at_min:
                raise AssertionError("sticky assignor: partitions left with all members full")
            member = at_min.popleft()
            assignment[member].append(unassigned.popleft())
            over_quota_members += 1
        return assignment

    def _general(
        self,
        partitions_per_topic: PartitionsPerTopic,
        order: Sequence[str],
        owned: Mapping[str, list[TopicPartition]],
        topics_of: Mapping[str, set[str]],
    ) -> dict[str, list[TopicPartition]]:
        rank = {m: i for i, m in enumerate(order)}
        assignment: dict[str, list[TopicPartition]] = {m: list(owned[m]) for m in order}
        holder: dict[TopicPartition, str] = {tp: m for m in order for tp in owned[m]}
        eligible: dict[TopicPartition, list[str]] = defaultdict(list)
        for member in order:
            for tp in _subscribed_partitions(topics_of[member], partitions_per_topic):
                eligible[tp].append(member)
        unassigned = sorted(
            (tp for tp in eligible if tp not in holder), key=lambda tp: (len(eligible[tp]), tp)
        )
        for tp in unassigned:
            member = min(eligible[tp], key=lambda m: (len(assignment[m]), rank[m]))
            assignment[member].append(tp)
            holder[tp] = member
        originally = {tp: m for m in order for tp in owned[m]}
        # Rebalance: from the least loaded member, search (BFS) the members it can take a
        # partition from, directly or along a chain; shift one partition along the shortest
        # chain ending at a member with at least two more partitions. Each shift lowers the
        # sum of squared loads, so this ends. A member reached by a fruitless search from a
        # member with no more partitions cannot start a fruitful one (it reaches a subset),
        # so it is skipped.
        while True:
            moved = False
            cleared: set[str] = set()
            for start in sorted(order, key=lambda m: (len(assignment[m]), rank[m])):
                if start in cleared:
                    continue
                path, reached = self._find_chain(start, assignment, topics_of, originally)
                if path is None:
                    cleared |= reached
                    continue
                for receiver, tp, giver in path:
                    assignment[giver].remove(tp)
                    assignment[receiver].append(tp)
                moved = True
                break
            if not moved:
                break
        return assignment

    @staticmethod
    def _find_chain(
        start: str,
        assignment: Mapping[str, list[TopicPartition]],
        topics_of: Mapping[str, set[str]],
        originally: Mapping[TopicPartition, str],
    ) -> tuple[list[tuple[str, TopicPartition, str]] | None, set[str]]:
        target = len(assignment[start]) + 2
        parent: dict[str, tuple[str, TopicPartition] | None] = {start: None}
        queue = deque([start])
        while queue:
            receiver = queue.popleft()
            wanted = topics_of[receiver]
            for giver in assignment:  # in member order
                if giver in parent:
                    continue
                # The partition to take: one the giver did not own before if possible
                # (cheaper for stickiness), else its first eligible one.
                best: TopicPartition | None = None
                for tp in assignment[giver]:
                    if tp.topic in wanted:
                        if originally.get(tp) != giver:
                            best = tp
                            break
                        if best is None:
                            best = tp
                if best is None:
                    continue
                parent[giver] = (receiver, best)
                if len(assignment[giver]) >= target:
                    path: list[tuple[str, TopicPartition, str]] = []
                    node = giver
                    while (step := parent[node]) is not None:
                        path.append((step[0], step[1], node))
                        node = step[0]
                    return path, set(parent)
                queue.append(giver)
        return None, set(parent)


class StickyAssignor(_AbstractSticky):
    """Java's (eager) StickyAssignor; its user data carries the previous assignment."""

    name: ClassVar[str] = "sticky"
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (RebalanceProtocol.EAGER,)

    def subscription_user_data(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        return encode_sticky_user_data(owned, generation)

    def _member_data(self, subscription: Subscription) -> _MemberData:
        if not subscription.user_data:
            return _MemberData(owned=(), generation=DEFAULT_GENERATION)
        try:
            previous, generation = decode_sticky_user_data(subscription.user_data)
        except ProtocolError:
            return _MemberData(owned=(), generation=DEFAULT_GENERATION)
        return _MemberData(owned=previous, generation=generation)

    def assign(
        self, partitions_per_topic: PartitionsPerTopic, subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        result = self._sticky_assign(partitions_per_topic, subscriptions)
        return _to_assignments(_member_order(subscriptions), result.assignment)


class CooperativeStickyAssignor(_AbstractSticky):
    """Java's CooperativeStickyAssignor: sticky and balanced, in two rounds when partitions
    move. A partition given to a member other than the one that owns it is left out of this
    round's assignment; the owner revokes it, rejoins, and the next rebalance assigns it."""

    name: ClassVar[str] = "cooperative-sticky"
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (
        RebalanceProtocol.COOPERATIVE,
        RebalanceProtocol.EAGER,
    )

    def subscription_user_data(
        self, topics: Sequence[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        return struct.pack(">i", generation)

    def _member_data(self, subscription: Subscription) -> _MemberData:
        generation = subscription.generation_id
        if generation == DEFAULT_GENERATION and subscription.user_data is not None:
            # v0/v1 subscription: the generation travels in the user data.
            data = subscription.user_data
            generation = struct.unpack_from(">i", data)[0] if len(data) >= 4 else DEFAULT_GENERATION
        return _MemberData(owned=subscription.owned_partitions, generation=generation)

    def assign(
        self, partitions_per_topic: PartitionsPerTopic, subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        result = self._sticky_assign(partitions_per_topic, subscriptions)
        for tp, member in result.transferring.items():
            result.assignment[member].remove(tp)
        return _to_assignments(_member_order(subscriptions), result.assignment)

    def partitions_transferring(
        self, partitions_per_topic: PartitionsPerTopic, subscriptions: Mapping[str, Subscription]
    ) -> dict[TopicPartition, str]:
        """The partitions this round withholds, each with the member it will go to."""
        return self._sticky_assign(partitions_per_topic, subscriptions).transferring


# ---------------------------------------------------------------- sticky user data (v1)


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int) -> bytes:
    """Java's StickyAssignor user data v1: [topic string, [int32 partition]] then int32 gen."""
    grouped = _group_by_topic(partitions)
    out = bytearray(struct.pack(">i", len(grouped)))
    for topic, ids in grouped.items():
        name = topic.encode()
        out += struct.pack(">h", len(name)) + name + struct.pack(">i", len(ids))
        out += b"".join(struct.pack(">i", p) for p in ids)
    out += struct.pack(">i", generation)
    return bytes(out)


def decode_sticky_user_data(data: bytes) -> tuple[tuple[TopicPartition, ...], int]:
    """Read StickyAssignor user data v0 (no generation) or v1."""

    def take(fmt: str, pos: int) -> tuple[int, int]:
        size = struct.calcsize(fmt)
        if len(data) < pos + size:
            raise ProtocolError("Malformed sticky assignor user data: truncated")
        return int(struct.unpack_from(fmt, data, pos)[0]), pos + size

    count, pos = take(">i", 0)
    if count < 0:
        raise ProtocolError("Malformed sticky assignor user data: negative topic count")
    partitions: list[TopicPartition] = []
    for _ in range(count):
        length, pos = take(">h", pos)
        if length < 0 or len(data) < pos + length:
            raise ProtocolError("Malformed sticky assignor user data: bad topic name")
        try:
            topic = data[pos : pos + length].decode()
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"Malformed sticky assignor user data: {exc}") from exc
        pos += length
        n, pos = take(">i", pos)
        if n < 0:
            raise ProtocolError("Malformed sticky assignor user data: negative partition count")
        for _ in range(n):
            partition, pos = take(">i", pos)
            partitions.append(TopicPartition(topic, partition))
    generation = DEFAULT_GENERATION
    if len(data) >= pos + 4:
        generation, pos = take(">i", pos)
    return tuple(partitions), generation


ASSIGNORS: Mapping[str, type[PartitionAssignor]] = {
    cls.name: cls
    for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)
}


def get_assignor(name: str) -> PartitionAssignor:
    """A new assignor for a protocol name (``range``, ``roundrobin``, ``sticky``,
    ``cooperative-sticky``)."""
    cls = ASSIGNORS.get(name)
    if cls is None:
        raise ValueError(f"unknown assignor {name!r}; known: {', '.join(ASSIGNORS)}")
    return cls()
