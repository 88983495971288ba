"""Streaming options Spark users rely on, against a real Kafka 4.x broker, Spark local[2]:
``minOffsetsPerTrigger`` holds a batch back until enough records are there, or until
``maxTriggerDelay`` has passed; ``maxRecordsPerPartition`` caps the records of each Spark
task."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.spark.helpers import produce, source, unique, wait_for

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
