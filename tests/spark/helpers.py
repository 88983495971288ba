"""Helpers of the Spark tests: unique names, producing with confluent-kafka, reading the group's
offsets with Kafka's own kafka-consumer-groups tool, starting queries on the source."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from typing import Any

_seq = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{next(_seq)}-{time.monotonic_ns() % 1_000_000}"


def produce(
    bootstrap: str, topic: str, count: int, *, start: int = 0, partitions: int | None = None
) -> None:
    """``count`` records with values ``b"<i>"`` (i from ``start``), round robin over
    ``partitions`` when given (else the producer's partitioner on the key)."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 5000}
    )
    for i in range(start, start + count):
        kwargs: dict[str, Any] = {"key": str(i).encode(), "value": str(i).encode()}
        if partitions is not None:
            kwargs["partition"] = i % partitions
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0


def describe_group(broker: Any, group: str) -> dict[int, tuple[int | None, int | None, int | None]]:
    """``kafka-consumer-groups --describe``: partition → (current offset, log end offset, lag),
    None where the tool prints ``-``."""
    proc = broker.run_tool(
        "kafka-consumer-groups",
        ["--bootstrap-server", broker.bootstrap_servers, "--describe", "--group", group],
    )
    assert proc.returncode == 0, proc.stderr

    def number(text: str) -> int | None:
        return None if text == "-" else int(text)

    out: dict[int, tuple[int | None, int | None, int | None]] = {}
    for line in proc.stdout.splitlines():
        columns = line.split()
        if len(columns) >= 6 and columns[0] == group and columns[2].isdigit():
            out[int(columns[2])] = (number(columns[3]), number(columns[4]), number(columns[5]))
    return out


def describe_members(broker: Any, group: str) -> list[int]:
    """``kafka-consumer-groups --describe --members``: the partition count of each member."""
    proc = broker.run_tool(
        "kafka-consumer-groups",
        [
            "--bootstrap-server",
            broker.bootstrap_servers,
            "--describe",
            "--members",
            "--group",
            group,
        ],
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    counts: list[int] = []
    header: list[str] | None = None
    for line in lines:
        columns = line.split()
        if columns and columns[0] == "GROUP":
            header = columns
            continue
        if header is not None and columns and columns[0] == group:
            counts.append(int(columns[header.index("#PARTITIONS")]))
    return counts


def source(spark: Any, bootstrap: str, group: str, topic: str, **options: str) -> Any:
    reader = (
        spark.readStream.format("kafka-actors")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.group.id", group)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def committed_rows(query: Any) -> int:
    return sum(int(p["numInputRows"]) for p in query.recentProgress)
