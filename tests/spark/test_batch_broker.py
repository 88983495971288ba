"""Batch reads (``spark.read.format("kafka-actors")``) against a real Kafka 4.x broker, Spark
local[2]: exact ranges by offsets and by timestamps on every codec, compared row by row with
what was produced; subscribe / subscribePattern / assign; no group is joined. And the option
errors as a Spark user meets them: a misspelt option at ``load()``, ``endingOffsets`` in a
streaming query; ``startingOffsetsByTimestamp`` of a new group's streaming query starts where
ListOffsets by timestamp says."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kafka_actors import KafkaConsumer, TopicPartition
from tests.spark.helpers import describe_group, unique

pytestmark = [pytest.mark.broker, pytest.mark.timeout(600)]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
COUNT = 400
#: Recent timestamps: the broker's retention (7 days by default) deletes records older than
#: that, the active segment included, within minutes of producing them.
BASE_TS = (int(time.time()) - 3600) * 1000


def _record(codec: str, i: int) -> tuple[bytes, bytes, int, list[tuple[str, bytes]]]:
    # timestamps step by 10 ms so a timestamp between two records has one right answer
    return (
        f"k{i}".encode(),
        f"{codec}-{i}".encode() * 3,
        BASE_TS + 10 * i,
        [("n", str(i).encode()), ("codec", codec.encode())],
    )


@pytest.fixture(scope="module")
def codec_topic(kafka_broker: Any) -> str:
    """One partition per codec (partition = index in CODECS), COUNT records each."""
    from confluent_kafka import Producer

    topic = unique("batch")
    kafka_broker.create_topic(topic, partitions=len(CODECS))
    for partition, codec in enumerate(CODECS):
        producer = Producer(
            {
                "bootstrap.servers": kafka_broker.bootstrap_servers,
                "compression.type": codec,
                "linger.ms": 5,
                "batch.num.messages": 37,
            }
        )
        for i in range(COUNT):
            key, value, ts, headers = _record(codec, i)
            producer.produce(
                topic, key=key, value=value, partition=partition, headers=headers, timestamp=ts
            )
        assert producer.flush(30) == 0
    return topic


def _batch(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("kafka-actors").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _rows(df: Any) -> dict[int, list[tuple[Any, ...]]]:
    """partition → its rows in offset order, as (offset, key, value, ts ms, type, headers)."""
    out: dict[int, list[tuple[Any, ...]]] = {}
    for r in df.collect():
        headers = [(h["key"], bytes(h["value"])) for h in (r["headers"] or [])]
        ts = round(r["timestamp"].timestamp() * 1000)
        out.setdefault(r["partition"], []).append(
            (r["offset"], bytes(r["key"]), bytes(r["value"]), ts, r["timestampType"], headers)
        )
    for rows in out.values():
        rows.sort()
    return out


def _expected(start: int, end: int, partition: int) -> list[tuple[Any, ...]]:
    codec = CODECS[partition]
    return [(i, *_record(codec, i)[:3], 0, _record(codec, i)[3]) for i in range(start, end)]


def _per_partition(topic: str, values: dict[int, int]) -> str:
    return json.dumps({topic: {str(p): v for p, v in values.items()}})


def test_exact_ranges_by_offsets_every_codec(
    spark: Any, kafka_broker: Any, codec_topic: str
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    starts = {p: 3 + 17 * p for p in range(len(CODECS))}
    ends = {p: COUNT - 5 * p for p in range(len(CODECS))}
    ends[0] = -1  # latest
    df = _batch(
        spark,
        bootstrap,
        subscribe=codec_topic,
        includeHeaders="true",
        startingOffsets=_per_partition(codec_topic, starts),
        endingOffsets=_per_partition(codec_topic, ends),
        maxRecordsPerPartition="90",
    )
    assert df.rdd.getNumPartitions() >= sum(
        -(-((COUNT if e < 0 else e) - starts[p]) // 90) for p, e in ends.items()
    )
    rows = _rows(df)
    for partition, codec in enumerate(CODECS):
        end = COUNT if ends[partition] < 0 else ends[partition]
        assert rows[partition] == _expected(starts[partition], end, partition), codec
    # defaults: earliest to latest, every record once
    everything = _rows(_batch(spark, bootstrap, subscribe=codec_topic, includeHeaders="true"))
    for partition in range(len(CODECS)):
        assert everything[partition] == _expected(0, COUNT, partition)


def test_exact_ranges_by_timestamps_every_codec(
    spark: Any, kafka_broker: Any, codec_topic: str
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    # one timestamp for all: records 100 (exactly at) .. 250 (first at or after 2495 ms)
    rows = _rows(
        _batch(
            spark,
            bootstrap,
            subscribePattern=f"{codec_topic}$",
            includeHeaders="true",
            startingTimestamp=str(BASE_TS + 1000),
            endingTimestamp=str(BASE_TS + 2495),
        )
    )
    assert sorted(rows) == list(range(len(CODECS)))
    for partition, codec in enumerate(CODECS):
        assert rows[partition] == _expected(100, 250, partition), codec
    # per partition, the ending past every record → the partition's end
    starts = {p: BASE_TS + 10 * (20 * p) + 5 for p in range(len(CODECS))}
    ends = {p: BASE_TS + 10 * (300 + p) for p in range(len(CODECS))}
    ends[4] = BASE_TS + 10 * COUNT + 1
    rows = _rows(
        _batch(
            spark,
            bootstrap,
            subscribe=codec_topic,
            includeHeaders="true",
            startingOffsetsByTimestamp=_per_partition(codec_topic, starts),
            endingOffsetsByTimestamp=_per_partition(codec_topic, ends),
        )
    )
    for partition, codec in enumerate(CODECS):
        end = COUNT if partition == 4 else 300 + partition
        assert rows[partition] == _expected(20 * partition + 1, end, partition), codec


def test_assign_and_no_group(spark: Any, kafka_broker: Any, codec_topic: str) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    group = unique("batch-group")
    df = _batch(
        spark,
        bootstrap,
        assign=json.dumps({codec_topic: [1, 3]}),
        startingOffsets=_per_partition(codec_topic, {1: 10, 3: -2}),
        endingOffsets=_per_partition(codec_topic, {1: 20, 3: 5}),
        **{"kafka.group.id": group},
    )
    rows = df.select("partition", "offset", "value").collect()
    got = sorted((r["partition"], r["offset"], bytes(r["value"])) for r in rows)
    want = [(1, i, _record("gzip", i)[1]) for i in range(10, 20)]
    want += [(3, i, _record("lz4", i)[1]) for i in range(5)]
    assert got == sorted(want)
    assert "headers" not in df.columns
    # a batch read joins no group and commits nothing
    assert describe_group(kafka_broker, group) == {}


def test_batch_option_errors(spark: Any, kafka_broker: Any, codec_topic: str) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    with pytest.raises(Exception, match="did you mean startingOffsets"):
        _batch(spark, bootstrap, subscribe=codec_topic, startingOffset="earliest")
    with pytest.raises(Exception, match="must name every partition"):
        _batch(
            spark,
            bootstrap,
            subscribe=codec_topic,
            startingOffsets=_per_partition(codec_topic, {0: 1}),
        ).collect()
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy=latest"):
        _batch(
            spark, bootstrap, subscribe=codec_topic, startingTimestamp=str(BASE_TS + 7_200_000)
        ).collect()
    late = _batch(
        spark,
        bootstrap,
        subscribe=codec_topic,
        startingTimestamp=str(BASE_TS + 7_200_000),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert late.count() == 0


def test_streaming_option_errors(spark: Any, kafka_broker: Any, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap_servers

    def base() -> Any:
        return (
            spark.readStream.format("kafka-actors")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("kafka.group.id", unique("g"))
            .option("subscribe", "t")
        )

    with pytest.raises(Exception, match="did you mean maxOffsetsPerTrigger"):
        base().option("maxOffsetPerTrigger", "5").load()
    with pytest.raises(Exception, match="endingOffsets is for batch reads"):
        df = base().option("endingOffsets", "latest").load()
        query = (
            df.writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .start()
        )
        try:
            query.awaitTermination(120)
            query.processAllAvailable()
        finally:
            query.stop()


def test_streaming_starts_new_group_by_timestamp(
    spark: Any, kafka_broker: Any, codec_topic: str, tmp_path: Path
) -> None:
    """Show 4: a new group's query starts each partition where ListOffsets by timestamp says
    (asked here through the consumer's offsets_for_times and Kafka's kafka-get-offsets tool),
    then reads to the end; the group's committed offsets follow."""
    bootstrap = kafka_broker.bootstrap_servers
    group = unique("ts-group")
    stamps = {p: BASE_TS + 10 * (50 * p) + 3 for p in range(len(CODECS))}
    with KafkaConsumer({"bootstrap.servers": bootstrap}) as consumer:
        found = consumer.offsets_for_times(
            {TopicPartition(codec_topic, p): ts for p, ts in stamps.items()}
        )
    expected_start = {tp.partition: om.offset for tp, om in found.items() if om is not None}
    assert expected_start == {p: 50 * p + 1 for p in range(len(CODECS))}
    # and Kafka's own tool (ListOffsets by timestamp from the Java client) agrees
    for partition, stamp in stamps.items():
        proc = kafka_broker.run_tool(
            "kafka-get-offsets",
            [
                *("--bootstrap-server", bootstrap, "--topic", codec_topic),
                *("--partitions", str(partition), "--time", str(stamp)),
            ],
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [f"{codec_topic}:{partition}:{expected_start[partition]}"]
    df = (
        spark.readStream.format("kafka-actors")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.group.id", group)
        .option("subscribe", codec_topic)
        .option("startingOffsetsByTimestamp", _per_partition(codec_topic, stamps))
        .load()
    )
    out = tmp_path / "out"
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(300)
    finally:
        query.stop()
    rows = spark.read.parquet(str(out)).select("partition", "offset").collect()
    offsets: dict[int, list[int]] = {}
    for r in rows:
        offsets.setdefault(r["partition"], []).append(r["offset"])
    for partition, start in expected_start.items():
        assert sorted(offsets[partition]) == list(range(start, COUNT)), partition
    committed = describe_group(kafka_broker, group)
    assert committed == {p: (COUNT, COUNT, 0) for p in range(len(CODECS))}, committed
