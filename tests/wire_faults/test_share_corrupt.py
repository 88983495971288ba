"""The share consumer against a broker whose ShareGroupHeartbeat / ShareFetch /
ShareAcknowledge answers are mutated on the wire (the FaultProxy of this package in front of a
real 4.4 broker, the consumer in this process).

Every case asserts: poll / commit_sync raise only kafka_actors' typed errors (KafkaError), the
consumer goes on, every produced record is handed out (counted by offset), a record is handed
out again only as a new delivery (a higher delivery count: its earlier delivery was lost with
the answer, the broker redelivers it after the acquisition lock), and close() returns. A
silent broker (no answer) is the request timeout, then a retry.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kafka_actors import KafkaShareConsumer
from kafka_actors.errors import KafkaError
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.testing.share import set_share_group_config
from tests.consumer.helpers import produce, unique
from tests.wire_faults.proxy import FaultProxy

pytestmark = pytest.mark.broker

COUNT = 40
TIMEOUT = 150.0

CASES = [
    (ApiKey.SHARE_FETCH, "garbage", 2),
    (ApiKey.SHARE_FETCH, "truncate", 2),
    (ApiKey.SHARE_FETCH, "huge_first_count", 2),
    (ApiKey.SHARE_FETCH, "silence", 1),
    (ApiKey.SHARE_GROUP_HEARTBEAT, "garbage", 2),
    (ApiKey.SHARE_GROUP_HEARTBEAT, "truncate", 1),
    (ApiKey.SHARE_GROUP_HEARTBEAT, "huge_first_count", 1),
    (ApiKey.SHARE_GROUP_HEARTBEAT, "silence", 1),
    (ApiKey.SHARE_ACKNOWLEDGE, "truncate", 1),
    (ApiKey.SHARE_ACKNOWLEDGE, "huge", 1),
    (ApiKey.SHARE_ACKNOWLEDGE, "garbage", 2),
    (ApiKey.SHARE_ACKNOWLEDGE, "silence", 1),
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("api", "mutation", "count"), CASES, ids=lambda v: v.name if isinstance(v, ApiKey) else str(v)
)
def test_share_consumer_survives_mutated_answers(
    kafka_broker: Any, api: ApiKey, mutation: str, count: int
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic, group = unique("share-wire"), unique("share-wire-g")
    kafka_broker.create_topic(topic, partitions=2)
    set_share_group_config(bootstrap, group, record_lock_duration_ms=15_000)
    produce(bootstrap, topic, COUNT)
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    delivered: dict[tuple[int, int], list[int]] = {}
    errors: list[KafkaError] = []
    with FaultProxy((host, int(port))) as proxy:
        proxy.arm(int(api), mutation, count)
        consumer = KafkaShareConsumer(
            {
                "bootstrap.servers": proxy.address,
                "group.id": group,
                "fetch.max.wait.ms": 200,
                "request.timeout.ms": 6_000,
                "max.poll.records": 10,
            }
        )
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + TIMEOUT
            polls = 0
            while time.monotonic() < deadline and len(delivered) < COUNT:
                polls += 1
                try:
                    for r in consumer.poll(0.5):
                        delivered.setdefault((r.partition, r.offset), []).append(r.delivery_count)
                    if polls % 3 == 0:  # acknowledgements on their own (ShareAcknowledge)
                        consumer.commit_sync(timeout=20.0)
                except KafkaError as exc:
                    errors.append(exc)
            applied = list(proxy.applied)
        finally:
            consumer.close(timeout=20.0)
    assert applied, f"the proxy mutated no {api.name} answer"
    missing = COUNT - len(delivered)
    assert missing == 0, f"{missing} records never handed out; errors: {errors!r}"
    for key, counts in delivered.items():
        assert counts == sorted(set(counts)), (key, counts)
