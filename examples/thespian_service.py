"""A Thespian service consuming Kafka through the kafka-actors bridge, with safe commits.

An embedded mock cluster (librdkafka's, in this process) holds a topic of N "page view"
records. A :class:`~kafka_actors.thespian.KafkaBridge` actor owns the consumer (in its own
process under ``multiprocTCPBase``), and a ``ViewCounter`` actor subscribes through it: it
counts views per page, requests records as it processes them (back-pressure), commits what it
processed every ``--commit-every`` records, and commits again inside every revocation before
acknowledging it. When it has processed N records it tells the main program, which closes the
bridge (the close revokes the partitions: the counter commits its final positions), checks the
group's committed offsets against the end offsets, prints a summary and exits.

Run it (one command; the mock cluster and the actor system start and stop by themselves)::

    python examples/thespian_service.py

Options: ``--records N`` (default 20000), ``--base simpleSystemBase`` (all actors in this
process) or ``multiprocTCPBase`` (the default: every actor its own process, admin on a free
loopback port), ``--bootstrap-servers host:port --topic name`` for a real cluster.
Needs the ``thespian`` extra.
"""

from __future__ import annotations

import argparse
import collections
import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any

from kafka_actors import log as _log

_log.configure(level=os.environ.get("KAFKA_ACTORS_LOG_LEVEL", "WARNING"))

from thespian.actors import Actor, ActorSystem  # noqa: E402

from kafka_actors import KafkaConsumer  # noqa: E402
from kafka_actors.protocol.messages import TopicPartition  # noqa: E402
from kafka_actors.protocol.records.decode import ConsumerRecord  # noqa: E402
from kafka_actors.thespian import (  # noqa: E402
    BridgeStats,
    Close,
    Closed,
    CommitFailed,
    CommitOk,
    Configure,
    Configured,
    GetStats,
    KafkaBridge,
    StreamSubscriber,
    Subscribe,
    Subscribed,
)


@dataclass(frozen=True, slots=True)
class Setup:
    """Main → counter: report to ``notify`` after ``target`` records."""

    target: int
    commit_every: int
    notify: Any


@dataclass(frozen=True, slots=True)
class Done:
    processed: int
    top_pages: tuple[tuple[str, int], ...]
    commits: int
    commit_failures: int
    seconds: float


class ViewCounter(StreamSubscriber):
    """Counts page views; commits periodically and (by the base class) on revocation."""

    window = 2000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.views: collections.Counter[str] = collections.Counter()
        self.count = 0
        self.since_commit = 0
        self.setup: Setup | None = None
        self.commits = 0
        self.failures = 0
        self.started = 0.0
        self.reported = False

    def process(self, records: tuple[ConsumerRecord, ...]) -> None:
        if not self.started:
            self.started = time.monotonic()
        for record in records:
            self.views[(record.key or b"?").decode()] += 1
        self.count += len(records)
        self.since_commit += len(records)

    def on_batch(self, message: Any) -> None:
        super().on_batch(message)
        setup = self.setup
        if setup is None:
            return
        if self.since_commit >= setup.commit_every:
            self.since_commit = 0
            self.commit(None, self._committed)
        if self.count >= setup.target and not self.reported:
            self.reported = True
            self.send(
                setup.notify,
                Done(
                    self.count,
                    tuple(self.views.most_common(3)),
                    self.commits,
                    self.failures,
                    time.monotonic() - self.started,
                ),
            )

    def _committed(self, result: CommitOk | CommitFailed) -> None:
        if isinstance(result, CommitOk):
            self.commits += 1
        else:
            self.failures += 1

    def on_other(self, message: Any, sender: Any) -> None:
        if isinstance(message, Setup):
            self.setup = message


def free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


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


