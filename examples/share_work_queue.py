"""A work queue on a Kafka share group (KIP-932) with kafka-actors' share consumers.

Several workers share one topic as a queue: threads with ``KafkaShareConsumer`` and asyncio
tasks with ``AsyncKafkaShareConsumer``, all in one share group. Unlike a consumer group, a
share group hands the records of one partition to every member: each job record is
acquired by one worker at a time, processed, and acknowledged ACCEPT (explicit mode). One
job is poison: processing it always fails. The worker that got it RELEASEs it (the broker
delivers it again, to any worker, with its delivery count one higher) until it has been
delivered ``--max-deliveries`` times; then it is REJECTed (archived: never delivered again)
and reported. Fetches acquire at most ``max.poll.records`` records
(``share.acquire.mode=record_limit``), so the jobs spread over the workers.

The example stops by itself once every good job was processed and the poison job rejected,
and prints a summary: jobs per worker, the poison job's deliveries, jobs processed more than
once (expected: 0). It exits non-zero if a job was missed or processed twice.

Share groups need a real cluster, Kafka 4.2 or newer (on by default in 4.x; the embedded
librdkafka mock cluster has none). The group's ``share.auto.offset.reset`` is set to
``earliest`` first (a group configuration, through the AdminClient), so the workers read
the jobs produced before they joined::

    python examples/share_work_queue.py --bootstrap-servers host:9092 --produce-demo
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Any

POISON = b"poison"


def produce(bootstrap: str, topic: str, count: int, poison_at: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "log_level": 3})
    for i in range(count):
        value = POISON if i == poison_at else f"job-{i}".encode()
        producer.produce(topic, key=f"job-{i}".encode(), value=value)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(60):
        raise SystemExit("could not produce the demo records")


class Board:
    """What the workers did, shared by all of them (and when to stop)."""

    def __init__(self, jobs: int, max_deliveries: int) -> None:
        self.jobs = jobs  # good jobs: every record but the poison one
        self.max_deliveries = max_deliveries
        self.lock = threading.Lock()
        self.done: Counter[bytes] = Counter()  # job -> times processed
        self.per_worker: Counter[str] = Counter()
        self.poison_deliveries: list[tuple[str, int]] = []  # (worker, delivery count)
        self.poison_rejected = False
        self.stop = threading.Event()
        self.errors: list[BaseException] = []

    def handle(self, worker: str, record: Any, ack: Any) -> Any:
        """Process one record; return how to acknowledge it."""
        if record.value == POISON:
            with self.lock:
                self.poison_deliveries.append((worker, record.delivery_count))
                if record.delivery_count < self.max_deliveries:
                    return ack.RELEASE  # "maybe it works next time"
                self.poison_rejected = True
                self._check()
                return ack.REJECT  # given up: archived, never delivered again
        time.sleep(0.002)  # the job's work
        with self.lock:
            self.done[record.value] += 1
            self.per_worker[worker] += 1
            self._check()
        return ack.ACCEPT

    def _check(self) -> None:
        if self.poison_rejected and len(self.done) >= self.jobs:
            self.stop.set()


def config(bootstrap: str, group: str) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "share.acknowledgement.mode": "explicit",
        "share.acquire.mode": "record_limit",
        "max.poll.records": 10,
    }


def sync_worker(name: str, conf: dict[str, object], topic: str, board: Board) -> None:
    from kafka_actors import AcknowledgeType, KafkaShareConsumer

    try:
        with KafkaShareConsumer(conf) as consumer:
            consumer.subscribe([topic])
            while not board.stop.is_set():
                for record in consumer.poll(0.5):
                    consumer.acknowledge(record, board.handle(name, record, AcknowledgeType))
            consumer.commit_sync(30.0)  # the last acknowledgements, before leaving
    except BaseException as exc:
        board.errors.append(exc)
        board.stop.set()


async def async_worker(name: str, conf: dict[str, object], topic: str, board: Board) -> None:
    from kafka_actors import AcknowledgeType, AsyncKafkaShareConsumer

    async with AsyncKafkaShareConsumer(conf) as consumer:
        consumer.subscribe([topic])
        while not board.stop.is_set():
            for record in await consumer.poll(0.5):
                consumer.acknowledge(record, board.handle(name, record, AcknowledgeType))
        await consumer.commit_sync(30.0)


def asyncio_workers(names: list[str], conf: dict[str, object], topic: str, board: Board) -> None:
    async def run() -> None:
        await asyncio.gather(*(async_worker(n, conf, topic, board) for n in names))

    try:
        asyncio.run(run())
    except BaseException as exc:
        board.errors.append(exc)
        board.stop.set()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--bootstrap-servers", help="a Kafka 4.2+ cluster with share groups")
    parser.add_argument("--topic", default=f"jobs-{uuid.uuid4().hex[:8]}")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--records", type=int, default=1000, help="jobs, one of them poison")
    parser.add_argument("--workers", type=int, default=3, help="threads (KafkaShareConsumer)")
    parser.add_argument(
        "--async-workers", type=int, default=2, help="asyncio tasks (AsyncKafkaShareConsumer)"
    )
    parser.add_argument(
        "--max-deliveries", type=int, default=3, help="then the poison is rejected (1..10)"
    )
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument(
        "--produce-demo",
        action="store_true",
        help="allow writing --records demo records into --topic of --bootstrap-servers",
    )
    args = parser.parse_args()
    if not args.bootstrap_servers:
        parser.error(
            "share groups need a real cluster (Kafka 4.2+); the embedded mock cluster has "
            "none: pass --bootstrap-servers"
        )
    if not args.produce_demo:
        parser.error(
            f"this example writes {args.records} demo records into {args.topic!r} of the "
            "cluster you named: pass --produce-demo to allow it"
        )
    if args.records < 2 or args.workers + args.async_workers < 1:
        parser.error("needs --records >= 2 and at least one worker")
    if not 1 <= args.max_deliveries <= 10:
        parser.error("--max-deliveries must be 1..10 (Kafka's bounds of the delivery limit)")
    from kafka_actors import log

    log.configure(level="WARNING")
    from kafka_actors.testing.share import set_share_group_config

    bootstrap, topic = args.bootstrap_servers, args.topic
    group = f"work-queue-{uuid.uuid4().hex[:8]}"
    # Group configuration (IncrementalAlterConfigs on the GROUP resource): read the topic from
    # its start, not only what arrives after the workers joined; the broker's own delivery
    # attempt limit (it archives a record released that many times) is not below ours, so
    # the poison job is rejected by a worker, on purpose.
    set_share_group_config(
        bootstrap,
        group,
        auto_offset_reset="earliest",
        delivery_count_limit=max(2, args.max_deliveries),
    )
    _create_topic(bootstrap, topic, args.partitions)
    poison_at = args.records // 2
    produce(bootstrap, topic, args.records, poison_at)
    board = Board(args.records - 1, args.max_deliveries)
    conf = config(bootstrap, group)
    threads = [
        threading.Thread(target=sync_worker, args=(f"thread-{i}", conf, topic, board))
        for i in range(args.workers)
    ]
    if args.async_workers:
        names = [f"asyncio-{i}" for i in range(args.async_workers)]
        threads.append(threading.Thread(target=asyncio_workers, args=(names, conf, topic, board)))
    t0 = time.monotonic()
    for t in threads:
        t.start()
    finished = board.stop.wait(args.timeout)
    board.stop.set()
    for t in threads:
        t.join(60)
    took = time.monotonic() - t0

    twice = sum(1 for n in board.done.values() if n > 1)
    print(f"share group {group}, topic {topic}: {args.records} jobs in {took:.1f}s")
    for worker in sorted(board.per_worker):
        print(f"  {worker}: {board.per_worker[worker]} jobs")
    print(f"{len(board.done)} of {args.records - 1} good jobs processed")
    print(f"jobs processed more than once: {twice}")
    deliveries = ", ".join(f"{w} (delivery {c})" for w, c in board.poison_deliveries)
    verdict = "rejected" if board.poison_rejected else "NOT rejected"
    print(f"poison job job-{poison_at} delivered to: {deliveries}; {verdict}")
    ok = (
        finished
        and not board.errors
        and len(board.done) == args.records - 1
        and twice == 0
        and board.poison_rejected
    )
    for exc in board.errors:
        print(f"worker error: {exc!r}", file=sys.stderr)
    return 0 if ok else 1


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    if topic in admin.list_topics(timeout=30).topics:
        return
    for future in admin.create_topics([NewTopic(topic, partitions)]).values():
        future.result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until its leader is known
        t = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if t is not None and t.error is None and all(p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
