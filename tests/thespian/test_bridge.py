"""The Thespian bridge against the real broker, under simpleSystemBase and multiprocTCPBase.

Shows: records delivered in offset order per partition and never more than requested;
back-pressure (a subscriber that stops requesting receives nothing more while the producer
keeps producing, and what the bridge and its consumer buffer stays bounded); commits
acknowledged (checked with a separate consumer's committed()); the seed scenario (inside the
revocation the subscriber actor commits what it processed through the bridge, then
acknowledges; the rebalance completes and the next owner starts exactly there).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from kafka_actors import KafkaConsumer
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord
from kafka_actors.thespian import (
    Assign,
    BridgeStats,
    Close,
    Closed,
    Commit,
    CommitFailed,
    CommitOk,
    Configure,
    Configured,
    GetStats,
    KafkaBridge,
    Subscribe,
    Subscribed,
)
from tests.consumer.helpers import base_config, produce, unique
from tests.thespian.actors import (
    AckDroppingSubscriber,
    CommitProcessed,
    Dropped,
    DroppingBridge,
    GetDropped,
    GetState,
    RecordingSubscriber,
    Resume,
    SetMode,
    State,
)
from tests.thespian.conftest import Actors

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]

FETCH_MAX_BYTES = 1 << 20
MAX_POLL_RECORDS = 200
PRODUCE_WHILE_PAUSED = 30_000  # 1 KiB records: ~30 MiB, 30x the consumer's byte bound


def bridge_config(bootstrap: str, group: str, **extra: object) -> dict[str, object]:
    return base_config(
        bootstrap,
        **{
            "group.id": group,
            "enable.auto.commit": False,
            "fetch.max.bytes": FETCH_MAX_BYTES,
            "max.partition.fetch.bytes": 256 * 1024,
            "max.poll.records": MAX_POLL_RECORDS,
            **extra,
        },
    )


def start_bridge(asys: Any, config: dict[str, object]) -> Any:
    bridge = asys.createActor(KafkaBridge)
    reply = asys.ask(bridge, Configure(config), 60)
    assert isinstance(reply, Configured), reply
    return bridge


def subscribe(asys: Any, bridge: Any, topic: str, subscriber: Any) -> None:
    reply = asys.ask(bridge, Subscribe((topic,), subscriber), 60)
    assert isinstance(reply, Subscribed), reply


def state(asys: Any, subscriber: Any) -> State:
    reply = asys.ask(subscriber, GetState(), 60)
    assert isinstance(reply, State), reply
    return reply


def stats(asys: Any, bridge: Any) -> BridgeStats:
    reply = asys.ask(bridge, GetStats(), 60)
    assert isinstance(reply, BridgeStats), reply
    return reply


def until(
    asys: Any,
    subscriber: Any,
    done: Callable[[State], bool],
    what: str,
    timeout: float = 90.0,
) -> State:
    """Run the actor system (simpleSystemBase runs only inside ActorSystem calls) until the
    subscriber's state satisfies ``done``."""
    deadline = time.monotonic() + timeout
    while True:
        current = state(asys, subscriber)
        if done(current):
            return current
        assert time.monotonic() < deadline, f"{what}: not reached; state has " + (
            f"{len(current.records)} records, events {current.events}, errors {current.errors}"
        )
        asys.listen(0.1)


def close(asys: Any, *bridges: Any) -> None:
    for bridge in bridges:
        assert isinstance(asys.ask(bridge, Close(20.0), 60), Closed)


def by_partition(records: tuple[ConsumerRecord, ...]) -> dict[int, list[ConsumerRecord]]:
    out: dict[int, list[ConsumerRecord]] = collections.defaultdict(list)
    for r in records:
        out[r.partition].append(r)
    return out


