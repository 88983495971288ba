"""Typed builders for the consumer's requests at a negotiated version (pure).

Owns: turning the consumer's own terms (topic-partitions, offsets, member ids, milliseconds) into
kio request objects for one API version, hiding kio's per-version classes: fields a version does
not have are left out, nested entities are built from plain mappings, millisecond durations
become the ``timedelta`` kio expects, and topics are named by id where the version wants ids
(Fetch v13+, OffsetCommit v10+, OffsetFetch v10+). When a caller asks for a feature the version
cannot carry (static membership before JoinGroup v5, read_committed before ListOffsets v2 ...),
the builder raises UnsupportedVersionError instead of dropping it silently. When a topic id is
needed but not known, it raises InvalidMetadataError (refresh metadata, then retry).

ConsumerGroupHeartbeat has no builder here: the membership manager builds it itself, since it
sends only the fields that changed since the last heartbeat.

May touch: apis (codec lookup), messages (value types), errors. No I/O.
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Final, TypeVar

from kio.static.primitive import i32Timedelta, i64Timedelta

from kafka_actors.errors import InvalidMetadataError, UnsupportedVersionError
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.wire.apis import ApiKey, api_name, request_type

__all__ = [
    "CONSUMER_REPLICA_ID",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "FetchPartition",
    "ForgottenTopic",
    "alter_share_group_offsets_request",
    "consumer_group_describe_request",
    "delete_share_group_offsets_request",
    "describe_groups_request",
    "describe_share_group_offsets_request",
    "fetch_request",
    "find_coordinator_request",
    "heartbeat_request",
    "join_group_request",
    "leave_group_request",
    "list_offsets_request",
    "make_request",
    "metadata_request",
    "offset_commit_request",
    "offset_fetch_request",
    "offset_for_leader_epoch_request",
    "sasl_authenticate_request",
    "sasl_handshake_request",
    "share_acknowledge_request",
    "share_fetch_request",
    "share_group_heartbeat_request",
    "sync_group_request",
]

#: replica_id of a consumer (not a follower broker).
CONSUMER_REPLICA_ID: Final = -1
READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1
#: ListOffsets special timestamps.
LATEST_TIMESTAMP: Final = -1
EARLIEST_TIMESTAMP: Final = -2
MAX_TIMESTAMP: Final = -3
#: FindCoordinator key types.
GROUP_KEY_TYPE: Final = 0
TRANSACTION_KEY_TYPE: Final = 1

TopicIds = Mapping[str, uuid.UUID | str]
_E = TypeVar("_E")


# -- Generic construction ----------------------------------------------------------------------


@cache
def _field_info(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """(name, nested entity class or a timedelta marker or None, is_sequence) per field."""
    hints = typing.get_type_hints(cls)
    info: list[tuple[str, Any, bool]] = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        kind: Any = None
        sequence = False
        stack = [hint]
        while stack:
            candidate = stack.pop()
            if dataclasses.is_dataclass(candidate):
                kind = candidate
            elif candidate in (i32Timedelta, i64Timedelta):
                kind = datetime.timedelta
            else:
                if typing.get_origin(candidate) is tuple:
                    sequence = True
                stack.extend(typing.get_args(candidate))
        info.append((f.name, kind, sequence))
    return tuple(info)


def _make(cls: type, values: Mapping[str, Any]) -> Any:
    kwargs: dict[str, Any] = {}
    for name, kind, sequence in _field_info(cls):
        if name not in values:
            continue
        value = values[name]
        if value is not None:
            if kind is datetime.timedelta:
                if not isinstance(value, datetime.timedelta):
                    value = datetime.timedelta(milliseconds=value)
            elif kind is not None:
                value = tuple(_make(kind, v) for v in value) if sequence else _make(kind, value)
            elif sequence:
                value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


def make_request(api: int, version: int, **values: Any) -> Any:
    """Build the kio request for ``api`` at ``version`` from plain values.

    Nested entities are given as mappings (or sequences of mappings); keys the version does not
    have are ignored; millisecond ints are accepted for duration fields. Required fields missing
    at this version raise TypeError (a bug in the caller).
    """
    return _make(request_type(api, version), values)


def _require(api: int, version: int, since: int, feature: str, wanted: bool = True) -> None:
    """Refuse ``feature`` (when ``wanted``) at a version before ``since``."""
    if wanted and version < since:
        raise UnsupportedVersionError(
            f"{api_name(api)} v{version} cannot carry {feature} (needs v{since}+)"
        )


def _topic_id(topic: str, topic_ids: TopicIds | None) -> uuid.UUID:
    found = None if topic_ids is None else topic_ids.get(topic)
    if found is None:
        raise InvalidMetadataError("No topic id known for the topic", topic=topic)
    return found if isinstance(found, uuid.UUID) else uuid.UUID(found)


def _topic_ref(topic: str, topic_ids: TopicIds | None, by_id: bool, key: str) -> dict[str, Any]:
    """The topic's field of an entry: its id when the version names topics by id, else its
    name under ``key``."""
    return {"topic_id": _topic_id(topic, topic_ids)} if by_id else {key: topic}


def _group_by_topic(entries: Iterable[tuple[str, _E]]) -> dict[str, list[_E]]:
    """(topic, entry) pairs as entries per topic, topics in first-seen order."""
    grouped: dict[str, list[_E]] = {}
    for topic, entry in entries:
        grouped.setdefault(topic, []).append(entry)
    return grouped


# -- Metadata / FindCoordinator ----------------------------------------------------------------


def metadata_request(
    version: int,
    *,
    topics: Sequence[str] | None,
    allow_auto_topic_creation: bool = False,
) -> Any:
    """Metadata for ``topics`` (names), or for all topics when ``topics`` is None.

    v0 has no "all topics" null: an empty list there means all topics, so asking v0 for no
    topics is refused. Before v4 the broker's auto.create.topics.enable decides topic creation
    (the flag is not sent).
    """
    api = ApiKey.METADATA
    _require(api, version, 1, "an empty topic list", topics is not None and not topics)
    entries: Any
    if topics is None:
        entries = () if version == 0 else None
    else:
        entries = [{"name": name, "topic_id": None} for name in topics]
    return make_request(
        api,
        version,
        topics=entries,
        allow_auto_topic_creation=allow_auto_topic_creation,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def find_coordinator_request(version: int, *, key: str, key_type: int = GROUP_KEY_TYPE) -> Any:
    """FindCoordinator for one group (``key_type`` 0) or transactional id (1).

    v4+ batch keys (``coordinator_keys``); the response then lists ``coordinators``.
    """
    api = ApiKey.FIND_COORDINATOR
    _require(api, version, 1, "a non-group key type", key_type != GROUP_KEY_TYPE)
    return make_request(api, version, key=key, key_type=key_type, coordinator_keys=(key,))


# -- ListOffsets -------------------------------------------------------------------------------


def list_offsets_request(
    version: int,
    *,
    timestamps: Mapping[TopicPartition, int],
    isolation_level: int = READ_UNCOMMITTED,
    current_leader_epochs: Mapping[TopicPartition, int] | None = None,
    timeout_ms: int = 30_000,
) -> Any:
    """ListOffsets for each partition at its timestamp (or LATEST/EARLIEST/MAX_TIMESTAMP)."""
    api = ApiKey.LIST_OFFSETS
    _require(api, version, 2, "isolation_level=read_committed", isolation_level != READ_UNCOMMITTED)
    _require(api, version, 7, "the max-timestamp query", MAX_TIMESTAMP in timestamps.values())
    epochs = current_leader_epochs or {}
    grouped = _group_by_topic(
        (
            tp.topic,
            {
                "partition_index": tp.partition,
                "timestamp": timestamp,
                "current_leader_epoch": epochs.get(tp, -1),
            },
        )
        for tp, timestamp in timestamps.items()
    )
    return make_request(
        api,
        version,
        replica_id=CONSUMER_REPLICA_ID,
        isolation_level=isolation_level,
        topics=[{"name": t, "partitions": p} for t, p in grouped.items()],
        timeout=timeout_ms,
    )


# -- OffsetForLeaderEpoch ---------------------------------------------------------------------


def offset_for_leader_epoch_request(
    version: int,
    *,
    epochs: Mapping[TopicPartition, tuple[int, int]],
) -> Any:
    """OffsetForLeaderEpoch from a consumer (KIP-320): per partition (the leader epoch to look
    up the end offset of, the current leader epoch known to the client, -1 if unknown)."""
    api = ApiKey.OFFSET_FOR_LEADER_EPOCH
    _require(api, version, 3, "a consumer's replica id")
    grouped = _group_by_topic(
        (
            tp.topic,
            {
                "partition": tp.partition,
                "current_leader_epoch": current_leader_epoch,
                "leader_epoch": leader_epoch,
            },
        )
        for tp, (leader_epoch, current_leader_epoch) in epochs.items()
    )
    return make_request(
        api,
        version,
        replica_id=CONSUMER_REPLICA_ID,
        topics=[{"topic": t, "partitions": p} for t, p in grouped.items()],
    )


# -- Fetch -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchPartition:
    """One partition in a Fetch request: where to read and how much."""

    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class ForgottenTopic:
    """Partitions to drop from an incremental fetch session (KIP-227)."""

    topic: str
    partitions: tuple[int, ...]


def fetch_request(
    version: int,
    *,
    partitions: Sequence[FetchPartition],
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int = READ_UNCOMMITTED,
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: Sequence[ForgottenTopic] = (),
    rack_id: str = "",
    topic_ids: TopicIds | None = None,
) -> Any:
    """Fetch request as a consumer (replica id -1).

    Fetch sessions (``session_id``/``session_epoch``, ``forgotten``) need v7+; the defaults
    (0, -1) mean "no session" (a full fetch, no session created). From v13 topics are sent by
    id: ``topic_ids`` must map every topic named to its id.
    """
    api = ApiKey.FETCH
    in_session = bool(session_id != 0 or session_epoch != -1 or forgotten)
    _require(api, version, 7, "a fetch session", in_session)
    by_id = version >= 13
    topics = _group_by_topic(
        (
            p.topic,
            {
                "partition": p.partition,
                "fetch_offset": p.fetch_offset,
                "partition_max_bytes": p.partition_max_bytes,
                "current_leader_epoch": p.current_leader_epoch,
                "last_fetched_epoch": p.last_fetched_epoch,
                "log_start_offset": p.log_start_offset,
            },
        )
        for p in partitions
    )
    return make_request(
        api,
        version,
        replica_id=CONSUMER_REPLICA_ID,
        max_wait=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=[
            {**_topic_ref(t, topic_ids, by_id, "topic"), "partitions": p} for t, p in topics.items()
        ],
        forgotten_topics_data=[
            {**_topic_ref(f.topic, topic_ids, by_id, "topic"), "partitions": f.partitions}
            for f in forgotten
        ],
        rack_id=rack_id,
    )


# -- Offsets of a group ------------------------------------------------------------------------


def offset_commit_request(
    version: int,
    *,
    group_id: str,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    generation_id_or_member_epoch: int = -1,
    member_id: str = "",
    group_instance_id: str | None = None,
    topic_ids: TopicIds | None = None,
) -> Any:
    """OffsetCommit of ``offsets`` for a member (generation id for the classic protocol, member
    epoch for the consumer protocol; -1 and "" for a simple, group-less commit)."""
    api = ApiKey.OFFSET_COMMIT
    _require(api, version, 7, "group.instance.id", group_instance_id is not None)
    by_id = version >= 10
    topics = _group_by_topic(
        (
            tp.topic,
            {
                "partition_index": tp.partition,
                "committed_offset": committed.offset,
                "committed_leader_epoch": (
                    -1 if committed.leader_epoch is None else committed.leader_epoch
                ),
                "committed_metadata": committed.metadata,
            },
        )
        for tp, committed in offsets.items()
    )
    entries = [
        {**_topic_ref(t, topic_ids, by_id, "name"), "partitions": p} for t, p in topics.items()
    ]
    return make_request(
        api,
        version,
        group_id=group_id,
        generation_id_or_member_epoch=generation_id_or_member_epoch,
        member_id=member_id,
        group_instance_id=group_instance_id,
        retention_time=-1,
        topics=entries,
    )


def offset_fetch_request(
    version: int,
    *,
    group_id: str,
    partitions: Iterable[TopicPartition] | None,
    require_stable: bool = False,
    member_id: str | None = None,
    member_epoch: int = -1,
    topic_ids: TopicIds | None = None,
) -> Any:
    """OffsetFetch of a group's committed offsets for ``partitions`` (None: all, v2+).

    ``require_stable`` (v7+) asks the broker to wait out pending transactional commits
    (UNSTABLE_OFFSET_COMMIT otherwise). v9+ carry the member id and epoch (consumer protocol).
    """
    api = ApiKey.OFFSET_FETCH
    _require(api, version, 2, "a request for all partitions", partitions is None)
    _require(api, version, 7, "require_stable", require_stable)
    by_id = version >= 10
    topics: list[dict[str, Any]] | None
    if partitions is None:
        topics = None
    else:
        grouped = _group_by_topic((tp.topic, tp.partition) for tp in partitions)
        topics = [
            {**_topic_ref(t, topic_ids, by_id, "name"), "partition_indexes": p}
            for t, p in grouped.items()
        ]
    if version >= 8:
        return make_request(
            api,
            version,
            groups=[
                {
                    "group_id": group_id,
                    "member_id": member_id,
                    "member_epoch": member_epoch,
                    "topics": topics,
                }
            ],
            require_stable=require_stable,
        )
    return make_request(
        api, version, group_id=group_id, topics=topics, require_stable=require_stable
    )


# -- Classic group protocol --------------------------------------------------------------------


def join_group_request(
    version: int,
    *,
    group_id: str,
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    member_id: str,
    protocols: Sequence[tuple[str, bytes]],
    protocol_type: str = "consumer",
    group_instance_id: str | None = None,
    reason: str | None = None,
) -> Any:
    """JoinGroup with the member's (assignor name, subscription metadata) protocols.

    Before v1 there is no rebalance timeout (the session timeout serves both).
    """
    api = ApiKey.JOIN_GROUP
    _require(api, version, 5, "group.instance.id", group_instance_id is not None)
    return make_request(
        api,
        version,
        group_id=group_id,
        session_timeout=session_timeout_ms,
        rebalance_timeout=rebalance_timeout_ms,
        member_id=member_id,
        group_instance_id=group_instance_id,
        protocol_type=protocol_type,
        protocols=[{"name": name, "metadata": metadata} for name, metadata in protocols],
        reason=reason,
    )


def sync_group_request(
    version: int,
    *,
    group_id: str,
    generation_id: int,
    member_id: str,
    assignments: Mapping[str, bytes] | Sequence[tuple[str, bytes]] = (),
    group_instance_id: str | None = None,
    protocol_type: str | None = "consumer",
    protocol_name: str | None = None,
) -> Any:
    """SyncGroup; the leader sends every member's assignment, followers send none."""
    api = ApiKey.SYNC_GROUP
    _require(api, version, 3, "group.instance.id", group_instance_id is not None)
    items = assignments.items() if isinstance(assignments, Mapping) else assignments
    return make_request(
        api,
        version,
        group_id=group_id,
        generation_id=generation_id,
        member_id=member_id,
        group_instance_id=group_instance_id,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignments=[{"member_id": m, "assignment": a} for m, a in items],
    )


