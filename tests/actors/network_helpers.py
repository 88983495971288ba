"""Shared helpers for the NetworkActor tests (config, request shortcuts)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pykka

from kafka_actors.actors.network import (
    ANY_NODE,
    ConnectionEvent,
    GetConnectionEvents,
    Response,
    Send,
    request,
)
from kafka_actors.config import ConsumerConfig
from kafka_actors.protocol.wire import requests as rq


def network_config(bootstrap: str, **overrides: Any) -> ConsumerConfig:
    values: dict[str, Any] = {"bootstrap.servers": bootstrap, "client.id": "network-test"}
    values.update(overrides)
    return ConsumerConfig.from_dict(values)


def metadata(ref: pykka.ActorRef[Any], node: int = ANY_NODE, topics: Any = None) -> Response:
    return request(ref, rq.metadata_request(12, topics=topics), node=node, timeout=30)


def send(ref: pykka.ActorRef[Any], payload: Any, **kw: Any) -> pykka.Future[Any]:
    future: pykka.Future[Any] = pykka.ThreadingFuture()
    ref.tell(Send(payload, reply_to=future, **kw))
    return future


def events(ref: pykka.ActorRef[Any], node: int | None = None) -> tuple[ConnectionEvent, ...]:
    result: tuple[ConnectionEvent, ...] = ref.ask(GetConnectionEvents(node), timeout=10)  # type: ignore[assignment]
    return result


def topic_leader(ref: pykka.ActorRef[Any], topic: str) -> tuple[uuid.UUID, int]:
    deadline = time.monotonic() + 30
    while True:
        response = metadata(ref, topics=[topic]).response
        [entry] = response.topics
        if int(entry.error_code) == 0 and entry.partitions and entry.partitions[0].leader_id >= 0:
            return entry.topic_id, int(entry.partitions[0].leader_id)
        assert time.monotonic() < deadline, f"topic {topic} has no leader"
        time.sleep(0.2)


def long_fetch(topic: str, topic_id: uuid.UUID, max_wait_ms: int = 5_000) -> Any:
    """A Fetch at the end of an empty partition: the broker holds it ``max_wait_ms``."""
    return rq.fetch_request(
        17,
        partitions=[rq.FetchPartition(topic, 0, 0, 1 << 20)],
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        topic_ids={topic: topic_id},
    )