def test_records_in_order_per_partition(actors: Actors, kafka_broker: Any) -> None:
    asys = actors.system
    topic = unique("th-order")
    kafka_broker.create_topic(topic, partitions=3)
    count = 3000
    produce(kafka_broker.bootstrap_servers, topic, count, key=lambda i: f"k{i % 17}".encode())

    bridge = start_bridge(asys, bridge_config(kafka_broker.bootstrap_servers, unique("g")))
    sub = asys.createActor(RecordingSubscriber)
    asys.tell(sub, SetMode(window=350))
    subscribe(asys, bridge, topic, sub)
    final = until(asys, sub, lambda s: len(s.records) >= count, "all records")
    close(asys, bridge)
    print(f"\norder: {final.reordered} stream messages arrived early ({actors.base})")

    assert len(final.records) == count
    assert final.max_batch_over_demand <= 0, "a batch exceeded the outstanding demand"
    assert max(final.batch_sizes) <= Configure({}).max_batch_records
    parts = by_partition(final.records)
    assert len(parts) == 3
    for partition, records in parts.items():
        offsets = [r.offset for r in records]
        assert offsets == list(range(len(offsets))), f"partition {partition} out of order"
    # The producer's order per key (hence per partition) is the values' order.
    for records in parts.values():
        numbers = [int(r.value.decode().split("-")[1]) for r in records if r.value]
        assert numbers == sorted(numbers)
    assert final.errors == ()


def test_back_pressure_bounds_delivery_and_memory(actors: Actors, kafka_broker: Any) -> None:
    asys = actors.system
    topic = unique("th-bp")
    kafka_broker.create_topic(topic, partitions=2)
    bootstrap = kafka_broker.bootstrap_servers
    produce(bootstrap, topic, 2000)

    bridge = start_bridge(asys, bridge_config(bootstrap, unique("g")))
    sub = asys.createActor(RecordingSubscriber)
    first = 300
    asys.tell(sub, SetMode(window=first, replenish=False))
    subscribe(asys, bridge, topic, sub)
    until(asys, sub, lambda s: len(s.records) >= first, "the first demand")

    # The producer keeps producing (1 KiB values) while the subscriber requests nothing.
    stop = threading.Event()
    produced = [0]

    def producer() -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
        value = b"x" * 1024
        while not stop.is_set() and produced[0] < PRODUCE_WHILE_PAUSED:
            for _ in range(500):
                p.produce(topic, value=value)
            p.flush(10)
            produced[0] += 500
            time.sleep(0.1)
        p.flush(30)

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    samples: list[BridgeStats] = []
    try:
        deadline = time.monotonic() + 12.0
        while time.monotonic() < deadline or thread.is_alive():
            asys.listen(0.25)
            samples.append(stats(asys, bridge))
            assert time.monotonic() < deadline + 90, "the producer is too slow"
    finally:
        stop.set()
        thread.join(60)
    held = state(asys, sub)

    # Nothing beyond the demand was delivered, however much was produced meanwhile.
    assert len(held.records) == first
    assert all(s.delivered_records == first for s in samples)
    # Bounded: the bridge holds at most one poll; the consumer's prefetch buffer stays within
    # its byte bound (fetch.max.bytes, one response may overshoot by one response).
    assert max(s.buffered_records for s in samples) <= MAX_POLL_RECORDS
    assert max(s.consumer_buffered_bytes for s in samples) <= 2 * FETCH_MAX_BYTES
    assert all(s.demand == 0 and set(s.paused) == set(s.assignment) for s in samples[-3:])
    # The bridge kept polling (rebalance callbacks, poll timer) while paused.
    assert samples[-1].polls > samples[0].polls
    produced_bytes = produced[0] * 1024
    rss_growth = samples[-1].rss_bytes - samples[0].rss_bytes
    print(
        f"\nback-pressure: produced {produced[0]} records ({produced_bytes >> 20} MiB) while "
        f"paused; bridge buffered max {max(s.buffered_records for s in samples)} records, "
        f"consumer buffered max {max(s.consumer_buffered_bytes for s in samples)} B, "
        f"bridge-process RSS {samples[0].rss_bytes >> 20} MiB, growth {rss_growth >> 10} KiB "
        f"({actors.base})"
    )
    if samples[-1].rss_bytes > 0 and actors.separate_processes:
        # The bridge has its own process: its memory does not follow the produced volume.
        assert rss_growth < produced_bytes // 2

    # Demand again: the rest arrives, in order, nothing lost across the pause.
    total = 2000 + produced[0]
    asys.tell(sub, Resume(5000))
    final = until(asys, sub, lambda s: len(s.records) >= total, "the rest after resuming")
    close(asys, bridge)
    assert len(final.records) == total
    for records in by_partition(final.records).values():
        assert [r.offset for r in records] == list(range(len(records)))


