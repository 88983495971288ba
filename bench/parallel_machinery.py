"""The per-record cost of parallel processing's machinery alone: the WorkScheduler (offer,
take_ready, succeeded) driven as AsyncParallelConsumer drives it, on real ConsumerRecord
tuples, with no broker, no consumer and a no-op handler. Prints CPU microseconds per record
and records per CPU-second for each ordering; the broker-side rate is in bench/parallel.py.

Owns: nothing but its own run (in-process, single thread).

    .venv/bin/python bench/parallel_machinery.py [--records 200000] [--keys 10000]
        [--batch 500] [--concurrency 256] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

from kafka_actors.parallel.messages import Ordering, Task
from kafka_actors.parallel.scheduler import WorkConfig, WorkScheduler
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord, TimestampType


def records(n: int, keys: int) -> list[ConsumerRecord]:
    return [
        ConsumerRecord(
            "t", 0, i, 0, TimestampType.CREATE_TIME, f"k{i % keys}".encode(), b"v" * 100, (), 0
        )
        for i in range(n)
    ]


def run(ordering: Ordering, recs: list[ConsumerRecord], batch: int, concurrency: int) -> float:
    """CPU seconds to take every record from offer to completion."""
    scheduler = WorkScheduler(
        WorkConfig(ordering=ordering, max_concurrency=concurrency), random=lambda: 0.5
    )
    tp = TopicPartition("t", 0)
    scheduler.assign(tp, None)
    done = 0
    start = time.process_time()
    for i in range(0, len(recs), batch):
        scheduler.offer(tp, recs[i : i + batch])
        while True:
            started = scheduler.take_ready(0)
            if not started:
                break
            ids = []
            for item in started:
                assert isinstance(item, Task)
                ids.append(item.work_id)
            done += scheduler.succeeded_all(ids)
    elapsed = time.process_time() - start
    assert done == len(recs), (done, len(recs))
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    recs = records(args.records, args.keys)
    print(f"{'ordering':<10} {'CPU us/record':>14} {'records/CPU-s':>14}  (best of {args.repeat})")
    for ordering in (Ordering.KEY, Ordering.PARTITION, Ordering.UNORDERED):
        best = min(run(ordering, recs, args.batch, args.concurrency) for _ in range(args.repeat))
        per = best / len(recs)
        print(f"{ordering.value:<10} {per * 1e6:>14.2f} {1 / per:>14,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
