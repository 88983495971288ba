"""Rebalance time: a third member joins a stable group of two; how long until all three consume.

Owns: nothing but its own run. Starts ONE Kafka 4.x broker with the testkit (its group
settings as the testkit sets them, printed), creates a topic of ``--partitions`` partitions
(default 6) and keeps a confluent-kafka producer writing to every partition throughout (a
record per partition every few milliseconds). Then, for each variant and ``--repeat`` times,
in a new group each time:

1. members A and B subscribe and poll (each on its own thread) until the group is stable:
   their assignments are disjoint, non-empty and cover the topic, and each has received
   records from its current assignment;
2. at T0 member C is created and subscribes;
3. the clock stops when all three have assignments that are disjoint, non-empty and cover
   the topic, A and B have each seen their assignment change after T0, and each member has
   received a record from a partition of its new assignment: the time is the latest of those
   three first records, minus T0.

Variants: kafka-actors with ``group.protocol=consumer`` (KIP-848, the broker's server-side
assignor) and ``classic`` (its default assignor: range, eager, as Java's default list), and
confluent-kafka with the same two protocols (classic with librdkafka's default
``range,roundrobin``, eager). Every member polls with a 100 ms timeout and notices its
assignment through ``assignment()`` after each poll. Under KIP-848 the broker's
``group.consumer.heartbeat.interval.ms`` (5 s by default) bounds how fast members learn of a new
target assignment; under classic the client's ``heartbeat.interval.ms`` (3 s) does.

    .venv/bin/python bench/rebalance.py [--repeat 3] [--partitions 6]
        [--variants ka-consumer,ka-classic,ck-consumer,ck-classic] [--bootstrap HOST:PORT]
        [--consumer-heartbeat-ms 5000]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

VARIANTS = {
    "ka-consumer": ("kafka-actors", "consumer"),
    "ka-classic": ("kafka-actors", "classic"),
    "ck-consumer": ("confluent-kafka", "consumer"),
    "ck-classic": ("confluent-kafka", "classic"),
}
POLL_S = 0.1
STABLE_TIMEOUT_S = 120.0


@dataclass
class MemberState:
    name: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    assignment: frozenset[tuple[str, int]] = frozenset()
    changed_at: float = 0.0
    first_record_after_change: float | None = None
    error: BaseException | None = None

    def snapshot(self) -> tuple[frozenset[tuple[str, int]], float, float | None]:
        with self.lock:
            return self.assignment, self.changed_at, self.first_record_after_change


class Member:
    """One group member polling on its own thread; records its assignment changes and the
    first record it receives from each new assignment."""

    def __init__(
        self, name: str, client: str, protocol: str, bootstrap: str, group: str, topic: str
    ) -> None:
        self.state = MemberState(name)
        self._client = client
        self._protocol = protocol
        self._bootstrap = bootstrap
        self._group = group
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            if self._client == "kafka-actors":
                self._run_kafka_actors()
            else:
                self._run_confluent()
        except BaseException as exc:  # reported by the main thread
            self.state.error = exc

    def _seen(
        self, assignment: frozenset[tuple[str, int]], partitions: set[tuple[str, int]]
    ) -> None:
        now = time.perf_counter()
        state = self.state
        with state.lock:
            if assignment != state.assignment:
                state.assignment = assignment
                state.changed_at = now
                state.first_record_after_change = None
            if state.first_record_after_change is None and partitions & assignment:
                state.first_record_after_change = now

    def _run_kafka_actors(self) -> None:
        from kafka_actors import KafkaConsumer

        consumer = KafkaConsumer(
            {
                "bootstrap.servers": self._bootstrap,
                "group.id": self._group,
                "group.protocol": self._protocol,
                "auto.offset.reset": "latest",
                "client.id": f"rebalance-{self.state.name}",
            }
        )
        try:
            consumer.subscribe([self._topic])
            while not self._stop.is_set():
                records = consumer.poll(POLL_S)
                partitions = {(r.topic, r.partition) for r in records}
                assignment = frozenset((tp.topic, tp.partition) for tp in consumer.assignment())
                self._seen(assignment, partitions)
        finally:
            consumer.close(10.0)

    def _run_confluent(self) -> None:
        from confluent_kafka import Consumer

        config: dict[str, Any] = {
            "bootstrap.servers": self._bootstrap,
            "group.id": self._group,
            "group.protocol": self._protocol,
            "auto.offset.reset": "latest",
            "client.id": f"rebalance-{self.state.name}",
        }
        consumer = Consumer(config)
        try:
            consumer.subscribe([self._topic])
            while not self._stop.is_set():
                messages = consumer.consume(500, POLL_S)
                partitions = {
                    (m.topic() or "", m.partition() or 0) for m in messages if m.error() is None
                }
                assignment = frozenset((tp.topic, tp.partition) for tp in consumer.assignment())
                self._seen(assignment, partitions)
        finally:
            consumer.close()


class Producer:
    """Writes a record to every partition every ``interval`` seconds until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, interval: float = 0.005):
        self._bootstrap = bootstrap
        self._topic = topic
        self._partitions = partitions
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import Producer as CkProducer

        # Lives on this thread only: destroyed (connections closed) when the thread ends,
        # before the broker stops.
        producer = CkProducer({"bootstrap.servers": self._bootstrap, "linger.ms": 1})
        i = 0
        while not self._stop.is_set():
            for p in range(self._partitions):
                try:
                    producer.produce(self._topic, b"x" * 100, b"%d" % i, partition=p)
                except BufferError:
                    pass
                i += 1
            producer.poll(0)
            self._stop.wait(self._interval)
        producer.flush(10)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def _covering(states: list[MemberState], partitions: int, topic: str) -> bool:
    assignments = [s.snapshot()[0] for s in states]
    if any(not a for a in assignments):
        return False
    union: set[tuple[str, int]] = set()
    for a in assignments:
        if union & a:
            return False
        union |= a
    return union == {(topic, p) for p in range(partitions)}