def test_stream_messages_lost_by_the_transport_are_redelivered(
    actors: Actors, kafka_broker: Any
) -> None:
    """Issue 22: Thespian's TCP transport can drop a message and not tell the sender (two actors
    sending to each other at once: one closes the socket under the other's large transmit,
    which ends as a dead letter). The subscriber handles the stream in ``seq`` order, so a lost
    rebalance notice or record batch stalled the stream for good (a full run once waited 90 s
    for the batches after a lost one). The bridge sends again what stays unacknowledged."""
    asys = actors.system
    topic = unique("th-lost")
    kafka_broker.create_topic(topic, partitions=2)
    count = 1200
    produce(kafka_broker.bootstrap_servers, topic, count)

    bridge = asys.createActor(DroppingBridge)
    config = bridge_config(kafka_broker.bootstrap_servers, unique("g"))
    reply = asys.ask(bridge, Configure(config, max_batch_records=150, redeliver_after_ms=300), 60)
    assert isinstance(reply, Configured), reply
    sub = asys.createActor(RecordingSubscriber)
    asys.tell(sub, SetMode(window=400))
    subscribe(asys, bridge, topic, sub)
    final = until(asys, sub, lambda s: len(s.records) >= count, "all records", timeout=60)
    dropped = asys.ask(bridge, GetDropped(), 60)
    close(asys, bridge)

    assert isinstance(dropped, Dropped), dropped
    assert [d.split()[0] for d in dropped.messages] == ["PartitionsAssigned", "RecordBatch"]

    assert len(final.records) == count
    for records in by_partition(final.records).values():
        assert [r.offset for r in records] == list(range(len(records)))
    assert [e[0] for e in final.events].count("assigned") >= 1
    assert final.held_early == 0
    assert final.errors == ()


def test_lost_acknowledgements_are_given_again(actors: Actors, kafka_broker: Any) -> None:
    """Thespian can lose the subscriber's acknowledgements too. The subscriber asks for every
    record at once and never again, so only ``Handled`` frees the bridge's window; the first
    window's acknowledgements are lost. The bridge redelivers the window and the subscriber,
    which drops copies it handled already, acknowledges again: before, it dropped them in
    silence and the stream stopped for good after one window (ciD and the official CI: 16
    batches in flight, a redelivery after 5 s, then nothing)."""
    asys = actors.system
    topic = unique("th-lost-acks")
    kafka_broker.create_topic(topic, partitions=2)
    count = 600
    produce(kafka_broker.bootstrap_servers, topic, count)

    bridge = asys.createActor(KafkaBridge)
    config = bridge_config(kafka_broker.bootstrap_servers, unique("g"))
    settings = Configure(
        config, max_batch_records=25, max_in_flight_batches=4, redeliver_after_ms=300
    )
    reply = asys.ask(bridge, settings, 60)
    assert isinstance(reply, Configured), reply
    sub = asys.createActor(AckDroppingSubscriber)
    asys.tell(sub, SetMode(window=10_000_000, replenish=False))
    subscribe(asys, bridge, topic, sub)
    final = until(asys, sub, lambda s: len(s.records) >= count, "all records", timeout=60)
    close(asys, bridge)

    keys = [(r.partition, r.offset) for r in final.records]
    assert len(keys) == len(set(keys)) == count
    for records in by_partition(final.records).values():
        assert [r.offset for r in records] == list(range(len(records)))
    assert final.errors == ()