def describe_groups_request(
    version: int, *, groups: Sequence[str], include_authorized_operations: bool = False
) -> Any:
    """DescribeGroups of classic groups: state, protocol and members with their metadata and
    assignment bytes (the consumer protocol's Subscription / Assignment). Send it to each
    group's coordinator. ``include_authorized_operations`` needs v3+."""
    api = ApiKey.DESCRIBE_GROUPS
    _require(api, version, 3, "include_authorized_operations", include_authorized_operations)
    return make_request(
        api,
        version,
        groups=list(groups),
        include_authorized_operations=include_authorized_operations,
    )


def list_groups_request(
    version: int, *, states: Sequence[str] = (), types: Sequence[str] = ()
) -> Any:
    """ListGroups: every group one broker coordinates, with its protocol type (and state from
    v4, type from v5). Send it to every broker. Filters need v4 (states) and v5 (types)."""
    api = ApiKey.LIST_GROUPS
    _require(api, version, 4, "a states filter", bool(states))
    _require(api, version, 5, "a types filter", bool(types))
    return make_request(api, version, states_filter=list(states), types_filter=list(types))


def delete_groups_request(version: int, *, groups: Sequence[str]) -> Any:
    """DeleteGroups of empty (or dead) groups and their committed offsets. Send it to each
    group's coordinator; a group with members answers NON_EMPTY_GROUP."""
    return make_request(ApiKey.DELETE_GROUPS, version, groups_names=list(groups))


