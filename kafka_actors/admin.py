"""Group administration, as Java's Admin and ``kafka-consumer-groups.sh`` do it (first part):
list the groups of the cluster, describe groups, committed offsets with lag, delete groups.

Owns: :class:`AdminClient`, a small front over the CLI's :class:`ClusterClient` (its
NetworkActor, version negotiation, coordinator lookup and paced retries are reused, not
copied) plus the pure decoding of ListGroups and DeleteGroups responses. May touch: the
protocol package, errors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka_actors.cli.admin import ClusterClient, GroupDescription, PartitionLag
from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import (
    KafkaError,
    NonEmptyGroupError,
    UnsupportedVersionError,
    error_for_code,
    raise_for_code,
)
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.wire import requests as rq
from kafka_actors.protocol.wire.apis import ApiKey

__all__ = [
    "AdminClient",
    "GroupListing",
    "OffsetReset",
    "decode_delete_groups",
    "decode_delete_share_group_offsets",
    "decode_list_groups",
    "decode_offset_delete",
]


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One group of ListGroups. ``state`` is None before ListGroups v4, ``group_type``
    (``consumer``, ``classic``, ``share``, ...) None before v5; ``protocol_type`` is
    ``consumer`` for consumer groups of either protocol, empty for a bare group."""

    group_id: str
    protocol_type: str
    state: str | None
    group_type: str | None


def decode_list_groups(response: Any) -> list[GroupListing]:
    """The groups of one broker's ListGroups response; an error code raises."""
    raise_for_code(int(response.error_code))
    return [
        GroupListing(
            group_id=str(g.group_id),
            protocol_type=str(g.protocol_type),
            state=None if getattr(g, "group_state", None) is None else str(g.group_state),
            group_type=None if getattr(g, "group_type", None) is None else str(g.group_type),
        )
        for g in response.groups
    ]


def decode_delete_groups(response: Any) -> dict[str, KafkaError | None]:
    """Per group: None when deleted, else the typed error (e.g. NON_EMPTY_GROUP)."""
    return {
        str(r.group_id): error_for_code(int(r.error_code)) if int(r.error_code) else None
        for r in response.results
    }


def decode_delete_share_group_offsets(response: Any) -> dict[str, KafkaError | None]:
    """DeleteShareGroupOffsets: per topic None when deleted, else the typed error; a
    group-level error (GROUP_NOT_EMPTY while members are in the group) raises."""
    raise_for_code(int(response.error_code), response.error_message or None)
    return {
        str(t.topic_name): error_for_code(int(t.error_code), t.error_message or None)
        if int(t.error_code)
        else None
        for t in response.responses
    }


def decode_offset_delete(response: Any) -> dict[TopicPartition, KafkaError | None]:
    """Per partition: None when its committed offset was deleted, else the typed error; a
    group-level error code raises."""
    raise_for_code(int(response.error_code))
    return {
        TopicPartition(str(t.name), int(p.partition_index)): (
            error_for_code(int(p.error_code), topic=str(t.name), partition=int(p.partition_index))
            if int(p.error_code)
            else None
        )
        for t in response.topics
        for p in t.partitions
    }


@dataclass(frozen=True, slots=True)
class OffsetReset:
    """One row of a reset plan: the committed offset now (None without one) and the new."""

    partition: TopicPartition
    current: int | None
    target: int


