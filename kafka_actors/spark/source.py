"""The ``kafka-actors`` Python data source for Spark Structured Streaming (Spark 4.2+).

Owns: :class:`KafkaActorsDataSource` (registered under the name ``kafka-actors``: the name
``kafka`` belongs to Spark's built-in source, which would win) and its stream reader, which
glues Spark's calls to the driver-side :class:`~kafka_actors.spark.coordinator.GroupMember`
(created lazily: Spark also builds and pickles a reader to ship ``read`` to executors, and that
copy must not join the group) and to the executor-side
:class:`~kafka_actors.spark.reader.RangeReader`. May touch: pyspark's data source API, the
modules of this package.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from kafka_actors.spark import MIN_PYSPARK, check_pyspark_version
from kafka_actors.spark.offsets import OffsetRange, split_ranges
from kafka_actors.spark.options import SourceOptions, check_names
from kafka_actors.spark.reader import SPARK_SCHEMA, SPARK_SCHEMA_WITH_HEADERS, RangeReader

if TYPE_CHECKING:
    from kafka_actors.spark.coordinator import GroupMember

__all__ = [
    "MIN_PYSPARK",
    "SOURCE_NAME",
    "KafkaActorsDataSource",
    "KafkaInputPartition",
    "check_pyspark_version",
    "register",
]

SOURCE_NAME = "kafka-actors"
#: Longest a terminated driver-side worker spends committing and leaving the group.
_STOP_WATCHDOG_S = 45


class KafkaInputPartition(InputPartition):
    """One Spark task: records ``[start, end)`` of one Kafka partition (``value`` is the
    :class:`~kafka_actors.spark.offsets.OffsetRange`)."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)

    @property
    def range(self) -> OffsetRange:
        value = self.value
        assert isinstance(value, OffsetRange)
        return value


class KafkaActorsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark's view of the source (see the package docstring for the guarantees)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._member: GroupMember | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_member": None}

    def _driver(self) -> GroupMember:
        if self._member is None:
            # Configure logging before the consumer's modules bind their loggers.
            from kafka_actors.spark._logging import quiet_logging

            quiet_logging()
            from kafka_actors.spark.coordinator import GroupMember

            self._member = GroupMember(self.options)
            self._leave_on_sigterm()
        return self._member

    def _leave_on_sigterm(self) -> None:
        """Spark stops a query's source by terminating its Python worker (SIGTERM), without
        calling ``stop()``: leave the group (and commit what Spark completed) first, so the
        partitions move to the other members at once instead of after the session timeout."""
        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            # Spark may signal more than once: a second SIGTERM must not cut the first
            # stop short (before its commit, or before the group is left). A watchdog alarm
            # bounds the whole stop.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.alarm(_STOP_WATCHDOG_S)
            try:
                self.stop()
            finally:
                if callable(previous):
                    previous(signum, frame)
                os._exit(0)

        signal.signal(signal.SIGTERM, on_sigterm)

    # -- driver ------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        return self._driver().initial_offsets()

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit is not None else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return self._driver().latest_offsets(start, rows)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._member.reported_latest() if self._member is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._driver().prepare_available_now()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        ranges = self._driver().ranges(start, end)
        return _input_partitions(ranges, self.options)

    def commit(self, end: dict[str, Any]) -> None:
        self._driver().commit(end)

    def stop(self) -> None:
        member, self._member = self._member, None
        if member is not None:
            member.stop()

    # -- executors ---------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


def _input_partitions(
    ranges: Sequence[OffsetRange], options: SourceOptions
) -> list[InputPartition]:
    pieces = split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
    return [KafkaInputPartition(r) for r in pieces]


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """An executor's task: exactly the partition's range, through the range reader. Spark
    runs one task with no partition when a batch read plans none: it reads nothing."""
    value = getattr(partition, "value", None)
    if value is None:
        return
    assert isinstance(value, OffsetRange)
    reader = RangeReader(
        options.reader_settings(),
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
    )
    yield from reader.read(value.topic, value.partition, value.start, value.end)


class KafkaActorsBatchReader(DataSourceReader):
    """``spark.read.format("kafka-actors")``: exact offset ranges, no group membership (the
    driver looks offsets up with ListOffsets, as Spark's Kafka source does)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        from kafka_actors.spark._logging import quiet_logging

        quiet_logging()
        from kafka_actors.spark.positions import plan_batch

        return _input_partitions(plan_batch(self.options), self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class KafkaActorsDataSource(DataSource):
    """``spark.readStream.format("kafka-actors")``: a Kafka source that is a consumer-group
    member and commits its offsets to the group (see :mod:`kafka_actors.spark`)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        # Spark asks for the schema at load(): names are checked there already (the options
        # of each mode when the reader is made)
        check_names(self.options)
        include = str(self.options.get("includeHeaders", self.options.get("includeheaders", "")))
        return SPARK_SCHEMA_WITH_HEADERS if include.lower() == "true" else SPARK_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaActorsStreamReader(SourceOptions.parse(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaActorsBatchReader(SourceOptions.parse(self.options, batch=True))


def register(spark: Any) -> None:
    """Register the source with a SparkSession: ``spark.readStream.format("kafka-actors")``
    and ``spark.read.format("kafka-actors")``. Refuses pyspark older than 4.2."""
    import pyspark

    check_pyspark_version(str(pyspark.__version__))
    spark.dataSource.register(KafkaActorsDataSource)
