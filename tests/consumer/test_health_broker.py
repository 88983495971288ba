"""``health()`` against a real broker (issue 24), one dedicated single-node Kafka 4.x (stopped by
the test: the session brokers other tests share are not disturbed). One KIP-848 member walks
through: healthy (in the group, positions and lag, connections up) -> no poll for longer than
a short ``max.poll.interval.ms`` (not live; the member leaves, STALE) -> polling again (back in
the group) -> the broker stopped (live, not ready: no broker connection up). Beside it, an
asyncio consumer (classic protocol) reports healthy, with its generation."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from kafka_actors import AsyncKafkaConsumer, KafkaConsumer, TopicPartition
from kafka_actors.health import ConsumerHealth, GroupStatus
from kafka_actors.testing import KafkaBroker
from tests.consumer.helpers import base_config, health_until, poll_until, produce, unique

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]

MAX_POLL_MS = 3_000




def _asyncio_consumer_health(bootstrap: str, topic: str) -> ConsumerHealth:
    async def run() -> ConsumerHealth:
        config = base_config(bootstrap, **{"group.id": unique("g"), "group.protocol": "classic"})
        async with AsyncKafkaConsumer(config=config) as consumer:
            consumer.subscribe([topic])
            got = 0
            deadline = time.monotonic() + 60
            while got < 20:
                assert time.monotonic() < deadline, consumer.health()
                batches = await consumer.getmany(timeout_ms=500)
                got += sum(len(records) for records in batches.values())
            health = consumer.health()
            assert consumer.current_lag(TopicPartition(topic, 0)) == 0
            return health

    return asyncio.run(run())


def test_health_healthy_poll_interval_exceeded_broker_down() -> None:
    with KafkaBroker() as broker:
        topic = unique("health")
        broker.create_topic(topic, partitions=2)
        produce(broker.bootstrap_servers, topic, 20, partition=0)
        config = base_config(
            broker.bootstrap_servers,
            **{
                "group.id": unique("g"),
                "group.protocol": "consumer",
                "max.poll.interval.ms": MAX_POLL_MS,
                "reconnect.backoff.max.ms": 500,
            },
        )
        consumer = KafkaConsumer(config)
        try:
            assert consumer.health().group_status is GroupStatus.NOT_SUBSCRIBED
            consumer.subscribe([topic])
            poll_until(consumer, 20)
            healthy = health_until(consumer, lambda h: h.ready and len(h.partitions) == 2)
            assert healthy.group_status is GroupStatus.IN_GROUP
            assert healthy.member_epoch is not None and healthy.member_epoch > 0
            assert healthy.coordinator_id == 1
            by_tp = {p.partition: p for p in healthy.partitions}
            assert by_tp[TopicPartition(topic, 0)].position == 20
            assert by_tp[TopicPartition(topic, 0)].lag == 0
            assert consumer.current_lag(TopicPartition(topic, 0)) == 0
            assert healthy.last_heartbeat_age_ms is not None
            assert {c.kind for c in healthy.connections if c.up} >= {"broker", "coordinator"}
            print("healthy:", healthy)

            # No poll for longer than max.poll.interval.ms: not live; the member leaves.
            stuck = health_until(
                consumer, lambda h: h.group_status is GroupStatus.POLL_INTERVAL_EXCEEDED, poll=False
            )
            assert (stuck.live, stuck.ready) == (False, False)
            assert stuck.reasons[0].startswith("poll interval exceeded")
            print("poll interval exceeded:", stuck)
            left = health_until(consumer, lambda h: h.member_state == "STALE", poll=False)
            assert not left.live
            # Polling again: back in the group.
            health_until(consumer, lambda h: h.ready and bool(h.assignment))

            # The broker stops: live (a restart would not help), not ready.
            broker.stop_broker(0)
            down = health_until(consumer, lambda h: h.connections_up == 0)
            assert (down.live, down.ready) == (True, False)
            assert any(r.startswith("no broker connection up") for r in down.reasons), down
            assert {c.state for c in down.connections} <= {"down", "connecting"}
            print("broker down:", down)
        finally:
            consumer.close(timeout=2)
        assert consumer.health().group_status is GroupStatus.CLOSED


def test_asyncio_consumer_health_on_a_real_broker(kafka_broker: Any) -> None:
    topic = unique("health-aio")
    kafka_broker.create_topic(topic, partitions=1)
    produce(kafka_broker.bootstrap_servers, topic, 20)
    health = _asyncio_consumer_health(kafka_broker.bootstrap_servers, topic)
    assert (health.live, health.ready, health.reasons) == (True, True, ())
    assert health.group_protocol == "classic"
    assert health.generation is not None and health.generation >= 1
    assert health.member_epoch is None
    assert health.partitions[0].position == 20 and health.partitions[0].lag == 0
    print("asyncio healthy:", health)
