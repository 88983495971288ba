"""Parallel processing: records/s of handlers run by ParallelConsumer and AsyncParallelConsumer
beside a plain poll loop and aiokafka with one task per partition, in one run, with ratios.

Owns: nothing but its own run. Starts ONE Kafka 4.x broker with the testkit (or uses
``--bootstrap``), creates two topics (1 and 8 partitions), and produces ``--records``
records to each with confluent-kafka over ``--keys`` keys (10,000 by default; a key keeps its
partition). Then, per topic and per handler (0 ms: a no-op; 1 ms and 10 ms: a sleep, as I/O
is), each way of handling reads from the beginning in a new group until it handled its
quota of records:

* ``poll loop``: kafka-actors' ``KafkaConsumer.poll`` and the handler called on each record in
  turn (what every Python consumer does today: the sequential rate);
* ``aiokafka task/partition``: aiokafka, ``assign`` + ``seek_to_beginning``, one asyncio task
  per partition awaiting ``getmany(tp)`` and its handler (``asyncio.sleep``) record by
  record: partitions concurrently, records of a partition in turn;
* ``parallel key`` / ``parallel partition`` / ``parallel unordered``: ``ParallelConsumer``
  with that ordering, ``max_concurrency`` (256) pool threads;
* ``async key`` / ``async partition`` / ``async unordered``: ``AsyncParallelConsumer``
  (coroutine handlers, ``asyncio.sleep``) with ``max_concurrency`` (256).

The rate is (quota - 1) / (time of the quota-th handling - time of the first one): group
joins and the first fetch are left out. Handlings are recorded without a lock (``Tally``), so
the bookkeeping adds little to a no-op handler; duplicates are counted from every handling.
A sequential way with a sleeping handler gets a smaller quota (``--seconds-sequential`` of
work at its expected rate); the others handle ``--quota`` records (all of them for the
no-op). ``ratio`` is the rate over the poll loop's with the same handler on the same topic
(> 1: faster). A way that handled a record twice or fewer than its quota prints ``!!`` and
makes the exit status non-zero.

    .venv/bin/python bench/parallel.py [--records 100000] [--quota 20000] [--keys 10000]
        [--handlers 0,1,10] [--ways ...] [--max-concurrency 256] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

WAYS = (
    "poll loop",
    "aiokafka task/partition",
    "parallel key",
    "parallel partition",
    "parallel unordered",
    "async key",
    "async partition",
    "async unordered",
)
SEQUENTIAL = {"poll loop"}
TIMEOUT_S = 300.0


@dataclass
class Tally:
    """What one way handled: every handling (in the order they were recorded), and the times
    of the first and of the quota-th. No lock: ``list.append`` and ``next`` on a counter are
    atomic, so handlers on many threads record with no contention (a lock here was the
    largest part of a no-op handler's cost); the duplicates and the distinct count are
    computed from the whole list at the end, exactly."""

    quota: int
    handled: list[tuple[int, int]] = field(default_factory=list)
    counter: Iterator[int] = field(default_factory=itertools.count)
    first: float = 0.0
    last: float = 0.0
    done: threading.Event = field(default_factory=threading.Event)

    def add(self, partition: int, offset: int) -> None:
        self.handled.append((partition, offset))
        n = next(self.counter)  # 0 for the first handling, each number once
        if n == 0:
            self.first = time.perf_counter()
        elif n == self.quota - 1:
            self.last = time.perf_counter()
            self.done.set()

    @functools.cached_property
    def seen(self) -> set[tuple[int, int]]:
        """The distinct places handled (read once the run ended)."""
        return set(self.handled)

    @property
    def twice(self) -> int:
        """Handlings of a place handled before (read once the run ended)."""
        return len(self.handled) - len(self.seen)

    @property
    def rate(self) -> float:
        """Handlings per second from the first to the quota-th."""
        n = self.quota
        return (n - 1) / (self.last - self.first) if n > 1 and self.last > self.first else 0.0


def config(bootstrap: str, **more: object) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-parallel-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        **more,
    }


def run_poll_loop(bootstrap: str, topic: str, handler_s: float, tally: Tally) -> None:
    from kafka_actors import KafkaConsumer

    with KafkaConsumer(config(bootstrap, **{"enable.auto.commit": False})) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT_S
        while not tally.done.is_set() and time.monotonic() < deadline:
            for record in consumer.poll(0.1):
                if handler_s:
                    time.sleep(handler_s)
                tally.add(record.partition, record.offset)
                if tally.done.is_set():
                    break


def run_parallel(
    bootstrap: str, topic: str, handler_s: float, tally: Tally, ordering: str, concurrency: int
) -> None:
    from kafka_actors import ParallelConsumer

    def handle(record: Any) -> None:
        if handler_s:
            time.sleep(handler_s)
        tally.add(record.partition, record.offset)

    pc = ParallelConsumer(
        config(bootstrap), handler=handle, ordering=ordering, max_concurrency=concurrency
    )
    with pc:
        pc.subscribe([topic])
        runner = threading.Thread(target=pc.run, daemon=True)
        runner.start()
        tally.done.wait(TIMEOUT_S)
        pc.stop()
        runner.join(60)


def run_async_parallel(
    bootstrap: str, topic: str, handler_s: float, tally: Tally, ordering: str, concurrency: int
) -> None:
    from kafka_actors import AsyncParallelConsumer

    async def handle(record: Any) -> None:
        if handler_s:
            await asyncio.sleep(handler_s)
        tally.add(record.partition, record.offset)

    async def main() -> None:
        async with AsyncParallelConsumer(
            config(bootstrap), handler=handle, ordering=ordering, max_concurrency=concurrency
        ) as pc:
            pc.subscribe([topic])
            runner = asyncio.create_task(pc.run())
            deadline = time.monotonic() + TIMEOUT_S
            while not tally.done.is_set() and time.monotonic() < deadline and not runner.done():
                await asyncio.sleep(0.02)
            pc.stop()
            await runner

    asyncio.run(main())


def run_aiokafka(
    bootstrap: str, topic: str, partitions: int, handler_s: float, tally: Tally
) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
        )
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)

            async def one_partition(tp: Any) -> None:
                while not tally.done.is_set():
                    batches = await consumer.getmany(tp, timeout_ms=100)
                    for record in batches.get(tp, []):
                        if handler_s:
                            await asyncio.sleep(handler_s)
                        tally.add(record.partition, record.offset)
                        if tally.done.is_set():
                            return

            await asyncio.wait_for(asyncio.gather(*(one_partition(tp) for tp in tps)), TIMEOUT_S)
        finally:
            await consumer.stop()

    asyncio.run(main())


def produce(bootstrap: str, topic: str, partitions: int, n: int, keys: int) -> float:
    from confluent_kafka import Producer

    started = time.perf_counter()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 0})
    for i in range(n):
        k = i % keys
        while True:
            try:
                producer.produce(
                    topic, key=b"key-%d" % k, value=b"%d" % i, partition=k % partitions
                )
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return time.perf_counter() - started


def quota_of(way: str, handler_ms: int, partitions: int, args: argparse.Namespace) -> int:
    records: int = args.records
    most: int = args.quota
    if handler_ms == 0:
        return records
    expected_concurrency: int = args.max_concurrency
    if way in SEQUENTIAL:
        expected_concurrency = 1
    elif way in ("aiokafka task/partition", "parallel partition", "async partition"):
        expected_concurrency = partitions
    if way in SEQUENTIAL or expected_concurrency < 16:
        per_s = expected_concurrency * 1000 / handler_ms
        return max(50, min(most, int(per_s * args.seconds_sequential)))
    return min(records, most)


def run_way(
    way: str, bootstrap: str, topic: str, partitions: int, handler_ms: int, quota: int, c: int
) -> Tally:
    tally = Tally(quota)
    h = handler_ms / 1000
    runs: dict[str, Callable[[], None]] = {
        "poll loop": lambda: run_poll_loop(bootstrap, topic, h, tally),
        "aiokafka task/partition": lambda: run_aiokafka(bootstrap, topic, partitions, h, tally),
        "parallel key": lambda: run_parallel(bootstrap, topic, h, tally, "key", c),
        "parallel partition": lambda: run_parallel(bootstrap, topic, h, tally, "partition", c),
        "parallel unordered": lambda: run_parallel(bootstrap, topic, h, tally, "unordered", c),
        "async key": lambda: run_async_parallel(bootstrap, topic, h, tally, "key", c),
        "async partition": lambda: run_async_parallel(bootstrap, topic, h, tally, "partition", c),
        "async unordered": lambda: run_async_parallel(bootstrap, topic, h, tally, "unordered", c),
    }
    runs[way]()
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="records per topic")
    parser.add_argument("--quota", type=int, default=20_000, help="records per sleeping run")
    parser.add_argument("--seconds-sequential", type=float, default=3.0)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--handlers", default="0,1,10", help="handler times in ms")
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--max-concurrency", type=int, default=256)
    parser.add_argument("--bootstrap", help="use this broker (else start one)")
    args = parser.parse_args()
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    unknown = set(ways) - set(WAYS)
    if unknown:
        parser.error(f"unknown ways {sorted(unknown)}; known: {', '.join(WAYS)}")
    handlers = [int(h) for h in args.handlers.split(",")]

    from kafka_actors.testing import KafkaBroker

    broker: Any = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        broker = KafkaBroker()
        broker.start()
        bootstrap = broker.bootstrap_servers
    failed = False
    try:
        suffix = f"{time.time_ns() % 10**9}"
        topics = [(f"bench-parallel-p1-{suffix}", 1), (f"bench-parallel-p8-{suffix}", 8)]
        for name, parts in topics:
            if broker is not None:
                broker.create_topic(name, parts)
            else:
                from confluent_kafka.admin import AdminClient
                from confluent_kafka.cimpl import NewTopic

                admin = AdminClient({"bootstrap.servers": bootstrap})
                for f in admin.create_topics([NewTopic(name, parts, 1)]).values():
                    f.result(60)
                time.sleep(2)
            took = produce(bootstrap, name, parts, args.records, args.keys)
            print(
                f"produced {args.records:,} records over {args.keys:,} keys to {name} "
                f"({parts} partition(s)) in {took:.1f}s"
            )
        print(f"max_concurrency={args.max_concurrency}; ratio: rate over the poll loop's")
        for name, parts in topics:
            for handler_ms in handlers:
                print(f"\n{parts} partition(s), handler {handler_ms} ms")
                print(f"{'way':26} {'records':>8} {'records/s':>11} {'ratio':>9}")
                base: float | None = None
                for way in ways:
                    quota = quota_of(way, handler_ms, parts, args)
                    # Each way on the same heap: the last way's tally (a tuple per record,
                    # and their set) is gone, not traversed by this way's collections.
                    gc.collect()
                    tally = run_way(
                        way, bootstrap, name, parts, handler_ms, quota, args.max_concurrency
                    )
                    rate = tally.rate
                    if way == "poll loop":
                        base = rate
                    bad = tally.twice or len(tally.seen) < quota
                    failed = failed or bool(bad)
                    ratio = f"{rate / base:8.1f}x" if base else f"{'-':>9}"
                    mark = (
                        f"  !! handled {len(tally.seen)} of {quota}, {tally.twice} twice"
                        if bad
                        else ""
                    )
                    print(f"{way:26} {len(tally.seen):8d} {rate:11,.0f} {ratio}{mark}", flush=True)
                    del tally
    finally:
        if broker is not None:
            broker.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
