"""Helpers for the KafkaConsumer tests: unique names, producing with confluent-kafka."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kafka_actors import KafkaConsumer
from kafka_actors.protocol.records.decode import ConsumerRecord

if TYPE_CHECKING:
    from kafka_actors.health import ConsumerHealth
    from kafka_actors.testing import KafkaCluster

_seq = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{next(_seq)}-{time.monotonic_ns() % 1_000_000}"


def produce(
    bootstrap: str,
    topic: str,
    count: int,
    *,
    partition: int | None = None,
    start: int = 0,
    key: Callable[[int], bytes | None] | None = None,
    timestamp: Callable[[int], int] | None = None,
    headers: Iterable[tuple[str, bytes]] | None = None,
) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    for i in range(start, start + count):
        kwargs: dict[str, Any] = {
            "value": f"value-{i}".encode(),
            "key": key(i) if key is not None else f"key-{i}".encode(),
        }
        if partition is not None:
            kwargs["partition"] = partition
        if timestamp is not None:
            kwargs["timestamp"] = timestamp(i)
        if headers is not None:
            kwargs["headers"] = list(headers)
        producer.produce(topic, **kwargs)
    assert producer.flush(30) == 0


def poll_until(
    consumer: KafkaConsumer,
    count: int,
    *,
    timeout: float = 60.0,
    step: float = 0.5,
) -> list[ConsumerRecord]:
    """Poll until ``count`` records arrived (or fail at ``timeout``)."""
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    while len(records) < count:
        assert time.monotonic() < deadline, f"only {len(records)} of {count} records arrived"
        records.extend(consumer.poll(step))
    return records


def poll_all_until(
    consumers: list[KafkaConsumer],
    done: Callable[[], bool],
    what: str,
    *,
    timeout: float = 120.0,
    step: float = 0.1,
) -> None:
    """Poll every consumer in turn (``step`` s each) until ``done()`` (or fail at ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for consumer in consumers:
            consumer.poll(step)


def health_until(
    consumer: KafkaConsumer,
    check: Callable[[ConsumerHealth], bool],
    *,
    poll: bool = True,
    timeout: float = 60.0,
) -> ConsumerHealth:
    """``consumer.health()`` once ``check`` holds, polling (or only waiting) between looks."""
    deadline = time.monotonic() + timeout
    while True:
        health = consumer.health()
        if check(health):
            return health
        assert time.monotonic() < deadline, health
        if poll:
            consumer.poll(0.1)
        else:
            time.sleep(0.05)


def base_config(bootstrap: str, **extra: object) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "auto.offset.reset": "earliest",
        "fetch.max.wait.ms": 100,
    }
    config.update(extra)
    return config


def leaders_of(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> the broker id of its leader, as confluent-kafka's admin sees it."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(topic, timeout=30)
    return {p: info.leader for p, info in metadata.topics[topic].partitions.items()}


def broker_index(cluster: KafkaCluster, node_id: int) -> int:
    """The index in ``cluster.brokers`` (what stop/kill/start take) of broker ``node_id``."""
    for i, node in enumerate(cluster.brokers):
        if node.node_id == node_id:
            return i
    raise AssertionError(f"no broker with id {node_id}")


def described_client_ids(bootstrap: str, group: str) -> set[str]:
    """The client ids of the members the broker lists in the group's description."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group], request_timeout=30)[group].result(60)
    return {member.client_id for member in description.members}
