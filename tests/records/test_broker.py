"""Real broker: what confluent-kafka produces (every codec, headers, null keys/values, explicit
ms timestamps, multi-record batches, transactions with aborts) is what we decode from the raw
Fetch bytes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from kafka_actors.protocol.records.decode import (
    DecodedRecords,
    IsolationLevel,
    TimestampType,
    decode_records,
)
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.protocol.wire.requests import FetchPartition
from kafka_actors.testing.client import BlockingKafkaConnection

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # noqa: E402

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]

FETCH_VERSION = 12  # topics by name; supported by Kafka 3.x and 4.x


@dataclass
class Fetched:
    records: bytes
    high_watermark: int
    last_stable_offset: int
    aborted: tuple[Any, ...]


def _fetch(
    conn: BlockingKafkaConnection, topic: str, partition: int, offset: int, isolation: int
) -> Fetched:
    response = conn.request(
        ApiKey.FETCH,
        version=FETCH_VERSION,
        partitions=[FetchPartition(topic, partition, offset, partition_max_bytes=4096)],
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=isolation,
    )
    assert response.error_code == 0
    (data,) = [p for t in response.responses for p in t.partitions]
    assert data.error_code == 0, data.error_code
    return Fetched(
        bytes(data.records or b""),
        int(data.high_watermark),
        int(data.last_stable_offset),
        tuple(data.aborted_transactions or ()),
    )


def fetch_all(
    bootstrap: str, topic: str, isolation: IsolationLevel, partition: int = 0
) -> tuple[DecodedRecords, list[DecodedRecords]]:
    """Fetch and decode from offset 0 until the high watermark / last stable offset.

    Returns the concatenated records (one DecodedRecords holding every column) and the
    per-fetch results. Fetches use a small partition_max_bytes, so batches straddle fetch
    responses and truncated trailing batches occur.
    """
    with BlockingKafkaConnection.bootstrap(bootstrap, client_id="records-test") as conn:
        offset = 0
        parts: list[DecodedRecords] = []
        deadline = time.monotonic() + 60
        while True:
            fetched = _fetch(conn, topic, partition, offset, int(isolation))
            target = (
                fetched.last_stable_offset
                if isolation == IsolationLevel.READ_COMMITTED
                else fetched.high_watermark
            )
            if offset >= target:
                break
            decoded = decode_records(
                fetched.records,
                topic,
                partition,
                fetch_offset=offset,
                isolation_level=isolation,
                aborted_transactions=fetched.aborted,
            )
            assert decoded.next_fetch_offset >= offset
            parts.append(decoded)
            offset = decoded.next_fetch_offset
            assert time.monotonic() < deadline, "no progress fetching"
    merged = DecodedRecords(topic, partition, next_fetch_offset=offset)
    for d in parts:
        base = len(merged.offsets)
        merged.offsets += d.offsets
        merged.timestamps += d.timestamps
        merged.keys += d.keys
        merged.values += d.values
        merged.headers += d.headers
        merged.batch_ends += [base + e for e in d.batch_ends]
        merged.batch_timestamp_types += d.batch_timestamp_types
        merged.batch_leader_epochs += d.batch_leader_epochs
    return merged, parts


def _create_topic(bootstrap: str, config: dict[str, str] | None = None) -> str:
    name = f"records-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, 1, 1, config=config or {})])
    futures[name].result(timeout=60)
    return name


@dataclass(frozen=True)
class Produced:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def _produce(bootstrap: str, topic: str, codec: str, n: int = 600) -> list[Produced]:
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "linger.ms": 200,
            "batch.num.messages": 250,
            "enable.idempotence": True,
        }
    )
    produced: list[Produced] = []
    base_ts = int(time.time() * 1000) - 10_000

    def make(i: int) -> Any:
        key = None if i % 9 == 0 else b"key-%d" % i
        value = None if i % 11 == 5 else (b"value-%d-" % i) * (i % 40)
        headers = [("seq", b"%d" % i), ("null", None), ("ü", b"\x00\x01")][: i % 4]
        ts = base_ts + i * 7 + (i % 3)  # millisecond precision matters

        def on_delivery(err: Any, msg: Any) -> None:
            assert err is None, err
            produced.append(Produced(msg.offset(), ts, key, value, tuple(headers)))

        producer.produce(topic, value=value, key=key, headers=headers, timestamp=ts,
                         partition=0, on_delivery=on_delivery)  # fmt: skip

    for i in range(n):
        make(i)
        if i % 200 == 199:
            producer.poll(0)
    assert producer.flush(60) == 0
    produced.sort(key=lambda p: p.offset)
    assert len(produced) == n
    return produced


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_decode_what_confluent_kafka_produced(kafka_broker: Any, codec: str) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = _create_topic(bootstrap)
    produced = _produce(bootstrap, topic, codec)
    for isolation in IsolationLevel:
        decoded, parts = fetch_all(bootstrap, topic, isolation)
        rows = list(
            zip(
                decoded.offsets,
                decoded.timestamps,
                decoded.keys,
                decoded.values,
                decoded.headers,
                strict=True,
            )
        )
        assert rows == [(p.offset, p.timestamp, p.key, p.value, p.headers) for p in produced]
        assert {r.timestamp_type for r in decoded} == {TimestampType.CREATE_TIME}
        assert all(r.leader_epoch is not None and r.leader_epoch >= 0 for r in decoded)
        assert decoded.next_fetch_offset == produced[-1].offset + 1
        # linger.ms made multi-record batches; small partition_max_bytes split them over fetches.
        assert len(decoded.batch_ends) < len(produced) / 10
        assert len(parts) > 1


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_decode_what_the_java_broker_compressed(kafka_broker: Any, codec: str) -> None:
    """A topic's own compression.type makes the broker recompress uncompressed batches with
    Kafka's Java codecs (GZIPOutputStream, snappy-java's xerial stream, Kafka's LZ4 block
    stream, zstd-jni): the bounded decompression (block-header walks, declared sizes) reads
    them as before."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = _create_topic(bootstrap, {"compression.type": codec})
    produced = _produce(bootstrap, topic, "none", n=300)
    with BlockingKafkaConnection.bootstrap(bootstrap, client_id="records-test") as conn:
        first = _fetch(conn, topic, 0, 0, int(IsolationLevel.READ_UNCOMMITTED)).records
    codec_id = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]
    assert first[21 + 1] & 0x07 == codec_id  # attributes (int16 at 21): the broker's codec
    decoded, _parts = fetch_all(bootstrap, topic, IsolationLevel.READ_UNCOMMITTED)
    assert list(zip(decoded.offsets, decoded.keys, decoded.values, strict=True)) == [
        (p.offset, p.key, p.value) for p in produced
    ]


