"""An asyncio service consuming with kafka-actors' ``AsyncKafkaConsumer``.

Two workers of one consumer group read "payment" events from a topic, "process" each one with a
small asynchronous delay (as a service awaiting a database or an HTTP call would), and commit
what they processed after every batch. Their rebalance listener is a coroutine: when
partitions are revoked (the second worker joining, a worker leaving), it first waits for the
batch being processed to finish (the revocation can arrive while the worker awaits inside a
batch: the records already handed out must be processed and committed by this worker, or the
next owner would process them again), then hands the commit of everything processed so far to
the worker's committer task and awaits it, so that the next owner of a partition starts
exactly where this one stopped (no record processed twice). The
service stops by itself once every produced record has been processed, and prints a summary:
records per worker, commits, revocations, records processed more than once (expected: 0).

Run it on the embedded default (librdkafka's mock cluster, in this process)::

    python examples/asyncio_service.py

or against a real cluster (the topic must exist or be auto-created)::

    python examples/asyncio_service.py --bootstrap-servers host:9092 --records 20000 --produce-demo
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import random
import re
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

from kafka_actors import log

log.configure(level="WARNING")  # our lines: WARNING and above, to stderr

from kafka_actors import TopicPartition  # noqa: E402
from kafka_actors.aio import AsyncKafkaConsumer  # noqa: E402
from kafka_actors.protocol.messages import OffsetAndMetadata  # noqa: E402


def produce(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "log_level": 3})
    for i in range(count):
        producer.produce(topic, key=f"account-{i % 97}".encode(), value=f"payment-{i}".encode())
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(60):
        raise SystemExit("could not produce the demo records")


class Worker:
    """One member of the group: a consume loop, a committer task, a coroutine listener."""

    def __init__(
        self, name: str, config: dict[str, Any], topic: str, seen: Any, by_regex: bool
    ) -> None:
        self.name = name
        self.by_regex = by_regex
        self.consumer = AsyncKafkaConsumer(config=config)
        self.topic = topic
        self.seen = seen
        self.processed: dict[TopicPartition, int] = {}
        self.count = 0
        self.commits = 0
        self.revocations = 0
        self.requests: asyncio.Queue[asyncio.Future[dict[TopicPartition, OffsetAndMetadata]]]
        self.requests = asyncio.Queue()
        self.stop = asyncio.Event()
        self.idle = asyncio.Event()  # set while no batch is being processed
        self.idle.set()

    # The rebalance listener: coroutines, run on the service's event loop.
    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        if not revoked:
            return
        self.revocations += 1
        await self.idle.wait()  # the batch handed out before the revocation is finished
        done = asyncio.get_running_loop().create_future()
        await self.requests.put(done)  # the committer task commits; we wait for it
        committed = await done
        for tp in revoked:  # no longer ours: the next owner commits them from now on
            self.processed.pop(tp, None)
        print(
            f"[{self.name}] revoked {sorted(tp.partition for tp in revoked)}: committed "
            f"{ {tp.partition: om.offset for tp, om in sorted(committed.items())} }"
        )

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if assigned:
            print(f"[{self.name}] assigned {sorted(tp.partition for tp in assigned)}")

    async def committer(self) -> None:
        while True:
            done = await self.requests.get()
            try:
                done.set_result(await self.commit())
            except Exception as exc:
                done.set_exception(exc)

    async def commit(self) -> dict[TopicPartition, OffsetAndMetadata]:
        # Only partitions still ours: an offset committed for a partition that moved on would
        # overwrite its new owner's commits.
        owned = self.consumer.assignment()
        offsets = {tp: offset for tp, offset in self.processed.items() if tp in owned}
        if not offsets:
            return {}
        result = await self.consumer.commit(offsets)
        self.commits += 1
        return result

    async def run(self) -> None:
        consumer = self.consumer
        if self.by_regex:
            consumer.subscribe(pattern=f"^{re.escape(self.topic)}$", listener=self)
        else:
            consumer.subscribe([self.topic], listener=self)
        committer = asyncio.ensure_future(self.committer())
        try:
            while not self.stop.is_set():
                batch = await consumer.getmany(timeout_ms=200, max_records=200)
                if not batch:
                    continue
                self.idle.clear()
                try:
                    for tp, records in batch.items():
                        for record in records:
                            await handle(record)
                            self.seen[(record.partition, record.offset)] += 1
                            self.count += 1
                        self.processed[tp] = records[-1].offset + 1
                    await self.commit()
                finally:
                    self.idle.set()
        finally:
            await self.commit()
            await consumer.close()
            committer.cancel()


async def handle(record: Any) -> None:
    """The service's work for one record: mostly quick, sometimes awaiting I/O."""
    if random.random() < 0.1:
        await asyncio.sleep(random.random() * 0.01)


