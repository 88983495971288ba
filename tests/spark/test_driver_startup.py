"""The driver-side group member is ready without waiting for fixed delays (a real 4.4.0 broker,
no Spark): the group joined, the partitions assigned and their starting offsets known while
the polling thread's first ``poll()`` is still waiting, with the consumer's periodic re-sending
of poll events switched off (a member that joins only on such a re-send, or on a second poll,
or after a retry of a lookup made at creation, never gets ready here). Counts and event order
only: no bound on how long it takes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import kafka_actors.core.poll as poll_module
from kafka_actors import KafkaConsumer
from kafka_actors.spark import coordinator as coordinator_module
from kafka_actors.spark.coordinator import GroupMember
from kafka_actors.spark.options import SourceOptions
from kafka_actors.testing import capture_logs
from tests.spark.helpers import produce, unique

pytestmark = pytest.mark.broker

PARTITIONS = 4


class _CountingConsumer(KafkaConsumer):
    """Counts the polling thread's poll() calls."""

    polls = 0

    def poll(self, timeout: float = 0.0) -> Any:
        self.polls += 1
        return super().poll(timeout)


@pytest.fixture
def no_fixed_delays(monkeypatch: pytest.MonkeyPatch) -> None:
    # a waiting poll would re-send its poll event every 100 ms, and the polling thread polls
    # again every 0.5 s: both far beyond this test, so only the first poll's event counts
    monkeypatch.setattr(poll_module, "POLL_EVENT_INTERVAL_S", 3600.0)
    monkeypatch.setattr(coordinator_module, "_POLL_TIMEOUT_S", 3600.0)


@pytest.mark.parametrize("available_now", [False, True], ids=["initial", "available-now"])
def test_the_member_is_ready_within_its_first_poll(
    kafka_broker: Any,
    kafka_topic: Callable[..., str],
    no_fixed_delays: None,
    available_now: bool,
) -> None:
    topic = kafka_topic(kafka_broker, partitions=PARTITIONS)
    produce(kafka_broker.bootstrap_servers, topic, 8, partitions=PARTITIONS)
    options = SourceOptions.parse(
        {
            "kafka.bootstrap.servers": kafka_broker.bootstrap_servers,
            "kafka.group.id": unique("startup"),
            "subscribe": topic,
            "startingOffsets": "earliest",
            # a member that does not get ready would plan without partitions after this
            "groupAssignmentTimeoutMs": "20000",
        }
    )
    with capture_logs() as logs:
        consumer = _CountingConsumer(options.consumer_config())
        member = GroupMember(options, consumer=consumer)
        try:
            if available_now:
                # Spark's first call under Trigger.AvailableNow: lookups right after creation
                member.prepare_available_now()
            offsets = member.initial_offsets()
            polls = consumer.polls
        finally:
            member.stop()
    assert offsets == {topic: {str(p): 0 for p in range(PARTITIONS)}}
    assert polls == 1, "the member needed another poll to get ready"
    events = [e["event"] for e in logs]
    ready = [e for e in logs if e["event"] == "group_member_ready"]
    assert len(ready) == 1 and ready[0]["partitions"] == PARTITIONS
    # joined, assigned (the listener ran on the first poll), then ready
    assert events.index("member_state_transition") < events.index("group_member_ready")
    assert not any(e["event"] == "poll_failed_retrying" for e in logs)
