"""Issue 20 on the embedded mock cluster, counted client-side (a fault injector sees every
response the consumer receives):

* ``assign()`` of a partition of a topic that does not exist, with a group.id and auto-creation
  off, then ``poll()``: the committed-offset lookups (OffsetFetch, answered
  UNKNOWN_TOPIC_OR_PARTITION) follow Java's request-state schedule (retry.backoff.ms doubling
  to retry.backoff.max.ms) instead of one per poll-loop turn (the old code: ~800 a second).
* A KIP-848 member whose heartbeats are answered COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR:
  the heartbeats follow the same schedule (the old code: about 4 a second here, flat)."""

from __future__ import annotations

import time

import pytest

from kafka_actors import KafkaConsumer
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.supervisors import FaultInjector
from kafka_actors.testing.mock import MockCluster

pytestmark = pytest.mark.mock


class _Counting(FaultInjector):
    """Injects nothing; counts the responses of each API the consumer received."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[int, int] = {}

    def on_response(self, api_key: int, node: int | None = None) -> None:
        self.counts[api_key] = self.counts.get(api_key, 0) + 1


def _java_schedule_max(window_ms: float, initial: int = 100, maximum: int = 1_000) -> int:
    """The most requests the schedule allows in ``window_ms``: the first at once, then waits of
    at least 80% (jitter 0.2) of ``initial`` doubling to ``maximum``."""
    count, elapsed, attempt = 1, 0.0, 0
    while True:
        elapsed += 0.8 * min(initial * 2**attempt, maximum)
        if elapsed > window_ms:
            return count
        count += 1
        attempt += 1


def test_assign_of_a_missing_topic_paces_the_offset_fetches() -> None:
    with MockCluster(1) as cluster:
        faults = _Counting()
        start = time.monotonic()
        consumer = KafkaConsumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": "pacing",
                "allow.auto.create.topics": False,
            },
            faults=faults,
        )
        try:
            consumer.assign([TopicPartition("no-such-topic", 0)])
            end = time.monotonic() + 3.0
            while time.monotonic() < end:
                assert not consumer.poll(0.2)
            window_ms = (time.monotonic() - start) * 1000
            sent = faults.counts.get(ApiKey.OFFSET_FETCH, 0)
        finally:
            consumer.close()
    assert sent >= 2, faults.counts  # it does retry
    # Margin: one more than the schedule allows over the whole life of the consumer.
    assert sent <= _java_schedule_max(window_ms) + 1, (sent, window_ms, faults.counts)


@pytest.mark.parametrize("code", [15, 16])  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
def test_heartbeats_answered_by_coordinator_errors_back_off(code: int) -> None:
    with MockCluster(1) as cluster:
        cluster.create_topic("t", 1)
        faults = _Counting()
        consumer = KafkaConsumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": f"hb-{code}",
                "group.protocol": "consumer",
            },
            faults=faults,
        )
        try:
            consumer.subscribe(["t"])
            deadline = time.monotonic() + 30
            while not consumer.assignment() and time.monotonic() < deadline:
                consumer.poll(0.1)
            assert consumer.assignment()
            cluster.push_request_errors(ApiKey.CONSUMER_GROUP_HEARTBEAT, [code] * 200)
            faults.counts.clear()
            start = time.monotonic()
            while time.monotonic() < start + 4.0:
                consumer.poll(0.2)
            window_ms = (time.monotonic() - start) * 1000
            sent = faults.counts.get(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0)
        finally:
            consumer.close(timeout=1)
    assert sent >= 2, faults.counts
    assert sent <= _java_schedule_max(window_ms) + 1, (sent, window_ms, faults.counts)
