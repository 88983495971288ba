"""The pykka bridge on the embedded mock cluster: demand, back-pressure, batch delivery, the
in-flight window, failures of the subscriber, typed errors, commits through the bridge."""

from __future__ import annotations

import collections
import time
from typing import Any

import pykka
import pytest

from kafka_actors import KafkaConsumer
from kafka_actors.errors import ConfigError
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord
from kafka_actors.pykka import (
    Assign,
    BatchFailed,
    BatchRejected,
    BridgeStats,
    Close,
    Closed,
    Commit,
    CommitFailed,
    CommitOk,
    ErrorInfo,
    GetStats,
    Handled,
    KafkaBridge,
    Request,
    StreamError,
    Subscribed,
    call,
)
from tests.consumer.helpers import base_config, produce
from tests.pykka.actors import Inbox, Log, Probe, RecordingSubscriber, wait_for

pytestmark = [pytest.mark.mock, pytest.mark.timeout(180)]

RECORDS = 400


def start_bridge(
    actors: list[pykka.ActorRef[Any]],
    bootstrap: str,
    config: dict[str, object] | None = None,
    **settings: Any,
) -> pykka.ActorRef[Any]:
    full = base_config(
        bootstrap, **{"max.poll.records": 50, "enable.auto.commit": False, **(config or {})}
    )
    ref = KafkaBridge.start(full, **settings)
    actors.append(ref)
    return ref


def topic_and_bridge(
    mock_cluster: Any,
    kafka_topic: Any,
    actors: list[pykka.ActorRef[Any]],
    partitions: int,
    *,
    group: bool = False,
    **settings: Any,
) -> tuple[str, pykka.ActorRef[Any]]:
    """A topic holding RECORDS records and a bridge (in the group ``g-<topic>`` if asked)."""
    topic = kafka_topic(mock_cluster, partitions=partitions)
    produce(mock_cluster.bootstrap_servers, topic, RECORDS)
    config: dict[str, object] = {"group.id": f"g-{topic}"} if group else {}
    return topic, start_bridge(actors, mock_cluster.bootstrap_servers, config, **settings)


def start_probe(actors: list[pykka.ActorRef[Any]], inbox: Inbox, **kw: Any) -> pykka.ActorRef[Any]:
    ref = Probe.start(inbox, **kw)
    actors.append(ref)
    return ref


def stats(bridge: pykka.ActorRef[Any]) -> BridgeStats:
    reply = call(bridge, GetStats())
    assert isinstance(reply, BridgeStats), reply
    return reply


def idle_polls(bridge: pykka.ActorRef[Any], n: int = 10) -> BridgeStats:
    """Wait until the bridge has polled ``n`` more times (it keeps polling without demand)."""
    start = stats(bridge).polls
    wait_for(lambda: stats(bridge).polls >= start + n, f"{n} more polls")
    return stats(bridge)


def assert_contiguous(records: list[ConsumerRecord], first: int = 0) -> None:
    """Per partition: offsets first, first+1, ... with no gap and no repeat."""
    per: dict[int, list[int]] = collections.defaultdict(list)
    for r in records:
        per[r.partition].append(r.offset)
    for offsets in per.values():
        assert offsets == list(range(first, first + len(offsets))), offsets[:20]


def assigned(
    bridge: pykka.ActorRef[Any], probe: pykka.ActorRef[Any], topic: str, n: int
) -> tuple[TopicPartition, ...]:
    parts = tuple(TopicPartition(topic, p) for p in range(n))
    reply = call(bridge, Assign(parts, probe))
    assert isinstance(reply, Subscribed) and reply.partitions == parts
    return parts


def test_no_demand_no_records_then_exactly_the_demand(
    mock_cluster: Any, kafka_topic: Any, actors: list[pykka.ActorRef[Any]]
) -> None:
    topic, bridge = topic_and_bridge(mock_cluster, kafka_topic, actors, 2)
    inbox = Inbox()
    probe = start_probe(actors, inbox)
    parts = assigned(bridge, probe, topic, 2)
    wait_for(lambda: bool(inbox.seen()), "Subscribed")
    assert [type(m) for m in inbox.seen()] == [Subscribed]

    # No demand: the bridge keeps polling (rebalance and poll timers) with every partition
    # paused, and nothing is sent.
    now = idle_polls(bridge)
    assert set(now.paused) == set(parts) and now.demand == 0
    assert inbox.records() == []

    bridge.tell(Request(120))
    wait_for(lambda: len(inbox.records()) >= 120, "the first 120 records")
    after = idle_polls(bridge)
    assert len(inbox.records()) == 120, "more records than the demand"
    assert after.demand == 0 and set(after.paused) == set(parts)
    assert after.buffered_records <= 50  # at most one poll (max.poll.records) held back
    assert_contiguous(inbox.records())
    assert all(b.seq > 0 and b.records for b in inbox.batches())
    for batch in inbox.batches():  # positions: next offset per partition of the batch
        last: dict[TopicPartition, int] = {}
        for r in batch.records:
            last[TopicPartition(r.topic, r.partition)] = r.offset + 1
        assert dict(batch.positions) == last

    # Demand returns (with the acknowledgement): the partitions resume, the rest flows.
    bridge.tell(Request(10_000, handled=inbox.batches()[-1].seq))
    wait_for(lambda: len(inbox.records()) >= RECORDS, "every record")
    records = inbox.records()
    assert len(records) == len({(r.partition, r.offset) for r in records}) == RECORDS
    assert_contiguous(records)
    wait_for(lambda: not stats(bridge).paused, "the partitions resumed")


