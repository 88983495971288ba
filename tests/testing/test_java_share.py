"""The testkit's Java share consumer (a small program on the broker's own kafka-clients,
compiled once) and the share tools' aliases, checked against Kafka 4.4 with confluent-kafka's
ShareConsumer as the other member of the group."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from kafka_actors.testing import KafkaBroker
from kafka_actors.testing.broker import TOOL_ALIASES, _classes_of
from kafka_actors.testing.java_share import (
    HARNESS_CLASS,
    JavaShareConsumer,
    compile_share_harness,
)
from tests.share.helpers import produce, trickle

N = 2000


def test_share_tool_aliases_name_classes_of_the_tools_jar(share_broker: KafkaBroker) -> None:
    tools, _ = _classes_of(share_broker.jars)
    for alias in (
        "kafka-console-share-consumer",
        "kafka-share-consumer-perf-test",
        "kafka-verifiable-share-consumer",
        "kafka-share-groups",
    ):
        assert any(c in tools for c in TOOL_ALIASES[alias]), alias


def test_the_harness_is_compiled_once(share_broker: KafkaBroker) -> None:
    first = compile_share_harness(share_broker.jars)
    compiled = first / f"{HARNESS_CLASS}.class"
    stamp = compiled.stat().st_mtime_ns
    assert compile_share_harness(share_broker.jars) == first
    assert compiled.stat().st_mtime_ns == stamp


@pytest.mark.broker
def test_java_and_confluent_share_consumers_split_a_topic(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    """Both members get records, every record is ACCEPTed by exactly one of them."""
    from confluent_kafka import AcknowledgeType, ShareConsumer

    topic = kafka_topic(share_broker)
    group = share_group()
    java = JavaShareConsumer(share_broker, topic, group, config={"max.poll.records": 50})
    java.start()
    peer = ShareConsumer(
        {
            "bootstrap.servers": share_broker.bootstrap_servers,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "log_level": 0,
        }
    )
    try:
        peer.subscribe([topic])
        ours: list[int] = []
        with trickle(share_broker.bootstrap_servers, topic, N):
            deadline = time.monotonic() + 120
            while len(ours) + len(java.records) < N and time.monotonic() < deadline:
                for m in peer.poll(0.5):
                    if m.error() is None:
                        assert m.delivery_count() == 1
                        ours.append(m.offset())
                        peer.acknowledge(m, AcknowledgeType.ACCEPT)
                peer.commit_sync(30)
    finally:
        peer.close()
        code = java.stop()
    assert code == 0, java.stderr_tail()
    theirs = [r.offset for r in java.records]
    assert len(set(theirs)) == len(theirs) and len(set(ours)) == len(ours)
    assert not set(ours) & set(theirs), "a record was delivered to both"
    assert set(ours) | set(theirs) == set(range(N))
    assert ours and theirs, f"no split: confluent {len(ours)}, java {len(theirs)}"
    assert all(r.delivery_count == 1 and r.topic == topic for r in java.records)
    assert java.commits and all(result == "OK" for _, _, result in java.commits)
    assert java.done == len(theirs)


@pytest.mark.broker
def test_java_release_mode_gives_records_back(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    """A Java member that RELEASEs what it gets: the records come back to it with the
    delivery count one higher, until the group's limit (2) archives them."""
    topic = kafka_topic(share_broker)
    group = share_group(delivery_count_limit=2)
    produce(share_broker.bootstrap_servers, topic, 5)
    with JavaShareConsumer(share_broker, topic, group, ack="release") as java:
        assert java.wait_for(10, 60), java.stderr_tail()
        time.sleep(2.0)  # would a third delivery come?
    counts: dict[int, list[int | None]] = {}
    for r in java.records:
        counts.setdefault(r.offset, []).append(r.delivery_count)
    assert counts == {i: [1, 2] for i in range(5)}


@pytest.mark.broker
def test_console_share_consumer_reads_the_group(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    topic = kafka_topic(share_broker)
    group = share_group()
    produce(share_broker.bootstrap_servers, topic, 10)
    done = share_broker.run_tool(
        "kafka-console-share-consumer",
        [
            "--bootstrap-server",
            share_broker.bootstrap_servers,
            "--topic",
            topic,
            "--group",
            group,
            "--max-messages",
            "10",
            "--timeout-ms",
            "60000",
            "--formatter-property",
            "print.offset=true",
        ],
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    offsets = sorted(
        int(line.split("Offset:")[1].split()[0])
        for line in done.stdout.splitlines()
        if "Offset:" in line
    )
    assert offsets == list(range(10)), done.stdout[-3000:]


@pytest.mark.broker
def test_a_killed_java_member_holding_records_gives_them_up_after_the_lock(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    """``ack="hold"`` acquires a batch and never acknowledges it; ``kill()`` SIGKILLs the
    JVM; the records reach confluent-kafka's member after the group's 2 s lock, count 2."""
    from confluent_kafka import AcknowledgeType, ShareConsumer

    topic = kafka_topic(share_broker)
    group = share_group(record_lock_duration_ms=2000)
    produce(share_broker.bootstrap_servers, topic, 10)
    java = JavaShareConsumer(share_broker, topic, group, ack="hold")
    java.start()
    try:
        assert java.wait_holding(60), java.stderr_tail()
        held = {r.offset for r in java.records}
        assert held and java.commits == []
    finally:
        java.kill()
    assert java.process is not None and java.process.returncode == -9
    peer = ShareConsumer(
        {
            "bootstrap.servers": share_broker.bootstrap_servers,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "log_level": 0,
        }
    )
    counts: dict[int, int] = {}
    try:
        peer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(counts) < 10 and time.monotonic() < deadline:
            for m in peer.poll(0.5):
                if m.error() is None:
                    counts[m.offset()] = m.delivery_count()
                    peer.acknowledge(m, AcknowledgeType.ACCEPT)
        peer.commit_sync(30)
    finally:
        peer.close()
    assert sorted(counts) == list(range(10))
    assert all(counts[o] == 2 for o in held), counts
