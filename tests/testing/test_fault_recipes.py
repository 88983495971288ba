"""The recipes of ``docs/fault-injection.md``, each run against a real broker.

Written as a service's own test suite would write them: the ``fault_injector`` and
``kafka_broker`` fixtures of the testkit, APIs and errors by Kafka's names only, and an
assertion of what each recipe promises (nothing lost, the listener told, the call retried).
Keep the guide's code blocks and these tests in step (``test_guide_quotes_every_recipe``).
"""

from __future__ import annotations

import asyncio
import pathlib
import time
import uuid
from typing import Any

import pytest

from kafka_actors import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka_actors.aio import AsyncKafkaConsumer
from kafka_actors.errors import CommitFailedError, GroupAuthorizationFailedError
from kafka_actors.testing import FaultInjector

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]

GUIDE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "fault-injection.md"


def produce(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    for i in range(start, start + count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"value-{i}".encode())
    assert producer.flush(30) == 0


def new_topic(broker: Any, partitions: int = 2) -> str:
    name = f"recipe-{uuid.uuid4().hex[:10]}"
    broker.create_topic(name, partitions=partitions)
    return name


def config(broker: Any, **extra: object) -> dict[str, object]:
    values: dict[str, object] = {
        "bootstrap.servers": broker.bootstrap_servers,
        "group.id": f"recipe-{uuid.uuid4().hex[:10]}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.max.wait.ms": 100,
    }
    values.update(extra)
    return values


# -- recipe 1: fence my member mid-batch -------------------------------------------------------


def test_fence_my_member_mid_batch(kafka_broker: Any, fault_injector: FaultInjector) -> None:
    topic = new_topic(kafka_broker)
    produce(kafka_broker.bootstrap_servers, topic, 60)
    lost: list[set[TopicPartition]] = []

    class Listener(ConsumerRebalanceListener):
        def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
            lost.append(partitions)

    processed: list[bytes] = []
    cfg = config(kafka_broker, **{"group.protocol": "consumer", "max.poll.records": 10})
    with KafkaConsumer(cfg, faults=fault_injector) as consumer:
        consumer.subscribe([topic], listener=Listener())
        deadline = time.monotonic() + 120
        fenced = False
        # Poll on until every record is processed and the fence has been handled (the
        # listener runs inside poll(), once the next heartbeat brought the fence).
        while (len(set(processed)) < 60 or not lost) and time.monotonic() < deadline:
            batch = consumer.poll(0.5)
            for record in batch:
                if not fenced:
                    # Mid-batch: the next heartbeat answer fences this member.
                    fault_injector.error_response("ConsumerGroupHeartbeat", "FENCED_MEMBER_EPOCH")
                    fenced = True
                processed.append(record.value or b"")
            if batch:
                try:
                    consumer.commit_sync()
                except CommitFailedError:
                    pass  # fenced while committing: the batch comes again after the rejoin
    assert fenced and fault_injector.pending() == 0
    assert lost, "a fenced member's partitions are reported to on_partitions_lost"
    # At least once: every record processed, none lost (some may come twice after the fence).
    assert set(processed) == {f"value-{i}".encode() for i in range(60)}


# -- recipe 2: kill the coordinator connection during a commit ------------------------------------


def test_kill_the_coordinator_connection_during_a_commit(
    kafka_broker: Any, fault_injector: FaultInjector
) -> None:
    topic = new_topic(kafka_broker, partitions=1)
    produce(kafka_broker.bootstrap_servers, topic, 20)
    tp = TopicPartition(topic, 0)
    cfg = config(kafka_broker, **{"request.timeout.ms": 3000})
    with KafkaConsumer(cfg, faults=fault_injector) as consumer:
        consumer.subscribe([topic])
        seen: list[Any] = []
        while len(seen) < 20:
            seen.extend(consumer.poll(0.5))
        brokers = {p.leader for parts in consumer.list_topics().values() for p in parts}
        # Hold the commit's answer, then cut every broker connection while it is in flight.
        fault_injector.delay_response("OffsetCommit", seconds=1.0)
        future = consumer.commit_async()
        for node in brokers:
            if node is not None:
                fault_injector.sever(node)
        while not future.done():
            consumer.poll(0.1)
        try:
            future.result()
        except CommitFailedError:
            raise
        except Exception:
            # The commit may fail with a retriable error when its connection is cut: the
            # application commits again, as it would after any disconnect.
            consumer.commit_sync()
        assert fault_injector.pending() == 0, "the connection was not severed"
        assert consumer.committed([tp])[tp].offset == 20  # type: ignore[union-attr]
        # The commit's answer lost on the way: commit_sync retries after request.timeout.ms.
        fault_injector.drop_response("OffsetCommit")
        consumer.commit_sync({tp: 15})  # type: ignore[dict-item]
        assert fault_injector.pending() == 0
        assert consumer.committed([tp])[tp].offset == 15  # type: ignore[union-attr]


# -- recipe 3: crash the fetch actor ---------------------------------------------------------------


def test_crash_the_fetch_actor(kafka_broker: Any, fault_injector: FaultInjector) -> None:
    topic = new_topic(kafka_broker)
    produce(kafka_broker.bootstrap_servers, topic, 50)
    with KafkaConsumer(config(kafka_broker), faults=fault_injector) as consumer:
        consumer.subscribe([topic])
        offsets: dict[int, list[int]] = {0: [], 1: []}
        while sum(map(len, offsets.values())) < 20:
            for record in consumer.poll(0.5):
                offsets[record.partition].append(record.offset)
        fault_injector.crash("fetch", times=2)  # crashes, is restarted, crashes again
        produce(kafka_broker.bootstrap_servers, topic, 50, start=50)
        deadline = time.monotonic() + 90
        while sum(map(len, offsets.values())) < 100 and time.monotonic() < deadline:
            for record in consumer.poll(0.5):
                offsets[record.partition].append(record.offset)
        assert fault_injector.pending() == 0
    # Every record once, in order per partition: the restarted fetch actor resumed at the
    # position the consumer had handed out.
    for partition_offsets in offsets.values():
        assert partition_offsets == list(range(len(partition_offsets)))
    assert sum(map(len, offsets.values())) == 100


# -- recipe 4: delay a Fetch response (asyncio consumer) -------------------------------------------


def test_delay_a_fetch_response(kafka_broker: Any, fault_injector: FaultInjector) -> None:
    topic = new_topic(kafka_broker, partitions=1)
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        cfg = config(kafka_broker)
        async with AsyncKafkaConsumer(config=cfg, faults=fault_injector) as consumer:
            consumer.assign([tp])
            await consumer.getmany(timeout_ms=500)  # the first fetch runs
            fault_injector.delay_response("Fetch", seconds=3.0, times=None)
            produce(kafka_broker.bootstrap_servers, topic, 10)
            # While fetches are held, getmany() keeps returning (empty) at its timeout.
            empties = 0
            while not (batch := await consumer.getmany(timeout_ms=200)):
                empties += 1
            assert empties >= 1, "records came before the held Fetch answer"
            fault_injector.clear()
            got = sum(len(v) for v in batch.values())
            deadline = time.monotonic() + 60
            while got < 10 and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                got += sum(len(v) for v in batch.values())
            assert got == 10
            assert await consumer.position(tp) == 10

    asyncio.run(main())


# -- recipe 5: answer OffsetCommit with an error N times -------------------------------------------


def test_answer_offset_commit_with_an_error_n_times(
    kafka_broker: Any, fault_injector: FaultInjector
) -> None:
    topic = new_topic(kafka_broker, partitions=1)
    produce(kafka_broker.bootstrap_servers, topic, 10)
    tp = TopicPartition(topic, 0)
    with KafkaConsumer(config(kafka_broker), faults=fault_injector) as consumer:
        consumer.assign([tp])
        records: list[Any] = []
        while len(records) < 10:
            records.extend(consumer.poll(0.5))
        # A retriable error three times: commit_sync retries until its deadline and succeeds.
        fault_injector.error_response("OffsetCommit", "COORDINATOR_LOAD_IN_PROGRESS", times=3)
        consumer.commit_sync()
        assert fault_injector.pending() == 0
        assert consumer.committed([tp])[tp].offset == 10  # type: ignore[union-attr]
        # A fatal error once: the caller gets the typed error, and the next commit works.
        fault_injector.error_response("OffsetCommit", "GROUP_AUTHORIZATION_FAILED")
        with pytest.raises(GroupAuthorizationFailedError):
            consumer.commit_sync({tp: 5})  # type: ignore[dict-item]
        consumer.commit_sync()
        assert consumer.committed([tp])[tp].offset == 10  # type: ignore[union-attr]


def test_guide_quotes_every_recipe() -> None:
    text = GUIDE.read_text()
    for name in (
        "test_fence_my_member_mid_batch",
        "test_kill_the_coordinator_connection_during_a_commit",
        "test_crash_the_fetch_actor",
        "test_delay_a_fetch_response",
        "test_answer_offset_commit_with_an_error_n_times",
    ):
        assert name in text, name
