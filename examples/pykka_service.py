"""A pykka service consuming Kafka through kafka-actors' pykka bridge, with safe commits.

Two workers of one consumer group count "page view" records. Each worker is a pykka actor
(a :class:`~kafka_actors.pykka.StreamSubscriber`) fed by its own
:class:`~kafka_actors.pykka.KafkaBridge` actor, which owns a consumer: the worker asks for
records as it processes them (demand: the bridge pauses the partitions when it stops asking),
commits what it processed every ``--commit-every`` records through its bridge, and, when
partitions are revoked (the second worker joining, a worker closing), commits what it
processed of them through the bridge *before* acknowledging the revocation, so the next owner
starts exactly where it stopped. The second worker joins once a third of the records are
processed. When every record has been processed the program closes both bridges (each close
revokes the worker's partitions: it commits its final positions), checks the group's committed
offsets against the end offsets, prints a summary and exits non-zero if a record was missed,
processed twice, or a committed offset is behind.

Run it (one command; librdkafka's mock cluster starts in this process and stops by itself)::

    python examples/pykka_service.py

Options: ``--records N`` (default 10000), ``--commit-every N``, and ``--bootstrap-servers
host:port --topic name`` for a real cluster whose topic already holds the records.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
import time
from typing import Any

from kafka_actors import log as _log

_log.configure(level=os.environ.get("KAFKA_ACTORS_LOG_LEVEL", "WARNING"))

import pykka  # noqa: E402

from kafka_actors import KafkaConsumer  # noqa: E402
from kafka_actors.protocol.messages import TopicPartition  # noqa: E402
from kafka_actors.protocol.records.decode import ConsumerRecord  # noqa: E402
from kafka_actors.pykka import (  # noqa: E402
    Close,
    Closed,
    CommitFailed,
    CommitOk,
    KafkaBridge,
    PartitionsRevoked,
    RecordBatch,
    StreamSubscriber,
    call,
)


class Tally:
    """What the workers processed, shared with the main program (under its lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: collections.Counter[tuple[int, int]] = collections.Counter()
        self.views: collections.Counter[str] = collections.Counter()
        self.per_worker: collections.Counter[str] = collections.Counter()
        self.revocations: collections.Counter[str] = collections.Counter()
        self.commits = 0
        self.commit_failures = 0

    def processed(self) -> int:
        with self.lock:
            return len(self.seen)


class ViewCounter(StreamSubscriber):
    """Counts page views; commits periodically and (by the base class) on revocation."""

    window = 1000

    def __init__(
        self, bridge: pykka.ActorRef[Any], name: str, tally: Tally, commit_every: int
    ) -> None:
        super().__init__(bridge)
        self.name = name
        self.tally = tally
        self.commit_every = commit_every
        self.since_commit = 0

    def process(self, records: tuple[ConsumerRecord, ...]) -> None:
        with self.tally.lock:
            for record in records:
                self.tally.seen[(record.partition, record.offset)] += 1
                self.tally.views[(record.key or b"?").decode()] += 1
            self.tally.per_worker[self.name] += len(records)
        self.since_commit += len(records)
        time.sleep(0.0005 * len(records))  # the service's own work (0.5 ms a record)

    def on_receive(self, message: Any) -> Any:
        result = super().on_receive(message)
        if isinstance(message, RecordBatch) and self.since_commit >= self.commit_every:
            self.since_commit = 0
            self.commit(None, self._committed)  # what this worker processed so far
        return result

    def on_revoked(self, message: PartitionsRevoked) -> None:
        if message.partitions:
            with self.tally.lock:
                self.tally.revocations[self.name] += 1
        super().on_revoked(message)  # commit the revoked partitions' positions, then ack

    def _committed(self, result: CommitOk | CommitFailed) -> None:
        with self.tally.lock:
            if isinstance(result, CommitOk):
                self.tally.commits += 1
            else:
                self.tally.commit_failures += 1


def start_worker(
    name: str, config: dict[str, object], topic: str, tally: Tally, commit_every: int
) -> tuple[pykka.ActorRef[Any], pykka.ActorRef[Any]]:
    bridge = KafkaBridge.start(config)
    worker = ViewCounter.start(bridge, name, tally, commit_every)
    worker.proxy().subscribe([topic]).get(timeout=30)
    return bridge, worker


def produce(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    for i in range(count):
        page = f"/page/{i % 37}"
        producer.produce(topic, key=page.encode(), value=f"view-{i}".encode())
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise SystemExit("the producer could not deliver every record")


def run(bootstrap: str, topic: str, records: int, commit_every: int) -> int:
    group = f"pykka-service-{os.getpid()}"
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    tally = Tally()
    started = time.monotonic()
    deadline = started + 300
    refs: list[pykka.ActorRef[Any]] = []
    try:
        bridge_1, worker_1 = start_worker("worker-1", config, topic, tally, commit_every)
        refs += [bridge_1, worker_1]
        while tally.processed() < records // 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        bridge_2, worker_2 = start_worker("worker-2", config, topic, tally, commit_every)
        refs += [bridge_2, worker_2]
        while tally.processed() < records and time.monotonic() < deadline:
            time.sleep(0.02)
        elapsed = time.monotonic() - started
        for bridge in (bridge_1, bridge_2):
            closed = call(bridge, Close(30.0), timeout=60)
            if not isinstance(closed, Closed):
                print(f"close: {closed}")
    finally:
        for ref in refs:
            if ref.is_alive():
                ref.stop(block=True, timeout=30)
    with tally.lock:
        processed = len(tally.seen)
        twice = sum(1 for n in tally.seen.values() if n > 1)
        print(f"{processed} of {records} records processed in {elapsed:.2f}s")
        print("per worker:", dict(tally.per_worker), "revocations:", dict(tally.revocations))
        print(f"commits ok={tally.commits} failed={tally.commit_failures}")
        print("top pages:", ", ".join(f"{p}={n}" for p, n in tally.views.most_common(3)))
        print(f"records processed more than once: {twice}")
    status = _check_committed(bootstrap, topic, group)
    return 0 if processed == records and twice == 0 and status == 0 else 1


def _check_committed(bootstrap: str, topic: str, group: str) -> int:
    with KafkaConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    ) as checker:
        partitions = [TopicPartition(topic, p.partition) for p in checker.partitions_for(topic)]
        committed = checker.committed(set(partitions), timeout=30)
        ends = checker.end_offsets(partitions, timeout=30)
    behind = {}
    for tp in partitions:
        done = committed[tp]
        if done is None or done.offset != ends[tp]:
            behind[str(tp)] = (None if done is None else done.offset, ends[tp])
    if behind:
        print(f"committed offsets behind the end offsets: {behind}")
        return 1
    print(f"committed offsets = end offsets on all {len(partitions)} partitions")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--commit-every", type=int, default=2_000)
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--topic", default="page-views")
    args = parser.parse_args(argv)
    if args.bootstrap_servers:
        return run(args.bootstrap_servers, args.topic, args.records, args.commit_every)
    from kafka_actors.testing.mock import MockCluster

    with MockCluster(num_brokers=3) as cluster:
        cluster.create_topic(args.topic, partitions=6)
        produce(cluster.bootstrap_servers, args.topic, args.records)
        return run(cluster.bootstrap_servers, args.topic, args.records, args.commit_every)


if __name__ == "__main__":
    sys.exit(main())
