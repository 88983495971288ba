"""Streaming options Spark users rely on, against a real Kafka 4.x broker, Spark local[2]:
``minOffsetsPerTrigger`` holds a batch back until enough records are there, or until
``maxTriggerDelay`` has passed; ``maxRecordsPerPartition`` caps the records of each Spark
task."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.spark.helpers import describe_group, produce, source, unique, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.timeout(600)]


def _batches(query: Any) -> list[int]:
    return [int(p["numInputRows"]) for p in query.recentProgress if int(p["numInputRows"])]


def test_min_offsets_per_trigger_and_max_trigger_delay(
    spark: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("minoff")
    kafka_broker.create_topic(topic, partitions=2)
    produce(bootstrap, topic, 100, partitions=2)
    held = (
        source(
            spark,
            bootstrap,
            unique("minoff-g"),
            topic,
            minOffsetsPerTrigger="300",
            maxTriggerDelay="10m",
        )
        .writeStream.format("memory")
        .queryName("minoff_held")
        .option("checkpointLocation", str(tmp_path / "ck-held"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        # Many triggers pass with 100 < 300 records available: no batch reads them.
        wait_for(lambda: len(held.recentProgress) >= 1, 120, "the first progress")
        time.sleep(5)
        assert _batches(held) == [], held.recentProgress
        produce(bootstrap, topic, 250, start=100, partitions=2)
        wait_for(lambda: sum(_batches(held)) >= 350, 120, "one batch of the 350 records")
        assert _batches(held) == [350]
    finally:
        held.stop()
    assert spark.sql("select count(*) from minoff_held").collect()[0][0] == 350

    # a short maxTriggerDelay lets the few records through
    delayed = (
        source(
            spark,
            bootstrap,
            unique("minoff-g"),
            topic,
            minOffsetsPerTrigger="100000",
            maxTriggerDelay="2s",
        )
        .writeStream.format("memory")
        .queryName("minoff_delayed")
        .option("checkpointLocation", str(tmp_path / "ck-delayed"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: sum(_batches(delayed)) >= 350, 120, "the records after the delay")
    finally:
        delayed.stop()
    assert _batches(delayed) == [350]


def test_max_records_per_partition(spark: Any, kafka_broker: Any, tmp_path: Path) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("maxrec")
    kafka_broker.create_topic(topic, partitions=2)
    produce(bootstrap, topic, 1000, partitions=2)
    tasks: list[int] = []
    sizes: list[list[int]] = []

    def each_batch(batch: Any, _batch_id: int) -> None:
        tasks.append(batch.rdd.getNumPartitions())
        sizes.append(batch.rdd.glom().map(len).collect())

    query = (
        source(spark, bootstrap, unique("maxrec-g"), topic, maxRecordsPerPartition="120")
        .writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300)
    assert query.exception() is None
    counts = [n for batch in sizes for n in batch]
    assert sum(counts) == 1000
    assert max(counts) <= 120 and tasks[-1] >= 10, (tasks, sizes)


def test_progress_carries_the_members_group_lag(
    spark: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    """Each progress reports the group's lag as the member saw it (group_lag over the
    progress's offsets): with every record produced before the query, the lag while batch N
    runs is everything not read before it, and after the last one it is zero, as Kafka's
    kafka-consumer-groups tool says."""
    from kafka_actors.spark import group_lag

    bootstrap = kafka_broker.bootstrap_servers
    topic, group = unique("lag"), unique("lag-g")
    kafka_broker.create_topic(topic, partitions=3)
    total = 3000
    produce(bootstrap, topic, total, partitions=3)
    query = (
        source(spark, bootstrap, group, topic, maxOffsetsPerTrigger="700")
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300)
    progress = [p for p in query.recentProgress if int(p["numInputRows"])]
    assert len(progress) >= 5
    read = 0
    for index, p in enumerate(progress):
        (entry,) = p["sources"]
        # Spark reports no start for a query's first batch
        expected = None if index == 0 else total - read
        assert group_lag(entry) == expected, (entry["startOffset"], entry["latestOffset"])
        read += int(p["numInputRows"])
        assert group_lag(entry, after_batch=True) == total - read, entry
    assert read == total
    # the tool agrees once the last batch is committed (the member commits it at its next
    # planning call, or when the query stops)
    lags = {p: lag for p, (_, _, lag) in describe_group(kafka_broker, group).items()}
    assert lags == {0: 0, 1: 0, 2: 0}