class AdminClient:
    """Blocking group administration with the consumer's configuration (connection, SASL,
    TLS, ``retry.backoff.ms``)."""

    def __init__(self, config: ConsumerConfig, timeout: float = 30.0) -> None:
        self._cluster = ClusterClient(config, timeout=timeout)

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._cluster.close()

    @property
    def cluster(self) -> ClusterClient:
        """The read-only query client underneath (topics, coordinator, describe)."""
        return self._cluster

    def list_groups(self) -> list[GroupListing]:
        """Every group of the cluster (ListGroups to every broker), sorted by id."""
        brokers = sorted({int(b.node_id) for b in self._cluster.metadata([]).brokers})
        version = self._cluster.version(ApiKey.LIST_GROUPS)
        found: dict[str, GroupListing] = {}
        payload = rq.list_groups_request(version)
        for node in brokers:
            response = self._cluster.retrying(
                lambda node=node: self._cluster.send(payload, node)  # type: ignore[misc]
            )
            for listing in decode_list_groups(response):
                found[listing.group_id] = listing
        return [found[g] for g in sorted(found)]

    def describe_groups(self, groups: Iterable[str]) -> dict[str, GroupDescription]:
        """Each group's state and members (ConsumerGroupDescribe, else DescribeGroups)."""
        return {g: self._cluster.describe_group(g) for g in groups}

    def list_group_offsets(self, group: str) -> list[PartitionLag]:
        """Committed offsets of ``group`` with log end offsets and lag, as ``--describe``; for a
        share group its share-partition start offsets and the broker's lag."""
        return self._cluster.offsets_with_lag(self._cluster.describe_group(group))

    def committed_offsets(self, group: str) -> dict[TopicPartition, int]:
        """Where ``group`` stands: its committed offsets, or for a share group its
        share-partition start offsets (DescribeShareGroupOffsets)."""
        return self._cluster.positions(group, self._group_protocol(group))

    def _group_protocol(self, group: str) -> str:
        """``share``, ``consumer`` or ``classic``; a broker that cannot describe groups has no
        share groups (classic assumed)."""
        try:
            return self._cluster.describe_group(group).protocol
        except UnsupportedVersionError:
            return "classic"

    def plan_reset(
        self,
        group: str,
        partitions: Iterable[TopicPartition],
        *,
        to: str | int,
        timestamp_ms: int | None = None,
        shift_by: int | None = None,
        committed: Mapping[TopicPartition, int] | None = None,
    ) -> list[OffsetReset]:
        """What ``--reset-offsets --dry-run`` prints: ``to`` is ``"earliest"``,
        ``"latest"``, an offset (clamped to the partition's earliest..latest, as Kafka
        does), ``"timestamp"`` with ``timestamp_ms`` (the first offset at or after it, the
        log end where none is), or ``"shift"`` with ``shift_by`` (the committed offset
        moved by that many, clamped; a partition without one is refused with ValueError,
        as Kafka's tool does). Writes nothing; asks only for the offsets the target needs.
        ``committed``: the group's :meth:`committed_offsets` when the caller has them."""
        wanted = sorted(set(partitions))
        if to == "timestamp" and timestamp_ms is None:
            raise ValueError("reset to a timestamp needs timestamp_ms")
        if to == "shift" and shift_by is None:
            raise ValueError("reset by a shift needs shift_by")
        if not (to in ("earliest", "latest", "timestamp", "shift") or isinstance(to, int)):
            raise ValueError(f"reset to {to!r}: earliest, latest, timestamp, shift or an offset")
        if committed is None:
            committed = self.committed_offsets(group)
        if to == "shift":
            missing = [tp for tp in wanted if tp not in committed]
            if missing:
                raise ValueError(
                    f"cannot shift the offsets of {', '.join(map(str, missing))}: "
                    f"group {group} has no committed offset there"
                )
        clamped = isinstance(to, int) or to == "shift"
        earliest: dict[TopicPartition, int] = {}
        latest: dict[TopicPartition, int] = {}
        if to == "earliest" or clamped:
            earliest = self._cluster.list_offsets(wanted, rq.EARLIEST_TIMESTAMP)
        if to != "earliest":
            latest = self._cluster.list_offsets(wanted, rq.LATEST_TIMESTAMP)
        at_time: dict[TopicPartition, int] = {}
        if to == "timestamp":
            assert timestamp_ms is not None
            at_time = self._cluster.list_offsets(wanted, timestamp_ms)
        rows = []
        for tp in wanted:
            if to == "timestamp":
                found = at_time.get(tp, -1)
                target = found if found >= 0 else latest[tp]
            elif to == "earliest":
                target = earliest[tp]
            elif to == "latest":
                target = latest[tp]
            else:
                wish = committed[tp] + (shift_by or 0) if to == "shift" else int(to)
                target = min(max(wish, earliest[tp]), latest[tp])
            rows.append(OffsetReset(tp, committed.get(tp), target))
        return rows

    def alter_group_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` for ``group`` as its admin (generation -1, no member), as
        ``--reset-offsets --execute`` does; refused with NonEmptyGroupError while the group
        has members (Kafka's tool resets inactive groups only)."""
        description = self._cluster.describe_group(group)
        if description.members:
            raise NonEmptyGroupError(
                f"group {group} has {len(description.members)} active member(s): "
                "offsets can only be reset while it is inactive"
            )
        if description.protocol == "share":
            self._alter_share_group_offsets(group, offsets)
            return
        version = min(self._cluster.version(ApiKey.OFFSET_COMMIT), 9)  # v10 names topics by id

        def once() -> None:
            node = self._cluster.find_coordinator(group)
            payload = rq.offset_commit_request(
                version,
                group_id=group,
                offsets={tp: OffsetAndMetadata(o) for tp, o in offsets.items()},
            )
            for t in self._cluster.send(payload, node).topics:
                for p in t.partitions:
                    raise_for_code(
                        int(p.error_code), topic=str(t.name), partition=int(p.partition_index)
                    )

        self._cluster.retrying(once)

    def _alter_share_group_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        version = self._cluster.version(ApiKey.ALTER_SHARE_GROUP_OFFSETS)

        def once() -> None:
            node = self._cluster.find_coordinator(group)
            payload = rq.alter_share_group_offsets_request(
                version, group_id=group, start_offsets=offsets
            )
            response = self._cluster.send(payload, node)
            raise_for_code(int(response.error_code), response.error_message or None)
            for t in response.responses:
                for p in t.partitions:
                    raise_for_code(
                        int(p.error_code),
                        p.error_message or None,
                        topic=str(t.topic_name),
                        partition=int(p.partition_index),
                    )

        self._cluster.retrying(once)

    def delete_group_offsets(
        self, group: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, KafkaError | None]:
        """Delete committed offsets of ``group`` (OffsetDelete): per partition None when
        deleted, else the typed error (GROUP_SUBSCRIBED_TO_TOPIC while a member subscribes
        to the topic). A group-level error raises. A share group's state is kept per topic
        (DeleteShareGroupOffsets): the whole topic of each partition named is forgotten, and
        each partition gets its topic's outcome."""
        wanted = sorted(set(partitions))
        if self._group_protocol(group) == "share":
            return self._delete_share_group_offsets(group, wanted)
        version = self._cluster.version(ApiKey.OFFSET_DELETE)

        def once() -> dict[TopicPartition, KafkaError | None]:
            node = self._cluster.find_coordinator(group)
            payload = rq.offset_delete_request(version, group_id=group, partitions=wanted)
            return decode_offset_delete(self._cluster.send(payload, node))

        return self._cluster.retrying(once)

    def _delete_share_group_offsets(
        self, group: str, wanted: Sequence[TopicPartition]
    ) -> dict[TopicPartition, KafkaError | None]:
        version = self._cluster.version(ApiKey.DELETE_SHARE_GROUP_OFFSETS)

        def once() -> dict[TopicPartition, KafkaError | None]:
            node = self._cluster.find_coordinator(group)
            payload = rq.delete_share_group_offsets_request(
                version, group_id=group, topics={tp.topic for tp in wanted}
            )
            by_topic = decode_delete_share_group_offsets(self._cluster.send(payload, node))
            return {tp: by_topic.get(tp.topic) for tp in wanted}

        return self._cluster.retrying(once)

    def delete_groups(self, groups: Sequence[str]) -> dict[str, KafkaError | None]:
        """Delete each group (DeleteGroups to its coordinator): None when deleted, else the
        typed error (``NON_EMPTY_GROUP`` while it has members, ``GROUP_ID_NOT_FOUND``)."""
        result: dict[str, KafkaError | None] = {}
        version = self._cluster.version(ApiKey.DELETE_GROUPS)
        for group in groups:

            def once(group: str = group) -> Mapping[str, KafkaError | None]:
                node = self._cluster.find_coordinator(group)
                payload = rq.delete_groups_request(version, groups=[group])
                outcome = decode_delete_groups(self._cluster.send(payload, node))
                error = outcome.get(group)
                if error is not None and getattr(error, "retriable", False):
                    raise error  # coordinator moved or loading: retried with backoff
                return outcome

            result.update(self._cluster.retrying(once))
        return result
