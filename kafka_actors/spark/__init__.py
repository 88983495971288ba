"""The Spark driver-side coordinator: a Structured Streaming source whose driver is a member of a
Kafka consumer group and commits its offsets there.

Owns the subpackage layout: :mod:`~kafka_actors.spark.options` (the source's options),
:mod:`~kafka_actors.spark.offsets` (Spark offsets, the pure offset planner),
:mod:`~kafka_actors.spark.coordinator` (the driver's group member),
:mod:`~kafka_actors.spark.reader` (the executors' range reader and the Arrow schema),
:mod:`~kafka_actors.spark.source` (the PySpark data source). Needs pyspark >= 4.2 and pyarrow
(the ``spark`` extra); importing this package without pyspark only fails when the source
itself is used.

Usage::

    from kafka_actors.spark import register
    register(spark)
    df = (spark.readStream.format("kafka-actors")
          .option("kafka.bootstrap.servers", "host:9092")
          .option("kafka.group.id", "orders-job")
          .option("subscribe", "orders")
          .load())

Schema (Spark's Kafka source columns): ``key binary, value binary, topic string,
partition int, offset long, timestamp timestamp, timestampType int`` and, with
``includeHeaders=true``, ``headers array<struct<key string, value binary>>``. ``timestamp`` is
the record's Kafka timestamp (milliseconds, UTC); ``timestampType`` 0 is CreateTime,
1 LogAppendTime. With ``kafka.isolation.level=read_committed`` records of aborted transactions
and transaction markers never appear, and batches end at the last stable offset.

What Spark's Kafka source does not do and this one does: the driver is a member of
``kafka.group.id`` (KIP-848 ``consumer`` protocol by default, ``classic`` with
``kafka.group.protocol=classic``); a query reads only the partitions the group assigns it, so
several queries with the same group id split the partitions; offsets are committed to the group
after Spark commits each batch, so ``kafka-consumer-groups --describe`` shows the query's
progress and lag.

The guarantee, exactly
----------------------
* **One query, with its checkpoint**: Spark's checkpoint is the source of truth. Each batch's
  offsets are in its offset log before it runs; a restarted query replays an unfinished batch
  with the same offsets and then continues from the checkpoint; offsets behind the checkpoint
  are never read again, even when the group's committed offsets are older (a commit that did
  not happen, or a reset of the group backwards). With an idempotent or transactional sink
  (Spark's file sink, e.g. Parquet) every record reaches the sink exactly once.
* **Commits to the group** happen after Spark's commit log holds the batch: at the next
  ``latestOffset`` (Spark calls it only when the previous batch is committed) or ``commit``.
  A committed group offset therefore never covers a batch Spark has not committed. When a
  query stops, the last completed batch is committed to the group only if
  ``checkpointLocation`` is given to the source (it reads the commit log); otherwise the
  group's offset may lag one batch behind the checkpoint.
* **Several queries in one group** (each with its own checkpoint): a partition revoked from a
  query gets no new data; the revocation is acknowledged to the group once every offset
  already planned for the partition is committed to Kafka, so the next owner starts exactly
  where this query's delivered records end: nothing lost, nothing duplicated. A newly assigned
  partition starts at the group's committed offset; if the query's own checkpoint is ahead of
  it, at the checkpoint (never behind it); if the group is ahead of the checkpoint (another
  query read it meanwhile), at the group's offset (the partition sits out one batch to make
  that jump visible in the offsets). A replayed batch after a restart skips records the group
  has committed past its start.
* **Where it weakens to at-least-once**: a revocation not completed within the rebalance
  timeout (``max.poll.interval.ms``, e.g. a batch slower than that), a member fenced out of
  the group (partitions *lost*), a driver worker killed without SIGTERM, a query stopped
  without ``checkpointLocation`` while another query of the group takes over, or one stopped
  in the instant between its sink's commit of a batch and Spark's commit log entry for it:
  then the next owner may read again the records of the last batch planned for those
  partitions. Nothing is ever skipped.
* Trigger.AvailableNow reads up to the end offsets of all partitions of the subscribed topics
  as they were when the query started. Async progress tracking is not supported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka_actors.errors import ConfigError
from kafka_actors.spark.offsets import group_lag

__all__ = [
    "MIN_PYSPARK",
    "SOURCE_NAME",
    "KafkaActorsDataSource",
    "check_pyspark_version",
    "group_lag",
    "register",
]

SOURCE_NAME = "kafka-actors"
#: The oldest pyspark the source works with: ``latestOffset(start, limit)`` of Python streaming
#: sources (read limits, ``maxOffsetsPerTrigger``) and ``SupportsTriggerAvailableNow`` came in
#: 4.2 (older ones lack the modules the source imports).
MIN_PYSPARK = (4, 2)

if TYPE_CHECKING:
    from kafka_actors.spark.source import KafkaActorsDataSource, register


def check_pyspark_version(version: str | None = None) -> None:
    """A ConfigError when pyspark (``version``, default the installed one) is older than
    :data:`MIN_PYSPARK`; checked before the source's pyspark modules are imported."""
    if version is None:
        import pyspark

        version = str(pyspark.__version__)
    numbers: list[int] = []
    for part in version.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        numbers.append(int(digits) if digits else 0)
    if tuple(numbers) < MIN_PYSPARK:
        raise ConfigError(
            f"The kafka-actors Spark source needs pyspark >= {MIN_PYSPARK[0]}.{MIN_PYSPARK[1]} "
            f"(latestOffset(start, limit) of Python streaming sources); this is pyspark "
            f"{version}",
            key="pyspark",
        )


def __getattr__(name: str) -> Any:
    if name in ("KafkaActorsDataSource", "register"):
        check_pyspark_version()
        from kafka_actors.spark import source

        return getattr(source, name)
    raise AttributeError(name)