def offset_delete_request(
    version: int, *, group_id: str, partitions: Iterable[TopicPartition]
) -> Any:
    """OffsetDelete of some committed offsets of a group (to its coordinator); refused per
    partition (GROUP_SUBSCRIBED_TO_TOPIC) while a member is subscribed to the topic."""
    by_topic = _group_by_topic((tp.topic, tp.partition) for tp in partitions)
    return make_request(
        ApiKey.OFFSET_DELETE,
        version,
        group_id=group_id,
        topics=[
            {"name": topic, "partitions": [{"partition_index": p} for p in indexes]}
            for topic, indexes in by_topic.items()
        ],
    )


def describe_share_group_offsets_request(
    version: int, *, group_id: str, partitions: Iterable[TopicPartition] | None = None
) -> Any:
    """DescribeShareGroupOffsets (KIP-932) of one share group, to its coordinator: each
    share-partition's start offset (and, from v1, its lag); ``partitions`` None asks for
    every partition the group has state for."""
    topics = None
    if partitions is not None:
        by_topic = _group_by_topic((tp.topic, tp.partition) for tp in partitions)
        topics = [{"topic_name": t, "partitions": list(p)} for t, p in by_topic.items()]
    return make_request(
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
        version,
        groups=[{"group_id": group_id, "topics": topics}],
    )