def _wait(condition: Callable[[], bool], timeout: float, members: list[Member], what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            if m.state.error is not None:
                raise RuntimeError(f"member {m.state.name} failed: {m.state.error!r}")
        if condition():
            return
        time.sleep(0.01)
    views = {m.state.name: sorted(m.state.snapshot()[0]) for m in members}
    raise TimeoutError(f"{what}: not reached in {timeout:.0f}s; assignments {views}")


def trial(client: str, protocol: str, bootstrap: str, topic: str, partitions: int) -> float:
    group = f"rebalance-{client}-{protocol}-{uuid.uuid4().hex[:8]}"
    a = Member("A", client, protocol, bootstrap, group, topic)
    b = Member("B", client, protocol, bootstrap, group, topic)
    members = [a, b]
    try:
        a.start()
        b.start()

        def stable() -> bool:
            states = [a.state, b.state]
            return _covering(states, partitions, topic) and all(
                s.snapshot()[2] is not None for s in states
            )

        _wait(stable, STABLE_TIMEOUT_S, members, "group of two stable")
        time.sleep(1.0)  # let it settle: nothing pending
        _wait(stable, STABLE_TIMEOUT_S, members, "group of two stable")
        c = Member("C", client, protocol, bootstrap, group, topic)
        members.append(c)
        t0 = time.perf_counter()
        c.start()
        states = [a.state, b.state, c.state]

        def all_consume() -> bool:
            if not _covering(states, partitions, topic):
                return False
            for s in states:
                _assignment, changed_at, first = s.snapshot()
                if changed_at <= t0 or first is None:
                    return False
            return True

        _wait(all_consume, STABLE_TIMEOUT_S, members, "group of three consuming")
        end = max(s.snapshot()[2] or 0.0 for s in states)
        return end - t0
    finally:
        for m in members:
            m.stop()
        for m in members:
            m.join(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--bootstrap", help="use this broker (else start one)")
    parser.add_argument(
        "--consumer-heartbeat-ms",
        type=int,
        help="the started broker's group.consumer.heartbeat.interval.ms (default Kafka's 5000)",
    )
    args = parser.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")

    from kafka_actors import log

    log.configure(level="WARNING")
    from kafka_actors.testing import KafkaBroker

    broker: Any = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        extra = (
            {"group.consumer.heartbeat.interval.ms": args.consumer_heartbeat_ms}
            if args.consumer_heartbeat_ms is not None
            else {}
        )
        broker = KafkaBroker(broker_config=extra)
        broker.start()
        bootstrap = broker.bootstrap_servers
    try:
        topic = f"rebalance-{uuid.uuid4().hex[:8]}"
        if broker is not None:
            broker.create_topic(topic, args.partitions)
            merged = {**broker._base_config(), **broker.broker_config}
            settings = {k: v for k, v in merged.items() if k.startswith("group.")}
            print(f"broker group settings (others Kafka's defaults): {settings}")
        else:
            from confluent_kafka.admin import AdminClient
            from confluent_kafka.cimpl import NewTopic

            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(60)
            time.sleep(2)
        producer = Producer(bootstrap, topic, args.partitions)
        producer.start()
        print(
            f"topic {topic}: {args.partitions} partitions, produced to throughout; "
            f"a third member joins a stable group of two; {args.repeat} trials each"
        )
        print(f"\n{'variant':14} {'client':16} {'protocol':9} {'median s':>9} {'trials s':>24}")
        try:
            for name in variants:
                client, protocol = VARIANTS[name]
                times = [
                    trial(client, protocol, bootstrap, topic, args.partitions)
                    for _ in range(args.repeat)
                ]
                shown = " ".join(f"{t:.2f}" for t in times)
                print(
                    f"{name:14} {client:16} {protocol:9} {statistics.median(times):9.2f} "
                    f"{shown:>24}",
                    flush=True,
                )
        finally:
            producer.stop()
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
