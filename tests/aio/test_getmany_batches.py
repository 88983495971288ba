"""``AsyncKafkaConsumer.getmany_batches``: the columnar ``getmany``. Its rows are
``getmany()``'s records; mixed with ``getmany()`` every offset comes once, in order; commits
and auto-commit cover what it returned (the embedded mock cluster)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from kafka_actors import TopicPartition
from kafka_actors.aio import AsyncKafkaConsumer
from kafka_actors.errors import IllegalStateError
from kafka_actors.protocol.records import arrow
from tests.consumer.helpers import base_config, produce, unique
from tests.consumer.test_poll_batches import Rows, records_by_partition
from tests.records.test_columnar import batch_rows

pytest.importorskip("pyarrow")
pytestmark = pytest.mark.mock


async def _batches_until(consumer: AsyncKafkaConsumer, count: int, **kw: Any) -> Rows:
    rows: Rows = {}
    deadline = time.monotonic() + 60
    while sum(len(r) for r in rows.values()) < count:
        assert time.monotonic() < deadline
        for tp, batch in (await consumer.getmany_batches(timeout_ms=500, **kw)).items():
            assert batch.schema == arrow.arrow_schema(kw.get("include_headers", False))
            rows.setdefault(tp, []).extend(batch_rows(batch))
    return rows


def test_rows_are_getmany_records(mock_cluster: Any) -> None:
    topic = unique("aio-cols")
    mock_cluster.create_topic(topic, partitions=3)
    bootstrap = mock_cluster.bootstrap_servers
    produce(bootstrap, topic, 90, key=lambda i: None if i % 5 == 0 else b"k%d" % i,
            headers=[("h", b"x")])  # fmt: skip
    tps = [TopicPartition(topic, p) for p in range(3)]

    async def main() -> None:
        async with AsyncKafkaConsumer(config=base_config(bootstrap)) as reference:
            reference.assign(tps)
            got: list[Any] = []
            while len(got) < 90:
                for recs in (await reference.getmany(timeout_ms=500)).values():
                    got.extend(recs)
            expected = records_by_partition(got)
        async with AsyncKafkaConsumer(config=base_config(bootstrap)) as consumer:
            consumer.assign(tps)
            assert await _batches_until(consumer, 90, include_headers=True) == expected
            assert await consumer.getmany_batches(timeout_ms=200) == {}
            for tp in tps:
                assert await consumer.position(tp) == expected[tp][-1]["offset"] + 1

    asyncio.run(main())


def test_getmany_and_getmany_batches_continue_each_other_and_commit(mock_cluster: Any) -> None:
    topic = unique("aio-mixed")
    mock_cluster.create_topic(topic, partitions=1)
    bootstrap = mock_cluster.bootstrap_servers
    produce(bootstrap, topic, 300)
    tp = TopicPartition(topic, 0)
    group = unique("g")
    config = base_config(bootstrap, **{"group.id": group, "enable.auto.commit": False})

    async def main() -> None:
        async with AsyncKafkaConsumer(config=config) as consumer:
            consumer.subscribe([topic])
            offsets: list[int] = []
            deadline = time.monotonic() + 60
            turn = 0
            while len(offsets) < 250:
                assert time.monotonic() < deadline
                if turn % 2:  # getmany collects 2000 at a time: batches start with those
                    for recs in (await consumer.getmany(timeout_ms=500, max_records=9)).values():
                        offsets += [r.offset for r in recs]
                else:
                    batches = await consumer.getmany_batches(500, max_records=11)
                    if turn > 1:  # after a getmany: what it collected and did not return
                        assert batches or len(offsets) == 300
                    for batch in batches.values():
                        assert batch.num_rows <= 11
                        offsets += batch.column("offset").to_pylist()
                turn += 1
            assert offsets == list(range(len(offsets)))
            await consumer.commit()
            committed = await consumer.committed({tp})
            assert committed[tp] is not None and committed[tp].offset == len(offsets)
        async with AsyncKafkaConsumer(config=config, value_deserializer=lambda v: v) as refusing:
            refusing.subscribe([topic])
            with pytest.raises(IllegalStateError):
                await refusing.getmany_batches(500)

    asyncio.run(main())


def test_auto_commit_covers_what_getmany_batches_returned(mock_cluster: Any) -> None:
    topic = unique("aio-autocols")
    mock_cluster.create_topic(topic, partitions=2)
    bootstrap = mock_cluster.bootstrap_servers
    produce(bootstrap, topic, 40)
    group = unique("g")
    config = base_config(
        bootstrap,
        **{"group.id": group, "enable.auto.commit": True, "auto.commit.interval.ms": 100},
    )

    async def main() -> None:
        async with AsyncKafkaConsumer(config=config) as consumer:
            consumer.subscribe([topic])
            rows = await _batches_until(consumer, 40)
            ends = {tp: r[-1]["offset"] + 1 for tp, r in rows.items()}
            deadline = time.monotonic() + 30
            while True:
                await consumer.getmany_batches(200)  # auto-commit runs from the calls
                committed = await consumer.committed(set(ends))
                if {tp: c.offset for tp, c in committed.items() if c is not None} == ends:
                    break
                assert time.monotonic() < deadline, committed

    asyncio.run(main())
