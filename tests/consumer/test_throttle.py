"""Broker throttling (KIP-219) against a real broker with a client quota.

The broker answers a Fetch that exceeds the client's ``consumer_byte_rate`` quota with a
``throttle_time_ms`` and expects the client to send nothing more to it until that time has
passed. The consumer must measure it (``fetch-throttle-time-avg`` / ``-max`` in ``metrics()``,
which always said 0.0 before) and honour it (requests to that node wait in their queue).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.alter_client_quotas.v1.request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from kio.schema.alter_client_quotas.v1.response import AlterClientQuotasResponse
from kio.static.primitive import f64

from kafka_actors import KafkaConsumer
from kafka_actors.metrics import FETCH_MANAGER
from kafka_actors.protocol.connection.node import NodeConnection
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.wire.framing import decode_response
from kafka_actors.testing.client import BlockingKafkaConnection
from tests.consumer.helpers import unique

RECORDS = 120
VALUE = b"v" * 1_000
# consumer_byte_rate (bytes/s). The broker measures the rate over at least 10 s (its quota
# window samples): ~120 KB in 16 KB fetches exceed 8 KB/s after ~80 KB, then it throttles.
BYTE_RATE = 8_000.0


def _set_quota(bootstrap: str, client_id: str, rate: float | None) -> None:
    op = (
        OpData(key="consumer_byte_rate", value=f64(0.0), remove=True)
        if rate is None
        else OpData(key="consumer_byte_rate", value=f64(float(rate)), remove=False)
    )
    request = AlterClientQuotasRequest(
        entries=(
            EntryData(
                entity=(EntityData(entity_type="client-id", entity_name=client_id),), ops=(op,)
            ),
        ),
        validate_only=False,
    )
    with BlockingKafkaConnection.bootstrap(bootstrap) as conn:
        response = decode_response(conn.send_raw(request), AlterClientQuotasResponse)
    errors = [int(e.error_code) for e in response.entries]
    assert errors == [0], response


def _produce(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16_384, "log_level": 3}
    )
    for i in range(RECORDS):
        producer.produce(topic, value=VALUE, key=str(i).encode(), partition=0)
    assert producer.flush(30) == 0


class _Recorder:
    """Wraps NodeConnection.flush / throttle (class-wide, restored after the test) to see
    every request written and every throttle, with the time each happened."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.throttles: list[tuple[int, float, float]] = []  # (node, at, until)
        self.sent: list[tuple[int, float, float]] = []  # (node, at, throttled_until then)
        self.held = 0  # flushes that wrote nothing because of a throttle, requests queued


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Recorder]:
    rec = _Recorder()
    flush, throttle = NodeConnection.flush, NodeConnection.throttle

    def recording_flush(self: NodeConnection, now: float) -> Any:
        until, queued = self.throttled_until, self.queued_count
        out, failed = flush(self, now)
        with rec.lock:
            if out and self.ready:
                rec.sent.append((self.node_id, now, until))
            elif queued and self.ready and now < until:
                rec.held += 1
        return out, failed

    def recording_throttle(self: NodeConnection, now: float, ms: int) -> None:
        throttle(self, now, ms)
        with rec.lock:
            rec.throttles.append((self.node_id, now, self.throttled_until))

    monkeypatch.setattr(NodeConnection, "flush", recording_flush)
    monkeypatch.setattr(NodeConnection, "throttle", recording_throttle)
    yield rec


def test_fetch_throttle_is_measured_and_honoured(kafka_broker: Any, recorder: _Recorder) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("throttled")
    kafka_broker.create_topic(topic, partitions=1)
    _produce(bootstrap, topic)
    client_id = unique("throttled-client")
    _set_quota(bootstrap, client_id, BYTE_RATE)
    time.sleep(1.0)  # the quota travels through the metadata log to the broker
    try:
        config = {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "max.partition.fetch.bytes": 16 * 1024,
            "fetch.max.bytes": 16 * 1024,
        }
        tp = TopicPartition(topic, 0)
        with KafkaConsumer(config) as consumer:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            got: list[int] = []
            deadline = time.monotonic() + 90
            while len(got) < RECORDS:
                assert time.monotonic() < deadline, f"{len(got)} of {RECORDS} records"
                got.extend(r.offset for r in consumer.poll(0.5))
            metrics = consumer.metrics()
            java_max = metrics.find(FETCH_MANAGER, "fetch-throttle-time-max").value()
            java_avg = metrics.find(FETCH_MANAGER, "fetch-throttle-time-avg").value()
        assert got == list(range(RECORDS))
    finally:
        _set_quota(bootstrap, client_id, None)
    assert metrics["fetch-throttle-time-max"] > 0, metrics
    assert 0 < metrics["fetch-throttle-time-avg"] <= metrics["fetch-throttle-time-max"], metrics
    # The same by Java's MetricName (windowed: the last 2 x 30 s of Fetch responses).
    assert java_max > 0 and 0 < java_avg <= java_max, (java_avg, java_max)
    with recorder.lock:
        throttles, sent, held = list(recorder.throttles), list(recorder.sent), recorder.held
    assert throttles, "the broker never throttled the client: no quota in force?"
    # KIP-219: nothing was written to a throttled node before its throttle ended ...
    early = [(node, at, until) for node, at, until in sent if at < until]
    assert early == [], early
    # ... and requests did wait for it (the consumer had more to ask meanwhile).
    assert held > 0
    for node, at, until in throttles:
        later = [s_at for s_node, s_at, _ in sent if s_node == node and s_at > at]
        if later:
            assert min(later) >= until - 1e-6, (node, at, until, min(later))
