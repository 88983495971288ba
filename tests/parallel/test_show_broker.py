"""Parallel processing against a real broker (issue 23, Show 1, 3, 4, 5)."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from confluent_kafka import Consumer, Producer

from kafka_actors import ParallelConsumer, TopicPartition
from kafka_actors.parallel import offset_map
from kafka_actors.protocol.records.decode import ConsumerRecord
from kafka_actors.testing import KafkaBroker
from tests.parallel.faults import committed, random_keyed_items, wait_for


def produce(bootstrap: str, topic: str, items: list[tuple[bytes | None, bytes, int]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0})
    for key, value, partition in items:
        producer.produce(topic, key=key, value=value, partition=partition)
    assert producer.flush(30) == 0


def hot_key_items(
    rnd: random.Random, n: int, *, keys: int, partitions: int
) -> list[tuple[bytes | None, bytes, int]]:
    """``n`` (key, value, partition) items over ``keys`` keys, the low ones far more often (the
    smaller of two uniform draws); a key keeps its partition, its values are its sequence
    numbers 0, 1, 2, ... (what a key-order check compares)."""
    sequence: Counter[bytes] = Counter()
    items: list[tuple[bytes | None, bytes, int]] = []
    for _ in range(n):
        k = min(rnd.randrange(keys), rnd.randrange(keys))
        key = b"k%d" % k
        items.append((key, b"%d" % sequence[key], k % partitions))
        sequence[key] += 1
    return items


def config(bootstrap: str, group: str, **more: object) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "auto.commit.interval.ms": 200,
        **more,
    }


@contextmanager
def running(pc: ParallelConsumer) -> Iterator[threading.Thread]:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            pc.run()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        pc.stop()
        thread.join(30)
        assert not errors, errors


def test_show_1_key_order_under_random_latency_with_1000_keys(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(kafka_broker, partitions=4)
    items = random_keyed_items(1)
    seq = Counter(key for key, _, _ in items)  # values per key
    produce(kafka_broker.bootstrap_servers, topic, items)
    lock = threading.Lock()
    in_flight: set[bytes] = set()
    overlaps: list[bytes] = []
    handled: dict[bytes, list[int]] = defaultdict(list)
    total = [0]
    max_parallel = [0]

    def handle(record: ConsumerRecord) -> None:
        key = record.key
        assert key is not None and record.value is not None
        with lock:
            if key in in_flight:
                overlaps.append(key)
            in_flight.add(key)
            max_parallel[0] = max(max_parallel[0], len(in_flight))
        time.sleep(random.random() * 0.004)
        with lock:
            in_flight.discard(key)
            handled[key].append(int(record.value))
            total[0] += 1

    group = f"g-{uuid.uuid4().hex[:8]}"
    pc = ParallelConsumer(
        config(kafka_broker.bootstrap_servers, group), handler=handle, max_concurrency=64
    )
    with pc:
        pc.subscribe([topic])
        with running(pc):
            wait_for(lambda: total[0] >= 4000, 120, "4000 records handled")
        assert pc.health().oldest_in_flight is None
    assert overlaps == []
    assert max_parallel[0] > 1  # it did run concurrently
    assert sum(map(len, handled.values())) == 4000
    for key, values in handled.items():
        assert values == list(range(seq[key])), key
    ends = defaultdict(int)
    for _, _, partition in items:
        ends[partition] += 1
    got = committed(kafka_broker.bootstrap_servers, group, topic, range(4))
    assert {p: off for p, (off, _) in got.items()} == dict(ends)


def test_show_3_a_restart_handles_only_the_incomplete_record(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(kafka_broker, partitions=1)
    produce(kafka_broker.bootstrap_servers, topic, [(b"k%d" % i, b"v", 0) for i in range(20)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    release = threading.Event()
    first: list[int] = []

    def slow_five(record: ConsumerRecord) -> None:
        if record.offset == 5:
            release.wait(60)  # still running when the first consumer closes
            return
        first.append(record.offset)

    pc = ParallelConsumer(config(kafka_broker.bootstrap_servers, group), handler=slow_five)
    pc.subscribe([topic])
    with running(pc):
        wait_for(lambda: len(first) == 19, 60, "19 records handled")
    pc.close(timeout=2.0)
    release.set()
    offset, metadata = committed(kafka_broker.bootstrap_servers, group, topic, range(1))[0]
    assert offset == 5
    decoded = offset_map.decode(metadata, 5)
    assert decoded is not None and decoded.ranges == ((6, 20),)

    second: list[int] = []
    pc = ParallelConsumer(
        config(kafka_broker.bootstrap_servers, group), handler=lambda r: second.append(r.offset)
    )
    with pc:
        pc.subscribe([topic])
        with running(pc):
            wait_for(lambda: pc.metrics()["records-skipped-completed-total"] >= 14, 60, "skips")
            wait_for(lambda: second == [5], 30, "the incomplete record")
    assert second == [5]
    assert committed(kafka_broker.bootstrap_servers, group, topic, range(1))[0] == (20, "")


def test_show_4_a_poison_record_is_retried_then_dead_lettered_once(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(kafka_broker, partitions=1)
    dlq = kafka_topic(kafka_broker, partitions=1, prefix="dlq")
    items = [(b"poison", b"bad", 0), (b"poison", b"after", 0)]
    items += [(b"other-%d" % i, b"ok", 0) for i in range(48)]
    produce(kafka_broker.bootstrap_servers, topic, items)
    lock = threading.Lock()
    attempts: list[int] = []
    others_at_attempt: list[int] = []
    others: list[int] = []
    after: list[int] = []

    def handle(record: ConsumerRecord) -> None:
        with lock:
            if record.value == b"bad":
                attempts.append(record.offset)
                others_at_attempt.append(len(others))
                raise ValueError("cannot parse order")
            if record.value == b"after":
                after.append(len(attempts))
            else:
                others.append(record.offset)

    group = f"g-{uuid.uuid4().hex[:8]}"
    pc = ParallelConsumer(
        config(kafka_broker.bootstrap_servers, group),
        handler=handle,
        max_attempts=3,
        retry_backoff_ms=200,
        retry_backoff_max_ms=1000,
        dead_letter_topic=dlq,
    )
    with pc:
        pc.subscribe([topic])
        with running(pc):
            wait_for(lambda: pc.health().dead_letters_sent == 1 and after, 60, "dead letter")
            wait_for(lambda: len(others) == 48, 30, "other keys")
            health = pc.health()
    assert attempts == [0, 0, 0]
    assert after == [3]  # the key's next record only after the poison's last attempt
    assert others_at_attempt[-1] > others_at_attempt[0]  # other keys went on meanwhile
    assert health.dead_letters_sent == 1
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_broker.bootstrap_servers,
            "group.id": f"r-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    try:
        consumer.subscribe([dlq])
        letters = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not letters:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                letters.append(msg)
        extra = consumer.poll(2.0)
    finally:
        consumer.close()
    assert len(letters) == 1 and extra is None
    letter = letters[0]
    headers = {k: v.decode() for k, v in letter.headers()}
    assert letter.key() == b"poison" and letter.value() == b"bad"
    assert headers["dlt.original.topic"] == topic
    assert headers["dlt.original.partition"] == "0"
    assert headers["dlt.original.offset"] == "0"
    assert headers["dlt.original.timestamp"].endswith("CreateTime")
    assert headers["dlt.exception.type"] == "ValueError"
    assert headers["dlt.exception.message"] == "cannot parse order"
    assert headers["dlt.attempts"] == "3"
    assert committed(kafka_broker.bootstrap_servers, group, topic, range(1))[0][0] == 50


@pytest.mark.parametrize(
    "protocol",
    [
        "classic",
        "consumer",
    ],
)
def test_show_5_a_handler_three_times_max_poll_interval_keeps_the_member(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str], protocol: str
) -> None:
    topic = kafka_topic(kafka_broker, partitions=2)
    produce(
        kafka_broker.bootstrap_servers,
        topic,
        [(b"k%d" % i, b"v", i % 2) for i in range(10)],
    )
    handled: list[tuple[int, int]] = []
    max_poll_interval_ms = 2000

    def handle(record: ConsumerRecord) -> None:
        if record.offset == 0 and record.partition == 0:
            time.sleep(3 * max_poll_interval_ms / 1000)
        handled.append((record.partition, record.offset))

    group = f"g-{uuid.uuid4().hex[:8]}"
    extra: dict[str, object] = {
        "group.protocol": protocol,
        "max.poll.interval.ms": max_poll_interval_ms,
    }
    if protocol == "classic":
        extra["session.timeout.ms"] = 6000
        extra["heartbeat.interval.ms"] = 500
    pc = ParallelConsumer(config(kafka_broker.bootstrap_servers, group, **extra), handler=handle)
    with pc:
        pc.subscribe([topic])
        with running(pc):
            wait_for(lambda: len(handled) >= 9, 60, "the fast records")
            generation = pc.consumer.group_metadata().generation_id
            wait_for(lambda: len(handled) == 10, 30, "the slow record")
            assert pc.consumer.group_metadata().generation_id == generation
            assert pc.consumer.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
        metrics = pc.metrics()
    assert metrics["records-in-flight-abandoned-total"] == 0
    assert sorted(handled) == sorted({(i % 2, i // 2) for i in range(10)})
    assert {
        p: o
        for p, (o, _) in committed(kafka_broker.bootstrap_servers, group, topic, range(2)).items()
    } == {0: 5, 1: 5}


def test_show_3_back_pressure_at_the_brokers_metadata_limit(
    kafka_topic: Callable[..., str],
) -> None:
    with KafkaBroker(broker_config={"offset.metadata.max.bytes": 200}) as broker:
        topic = kafka_topic(broker, partitions=1)
        produce(broker.bootstrap_servers, topic, [(None, b"v", 0) for _ in range(3000)])
        rnd = random.Random(3)
        fail_once = {o for o in range(1, 3000) if rnd.random() < 0.5}
        lock = threading.Lock()
        counts: dict[int, int] = defaultdict(int)
        done: set[int] = set()

        def handle(record: ConsumerRecord) -> None:
            with lock:
                counts[record.offset] += 1
                if record.offset in fail_once and counts[record.offset] == 1:
                    raise RuntimeError("first attempt fails")
                done.add(record.offset)

        group = f"g-{uuid.uuid4().hex[:8]}"
        pc = ParallelConsumer(
            config(broker.bootstrap_servers, group),
            handler=handle,
            ordering="unordered",
            max_in_flight_per_partition=3000,
            retry_backoff_ms=2000,
            retry_backoff_max_ms=2000,
        )
        with pc:
            pc.subscribe([topic])
            with running(pc):
                # the counter, not a sample of health(): a short pause is not missed
                wait_for(lambda: pc.metrics()["offset-map-full-total"] > 0, 60, "back-pressure")
                # offset-map-size-max is the committed map's size now (the largest partition's):
                # sampled while records wait for their retry; after the last commit it is 0
                # (ciI read it after the end and failed)
                sizes: list[float] = []

                def all_done() -> bool:
                    sizes.append(pc.metrics()["offset-map-size-max"])
                    return len(done) == 3000

                wait_for(all_done, 120, "every record")
            metrics = pc.metrics()
            assert metrics["offset-metadata-max-bytes"] == 200  # read from the broker
            assert metrics["commit-failed-total"] == 0  # no map was ever too large
            assert 0 < max(sizes) <= 200
            assert metrics["offset-map-full-total"] >= 1
        assert counts.keys() == set(range(3000))
        assert all(counts[o] == (2 if o in fail_once else 1) for o in range(3000))
        assert committed(broker.bootstrap_servers, group, topic, range(1))[0] == (3000, "")
        _skewed_keys_at_the_limit_never_stall(broker, kafka_topic(broker, partitions=1))


def _skewed_keys_at_the_limit_never_stall(broker: KafkaBroker, topic: str) -> None:
    """Key ordering, a few hot keys among many, records completing out of order at the same
    200-byte limit: the partition's map holds back new starts again and again, and the
    record at its base (released by its key's last completion, not at the head of the ready
    queue) must still start each time; a scheduler that only took the head of the queue
    waited forever once nothing of the partition was in flight."""
    rnd = random.Random(5)
    n = 4000
    produce(broker.bootstrap_servers, topic, hot_key_items(rnd, n, keys=300, partitions=1))
    lock = threading.Lock()
    seen: dict[bytes, list[int]] = defaultdict(list)
    handled: Counter[int] = Counter()

    def handle(record: ConsumerRecord) -> None:
        time.sleep(rnd.random() / 2000)  # up to 0.5 ms: out of order
        assert record.key is not None and record.value is not None
        with lock:
            seen[record.key].append(int(record.value))
            handled[record.offset] += 1

    group = f"g-{uuid.uuid4().hex[:8]}"
    pc = ParallelConsumer(
        config(broker.bootstrap_servers, group), handler=handle, max_concurrency=32
    )
    with pc:
        pc.subscribe([topic])
        with running(pc):
            wait_for(lambda: len(handled) == n, 120, "every record (a stalled partition?)")
        assert pc.metrics()["offset-map-full-total"] >= 1  # the limit held starts back
    assert all(count == 1 for count in handled.values())
    assert all(values == list(range(len(values))) for values in seen.values())
    assert committed(broker.bootstrap_servers, group, topic, range(1))[0] == (n, "")


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_hot_keys_at_a_tight_map_limit_through_members_joining_and_leaving(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str], protocol: str
) -> None:
    """Hot keys (a few keys hold most records), a 200-byte map limit (given, not read from
    the broker), handlers of 0-20 ms, and two members joining and leaving the first one's
    group while it works: every record handled once (clean hand-overs), each key in order,
    the group's commits at the end offsets. The scheduler before the fix of the map stall
    handled 1,730 of these 20,000 records in 150 s: every partition stopped."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(kafka_broker, partitions=4)
    n = 20_000
    items = hot_key_items(random.Random(1), n, keys=200, partitions=4)
    ends = Counter(partition for _, _, partition in items)
    produce(bootstrap, topic, items)
    lock = threading.Lock()
    handled: Counter[tuple[int, int]] = Counter()
    order: dict[bytes, list[int]] = defaultdict(list)

    def handle(record: ConsumerRecord) -> None:
        time.sleep(random.random() / 50)
        assert record.key is not None and record.value is not None
        with lock:
            handled[(record.partition, record.offset)] += 1
            order[record.key].append(int(record.value))

    group = f"g-{uuid.uuid4().hex[:8]}"
    extra: dict[str, object] = {"group.protocol": protocol, "fetch.max.wait.ms": 100}
    if protocol == "classic":
        extra.update({"heartbeat.interval.ms": 500, "session.timeout.ms": 6000})
    errors: list[BaseException] = []

    def member(start_after: float, leave_after: float) -> None:
        try:
            time.sleep(start_after)
            pc = ParallelConsumer(
                config(bootstrap, group, **extra),
                handler=handle,
                max_concurrency=32,
                offset_metadata_max_bytes=200,
            )
            with pc:
                pc.subscribe([topic])
                with running(pc):
                    deadline = time.monotonic() + leave_after
                    while time.monotonic() < deadline and len(handled) < n:
                        time.sleep(0.05)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    members = [
        threading.Thread(target=member, args=args, daemon=True)
        for args in ((0.0, 150.0), (1.5, 4.0), (3.0, 6.0))
    ]
    for thread in members:
        thread.start()
    for thread in members:
        thread.join(200)
    assert not errors, errors
    assert len(handled) == n, f"{len(handled)} of {n} records handled"
    assert set(handled.values()) == {1}  # clean hand-overs: none handled twice
    assert all(values == list(range(len(values))) for values in order.values())
    got = committed(bootstrap, group, topic, range(4))
    assert {p: offset for p, (offset, _) in got.items()} == dict(ends)
