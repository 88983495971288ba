"""The pykka bridge against a real broker (KRaft): a member joins, the first member's pykka
actor commits what it processed through its bridge inside the revocation, then acknowledges;
nothing is lost, nothing is processed twice, and the next owner starts exactly where the
commit left each partition (the commit was in place before the revocation completed)."""

from __future__ import annotations

from typing import Any

import pykka
import pytest

from kafka_actors import KafkaConsumer
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.pykka import Close, Closed, CommitOk, KafkaBridge, call
from tests.consumer.helpers import base_config, produce, unique
from tests.pykka.actors import Log, RecordingSubscriber, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]


def member(
    actors: list[pykka.ActorRef[Any]], bootstrap: str, group: str, topic: str
) -> tuple[pykka.ActorRef[Any], Log]:
    config = base_config(
        bootstrap, **{"group.id": group, "enable.auto.commit": False, "max.poll.records": 200}
    )
    bridge = KafkaBridge.start(config)
    actors.append(bridge)
    log = Log()
    subscriber = RecordingSubscriber.start(bridge, log)
    actors.append(subscriber)
    subscriber.proxy().subscribe([topic]).get(timeout=10)
    return bridge, log


def events_of(log: Log, kind: str) -> list[tuple[Any, ...]]:
    return [e for e in log.snapshot()[1] if e[0] == kind]


def test_revocation_answered_after_committing_through_the_bridge(
    kafka_broker: Any, actors: list[pykka.ActorRef[Any]]
) -> None:
    topic = unique("pykka-seed")
    kafka_broker.create_topic(topic, partitions=4)
    bootstrap = kafka_broker.bootstrap_servers
    produce(bootstrap, topic, 2000, key=lambda i: f"k{i % 31}".encode())
    group = unique("g")

    bridge_a, log_a = member(actors, bootstrap, group, topic)
    wait_for(lambda: len(log_a.snapshot()[0]) >= 2000, "A consumed the first 2000", 120)
    # No commit so far (auto-commit off): only the revocation's commit can move the group.
    bridge_b, log_b = member(actors, bootstrap, group, topic)

    def revoked_then_acked() -> bool:
        revoked = [e for e in events_of(log_a, "revoked") if e[1]]
        return bool(revoked) and ("ack", revoked[0][2]) in log_a.snapshot()[1]

    wait_for(revoked_then_acked, "A's revocation, committed and acknowledged", 120)
    wait_for(lambda: any(e[1] for e in events_of(log_b, "assigned")), "B's assignment", 120)
    records_a, events_a = log_a.snapshot()
    _, revoked, rid = next(e for e in events_a if e[0] == "revoked" and e[1])
    # On A's actor: the revocation, then the commit's reply (a CommitOk), then the ack.
    at = events_a.index(("revoked", revoked, rid))
    assert events_a[at + 1][0] == "commit" and events_a[at + 2] == ("ack", rid), events_a
    commit = events_a[at + 1][1]
    assert isinstance(commit, CommitOk), commit
    processed: dict[TopicPartition, int] = {}
    for r in records_a:
        tp = TopicPartition(r.topic, r.partition)
        if tp in revoked:
            processed[tp] = r.offset + 1
    assert {tp: om.offset for tp, om in commit.offsets.items()} == processed
    # The revocation completed (B was given the partitions) only after A's ack.
    assigned_b = next(e for e in events_of(log_b, "assigned") if e[1])
    assert revoked <= assigned_b[1]
    assert log_a.time_of("ack", rid) <= log_b.time_of(*assigned_b)

    produce(bootstrap, topic, 2000, start=2000, key=lambda i: f"k{i % 31}".encode())

    def unique_records() -> int:
        both = log_a.snapshot()[0] + log_b.snapshot()[0]
        return len({(r.partition, r.offset) for r in both})

    wait_for(lambda: unique_records() >= 4000, "all 4000 records", 120)
    for bridge in (bridge_a, bridge_b):
        assert isinstance(call(bridge, Close(20.0), timeout=60), Closed)

    records_a, events_a = log_a.snapshot()
    records_b, _ = log_b.snapshot()
    keys = [(r.partition, r.offset) for r in records_a + records_b]
    assert len(keys) == len(set(keys)) == 4000, "records processed twice or missed"
    # B started each moved partition exactly where A's revocation commit left it.
    for tp in revoked:
        first = min(r.offset for r in records_b if r.partition == tp.partition)
        assert first == processed.get(tp, 0)
    # Every commit reply either member got was a CommitOk; the group's committed offsets
    # are the end of the topic (each member committed on its last revocation).
    for log in (log_a, log_b):
        assert all(isinstance(e[1], CommitOk) for e in events_of(log, "commit"))
    checker = KafkaConsumer(base_config(bootstrap, **{"group.id": group}))
    try:
        parts = {TopicPartition(topic, p) for p in range(4)}
        committed = checker.committed(parts, timeout=30)
        ends = checker.end_offsets(parts)
    finally:
        checker.close(timeout=5)
    assert {tp: (om.offset if om else None) for tp, om in committed.items()} == ends
