"""Client telemetry (KIP-714) against a real Kafka 4.4 broker whose ``metric.reporters`` holds a
client-telemetry receiver (``kafka_actors.testing.telemetry``: a plugin class the testkit
compiles, writing every push it accepts) and a client-metrics subscription made with Kafka's
``kafka-client-metrics`` tool: the broker receives our metrics by name and value, the client
instance id it saw is the one ``client_instance_id()`` returns, and close sends the terminating
push."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_actors import (
    AsyncKafkaConsumer,
    AsyncKafkaShareConsumer,
    KafkaConsumer,
    KafkaShareConsumer,
)
from kafka_actors.errors import IllegalStateError
from kafka_actors.metrics import CONSUMER, FETCH_MANAGER
from kafka_actors.protocol import telemetry as telemetry_module
from kafka_actors.protocol.telemetry import COMPRESSION_NONE, COMPRESSION_SNAPPY, COMPRESSION_ZSTD
from kafka_actors.testing import KafkaBroker, capture_logs
from kafka_actors.testing.share import share_broker_config
from kafka_actors.testing.telemetry import (
    ReceivedPush,
    read_pushes,
    receiver_broker_args,
    subscribe_client_metrics,
)
from tests.consumer.helpers import base_config, poll_until, produce, unique

PUSH_INTERVAL_MS = 500  # the subscription's interval (the broker's minimum is 100)
RECORDS = "org.apache.kafka.consumer.fetch.manager.records.consumed.total"
CONNECTIONS = "org.apache.kafka.consumer.connection.creation.total"


@pytest.fixture(scope="module")
def telemetry_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    out = tmp_path_factory.mktemp("telemetry") / "pushes.txt"
    args = receiver_broker_args(out)
    # share groups' settings too: the share consumers push as well
    args["broker_config"] = {**share_broker_config(), **args["broker_config"]}
    with KafkaBroker(**args) as broker:
        subscribe_client_metrics(
            broker, "kafka-actors-test", ["org.apache.kafka.consumer."], PUSH_INTERVAL_MS
        )
        yield broker, out


def wait_pushes(out: Path, instance: uuid.UUID, done: Any, timeout: float = 60.0) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        mine = [p for p in read_pushes(out) if p.client_instance_id == instance]
        if done(mine) or time.monotonic() > deadline:
            return mine
        time.sleep(0.2)


def point(push: ReceivedPush, name: str, **attrs: str) -> float:
    """The value of ``name``'s data point with exactly these attributes (the client-level
    one without)."""
    (value,) = [v for a, v in push.points[name] if a == attrs]
    return value


def received_total(pushes: list[ReceivedPush], name: str, **attrs: str) -> float:
    """What the broker knows of counter ``name`` (the data point with exactly ``attrs``): the
    last cumulative value, or the sum of the deltas (the subscription's temporality; a push
    made before the point existed has none)."""
    values = [(p.kinds[name], v) for p in pushes for a, v in p.points.get(name, ()) if a == attrs]
    if not values:
        return 0.0
    if values[-1][0] == "sum/delta":
        return sum(v for _kind, v in values)
    return values[-1][1]


@pytest.mark.broker
def test_broker_receives_our_metrics_by_name_and_value(telemetry_broker: tuple[Any, Path]) -> None:
    broker, out = telemetry_broker
    topic = unique("telemetry")
    broker.create_topic(topic, partitions=1)
    produce(broker.bootstrap_servers, topic, 30)
    logs_cm = capture_logs()
    logs = logs_cm.__enter__()
    consumer = KafkaConsumer(
        **base_config(broker.bootstrap_servers, group_id=unique("g-telemetry"))
    )
    closed = False
    try:
        consumer.subscribe([topic])
        instance = consumer.client_instance_id(timeout=30)
        assert isinstance(instance, uuid.UUID) and instance.int != 0
        assert consumer.client_instance_id(timeout=0) == instance  # known now: no wait
        assert len(poll_until(consumer, 30)) == 30
        # pushes after the 30 records carry the consumer's own total (cumulative, or as
        # deltas adding up to it: the broker's choice)
        consumed = consumer.metrics().find(FETCH_MANAGER, "records-consumed-total").value()
        assert consumed == 30.0
        pushes = wait_pushes(out, instance, lambda ps: received_total(ps, RECORDS) >= 30)
        assert pushes, "the broker received no push from this client instance"
        assert received_total(pushes, RECORDS) == 30.0
        assert received_total(pushes, RECORDS, topic=topic) == 30.0
        last = pushes[-1]
        assert last.kinds[RECORDS].startswith("sum/")
        opened = consumer.metrics().find(CONSUMER, "connection-creation-total").value()
        assert 1.0 <= received_total(pushes, CONNECTIONS) <= opened
        assert all(name.startswith("org.apache.kafka.consumer.") for name in last.points)
        # a gauge: the partitions assigned now (the topic has one)
        assert point(last, "org.apache.kafka.consumer.coordinator.assigned.partitions") == 1.0
        # a metric that measured nothing yet (NaN) is absent, never pushed as a made-up value
        assert all(v == v for p in pushes for pts in p.points.values() for _a, v in pts)
        assert not any(p.terminating for p in pushes)
        # the broker lists zstd first among the types it accepts: the pushes it decoded
        # above were zstd-compressed
        sent = [e for e in list(logs) if e["event"] == "push_telemetry"]
        assert sent and {e["compression"] for e in sent} == {COMPRESSION_ZSTD}
        consumer.close(timeout=30)
        closed = True
        final = wait_pushes(out, instance, lambda ps: any(p.terminating for p in ps), timeout=10)
        terminating = [p for p in final if p.terminating]
        assert len(terminating) == 1  # sent before close() returned, once
        assert received_total(final, RECORDS) == 30.0
    finally:
        if not closed:
            consumer.close(timeout=10)
        logs_cm.__exit__(None, None, None)


@pytest.mark.broker
def test_async_consumer_client_instance_id(telemetry_broker: tuple[Any, Path]) -> None:
    broker, out = telemetry_broker

    async def run() -> uuid.UUID:
        consumer: AsyncKafkaConsumer[bytes, bytes] = AsyncKafkaConsumer(
            **base_config(broker.bootstrap_servers, group_id=unique("g-telemetry-aio"))
        )
        try:
            return await consumer.client_instance_id(timeout=30)
        finally:
            await consumer.close(timeout=30)

    instance = asyncio.run(run())
    pushes = wait_pushes(out, instance, lambda ps: any(p.terminating for p in ps), timeout=10)
    assert [p.terminating for p in pushes][-1:] == [True]


@pytest.mark.broker
def test_disabled_metrics_push_has_no_instance_id(telemetry_broker: tuple[Any, Path]) -> None:
    broker, _out = telemetry_broker
    consumer = KafkaConsumer(
        **base_config(broker.bootstrap_servers, **{"enable.metrics.push": False})
    )
    try:
        with pytest.raises(IllegalStateError, match=r"enable\.metrics\.push"):
            consumer.client_instance_id(timeout=1)
    finally:
        consumer.close(timeout=10)


@pytest.mark.broker
def test_share_consumers_push_and_terminate(telemetry_broker: tuple[Any, Path]) -> None:
    broker, out = telemetry_broker
    topic = unique("telemetry-share")
    broker.create_topic(topic, partitions=1)
    config = {"bootstrap.servers": broker.bootstrap_servers, "group.id": unique("sg-telemetry")}
    consumer: KafkaShareConsumer[bytes, bytes] = KafkaShareConsumer(config)
    try:
        consumer.subscribe([topic])
        instance = consumer.client_instance_id(timeout=30)
        consumer.poll(0.5)
        pushes = wait_pushes(out, instance, lambda ps: bool(ps), timeout=30)
        assert pushes and not pushes[0].terminating
    finally:
        consumer.close(timeout=30)
    final = wait_pushes(out, instance, lambda ps: any(p.terminating for p in ps), timeout=10)
    assert [p.terminating for p in final].count(True) == 1

    async def run() -> uuid.UUID:
        aconsumer: AsyncKafkaShareConsumer[bytes, bytes] = AsyncKafkaShareConsumer(
            {**config, "group.id": unique("sg-telemetry-aio")}
        )
        try:
            aconsumer.subscribe([topic])
            return await aconsumer.client_instance_id(timeout=30)
        finally:
            await aconsumer.close(timeout=30)

    async_instance = asyncio.run(run())
    assert async_instance != instance
    final = wait_pushes(out, async_instance, lambda ps: any(p.terminating for p in ps), timeout=10)
    assert [p.terminating for p in final][-1:] == [True]


@pytest.mark.broker
def test_snappy_and_uncompressed_pushes_are_decoded_by_the_broker(
    telemetry_broker: tuple[Any, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker accepts zstd, lz4, gzip and snappy (in that order): with zstd refused the
    client writes snappy (snappy-java framing; lz4 is not written), with every codec refused
    it sends the payload as is ("none" always works). The broker decodes both."""
    broker, out = telemetry_broker
    for codec in (COMPRESSION_SNAPPY, COMPRESSION_NONE):
        writers = {c: f for c, f in telemetry_module._COMPRESSORS.items() if c == codec}
        monkeypatch.setattr(telemetry_module, "_COMPRESSORS", writers)
        with capture_logs() as logs:
            consumer = KafkaConsumer(
                **base_config(broker.bootstrap_servers, group_id=unique("g-telemetry-codec"))
            )
            try:
                instance = consumer.client_instance_id(timeout=30)
            finally:
                consumer.close(timeout=30)
        sent = {e["compression"] for e in list(logs) if e["event"] == "push_telemetry"}
        assert sent == {codec}
        pushes = wait_pushes(out, instance, lambda ps: any(p.terminating for p in ps), timeout=10)
        assert pushes[-1].terminating
        assert "org.apache.kafka.consumer.connection.creation.total" in pushes[-1].points