def test_at_most_the_in_flight_window_is_unacknowledged(
    mock_cluster: Any, kafka_topic: Any, actors: list[pykka.ActorRef[Any]]
) -> None:
    topic, bridge = topic_and_bridge(
        mock_cluster, kafka_topic, actors, 1, max_in_flight_batches=2, max_batch_records=10
    )
    inbox = Inbox()
    probe = start_probe(actors, inbox)
    assigned(bridge, probe, topic, 1)
    bridge.tell(Request(100))
    wait_for(lambda: len(inbox.batches()) >= 2, "two batches")
    now = idle_polls(bridge)
    assert len(inbox.batches()) == 2 and len(inbox.records()) == 20
    assert now.in_flight_batches == 2 and now.demand == 80
    acked = 0
    while len(inbox.records()) < 100:  # acknowledge as they come: the window moves on
        batches = inbox.batches()
        if batches[-1].seq > acked:
            acked = batches[-1].seq
            bridge.tell(Handled(acked))
        time.sleep(0.01)
        assert stats(bridge).in_flight_batches <= 2
    assert len(inbox.records()) == 100
    assert_contiguous(inbox.records())


def test_a_failed_batch_is_sought_back_and_delivered_again(
    mock_cluster: Any, kafka_topic: Any, actors: list[pykka.ActorRef[Any]]
) -> None:
    topic, bridge = topic_and_bridge(mock_cluster, kafka_topic, actors, 1, max_batch_records=25)
    inbox = Inbox()
    probe = start_probe(actors, inbox)
    assigned(bridge, probe, topic, 1)
    bridge.tell(Request(50))
    wait_for(lambda: len(inbox.records()) >= 50, "50 records")
    first, second = inbox.batches()[:2]
    bridge.tell(Handled(first.seq))
    bridge.tell(BatchFailed(second.seq, ErrorInfo("ValueError", "bad record", False)))
    wait_for(lambda: bool(inbox.seen(BatchRejected)), "BatchRejected")
    rejected = inbox.seen(BatchRejected)[0]
    tp = TopicPartition(topic, 0)
    assert rejected.failed_seq == second.seq
    assert dict(rejected.rewound) == {tp: second.records[0].offset}
    assert rejected.error.type == "SubscriberFailedError"
    assert stats(bridge).demand == 0
    # Only the acknowledged batch counts as delivered: Commit(None) would commit its end.
    bridge.tell(Request(100))
    wait_for(lambda: len(inbox.records()) >= 150, "the records again")
    again = [r for b in inbox.batches() if b.seq > rejected.resume_seq - 1 for r in b.records]
    assert [r.offset for r in again] == list(range(25, 125))


def test_a_subscriber_that_dies_loses_nothing(
    mock_cluster: Any, kafka_topic: Any, actors: list[pykka.ActorRef[Any]]
) -> None:
    topic, bridge = topic_and_bridge(mock_cluster, kafka_topic, actors, 2)
    dying = start_probe(actors, Inbox(), fail_on=lambda m: isinstance(m, CommitOk))
    parts = assigned(bridge, dying, topic, 2)
    bridge.tell(Request(100))
    # The 100 records may come in several polls (ciD: 18 of them after the first batch).
    wait_for(lambda: stats(bridge).delivered_records == 100, "100 records delivered")
    assert stats(bridge).in_flight_batches > 0
    # The probe raises on its next message (pykka stops it) with 100 records unacknowledged.
    bridge.tell(Commit(1, {}))
    wait_for(lambda: not dying.is_alive(), "the subscriber stopped")
    idle_polls(bridge)
    inbox = Inbox()
    probe = start_probe(actors, inbox)
    assert call(bridge, Assign(parts, probe)).partitions == parts
    bridge.tell(Request(10_000))
    wait_for(lambda: len(inbox.records()) >= RECORDS, "every record, from the start")
    records = inbox.records()
    assert len(records) == len({(r.partition, r.offset) for r in records}) == RECORDS
    assert_contiguous(records)


