"""Helpers for FetchManager tests: a cluster snapshot, fabricated kio Fetch responses built
with record_builder, and reading the requests the manager built."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_actors.protocol.fetch.config import FetchConfig
from kafka_actors.protocol.fetch.manager import FINAL_EPOCH, FetchManager
from kafka_actors.protocol.messages import TopicPartition, UnsentRequest
from kafka_actors.protocol.metadata import Cluster, Node, PartitionInfo, TopicInfo
from kafka_actors.protocol.records.build import RecordSpec, build_batch
from kafka_actors.protocol.subscription import SubscriptionState

TOPIC_IDS = {
    "t": "6c4a1d8e-3f0b-4b9e-9a43-1f6e0b2f9c01",
    "u": "0b9f2e54-7a1c-4d3e-8f60-5c2d9e1a7b02",
}


def cluster(
    leaders: Mapping[TopicPartition, tuple[int, int | None]],
    *,
    nodes: Sequence[int] = (1, 2, 3),
    with_ids: bool = True,
) -> Cluster:
    topics: dict[str, dict[int, PartitionInfo]] = {}
    for tp, (leader, epoch) in leaders.items():
        topics.setdefault(tp.topic, {})[tp.partition] = PartitionInfo(
            tp.partition, leader, epoch, replicas=tuple(nodes)
        )
    return Cluster.build(
        nodes=[Node(n, "127.0.0.1", 9000 + n) for n in nodes],
        topics=[
            TopicInfo(name, TOPIC_IDS.get(name) if with_ids else None, parts)
            for name, parts in topics.items()
        ],
    )


def batch(base_offset: int, count: int, *, leader_epoch: int = 0, **kwargs: Any) -> bytes:
    return build_batch(
        [RecordSpec(key=None, value=f"v{base_offset + i}".encode()) for i in range(count)],
        base_offset=base_offset,
        partition_leader_epoch=leader_epoch,
        **kwargs,
    )


@dataclass
class Part:
    """One partition of a fabricated response."""

    records: bytes = b""
    error: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: Sequence[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    extra: dict[str, Any] = field(default_factory=dict)


def fetch_response(
    version: int,
    parts: Mapping[TopicPartition, Part],
    *,
    session_id: int = 0,
    error: int = 0,
    throttle_ms: int = 0,
) -> Any:
    mod = importlib.import_module(f"kio.schema.fetch.v{version}.response")
    by_topic: dict[str, list[Any]] = {}
    for tp, p in parts.items():
        aborted = (
            None
            if p.aborted is None
            else tuple(
                mod.AbortedTransaction(producer_id=pid, first_offset=first)
                for pid, first in p.aborted
            )
        )
        values = {
            "partition_index": tp.partition,
            "error_code": ErrorCode(p.error),
            "high_watermark": p.high_watermark,
            "last_stable_offset": p.last_stable_offset,
            "log_start_offset": p.log_start_offset,
            "aborted_transactions": aborted,
            "preferred_read_replica": p.preferred_read_replica,
            "records": p.records,
            **p.extra,
        }
        names = {f.name for f in dataclasses.fields(mod.PartitionData)}
        by_topic.setdefault(tp.topic, []).append(
            mod.PartitionData(**{k: v for k, v in values.items() if k in names})
        )
    topics = []
    for topic, partitions in by_topic.items():
        ref: dict[str, Any] = (
            {"topic_id": uuid.UUID(TOPIC_IDS[topic])} if version >= 13 else {"topic": topic}
        )
        topics.append(mod.FetchableTopicResponse(**ref, partitions=tuple(partitions)))
    top = {
        "throttle_time": datetime.timedelta(milliseconds=throttle_ms),
        "error_code": ErrorCode(error),
        "session_id": session_id,
        "responses": tuple(topics),
    }
    names = {f.name for f in dataclasses.fields(mod.FetchResponse)}
    return mod.FetchResponse(**{k: v for k, v in top.items() if k in names})


def requested(request: UnsentRequest) -> dict[TopicPartition, Any]:
    """The partitions a Fetch request carries, by TopicPartition (names resolved from ids)."""
    names = {uuid.UUID(i): n for n, i in TOPIC_IDS.items()}
    out: dict[TopicPartition, Any] = {}
    for topic in request.request.topics:
        name = getattr(topic, "topic", None) or names[topic.topic_id]
        for p in topic.partitions:
            out[TopicPartition(name, int(p.partition))] = p
    return out


def forgotten(request: UnsentRequest) -> set[TopicPartition]:
    names = {uuid.UUID(i): n for n, i in TOPIC_IDS.items()}
    out: set[TopicPartition] = set()
    for topic in request.request.forgotten_topics_data:
        name = getattr(topic, "topic", None) or names[topic.topic_id]
        out.update(TopicPartition(name, int(p)) for p in topic.partitions)
    return out


def session_of(request: UnsentRequest) -> tuple[int, int]:
    return (
        int(getattr(request.request, "session_id", 0)),
        int(getattr(request.request, "session_epoch", FINAL_EPOCH)),
    )


def setup(
    positions: Mapping[TopicPartition, int],
    leaders: Mapping[TopicPartition, tuple[int, int | None]],
    *,
    version: int = 17,
    subscriptions: SubscriptionState | None = None,
    **config: Any,
) -> tuple[FetchManager, SubscriptionState]:
    subs = subscriptions if subscriptions is not None else SubscriptionState()
    subs.assign_from_user(list(positions))
    for tp, offset in positions.items():
        subs.seek(tp, offset)
    manager = FetchManager(subs, FetchConfig(**config), fetch_version=version)
    manager.on_cluster_updated(cluster(leaders))
    return manager, subs


def by_node(requests: Sequence[UnsentRequest]) -> dict[int, UnsentRequest]:
    out = {r.node: r for r in requests}
    assert len(out) == len(requests), "two requests to one node"
    return out
