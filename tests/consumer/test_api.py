"""Every public call of KafkaConsumer against the real broker (manual assignment mostly)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from kafka_actors import KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafka_actors.errors import (
    ConfigError,
    ConsumerClosedError,
    IllegalStateError,
    InvalidGroupIdError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
    WakeupError,
)
from kafka_actors.protocol.records import decode as records_module
from tests.consumer.helpers import base_config, poll_until, produce, unique

pytestmark = pytest.mark.broker


@pytest.fixture
def topic(kafka_broker: Any) -> str:
    name = unique("api")
    kafka_broker.create_topic(name, partitions=2)
    bootstrap = kafka_broker.bootstrap_servers
    produce(bootstrap, name, 20, partition=0, timestamp=lambda i: 1_000_000 + i)
    produce(kafka_broker.bootstrap_servers, name, 10, partition=1, start=20)
    return name


def test_commit_sync_committed_and_async(kafka_broker: Any, topic: str) -> None:
    group = unique("g")
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    config = base_config(kafka_broker.bootstrap_servers, **{"group.id": group})
    config["enable.auto.commit"] = False
    with KafkaConsumer(config) as consumer:
        consumer.assign([tp0, tp1])
        poll_until(consumer, 30)
        assert consumer.committed([tp0, tp1]) == {tp0: None, tp1: None}
        committed = consumer.commit_sync()
        assert {tp: om.offset for tp, om in committed.items()} == {tp0: 20, tp1: 10}
        got = consumer.committed([tp0, tp1])
        assert {tp: om.offset if om else None for tp, om in got.items()} == {tp0: 20, tp1: 10}
        consumer.commit_sync({tp0: OffsetAndMetadata(5, "meta")}, timeout=30)
        got0 = consumer.committed(tp0)[tp0]
        assert got0 is not None and got0.offset == 5 and got0.metadata == "meta"
        seen: list[tuple[Any, Any]] = []
        future = consumer.commit_async({tp1: 7}, callback=lambda o, e: seen.append((o, e)))
        assert future.result(30)[tp1].offset == 7
        consumer.poll(0.1)  # the callback runs on the polling thread
        assert seen and seen[0][1] is None and seen[0][0][tp1].offset == 7
        got1 = consumer.committed(tp1)[tp1]
        assert got1 is not None and got1.offset == 7
    # A new consumer of the group starts at the committed offsets.
    with KafkaConsumer(config) as again:
        again.assign([tp0, tp1])
        records = poll_until(again, 15 + 3)
        assert min(r.offset for r in records if r.partition == 0) == 5
        assert min(r.offset for r in records if r.partition == 1) == 7


def test_seek_position_and_seek_to(kafka_broker: Any, topic: str) -> None:
    tp0 = TopicPartition(topic, 0)
    with KafkaConsumer(base_config(kafka_broker.bootstrap_servers)) as consumer:
        consumer.assign([tp0])
        assert consumer.position(tp0) == 0
        poll_until(consumer, 20)
        assert consumer.position(tp0) == 20
        consumer.seek(tp0, 15)
        assert consumer.position(tp0) == 15
        records = poll_until(consumer, 5)
        assert [r.offset for r in records] == [15, 16, 17, 18, 19]
        consumer.seek_to_beginning([tp0])
        assert consumer.position(tp0) == 0
        consumer.seek_to_end()
        assert consumer.position(tp0) == 20
        with pytest.raises(IllegalStateError):
            consumer.seek(TopicPartition(topic, 1), 0)
        with pytest.raises(IllegalStateError):
            consumer.position(TopicPartition(topic, 1))


def test_auto_offset_reset_latest_and_none(kafka_broker: Any, topic: str) -> None:
    tp0 = TopicPartition(topic, 0)
    config = base_config(kafka_broker.bootstrap_servers, **{"auto.offset.reset": "latest"})
    with KafkaConsumer(config) as consumer:
        consumer.assign([tp0])
        assert consumer.position(tp0) == 20
    config = base_config(kafka_broker.bootstrap_servers, **{"auto.offset.reset": "none"})
    with KafkaConsumer(config) as consumer:
        consumer.assign([tp0])
        with pytest.raises(NoOffsetForPartitionError):
            consumer.poll(1.0)


def test_pause_resume(kafka_broker: Any, topic: str) -> None:
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with KafkaConsumer(base_config(kafka_broker.bootstrap_servers)) as consumer:
        consumer.assign([tp0, tp1])
        consumer.pause([tp0])
        assert consumer.paused() == {tp0}
        records = poll_until(consumer, 10)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            records.extend(consumer.poll(0.2))
        assert {r.partition for r in records} == {1}
        consumer.resume([tp0])
        assert consumer.paused() == set()
        records = poll_until(consumer, 20)
        assert {r.partition for r in records} == {0}


def test_offsets_lookups(kafka_broker: Any, topic: str) -> None:
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with KafkaConsumer(base_config(kafka_broker.bootstrap_servers)) as consumer:
        assert consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
        assert consumer.end_offsets([tp0, tp1]) == {tp0: 20, tp1: 10}
        found = consumer.offsets_for_times({tp0: 1_000_005})[tp0]
        assert found is not None and found.offset == 5
        assert found.timestamp == 1_000_005
        assert consumer.offsets_for_times({tp0: 2_000_000_000_000})[tp0] is None


def test_list_topics_and_partitions_for(kafka_broker: Any, topic: str) -> None:
    with KafkaConsumer(base_config(kafka_broker.bootstrap_servers)) as consumer:
        topics = consumer.list_topics(timeout=30)
        assert topic in topics and len(topics[topic]) == 2
        assert not any(name.startswith("__") for name in topics)
        parts = consumer.partitions_for(topic)
        assert [p.partition for p in parts] == [0, 1]
        assert all(p.leader is not None for p in parts)


def test_wakeup_interrupts_poll(kafka_broker: Any, topic: str) -> None:
    with KafkaConsumer(base_config(kafka_broker.bootstrap_servers)) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_end()
        threading.Timer(0.5, consumer.wakeup).start()
        started = time.monotonic()
        with pytest.raises(WakeupError):
            consumer.poll(30)
        assert time.monotonic() - started < 20
        consumer.wakeup()
        with pytest.raises(WakeupError):
            consumer.poll(0)
        assert consumer.poll(0).is_empty()  # the wakeup was consumed


def test_close_and_context_manager(kafka_broker: Any, topic: str) -> None:
    consumer = KafkaConsumer(base_config(kafka_broker.bootstrap_servers))
    consumer.assign([TopicPartition(topic, 0)])
    poll_until(consumer, 20)
    consumer.close(timeout=10)
    consumer.close()  # idempotent
    with pytest.raises(ConsumerClosedError):
        consumer.poll(0)
    with pytest.raises(ConsumerClosedError):
        consumer.assign([TopicPartition(topic, 1)])
    with KafkaConsumer(base_config(kafka_broker.bootstrap_servers)) as inner:
        inner.assign([TopicPartition(topic, 1)])
    with pytest.raises(ConsumerClosedError):
        inner.poll(0)


def test_close_without_coordinator_respects_timeout() -> None:
    # Nothing listens there: no coordinator, no metadata; close must still return in time.
    config = {
        "bootstrap.servers": "127.0.0.1:1",
        "group.id": unique("g"),
        "reconnect.backoff.max.ms": 200,
    }
    consumer = KafkaConsumer(config)
    consumer.subscribe(["nowhere"])
    consumer.poll(0.2)
    started = time.monotonic()
    consumer.close(timeout=2)
    assert time.monotonic() - started < 6


def test_deserializers(kafka_broker: Any) -> None:
    name = unique("deser")
    kafka_broker.create_topic(name, partitions=1)
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    producer.produce(name, key=b"7", value=json.dumps({"n": 1}).encode(), headers=[("h", b"v")])
    producer.produce(name, key=None, value=None)
    producer.flush(30)
    config = base_config(kafka_broker.bootstrap_servers)
    with KafkaConsumer(
        config,
        key_deserializer=lambda b: None if b is None else int(b),
        value_deserializer=lambda b: None if b is None else json.loads(b),
    ) as consumer:
        consumer.assign([TopicPartition(name, 0)])
        records = poll_until(consumer, 2)
    first: Any = records[0]
    assert first.key == 7 and first.value == {"n": 1}
    assert records[0].headers == (("h", b"v"),)
    assert records[1].key is None and records[1].value is None


def test_metrics(kafka_broker: Any, topic: str) -> None:
    with KafkaConsumer(base_config(kafka_broker.bootstrap_servers)) as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        consumer.poll(0)
        consumer.seek(TopicPartition(topic, 0), 0)
        records: list[Any] = []
        # max.poll.records bounds one poll; take only a few to leave lag.
        while not records:
            records = list(consumer.poll(1.0))
        values = consumer.metrics()
        assert values["records-consumed-total"] >= len(records)
        assert values["records-consumed-rate"] > 0
        assert values["fetch-total"] >= 1 and values["fetch-rate"] > 0
        lag = values["records-lag"]
        assert set(lag) <= {TopicPartition(topic, 0), TopicPartition(topic, 1)}
        poll_until(consumer, 30 - len(records))
        values = consumer.metrics()
        assert values["records-lag"] == {TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 0}
        assert values["records-lag-max"] == 0
        assert values["record-decoder"] == records_module.IMPLEMENTATION


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        KafkaConsumer({"bootstrap.servers": "localhost:9092", "max.poll.recordz": 5})
    assert info.value.key == "max.poll.recordz"
    with pytest.raises(ConfigError) as info:
        KafkaConsumer({"bootstrap.servers": "localhost:9092", "max.poll.records": -1})
    assert info.value.key == "max.poll.records"
    with pytest.raises(ConfigError) as info:
        KafkaConsumer(bootstrap_servers="localhost:9092", group_protocol="nope")
    assert info.value.key == "group.protocol"
    with pytest.raises(ConfigError) as info:
        KafkaConsumer({"group.id": "g"})
    assert info.value.key == "bootstrap.servers"


def test_group_apis_need_group_id(kafka_broker: Any, topic: str) -> None:
    with KafkaConsumer(base_config(kafka_broker.bootstrap_servers)) as consumer:
        with pytest.raises(InvalidGroupIdError):
            consumer.subscribe([topic])
        with pytest.raises(InvalidGroupIdError):
            consumer.commit_sync()
        with pytest.raises(IllegalStateError):
            consumer.poll(0)


def test_timeouts_raise_kafka_timeout(kafka_broker: Any) -> None:
    missing = TopicPartition(unique("missing"), 0)
    config = base_config(kafka_broker.bootstrap_servers, **{"allow.auto.create.topics": False})
    with KafkaConsumer(config) as consumer:
        started = time.monotonic()
        with pytest.raises((KafkaTimeoutError, Exception)) as info:
            consumer.end_offsets([missing], timeout=2)
        assert time.monotonic() - started < 10
        assert info.type.__name__ in ("KafkaTimeoutError", "UnknownTopicOrPartitionError")
