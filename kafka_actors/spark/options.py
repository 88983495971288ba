"""Options of the ``kafka-actors`` Spark source, validated once (pure).

Owns: :class:`SourceOptions`, parsed from the options Spark hands a Python data source (Spark
lower-cases their names), named as in Spark's Kafka source where they mean the same thing.
Every option is checked: a name the source does not know is a :class:`ConfigError` naming it
and the nearest known name (``startingOffset`` → "did you mean startingOffsets?"); an option
of the other mode (``endingOffsets`` in a streaming query, ``maxOffsetsPerTrigger`` in a batch
read) is a :class:`ConfigError` saying so; the ``kafka.`` options are validated by
:class:`~kafka_actors.config.ConsumerConfig`. The table of options, side by side with Spark's
Kafka source, is in ``docs/spark.md``.

Both modes: ``subscribe`` / ``subscribePattern``, ``startingOffsets``, ``startingTimestamp``,
``startingOffsetsByTimestamp``, ``startingOffsetsByTimestampStrategy``, ``failOnDataLoss``,
``includeHeaders``, ``minPartitions``, ``maxRecordsPerPartition``,
``kafkaConsumer.pollTimeoutMs``, ``kafka.<key>``; ``path`` (Spark passes it when
``load(path)`` is called; unused). Streaming only: ``maxOffsetsPerTrigger``,
``minOffsetsPerTrigger``, ``maxTriggerDelay``, ``groupAssignmentTimeoutMs``,
``checkpointLocation``; ``kafka.group.id`` required. Batch only (``spark.read``): ``assign``,
``endingOffsets``, ``endingTimestamp``, ``endingOffsetsByTimestamp``; no group membership.

May touch: the config module (to validate the ``kafka.`` settings early). No I/O.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import ConfigError
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.spark.offsets import (
    EARLIEST,
    LATEST,
    Bound,
    offsets_from_json,
    parse_starting_offsets,
)

__all__ = ["BATCH_OPTIONS", "SPARK_PASSED_OPTIONS", "STREAM_OPTIONS", "SourceOptions"]

_KAFKA_PREFIX: Final = "kafka."
#: Client settings the source decides itself.
_FORCED: Final = {"enable.auto.commit": "false"}

_COMMON: Final = (
    "subscribe",
    "subscribePattern",
    "startingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "failOnDataLoss",
    "includeHeaders",
    "minPartitions",
    "maxRecordsPerPartition",
    "kafkaConsumer.pollTimeoutMs",
)
#: Options Spark itself puts in a data source's options: ``path`` when ``load(path)`` is called
#: (found by logging the options a Python data source receives, Spark 4.3: nothing else; the
#: checkpoint location is the sink's option and never reaches the source).
SPARK_PASSED_OPTIONS: Final = ("path",)
#: Options of a streaming query (``spark.readStream``), besides ``kafka.<key>``.
STREAM_OPTIONS: Final = (
    *_COMMON,
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "groupAssignmentTimeoutMs",
    "checkpointLocation",
    *SPARK_PASSED_OPTIONS,
)
#: Options of a batch read (``spark.read``), besides ``kafka.<key>``.
BATCH_OPTIONS: Final = (
    *_COMMON,
    "assign",
    "endingOffsets",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    *SPARK_PASSED_OPTIONS,
)
#: Options of Spark's Kafka source this one does not take, and why.
_NOT_TAKEN: Final = {
    "groupidprefix": (
        "groupIdPrefix is not taken: Spark's source makes up a fresh group id per query from "
        "it; this source is a member of the group you name with kafka.group.id (required for "
        "streaming queries, unused by batch reads)"
    ),
    "fetchoffset.numretries": (
        "fetchOffset.numRetries is not taken: offset lookups retry until "
        "kafka.default.api.timeout.ms"
    ),
    "fetchoffset.retryintervalms": (
        "fetchOffset.retryIntervalMs is not taken: offset lookups back off by "
        "kafka.retry.backoff.ms"
    ),
    "kafka.auto.offset.reset": (
        "kafka.auto.offset.reset is not taken: use startingOffsets (where a partition starts "
        "when the group has no committed offset)"
    ),
    "kafka.key.deserializer": "kafka.key.deserializer is not taken: key is binary",
    "kafka.value.deserializer": "kafka.value.deserializer is not taken: value is binary",
}
_ALL: Final = {name.lower(): name for name in (*STREAM_OPTIONS, *BATCH_OPTIONS)}
_DELAY_UNITS: Final = {
    "ms": 1,
    "s": 1000,
    "sec": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}


def check_names(raw: Mapping[str, object]) -> None:
    """Every option name is known (in either mode): else a ConfigError naming it and the
    nearest known name."""
    for key in raw:
        name = str(key)
        lower = name.lower()
        if lower in _NOT_TAKEN:
            raise ConfigError(_NOT_TAKEN[lower], key=name)
        if lower.startswith(_KAFKA_PREFIX) or lower in _ALL:
            continue
        close = difflib.get_close_matches(lower, list(_ALL), n=1, cutoff=0.6)
        hint = f"; did you mean {_ALL[close[0]]}?" if close else ""
        raise ConfigError(
            f"Unknown option {name!r} of the kafka-actors source{hint} (known: "
            f"{', '.join(sorted(_ALL.values(), key=str.lower))}, and kafka.<consumer config>)",
            key=name,
        )


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name.lower())
    if value is None:
        return default
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ConfigError(f"Option {name} must be true or false, got {value!r}", key=name)


def _positive(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    value = options.get(name.lower())
    if value is None:
        return default
    try:
        number = int(str(value).strip())
    except ValueError as exc:
        raise ConfigError(f"Option {name} must be an integer, got {value!r}", key=name) from exc
    if number <= 0:
        raise ConfigError(f"Option {name} must be positive, got {number}", key=name)
    return number


def _timestamp(options: Mapping[str, str], name: str) -> int | None:
    value = options.get(name.lower())
    if value is None:
        return None
    try:
        number = int(str(value).strip())
    except ValueError as exc:
        raise ConfigError(
            f"Option {name} must be a timestamp in milliseconds since the epoch, got {value!r}",
            key=name,
        ) from exc
    if number < 0:
        raise ConfigError(f"Option {name} must not be negative, got {number}", key=name)
    return number


def _timestamps(options: Mapping[str, str], name: str) -> dict[TopicPartition, int] | None:
    value = options.get(name.lower())
    if value is None:
        return None
    try:
        out = offsets_from_json(value)
    except (ValueError, json.JSONDecodeError) as exc:
        raise ConfigError(
            f'Option {name} must be a JSON object {{"topic": {{"0": <ms>}}}}: {exc}', key=name
        ) from exc
    for tp, ts in out.items():
        if ts < 0:
            raise ConfigError(f"Option {name}: negative timestamp {ts} for {tp}", key=name)
    if not out:
        raise ConfigError(f"Option {name} names no partition", key=name)
    return out


def _delay_ms(options: Mapping[str, str], name: str, default: int) -> int:
    value = options.get(name.lower())
    if value is None:
        return default
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", str(value).lower())
    unit = match.group(2) if match else ""
    if match is None or (unit and unit not in _DELAY_UNITS):
        raise ConfigError(
            f"Option {name} must be a duration such as 15m, 30s or 500ms, got {value!r}",
            key=name,
        )
    return int(match.group(1)) * _DELAY_UNITS[unit or "ms"]


def _assign(value: str) -> tuple[TopicPartition, ...]:
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f'Option assign must be a JSON object {{"topic": [0, 1]}}: {exc}', key="assign"
        ) from exc
    if not isinstance(data, dict) or not data:
        raise ConfigError('Option assign must be a JSON object {"topic": [0, 1]}', key="assign")
    out: list[TopicPartition] = []
    for topic, partitions in data.items():
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            raise ConfigError(
                f"Option assign: topic {topic!r} must map to a list of partition numbers",
                key="assign",
            )
        out.extend(TopicPartition(str(topic), p) for p in partitions)
    return tuple(sorted(set(out), key=lambda t: (t.topic, t.partition)))


def _bound(options: Mapping[str, str], side: Literal["starting", "ending"], batch: bool) -> Bound:
    """Spark's order of precedence: ``<side>Timestamp``, then ``<side>OffsetsByTimestamp``,
    then ``<side>Offsets``."""
    timestamp = _timestamp(options, f"{side}Timestamp")
    if timestamp is not None:
        return Bound("timestamp", timestamp=timestamp)
    by_timestamp = _timestamps(options, f"{side}OffsetsByTimestamp")
    if by_timestamp is not None:
        return Bound("timestamps", offsets=by_timestamp)
    name = f"{side}Offsets"
    text = options.get(name.lower())
    if side == "starting":
        try:
            parsed = parse_starting_offsets(text if text is not None or not batch else "earliest")
        except ValueError as exc:
            raise ConfigError(str(exc), key=name) from exc
        if batch and (
            parsed == "latest" or (isinstance(parsed, dict) and LATEST in parsed.values())
        ):
            raise ConfigError(
                "startingOffsets cannot be latest (-1) in a batch read: the range would be empty",
                key=name,
            )
    else:
        try:
            parsed = parse_starting_offsets(text if text is not None else "latest")
        except ValueError as exc:
            raise ConfigError(str(exc).replace("startingOffsets", name), key=name) from exc
        if parsed == "earliest" or (isinstance(parsed, dict) and EARLIEST in parsed.values()):
            raise ConfigError(
                "endingOffsets cannot be earliest (-2) in a batch read: the range would be empty",
                key=name,
            )
    if isinstance(parsed, dict):
        return Bound("offsets", offsets=parsed)
    return Bound(parsed)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The source's options (see the module docstring)."""

    kafka: Mapping[str, str]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    starting_offsets: str | Mapping[TopicPartition, int] = "latest"
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    poll_timeout_ms: int = 120_000
    assignment_timeout_ms: int = 60_000
    checkpoint_location: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
    #: Where reading starts (where the group has no committed offset, for streaming queries).
    starting: Bound = field(default_factory=lambda: Bound("latest"))
    #: ``startingOffsetsByTimestampStrategy=latest``: a partition with no record at or after
    #: the timestamp starts at its end (else the query fails).
    starting_strategy_latest: bool = False
    #: Batch reads: where reading ends (exclusive).
    ending: Bound = field(default_factory=lambda: Bound("latest"))
    #: Batch reads: ``assign``, the partitions to read.
    assign: tuple[TopicPartition, ...] = ()
    batch: bool = False
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    max_records_per_partition: int | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, str], *, batch: bool = False) -> SourceOptions:
        """Validate the options of a streaming query (``batch=False``) or a batch read."""
        check_names(raw)
        options = {str(k).lower(): str(v) for k, v in raw.items()}
        mode_names = BATCH_OPTIONS if batch else STREAM_OPTIONS
        allowed = {name.lower() for name in mode_names}
        for key in options:
            if key.startswith(_KAFKA_PREFIX) or key in allowed:
                continue
            name = _ALL[key]
            if batch:
                raise ConfigError(
                    f"Option {name} is for streaming queries (spark.readStream), not batch reads",
                    key=name,
                )
            if key == "assign":
                raise ConfigError(
                    "Option assign is not supported in streaming queries: the kafka-actors "
                    "source reads the partitions its consumer group assigns (use subscribe or "
                    "subscribePattern; assign works in batch reads, spark.read)",
                    key="assign",
                )
            raise ConfigError(
                f"Option {name} is for batch reads (spark.read), not streaming queries: a "
                "streaming query has no end",
                key=name,
            )
        kafka: dict[str, str] = {}
        for key, value in raw.items():
            if str(key).lower().startswith(_KAFKA_PREFIX):
                kafka[str(key)[len(_KAFKA_PREFIX) :]] = str(value)
        subscribe = options.get("subscribe")
        pattern = options.get("subscribepattern")
        assign_text = options.get("assign")
        if sum(x is not None for x in (subscribe, pattern, assign_text)) != 1:
            raise ConfigError(
                "Exactly one of the options subscribe and subscribePattern"
                + (" and assign" if batch else "")
                + " must be set",
                key="subscribe",
            )
        topics: tuple[str, ...] = ()
        if subscribe is not None:
            topics = tuple(t.strip() for t in subscribe.split(",") if t.strip())
            if not topics:
                raise ConfigError("Option subscribe names no topic", key="subscribe")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(f"subscribePattern is not a regex: {exc}", key=pattern) from exc
        assign = _assign(assign_text) if assign_text is not None else ()
        if "bootstrap.servers" not in kafka:
            raise ConfigError(
                "Option kafka.bootstrap.servers is required", key="kafka.bootstrap.servers"
            )
        if not batch and not kafka.get("group.id"):
            raise ConfigError(
                "Option kafka.group.id is required: the source is a member of that consumer "
                "group and commits its offsets there",
                key="kafka.group.id",
            )
        if kafka.get("enable.auto.commit", "false").strip().lower() == "true":
            raise ConfigError(
                "kafka.enable.auto.commit cannot be true: the source commits the offsets of "
                "batches Spark has committed",
                key="kafka.enable.auto.commit",
            )
        kafka.update(_FORCED)
        kafka.setdefault("auto.offset.reset", "earliest")
        try:
            ConsumerConfig.from_dict(dict(kafka))
        except ConfigError as exc:
            raise ConfigError(f"Bad kafka. option: {exc}", key=exc.key) from exc
        starting = _bound(options, "starting", batch)
        ending = _bound(options, "ending", batch) if batch else Bound("latest")
        strategy = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise ConfigError(
                f"Option startingOffsetsByTimestampStrategy must be error or latest, got "
                f"{strategy!r}",
                key="startingOffsetsByTimestampStrategy",
            )
        min_per_trigger = _positive(options, "minOffsetsPerTrigger", None)
        max_per_trigger = _positive(options, "maxOffsetsPerTrigger", None)
        if min_per_trigger and max_per_trigger and min_per_trigger > max_per_trigger:
            raise ConfigError(
                f"minOffsetsPerTrigger ({min_per_trigger}) is larger than maxOffsetsPerTrigger "
                f"({max_per_trigger})",
                key="minOffsetsPerTrigger",
            )
        if "maxtriggerdelay" in options and min_per_trigger is None:
            raise ConfigError(
                "Option maxTriggerDelay only applies with minOffsetsPerTrigger",
                key="maxTriggerDelay",
            )
        legacy: str | Mapping[TopicPartition, int] = (
            dict(starting.offsets) if starting.kind == "offsets" else starting.kind
        )
        return cls(
            kafka=kafka,
            topics=topics,
            pattern=pattern,
            starting_offsets=legacy,
            fail_on_data_loss=_flag(options, "failOnDataLoss", True),
            include_headers=_flag(options, "includeHeaders", False),
            max_offsets_per_trigger=max_per_trigger,
            min_partitions=_positive(options, "minPartitions", None),
            poll_timeout_ms=_positive(options, "kafkaConsumer.pollTimeoutMs", 120_000) or 120_000,
            assignment_timeout_ms=_positive(options, "groupAssignmentTimeoutMs", 60_000) or 60_000,
            checkpoint_location=options.get("checkpointlocation"),
            starting=starting,
            starting_strategy_latest=strategy == "latest",
            ending=ending,
            assign=assign,
            batch=batch,
            min_offsets_per_trigger=min_per_trigger,
            max_trigger_delay_ms=_delay_ms(options, "maxTriggerDelay", 15 * 60_000),
            max_records_per_partition=_positive(options, "maxRecordsPerPartition", None),
        )

    @property
    def group_id(self) -> str:
        return self.kafka.get("group.id", "")

    def consumer_config(self) -> dict[str, object]:
        """The driver's consumer configuration (batch reads: no group)."""
        config: dict[str, object] = dict(self.kafka)
        if self.batch:
            config = {k: v for k, v in config.items() if not k.startswith("group.")}
        config.setdefault("client.id", f"kafka-actors-spark-{self.group_id or 'batch'}")
        return config

    def reader_settings(self) -> dict[str, str]:
        """The executors' connection settings (no group: they read ranges)."""
        settings = {k: v for k, v in self.kafka.items() if not k.startswith("group.")}
        settings.setdefault("client.id", f"kafka-actors-spark-{self.group_id or 'batch'}-reader")
        return settings
