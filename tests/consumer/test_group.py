"""Group consumption under both group protocols: subscribe + poll, rebalance listeners (sync and
deferred replies, commits from another thread while a revocation is pending), two members
splitting the partitions without duplicates."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any

import pytest

from kafka_actors import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka_actors.errors import InvalidRegularExpressionError
from kafka_actors.protocol.records.decode import ConsumerRecord
from tests.consumer.helpers import base_config, poll_until, produce, unique

pytestmark = pytest.mark.broker

PROTOCOLS = ["consumer", "classic"]


def group_config(bootstrap: str, group: str, protocol: str, **extra: object) -> dict[str, object]:
    config = base_config(bootstrap, **{"group.id": group, "group.protocol": protocol})
    config["enable.auto.commit"] = False
    if protocol == "classic":
        config["heartbeat.interval.ms"] = 500
        config["session.timeout.ms"] = 10_000
    config.update(extra)
    return config


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_subscribe_and_poll(kafka_broker: Any, protocol: str) -> None:
    topic = unique(f"sub-{protocol}")
    kafka_broker.create_topic(topic, partitions=3)
    produce(kafka_broker.bootstrap_servers, topic, 90)
    config = base_config(
        kafka_broker.bootstrap_servers, **{"group.id": unique("g"), "group.protocol": protocol}
    )
    with KafkaConsumer(config) as consumer:
        consumer.subscribe([topic])
        records = poll_until(consumer, 90)
        assert consumer.assignment() == {TopicPartition(topic, p) for p in range(3)}
        assert consumer.subscription() == {topic}
        metadata = consumer.group_metadata()
        assert metadata.member_id and metadata.generation_id >= 1
    assert sorted(r.value or b"" for r in records) == sorted(
        f"value-{i}".encode() for i in range(90)
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_subscribe_pattern(kafka_broker: Any, protocol: str) -> None:
    prefix = unique(f"pat-{protocol}")
    for suffix in ("a", "b"):
        kafka_broker.create_topic(f"{prefix}-{suffix}", partitions=1)
        produce(kafka_broker.bootstrap_servers, f"{prefix}-{suffix}", 5)
    config = group_config(kafka_broker.bootstrap_servers, unique("g"), protocol)
    with KafkaConsumer(config) as consumer:
        consumer.subscribe(pattern=f"{prefix}-.*")
        records = poll_until(consumer, 10)
    assert {r.topic for r in records} == {f"{prefix}-a", f"{prefix}-b"}


def test_the_consumer_protocol_leaves_the_regex_to_the_broker(kafka_broker: Any) -> None:
    """The coordinator evaluates a KIP-848 regex subscription with RE2J: a pattern in RE2
    syntax Python's re cannot read (\\Q...\\E quoting) is accepted and matches on the
    broker; one RE2J refuses (a lookahead, which Python reads) fails poll() with the broker's
    INVALID_REGULAR_EXPRESSION as a typed error."""
    prefix = unique("re2")
    for suffix in ("a", "b"):
        kafka_broker.create_topic(f"{prefix}.{suffix}", partitions=1)
        produce(kafka_broker.bootstrap_servers, f"{prefix}.{suffix}", 5)
    kafka_broker.create_topic(f"{prefix}x{suffix}", partitions=1)  # "." quoted: no match
    produce(kafka_broker.bootstrap_servers, f"{prefix}x{suffix}", 5)
    config = group_config(kafka_broker.bootstrap_servers, unique("g"), "consumer")
    with KafkaConsumer(config) as consumer:
        consumer.subscribe(pattern=rf"\Q{prefix}.\E.*")
        records = poll_until(consumer, 10)
        assert consumer.subscription() == {f"{prefix}.a", f"{prefix}.b"}
    assert {r.topic for r in records} == {f"{prefix}.a", f"{prefix}.b"}

    config = group_config(kafka_broker.bootstrap_servers, unique("g"), "consumer")
    with KafkaConsumer(config) as consumer:
        consumer.subscribe(pattern=rf"(?={prefix}){prefix}\..*")
        deadline = time.monotonic() + 30
        with pytest.raises(InvalidRegularExpressionError):
            while time.monotonic() < deadline:
                consumer.poll(0.5)


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, set[TopicPartition]]] = []
        self.threads: set[str] = set()

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        self.threads.add(threading.current_thread().name)
        self.events.append(("revoked", set(revoked)))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        self.threads.add(threading.current_thread().name)
        self.events.append(("assigned", set(assigned)))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_listener_runs_on_polling_thread(kafka_broker: Any, protocol: str) -> None:
    topic = unique(f"listen-{protocol}")
    kafka_broker.create_topic(topic, partitions=2)
    produce(kafka_broker.bootstrap_servers, topic, 10)
    listener = Recorder()
    config = group_config(kafka_broker.bootstrap_servers, unique("g"), protocol)
    with KafkaConsumer(config) as consumer:
        consumer.subscribe([topic], listener=listener)
        poll_until(consumer, 10)
        consumer.unsubscribe()
        assert consumer.assignment() == set()
    everything = {TopicPartition(topic, 0), TopicPartition(topic, 1)}
    assigned = set().union(*(p for kind, p in listener.events if kind == "assigned"))
    revoked = set().union(*(p for kind, p in listener.events if kind == "revoked"))
    assert assigned == everything and revoked == everything
    assert listener.threads == {threading.current_thread().name}


def _consume_in_thread(
    consumer: KafkaConsumer, stop: threading.Event, out: list[ConsumerRecord]
) -> threading.Thread:
    def run() -> None:
        while not stop.is_set():
            out.extend(consumer.poll(0.2))

    thread = threading.Thread(target=run, name="member-b", daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_deferred_revocation_commit_from_another_thread(kafka_broker: Any, protocol: str) -> None:
    """The revocation callback returns at once; another thread commits the consumed offsets of
    the revoked partitions, then acknowledges. The commit succeeds while the reply is pending,
    no record of a revoked partition is returned meanwhile, and the second member starts
    exactly where the first stopped."""
    topic = unique(f"defer-{protocol}")
    kafka_broker.create_topic(topic, partitions=4)
    total = 2000
    produce(kafka_broker.bootstrap_servers, topic, total)
    group = unique("g")
    config = group_config(kafka_broker.bootstrap_servers, group, protocol)
    config["max.poll.records"] = 5
    consumed_a: dict[TopicPartition, int] = {}
    commit_results: list[Any] = []
    pending_revocation: set[TopicPartition] = set()

    class Deferring(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
            if not revoked:
                return None
            reply = consumer_a.defer_rebalance_ack()
            pending_revocation.update(revoked)

            def commit_then_ack() -> None:
                try:
                    offsets = {tp: consumed_a[tp] + 1 for tp in revoked if tp in consumed_a}
                    commit_results.append(consumer_a.commit_sync(offsets, timeout=30))
                    time.sleep(0.5)  # the reply stays pending while poll() keeps running
                    reply.ack()
                except BaseException as exc:  # reported by the assertions below
                    commit_results.append(exc)
                    reply.ack(exc)

            threading.Thread(target=commit_then_ack, name="committer").start()
            return None

    records_a: list[ConsumerRecord] = []
    records_b: list[ConsumerRecord] = []
    with KafkaConsumer(config) as consumer_a:
        consumer_a.subscribe([topic], listener=Deferring())
        # A takes everything, consumes part of it.
        deadline = time.monotonic() + 60
        while len(records_a) < 100:
            assert time.monotonic() < deadline
            for r in consumer_a.poll(0.5):
                records_a.append(r)
                consumed_a[TopicPartition(r.topic, r.partition)] = r.offset
        stop = threading.Event()
        with KafkaConsumer(config) as consumer_b:
            consumer_b.subscribe([topic])
            thread = _consume_in_thread(consumer_b, stop, records_b)
            deadline = time.monotonic() + 90
            while len({(r.topic, r.partition, r.offset) for r in records_a + records_b}) < total:
                assert time.monotonic() < deadline, "records missing"
                time.sleep(0.05)  # A is slow: B must get its share
                for r in consumer_a.poll(0.2):
                    tp = TopicPartition(r.topic, r.partition)
                    still_pending = tp in pending_revocation and not commit_results
                    assert not still_pending, f"record of {tp} returned during its revocation"
                    records_a.append(r)
                    consumed_a[tp] = r.offset
            stop.set()
            thread.join(10)
    assert commit_results and all(isinstance(c, dict) for c in commit_results), commit_results
    assert records_b, "the second member got nothing"
    seen = [(r.partition, r.offset) for r in records_a + records_b]
    assert len(seen) == len(set(seen)) == total, "duplicates across members after the commit"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_two_members_split_and_no_duplicates(kafka_broker: Any, protocol: str) -> None:
    """Sync commit in on_partitions_revoked (on the polling thread): two members of one group
    split the partitions, and after the commits nothing is consumed twice."""
    topic = unique(f"split-{protocol}")
    kafka_broker.create_topic(topic, partitions=6)
    total = 3000
    produce(kafka_broker.bootstrap_servers, topic, total)
    group = unique("g")

    # Under KIP-848 the coordinator hands B its partitions only on a heartbeat after B joined
    # (the target assignment is recomputed at most every group.consumer.assignment.interval.ms,
    # then delivered on the members' next 5 s heartbeats): measured 4.6-5.2 s after B joined.
    # At full speed A (20 records per ~50 ms) drains nearly all 3000 records in that window,
    # and once it drained B's future partitions B never gets a record (the wait below timed
    # out). So A stays slow (0.5 s per loop, ~35 records/s) until B owns partitions: B's
    # partitions keep most of their records for any plausible assignment delay.
    b_assigned = threading.Event()

    def member(
        name: str,
        out: list[ConsumerRecord],
        stop: threading.Event,
        slow_until: threading.Event | None = None,
    ) -> Any:
        config = group_config(kafka_broker.bootstrap_servers, group, protocol)
        config["max.poll.records"] = 20
        consumer = KafkaConsumer(config)
        positions: dict[TopicPartition, int] = {}

        class CommitOnRevoke(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
                offsets = {tp: positions[tp] for tp in revoked if tp in positions}
                if offsets:
                    consumer.commit_sync(offsets)

        consumer.subscribe([topic], listener=CommitOnRevoke())

        def run() -> None:
            try:
                while not stop.is_set():
                    # slow members: both must get their share
                    held = slow_until is not None and not slow_until.is_set()
                    time.sleep(0.5 if held else 0.05)
                    for r in consumer.poll(0.2):
                        out.append(r)
                        positions[TopicPartition(r.topic, r.partition)] = r.offset + 1
                    if positions:
                        consumer.commit_async(dict(positions))
            finally:
                consumer.close(timeout=20)

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        return thread, consumer

    stop = threading.Event()
    a_records: list[ConsumerRecord] = []
    b_records: list[ConsumerRecord] = []
    threads: list[threading.Thread] = []
    try:
        thread_a, consumer_a = member("a", a_records, stop, b_assigned)
        threads.append(thread_a)
        deadline = time.monotonic() + 60
        while len(a_records) < 60:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        thread_b, consumer_b = member("b", b_records, stop)
        threads.append(thread_b)
        deadline = time.monotonic() + 120
        while len(set(_offsets(a_records + b_records))) < total or not b_records:
            if consumer_b.assignment():
                b_assigned.set()
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"a {len(a_records)}, b {len(b_records)} records; "
                    f"a owns {sorted(tp.partition for tp in consumer_a.assignment())}, "
                    f"b owns {sorted(tp.partition for tp in consumer_b.assignment())}; "
                    f"missing {_missing(a_records + b_records, 6, total // 6)}"
                )
            time.sleep(0.1)
        time.sleep(1.0)
        assignment_a, assignment_b = consumer_a.assignment(), consumer_b.assignment()
    finally:
        stop.set()  # also when failing: the members close instead of running on
        for thread in threads:
            thread.join(30)
    assert assignment_a and assignment_b and not assignment_a & assignment_b
    assert len(assignment_a | assignment_b) == 6
    seen = [(r.partition, r.offset) for r in a_records + b_records]
    assert len(set(seen)) == total
    assert len(seen) == total, f"{len(seen) - total} records consumed twice"


def test_future_reply(kafka_broker: Any) -> None:
    """A listener returning a Future defers its acknowledgement until the Future completes:
    no record of the assigned partition is returned before."""
    topic = unique("future")
    kafka_broker.create_topic(topic, partitions=1)
    produce(kafka_broker.bootstrap_servers, topic, 5)
    pending: list[tuple[set[TopicPartition], concurrent.futures.Future[None]]] = []
    release = threading.Event()

    class FutureListener(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
            future: concurrent.futures.Future[None] = concurrent.futures.Future()
            if release.is_set() or not assigned:
                future.set_result(None)
            pending.append((set(assigned), future))
            return future

    config = group_config(kafka_broker.bootstrap_servers, unique("g"), "consumer")
    with KafkaConsumer(config) as consumer:
        consumer.subscribe([topic], listener=FutureListener())
        deadline = time.monotonic() + 30
        while not any(assigned for assigned, _ in pending):
            assert time.monotonic() < deadline
            assert not consumer.poll(0.2), "records before onPartitionsAssigned completed"
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            assert not consumer.poll(0.2), "records before onPartitionsAssigned completed"
        release.set()
        for _, future in pending:
            if not future.done():
                future.set_result(None)
        assert len(poll_until(consumer, 5)) == 5


def _offsets(records: list[ConsumerRecord]) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in records]


def _missing(records: list[ConsumerRecord], partitions: int, per_partition: int) -> str:
    """Which offsets no member received, per partition, as ranges (for a failure message)."""
    seen = set(_offsets(records))
    out = []
    for p in range(partitions):
        ends = [o for o in range(per_partition + 1000) if (p, o) in seen]
        top = max(ends) if ends else -1
        gaps = [o for o in range(top + 1) if (p, o) not in seen]
        out.append(f"p{p}: up to {top}, {len(gaps)} gaps from {gaps[:3]}")
    return "; ".join(out)
