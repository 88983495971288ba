"""The CLI's read-only cluster queries: topics with partitions and leaders, and a group's
members, assignments, committed offsets, log end offsets and lag.

Owns: :class:`ClusterClient`, a NetworkActor of its own (so every connection setting of the
consumer applies: SASL, TLS, timeouts) and the sequential requests it sends through it:
ApiVersions, Metadata, FindCoordinator, ConsumerGroupDescribe / DescribeGroups, OffsetFetch,
ListOffsets. May touch: the NetworkActor (``request``), the protocol package, errors. It never
writes to the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pykka

from kafka_actors.actors.network import ANY_NODE, NetworkActor, UpdateNodes, request
from kafka_actors.actors.network.bootstrap import check_bootstrap_resolvable
from kafka_actors.actors.network.transport import system_resolver
from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import (
    GroupIdNotFoundError,
    KafkaError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    raise_for_code,
)
from kafka_actors.protocol.group.classic.assignors import decode_assignment
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.wire import requests as rq
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.protocol.wire.versions import NegotiatedVersions, api_versions_request
from kafka_actors.retrying import PacedRetry

_T = TypeVar("_T")

__all__ = [
    "ClusterClient",
    "GroupDescription",
    "MemberDescription",
    "PartitionLag",
    "ShareOffset",
    "TopicDescription",
    "group_lag",
    "start_offsets",
]


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic: name, id and ``(partition, leader, replicas, isr)`` per partition."""

    name: str
    topic_id: str | None
    internal: bool
    partitions: tuple[tuple[int, int, tuple[int, ...], tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[TopicPartition, ...]
    #: KIP-848 groups only: the member's epoch and the assignment it is moving to.
    member_epoch: int | None = None
    target_assignment: tuple[TopicPartition, ...] | None = None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """``protocol``: ``consumer`` (KIP-848), ``classic`` or ``share`` (KIP-932); ``epoch``:
    the group epoch or the classic generation (None when the response does not carry it)."""

    group_id: str
    state: str
    protocol: str
    assignor: str
    epoch: int | None
    members: tuple[MemberDescription, ...]
    #: KIP-848 groups only: the epoch of the group's target assignment.
    assignment_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One row of ``group --describe``: committed offset and lag are None without a commit;
    the member is None for a partition no member owns. For a share group ``committed`` is the
    share-partition start offset (the first record not yet acknowledged) and
    ``reported_lag`` the broker's own count (DescribeShareGroupOffsets v1, KIP-1226), which
    leaves out records already acknowledged above the start offset."""

    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    member: MemberDescription | None
    reported_lag: int | None = None

    @property
    def lag(self) -> int | None:
        if self.reported_lag is not None:
            return self.reported_lag
        if self.committed is None or self.log_end is None:
            return None
        return max(0, self.log_end - self.committed)


@dataclass(frozen=True, slots=True)
class ShareOffset:
    """A share-partition's state from DescribeShareGroupOffsets: its start offset and the
    broker's lag (None before v1 or when the broker has not computed it)."""

    start_offset: int
    leader_epoch: int
    lag: int | None


def start_offsets(share: Mapping[TopicPartition, ShareOffset]) -> dict[TopicPartition, int]:
    """A share group's position on each partition: its share-partition start offsets (what
    a consumer group's committed offsets are in the tools' tables)."""
    return {tp: s.start_offset for tp, s in share.items()}


class ClusterClient:
    """Blocking, sequential admin queries through a private NetworkActor (see module doc)."""

    def __init__(self, config: ConsumerConfig, timeout: float = 30.0) -> None:
        self._timeout = timeout
        self._retry = PacedRetry(config)
        if config.bootstrap_resolve_timeout_ms == 0:  # KIP-909's default, as Java's Admin
            check_bootstrap_resolvable(config.bootstrap_servers, system_resolver)
        self._ref: pykka.ActorRef[Any] = NetworkActor.start(config)
        self._versions: NegotiatedVersions | None = None

    def __enter__(self) -> ClusterClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._ref.stop(block=True, timeout=15)
        except pykka.ActorDeadError:
            pass

    # -- plumbing ----------------------------------------------------------------------------

    def send(self, payload: Any, node: int = ANY_NODE) -> Any:
        """One request to ``node`` (any broker by default); its response, or the transport's
        typed error. No retry here: wrap a whole step in :meth:`retrying`."""
        return request(self._ref, payload, node=node, timeout=self._timeout).response

    def versions(self) -> NegotiatedVersions:
        if self._versions is None:
            last: KafkaError | None = None
            for version in (3, 2, 1, 0):
                try:
                    response = self.send(api_versions_request(version))
                except UnsupportedVersionError as exc:
                    last = exc
                    continue
                if int(response.error_code) == 0:
                    self._versions = NegotiatedVersions.from_api_keys(
                        response.api_keys, api_versions_version=version
                    )
                    break
            if self._versions is None:
                raise last or UnsupportedVersionError("no ApiVersions version was accepted")
        return self._versions

    def version(self, api: ApiKey) -> int:
        """The version of ``api`` both sides speak (from the first ApiVersions)."""
        return self.versions().version_for(api)

    # -- queries -----------------------------------------------------------------------------

    def metadata(self, topics: Sequence[str] | None = None) -> Any:
        return self.send(rq.metadata_request(self.version(ApiKey.METADATA), topics=topics))

    def topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        """Topics (all when ``names`` is None), sorted by name; an unknown name raises."""
        response = self.metadata(names)
        result: list[TopicDescription] = []
        for t in response.topics:
            raise_for_code(int(t.error_code), topic=t.name)
            partitions = tuple(
                sorted(
                    (
                        int(p.partition_index),
                        int(p.leader_id),
                        tuple(int(r) for r in p.replica_nodes),
                        tuple(int(r) for r in p.isr_nodes),
                    )
                    for p in t.partitions
                )
            )
            topic_id = getattr(t, "topic_id", None)
            result.append(
                TopicDescription(
                    str(t.name),
                    None if topic_id is None else str(topic_id),
                    bool(getattr(t, "is_internal", False)),
                    partitions,
                )
            )
        return sorted(result, key=lambda d: d.name)

    def retrying(self, what: Callable[[], _T]) -> _T:
        """Run ``what`` again after a retriable error (the coordinator is still loading or
        moved, a connection broke), after ``retry.backoff.ms`` doubling to
        ``retry.backoff.max.ms`` with jitter (reset by a success), until this client's
        timeout. ``what`` finds the coordinator itself (no retry loop inside another)."""
        return self._retry.call(what, timeout_s=self._timeout)

    def coordinator(self, group: str) -> int:
        return self.retrying(lambda: self.find_coordinator(group))

    def find_coordinator(self, group: str) -> int:
        """The coordinator of ``group`` (one FindCoordinator, no retry; see
        :meth:`coordinator`), its address told to the NetworkActor."""
        version = self.version(ApiKey.FIND_COORDINATOR)
        response = self.send(rq.find_coordinator_request(version, key=group))
        entry = response.coordinators[0] if version >= 4 else response
        raise_for_code(int(entry.error_code), entry.error_message or None)
        node = int(entry.node_id)
        # The NetworkActor learns addresses from Metadata; tell it the coordinator's.
        self._ref.tell(UpdateNodes(((node, str(entry.host), int(entry.port)),)))
        return node

    def describe_group(self, group: str) -> GroupDescription:
        """The group's state and members: ConsumerGroupDescribe first (KIP-848 groups), then
        ShareGroupDescribe (share groups), then DescribeGroups for a classic group (or a
        broker without the newer APIs). A group the broker does not know is ``Dead`` with no
        members."""
        return self.retrying(lambda: self._describe_group(group))

    def _describe_group(self, group: str) -> GroupDescription:
        node = self.find_coordinator(group)
        versions = self.versions()
        if versions.supports(ApiKey.CONSUMER_GROUP_DESCRIBE):
            payload = rq.consumer_group_describe_request(
                versions.version_for(ApiKey.CONSUMER_GROUP_DESCRIBE), group_ids=[group]
            )
            [described] = self.send(payload, node).groups
            code = int(described.error_code)
            if code == 0:
                return _from_consumer_group(described)
            if code != GroupIdNotFoundError.code:
                raise_for_code(code, described.error_message or None)
        if versions.supports(ApiKey.SHARE_GROUP_DESCRIBE):
            payload = rq.share_group_describe_request(
                versions.version_for(ApiKey.SHARE_GROUP_DESCRIBE), group_ids=[group]
            )
            [described] = self.send(payload, node).groups
            code = int(described.error_code)
            if code == 0:
                return _from_consumer_group(described, protocol="share")
            if code != GroupIdNotFoundError.code:
                raise_for_code(code, described.error_message or None)
        payload = rq.describe_groups_request(
            versions.version_for(ApiKey.DESCRIBE_GROUPS), groups=[group]
        )
        [described] = self.send(payload, node).groups
        if int(described.error_code) == GroupIdNotFoundError.code:
            return GroupDescription(group, "Dead", "classic", "", None, ())
        raise_for_code(int(described.error_code), getattr(described, "error_message", None) or None)
        return _from_classic_group(described)

    def committed(self, group: str) -> dict[TopicPartition, int]:
        """Every committed offset of ``group`` (OffsetFetch for all partitions)."""
        return self.retrying(lambda: self._committed(group))

    def _committed(self, group: str) -> dict[TopicPartition, int]:
        topics = self._offset_fetch(group, None)
        if topics is None:
            # A broker that does not answer "every partition" (the librdkafka mock): ask for
            # every partition of every topic, as clients did before OffsetFetch v2.
            every = [
                TopicPartition(t.name, index)
                for t in self.topics(None)
                for index, _leader, _replicas, _isr in t.partitions
            ]
            topics = self._offset_fetch(group, every) if every else []
        result: dict[TopicPartition, int] = {}
        for t in topics or ():
            for p in t.partitions:
                code = int(p.error_code)
                if code == UnknownTopicOrPartitionError.code:
                    continue  # a topic deleted since the metadata was read
                raise_for_code(code, topic=t.name, partition=int(p.partition_index))
                if int(p.committed_offset) >= 0:
                    result[TopicPartition(str(t.name), int(p.partition_index))] = int(
                        p.committed_offset
                    )
        return result

    def share_offsets(self, group: str) -> dict[TopicPartition, ShareOffset]:
        """Every share-partition of the share group ``group`` with state (its start offset
        and lag): DescribeShareGroupOffsets for all partitions. A partition whose state is not
        initialised yet (start offset -1) is left out."""
        return self.retrying(lambda: self._share_offsets(group))

    def _share_offsets(self, group: str) -> dict[TopicPartition, ShareOffset]:
        node = self.find_coordinator(group)
        version = self.version(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)
        response = self.send(rq.describe_share_group_offsets_request(version, group_id=group), node)
        result: dict[TopicPartition, ShareOffset] = {}
        for entry in response.groups:
            raise_for_code(int(entry.error_code), entry.error_message or None)
            for t in entry.topics:
                for p in t.partitions:
                    code = int(p.error_code)
                    if code == UnknownTopicOrPartitionError.code:
                        continue  # a topic deleted since the group's state was written
                    raise_for_code(code, topic=t.topic_name, partition=int(p.partition_index))
                    if int(p.start_offset) < 0:
                        continue
                    lag = int(getattr(p, "lag", -1))
                    result[TopicPartition(str(t.topic_name), int(p.partition_index))] = ShareOffset(
                        int(p.start_offset), int(p.leader_epoch), lag if lag >= 0 else None
                    )
        return result

    def positions(self, group: str, protocol: str) -> dict[TopicPartition, int]:
        """Where ``group`` stands on each partition: its committed offsets, or for a share
        group (``protocol == "share"``) its share-partition start offsets."""
        if protocol == "share":
            return start_offsets(self.share_offsets(group))
        return self.committed(group)

    def offsets_with_lag(
        self,
        description: GroupDescription,
        committed: Mapping[TopicPartition, int] | None = None,
        share_offsets: Mapping[TopicPartition, ShareOffset] | None = None,
    ) -> list[PartitionLag]:
        """The rows of ``group --describe`` for a described group: committed offsets (start
        offsets for a share group), log end offsets and lag of every owned or committed
        partition. ``committed``: the consumer or classic group's committed offsets when the
        caller has them; ``share_offsets``: a share group's :meth:`share_offsets` when the
        caller has them (asked otherwise, with the broker's lag)."""
        group = description.group_id
        reported: dict[TopicPartition, int] = {}
        if description.protocol == "share":
            share = self.share_offsets(group) if share_offsets is None else share_offsets
            committed = start_offsets(share)
            reported = {tp: s.lag for tp, s in share.items() if s.lag is not None}
        elif committed is None:
            committed = self.committed(group)
        owned = {tp for m in description.members for tp in m.assignment}
        ends = self.log_end_offsets(set(committed) | owned)
        return group_lag(description, committed, ends, reported)

    def _offset_fetch(self, group: str, partitions: Sequence[TopicPartition] | None) -> Any:
        """The topics of an OffsetFetch response (None when the broker sent none)."""
        node = self.find_coordinator(group)
        version = min(self.version(ApiKey.OFFSET_FETCH), 9)  # v10 names topics by id only
        response = self.send(
            rq.offset_fetch_request(version, group_id=group, partitions=partitions), node
        )
        if version >= 8:
            [entry] = response.groups
            raise_for_code(int(entry.error_code))
            return entry.topics
        if version >= 2:
            raise_for_code(int(response.error_code))
        return response.topics

    def log_end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log end offset (high watermark, read_uncommitted) of each partition, asked of
        its leader."""
        return self.list_offsets(partitions, rq.LATEST_TIMESTAMP)

    def list_offsets(
        self, partitions: Iterable[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        """ListOffsets of each partition at its leader for ``timestamp`` (or
        EARLIEST_TIMESTAMP / LATEST_TIMESTAMP); -1 where no record is that recent."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        leaders: dict[TopicPartition, int] = {}
        for topic in self.topics(sorted({tp.topic for tp in wanted})):
            for index, leader, _replicas, _isr in topic.partitions:
                leaders[TopicPartition(topic.name, index)] = leader
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in wanted:
            leader = leaders.get(tp, -1)
            if leader >= 0:
                by_leader.setdefault(leader, []).append(tp)
        version = self.version(ApiKey.LIST_OFFSETS)
        result: dict[TopicPartition, int] = {}
        for leader, tps in sorted(by_leader.items()):
            payload = rq.list_offsets_request(version, timestamps=dict.fromkeys(tps, timestamp))
            for t in self.send(payload, leader).topics:
                for p in t.partitions:
                    raise_for_code(
                        int(p.error_code), topic=t.name, partition=int(p.partition_index)
                    )
                    result[TopicPartition(str(t.name), int(p.partition_index))] = int(p.offset)
        return result


def _partitions(assignment: Any) -> tuple[TopicPartition, ...]:
    return tuple(
        sorted(
            TopicPartition(str(tp.topic_name), int(p))
            for tp in assignment.topic_partitions
            for p in tp.partitions
        )
    )


def _from_consumer_group(described: Any, protocol: str = "consumer") -> GroupDescription:
    """A ConsumerGroupDescribe or ShareGroupDescribe group (a share member has no instance
    id and no target assignment)."""
    members = tuple(
        MemberDescription(
            member_id=str(m.member_id),
            instance_id=None if getattr(m, "instance_id", None) is None else str(m.instance_id),
            client_id=str(m.client_id),
            client_host=str(m.client_host),
            assignment=_partitions(m.assignment),
            member_epoch=int(m.member_epoch),
            target_assignment=(
                _partitions(m.target_assignment) if hasattr(m, "target_assignment") else None
            ),
        )
        for m in described.members
    )
    return GroupDescription(
        group_id=str(described.group_id),
        state=str(described.group_state),
        protocol=protocol,
        assignor=str(described.assignor_name),
        epoch=int(described.group_epoch),
        members=members,
        assignment_epoch=int(described.assignment_epoch),
    )


def _from_classic_group(described: Any) -> GroupDescription:
    members: list[MemberDescription] = []
    for m in described.members:
        assignment: tuple[TopicPartition, ...] = ()
        raw = bytes(m.member_assignment or b"")
        if described.protocol_type == "consumer" and raw:
            try:
                assignment = tuple(sorted(decode_assignment(raw).partitions))
            except (KafkaError, ValueError):
                assignment = ()  # not the consumer protocol's layout: shown as none
        members.append(
            MemberDescription(
                member_id=str(m.member_id),
                instance_id=getattr(m, "group_instance_id", None),
                client_id=str(m.client_id),
                client_host=str(m.client_host),
                assignment=assignment,
            )
        )
    return GroupDescription(
        group_id=str(described.group_id),
        state=str(described.group_state),
        protocol="classic",
        assignor=str(described.protocol_data),
        epoch=None,
        members=tuple(members),
    )


def group_lag(
    description: GroupDescription,
    committed: Mapping[TopicPartition, int],
    log_end: Mapping[TopicPartition, int],
    reported_lag: Mapping[TopicPartition, int] | None = None,
) -> list[PartitionLag]:
    """The rows of ``group --describe``: every assigned or committed partition, sorted
    (``reported_lag``: a share group's lag as its broker counts it)."""
    owner: dict[TopicPartition, MemberDescription] = {}
    for member in description.members:
        for tp in member.assignment:
            owner[tp] = member
    rows = [
        PartitionLag(
            tp.topic,
            tp.partition,
            committed.get(tp),
            log_end.get(tp),
            owner.get(tp),
            (reported_lag or {}).get(tp),
        )
        for tp in sorted(set(owner) | set(committed))
    ]
    return rows
