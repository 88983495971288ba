"""Show 2 (issue #13): what each acknowledgement type does, on a real Kafka 4.4 broker.

* RELEASE: the record is delivered again, its delivery count one higher;
* REJECT: the record is never delivered again (to this member or another);
* RELEASE until the group's delivery attempt limit (``share.delivery.count.limit``): the
  record is archived and never delivered again;
* RENEW (KIP-1222): a slow record's acquisition lock is extended, so no other member gets it
  while its holder keeps renewing. It needs ShareFetch/ShareAcknowledge v2: the Kafka 4.4.0
  broker answers v1-2 (checked by the lead's ApiVersions and in its kafka-clients schema,
  "Version 2 introduces Renew acknowledgements (KIP-1222)"; the 4.3.1 schema has v2 too);
  Kafka 3.9.2 has no share-group APIs at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from kafka_actors.testing import KafkaBroker
from tests.share.helpers import (
    first_batch,
    poll_for,
    produce,
    share_api,
    share_config,
)

N = 5


def _explicit(ka: Any, broker: KafkaBroker, group: str, topic: str) -> Any:
    consumer = ka.KafkaShareConsumer(
        share_config(broker, group, share_acknowledgement_mode="explicit")
    )
    consumer.subscribe([topic])
    return consumer


@pytest.mark.broker
def test_release_delivers_again_with_delivery_count_plus_one(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    ka = share_api()
    topic, group = kafka_topic(share_broker), share_group()
    produce(share_broker.bootstrap_servers, topic, N)
    deliveries: dict[int, list[int]] = {}
    values: dict[int, list[bytes]] = {}
    with _explicit(ka, share_broker, group, topic) as consumer:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not (
            len(deliveries) == N and all(len(c) == 2 for c in deliveries.values())
        ):
            for r in consumer.poll(0.5):
                deliveries.setdefault(r.offset, []).append(r.delivery_count)
                values.setdefault(r.offset, []).append(r.value)
                # The first delivery is released, the second accepted.
                first = len(deliveries[r.offset]) == 1
                consumer.acknowledge(
                    r, ka.AcknowledgeType.RELEASE if first else ka.AcknowledgeType.ACCEPT
                )
        consumer.commit_sync(30.0)
        assert deliveries == {i: [1, 2] for i in range(N)}
        assert all(v[0] == v[1] for v in values.values())
        assert poll_for(consumer, 3.0, ack=ka.AcknowledgeType.ACCEPT) == []


@pytest.mark.broker
def test_reject_is_never_delivered_again(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    ka = share_api()
    topic = kafka_topic(share_broker)
    group = share_group(record_lock_duration_ms=1000)  # an expired lock would show quickly
    produce(share_broker.bootstrap_servers, topic, N)
    rejected: set[int] = set()
    with _explicit(ka, share_broker, group, topic) as consumer:
        while len(rejected) < N:
            for r in first_batch(consumer):
                consumer.acknowledge(r, ka.AcknowledgeType.REJECT)
                rejected.add(r.offset)
        result = consumer.commit_sync(30.0)
        assert result and all(error is None for error in result.values()), result
        # Neither this member nor a new one gets a rejected record, lock or no lock.
        with _explicit(ka, share_broker, group, topic) as other:
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                for c in (consumer, other):
                    for r in c.poll(0.25):
                        pytest.fail(f"rejected offset {r.offset} delivered again")
    assert rejected == set(range(N))


@pytest.mark.broker
def test_released_until_the_delivery_limit_is_archived(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    ka = share_api()
    topic = kafka_topic(share_broker)
    limit = 3
    group = share_group(delivery_count_limit=limit)
    produce(share_broker.bootstrap_servers, topic, 1)
    counts: list[int] = []
    with _explicit(ka, share_broker, group, topic) as consumer:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(counts) < limit:
            for r in consumer.poll(0.5):
                assert r.offset == 0
                counts.append(r.delivery_count)
                consumer.acknowledge(r, ka.AcknowledgeType.RELEASE)
            consumer.commit_sync(30.0)
        assert counts == [1, 2, 3]
        # Released at the limit: archived. It never comes back.
        assert poll_for(consumer, 4.0, ack=ka.AcknowledgeType.RELEASE) == []
    with _explicit(ka, share_broker, group, topic) as other:
        assert poll_for(other, 3.0, ack=ka.AcknowledgeType.ACCEPT) == []


@pytest.mark.broker
def test_renew_extends_the_lock_of_a_slow_record(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    """The group's lock is 4 s; the holder renews its record every 0.5 s for 12 s (three
    locks; the slack is for a loaded machine), and the other member (polling all along) does
    not get it; after the holder ACCEPTs, nobody does. (Without RENEW the other member gets
    it after the lock: see Show 3 and tests/testing/test_share.py.)"""
    ka = share_api()
    topic = kafka_topic(share_broker)
    group = share_group(record_lock_duration_ms=4000)
    produce(share_broker.bootstrap_servers, topic, 1)
    with _explicit(ka, share_broker, group, topic) as holder:
        (record,) = first_batch(holder)
        with _explicit(ka, share_broker, group, topic) as other:
            t_end = time.monotonic() + 12.0
            next_renew = 0.0
            while time.monotonic() < t_end:
                if time.monotonic() >= next_renew:
                    holder.acknowledge(record, ka.AcknowledgeType.RENEW)
                    result = holder.commit_sync(10.0)
                    assert all(error is None for error in result.values()), result
                    next_renew = time.monotonic() + 0.5
                for r in other.poll(0.2):
                    pytest.fail(
                        f"offset {r.offset} (delivery {r.delivery_count}) reached "
                        "the other member while its lock was being renewed"
                    )
            holder.acknowledge(record, ka.AcknowledgeType.ACCEPT)
            result = holder.commit_sync(10.0)
            assert all(error is None for error in result.values()), result
            assert poll_for(other, 3.0, ack=ka.AcknowledgeType.ACCEPT) == []
