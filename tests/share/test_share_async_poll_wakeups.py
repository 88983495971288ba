"""The asyncio share consumer's poll asks the share fetch actor for records when some may have
arrived (the fetch generation moved) or a little while passed, not at every wake-up of the
loop: an idle poll makes a bounded number of collects (before, each collect's completion
woke the loop, which collected again at once, for the whole timeout), and records produced
while it waits are still handed out."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kafka_actors.actors.managers.share_fetch import ShareCollectEvent
from kafka_actors.testing.share import set_share_group_config
from tests.consumer.helpers import produce, unique
from tests.share.helpers import share_config

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]


def test_an_idle_async_poll_collects_a_bounded_number_of_times(share_broker: Any) -> None:
    from kafka_actors import AsyncKafkaShareConsumer

    topic, group = unique("share-aio-idle"), unique("share-aio-idle-g")
    share_broker.create_topic(topic, partitions=1)
    set_share_group_config(share_broker, group)

    async def run() -> tuple[int, list[Any]]:
        consumer = AsyncKafkaShareConsumer(share_config(share_broker, group))
        collects = 0
        tell = consumer._core.ctx.tell

        def counting(name: str, message: Any) -> bool:
            nonlocal collects
            if isinstance(message, ShareCollectEvent):
                collects += 1
            return bool(tell(name, message))

        consumer._core.ctx.tell = counting  # type: ignore[method-assign]
        async with consumer:
            consumer.subscribe([topic])
            # In the group, its share session open, nothing to fetch.
            while not consumer._core.assignment.partitions:
                assert len(await consumer.poll(0.2)) == 0
            await consumer.poll(1.0)
            collects = 0
            assert len(await consumer.poll(2.0)) == 0
            idle = collects
            # Records produced while a poll waits are handed out by it.
            waiting = asyncio.ensure_future(consumer.poll(30.0))
            await asyncio.sleep(0.3)
            await asyncio.to_thread(produce, share_broker.bootstrap_servers, topic, 3)
            got = list(await waiting)
            while len(got) < 3:
                got.extend(await consumer.poll(5.0))
        return idle, got

    idle, got = asyncio.run(run())
    # One every 0.1 s at most, and a few more for wake-ups with news: never a loop.
    assert idle <= 40, idle
    assert sorted(r.offset for r in got) == [0, 1, 2]
