"""The pure CommitManager against a real Kafka 4.x broker: standalone commits (no member, as
Java's commits after assign()), read back with OffsetFetch and by Kafka's own
kafka-consumer-groups tool."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka import Consumer, Producer

from kafka_actors.errors import KafkaError
from kafka_actors.protocol.group.consumer.membership import CoordinatorUnknown
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.offsets.commit import (
    CommitCompleted,
    CommitConfig,
    CommitManager,
    CommittedOffsetsFetched,
    PositionsInitialized,
)
from kafka_actors.protocol.subscription import FetchPosition, OffsetResetStrategy, SubscriptionState
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.testing.broker import KafkaBroker
from kafka_actors.testing.client import BlockingKafkaConnection

pytestmark = pytest.mark.broker


def _now() -> int:
    return int(time.monotonic() * 1000)


SENT_VERSIONS: list[tuple[int, int]] = []  # (api key, version) of every request sent


def _drive(
    manager: CommitManager, conn: BlockingKafkaConnection, group: str, wanted: type
) -> list[Any]:
    """Poll the manager, send its requests on ``conn``, feed the answers back, until an event
    of type ``wanted`` comes out; return every event. Plays the coordinator manager too: on
    ``CoordinatorUnknown`` (a fresh broker answers NOT_COORDINATOR while it loads the offsets
    partition) it rediscovers the coordinator."""
    events: list[Any] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        result = manager.poll(_now())
        events.extend(result.events)
        if any(isinstance(e, wanted) for e in events):
            return events
        if any(isinstance(e, CoordinatorUnknown) for e in result.events):
            manager.on_coordinator_changed(_coordinator(conn, group))
            continue
        for request in result.requests:
            body = request.request
            SENT_VERSIONS.append((int(body.__api_key__), int(body.__version__)))
            try:
                response = conn.send(request.request)
            except KafkaError as exc:
                manager.on_failure(request.request_id, exc, _now())
            else:
                manager.on_response(request.request_id, response, _now())
        if not result.requests:
            wait = result.time_until_next_poll_ms
            time.sleep(min(0.5, (wait if wait is not None else 50) / 1000))
    raise AssertionError(f"no {wanted.__name__} within 60 s: {events}")


def _topic_ids(conn: BlockingKafkaConnection, topic: str) -> dict[str, uuid.UUID]:
    metadata = conn.request(ApiKey.METADATA, topics=[topic])
    return {str(t.name): t.topic_id for t in metadata.topics if t.topic_id is not None}


def _coordinator(conn: BlockingKafkaConnection, group: str) -> int:
    """FindCoordinator, retried while the broker creates __consumer_offsets."""
    deadline = time.monotonic() + 60
    while True:
        answer = conn.request(ApiKey.FIND_COORDINATOR, key=group)
        coordinators = getattr(answer, "coordinators", None)
        entry = coordinators[0] if coordinators else answer
        if int(entry.error_code) == 0:
            break
        assert int(entry.error_code) in (14, 15) and time.monotonic() < deadline, entry
        time.sleep(0.2)
    assert int(entry.port) == conn.port  # one node: the coordinator is the bootstrap broker
    return int(entry.node_id)


def test_standalone_commit_read_back_and_described_by_kafka_tools(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(kafka_broker, partitions=3)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "log_level": 3})
    for i in range(30):
        producer.produce(topic, f"v{i}".encode(), partition=i % 3)
    assert producer.flush(60) == 0
    group = f"commit-{topic}"
    p0, p1, p2 = (TopicPartition(topic, i) for i in range(3))

    with BlockingKafkaConnection.bootstrap(kafka_broker.bootstrap_servers) as conn:
        commit_version = conn.version_for(ApiKey.OFFSET_COMMIT)
        fetch_version = conn.version_for(ApiKey.OFFSET_FETCH)
        config = CommitConfig(
            group_id=group,
            group_protocol="classic",  # standalone: no member id, generation -1
            auto_commit_enabled=False,
            offset_commit_version=commit_version,
            offset_fetch_version=fetch_version,
        )
        subs = SubscriptionState(OffsetResetStrategy.of("earliest"))
        manager = CommitManager(config, subs, random=random.Random(1).random)
        manager.on_topic_ids(_topic_ids(conn, topic))
        manager.on_coordinator_changed(_coordinator(conn, group))

        # commit_sync of explicit offsets (one with a leader epoch and metadata).
        offsets = {p0: OffsetAndMetadata(7, "m0", 0), p1: OffsetAndMetadata(3)}
        manager.commit_sync(offsets, _now() + 30_000, "commit-1")
        (done,) = [
            e
            for e in _drive(manager, conn, group, CommitCompleted)
            if isinstance(e, CommitCompleted)
        ]
        assert done.error is None, done.error
        assert done.offsets == offsets

        # commit_async of all consumed: the positions of an assigned partition.
        subs.assign_from_user([p1])
        subs.seek(p1, FetchPosition(5))
        manager.commit_async(None, "commit-2")
        (done,) = [
            e
            for e in _drive(manager, conn, group, CommitCompleted)
            if isinstance(e, CommitCompleted)
        ]
        assert done.error is None, done.error
        assert done.offsets == {p1: OffsetAndMetadata(5)}

        # Read back with OffsetFetch.
        manager.fetch_committed([p0, p1, p2], _now() + 30_000, "fetch")
        (fetched,) = [
            e
            for e in _drive(manager, conn, group, CommittedOffsetsFetched)
            if isinstance(e, CommittedOffsetsFetched)
        ]
        assert fetched.error is None, fetched.error
        assert fetched.offsets == {
            p0: OffsetAndMetadata(7, "m0", 0),
            p1: OffsetAndMetadata(5),
            p2: None,
        }

        # Positions of newly assigned partitions from the committed offsets.
        subs.assign_from_user([p0, p1, p2])
        manager.initialize_positions(_now() + 30_000, "init")
        (init,) = [
            e
            for e in _drive(manager, conn, group, PositionsInitialized)
            if isinstance(e, PositionsInitialized)
        ]
        assert init.error is None, init.error
        assert init.seeked == {p0: OffsetAndMetadata(7, "m0", 0)}  # p1 kept its position
        assert init.reset == frozenset({p2})
        assert subs.position(p0) == FetchPosition(7, 0)
        assert subs.position(p1) == FetchPosition(5)
        assert subs.is_offset_reset_needed(p2)

    # The newest broker takes both APIs at the newest version, topics named by id (v10).
    assert (ApiKey.OFFSET_COMMIT, commit_version) in SENT_VERSIONS
    assert (ApiKey.OFFSET_FETCH, fetch_version) in SENT_VERSIONS
    assert min(commit_version, fetch_version) >= 9

    proc = kafka_broker.run_tool(
        "kafka-consumer-groups",
        ["--bootstrap-server", kafka_broker.bootstrap_servers, "--describe", "--group", group],
    )
    assert proc.returncode == 0, proc.stderr
    described: dict[int, str] = {}
    for line in proc.stdout.splitlines():
        columns = line.split()
        if len(columns) >= 5 and columns[0] == group and columns[1] == topic:
            described[int(columns[2])] = columns[3]  # PARTITION -> CURRENT-OFFSET
    assert described == {0: "7", 1: "5"}, proc.stdout


def test_commit_on_close_is_read_back_by_a_fresh_reader(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    """The commit on close stores all consumed positions: another client's committed() for
    the group reads exactly those."""
    topic = kafka_topic(kafka_broker, partitions=2)
    group = f"close-{topic}"
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    consumed = {p0: OffsetAndMetadata(4), p1: OffsetAndMetadata(9)}

    with BlockingKafkaConnection.bootstrap(kafka_broker.bootstrap_servers) as conn:
        config = CommitConfig(
            group_id=group,
            group_protocol="classic",  # standalone: no member id, generation -1
            auto_commit_enabled=True,  # the commit on close is auto-commit's
            offset_commit_version=conn.version_for(ApiKey.OFFSET_COMMIT),
            offset_fetch_version=conn.version_for(ApiKey.OFFSET_FETCH),
        )
        topic_ids = _topic_ids(conn, topic)
        coordinator = _coordinator(conn, group)

        subs = SubscriptionState(OffsetResetStrategy.of("earliest"))
        subs.assign_from_user([p0, p1])
        for tp, offset in consumed.items():
            subs.seek(tp, FetchPosition(offset.offset))
        closing = CommitManager(config, subs, random=random.Random(2).random)
        closing.on_topic_ids(topic_ids)
        closing.on_coordinator_changed(coordinator)
        closing.commit_on_close(_now() + 30_000, "close")
        (done,) = [
            e
            for e in _drive(closing, conn, group, CommitCompleted)
            if isinstance(e, CommitCompleted)
        ]
        assert done.error is None, done.error
        assert done.offsets == consumed

    # Read back by another client: confluent-kafka's committed() for the group.
    reader = Consumer(
        {"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": group, "log_level": 3}
    )
    try:
        read = reader.committed([ck.TopicPartition(topic, 0), ck.TopicPartition(topic, 1)], 30)
    finally:
        reader.close()
    assert {TopicPartition(r.topic, r.partition): r.offset for r in read} == {
        tp: offset.offset for tp, offset in consumed.items()
    }
