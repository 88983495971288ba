"""Every option of the kafka-actors source is validated (pure, no Spark, no broker): unknown and
misspelt names name the nearest known one, options of the other mode are refused, Spark's
start/end forms parse as Spark's Kafka source reads them, and the resolution of timestamps and
JSON offsets against ListOffsets answers (a fake lookup)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from kafka_actors.errors import ConfigError
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.offsets.list_offsets import OffsetAndTimestamp
from kafka_actors.spark.offsets import Bound, OffsetRange, split_ranges
from kafka_actors.spark.options import BATCH_OPTIONS, STREAM_OPTIONS, SourceOptions
from kafka_actors.spark.positions import resolve_bound

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.group.id": "g", "subscribe": "t"}


def _parse(batch: bool = False, **extra: str) -> SourceOptions:
    # Spark hands the source lower-cased names
    return SourceOptions.parse({k.lower(): v for k, v in {**BASE, **extra}.items()}, batch=batch)


@pytest.mark.parametrize(
    ("given", "suggested"),
    [
        ("startingOffset", "startingOffsets"),
        ("startingoffests", "startingOffsets"),
        ("maxOffsetPerTrigger", "maxOffsetsPerTrigger"),
        ("failOnDataLost", "failOnDataLoss"),
        ("includeHeader", "includeHeaders"),
        ("subscribepatern", "subscribePattern"),
        ("startingTimestmp", "startingTimestamp"),
        ("minPartition", "minPartitions"),
        ("endingOffset", "endingOffsets"),
        ("maxTriggerDelays", "maxTriggerDelay"),
    ],
)
@pytest.mark.parametrize("batch", [False, True])
def test_misspelt_option_names_the_nearest(given: str, suggested: str, batch: bool) -> None:
    with pytest.raises(ConfigError, match=f"did you mean {suggested}\\?") as info:
        _parse(batch, **{given: "1"})
    assert info.value.key == given.lower()


def test_unknown_option_without_a_near_name() -> None:
    with pytest.raises(ConfigError, match="Unknown option 'colour'") as info:
        _parse(colour="blue")
    assert "did you mean" not in str(info.value)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("groupIdPrefix", "kafka.group.id"),
        ("fetchOffset.numRetries", "default.api.timeout.ms"),
        ("kafka.auto.offset.reset", "startingOffsets"),
        ("kafka.value.deserializer", "binary"),
    ],
)
def test_spark_options_not_taken_say_why(name: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        _parse(**{name: "x"})


def test_kafka_options_go_to_the_consumer_config() -> None:
    with pytest.raises(ConfigError, match=r"fetch\.max\.bytez"):
        _parse(**{"kafka.fetch.max.bytez": "1"})
    assert _parse(**{"kafka.fetch.max.bytes": "1000"}).kafka["fetch.max.bytes"] == "1000"


def test_path_is_allowed_and_every_listed_option_parses() -> None:
    assert _parse(path="/ignored").topics == ("t",)
    assert _parse(True, path="/ignored").batch


@pytest.mark.parametrize("name", ["endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"])
def test_ending_options_in_a_streaming_query(name: str) -> None:
    value = '{"t": {"0": 5}}' if name.endswith("ByTimestamp") else "5"
    with pytest.raises(ConfigError, match=r"for batch reads .* not streaming queries"):
        _parse(**{name: value})


@pytest.mark.parametrize(
    "name", ["maxOffsetsPerTrigger", "minOffsetsPerTrigger", "checkpointLocation"]
)
def test_streaming_options_in_a_batch_read(name: str) -> None:
    with pytest.raises(ConfigError, match="for streaming queries"):
        _parse(True, **{name: "5"})


def test_option_lists() -> None:
    assert "endingOffsets" not in STREAM_OPTIONS and "endingOffsets" in BATCH_OPTIONS
    assert "maxOffsetsPerTrigger" not in BATCH_OPTIONS
    assert "path" in STREAM_OPTIONS and "path" in BATCH_OPTIONS


def test_batch_defaults_and_forms() -> None:
    options = _parse(True)
    assert options.starting == Bound("earliest") and options.ending == Bound("latest")
    assert "group.id" not in options.consumer_config()
    no_group = SourceOptions.parse(
        {"kafka.bootstrap.servers": "127.0.0.1:9092", "assign": '{"t": [1, 0]}'}, batch=True
    )
    assert no_group.assign == (T0, T1)
    timed = _parse(True, startingTimestamp="1000", endingOffsetsByTimestamp='{"t": {"0": 9}}')
    assert timed.starting == Bound("timestamp", timestamp=1000)
    assert timed.ending == Bound("timestamps", offsets={T0: 9})
    # Spark's precedence: startingTimestamp, then startingOffsetsByTimestamp, then startingOffsets
    both = _parse(startingTimestamp="5", startingOffsetsByTimestamp='{"t": {"0": 9}}')
    assert both.starting == Bound("timestamp", timestamp=5)


@pytest.mark.parametrize(
    "extra",
    [
        {"startingOffsets": "latest"},
        {"startingOffsets": '{"t": {"0": -1}}'},
        {"endingOffsets": "earliest"},
        {"endingOffsets": '{"t": {"0": -2}}'},
        {"startingTimestamp": "yesterday"},
        {"startingTimestamp": "-5"},
        {"startingOffsetsByTimestamp": '{"t": [1]}'},
        {"startingOffsetsByTimestampStrategy": "earliest"},
        {"assign": '{"t": "0"}', "subscribe": ""},
        {"maxRecordsPerPartition": "0"},
    ],
)
def test_batch_options_refused(extra: dict[str, str]) -> None:
    raw = {**BASE, **extra}
    if "assign" in extra:
        del raw["subscribe"]
    with pytest.raises(ConfigError):
        SourceOptions.parse({k.lower(): v for k, v in raw.items()}, batch=True)


def test_streaming_trigger_options() -> None:
    options = _parse(minOffsetsPerTrigger="100", maxTriggerDelay="30s")
    assert options.min_offsets_per_trigger == 100 and options.max_trigger_delay_ms == 30_000
    assert _parse(minOffsetsPerTrigger="1").max_trigger_delay_ms == 15 * 60_000
    assert _parse(minOffsetsPerTrigger="1", maxTriggerDelay="250").max_trigger_delay_ms == 250
    with pytest.raises(ConfigError, match="only applies with minOffsetsPerTrigger"):
        _parse(maxTriggerDelay="1m")
    with pytest.raises(ConfigError, match="larger than maxOffsetsPerTrigger"):
        _parse(minOffsetsPerTrigger="10", maxOffsetsPerTrigger="5")
    with pytest.raises(ConfigError, match="duration"):
        _parse(minOffsetsPerTrigger="10", maxTriggerDelay="soon")


def test_max_records_per_partition_splits() -> None:
    pieces = split_ranges([OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 8)], None, 4)
    assert [(r.partition, r.start, r.end) for r in pieces] == [
        (0, 0, 4),
        (0, 4, 7),
        (0, 7, 10),
        (1, 5, 8),
    ]
    assert all(r.size <= 4 for r in pieces)
    both = split_ranges([OffsetRange("t", 0, 0, 10)], 5, 4)
    assert len(both) >= 5 and all(r.size <= 4 for r in both)
    assert sum(r.size for r in both) == 10


class _Lookup:
    def __init__(self, times: Mapping[TopicPartition, int | None]) -> None:
        self.times = times

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(partitions, 10)

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(partitions, 100)

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, ts in timestamps.items():
            found = self.times.get(tp)
            out[tp] = None if found is None else OffsetAndTimestamp(found, ts)
        return out


def test_resolve_bounds() -> None:
    lookup = _Lookup({T0: 42, T1: None})
    both = [T0, T1]
    assert resolve_bound(lookup, Bound("earliest"), both, side="starting") == {T0: 10, T1: 10}
    offsets = Bound("offsets", offsets={T0: -1, T1: 7})
    assert resolve_bound(lookup, offsets, both, side="starting") == {T0: 100, T1: 7}
    # by timestamp, no record at or after it: error (Spark's default) or the end
    stamp = Bound("timestamp", timestamp=5)
    with pytest.raises(ConfigError, match="startingOffsetsByTimestampStrategy=latest"):
        resolve_bound(lookup, stamp, both, side="starting")
    assert resolve_bound(lookup, stamp, both, side="starting", strategy_latest=True) == {
        T0: 42,
        T1: 100,
    }
    assert resolve_bound(lookup, stamp, both, side="ending") == {T0: 42, T1: 100}
    # per partition: batch reads name every partition (as Spark); streaming starts the others
    # at their earliest offset
    named = Bound("timestamps", offsets={T0: 5})
    with pytest.raises(ConfigError, match="missing"):
        resolve_bound(lookup, named, both, side="starting", require_all=True)
    assert resolve_bound(lookup, named, both, side="starting") == {T0: 42, T1: 10}


def test_group_lag_from_progress() -> None:
    from kafka_actors.spark import group_lag

    progress = {
        "startOffset": '{"t": {"0": 10, "1": 20}}',
        "endOffset": '{"t": {"0": 15, "1": 30}}',
        "latestOffset": '{"t": {"0": 40, "1": 30}}',
    }
    assert group_lag(progress) == 30 + 10
    assert group_lag(progress, after_batch=True) == 25
    assert group_lag({"startOffset": None, "latestOffset": None}) is None
    # a query's first batch: Spark reports its start as null
    assert group_lag({**progress, "startOffset": "null"}) is None
    assert group_lag({**progress, "startOffset": "None"}) is None  # a listener event's form
    assert group_lag({**progress, "startOffset": "null"}, after_batch=True) == 25

    class SourceProgress:  # the listener's form: attributes, JSON text
        startOffset = progress["startOffset"]
        endOffset = progress["endOffset"]
        latestOffset = progress["latestOffset"]

    assert group_lag(SourceProgress()) == 40


def test_pyspark_version_check() -> None:
    from kafka_actors.spark import check_pyspark_version

    for ok in ("4.2.0", "4.3.0", "4.10.1", "5.0.0.dev1"):
        check_pyspark_version(ok)
    for old in ("3.5.3", "4.0.1", "4.1.0"):
        with pytest.raises(ConfigError, match=f"needs pyspark >= 4.2.*this is pyspark {old}"):
            check_pyspark_version(old)


def test_old_pyspark_refused_before_the_source_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    pyspark = pytest.importorskip("pyspark")
    import kafka_actors.spark as package

    monkeypatch.setattr(pyspark, "__version__", "3.5.1")
    with pytest.raises(ConfigError, match=r"needs pyspark >= 4\.2"):
        _ = package.register
