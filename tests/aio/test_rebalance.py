"""The seed scenario (KIP-944): inside ``on_partitions_revoked`` the listener hands the commit
of everything processed so far to another task (asyncio) / another thread (sync consumer) and
waits for it; the commit succeeds and the rebalance completes. Also: a listener that outlives
the rebalance timeout, and rebalance-safe commits holding a revocation until the commit."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from kafka_actors import KafkaConsumer, TopicPartition
from kafka_actors.aio import AsyncKafkaConsumer
from kafka_actors.errors import KafkaTimeoutError
from kafka_actors.protocol.messages import OffsetAndMetadata
from tests.aio.helpers import PollingMember, fast_group_heartbeats, group_config
from tests.consumer.helpers import produce, unique

pytestmark = pytest.mark.broker

PROTOCOLS = ["consumer", "classic"]


async def _drain(consumer: AsyncKafkaConsumer, seconds: float) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        batch = await consumer.getmany(timeout_ms=200)
        for records in batch.values():
            out.extend(records)
    return out


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_seed_scenario_async(kafka_broker: Any, protocol: str) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique(f"aio-seed-{protocol}")
    kafka_broker.create_topic(topic, partitions=4)
    produce(bootstrap, topic, 400)
    group = unique("g")
    if protocol == "consumer":
        fast_group_heartbeats(bootstrap, group)

    async def main() -> None:
        commits: asyncio.Queue[tuple[dict[TopicPartition, int], asyncio.Future[Any]]]
        commits = asyncio.Queue()
        processed: dict[TopicPartition, int] = {}
        revocations: list[tuple[set[TopicPartition], dict[TopicPartition, OffsetAndMetadata]]] = []
        a = AsyncKafkaConsumer(config=group_config(bootstrap, group, protocol))

        async def committer() -> None:
            # Another task owns the commits: the listener hands its work over and waits.
            while True:
                offsets, done = await commits.get()
                try:
                    done.set_result(await a.commit(offsets))
                except Exception as exc:
                    done.set_exception(exc)

        class Listener:
            async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
                if not revoked:
                    return
                done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                await commits.put((dict(processed), done))
                result = await done  # the commit ran in the committer task
                revocations.append((revoked, result))

            async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                await asyncio.sleep(0)

        task = asyncio.get_running_loop().create_task(committer())
        a.subscribe([topic], listener=Listener())
        got = 0
        while got < 200:
            batch = await a.getmany(timeout_ms=1000, max_records=20)
            for tp, records in batch.items():
                processed[tp] = records[-1].offset + 1
                got += len(records)
        # B joins: A's revocation commits what A processed, through the committer task.
        b = AsyncKafkaConsumer(config=group_config(bootstrap, group, protocol))
        b.subscribe([topic])
        b_records: list[Any] = []
        deadline = time.monotonic() + 60
        while not (a.assignment() and b.assignment() and revocations):
            assert time.monotonic() < deadline, "the rebalance did not complete"
            batch_a, batch_b = await asyncio.gather(
                a.getmany(timeout_ms=200, max_records=20), b.getmany(timeout_ms=200)
            )
            for tp, records in batch_a.items():
                processed[tp] = records[-1].offset + 1
            for records in batch_b.values():
                b_records.extend(records)
        assert a.assignment() | b.assignment() == {TopicPartition(topic, p) for p in range(4)}
        assert not a.assignment() & b.assignment()
        revoked, committed = revocations[0]
        assert revoked and committed, revocations
        stored = await a.committed(list(revoked))
        for tp in revoked:
            om = stored[tp]
            assert om is not None and om.offset >= committed[tp].offset
        b_records += await _drain(b, 2.0)
        # B starts each partition A gave up exactly where A's revocation commit left it.
        first: dict[TopicPartition, int] = {}
        for r in b_records:
            first.setdefault(TopicPartition(r.topic, r.partition), r.offset)
        for tp, offset in first.items():
            if tp in committed:
                assert offset == committed[tp].offset, (tp, offset, committed[tp])
        task.cancel()
        await asyncio.gather(a.close(), b.close())

    asyncio.run(asyncio.wait_for(main(), 240))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_seed_scenario_sync(kafka_broker: Any, protocol: str) -> None:
    """KafkaConsumer: the listener runs on the polling thread, hands the commit to another
    thread and blocks on it; the commit (from that thread) succeeds, the rebalance completes."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique(f"sync-seed-{protocol}")
    kafka_broker.create_topic(topic, partitions=4)
    produce(bootstrap, topic, 400)
    group = unique("g")
    if protocol == "consumer":
        fast_group_heartbeats(bootstrap, group)
    executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="committer")
    a = KafkaConsumer(group_config(bootstrap, group, protocol))
    processed: dict[TopicPartition, int] = {}
    revocations: list[tuple[set[TopicPartition], dict[TopicPartition, OffsetAndMetadata], str]] = []
    poll_thread = threading.current_thread().name

    class Listener:
        def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            if not revoked:
                return
            assert threading.current_thread().name == poll_thread

            def commit() -> Any:
                return threading.current_thread().name, a.commit_sync(dict(processed))

            thread, result = executor.submit(commit).result(60)
            revocations.append((revoked, result, thread))

        def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            pass

    a.subscribe([topic], listener=Listener())  # type: ignore[arg-type]
    got = 0
    deadline = time.monotonic() + 60
    while got < 200:
        assert time.monotonic() < deadline
        for tp in (records := a.poll(0.5)).partitions():
            recs = records.records(tp)
            processed[tp] = recs[-1].offset + 1
            got += len(recs)
    member_b = PollingMember(group_config(bootstrap, group, protocol), topic)
    b, b_records = member_b.consumer, member_b.records
    try:
        deadline = time.monotonic() + 60
        while not (revocations and a.assignment() and b.assignment()):
            assert time.monotonic() < deadline, "the rebalance did not complete"
            records = a.poll(0.2)
            for tp in records.partitions():
                processed[tp] = records.records(tp)[-1].offset + 1
        time.sleep(2.0)
    finally:
        member_b.stop()
    revoked, committed, committer_thread = revocations[0]
    assert committer_thread.startswith("committer")
    assert revoked and committed
    first: dict[TopicPartition, int] = {}
    for r in b_records:
        first.setdefault(TopicPartition(r.topic, r.partition), r.offset)
    for tp, offset in first.items():
        if tp in committed:
            assert offset == committed[tp].offset
    assert a.assignment() | b.assignment() == {TopicPartition(topic, p) for p in range(4)}
    a.close()
    b.close()
    executor.shutdown()


