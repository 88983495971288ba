"""Supervision of the consumer's actors: crashed managers are restarted and rebuild their
state; callers get their result or a typed error, never silence."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kafka_actors import KafkaConsumer, TopicPartition
from kafka_actors.actors.events import CommitEvent
from kafka_actors.actors.managers import CollectEvent
from kafka_actors.errors import CommitFailedError, FatalConsumerError, RebalanceInProgressError
from kafka_actors.supervisors import FaultInjector
from tests.consumer.helpers import base_config, poll_until, produce, unique

pytestmark = pytest.mark.broker


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_crashed_managers_restart_and_consumption_continues(
    kafka_broker: Any, protocol: str
) -> None:
    topic = unique(f"crash-{protocol}")
    kafka_broker.create_topic(topic, partitions=2)
    produce(kafka_broker.bootstrap_servers, topic, 40)
    faults = FaultInjector()
    group = unique("g")
    config = base_config(
        kafka_broker.bootstrap_servers, **{"group.id": group, "group.protocol": protocol}
    )
    config["enable.auto.commit"] = False
    with KafkaConsumer(config, faults=faults) as consumer:
        consumer.subscribe([topic])
        first = poll_until(consumer, 40)
        consumer.commit_sync()
        # Crash the fetch actor at its next collect, the commit actor at its next commit, and
        # the membership actor at its next poll event.
        faults.crash("fetch", lambda m: isinstance(m, CollectEvent))
        faults.crash("commit", lambda m: isinstance(m, CommitEvent))
        faults.crash("membership", lambda m: type(m).__name__ == "PollEvent")
        produce(kafka_broker.bootstrap_servers, topic, 20, start=40)
        second = poll_until(consumer, 20, timeout=90)
        committed: dict[Any, Any] = {}
        for _ in range(20):
            try:
                committed = consumer.commit_sync(timeout=60)  # retried past the restart
                break
            except (CommitFailedError, RebalanceInProgressError):
                # Classic: the restarted member rejoined; a commit during the rebalance fails
                # as in Java, and succeeds once the member polled into the new generation.
                consumer.poll(0.5)
        assert sum(om.offset for om in committed.values()) == 60
        assert consumer.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
    values = sorted(r.value or b"" for r in first + second)
    assert values == sorted(f"value-{i}".encode() for i in range(60))


def test_fatal_supervision_error_names_the_cause(kafka_broker: Any) -> None:
    topic = unique("fatal")
    kafka_broker.create_topic(topic, partitions=1)
    faults = FaultInjector()
    with KafkaConsumer(base_config(kafka_broker.bootstrap_servers), faults=faults) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.poll(0.2)
        faults.crash("fetch", times=None)  # every restart crashes again: the tree gives up
        with pytest.raises(FatalConsumerError) as info:
            for _ in range(200):
                consumer.poll(0.2)
        assert "fetch" in str(info.value)
        with pytest.raises(FatalConsumerError):
            consumer.poll(0)


@pytest.mark.parametrize(
    ("protocol", "api", "code"),
    [
        ("consumer", 68, 110),  # ConsumerGroupHeartbeat: FENCED_MEMBER_EPOCH
        ("consumer", 68, 16),  # ConsumerGroupHeartbeat: NOT_COORDINATOR
        ("classic", 12, 16),  # Heartbeat: NOT_COORDINATOR
        ("classic", 12, 27),  # Heartbeat: REBALANCE_IN_PROGRESS
    ],
)
def test_injected_group_errors_recover(
    kafka_broker: Any, protocol: str, api: int, code: int
) -> None:
    """Fencing, coordinator loss and rebalances injected into the heartbeat answers: the member
    recovers, keeps consuming, and no committed progress is lost."""
    from kafka_actors import ConsumerRebalanceListener

    topic = unique(f"inject-{protocol}-{code}")
    kafka_broker.create_topic(topic, partitions=2)
    produce(kafka_broker.bootstrap_servers, topic, 20)
    faults = FaultInjector()
    lost: list[set[TopicPartition]] = []

    class Listener(ConsumerRebalanceListener):
        def on_partitions_lost(self, partitions: set[TopicPartition]) -> Any:
            lost.append(partitions)

    config = base_config(
        kafka_broker.bootstrap_servers,
        **{"group.id": unique("g"), "group.protocol": protocol, "enable.auto.commit": False},
    )
    if protocol == "classic":
        config["heartbeat.interval.ms"] = 300
    with KafkaConsumer(config, faults=faults) as consumer:
        consumer.subscribe([topic], listener=Listener())
        poll_until(consumer, 20)
        consumer.commit_sync()
        faults.error_response(api, code, times=1)
        deadline = time.monotonic() + 60
        while (faults.pending() or (code == 110 and not lost)) and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert not faults.pending(), "the injected error was never consumed"
        # After the fence / coordinator loss / rebalance the member consumes on from the
        # committed offsets.
        produce(kafka_broker.bootstrap_servers, topic, 10, start=20)
        expected = {f"value-{i}".encode() for i in range(20, 30)}
        values: list[bytes] = []
        until = time.monotonic() + 90
        while not expected <= set(values) and time.monotonic() < until:
            values.extend(r.value or b"" for r in consumer.poll(0.5))
        # Nothing below the committed offsets comes back (no committed progress lost) and
        # nothing is missed. Records after the last commit may legitimately come twice when
        # the injected error lands while they are being consumed (an eager classic rebalance
        # revokes everything and resumes from the committed offsets: at-least-once, as Java).
        assert set(values) == expected, sorted(values)
        for _ in range(30):
            try:
                committed = consumer.commit_sync(timeout=30)
                break
            except (CommitFailedError, RebalanceInProgressError):
                consumer.poll(0.3)
        assert sum(om.offset for om in committed.values()) == 30
    if code == 110:
        assert lost, "a fenced member releases its partitions as lost"
