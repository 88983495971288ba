"""AsyncKafkaConsumer commits (``commit()`` without offsets, auto-commit) cover only records
returned to the application: never records the fetch actor collected (moving the fetch
position) that are still on their way to this consumer's buffer.

The window is made deterministic: the deposit of a collect is held back (as a busy loop would
hold it) while another task commits.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from kafka_actors import KafkaConsumer, TopicPartition
from kafka_actors.aio import AsyncKafkaConsumer
from tests.consumer.helpers import base_config, produce, unique

pytestmark = pytest.mark.broker


@pytest.mark.parametrize("how", ["commit", "auto-commit"])
def test_records_in_transit_to_the_buffer_are_not_committed(kafka_broker: Any, how: str) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("aio-transit")
    group = unique("g")
    tp = TopicPartition(topic, 0)
    kafka_broker.create_topic(topic, partitions=1)
    produce(bootstrap, topic, 60, partition=0)
    auto = how == "auto-commit"
    config = base_config(
        bootstrap,
        **{"group.id": group, "enable.auto.commit": auto, "auto.commit.interval.ms": 1},
    )

    def broker_committed() -> int:
        with KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group}) as checker:
            value = checker.committed(tp, timeout=30)[tp]
        return -1 if value is None else value.offset

    async def main() -> None:
        async with AsyncKafkaConsumer(config=config) as consumer:
            consumer.assign([tp])
            # Collects go through the fetch actor (the path with a deposit to wait for).
            consumer._records.collect_now = lambda: False  # type: ignore[method-assign]
            loop = asyncio.get_running_loop()
            held = consumer._records._on_collected

            def deposit_later(*args: Any) -> None:
                loop.call_later(0.5, held, *args)

            consumer._records._on_collected = deposit_later  # type: ignore[method-assign,assignment]
            subs = consumer._ctx.subscriptions
            getter = asyncio.create_task(consumer.getmany(timeout_ms=30_000, max_records=10))
            deadline = time.monotonic() + 30
            while True:  # until the fetch actor collected (moved the position)
                position = subs.position(tp) if subs.is_assigned(tp) else None
                if position is not None and position.offset > 0:
                    break
                assert time.monotonic() < deadline, "the fetch actor never collected"
                await asyncio.sleep(0.01)
            assert not getter.done()  # nothing returned to the application yet
            early: list[int] = []
            if auto:
                # Its auto-commit runs first; then it may take (some of) the records.
                got = await consumer.getmany(timeout_ms=0)
                early = [r.offset for r in got.get(tp, [])]
                committed = await asyncio.to_thread(broker_committed)
            else:
                result = await consumer.commit()
                committed = result[tp].offset if tp in result else -1
            assert committed <= 0, (
                f"committed {committed} while no record was returned to the application "
                f"(the fetch position is {position.offset})"
            )
            consumer._records._on_collected = held  # type: ignore[method-assign]
            batch = await getter
            received = sorted(early + [r.offset for r in batch.get(tp, [])])
            assert received and received[0] == 0
            deadline = time.monotonic() + 60
            while len(received) < 60:
                assert time.monotonic() < deadline, f"only {len(received)} of 60 arrived"
                more = await consumer.getmany(timeout_ms=5_000, max_records=25)
                received.extend(r.offset for r in more.get(tp, []))
            assert received == list(range(60))
            # What was returned is committed (the consumed view follows the hand-out).
            if auto:
                deadline = time.monotonic() + 30
                while await asyncio.to_thread(broker_committed) != 60:
                    assert time.monotonic() < deadline, "auto-commit never covered all"
                    await consumer.getmany(timeout_ms=200)
            else:
                assert (await consumer.commit())[tp].offset == 60

    asyncio.run(main())