def run(bootstrap: str, topic: str, records: int, base: str, commit_every: int) -> int:
    group = f"thespian-service-{os.getpid()}"
    capabilities: dict[str, object] = {}
    if base == "multiprocTCPBase":
        capabilities = {"Admin Port": free_loopback_port(), "Process Startup Method": "fork"}
    asys = ActorSystem(base, capabilities, transientUnique=True)
    try:
        bridge = asys.createActor(KafkaBridge)
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
        configured = asys.ask(bridge, Configure(config), 60)
        if not isinstance(configured, Configured):
            print(f"bridge did not start: {configured}")
            return 1
        counter = asys.createActor(ViewCounter)
        relay = asys.createActor(Relay)
        asys.tell(counter, Setup(records, commit_every, relay))
        started = time.monotonic()
        # The mock cluster serves KIP-848 subscriptions by regex (not by names).
        reply = asys.ask(bridge, Subscribe((), counter, pattern=f"^{topic}$"), 60)
        if not isinstance(reply, Subscribed):
            print(f"subscribe failed: {reply}")
            return 1
        done = _wait_done(asys, relay, started + 300)
        elapsed = time.monotonic() - started
        stats = asys.ask(bridge, GetStats(), 30)
        closed = asys.ask(bridge, Close(30.0), 60)
        if done is None:
            print("timed out before every record was processed")
            return 1
        print(
            f"processed {done.processed} records in {elapsed:.2f}s "
            f"({done.processed / max(elapsed, 1e-9):,.0f} records/s through the bridge, "
            f"{base}); periodic commits ok={done.commits} failed={done.commit_failures}"
        )
        print("top pages:", ", ".join(f"{page}={n}" for page, n in done.top_pages))
        if isinstance(stats, BridgeStats):
            print(
                f"bridge: polls={stats.polls} buffered now={stats.buffered_records} "
                f"records, rss={stats.rss_bytes >> 20} MiB"
            )
        print("bridge closed" if isinstance(closed, Closed) else f"close: {closed}")
    finally:
        asys.shutdown()
    return _check_committed(bootstrap, topic, group)


class Relay(Actor):  # type: ignore[misc]
    """Keeps the counter's Done until the main program asks for it."""

    def receiveMessage(self, message: Any, sender: Any) -> None:
        if isinstance(message, Done):
            self.done = message
        elif message == "done?":
            self.send(sender, getattr(self, "done", None))


def _wait_done(asys: Any, relay: Any, deadline: float) -> Done | None:
    while time.monotonic() < deadline:
        answer = asys.ask(relay, "done?", 30)
        if isinstance(answer, Done):
            return answer
        asys.listen(0.1)
    return None


def _check_committed(bootstrap: str, topic: str, group: str) -> int:
    with KafkaConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    ) as checker:
        partitions = [TopicPartition(topic, p.partition) for p in checker.partitions_for(topic)]
        committed = checker.committed(set(partitions), timeout=30)
        ends = checker.end_offsets(partitions, timeout=30)
    missing = {
        str(tp): (committed[tp].offset if committed[tp] else None, ends[tp])  # type: ignore[union-attr]
        for tp in partitions
        if committed[tp] is None or committed[tp].offset != ends[tp]  # type: ignore[union-attr]
    }
    if missing:
        print(f"committed offsets behind the end offsets: {missing}")
        return 1
    print(f"committed offsets = end offsets on all {len(partitions)} partitions")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument(
        "--base", default="multiprocTCPBase", choices=["multiprocTCPBase", "simpleSystemBase"]
    )
    parser.add_argument("--commit-every", type=int, default=5_000)
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--topic", default="page-views")
    args = parser.parse_args(argv)
    if args.bootstrap_servers:
        return run(args.bootstrap_servers, args.topic, args.records, args.base, args.commit_every)
    from kafka_actors.testing.mock import MockCluster

    with MockCluster(num_brokers=3) as cluster:
        cluster.create_topic(args.topic, partitions=3)
        produce(cluster.bootstrap_servers, args.topic, args.records)
        return run(
            cluster.bootstrap_servers, args.topic, args.records, args.base, args.commit_every
        )


if __name__ == "__main__":
    sys.exit(main())