def test_errors_are_typed(
    mock_cluster: Any, kafka_topic: Any, actors: list[pykka.ActorRef[Any]]
) -> None:
    with pytest.raises(ConfigError):
        KafkaBridge.start(
            {"bootstrap.servers": mock_cluster.bootstrap_servers, "max.poll.records": 0}
        )
    with pytest.raises(ValueError, match="max_in_flight_batches"):
        KafkaBridge.start({"bootstrap.servers": "127.0.0.1:9"}, max_in_flight_batches=0)
    topic = kafka_topic(mock_cluster, partitions=1)
    bridge = start_bridge(actors, mock_cluster.bootstrap_servers)  # no group.id
    inbox = Inbox()
    probe = start_probe(actors, inbox)
    failed = call(bridge, Commit(7, {TopicPartition(topic, 0): 1}))
    assert isinstance(failed, CommitFailed) and failed.request_id == 7
    assert failed.error.type == "InvalidGroupIdError", failed
    refused = call(bridge, Assign((TopicPartition(topic, 0),), "not an actor"))
    assert isinstance(refused, StreamError)
    assert refused.error.type == "BridgeRequestFailedError" and "ActorRef" in refused.error.message
    assigned(bridge, probe, topic, 1)
    bridge.tell(Request(0))  # no sender: the typed error goes to the subscriber
    wait_for(lambda: bool(inbox.seen(StreamError)), "the StreamError")
    error = inbox.seen(StreamError)[0].error
    assert error.type == "BridgeRequestFailedError" and "n > 0" in error.message
    assert bridge.is_alive()
    assert isinstance(call(bridge, Close(5.0)), Closed)
    wait_for(lambda: not bridge.is_alive(), "the bridge stopped after Close")


def test_commits_through_the_bridge(
    mock_cluster: Any, kafka_topic: Any, actors: list[pykka.ActorRef[Any]]
) -> None:
    topic, bridge = topic_and_bridge(mock_cluster, kafka_topic, actors, 1, group=True)
    group = f"g-{topic}"
    inbox = Inbox()
    probe = start_probe(actors, inbox)
    assigned(bridge, probe, topic, 1)
    tp = TopicPartition(topic, 0)
    ok = call(bridge, Commit(1, {tp: 10}))
    assert isinstance(ok, CommitOk) and ok.offsets == {tp: OffsetAndMetadata(10)}
    bridge.tell(Request(60))
    wait_for(lambda: len(inbox.records()) >= 60, "60 records")
    # Commit(None) commits what the subscriber acknowledged, not what the bridge sent.
    batches = inbox.batches()
    bridge.tell(Handled(batches[0].seq))
    ok = call(bridge, Commit(2))
    assert isinstance(ok, CommitOk)
    assert {t: o.offset for t, o in ok.offsets.items()} == dict(batches[0].positions)
    checker = KafkaConsumer(base_config(mock_cluster.bootstrap_servers, **{"group.id": group}))
    try:
        committed = checker.committed({tp}, timeout=30)
    finally:
        checker.close(timeout=5)
    assert committed[tp] is not None and committed[tp].offset == batches[0].positions[tp]


def test_subscriber_base_class_commits_its_revocation_on_close(
    mock_cluster: Any, kafka_topic: Any, actors: list[pykka.ActorRef[Any]]
) -> None:
    topic, bridge = topic_and_bridge(mock_cluster, kafka_topic, actors, 3, group=True)
    log = Log()
    subscriber = RecordingSubscriber.start(bridge, log)
    actors.append(subscriber)
    subscriber.proxy().subscribe([topic]).get(timeout=10)
    wait_for(lambda: len(log.snapshot()[0]) >= RECORDS, "every record", timeout=120)
    assert isinstance(call(bridge, Close(20.0), timeout=60), Closed)
    records, events = log.snapshot()
    assert len(records) == len({(r.partition, r.offset) for r in records}) == RECORDS
    kinds = [e[0] for e in events]
    # the close's revocation: its commit reply, then its ack, in that order
    revoked_at = max(i for i, k in enumerate(kinds) if k == "revoked")
    assert kinds[revoked_at + 1 :] == ["commit", "ack"], events
    commit = events[revoked_at + 1][1]
    assert isinstance(commit, CommitOk)
    ends: dict[TopicPartition, int] = {}
    for r in records:
        ends[TopicPartition(r.topic, r.partition)] = r.offset + 1
    assert {t: o.offset for t, o in commit.offsets.items()} == ends
