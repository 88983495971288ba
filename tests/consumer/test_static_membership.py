"""Static membership (``group.instance.id``, KIP-345 / KIP-848) against a real broker, both
group protocols: a static member restarted within the session timeout gets its partitions
back and the other member is not rebalanced (its listener is not called, its assignment is
unchanged); ``kafka-consumer-groups --describe --members`` shows the instance id."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kafka_actors import KafkaConsumer
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.structs import ConsumerRebalanceListener
from kafka_actors.testing.broker import KafkaBroker
from tests.consumer.helpers import base_config, poll_all_until, produce, unique

PARTITIONS = 4


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.calls: list[tuple[str, frozenset[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("revoked", frozenset(revoked)))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.calls.append(("assigned", frozenset(assigned)))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.calls.append(("lost", frozenset(lost)))




@pytest.mark.broker
@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_static_member_restart_keeps_partitions_without_rebalance(
    kafka_broker: KafkaBroker, protocol: str
) -> None:
    topic, group = unique("static"), unique("static-g")
    instance = unique("static-a")
    kafka_broker.create_topic(topic, partitions=PARTITIONS)
    for p in range(PARTITIONS):
        produce(kafka_broker.bootstrap_servers, topic, 2, partition=p)
    every = {TopicPartition(topic, p) for p in range(PARTITIONS)}

    def config(**extra: Any) -> dict[str, object]:
        # The session timeout: 45 s, the client's for classic, the broker's
        # (group.consumer.session.timeout.ms) for the consumer protocol.
        session = {"session.timeout.ms": 45_000} if protocol == "classic" else {}
        return base_config(
            kafka_broker.bootstrap_servers,
            **{"group.id": group, "group.protocol": protocol, **session},
            **extra,
        )

    static = KafkaConsumer(config(**{"group.instance.id": instance}))
    other = KafkaConsumer(config())
    static_rec, other_rec = Recorder(), Recorder()
    restarted: KafkaConsumer | None = None
    try:
        static.subscribe([topic], static_rec)
        other.subscribe([topic], other_rec)
        poll_all_until(
            [static, other],
            lambda: (
                static.assignment() | other.assignment() == every
                and bool(static.assignment())
                and bool(other.assignment())
            ),
            "both members assigned",
        )
        # Settle: nothing more changes for a while.
        settled = (frozenset(static.assignment()), frozenset(other.assignment()))
        quiet_until = time.monotonic() + 5
        poll_all_until([static, other], lambda: time.monotonic() > quiet_until, "a quiet period")
        assert (frozenset(static.assignment()), frozenset(other.assignment())) == settled
        static_parts, other_parts = settled
        other_calls = list(other_rec.calls)

        static.close()  # a static member leaves temporarily (no rebalance)
        restarted_rec = Recorder()
        restarted = KafkaConsumer(config(**{"group.instance.id": instance}))
        restarted.subscribe([topic], restarted_rec)
        poll_all_until(
            [restarted, other],
            lambda: frozenset(restarted.assignment()) == static_parts,  # type: ignore[union-attr]
            "the restarted static member's partitions",
        )
        # The other member keeps polling for a while: never rebalanced.
        quiet_until = time.monotonic() + 8
        poll_all_until([restarted, other], lambda: time.monotonic() > quiet_until, "a quiet period")
        assert other_rec.calls == other_calls, other_rec.calls[len(other_calls) :]
        assert frozenset(other.assignment()) == other_parts
        assert frozenset(restarted.assignment()) == static_parts
        assert ("assigned", static_parts) in restarted_rec.calls

        result = kafka_broker.run_tool(
            "kafka-consumer-groups",
            [
                "--bootstrap-server",
                kafka_broker.bootstrap_servers,
                "--describe",
                "--members",
                "--group",
                group,
            ],
        )
        assert result.returncode == 0, result.stderr
        assert instance in result.stdout, result.stdout
        instance_rows = [line for line in result.stdout.splitlines() if instance in line]
        assert len(instance_rows) == 1  # one member holds the instance id
    finally:
        for consumer in (restarted, other, static):
            if consumer is not None:
                consumer.close()
