"""Asyncio consumer throughput: kafka-actors' AsyncKafkaConsumer beside aiokafka.

Owns: nothing but its own run. Starts ONE Kafka 4.x broker with the testkit (or uses
``--bootstrap``), creates two topics (1 and 8 partitions), produces the same data into each
once with confluent-kafka (``--records`` records, 8-byte keys, ``--value-size``-byte values,
no compression), then reads each topic from the beginning to the end with each client, each in
its own subprocess:

* ``kafka-actors``: ``AsyncKafkaConsumer.getmany(max_records=500)`` after ``assign`` +
  ``seek_to_beginning`` (no group);
* ``aiokafka``: ``AIOKafkaConsumer.getmany(max_records=500)``, the same way;
* ``kafka-actors iter`` / ``aiokafka iter``: ``async for record in consumer`` (one record per
  step).

Same fetch settings (Java's defaults: fetch.min.bytes 1, fetch.max.wait.ms 500,
fetch.max.bytes 50 MiB, max.partition.fetch.bytes 1 MiB), CRCs checked, no commits. Every
client touches the key, value and offset of each record. The clock runs from just before the
consumer is created until the last record is handed out. Each child also runs a ticker task
(5 ms sleeps) and reports the event loop's worst lag (oversleep) during the run. The ratio is
kafka-actors / aiokafka records/s for the same way of reading: > 1 means faster.

    .venv/bin/python bench/consume_async.py [--records 1000000] [--value-size 100]
        [--clients kafka-actors,aiokafka,...] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CLIENTS = ("kafka-actors", "aiokafka", "kafka-actors iter", "aiokafka iter")
MAX_RECORDS = 500
FETCH = {
    "fetch.min.bytes": 1,
    "fetch.max.wait.ms": 500,
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 1_048_576,
}
CHILD_TIMEOUT_S = 900.0


class Tally:
    __slots__ = ("count", "first_at", "last_offset", "nbytes")

    def __init__(self) -> None:
        self.count = 0
        self.nbytes = 0
        self.last_offset = -1
        self.first_at: float | None = None

    def take(self, r: Any) -> None:
        k = r.key
        v = r.value
        self.last_offset = r.offset
        self.nbytes += len(v) if v is not None else 0
        self.nbytes += len(k) if k is not None else 0
        self.count += 1
        if self.first_at is None:
            self.first_at = time.perf_counter()


class Ticker:
    """Worst oversleep of 5 ms sleeps: how long the loop was kept from running tasks."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.ticks = 0

    async def run(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.005)
            self.worst = max(self.worst, time.perf_counter() - t - 0.005)
            self.ticks += 1


async def run_kafka_actors(
    bootstrap: str, topic: str, partitions: int, expected: int, one_by_one: bool
) -> Tally:
    from kafka_actors.aio import AsyncKafkaConsumer
    from kafka_actors.protocol.messages import TopicPartition

    tally = Tally()
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "auto.offset.reset": "earliest",
        "max.poll.records": MAX_RECORDS,
        **FETCH,
    }
    async with AsyncKafkaConsumer(config=config) as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        if one_by_one:
            async for r in consumer:
                tally.take(r)
                if tally.count >= expected:
                    break
        else:
            while tally.count < expected:
                batch = await consumer.getmany(timeout_ms=1000, max_records=MAX_RECORDS)
                for records in batch.values():
                    for r in records:
                        tally.take(r)
    return tally


async def run_aiokafka(
    bootstrap: str, topic: str, partitions: int, expected: int, one_by_one: bool
) -> Tally:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    tally = Tally()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        check_crcs=True,
        fetch_min_bytes=FETCH["fetch.min.bytes"],
        fetch_max_wait_ms=FETCH["fetch.max.wait.ms"],
        fetch_max_bytes=FETCH["fetch.max.bytes"],
        max_partition_fetch_bytes=FETCH["max.partition.fetch.bytes"],
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        if one_by_one:
            async for r in consumer:
                tally.take(r)
                if tally.count >= expected:
                    break
        else:
            while tally.count < expected:
                batch = await consumer.getmany(timeout_ms=1000, max_records=MAX_RECORDS)
                for records in batch.values():
                    for r in records:
                        tally.take(r)
    finally:
        await consumer.stop()
    return tally


