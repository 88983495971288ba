"""Resolving Spark's start and end options to offsets, and planning a batch read.

Owns: :func:`resolve_bound` (``startingOffsets`` / ``endingOffsets`` / ``…Timestamp`` /
``…OffsetsByTimestamp`` → one offset per partition, through ListOffsets: earliest, latest or
by timestamp) and :func:`plan_batch` (the partitions and exact offset ranges of a batch read,
``spark.read.format("kafka-actors")``). Batch reads join no group: a consumer without
``group.id`` looks up metadata and offsets, as Spark's own source does. May touch: a
:class:`~kafka_actors.KafkaConsumer` used for lookups only (it never subscribes nor fetches).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Literal, Protocol

from kafka_actors.errors import ConfigError
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.offsets.list_offsets import OffsetAndTimestamp
from kafka_actors.spark.offsets import EARLIEST, LATEST, Bound, OffsetRange
from kafka_actors.spark.options import SourceOptions

__all__ = ["OffsetLookup", "partitions_of", "plan_batch", "resolve_bound"]


class OffsetLookup(Protocol):
    """What resolving needs of a consumer (a :class:`~kafka_actors.KafkaConsumer`)."""

    def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]: ...

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]: ...

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]: ...


def _name(side: Literal["starting", "ending"], bound: Bound) -> str:
    return {
        "timestamp": f"{side}Timestamp",
        "timestamps": f"{side}OffsetsByTimestamp",
    }.get(bound.kind, f"{side}Offsets")


def resolve_bound(
    lookup: OffsetLookup,
    bound: Bound,
    partitions: Iterable[TopicPartition],
    *,
    side: Literal["starting", "ending"],
    strategy_latest: bool = False,
    require_all: bool = False,
) -> dict[TopicPartition, int]:
    """One offset per partition of ``partitions`` where reading starts (or ends, exclusive).

    ``offsets`` and ``timestamps`` name partitions: with ``require_all`` (batch reads, as
    Spark) they must name exactly ``partitions``; otherwise a partition they do not name
    starts at its earliest offset. By timestamp: the earliest offset whose timestamp is at or
    after it; where there is none, an end bound is the partition's end, a start bound is its
    end with ``strategy_latest`` (``startingOffsetsByTimestampStrategy=latest``) and an error
    otherwise (Spark's default, ``error``).
    """
    wanted = sorted(set(partitions), key=lambda t: (t.topic, t.partition))
    if not wanted:
        return {}
    option = _name(side, bound)
    if bound.kind == "earliest":
        return dict(lookup.beginning_offsets(wanted))
    if bound.kind == "latest":
        return dict(lookup.end_offsets(wanted))
    named: Mapping[TopicPartition, int]
    if bound.kind == "timestamp":
        assert bound.timestamp is not None
        named = dict.fromkeys(wanted, bound.timestamp)
    else:
        named = bound.offsets
    if require_all and set(named) != set(wanted):
        missing = sorted(map(str, set(wanted) - set(named)))
        extra = sorted(map(str, set(named) - set(wanted)))
        raise ConfigError(
            f"Option {option} must name every partition read, exactly (as Spark's Kafka "
            f"source): missing {missing or 'none'}, not read {extra or 'none'}",
            key=option,
        )
    out: dict[TopicPartition, int] = {}
    earliest = [tp for tp in wanted if tp not in named or named[tp] == EARLIEST]
    latest = [tp for tp in wanted if tp in named and named[tp] == LATEST]
    if bound.kind == "offsets":
        out.update({tp: named[tp] for tp in wanted if tp in named and named[tp] >= 0})
        if earliest:
            out.update(lookup.beginning_offsets(earliest))
        if latest:
            out.update(lookup.end_offsets(latest))
        return out
    if earliest:
        out.update(lookup.beginning_offsets(earliest))
    by_time = {tp: named[tp] for tp in wanted if tp in named and named[tp] >= 0}
    found = lookup.offsets_for_times(by_time) if by_time else {}
    unmatched = [tp for tp in by_time if found.get(tp) is None]
    for tp in by_time:
        match = found.get(tp)
        if match is not None:
            out[tp] = match.offset
    if unmatched and side == "starting" and not strategy_latest:
        detail = ", ".join(f"{tp} at {by_time[tp]}" for tp in unmatched)
        raise ConfigError(
            f"No record at or after the timestamp of {option} in {detail} (Spark's "
            "startingOffsetsByTimestampStrategy=error); set "
            "startingOffsetsByTimestampStrategy=latest to start such partitions at their end",
            key=option,
        )
    if unmatched:
        out.update(lookup.end_offsets(unmatched))
    return out


def partitions_of(consumer: object, options: SourceOptions) -> list[TopicPartition]:
    """The partitions a batch read covers: ``assign``, or every partition of the ``subscribe``
    topics or of the topics matching ``subscribePattern`` (whole name, as Java's matches)."""
    from kafka_actors.consumer import KafkaConsumer

    assert isinstance(consumer, KafkaConsumer)
    if options.assign:
        return list(options.assign)
    if options.pattern is not None:
        regex = re.compile(options.pattern)
        topics = sorted(t for t in consumer.list_topics() if regex.fullmatch(t))
    else:
        topics = list(options.topics)
    return [
        TopicPartition(topic, info.partition)
        for topic in topics
        for info in consumer.partitions_for(topic)
    ]


def plan_batch(options: SourceOptions) -> list[OffsetRange]:
    """The exact offset ranges of a batch read (no group: lookups only)."""
    from kafka_actors.consumer import KafkaConsumer

    with KafkaConsumer(options.consumer_config()) as consumer:
        partitions = partitions_of(consumer, options)
        start = resolve_bound(
            consumer,
            options.starting,
            partitions,
            side="starting",
            strategy_latest=options.starting_strategy_latest,
            require_all=True,
        )
        end = resolve_bound(consumer, options.ending, partitions, side="ending", require_all=True)
    ranges: list[OffsetRange] = []
    for tp in sorted(partitions, key=lambda t: (t.topic, t.partition)):
        begin, stop = start[tp], end[tp]
        if stop < begin:
            raise ConfigError(
                f"{tp}: the ending offset {stop} is before the starting offset {begin}",
                key="endingOffsets",
            )
        ranges.append(OffsetRange(tp.topic, tp.partition, begin, stop))
    return ranges