def test_listener_past_rebalance_timeout_is_reported(kafka_broker: Any) -> None:
    """A coroutine listener that does not return within max.poll.interval.ms (the rebalance
    timeout) is cancelled and the next getmany raises KafkaTimeoutError naming the callback;
    the member is past the rebalance timeout (the broker fences it, its partitions are lost)
    and the rebalance goes on."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("aio-slow-listener")
    kafka_broker.create_topic(topic, partitions=2)
    produce(bootstrap, topic, 20)
    group = unique("g")
    fast_group_heartbeats(bootstrap, group)

    async def main() -> None:
        cancelled = asyncio.Event()

        class Slow:
            async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
                if revoked and not cancelled.is_set():  # only the first revocation hangs
                    try:
                        await asyncio.sleep(3600)
                    except asyncio.CancelledError:
                        cancelled.set()
                        raise

        config = group_config(bootstrap, group)
        config["max.poll.interval.ms"] = 3000
        async with AsyncKafkaConsumer(config=config) as a:
            a.subscribe([topic], listener=Slow())
            while not a.assignment():
                await a.getmany(timeout_ms=200)
            b = AsyncKafkaConsumer(topic, config=group_config(bootstrap, group))
            raised: BaseException | None = None
            deadline = time.monotonic() + 60
            while raised is None:
                assert time.monotonic() < deadline
                try:
                    await asyncio.gather(a.getmany(timeout_ms=200), b.getmany(timeout_ms=200))
                except KafkaTimeoutError as exc:
                    raised = exc
            assert "on_partitions_revoked" in str(raised) and "lost" in str(raised)
            assert cancelled.is_set()
            deadline = time.monotonic() + 60
            while not (b.assignment() and len(a.assignment()) < 2):
                assert time.monotonic() < deadline, "the rebalance did not go on"
                await asyncio.gather(
                    a.getmany(timeout_ms=200), b.getmany(timeout_ms=200), return_exceptions=True
                )
            await b.close()

    asyncio.run(asyncio.wait_for(main(), 180))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_safe_commits_hold_the_sync_consumer_revocation(kafka_broker: Any, protocol: str) -> None:
    """KafkaConsumer with rebalance.safe.commits: A has processed records it does not commit
    when B joins; the revocation waits (B gets nothing, A no more records of the partition
    being revoked) until A commits them, then B starts exactly there: nothing twice."""

    def poll(a: KafkaConsumer) -> list[tuple[TopicPartition, int, int]]:
        records = a.poll(0.2)
        return [
            (tp, records.records(tp)[0].offset, records.records(tp)[-1].offset)
            for tp in records.partitions()
        ]

    _safe_commits_hold_the_revocation(kafka_broker, protocol, poll)


def test_safe_commits_hold_the_revocation_for_poll_batches(kafka_broker: Any) -> None:
    """The same with A taking its records in columns (KafkaConsumer.poll_batches)."""
    pytest.importorskip("pyarrow")

    def poll_batches(a: KafkaConsumer) -> list[tuple[TopicPartition, int, int]]:
        out = []
        for tp, batch in a.poll_batches(0.2, max_records=50).items():
            offsets = batch.column("offset")
            out.append((tp, offsets[0].as_py(), offsets[-1].as_py()))
        return out

    _safe_commits_hold_the_revocation(kafka_broker, "consumer", poll_batches)


def _safe_commits_hold_the_revocation(
    kafka_broker: Any,
    protocol: str,
    poll: Callable[[KafkaConsumer], list[tuple[TopicPartition, int, int]]],
) -> None:
    """``poll(a)``: A's records of one call, per partition (first offset, last offset)."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique(f"sync-safe-{protocol}")
    kafka_broker.create_topic(topic, partitions=2)
    produce(bootstrap, topic, 400)
    group = unique("g")
    if protocol == "consumer":
        fast_group_heartbeats(bootstrap, group)
    config = group_config(bootstrap, group, protocol, **{"rebalance.safe.commits": True})
    config["max.poll.records"] = 50
    a = KafkaConsumer(config)
    a.subscribe([topic])
    handed: dict[TopicPartition, int] = {}  # processed, never committed until B waited

    def poll_a() -> None:
        for tp, first, last in poll(a):
            assert first == handed.get(tp, 0)  # in order, nothing skipped
            handed[tp] = last + 1

    deadline = time.monotonic() + 60
    while len(handed) < 2:
        assert time.monotonic() < deadline
        poll_a()
    member_b = PollingMember(group_config(bootstrap, group, protocol), topic)
    b, b_records = member_b.consumer, member_b.records
    try:
        held_until = time.monotonic() + 6.0
        while time.monotonic() < held_until:  # the revocation is held: B gets nothing
            poll_a()
            assert not b_records and not b.assignment()
        assert len(a.assignment()) == 2
        a.commit_sync(handed)
        produce(bootstrap, topic, 100, start=400)  # something for B to read where A stopped
        deadline = time.monotonic() + 60
        while not (b.assignment() and b_records):
            assert time.monotonic() < deadline, "the rebalance did not complete"
            poll_a()
    finally:
        member_b.stop()
    first: dict[TopicPartition, int] = {}
    for r in b_records:
        first.setdefault(TopicPartition(r.topic, r.partition), r.offset)
    assert first and all(offset == handed[tp] for tp, offset in first.items())
    a.close()
    b.close()
