"""Show 5 (issue #13): one share group of our share consumers (sync and asyncio) and Java's
``KafkaShareConsumer`` (the testkit's small program on the broker's own kafka-clients 4.4.0):
the records are split between them, none is delivered twice, none is lost. Real Kafka 4.4."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from kafka_actors.testing import KafkaBroker
from kafka_actors.testing.java_share import JavaShareConsumer
from tests.share.helpers import (
    poll_for,
    produce,
    share_api,
    share_config,
    trickle,
)

N = 2000


@pytest.mark.broker
def test_a_share_group_with_java_splits_the_records(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    ka = share_api()
    topic, group = kafka_topic(share_broker), share_group()
    accept = ka.AcknowledgeType.ACCEPT
    config = share_config(
        share_broker, group, share_acknowledgement_mode="explicit", max_poll_records=50
    )
    ours: dict[str, list[tuple[int, int]]] = {"sync": [], "aio": []}
    failures: list[BaseException] = []
    stop = threading.Event()

    def sync_member() -> None:
        try:
            with ka.KafkaShareConsumer(config) as consumer:
                consumer.subscribe([topic])
                while not stop.is_set():
                    for r in consumer.poll(0.5):
                        ours["sync"].append((r.offset, r.delivery_count))
                        consumer.acknowledge(r, accept)
                consumer.commit_sync(30.0)
        except BaseException as exc:
            failures.append(exc)

    async def aio_member() -> None:
        async with ka.AsyncKafkaShareConsumer(config) as consumer:
            consumer.subscribe([topic])
            while not stop.is_set():
                for r in await consumer.poll(0.5):
                    ours["aio"].append((r.offset, r.delivery_count))
                    consumer.acknowledge(r, accept)
            await consumer.commit_sync(30.0)

    def aio_thread() -> None:
        try:
            asyncio.run(aio_member())
        except BaseException as exc:
            failures.append(exc)

    java = JavaShareConsumer(share_broker, topic, group, config={"max.poll.records": 50})
    java.start()
    threads = [threading.Thread(target=f, daemon=True) for f in (sync_member, aio_thread)]
    try:
        for t in threads:
            t.start()
        time.sleep(2.0)  # every member joins before the records arrive
        with trickle(share_broker.bootstrap_servers, topic, N):
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and not failures:
                got = {o for member in ours.values() for o, _ in member}
                got |= {r.offset for r in java.records}
                if len(got) >= N:
                    break
                time.sleep(0.2)
        time.sleep(2.0)  # a record delivered twice would show up now
    finally:
        stop.set()
        for t in threads:
            t.join(90)
        code = java.stop()
    assert not failures, failures
    assert code == 0, java.stderr_tail()
    mine = [o for member in ours.values() for o, _ in member]
    theirs = [r.offset for r in java.records]
    assert len(mine) == len(set(mine)), "one of ours got a record twice"
    assert len(theirs) == len(set(theirs)), "Java got a record twice"
    assert not set(mine) & set(theirs), "a record went to both Java and us"
    assert set(mine) | set(theirs) == set(range(N)), "records lost"
    assert mine and theirs, f"no split: ours {len(mine)}, Java {len(theirs)}"
    assert all(count == 1 for member in ours.values() for _, count in member)
    assert all(r.delivery_count == 1 for r in java.records)
    assert all(result == "OK" for _, _, result in java.commits), java.commits


@pytest.mark.broker
def test_records_a_killed_java_member_held_come_to_ours(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    """Java's consumer acquires records and is SIGKILLed holding them; after the group's lock
    our consumer gets them (delivery count 2), and every record once."""
    ka = share_api()
    topic = kafka_topic(share_broker)
    group = share_group(record_lock_duration_ms=3000)
    n = 20
    produce(share_broker.bootstrap_servers, topic, n)
    java = JavaShareConsumer(share_broker, topic, group, ack="hold")
    java.start()
    try:
        assert java.wait_holding(60), java.stderr_tail()
        held = {r.offset for r in java.records}
        assert held
    finally:
        java.kill()
    config = share_config(share_broker, group, share_acknowledgement_mode="explicit")
    accepted: dict[int, int] = {}
    with ka.KafkaShareConsumer(config) as consumer:
        consumer.subscribe([topic])
        for r in poll_for(
            consumer, 90.0, until=lambda g: len(g) >= n, ack=ka.AcknowledgeType.ACCEPT
        ):
            assert r.offset not in accepted, f"offset {r.offset} delivered twice"
            accepted[r.offset] = r.delivery_count
        consumer.commit_sync(30.0)
    assert sorted(accepted) == list(range(n)), f"lost: {set(range(n)) - set(accepted)}"
    assert all(accepted[o] == 2 for o in held), {o: accepted[o] for o in held}