def alter_share_group_offsets_request(
    version: int, *, group_id: str, start_offsets: Mapping[TopicPartition, int]
) -> Any:
    """AlterShareGroupOffsets (KIP-932): set share-partition start offsets of an empty share
    group (to its coordinator; GROUP_NOT_EMPTY while it has members)."""
    by_topic: dict[str, list[dict[str, int]]] = {}
    for tp, offset in sorted(start_offsets.items()):
        by_topic.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "start_offset": offset}
        )
    return make_request(
        ApiKey.ALTER_SHARE_GROUP_OFFSETS,
        version,
        group_id=group_id,
        topics=[{"topic_name": t, "partitions": p} for t, p in by_topic.items()],
    )


def delete_share_group_offsets_request(
    version: int, *, group_id: str, topics: Iterable[str]
) -> Any:
    """DeleteShareGroupOffsets (KIP-932): forget a share group's state of whole topics (to
    its coordinator; refused while the group has members)."""
    return make_request(
        ApiKey.DELETE_SHARE_GROUP_OFFSETS,
        version,
        group_id=group_id,
        topics=[{"topic_name": t} for t in sorted(set(topics))],
    )


def consumer_group_describe_request(
    version: int, *, group_ids: Sequence[str], include_authorized_operations: bool = False
) -> Any:
    """ConsumerGroupDescribe (KIP-848) of consumer-protocol groups: epochs, assignor and each
    member's current and target assignment. Send it to each group's coordinator; a classic
    group answers GROUP_ID_NOT_FOUND (describe it with DescribeGroups)."""
    return make_request(
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        version,
        group_ids=list(group_ids),
        include_authorized_operations=include_authorized_operations,
    )