def test_log_append_time_from_the_broker(kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = _create_topic(bootstrap, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    _produce(bootstrap, topic, "lz4", n=50)
    after = int(time.time() * 1000)
    decoded, _ = fetch_all(bootstrap, topic, IsolationLevel.READ_UNCOMMITTED)
    assert len(decoded) == 50
    assert all(before - 1000 <= ts <= after + 1000 for ts in decoded.timestamps)
    assert {r.timestamp_type for r in decoded} == {TimestampType.LOG_APPEND_TIME}
    start = 0
    for end in decoded.batch_ends:  # one broker append time per batch
        assert len(set(decoded.timestamps[start:end])) == 1
        start = end


def _transactional_producer(bootstrap: str, txn_id: str, codec: str) -> Any:
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "compression.type": codec,
            "linger.ms": 5,
        }
    )
    producer.init_transactions(60)
    return producer


def _script() -> Iterator[tuple[str, str, bytes | None]]:
    """Interleaved steps: (producer, action, value); actions begin/produce/commit/abort."""
    yield ("a", "begin", None)
    yield ("b", "begin", None)
    yield ("a", "produce", b"a1-committed")
    yield ("b", "produce", b"b1-aborted")
    yield ("a", "produce", b"a1-committed-2")
    yield ("b", "produce", b"b1-aborted-2")
    yield ("b", "abort", None)
    yield ("b", "begin", None)
    yield ("b", "produce", b"b2-committed")
    yield ("a", "produce", b"a1-committed-3")
    yield ("a", "commit", None)
    yield ("a", "begin", None)
    yield ("a", "produce", b"a2-aborted")
    yield ("b", "produce", b"b2-committed-2")
    yield ("a", "produce", b"a2-aborted-2")
    yield ("b", "commit", None)
    yield ("a", "abort", None)
    yield ("a", "begin", None)
    yield ("a", "produce", b"a3-committed")
    yield ("a", "commit", None)


def test_read_committed_against_transactions(kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = _create_topic(bootstrap)
    data_values = produce_transactions(bootstrap, topic)

    uncommitted, _ = fetch_all(bootstrap, topic, IsolationLevel.READ_UNCOMMITTED)
    assert uncommitted.values == data_values  # every data record, no control record
    committed, _ = fetch_all(bootstrap, topic, IsolationLevel.READ_COMMITTED)
    assert committed.values == [v for v in data_values if b"aborted" not in v]
    assert b"a1-committed" in committed.values and b"b2-committed-2" in committed.values
    # The log ends with a commit marker: both reads advanced past it.
    assert committed.next_fetch_offset == uncommitted.next_fetch_offset
    assert committed.next_fetch_offset > max(uncommitted.offsets)


def produce_transactions(bootstrap: str, topic: str) -> list[bytes]:
    """Two transactional producers (lz4, none) interleaved as :func:`_script` says, and plain
    records between them, into partition 0: every data value, in offset order."""
    run = uuid.uuid4().hex[:8]
    producers = {
        "a": _transactional_producer(bootstrap, f"txn-a-{run}", "lz4"),
        "b": _transactional_producer(bootstrap, f"txn-b-{run}", "none"),
    }
    plain = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    data_values: list[bytes] = []
    for i, (who, action, value) in enumerate(_script()):
        p = producers[who]
        if action == "begin":
            p.begin_transaction()
        elif action == "produce":
            assert value is not None
            p.produce(topic, value=value, key=who.encode(), partition=0, headers=[("i", b"%d" % i)])
            assert p.flush(30) == 0  # land in the log now, interleaved with the other producer
            data_values.append(value)
            if i % 3 == 0:  # a non-transactional record between transactional ones
                plain.produce(topic, value=b"plain-%d" % i, partition=0)
                assert plain.flush(30) == 0
                data_values.append(b"plain-%d" % i)
        elif action == "commit":
            p.commit_transaction(60)
        else:
            p.abort_transaction(60)
    for p in producers.values():
        p.flush(10)
    return data_values
