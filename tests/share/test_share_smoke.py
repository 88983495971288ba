"""KafkaShareConsumer end to end on real brokers (issue #13's smoke test; the Show tests are
the test_show_*.py files beside it).

* Two share consumers in one share group on a one-partition topic (Kafka 4.4): every record is
  delivered, and acknowledged ACCEPT (implicit mode) exactly once in the run: no record reaches
  both consumers, none is delivered twice.
* Explicit mode: a record acknowledged RELEASE is delivered again with delivery count 2; the
  acknowledgement-commit callback reports the partition's offsets.
* A Kafka 3.9 broker has no share groups: the first poll raises ShareGroupsNotSupportedError,
  whose message says what to enable; close() still works.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from kafka_actors import AcknowledgeType, KafkaShareConsumer, ShareConsumerRecord, TopicPartition
from kafka_actors.errors import (
    ConfigError,
    IllegalStateError,
    KafkaError,
    ShareGroupsNotSupportedError,
    UnsupportedVersionError,
)
from kafka_actors.testing.share import set_share_group_config
from tests.consumer.helpers import produce, unique
from tests.share.helpers import first_batch

TIMEOUT = 90.0


def _earliest(bootstrap: str, group: str) -> None:
    """A share group starts at the latest offset by default: these tests produce first."""
    set_share_group_config(bootstrap, group)


def _config(bootstrap: str, group: str, **extra: object) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "fetch.max.wait.ms": 100,
        **extra,
    }


@pytest.mark.broker
@pytest.mark.timeout(300)
def test_two_share_consumers_get_every_record_once(kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic, group = unique("share-smoke"), unique("share-smoke-g")
    kafka_broker.create_topic(topic, partitions=1)
    _earliest(bootstrap, group)
    count = 300
    consumers: list[KafkaShareConsumer] = []
    seen: list[tuple[str, int, int]] = []
    lock = threading.Lock()
    done = threading.Event()
    errors: list[BaseException] = []

    def member(name: str) -> None:
        try:
            # record_limit (ShareFetch v2): at most 20 records acquired per fetch, although
            # the records arrive in one batch (batch_optimized would acquire it whole).
            config = _config(
                bootstrap,
                group,
                **{
                    "client.id": name,
                    "max.poll.records": 20,
                    "share.acquire.mode": "record_limit",
                },
            )
            with KafkaShareConsumer(config) as consumer:
                consumer.subscribe([topic])
                with lock:
                    consumers.append(consumer)
                while not done.is_set():
                    for record in consumer.poll(0.5):
                        with lock:
                            seen.append((name, record.offset, record.delivery_count))
                            if len({o for _, o, _ in seen}) >= count:
                                done.set()
                        time.sleep(0.005)  # some work: both members take part
        except BaseException as exc:
            errors.append(exc)
            done.set()

    threads = [threading.Thread(target=member, args=(f"m{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    # Both members joined (the partition is assigned to both) before the records exist.
    end = time.monotonic() + TIMEOUT
    while not (len(consumers) == 2 and all(c.core.assignment.partitions for c in consumers)):
        assert time.monotonic() < end and not errors, errors or "the members did not join"
        time.sleep(0.1)
    produce(bootstrap, topic, count)
    done.wait(TIMEOUT)
    done.set()
    for t in threads:
        t.join(60)
    assert not errors, errors
    offsets = Counter(o for _, o, _ in seen)
    assert set(offsets) == set(range(count)), (
        f"missing {sorted(set(range(count)) - set(offsets))[:10]}"
    )
    twice = {o: n for o, n in offsets.items() if n > 1}
    assert twice == {}, f"delivered more than once: {dict(list(twice.items())[:10])}"
    assert all(d == 1 for _, _, d in seen)
    per_member = Counter(name for name, _, _ in seen)
    assert set(per_member) == {"m0", "m1"}, per_member  # the work spread over both
    # Every record was acknowledged ACCEPT: a new member of the group gets nothing more.
    with KafkaShareConsumer(_config(bootstrap, group, **{"client.id": "late"})) as late:
        late.subscribe([topic])
        end = time.monotonic() + 12.0  # past a heartbeat (assignment) and a few fetches
        while time.monotonic() < end:
            assert list(late.poll(0.5)) == []


@pytest.mark.broker
@pytest.mark.timeout(300)
def test_explicit_release_is_delivered_again_with_delivery_count_two(kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic, group = unique("share-release"), unique("share-release-g")
    kafka_broker.create_topic(topic, partitions=1)
    _earliest(bootstrap, group)
    produce(bootstrap, topic, 5)
    config = _config(bootstrap, group, **{"share.acknowledgement.mode": "explicit"})
    results: list[tuple[dict[TopicPartition, set[int]], KafkaError | None]] = []
    with KafkaShareConsumer(config) as consumer:
        consumer.set_acknowledgement_commit_callback(lambda o, e: results.append((o, e)))
        consumer.subscribe([topic])
        first: list[ShareConsumerRecord] = []
        end = time.monotonic() + TIMEOUT
        while not first:
            assert time.monotonic() < end, "no record delivered"
            first = list(consumer.poll(0.5))
        assert all(r.delivery_count == 1 for r in first)
        released = first[0]
        with pytest.raises(IllegalStateError):
            consumer.poll(0)  # explicit mode: the last poll's records are not acknowledged
        consumer.acknowledge(released, AcknowledgeType.RELEASE)
        for record in first[1:]:
            consumer.acknowledge(record, AcknowledgeType.ACCEPT)
        with pytest.raises(IllegalStateError):
            consumer.acknowledge(released, AcknowledgeType.ACCEPT)  # already acknowledged
        tp = TopicPartition(topic, 0)
        assert consumer.commit_sync(timeout=30) == {tp: None}
        assert (
            {tp: {r.offset for r in first}},
            None,
        ) in results
        again: list[ShareConsumerRecord] = []
        delivered = {r.offset for r in first}
        end = time.monotonic() + TIMEOUT
        while released.offset not in {r.offset for r in again}:
            assert time.monotonic() < end, "the released record did not come again"
            batch = list(consumer.poll(0.5))
            for record in batch:
                consumer.acknowledge(record, AcknowledgeType.ACCEPT)
                if record.offset not in delivered:
                    delivered.add(record.offset)
                    continue
                again.append(record)
        (redelivered,) = [r for r in again if r.offset == released.offset]
        assert redelivered.delivery_count == 2
        assert redelivered.value == released.value
        assert [r for r in again if r.offset != released.offset] == []


@pytest.mark.broker
@pytest.mark.timeout(120)
def test_records_buffered_for_a_partition_that_leaves_the_assignment_are_delivered(
    kafka_broker: Any,
) -> None:
    """Records acquired for this member stay its own when a partition leaves its assignment
    (as Java's share consumer: the broker releases nothing for that): the ones it had
    buffered are handed out at once, each once, and their acknowledgements are accepted, long
    before the group's record lock (60 s here) would have let anyone have them again."""
    bootstrap = kafka_broker.bootstrap_servers
    topic, other, group = unique("share-moved"), unique("share-moved-2"), unique("share-moved-g")
    kafka_broker.create_topic(topic, partitions=1)
    kafka_broker.create_topic(other, partitions=1)
    set_share_group_config(bootstrap, group, record_lock_duration_ms=60_000)
    count = 200
    from confluent_kafka import Producer

    # One batch, which the broker acquires whole for the first fetch (batch-optimized), so
    # no record of it is left to acquire once the partition has left the assignment.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "log_level": 3})
    for i in range(count):
        producer.produce(topic, value=f"value-{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    del producer
    tp = TopicPartition(topic, 0)
    results: list[tuple[dict[TopicPartition, set[int]], KafkaError | None]] = []
    config = _config(bootstrap, group, **{"max.poll.records": 5})
    with KafkaShareConsumer(config) as consumer:
        consumer.set_acknowledgement_commit_callback(lambda o, e: results.append((o, e)))
        consumer.subscribe([topic])
        got: list[ShareConsumerRecord] = first_batch(consumer, TIMEOUT)
        # Records acquired and not handed out wait in the share fetch actor's buffer.
        end = time.monotonic() + 30
        while not consumer.core.flat_metrics(timeout=5.0)["share-buffered-bytes"]:
            assert time.monotonic() < end, "nothing buffered ahead of the application"
            time.sleep(0.05)
        consumer.subscribe([other])  # the partition leaves this member's assignment
        end = time.monotonic() + 30
        while tp in consumer.core.assignment.partitions:
            assert time.monotonic() < end, "the assignment did not change"
            time.sleep(0.05)
        moved = time.monotonic()
        while len({r.offset for r in got}) < count and time.monotonic() < moved + 30:
            got.extend(consumer.poll(0.5))
        committed = consumer.commit_sync(timeout=30)  # the last poll's, ACCEPT
    offsets = Counter(r.offset for r in got)
    assert set(offsets) == set(range(count)), (
        f"missing {sorted(set(range(count)) - set(offsets))[:10]}"
    )
    assert [o for o, n in offsets.items() if n > 1] == []
    assert all(r.delivery_count == 1 for r in got)
    assert committed == {tp: None}
    accepted = set().union(*(o.get(tp, set()) for o, e in results if e is None))
    assert accepted == set(range(count)), [e for _, e in results if e is not None][:3]


@pytest.mark.broker
@pytest.mark.timeout(240)
def test_a_broker_without_share_groups_raises_share_groups_not_supported(
    kafka_broker_39: Any,
) -> None:
    bootstrap = kafka_broker_39.bootstrap_servers
    topic = unique("share-39")
    kafka_broker_39.create_topic(topic, partitions=1)
    consumer = KafkaShareConsumer(_config(bootstrap, unique("share-39-g")))
    try:
        consumer.subscribe([topic])
        end = time.monotonic() + 60.0
        with pytest.raises(ShareGroupsNotSupportedError) as raised:
            while time.monotonic() < end:
                consumer.poll(0.5)
        assert isinstance(raised.value, UnsupportedVersionError)
        assert "share" in str(raised.value) and "4.2" in str(raised.value)
    finally:
        consumer.close(timeout=10)
    consumer.close()  # idempotent


def test_config_refuses_consumer_only_keys_and_needs_a_group() -> None:
    base = {"bootstrap.servers": "localhost:9"}
    for key, value in (
        ("enable.auto.commit", False),
        ("auto.offset.reset", "earliest"),
        ("group.instance.id", "i"),
        ("isolation.level", "read_committed"),
        ("partition.assignment.strategy", "range"),
        ("group.protocol", "consumer"),
    ):
        with pytest.raises(ConfigError) as raised:
            KafkaShareConsumer({**base, "group.id": "g", key: value})
        assert key in str(raised.value) and "share consumer" in str(raised.value)
    with pytest.raises(ConfigError):
        KafkaShareConsumer(base)
    with pytest.raises(ConfigError):
        KafkaShareConsumer({**base, "group.id": " "})
    with pytest.raises(ConfigError):
        KafkaShareConsumer({**base, "group.id": "g", "share.acknowledgement.mode": "sometimes"})
    with pytest.raises(ConfigError):
        KafkaShareConsumer({**base, "group.id": "g", "share.acquire.mode": "all"})
    from kafka_actors import KafkaConsumer

    with pytest.raises(ConfigError) as refused:
        KafkaConsumer({**base, "group.id": "g", "share.acknowledgement.mode": "explicit"})
    assert "share consumer" in str(refused.value)


@pytest.mark.broker
@pytest.mark.timeout(300)
def test_asyncio_share_consumer_beside_a_sync_one_and_a_cancelled_poll_loses_nothing(
    kafka_broker: Any,
) -> None:
    import asyncio

    from kafka_actors import AsyncKafkaShareConsumer

    bootstrap = kafka_broker.bootstrap_servers
    topic, group = unique("share-aio"), unique("share-aio-g")
    kafka_broker.create_topic(topic, partitions=1)
    _earliest(bootstrap, group)
    count = 50
    produce(bootstrap, topic, count)
    results: list[tuple[dict[TopicPartition, set[int]], KafkaError | None]] = []

    async def run() -> list[ShareConsumerRecord]:
        config = _config(bootstrap, group, **{"max.poll.records": 7})
        got: list[ShareConsumerRecord] = []
        async with AsyncKafkaShareConsumer(config) as consumer:
            consumer.set_acknowledgement_commit_callback(lambda o, e: results.append((o, e)))
            consumer.subscribe([topic])
            # A poll cancelled while it waits: whatever it acquired comes with the next polls.
            task = asyncio.create_task(consumer.poll(30.0))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            loop_turns = 0

            async def ticker() -> None:
                nonlocal loop_turns
                while True:
                    loop_turns += 1
                    await asyncio.sleep(0.01)

            tick = asyncio.create_task(ticker())
            end = time.monotonic() + TIMEOUT
            async for record in consumer:
                got.append(record)
                if len({r.offset for r in got}) >= count:
                    break
                assert time.monotonic() < end
            assert await consumer.commit_sync(timeout=30) == {TopicPartition(topic, 0): None}
            tick.cancel()
            assert loop_turns > 10  # the loop ran meanwhile
        return got

    got = asyncio.run(run())
    assert sorted(r.offset for r in got) == list(range(count))
    assert all(r.delivery_count == 1 for r in got)
    acknowledged = set().union(*(o.get(TopicPartition(topic, 0), set()) for o, _ in results))
    assert acknowledged == set(range(count))
    assert all(e is None for _, e in results)


@pytest.mark.broker
@pytest.mark.timeout(120)
def test_wakeup_interrupts_a_blocked_poll_and_implicit_mode_refuses_acknowledge(
    kafka_broker: Any,
) -> None:
    from kafka_actors.errors import WakeupError

    bootstrap = kafka_broker.bootstrap_servers
    topic, group = unique("share-wakeup"), unique("share-wakeup-g")
    kafka_broker.create_topic(topic, partitions=1)
    _earliest(bootstrap, group)
    produce(bootstrap, topic, 1)
    with KafkaShareConsumer(_config(bootstrap, group)) as consumer:
        consumer.subscribe([topic])
        assert consumer.subscription() == {topic}
        consumer.wakeup()
        with pytest.raises(WakeupError):
            consumer.poll(5.0)  # the next poll raises
        records: list[ShareConsumerRecord] = []
        end = time.monotonic() + TIMEOUT
        while not records:
            assert time.monotonic() < end
            records = list(consumer.poll(0.5))
        with pytest.raises(IllegalStateError):
            consumer.acknowledge(records[0])  # implicit mode
        timer = threading.Timer(0.5, consumer.wakeup)
        timer.start()
        started = time.monotonic()
        with pytest.raises(WakeupError):
            consumer.poll(30.0)  # blocked: nothing more to deliver
        assert time.monotonic() - started < 20.0
        flat = consumer.metrics().flat()
        assert flat["share-records-fetched-total"] >= 1
        assert flat["share-fetch-requests-total"] >= 1
    consumer.close()  # idempotent
