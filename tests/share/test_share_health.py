"""``health()`` of both share consumers on a real broker (issue 24): not subscribed before
``subscribe``, in the share group with a member epoch, a coordinator and an assignment once it
polls (live and ready), closed after ``close``. A share group has no poll timer and its broker
holds the positions: no poll-interval verdict, no partitions' lag."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from kafka_actors.health import ConsumerHealth, GroupStatus
from kafka_actors.testing.share import set_share_group_config
from tests.consumer.helpers import produce, unique
from tests.share.helpers import share_api, share_config

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]


def _check_in_group(health: ConsumerHealth, topic: str) -> None:
    assert (health.live, health.ready, health.reasons) == (True, True, ()), health
    assert health.group_status is GroupStatus.IN_GROUP
    assert health.group_protocol == "share" and health.member_state == "STABLE"
    assert health.member_epoch is not None and health.member_epoch > 0
    assert health.generation is None and health.coordinator_known
    assert {tp.topic for tp in health.assignment} == {topic}
    assert health.partitions == ()


def test_share_consumers_health(share_broker: Any) -> None:
    api = share_api()
    topic, group = unique("share-health"), unique("share-health-g")
    share_broker.create_topic(topic, partitions=1)
    set_share_group_config(share_broker, group)
    produce(share_broker.bootstrap_servers, topic, 5)

    consumer = api.KafkaShareConsumer(share_config(share_broker, group))
    try:
        assert consumer.health().group_status is GroupStatus.NOT_SUBSCRIBED
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while not (consumer.health().ready and consumer.health().assignment):
            assert time.monotonic() < deadline, consumer.health()
            consumer.poll(0.2)
        sync_health = consumer.health()
        print("share healthy:", sync_health)
    finally:
        consumer.close(timeout=5)
    _check_in_group(sync_health, topic)
    assert consumer.health().group_status is GroupStatus.CLOSED

    async def run() -> ConsumerHealth:
        async with api.AsyncKafkaShareConsumer(share_config(share_broker, group)) as aio:
            aio.subscribe([topic])
            deadline = time.monotonic() + 60
            while not (aio.health().ready and aio.health().assignment):
                assert time.monotonic() < deadline, aio.health()
                await aio.poll(0.2)
            health: ConsumerHealth = aio.health()
            return health

    _check_in_group(asyncio.run(run()), topic)