def child(args: argparse.Namespace) -> int:
    one_by_one = args.child.endswith(" iter")
    if args.child.startswith("kafka-actors"):
        from kafka_actors import log

        log.configure(level="WARNING")
        import kafka_actors.aio  # noqa: F401  (imports are not measured)

        runner = run_kafka_actors
    else:
        import aiokafka  # noqa: F401

        runner = run_aiokafka

    async def go() -> tuple[Tally, float, float, Ticker]:
        ticker = Ticker()
        task = asyncio.get_running_loop().create_task(ticker.run())
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        tally = await runner(args.bootstrap, args.topic, args.partitions, args.records, one_by_one)
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        task.cancel()
        return tally, elapsed, cpu, ticker

    t0 = time.perf_counter()
    tally, elapsed, cpu, ticker = asyncio.run(go())
    result = {
        "client": args.child,
        "records": tally.count,
        "bytes": tally.nbytes,
        "seconds": elapsed,
        "first_s": (tally.first_at - t0) if tally.first_at is not None else None,
        "cpu_s": cpu,
        "loop_lag_worst_ms": ticker.worst * 1000,
        "ticks": ticker.ticks,
    }
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def produce(bootstrap: str, topic: str, n: int, value_size: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "none"})
    value = (b"0123456789abcdef" * (value_size // 16 + 1))[:value_size]
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value, b"%08d" % i)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError(f"records not delivered to {topic}")


def run_child(client: str, bootstrap: str, topic: str, partitions: int, n: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        client,
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--partitions",
        str(partitions),
        "--records",
        str(n),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    raise RuntimeError(f"{client} on {topic} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def print_table(title: str, results: list[dict[str, Any]], n: int) -> None:
    rates = {r["client"]: r["records"] / r["seconds"] for r in results}
    print(f"\n{title}")
    print(
        f"{'client':18} {'records/s':>11} {'total s':>8} {'first s':>8} {'cpu s':>7} "
        f"{'loop lag max ms':>16} {'ka/aiokafka':>12}"
    )
    for r in results:
        name = r["client"]
        rate = rates[name]
        peer = name.replace("kafka-actors", "aiokafka")
        ratio = (
            f"{rate / rates[peer]:11.2f}x"
            if name.startswith("kafka-actors") and peer in rates
            else ""
        )
        first = f"{r['first_s']:8.2f}" if r["first_s"] is not None else f"{'-':>8}"
        print(
            f"{name:18} {rate:11,.0f} {r['seconds']:8.2f} {first} {r['cpu_s']:7.2f} "
            f"{r['loop_lag_worst_ms']:16.1f} {ratio:>12}"
        )
        if r["records"] != n:
            print(f"  !! {name} consumed {r['records']} records, expected {n}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per topic")
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--bootstrap", help="use this broker (else start one)")
    parser.add_argument("--rounds", type=int, default=1, help="runs per client (best is kept)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--partitions", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    broker: Any = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from kafka_actors.testing import jars
        from kafka_actors.testing.broker import KafkaBroker

        broker = KafkaBroker(kafka_version=jars.default_version()).__enter__()
        bootstrap = broker.bootstrap_servers
    try:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": bootstrap})
        suffix = f"{os.getpid()}-{time.time_ns() % 10**9}"
        topics = [(f"bench-async-1p-{suffix}", 1), (f"bench-async-8p-{suffix}", 8)]
        for name, parts in topics:
            admin.create_topics([NewTopic(name, parts, 1)])[name].result(60)
            produce(bootstrap, name, args.records, args.value_size)
        print(
            f"{args.records:,} records of {args.value_size} B per topic, one broker "
            f"({bootstrap}), python {sys.version.split()[0]}"
        )
        for name, parts in topics:
            results = []
            for client in clients:
                runs = [
                    run_child(client, bootstrap, name, parts, args.records)
                    for _ in range(max(1, args.rounds))
                ]
                results.append(max(runs, key=lambda r: r["records"] / r["seconds"]))
            print_table(
                f"{name} ({parts} partition{'s' if parts > 1 else ''})", results, args.records
            )
    finally:
        if broker is not None:
            broker.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
