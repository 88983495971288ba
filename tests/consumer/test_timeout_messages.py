"""Timeouts name the call, the timeout and what was waited for (issue 10).

Not only "``<call>`` timed out": every KafkaTimeoutError a blocking call of the sync and the
asyncio consumer raises says which call (with its partitions or topics), after how long and
from which setting or argument, and what it waited for (the coordinator, the leader a
ListOffsets went to, the brokers a Metadata request could go to).
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from kafka_actors import KafkaConsumer
from kafka_actors.aio import AsyncKafkaConsumer
from kafka_actors.errors import KafkaTimeoutError
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.supervisors import FaultInjector
from tests.consumer.helpers import unique

TP = TopicPartition("orders", 0)


@pytest.fixture
def dead_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def consumer(dead_address: str) -> Iterator[KafkaConsumer]:
    c = KafkaConsumer(
        {
            "bootstrap.servers": dead_address,
            "group.id": unique("timeouts"),
            "default.api.timeout.ms": 700,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        yield c
    finally:
        c.close(timeout=2)


def _message(call: Any) -> str:
    with pytest.raises(KafkaTimeoutError) as info:
        call()
    return str(info.value)


def test_list_topics_names_the_bootstrap_servers(
    consumer: KafkaConsumer, dead_address: str
) -> None:
    text = _message(lambda: consumer.list_topics(timeout=0.5))
    assert text.startswith("list_topics() timed out after 500 ms (timeout) waiting for ")
    assert "the metadata of all topics (Metadata to any of bootstrap.servers" in text
    assert dead_address in text and "no broker answered yet" in text


def test_partitions_for_names_the_topic(consumer: KafkaConsumer) -> None:
    text = _message(lambda: consumer.partitions_for("orders"))
    assert text.startswith(
        "partitions_for(orders) timed out after 700 ms (default.api.timeout.ms) waiting for "
        "the metadata of topic orders"
    ), text


def test_committed_names_partitions_and_coordinator(consumer: KafkaConsumer) -> None:
    text = _message(lambda: consumer.committed({TP, TopicPartition("orders", 1)}))
    assert text.startswith(
        "committed(orders-0, orders-1) timed out after 700 ms (default.api.timeout.ms) "
        "waiting for the committed offsets of orders-0, orders-1 (OffsetFetch to the group "
        "coordinator (not known yet: FindCoordinator pending))"
    ), text


def test_commit_sync_names_partitions_and_coordinator(consumer: KafkaConsumer) -> None:
    text = _message(lambda: consumer.commit_sync({TP: 5}, timeout=0.3))
    assert text.startswith(
        "commit_sync(orders-0) timed out after 300 ms (timeout) waiting for the OffsetCommit "
        "of orders-0 to the group coordinator"
    ), text


def test_position_names_partition_and_what_it_waits_for(consumer: KafkaConsumer) -> None:
    consumer.assign([TP])
    text = _message(lambda: consumer.position(TP, timeout=0.5))
    assert text.startswith("position(orders-0) timed out after 500 ms (timeout) waiting for "), text
    # with a group: the committed offset first (the coordinator is not reachable)
    assert "the committed offset of orders-0 (OffsetFetch to the group coordinator" in text


def test_end_offsets_names_partitions_and_the_missing_leader(consumer: KafkaConsumer) -> None:
    text = _message(lambda: consumer.end_offsets([TP], timeout=0.4))
    assert text.startswith(
        "end_offsets(orders-0) timed out after 400 ms (timeout) waiting for the end offsets of "
        "orders-0 (no known leader for orders-0 (Metadata))"
    ), text


def test_asyncio_consumer_names_the_same(dead_address: str) -> None:
    async def main() -> list[str]:
        config = {
            "bootstrap.servers": dead_address,
            "group.id": unique("timeouts"),
            "default.api.timeout.ms": 600,
        }
        texts = []
        async with AsyncKafkaConsumer(config=config) as c:
            for call in (
                lambda: c.list_topics(timeout=0.4),
                lambda: c.committed(TP),
                lambda: c.beginning_offsets([TP], timeout=0.3),
            ):
                with pytest.raises(KafkaTimeoutError) as info:
                    await call()
                texts.append(str(info.value))
            c.assign([TP])
            with pytest.raises(KafkaTimeoutError) as info:
                await c.position(TP, timeout=0.3)
            texts.append(str(info.value))
            await c.close(timeout=2)
        return texts

    listed, committed, beginning, position = asyncio.run(main())
    assert listed.startswith(
        "list_topics() timed out after 400 ms (timeout) waiting for the metadata of all topics"
    ), listed
    assert dead_address in listed
    assert committed.startswith(
        "committed(orders-0) timed out after 600 ms "
        "(default.api.timeout.ms) waiting for the committed offsets of "
        "orders-0 (OffsetFetch to the group coordinator"
    ), committed
    assert beginning.startswith(
        "beginning_offsets(orders-0) timed out after 300 ms (timeout) "
        "waiting for the beginning offsets of orders-0"
    ), beginning
    assert position.startswith(
        "position(orders-0) timed out after 300 ms (timeout) waiting for "
        "the committed offset of orders-0"
    ), position


def test_position_names_the_list_offsets_leader(mock_cluster: Any) -> None:
    """With a known leader and ListOffsets answers lost: 'the earliest offset reset of T-0
    (ListOffsets to node N at host:port)'."""
    topic = unique("reset")
    mock_cluster.create_topic(topic, partitions=1)
    faults = FaultInjector()
    faults.drop_response(ApiKey.LIST_OFFSETS, times=None)
    tp = TopicPartition(topic, 0)
    config = {"bootstrap.servers": mock_cluster.bootstrap_servers, "auto.offset.reset": "earliest"}
    with KafkaConsumer(config, faults=faults) as c:
        c.assign([tp])
        text = _message(lambda: c.position(tp, timeout=3))
    match = re.match(
        rf"position\({re.escape(str(tp))}\) timed out after 3000 ms \(timeout\) waiting for the "
        rf"earliest offset reset of {re.escape(str(tp))} \(ListOffsets to node (\d+) at "
        r"127\.0\.0\.1:\d+\)",
        text,
    )
    assert match, text