def share_group_describe_request(
    version: int, *, group_ids: Sequence[str], include_authorized_operations: bool = False
) -> Any:
    """ShareGroupDescribe (KIP-932) of share groups: epochs, assignor and each member's
    assignment. Send it to each group's coordinator; a group of another type answers
    GROUP_ID_NOT_FOUND."""
    return make_request(
        ApiKey.SHARE_GROUP_DESCRIBE,
        version,
        group_ids=list(group_ids),
        include_authorized_operations=include_authorized_operations,
    )


def heartbeat_request(
    version: int,
    *,
    group_id: str,
    generation_id: int,
    member_id: str,
    group_instance_id: str | None = None,
) -> Any:
    """Heartbeat of a classic-protocol member."""
    api = ApiKey.HEARTBEAT
    _require(api, version, 3, "group.instance.id", group_instance_id is not None)
    return make_request(
        api,
        version,
        group_id=group_id,
        generation_id=generation_id,
        member_id=member_id,
        group_instance_id=group_instance_id,
    )


def leave_group_request(
    version: int,
    *,
    group_id: str,
    member_id: str,
    group_instance_id: str | None = None,
    reason: str | None = None,
) -> Any:
    """LeaveGroup of one member (v3+ send it as a one-element ``members`` batch)."""
    api = ApiKey.LEAVE_GROUP
    _require(api, version, 3, "group.instance.id", group_instance_id is not None)
    return make_request(
        api,
        version,
        group_id=group_id,
        member_id=member_id,
        members=[
            {"member_id": member_id, "group_instance_id": group_instance_id, "reason": reason}
        ],
    )


