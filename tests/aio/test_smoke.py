"""AsyncKafkaConsumer basics against the real broker: assign and subscribe, getmany / getone /
async for, commit and committed, seek and pause, offsets lookups, metadata, close."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kafka_actors import TopicPartition
from kafka_actors.aio import AsyncKafkaConsumer
from tests.consumer.helpers import base_config, produce, unique

pytestmark = pytest.mark.broker


def test_assign_getmany_getone_and_lookups(kafka_broker: Any) -> None:
    topic = unique("aio-assign")
    kafka_broker.create_topic(topic, partitions=2)
    produce(kafka_broker.bootstrap_servers, topic, 200)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    async def main() -> None:
        config = base_config(kafka_broker.bootstrap_servers)
        async with AsyncKafkaConsumer(config=config) as consumer:
            consumer.assign([tp0, tp1])
            seen: dict[TopicPartition, list[int]] = {tp0: [], tp1: []}
            first = await consumer.getone()
            seen[TopicPartition(first.topic, first.partition)].append(first.offset)
            while sum(len(v) for v in seen.values()) < 200:
                batch = await consumer.getmany(timeout_ms=5000, max_records=37)
                assert sum(len(v) for v in batch.values()) <= 37
                for tp, records in batch.items():
                    seen[tp].extend(r.offset for r in records)
            for offsets in seen.values():
                assert offsets == list(range(len(offsets)))
            ends = await consumer.end_offsets([tp0, tp1])
            assert ends == {tp0: len(seen[tp0]), tp1: len(seen[tp1])}
            assert await consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
            assert await consumer.position(tp0) == len(seen[tp0])
            assert topic in await consumer.list_topics()
            assert len(await consumer.partitions_for(topic)) == 2
            consumer.seek(tp0, 5)
            again = await consumer.getmany(tp0, timeout_ms=5000, max_records=3)
            assert [r.offset for r in again[tp0]] == [5, 6, 7]
            consumer.pause(tp0)
            assert consumer.paused() == {tp0}
            assert await consumer.getmany(timeout_ms=300) == {}
            consumer.resume(tp0)
            more = await consumer.getmany(tp0, timeout_ms=5000, max_records=2)
            assert [r.offset for r in more[tp0]] == [8, 9]
            times = await consumer.offsets_for_times({tp0: 0})
            found = times[tp0]
            assert found is not None and found.offset == 0

    asyncio.run(main())


def test_subscribe_async_for_commit(kafka_broker: Any) -> None:
    topic = unique("aio-sub")
    kafka_broker.create_topic(topic, partitions=3)
    produce(kafka_broker.bootstrap_servers, topic, 300)
    group = unique("g")

    async def main() -> None:
        config = base_config(
            kafka_broker.bootstrap_servers, **{"group.id": group, "enable.auto.commit": False}
        )
        got = 0
        async with AsyncKafkaConsumer(topic, config=config) as consumer:
            async for _record in consumer:
                got += 1
                if got == 150:
                    committed = await consumer.commit()
                    assert sum(om.offset for om in committed.values()) == 150
                    break
            tps = [TopicPartition(topic, p) for p in range(3)]
            stored = await consumer.committed(tps)
            assert sum(om.offset for om in stored.values() if om is not None) == 150
        # A new member of the group goes on from the commit: the other 150, no more.
        async with AsyncKafkaConsumer(topic, config=config) as consumer:
            rest = 0
            while rest < 150:
                batch = await consumer.getmany(timeout_ms=5000)
                rest += sum(len(v) for v in batch.values())
            assert rest == 150
            assert await consumer.getmany(timeout_ms=500) == {}

    asyncio.run(main())


def test_unsubscribe_runs_the_coroutine_listener(kafka_broker: Any) -> None:
    """``await unsubscribe()`` leaves the group: the revocation coroutine runs on the loop (and
    may await a commit) before it returns; ``close()`` after it has nothing left to revoke."""
    topic = unique("aio-unsub")
    kafka_broker.create_topic(topic, partitions=2)
    produce(kafka_broker.bootstrap_servers, topic, 20)
    group = unique("g")

    async def main() -> None:
        calls: list[tuple[str, set[TopicPartition]]] = []
        config = base_config(
            kafka_broker.bootstrap_servers, **{"group.id": group, "enable.auto.commit": False}
        )
        consumer = AsyncKafkaConsumer(config=config)

        class Listener:
            async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                calls.append(("assigned", assigned))

            async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
                if revoked:
                    await consumer.commit()
                calls.append(("revoked", revoked))

        consumer.subscribe([topic], listener=Listener())
        got = 0
        while got < 20:
            batch = await consumer.getmany(timeout_ms=1000)
            got += sum(len(v) for v in batch.values())
        await consumer.unsubscribe()
        both = {TopicPartition(topic, 0), TopicPartition(topic, 1)}
        assert ("revoked", both) in calls
        assert consumer.assignment() == set() and consumer.subscription() == set()
        stored = await consumer.committed(both)
        assert sum(om.offset for om in stored.values() if om is not None) == 20
        with pytest.raises(Exception, match="not subscribed"):
            await consumer.getmany()
        await consumer.close()
        with pytest.raises(Exception, match="closed"):
            await consumer.getmany()

    asyncio.run(main())
