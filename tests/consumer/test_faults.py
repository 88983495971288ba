"""Supervision of the consumer's actors: crashed managers are restarted and rebuild their
state; callers get their result or a typed error, never silence."""

from __future__ import annotations

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
