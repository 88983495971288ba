"""Options of the ``kafka-actors`` Spark source, validated once (pure).

Owns: :class:`SourceOptions`, parsed from the (case-insensitive) options Spark hands a Python
data source, named as in Spark's Kafka source where they mean the same thing:

=========================  ==================================================================
``subscribe``              comma-separated topics (or ``subscribePattern``, a Java-style regex)
``startingOffsets``        ``earliest`` / ``latest`` (default) / JSON ``{"t": {"0": 42}}``
                           (-2 earliest, -1 latest): where a partition starts when the *group*
                           has no committed offset for it (committed offsets win, then this)
``failOnDataLoss``         ``true`` (default): fail when planned records are gone
``includeHeaders``         ``false`` (default): add the ``headers`` column
``maxOffsetsPerTrigger``   most records per micro-batch, split fairly across partitions
``minPartitions``          split offset ranges into at least this many Spark tasks
``kafka.<key>``            client configuration, Kafka's names (``kafka.bootstrap.servers``,
                           ``kafka.group.id`` (required), ``kafka.group.protocol``,
                           ``kafka.isolation.level``, security settings, ...)
``kafkaConsumer.pollTimeoutMs``  executors fail a read that makes no progress for this long
                           (default 120000, as Spark's)
``groupAssignmentTimeoutMs``     how long the first offsets wait for the group's first
                           assignment (default 60000)
``checkpointLocation``     optional: the query's checkpoint directory (local file system),
                           read only, so that stopping the query commits the last batch Spark
                           completed (see :mod:`kafka_actors.spark`)
=========================  ==================================================================

``assign`` is refused: this source is a group member (use Spark's own Kafka source to read
fixed partitions without a group). ``enable.auto.commit`` is forced off: offsets are committed
when Spark has committed the batches that read them.

May touch: the config module (to validate the ``kafka.`` settings early). No I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import ConfigError
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.spark.offsets import parse_starting_offsets

__all__ = ["SourceOptions"]

_KAFKA_PREFIX: Final = "kafka."
#: Client settings the source decides itself.
_FORCED: Final = {"enable.auto.commit": "false"}


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

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SourceOptions:
        options = {str(k).lower(): str(v) for k, v in raw.items()}
        kafka: dict[str, str] = {}
        for key, value in raw.items():
            if str(key).lower().startswith(_KAFKA_PREFIX):
                kafka[str(key)[len(_KAFKA_PREFIX) :]] = str(value)
        if "assign" in options:
            raise ConfigError(
                "Option assign is not supported: the kafka-actors source reads the partitions "
                "its consumer group assigns (use subscribe or subscribePattern)",
                key="assign",
            )
        subscribe = options.get("subscribe")
        pattern = options.get("subscribepattern")
        if (subscribe is None) == (pattern is None):
            raise ConfigError(
                "Exactly one of the options subscribe and subscribePattern must be set",
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
        if "bootstrap.servers" not in kafka:
            raise ConfigError(
                "Option kafka.bootstrap.servers is required", key="kafka.bootstrap.servers"
            )
        if not kafka.get("group.id"):
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
        try:
            starting = parse_starting_offsets(options.get("startingoffsets"))
        except ValueError as exc:
            raise ConfigError(str(exc), key="startingOffsets") from exc
        if "endingoffsets" in options:
            raise ConfigError(
                "Option endingOffsets is for batch queries, which this source does not offer",
                key="endingOffsets",
            )
        return cls(
            kafka=kafka,
            topics=topics,
            pattern=pattern,
            starting_offsets=starting,
            fail_on_data_loss=_flag(options, "failOnDataLoss", True),
            include_headers=_flag(options, "includeHeaders", False),
            max_offsets_per_trigger=_positive(options, "maxOffsetsPerTrigger", None),
            min_partitions=_positive(options, "minPartitions", None),
            poll_timeout_ms=_positive(options, "kafkaConsumer.pollTimeoutMs", 120_000) or 120_000,
            assignment_timeout_ms=_positive(options, "groupAssignmentTimeoutMs", 60_000) or 60_000,
            checkpoint_location=options.get("checkpointlocation"),
        )

    @property
    def group_id(self) -> str:
        return self.kafka["group.id"]

    def consumer_config(self) -> dict[str, object]:
        """The driver's consumer configuration."""
        config: dict[str, object] = dict(self.kafka)
        config.setdefault("client.id", f"kafka-actors-spark-{self.group_id}")
        return config

    def reader_settings(self) -> dict[str, str]:
        """The executors' connection settings (no group: they read ranges)."""
        settings = {k: v for k, v in self.kafka.items() if not k.startswith("group.")}
        settings.setdefault("client.id", f"kafka-actors-spark-{self.group_id}-reader")
        return settings
