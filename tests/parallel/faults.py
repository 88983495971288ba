"""Helpers of the Show 2 tests (rebalances and faults against real brokers): member
configuration, a ledger of handler starts and completions, members in threads, the group's
committed offsets and maps.

Owns nothing outside the tests.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

from confluent_kafka import Producer

from kafka_actors import KafkaConsumer, ParallelConsumer, TopicPartition
from kafka_actors.parallel import offset_map
from kafka_actors.protocol.records.decode import ConsumerRecord

Place = tuple[int, int]  # (partition, offset)


def member_config(bootstrap: str, group: str, protocol: str, **extra: object) -> dict[str, object]:
    """A member of a Show 2 group: commits every 300 ms, quick classic heartbeats."""
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
        "auto.commit.interval.ms": 300,
        "fetch.max.wait.ms": 100,
    }
    if protocol == "classic":
        config["heartbeat.interval.ms"] = 500
        config["session.timeout.ms"] = 6000
    config.update(extra)
    return config


def produce_keyed(
    bootstrap: str, topic: str, partitions: int, total: int, keys: int
) -> dict[int, int]:
    """``total`` records over ``keys`` keys (a key keeps its partition); returns the end offset
    of each partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0})
    ends: Counter[int] = Counter()
    for i in range(total):
        k = i % keys
        partition = k % partitions
        producer.produce(topic, key=b"key-%d" % k, value=b"%d" % i, partition=partition)
        ends[partition] += 1
    assert producer.flush(60) == 0
    return {p: ends[p] for p in range(partitions)}


class Ledger:
    """Every handler start and completion, by member (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started: list[tuple[str, Place]] = []
        self.done: list[tuple[str, Place]] = []

    def handler(self, member: str, sleep_s: float) -> Callable[[ConsumerRecord], None]:
        def handle(record: ConsumerRecord) -> None:
            place = (record.partition, record.offset)
            with self._lock:
                self.started.append((member, place))
            time.sleep(sleep_s)
            with self._lock:
                self.done.append((member, place))

        return handle

    def add_file(self, member: str, path: Path) -> None:
        """Lines ``S p o`` / ``D p o`` a subprocess member wrote."""
        with self._lock:
            for line in path.read_text().splitlines():
                kind, p, o = line.split()
                (self.started if kind == "S" else self.done).append((member, (int(p), int(o))))

    def done_by(self, member: str) -> list[Place]:
        with self._lock:
            return [place for m, place in self.done if m == member]

    def distinct_done(self) -> int:
        with self._lock:
            return len({place for _, place in self.done})

    def done_counts(self) -> Counter[Place]:
        with self._lock:
            return Counter(place for _, place in self.done)

    def start_counts(self) -> Counter[Place]:
        with self._lock:
            return Counter(place for _, place in self.started)


class ThreadMember:
    """A ParallelConsumer running in a thread; ``close()`` is a clean leave."""

    def __init__(self, pc: ParallelConsumer, topic: str) -> None:
        self.pc = pc
        self.errors: list[BaseException] = []
        pc.subscribe([topic])
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.pc.run()
        except BaseException as exc:  # reported by close()
            self.errors.append(exc)

    def close(self, timeout: float = 30.0) -> None:
        self.pc.stop()
        self.thread.join(60)
        self.pc.close(timeout)
        assert not self.thread.is_alive()
        assert not self.errors, self.errors


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def random_keyed_items(
    seed: int, *, keys: int = 1200, count: int = 4000, partitions: int = 4
) -> list[tuple[bytes, bytes, int]]:
    """``count`` (key, value, partition) items over ``keys`` random keys; each key's values are
    its sequence numbers 0, 1, 2, ... (what a key-order check compares)."""
    rnd = random.Random(seed)
    names = [b"key-%d" % i for i in range(keys)]
    seq: dict[bytes, int] = defaultdict(int)
    items = []
    for _ in range(count):
        key = rnd.choice(names)
        items.append((key, b"%d" % seq[key], hash(key) % partitions))
        seq[key] += 1
    return items


def committed(
    bootstrap: str, group: str, topic: str, partitions: Iterable[int]
) -> dict[int, tuple[int, str]]:
    """The group's committed (offset, metadata) per partition (offset -1001: none).

    Read with kafka-actors' own consumer, not confluent-kafka's: its ``TopicPartition.metadata``
    (2.16.1) reads past the end of the metadata the broker returned, so a commit's offset map
    came back with stray bytes after it, or as undecodable UTF-8 (a CI run failed on it)."""
    wanted = [TopicPartition(topic, p) for p in partitions]
    with KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group}) as consumer:
        found = consumer.committed(wanted, timeout=20)
    out: dict[int, tuple[int, str]] = {}
    for tp in wanted:
        om = found.get(tp)
        out[tp.partition] = (-1001, "") if om is None else (om.offset, om.metadata or "")
    return out


def completed_by_commit(commits: dict[int, tuple[int, str]]) -> Callable[[Place], bool]:
    """Whether a commit (offset + map) says a record was completed."""
    maps = {
        p: offset_map.decode(metadata, offset) if offset >= 0 else None
        for p, (offset, metadata) in commits.items()
    }

    def completed(place: Place) -> bool:
        partition, offset = place
        committed_offset = commits[partition][0]
        if offset < committed_offset:
            return True
        decoded = maps[partition]
        return decoded is not None and offset in decoded

    return completed
