"""``python -m kafka_actors query``: offsets for times, as kcat's ``-Q``.

Owns: the ``TOPIC:PARTITION:TIMESTAMP_MS`` arguments and what is printed for them. May touch:
the public consumer API only (``offsets_for_times``, which sends ListOffsets to each
partition's leader). It never creates a topic and commits nothing.

For each argument: the offset of the first record whose timestamp is at or after the
timestamp, and that record's timestamp; ``-1`` for both when there is none (the partition's
records are all older), as ListOffsets answers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

__all__ = ["OffsetQuery", "parse_query", "run_query"]


@dataclass(frozen=True, slots=True)
class OffsetQuery:
    topic: str
    partition: int
    timestamp: int


def parse_query(text: str) -> OffsetQuery:
    """``TOPIC:PARTITION:TIMESTAMP_MS`` (the topic may hold no ``:``, as Kafka's names)."""
    topic, sep, rest = text.partition(":")
    partition, sep2, timestamp = rest.partition(":")
    if not (sep and sep2 and topic and partition.isdigit() and timestamp.isdigit()):
        raise ValueError(f"bad query {text!r}: expected TOPIC:PARTITION:TIMESTAMP_MS")
    return OffsetQuery(topic, int(partition), int(timestamp))


def run_query(
    config: dict[str, object], queries: Sequence[OffsetQuery], out: TextIO, *, as_json: bool
) -> int:
    from kafka_actors import KafkaConsumer, TopicPartition
    from kafka_actors.cli.consume import check_partitions
    from kafka_actors.cli.tables import format_table

    cfg = dict(config)
    cfg["allow.auto.create.topics"] = False
    cfg.setdefault("enable.auto.commit", False)
    timeout = 30.0
    with KafkaConsumer(cfg) as consumer:
        for topic in dict.fromkeys(q.topic for q in queries):
            check_partitions(consumer, topic, [q.partition for q in queries if q.topic == topic])
        # One lookup per round: a round asks each partition for one timestamp.
        results: dict[tuple[TopicPartition, int], tuple[int, int]] = {}
        remaining = list(
            dict.fromkeys((TopicPartition(q.topic, q.partition), q.timestamp) for q in queries)
        )
        while remaining:
            batch: dict[TopicPartition, int] = {}
            later: list[tuple[TopicPartition, int]] = []
            for tp, ts in remaining:
                if tp in batch:
                    later.append((tp, ts))
                else:
                    batch[tp] = ts
            found = consumer.offsets_for_times(batch, timeout=timeout)
            for tp, ts in batch.items():
                hit = found.get(tp)
                results[(tp, ts)] = (-1, -1) if hit is None else (hit.offset, hit.timestamp)
            remaining = later
    rows = [(q, *results[(TopicPartition(q.topic, q.partition), q.timestamp)]) for q in queries]
    if as_json:
        out.write(
            json.dumps(
                [
                    {
                        "topic": q.topic,
                        "partition": q.partition,
                        "timestamp": q.timestamp,
                        "offset": offset,
                        "record_timestamp": found_at,
                    }
                    for q, offset, found_at in rows
                ]
            )
            + "\n"
        )
    else:
        out.write(
            format_table(
                ["TOPIC", "PARTITION", "TIMESTAMP", "OFFSET", "RECORD-TIMESTAMP"],
                [[q.topic, q.partition, q.timestamp, off, at] for q, off, at in rows],
            )
        )
    out.flush()
    return 0
