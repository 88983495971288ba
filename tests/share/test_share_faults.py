"""The share consumer under the supervisors' fault injection, on a real Kafka 4.4 broker:

* the share fetch actor crashes on a ShareFetch response that acquired records: it restarts
  (with backoff) and nothing is lost: the records acquired by the lost response come again
  once their acquisition lock expired (delivery count 2), every record is delivered;
* FENCED_MEMBER_EPOCH on a ShareGroupHeartbeat: the member rejoins at epoch 0 and keeps
  receiving;
* SHARE_SESSION_NOT_FOUND on a ShareFetch: a new share session opens and fetching goes on.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kafka_actors import KafkaShareConsumer
from kafka_actors.actors.network import Response
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.supervisors import FaultInjector
from kafka_actors.testing.share import set_share_group_config
from tests.consumer.helpers import produce, unique

TIMEOUT = 120.0
LOCK_MS = 15_000  # the lowest lock a default broker accepts for a group


def _setup(broker: Any, name: str, count: int) -> tuple[str, str]:
    bootstrap = broker.bootstrap_servers
    topic, group = unique(name), unique(f"{name}-g")
    broker.create_topic(topic, partitions=1)
    set_share_group_config(bootstrap, group, record_lock_duration_ms=LOCK_MS)
    produce(bootstrap, topic, count)
    return topic, group


def _consume_all(
    consumer: KafkaShareConsumer, count: int, seen: list[tuple[int, int]] | None = None
) -> list[tuple[int, int]]:
    """Poll until ``count`` distinct offsets were seen (with those in ``seen``)."""
    seen = [] if seen is None else seen
    end = time.monotonic() + TIMEOUT
    while len({o for o, _ in seen}) < count:
        assert time.monotonic() < end, f"only {len({o for o, _ in seen})} of {count} arrived"
        seen.extend((r.offset, r.delivery_count) for r in consumer.poll(0.5))
    return seen


def _acquired(message: Any) -> bool:
    response = getattr(message, "response", None)
    if not isinstance(message, Response) or int(getattr(response, "__api_key__", -1)) != int(
        ApiKey.SHARE_FETCH
    ):
        return False
    return any(p.acquired_records for t in response.responses for p in t.partitions)


@pytest.mark.broker
@pytest.mark.timeout(300)
def test_a_crashed_share_fetch_actor_restarts_and_loses_nothing(kafka_broker: Any) -> None:
    count = 30
    topic, group = _setup(kafka_broker, "share-crash", count)
    faults = FaultInjector()
    faults.crash("fetch", when=_acquired, times=1)
    config = {
        "bootstrap.servers": kafka_broker.bootstrap_servers,
        "group.id": group,
        "fetch.max.wait.ms": 100,
        "max.poll.records": 10,
    }
    with KafkaShareConsumer(config, faults=faults) as consumer:
        consumer.subscribe([topic])
        seen = _consume_all(consumer, count)
        assert faults.pending() == 0  # the crash happened
    offsets = sorted({o for o, _ in seen})
    assert offsets == list(range(count))
    # The response the actor crashed on acquired records nobody got: they came again after
    # their lock expired, delivered for the second time.
    assert any(d == 2 for _, d in seen), seen
    first = [o for o, d in seen if d == 1]
    assert len(first) == len(set(first))  # no record handed out twice in one delivery


@pytest.mark.broker
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("api", "error"),
    [("ShareGroupHeartbeat", "FENCED_MEMBER_EPOCH"), ("ShareFetch", "SHARE_SESSION_NOT_FOUND")],
)
def test_fenced_member_and_lost_share_session_recover(
    kafka_broker: Any, api: str, error: str
) -> None:
    half = 20
    topic, group = _setup(kafka_broker, "share-fault", half)
    faults = FaultInjector()
    config = {
        "bootstrap.servers": kafka_broker.bootstrap_servers,
        "group.id": group,
        "fetch.max.wait.ms": 100,
        "max.poll.records": 5,
        "share.acquire.mode": "record_limit",
    }
    with KafkaShareConsumer(config, faults=faults) as consumer:
        consumer.subscribe([topic])
        seen = _consume_all(consumer, half)
        faults.error_response(api, error, times=1)
        end = time.monotonic() + TIMEOUT
        while faults.pending():  # until the error was answered (a heartbeat is 5 s away)
            assert time.monotonic() < end, "the injected error was never answered"
            seen.extend((r.offset, r.delivery_count) for r in consumer.poll(0.2))
        # After it: the member (rejoined, or in a new share session) still gets new records.
        produce(kafka_broker.bootstrap_servers, topic, half, start=half)
        _consume_all(consumer, 2 * half, seen)
        assert consumer.metrics()["share-fetch-requests-total"] > 0
    assert sorted({o for o, _ in seen}) == list(range(2 * half))
