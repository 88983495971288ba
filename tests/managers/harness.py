"""Fabricated kio responses and helpers for the pure request managers' tests."""

from __future__ import annotations

import importlib
import random
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka_actors.protocol.messages import PollResult, TopicPartition, UnsentRequest
from kafka_actors.protocol.wire.apis import CLIENT_VERSIONS, ApiKey, VersionRange
from kafka_actors.protocol.wire.versions import NegotiatedVersions

TOPIC_IDS = {
    "orders": uuid.UUID("00000000-0000-4000-8000-000000000001"),
    "payments": uuid.UUID("00000000-0000-4000-8000-000000000002"),
    "orders-eu": uuid.UUID("00000000-0000-4000-8000-000000000003"),
    "__consumer_offsets": uuid.UUID("00000000-0000-4000-8000-000000000004"),
}


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def versions(**caps: int) -> NegotiatedVersions:
    """Negotiated versions where the broker supports every API up to the client's max, or up
    to ``caps[api_name_lower]`` (e.g. ``metadata=7``)."""
    broker: dict[int, VersionRange] = {}
    for api, ours in CLIENT_VERSIONS.items():
        cap = caps.get(ApiKey(api).name.lower())
        broker[api] = VersionRange(0, ours.max if cap is None else cap)
    return NegotiatedVersions(broker=broker)


def seeded_random(seed: int = 7) -> Callable[[], float]:
    return random.Random(seed).random


def _module(api: str, version: int) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.response")


def _has(cls: type, name: str) -> bool:
    return name in getattr(cls, "__dataclass_fields__", {})


def _build(cls: type, **values: Any) -> Any:
    return cls(**{k: v for k, v in values.items() if _has(cls, k)})


# -- Metadata ----------------------------------------------------------------------------------


@dataclass
class P:
    """A fabricated partition: leader (-1: none), leader epoch, replicas, error code."""

    index: int
    leader: int = 1
    epoch: int = 0
    replicas: Sequence[int] = (1,)
    error: int = 0


@dataclass
class T:
    name: str
    partitions: Sequence[P] = field(default_factory=lambda: [P(0)])
    error: int = 0
    internal: bool = False
    topic_id: uuid.UUID | None = None


def metadata_response(
    version: int,
    topics: Iterable[T] = (),
    *,
    brokers: Iterable[tuple[int, str, int]] = ((1, "b1.local", 9092), (2, "b2.local", 9093)),
    controller: int = 1,
    cluster_id: str = "cluster-x",
    error: int = 0,
) -> Any:
    m = _module("metadata", version)
    topic_entries = []
    for t in topics:
        parts = tuple(
            _build(
                m.MetadataResponsePartition,
                error_code=p.error,
                partition_index=p.index,
                leader_id=p.leader,
                leader_epoch=p.epoch,
                replica_nodes=tuple(p.replicas),
                isr_nodes=tuple(p.replicas),
                offline_replicas=(),
            )
            for p in t.partitions
        )
        topic_entries.append(
            _build(
                m.MetadataResponseTopic,
                error_code=t.error,
                name=t.name,
                topic_id=(
                    t.topic_id
                    if t.topic_id is not None
                    else TOPIC_IDS.get(t.name, uuid.UUID(int=0))
                    if t.error == 0
                    else uuid.UUID(int=0)
                ),
                is_internal=t.internal,
                partitions=parts if t.error == 0 else (),
                topic_authorized_operations=-(2**31),
            )
        )
    return _build(
        m.MetadataResponse,
        throttle_time=0,
        brokers=tuple(
            _build(m.MetadataResponseBroker, node_id=n, host=h, port=port, rack=None)
            for n, h, port in brokers
        ),
        cluster_id=cluster_id,
        controller_id=controller,
        topics=tuple(topic_entries),
        cluster_authorized_operations=-(2**31),
        error_code=error,
    )


def requested_topics(request: Any) -> list[str] | None:
    """Names in a Metadata request; None for "all topics"."""
    if request.topics is None:
        return None
    return [t.name for t in request.topics]


# -- FindCoordinator ---------------------------------------------------------------------------


def find_coordinator_response(
    version: int,
    *,
    key: str = "group-a",
    node_id: int = 2,
    host: str = "b2.local",
    port: int = 9093,
    error: int = 0,
    message: str | None = None,
) -> Any:
    m = _module("find_coordinator", version)
    if version >= 4:
        return m.FindCoordinatorResponse(
            throttle_time=0,
            coordinators=(
                m.Coordinator(
                    key=key,
                    node_id=node_id if error == 0 else -1,
                    host=host if error == 0 else "",
                    port=port if error == 0 else -1,
                    error_code=error,
                    error_message=message,
                ),
            ),
        )
    return _build(
        m.FindCoordinatorResponse,
        throttle_time=0,
        error_code=error,
        error_message=message,
        node_id=node_id if error == 0 else -1,
        host=host if error == 0 else "",
        port=port if error == 0 else -1,
    )


# -- ListOffsets -------------------------------------------------------------------------------


@dataclass
class Off:
    """A fabricated ListOffsets partition answer."""

    offset: int = 0
    timestamp: int = -1
    epoch: int = -1
    error: int = 0


def list_offsets_response(version: int, answers: Mapping[TopicPartition, Off]) -> Any:
    m = _module("list_offsets", version)
    by_topic: dict[str, list[Any]] = {}
    for part, o in answers.items():
        by_topic.setdefault(part.topic, []).append(
            _build(
                m.ListOffsetsPartitionResponse,
                partition_index=part.partition,
                error_code=o.error,
                timestamp=o.timestamp,
                offset=o.offset,
                leader_epoch=o.epoch,
            )
        )
    return _build(
        m.ListOffsetsResponse,
        throttle_time=0,
        topics=tuple(
            m.ListOffsetsTopicResponse(name=name, partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
    )


def list_offsets_asked(request: Any) -> dict[TopicPartition, int]:
    """(partition → timestamp) of a ListOffsets request."""
    return {
        TopicPartition(t.name, int(p.partition_index)): int(p.timestamp)
        for t in request.topics
        for p in t.partitions
    }


def events_of(result: PollResult, cls: type) -> list[Any]:
    return [e for e in result.events if isinstance(e, cls)]


def only_request(result: PollResult) -> UnsentRequest:
    assert len(result.requests) == 1, result.requests
    return result.requests[0]
