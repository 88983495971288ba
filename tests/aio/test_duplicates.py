"""Duplicates under churn (the reason for rebalance-safe commits).

Three asyncio members of one group process 200k records that are being produced meanwhile,
with random small delays, committing after each batch; members leave and new ones join
(churn) while the records flow. With ``rebalance.safe.commits=true`` no record is processed
twice and none is missed. The same run without it shows the duplicates it prevents: a
revocation acknowledged at once moves a partition while its batch is still being processed,
and the next owner starts again from the last commit.
"""

from __future__ import annotations

import asyncio
import collections
import random
import threading
import time
from typing import Any

import pytest

from kafka_actors.aio import AsyncKafkaConsumer
from tests.aio.helpers import fast_group_heartbeats, group_config
from tests.consumer.helpers import unique

pytestmark = pytest.mark.broker

TOTAL = 200_000
PARTITIONS = 6
CHURNS = 5
RESULTS: dict[str, dict[str, int]] = {}


def _produce(bootstrap: str, topic: str, total: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 3})
    for i in range(total):
        while True:
            try:
                producer.produce(topic, value=b"v%d" % i, key=b"k%d" % i)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 5000 == 0:
            producer.poll(0)
            time.sleep(0.01)  # let the records flow over a while, not in one burst
    assert producer.flush(60) == 0


async def _run(bootstrap: str, safe: bool) -> dict[str, int]:
    topic = unique(f"aio-dups-{'safe' if safe else 'unsafe'}")
    group = unique("g")
    await asyncio.to_thread(fast_group_heartbeats, bootstrap, group)
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    processed: collections.Counter[tuple[int, int]] = collections.Counter()
    rng = random.Random(7)
    extra: dict[str, Any] = {"rebalance.safe.commits": safe, "max.poll.interval.ms": 60_000}

    class Member:
        def __init__(self, name: str) -> None:
            self.name = name
            self.consumer = AsyncKafkaConsumer(
                topic, config=group_config(bootstrap, group, **extra)
            )
            self.stop = asyncio.Event()
            self.task = asyncio.ensure_future(self.run())

        async def run(self) -> None:
            c = self.consumer
            while not self.stop.is_set():
                batch = await c.getmany(timeout_ms=200, max_records=500)
                for records in batch.values():
                    for r in records:
                        processed[(r.partition, r.offset)] += 1
                        if rng.random() < 0.05:
                            await asyncio.sleep(rng.random() * 0.006)
                if batch:
                    try:
                        await c.commit()
                    except Exception:  # a member fenced meanwhile: its records come again
                        pass
            try:
                await c.commit()
            except Exception:
                pass
            await c.close()

    producer = threading.Thread(target=_produce, args=(bootstrap, topic, TOTAL))
    producer.start()
    members = [Member(f"m{i}") for i in range(3)]
    churned = 0
    deadline = time.monotonic() + 400
    next_churn = TOTAL // (CHURNS + 2)
    while churned < CHURNS:
        assert time.monotonic() < deadline, f"stuck at {len(processed)} records"
        await asyncio.sleep(0.1)
        if len(processed) >= next_churn * (churned + 1):
            leaving = members.pop(0)
            leaving.stop.set()
            newcomer = Member(f"m{3 + churned}")
            members.append(newcomer)
            churned += 1
            await leaving.task
            while not newcomer.consumer.assignment():
                assert time.monotonic() < deadline, "the newcomer got no partitions"
                await asyncio.sleep(0.1)
    await asyncio.to_thread(producer.join)
    quiet_since = time.monotonic()
    last = -1
    while time.monotonic() - quiet_since < 5.0:  # until nothing new for 5 s
        assert time.monotonic() < deadline, f"stuck at {len(processed)} records"
        await asyncio.sleep(0.2)
        if len(processed) != last:
            last, quiet_since = len(processed), time.monotonic()
    for m in members:
        m.stop.set()
    await asyncio.gather(*(m.task for m in members))
    duplicates = sum(n - 1 for n in processed.values() if n > 1)
    missed = TOTAL - len(processed)
    return {"processed": sum(processed.values()), "duplicates": duplicates, "missed": missed}


@pytest.mark.parametrize("safe", [True, False], ids=["safe_commits", "plain_commits"])
def test_churn_duplicates(kafka_broker: Any, safe: bool) -> None:
    result = asyncio.run(_run(kafka_broker.bootstrap_servers, safe))
    RESULTS["safe" if safe else "plain"] = result
    print(f"\nchurn x{CHURNS}, {TOTAL} records, rebalance.safe.commits={safe}: {result}")
    assert result["missed"] == 0, result
    if safe:
        assert result["duplicates"] == 0, result
    # Without the safe mode the same churn usually processes records twice (the point of the
    # mode); how many depends on where the churn lands relative to commits, so the control's
    # count is reported (see the printed line), not asserted: zero is a possible outcome.
