"""The per-record cost of ParallelConsumer's and AsyncParallelConsumer's machinery (handler
pool or tasks, scheduler, outcomes) without a broker: their own code is driven with records
offered straight to the scheduler, as a poll would, with a no-op handler. Prints records/s
(wall) and CPU microseconds per record (the process's CPU time, every thread), the best of
``--repeat`` runs; the CPU figure is the stable one on a shared machine.

Owns: nothing but its own run (in-process; the consumers are made and never subscribed).

    .venv/bin/python bench/parallel_standin.py [--records 100000] [--partitions 1,8]
        [--keys 10000] [--ways threaded-key,threaded-unordered,async-key,async-unordered]
        [--concurrency 256] [--repeat 3] [--profile WAY]
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from typing import Any

from kafka_actors.parallel.aio import AsyncParallelConsumer
from kafka_actors.parallel.consumer import ParallelConsumer
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord, TimestampType

BATCH = 500  # max.poll.records
CONFIG = {"bootstrap.servers": "127.0.0.1:1", "group.id": "standin", "enable.auto.commit": False}


def make_records(n: int, partitions: int, keys: int) -> dict[int, list[ConsumerRecord]]:
    out: dict[int, list[ConsumerRecord]] = {p: [] for p in range(partitions)}
    for i in range(n):
        key = i % keys
        p = key % partitions
        out[p].append(
            ConsumerRecord(
                "t", p, len(out[p]), 0, TimestampType.CREATE_TIME, b"k%d" % key, b"v" * 100, (), 0
            )
        )
    return out


class Feed:
    """Offers the next batch of each partition whose fetching is not paused (a poll)."""

    def __init__(self, records: dict[int, list[ConsumerRecord]]) -> None:
        self.records = records
        self.at = dict.fromkeys(records, 0)

    def next(self, paused: Any) -> dict[TopicPartition, list[ConsumerRecord]]:
        out = {}
        for p, recs in self.records.items():
            tp = TopicPartition("t", p)
            at = self.at[p]
            if at < len(recs) and tp not in paused:
                out[tp] = recs[at : at + BATCH]
                self.at[p] = at + BATCH
        return out


def threaded(records: dict[int, list[ConsumerRecord]], ordering: str, concurrency: int) -> int:
    total = sum(len(r) for r in records.values())
    count = [0]
    done = threading.Event()
    lock = threading.Lock()

    def handle(record: ConsumerRecord) -> None:
        with lock:
            count[0] += 1
            if count[0] >= total:
                done.set()

    pc = ParallelConsumer(
        CONFIG,
        handler=handle,
        ordering=ordering,
        max_concurrency=concurrency,
        offset_metadata_max_bytes=4096,
    )
    pc._apply_pauses = lambda: None  # type: ignore[method-assign]  # no consumer assignment
    pc._consumer.close(0.5)  # never used: its connection attempts would be counted
    try:
        with pc._lock:
            for p in records:
                pc._scheduler.assign(TopicPartition("t", p), None)
        feed = Feed(records)
        while not done.is_set():
            pc._turn(poll=False)
            with pc._lock:
                batch = feed.next(pc._scheduler.fetch_pauses())
                for tp, recs in batch.items():
                    pc._scheduler.offer(tp, recs)
            if not batch:
                done.wait(0.001)  # a poll waiting for a fetch
        return count[0]
    finally:
        pc._pool.shutdown()


def asynchronous(records: dict[int, list[ConsumerRecord]], ordering: str, concurrency: int) -> int:
    total = sum(len(r) for r in records.values())
    count = [0]

    async def handle(record: ConsumerRecord) -> None:
        count[0] += 1

    async def main() -> None:
        pc = AsyncParallelConsumer(
            CONFIG,
            handler=handle,
            ordering=ordering,
            max_concurrency=concurrency,
            offset_metadata_max_bytes=4096,
        )
        pc._bind()
        pc._apply_pauses = lambda: None  # type: ignore[method-assign]  # no consumer assignment
        await pc._consumer.close(0.5)  # never used: its connection attempts would be counted
        try:
            for p in records:
                pc._scheduler.assign(TopicPartition("t", p), None)
            feed = Feed(records)
            while count[0] < total:
                pc._start_ready()
                batch = feed.next(pc._scheduler.fetch_pauses())
                for tp, recs in batch.items():
                    pc._scheduler.offer(tp, recs)
                if batch:
                    pc._start_ready()
                await asyncio.sleep(0 if batch else 0.001)
        finally:
            for task in list(pc._tasks):
                task.cancel()

    asyncio.run(main())
    return count[0]


def measure(
    way: str, records: dict[int, list[ConsumerRecord]], concurrency: int
) -> tuple[float, float]:
    kind, ordering = way.split("-")
    fn = threaded if kind == "threaded" else asynchronous
    total = sum(len(r) for r in records.values())
    wall, cpu = time.perf_counter(), time.process_time()
    handled = fn(records, ordering, concurrency)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert handled >= total, (handled, total)
    return total / wall, cpu / total * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--partitions", default="1,8")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument(
        "--ways", default="threaded-key,threaded-unordered,async-key,async-unordered"
    )
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", default="")
    args = parser.parse_args()
    if args.profile:
        recs = make_records(args.records, int(args.partitions.split(",")[0]), args.keys)
        try:
            import yappi  # every thread's calls (cProfile sees the main thread only)
        except ImportError:
            parser.error("--profile needs yappi (pip install yappi), which the extras omit")

        yappi.set_clock_type("cpu")
        yappi.start()
        measure(args.profile, recs, args.concurrency)
        yappi.stop()
        yappi.get_func_stats().sort("tsub").print_all(
            columns={0: ("name", 90), 1: ("ncall", 10), 2: ("tsub", 8), 3: ("ttot", 8)}
        )
        return 0
    print(f"{'way':<20} {'partitions':>10} {'records/s':>10} {'CPU us/record':>14}")
    for partitions in map(int, args.partitions.split(",")):
        recs = make_records(args.records, partitions, args.keys)
        for way in args.ways.split(","):
            runs = [measure(way, recs, args.concurrency) for _ in range(args.repeat)]
            rate, cpu = max(r[0] for r in runs), min(r[1] for r in runs)
            print(f"{way:<20} {partitions:>10} {rate:>10,.0f} {cpu:>14.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