# -- Share groups (KIP-932) -------------------------------------------------------------------

#: An acknowledgement batch: (first offset, last offset, acknowledge types), as the wire has it
#: (one type for the whole range, or one per offset; 0 is a gap).
AckBatch = tuple[int, int, tuple[int, ...]]
#: ShareFetch / ShareAcknowledge acknowledge type RENEW (KIP-1222, v2+).
_RENEW = 4


def share_group_heartbeat_request(
    version: int,
    *,
    group_id: str,
    member_id: str,
    member_epoch: int,
    subscribed_topic_names: Sequence[str] | None = None,
    rack_id: str | None = None,
) -> Any:
    """ShareGroupHeartbeat: epoch 0 joins, -1 leaves; the topic names and rack only when they
    changed since the last heartbeat (None otherwise)."""
    return make_request(
        ApiKey.SHARE_GROUP_HEARTBEAT,
        version,
        group_id=group_id,
        member_id=member_id,
        member_epoch=member_epoch,
        rack_id=rack_id,
        subscribed_topic_names=(
            None if subscribed_topic_names is None else tuple(subscribed_topic_names)
        ),
    )


def _ack_topics(
    acks: Mapping[uuid.UUID, Mapping[int, Sequence[AckBatch]]],
) -> list[dict[str, Any]]:
    """Topics (by id) with their partitions' acknowledgement batches, as both share
    requests carry them."""
    return [
        {
            "topic_id": topic_id,
            "partitions": [
                {
                    "partition_index": partition,
                    "acknowledgement_batches": [
                        {"first_offset": first, "last_offset": last, "acknowledge_types": types}
                        for first, last, types in batches
                    ],
                }
                for partition, batches in by_partition.items()
            ],
        }
        for topic_id, by_partition in acks.items()
    ]


