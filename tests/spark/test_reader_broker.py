"""The executors' range reader against a real Kafka 4.x broker (no Spark): exactly
``[start, end)`` across many fetches, every compression codec, headers, the Arrow schema, and
data loss (records deleted below the range) with failOnDataLoss on and off."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from kafka_actors.spark.reader import (
    ARROW_SCHEMA,
    ARROW_SCHEMA_WITH_HEADERS,
    DataLossError,
    RangeReader,
)
from tests.spark.helpers import unique

pytestmark = pytest.mark.broker

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
#: The records carry timestamps of 2023: with the default retention (7 days) the broker's
#: retention check (30 s after it starts, then every 5 min) would delete them mid-test.
KEEP = {"retention.ms": "-1"}


def _produce(bootstrap: str, topic: str, codec: str, count: int) -> None:
    """Records ``0 .. count-1`` into the (empty) partition of ``codec``, record ``i`` at offset
    ``i``. Idempotent: a plain producer with several requests in flight lets a batch that
    succeeds overtake an earlier one that is retried (a Produce answered NOT_LEADER_OR_FOLLOWER
    while a new topic's leader is still being set up): the log then held record 116 at offset 5
    (issue 10, bug 5, taken for a wrong value from the reader; see test_reader_reordered_log)."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "linger.ms": 5,
            "batch.num.messages": 37,
            "enable.idempotence": True,
        }
    )
    landed: dict[int, int] = {}

    def delivered(err: Any, msg: Any, i: int) -> None:
        landed[i] = -1 if err is not None else msg.offset()

    for i in range(count):
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=f"{codec}-{i}".encode() * 3,
            partition=CODECS.index(codec),
            headers=[("n", str(i).encode()), ("codec", codec.encode())],
            timestamp=1_700_000_000_000 + i,
            on_delivery=lambda err, msg, i=i: delivered(err, msg, i),
        )
    assert producer.flush(30) == 0
    moved = {i: o for i, o in landed.items() if o != i}
    assert len(landed) == count and not moved, f"not at their produce index: {moved}"


def _read(reader: RangeReader, topic: str, partition: int, start: int, end: int) -> pa.Table:
    batches = list(reader.read(topic, partition, start, end))
    return pa.Table.from_batches(batches) if batches else pa.table({})


def test_exact_ranges_every_codec_with_headers(kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("reader")
    kafka_broker.create_topic(topic, partitions=len(CODECS), config=KEEP)
    for codec in CODECS:
        _produce(bootstrap, topic, codec, 500)
    reader = RangeReader(
        {"bootstrap.servers": bootstrap, "max.partition.fetch.bytes": "2048"},
        include_headers=True,
    )
    for partition, codec in enumerate(CODECS):
        table = _read(reader, topic, partition, 5, 433)
        assert table.schema == ARROW_SCHEMA_WITH_HEADERS
        assert table.column("offset").to_pylist() == list(range(5, 433)), codec
        assert table.column("value").to_pylist()[0] == f"{codec}-5".encode() * 3
        assert table.column("key").to_pylist()[-1] == b"k432"
        assert set(table.column("topic").to_pylist()) == {topic}
        assert set(table.column("partition").to_pylist()) == {partition}
        assert set(table.column("timestampType").to_pylist()) == {0}
        first_ts = table.column("timestamp").to_pylist()[0]
        assert int(first_ts.timestamp() * 1000) == 1_700_000_000_005
        headers = table.column("headers").to_pylist()
        assert headers[0] == [
            {"key": "n", "value": b"5"},
            {"key": "codec", "value": codec.encode()},
        ]
    plain = RangeReader({"bootstrap.servers": bootstrap})
    table = _read(plain, topic, 0, 499, 500)
    assert table.schema == ARROW_SCHEMA and table.num_rows == 1


def test_data_loss(kafka_broker: Any) -> None:
    from confluent_kafka import TopicPartition as CTopicPartition
    from confluent_kafka.admin import AdminClient

    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("loss")
    kafka_broker.create_topic(topic, partitions=len(CODECS), config=KEEP)
    _produce(bootstrap, topic, "none", 100)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([CTopicPartition(topic, 0, 60)])
    for future in futures.values():
        future.result(30)
    strict = RangeReader({"bootstrap.servers": bootstrap})
    with pytest.raises(DataLossError) as info:
        _read(strict, topic, 0, 10, 80)
    assert "failOnDataLoss" in str(info.value)
    lenient = RangeReader({"bootstrap.servers": bootstrap}, fail_on_data_loss=False)
    table = _read(lenient, topic, 0, 10, 80)
    assert table.column("offset").to_pylist() == list(range(60, 80))
    assert lenient.skipped == 50


@pytest.mark.parametrize(
    ("listener", "mechanism"),
    [("SASL_PLAINTEXT", "SCRAM-SHA-512"), ("SSL", None), ("SASL_SSL", "PLAIN")],
    ids=lambda v: str(v),
)
def test_secured_listeners(kafka_broker_secured: Any, listener: str, mechanism: str | None) -> None:
    from confluent_kafka import Producer

    broker = kafka_broker_secured
    topic = unique("secured")
    broker.create_topic(topic, partitions=1)
    producer = Producer(broker.client_config(listener, mechanism=mechanism))
    for i in range(50):
        producer.produce(topic, value=str(i).encode())
    assert producer.flush(30) == 0
    settings = {
        "bootstrap.servers": broker.listener_bootstrap(listener),
        "security.protocol": broker.listener(listener).security_protocol,
    }
    if mechanism is not None:
        settings.update(
            {"sasl.mechanism": mechanism, "sasl.username": "alice", "sasl.password": "alice-secret"}
        )
    if broker.listener(listener).uses_ssl:
        settings["ssl.truststore.location"] = str(broker.ca_path)
    table = _read(RangeReader(settings), topic, 0, 10, 50)
    assert table.column("value").to_pylist() == [str(i).encode() for i in range(10, 50)]