async def serve(bootstrap: str, topic: str, records: int, protocol: str, by_regex: bool) -> int:
    group = f"payments-{uuid.uuid4().hex[:8]}"
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.max.wait.ms": 100,
    }
    if protocol == "classic":
        config["heartbeat.interval.ms"] = 500
        config["session.timeout.ms"] = 10_000
    seen: collections.Counter[tuple[int, int]] = collections.Counter()
    started = time.monotonic()
    first = Worker("worker-1", config, topic, seen, by_regex)
    tasks = [asyncio.ensure_future(first.run())]
    workers = [first]
    while len(seen) < records // 3:  # the second worker joins while the first is busy
        await asyncio.sleep(0.05)
    second = Worker("worker-2", config, topic, seen, by_regex)
    workers.append(second)
    tasks.append(asyncio.ensure_future(second.run()))
    deadline = time.monotonic() + 300
    while len(seen) < records:
        if time.monotonic() > deadline:
            print(f"timed out with {len(seen)} of {records} records", file=sys.stderr)
            break
        if any(t.done() for t in tasks):
            break
        await asyncio.sleep(0.1)
    for w in workers:
        w.stop.set()
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - started
    twice = sum(n - 1 for n in seen.values() if n > 1)
    print(f"\n{len(seen)} of {records} records processed in {elapsed:.1f} s by {group}:")
    for w in workers:
        print(f"  {w.name}: {w.count} records, {w.commits} commits, {w.revocations} revocations")
    print(f"  records processed more than once: {twice}")
    return 0 if len(seen) == records and twice == 0 else 1


@contextlib.contextmanager
def cluster(bootstrap: str | None, topic: str, partitions: int) -> Iterator[str]:
    if bootstrap is not None:
        yield bootstrap
        return
    from kafka_actors.testing.mock import MockCluster

    with MockCluster(num_brokers=3) as mock:
        mock.create_topic(topic, partitions=partitions)
        yield mock.bootstrap_servers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", help="a real cluster (default: embedded mock)")
    parser.add_argument("--topic", default="payments")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--group-protocol", choices=("classic", "consumer"), default="consumer")
    parser.add_argument(
        "--produce-demo",
        action="store_true",
        help="allow writing --records demo records into --topic of --bootstrap-servers",
    )
    args = parser.parse_args()
    if args.bootstrap_servers and not args.produce_demo:
        parser.error(
            f"this example writes {args.records} demo records into {args.topic!r} of the "
            "cluster you named: pass --produce-demo to allow it"
        )
    protocol = args.group_protocol
    with cluster(args.bootstrap_servers, args.topic, args.partitions) as bootstrap:
        produce(bootstrap, args.topic, args.records)
        # On the embedded mock the group subscribes by a regex naming the one topic: the mock
        # (librdkafka 2.x) accepts a KIP-848 heartbeat with topic names only when it also
        # carries a regex field, and aborts otherwise.
        by_regex = args.bootstrap_servers is None and protocol == "consumer"
        return asyncio.run(serve(bootstrap, args.topic, args.records, protocol, by_regex))


if __name__ == "__main__":
    sys.exit(main())