def _has_renew(acks: Mapping[uuid.UUID, Mapping[int, Sequence[AckBatch]]]) -> bool:
    return any(
        _RENEW in types
        for by_partition in acks.values()
        for batches in by_partition.values()
        for _first, _last, types in batches
    )


def share_fetch_request(
    version: int,
    *,
    group_id: str,
    member_id: str,
    share_session_epoch: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    max_records: int,
    batch_size: int,
    fetch: Mapping[uuid.UUID, Sequence[int]] | None = None,
    acknowledgements: Mapping[uuid.UUID, Mapping[int, Sequence[AckBatch]]] | None = None,
    forgotten: Mapping[uuid.UUID, Sequence[int]] | None = None,
    record_limit: bool = False,
) -> Any:
    """ShareFetch in a share session: ``fetch`` the partitions to add to the session (or all
    of them at epoch 0), ``acknowledgements`` piggybacked per topic id and partition (a
    partition acknowledged is listed even when it is not fetched), ``forgotten`` the
    partitions to remove. ``record_limit`` (the acquire mode) and RENEW need v2."""
    api = ApiKey.SHARE_FETCH
    fetch, acknowledgements, forgotten = fetch or {}, acknowledgements or {}, forgotten or {}
    _require(api, version, 2, "share.acquire.mode=record_limit", record_limit)
    renew = _has_renew(acknowledgements)
    _require(api, version, 2, "RENEW acknowledgements", renew)
    topics: dict[uuid.UUID, dict[int, list[AckBatch]]] = {}
    for topic_id, partitions in fetch.items():
        for partition in partitions:
            topics.setdefault(topic_id, {}).setdefault(partition, [])
    for topic_id, by_partition in acknowledgements.items():
        for partition, batches in by_partition.items():
            topics.setdefault(topic_id, {}).setdefault(partition, []).extend(batches)
    return make_request(
        api,
        version,
        group_id=group_id,
        member_id=member_id,
        share_session_epoch=share_session_epoch,
        max_wait=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        max_records=max_records,
        batch_size=batch_size,
        share_acquire_mode=1 if record_limit else 0,
        is_renew_ack=renew,
        topics=_ack_topics(topics),
        forgotten_topics_data=[
            {"topic_id": topic_id, "partitions": tuple(partitions)}
            for topic_id, partitions in forgotten.items()
        ],
    )


def share_acknowledge_request(
    version: int,
    *,
    group_id: str,
    member_id: str,
    share_session_epoch: int,
    acknowledgements: Mapping[uuid.UUID, Mapping[int, Sequence[AckBatch]]],
) -> Any:
    """ShareAcknowledge of ``acknowledgements`` in the share session (epoch > 0, or -1 to
    close it). RENEW needs v2."""
    api = ApiKey.SHARE_ACKNOWLEDGE
    renew = _has_renew(acknowledgements)
    _require(api, version, 2, "RENEW acknowledgements", renew)
    return make_request(
        api,
        version,
        group_id=group_id,
        member_id=member_id,
        share_session_epoch=share_session_epoch,
        is_renew_ack=renew,
        topics=_ack_topics(acknowledgements),
    )


# -- SASL --------------------------------------------------------------------------------------


def sasl_handshake_request(version: int, *, mechanism: str) -> Any:
    """SaslHandshake naming the mechanism (v1: SaslAuthenticate requests follow)."""
    return make_request(ApiKey.SASL_HANDSHAKE, version, mechanism=mechanism)


def sasl_authenticate_request(version: int, *, auth_bytes: bytes) -> Any:
    """SaslAuthenticate carrying one round of the mechanism's bytes."""
    return make_request(ApiKey.SASL_AUTHENTICATE, version, auth_bytes=auth_bytes)