def test_commits_acknowledged(actors: Actors, kafka_broker: Any) -> None:
    asys = actors.system
    topic = unique("th-commit")
    kafka_broker.create_topic(topic, partitions=2)
    bootstrap = kafka_broker.bootstrap_servers
    produce(bootstrap, topic, 400, key=lambda i: f"k{i % 5}".encode())
    group = unique("g")

    bridge = start_bridge(asys, bridge_config(bootstrap, group))
    sub = asys.createActor(RecordingSubscriber)
    subscribe(asys, bridge, topic, sub)
    got = until(asys, sub, lambda s: len(s.records) >= 400, "all records")
    asys.tell(sub, CommitProcessed())
    got = until(asys, sub, lambda s: len(s.commits) >= 1, "the commit reply")
    reply = got.commits[0]
    assert isinstance(reply, CommitOk), reply
    expected = {
        TopicPartition(topic, p): max(r.offset for r in recs) + 1
        for p, recs in by_partition(got.records).items()
    }
    assert {tp: om.offset for tp, om in reply.offsets.items()} == expected

    # An explicit commit straight from outside the actor system, with its reply.
    tp0 = TopicPartition(topic, 0)
    explicit = asys.ask(bridge, Commit(77, {tp0: 5}), 60)
    assert isinstance(explicit, CommitOk) and explicit.request_id == 77
    assert explicit.offsets[tp0].offset == 5

    with KafkaConsumer(base_config(bootstrap, **{"group.id": group})) as checker:
        committed = checker.committed(set(expected), timeout=30)
    c0, c1 = committed[tp0], committed[TopicPartition(topic, 1)]
    assert c0 is not None and c0.offset == 5
    assert c1 is not None and c1.offset == expected[TopicPartition(topic, 1)]
    close(asys, bridge)


def test_revocation_commits_through_the_bridge_then_acks(actors: Actors, kafka_broker: Any) -> None:
    """The seed scenario: the subscriber actor commits inside the revocation, then acks."""
    asys = actors.system
    topic = unique("th-seed")
    kafka_broker.create_topic(topic, partitions=4)
    bootstrap = kafka_broker.bootstrap_servers
    produce(bootstrap, topic, 2000, key=lambda i: f"k{i % 31}".encode())
    group = unique("g")

    bridge_a = start_bridge(asys, bridge_config(bootstrap, group))
    sub_a = asys.createActor(RecordingSubscriber)
    subscribe(asys, bridge_a, topic, sub_a)
    until(asys, sub_a, lambda s: len(s.records) >= 2000, "A consumed the first 2000")

    # No commit so far (auto-commit off): only the revocation's commit can move the group.
    bridge_b = start_bridge(asys, bridge_config(bootstrap, group))
    sub_b = asys.createActor(RecordingSubscriber)
    subscribe(asys, bridge_b, topic, sub_b)

    def revoked_and_committed(s: State) -> bool:
        return any(kind == "revoked" and parts for kind, parts, _ in s.events) and bool(s.commits)

    a = until(asys, sub_a, revoked_and_committed, "A's revocation with its commit")
    b = until(
        asys,
        sub_b,
        lambda s: any(kind == "assigned" and parts for kind, parts, _ in s.events),
        "B's assignment (the rebalance completed)",
    )
    revoked = frozenset().union(*(p for kind, p, _ in a.events if kind == "revoked"))
    assigned_b = frozenset().union(*(p for kind, p, _ in b.events if kind == "assigned"))
    assert revoked and revoked <= assigned_b
    commit = a.commits[0]
    assert isinstance(commit, CommitOk), commit
    # What A committed is exactly what it processed of the revoked partitions.
    processed = {
        TopicPartition(topic, p): max(r.offset for r in recs) + 1
        for p, recs in by_partition(a.records).items()
        if TopicPartition(topic, p) in revoked
    }
    assert {tp: om.offset for tp, om in commit.offsets.items()} == processed
    # The ack came after the commit reply, for the revocation's own id.
    rid = next(r for kind, p, r in a.events if kind == "revoked" and p)
    assert rid in a.acks

    produce(bootstrap, topic, 2000, start=2000, key=lambda i: f"k{i % 31}".encode())

    def total(s_a: State, s_b: State) -> int:
        return len({(r.partition, r.offset) for r in s_a.records + s_b.records})

    deadline = time.monotonic() + 90
    while True:
        a, b = state(asys, sub_a), state(asys, sub_b)
        if total(a, b) >= 4000:
            break
        assert time.monotonic() < deadline, f"only {total(a, b)} of 4000 records"
        asys.listen(0.1)
    close(asys, bridge_a, bridge_b)

    everything = a.records + b.records
    keys = [(r.partition, r.offset) for r in everything]
    assert len(keys) == len(set(keys)) == 4000, "records processed twice or missed"
    # B started each moved partition exactly where A's revocation commit left it.
    for tp in revoked:
        first = min(r.offset for r in b.records if r.partition == tp.partition)
        assert first == processed.get(tp, 0)
    assert a.errors == () and b.errors == ()


