"""Our consumer against Kafka 3.9.x brokers.

* The classic protocol end to end on the testkit's 3.9 broker (``kafka_broker_39``): two of
  our members subscribe, poll and commit while records are produced; the second joins and the
  first leaves, so partitions move both ways; every record is consumed, none is consumed again
  by the other member after it was committed, and Kafka 3.9's own ``kafka-consumer-groups``
  shows the members and the committed offsets.
* ``group.protocol=consumer`` against a 3.9 broker as it ships (KIP-848 off:
  ``group.coordinator.rebalance.protocols=classic``, the 3.x default). Such a broker still
  advertises ConsumerGroupHeartbeat but answers it with UNSUPPORTED_VERSION: the consumer does
  not fall back; ``poll()`` raises :class:`UnsupportedVersionError` telling the user to set
  ``group.protocol=classic`` (as Java's consumer fails), which then works on the same broker.
  (tests/consumer/test_peers.py covers the consumer protocol on a 3.9 broker that enables it,
  and a broker whose ApiVersions lack the API.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kafka_actors import KafkaConsumer, TopicPartition
from kafka_actors.errors import UnsupportedVersionError
from kafka_actors.testing import jars
from kafka_actors.testing.broker import KafkaBroker
from tests.consumer.helpers import base_config, poll_until, produce, unique
from tests.interop.members import (
    OurMember,
    Producer,
    cross_member_duplicates_after_commit,
    parse_assignment,
    parse_table,
    wait_until,
)

PARTITIONS = 4
TIMEOUT = 120.0


@pytest.fixture(scope="module")
def kafka_39_classic_only() -> Iterator[KafkaBroker]:
    """A Kafka 3.9 node configured as 3.9 ships: the KIP-848 protocol disabled."""
    config = {"group.coordinator.rebalance.protocols": "classic"}
    with KafkaBroker(kafka_version=jars.default_version_39(), broker_config=config) as broker:
        yield broker


def _split(members: list[OurMember]) -> bool:
    owned = [m.owned() for m in members]
    union: set[int] = set()
    for o in owned:
        if not o or union & o:
            return False
        union |= o
    return union == set(range(PARTITIONS))


@pytest.mark.broker
@pytest.mark.timeout(400)
@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_classic_group_end_to_end_on_kafka_39(kafka_broker_39: Any, assignor: str) -> None:
    broker = kafka_broker_39
    assert broker.jars.version.startswith("3.9")
    bootstrap = broker.bootstrap_servers
    topic = unique("k39-classic")
    group = unique(f"k39-{assignor}")
    broker.create_topic(topic, partitions=PARTITIONS)

    def member(name: str) -> OurMember:
        config = base_config(
            bootstrap,
            **{
                "group.id": group,
                "group.protocol": "classic",
                "partition.assignment.strategy": assignor,
                "enable.auto.commit": False,
                "client.id": f"{name}-{group}",
            },
        )
        return OurMember(name, topic, config)

    producer = Producer(bootstrap, topic)
    producer.produce(500)
    producer.start()
    a = member("a").start()
    started = [a]
    try:
        wait_until(lambda: a.owned() == set(range(PARTITIONS)), TIMEOUT, "a owns everything")
        b = member("b").start()
        started.append(b)
        wait_until(lambda: _split([a, b]), TIMEOUT, lambda: f"a={a.owned()} b={b.owned()}")
        assert not a.errors and not b.errors, (a.errors, b.errors)

        # Kafka 3.9's tool: both members with their client ids, hosts and assignments.
        result = broker.run_tool(
            "kafka-consumer-groups",
            ["--bootstrap-server", bootstrap, "--describe", "--group", group, "--members",
             "--verbose"],
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        rows = {r["CLIENT-ID"]: r for r in parse_table(result.stdout)}
        assert set(rows) == {a.client_id, b.client_id}, result.stdout
        for m in (a, b):
            row = rows[m.client_id]
            assert row["HOST"] == "/127.0.0.1", row
            assert parse_assignment(row["ASSIGNMENT"], topic) == m.owned(), result.stdout

        a.stop()  # leaves: b takes everything over from a's commits
        wait_until(lambda: b.owned() == set(range(PARTITIONS)), TIMEOUT, lambda: f"{b.owned()}")
        producer.stop()

        def consumed() -> set[bytes]:
            return {c.value for log in (a.log, b.log) for c in log.snapshot()[0]}

        wait_until(
            lambda: producer.produced <= consumed(),
            TIMEOUT,
            lambda: f"{len(producer.produced - consumed())} records never consumed",
        )
        problems = cross_member_duplicates_after_commit([a.log, b.log])
        assert not problems, "\n".join(problems[:20])
        for m in (a, b):
            assert m.log.snapshot()[0], f"{m.name} consumed nothing"

        # Everything committed, as Kafka 3.9's tool and our consumer read it.
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        end = b.consumer.end_offsets(tps, timeout=30)
        assert sum(end.values()) == len(producer.produced)
        offsets: list[dict[str, str]] = []

        def all_committed() -> bool:
            nonlocal offsets
            result = broker.run_tool(
                "kafka-consumer-groups",
                ["--bootstrap-server", bootstrap, "--describe", "--group", group],
            )
            assert result.returncode == 0, result.stderr
            offsets = [r for r in parse_table(result.stdout) if r.get("TOPIC") == topic]
            return len(offsets) == PARTITIONS and all(
                r["CURRENT-OFFSET"] == str(end[TopicPartition(topic, int(r["PARTITION"]))])
                and r["CLIENT-ID"] == b.client_id
                for r in offsets
            )

        wait_until(all_committed, TIMEOUT, lambda: f"describe: {offsets}")
        committed = b.consumer.committed(set(tps), timeout=30)
        assert {tp: om.offset if om else None for tp, om in committed.items()} == end
    finally:
        producer.halt()
        for m in started:
            m.stop()
    for m in started:
        assert not m.errors, (m.name, m.errors)


@pytest.mark.broker
@pytest.mark.timeout(300)
def test_consumer_protocol_on_a_default_kafka_39_fails_clearly_then_classic_works(
    kafka_39_classic_only: KafkaBroker,
) -> None:
    broker = kafka_39_classic_only
    bootstrap = broker.bootstrap_servers
    topic = unique("k39-default")
    broker.create_topic(topic, partitions=2)
    produce(bootstrap, topic, 20)
    group = unique("k39-default")

    config = {"group.id": group, "group.protocol": "consumer", "enable.auto.commit": False}
    consumer = KafkaConsumer(base_config(bootstrap, **config))
    with consumer:
        consumer.subscribe([topic])  # accepted: the broker advertises the API
        deadline = time.monotonic() + 60
        with pytest.raises(UnsupportedVersionError) as info:
            while time.monotonic() < deadline:
                assert not consumer.poll(0.5), "records under an unsupported group protocol"
        assert "group.protocol=classic" in str(info.value)
        assert consumer.assignment() == set()
        with pytest.raises(UnsupportedVersionError):
            consumer.poll(0.1)  # the member stays failed: no silent fallback
        with pytest.raises(UnsupportedVersionError):
            consumer.subscribe([topic])  # refused at once now
        consumer.unsubscribe()
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        assert len(poll_until(consumer, 20)) == 20  # manual assignment works on any broker

    # The remedy the error names works on the same broker, in the same group.
    with KafkaConsumer(
        base_config(bootstrap, **{"group.id": group, "group.protocol": "classic"})
    ) as consumer:
        consumer.subscribe([topic])
        assert len(poll_until(consumer, 20)) == 20
        consumer.commit_sync()
        tps = {TopicPartition(topic, 0), TopicPartition(topic, 1)}
        committed = consumer.committed(tps, timeout=30)
        assert sum(om.offset for om in committed.values() if om is not None) == 20