def test_unacknowledged_revocation_is_bounded_by_the_rebalance_timeout(
    actors: Actors, kafka_broker: Any
) -> None:
    """A subscriber that never acknowledges holds the revocation only until the rebalance
    timeout (max.poll.interval.ms); then the partitions move on."""
    asys = actors.system
    topic = unique("th-noack")
    kafka_broker.create_topic(topic, partitions=2)
    bootstrap = kafka_broker.bootstrap_servers
    produce(bootstrap, topic, 200, key=lambda i: f"k{i % 7}".encode())
    group = unique("g")
    timeout_ms = 6000

    bridge_a = start_bridge(
        asys, bridge_config(bootstrap, group, **{"max.poll.interval.ms": timeout_ms})
    )
    sub_a = asys.createActor(RecordingSubscriber)
    asys.tell(sub_a, SetMode(window=1000, ack_revocations=False))
    subscribe(asys, bridge_a, topic, sub_a)
    until(asys, sub_a, lambda s: len(s.records) >= 200, "A consumed")

    bridge_b = start_bridge(asys, bridge_config(bootstrap, group))
    sub_b = asys.createActor(RecordingSubscriber)
    subscribe(asys, bridge_b, topic, sub_b)
    a = until(
        asys,
        sub_a,
        lambda s: any(kind == "revoked" and parts for kind, parts, _ in s.events),
        "A's revocation",
    )
    revoked_at = time.monotonic()
    assert a.acks == () or all(rid not in a.acks for kind, _, rid in a.events if kind == "revoked")
    assert stats(asys, bridge_a).pending_rebalance_acks >= 1
    b = until(
        asys,
        sub_b,
        lambda s: any(kind == "assigned" and parts for kind, parts, _ in s.events),
        "B's assignment after A's rebalance timeout",
        timeout=timeout_ms / 1000 + 60,
    )
    # B got the partitions only once A's revocation timed out (A never acknowledged).
    assert time.monotonic() - revoked_at >= timeout_ms / 1000 * 0.8
    deadline = time.monotonic() + 30
    while stats(asys, bridge_a).pending_rebalance_acks:
        assert time.monotonic() < deadline, "the expired revocation is still pending"
        asys.listen(0.2)
    assert b.events
    close(asys, bridge_a, bridge_b)


def test_assign_streams_only_the_assigned_partitions(actors: Actors, kafka_broker: Any) -> None:
    asys = actors.system
    topic = unique("th-assign")
    kafka_broker.create_topic(topic, partitions=3)
    bootstrap = kafka_broker.bootstrap_servers
    for partition in range(3):
        produce(bootstrap, topic, 100, partition=partition)
    bridge = asys.createActor(KafkaBridge)
    config = base_config(bootstrap, **{"max.poll.records": 30})  # no group: no commits
    assert isinstance(asys.ask(bridge, Configure(config), 60), Configured)
    sub = asys.createActor(RecordingSubscriber)
    wanted = (TopicPartition(topic, 0), TopicPartition(topic, 2))
    reply = asys.ask(bridge, Assign(wanted, sub), 60)
    assert isinstance(reply, Subscribed) and reply.partitions == wanted
    final = until(asys, sub, lambda s: len(s.records) >= 200, "the assigned partitions")
    asys.listen(1.0)  # nothing more may come
    final = state(asys, sub)
    assert len(final.records) == 200
    parts = by_partition(final.records)
    assert sorted(parts) == [0, 2]
    for records in parts.values():
        assert [r.offset for r in records] == list(range(100))
    failed = asys.ask(bridge, Commit(1), 60)
    assert isinstance(failed, CommitFailed) and failed.error.type == "InvalidGroupIdError"
    close(asys, bridge)
