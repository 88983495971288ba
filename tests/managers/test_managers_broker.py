"""The pure managers' requests against a real Kafka 4.x broker.

Each test drives a manager with a manual clock and a BlockingKafkaConnection: every
UnsentRequest it returns is sent as is (ANY_NODE and the leader are the one broker), and the
decoded response is fed back. This proves the broker accepts the requests at the negotiated
versions and the managers read its answers.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from kafka_actors.errors import UnknownTopicOrPartitionError
from kafka_actors.protocol.group.coordinator import (
    CoordinatorChanged,
    CoordinatorConfig,
    CoordinatorManager,
)
from kafka_actors.protocol.messages import ANY_NODE, PollResult
from kafka_actors.protocol.metadata import (
    ClusterUpdated,
    MetadataConfig,
    MetadataManager,
    TopicMetadataCompleted,
)
from kafka_actors.protocol.offsets.list_offsets import (
    ListOffsetsCompleted,
    OffsetAndTimestamp,
    OffsetsConfig,
    OffsetsManager,
)
from kafka_actors.protocol.subscription import OffsetResetStrategy, ResetKind, SubscriptionState
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.testing.client import BlockingKafkaConnection
from tests.managers.harness import seeded_random, tp

pytestmark = pytest.mark.broker


class Driver:
    """Polls a manager, sends its requests on one connection, feeds the responses back."""

    def __init__(self, manager: Any, conn: BlockingKafkaConnection, broker_node: int) -> None:
        self.manager = manager
        self.conn = conn
        self.broker_node = broker_node
        self.now = 0
        self.events: list[Any] = []

    def step(self) -> PollResult:
        result: PollResult = self.manager.poll(self.now)
        self.events.extend(result.events)
        for request in result.requests:
            assert request.node in (ANY_NODE, self.broker_node)
            response = self.conn.send(request.request)
            self.manager.on_response(request.request_id, response, self.now)
        return result

    def until(self, done: Callable[[], bool], *, max_steps: int = 200) -> None:
        for _ in range(max_steps):
            result = self.step()
            if done():
                return
            if result.requests:
                continue  # responses were fed in: poll again at once (as the actor does)
            wait = result.time_until_next_poll_ms
            self.now += 50 if wait is None else max(wait, 1)
            time.sleep(0.02)  # let the broker move on (topic creation, coordinator load)
        raise AssertionError(f"not done after {max_steps} steps: {self.events[-5:]}")

    def of(self, cls: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]


def connect(broker: Any) -> BlockingKafkaConnection:
    return BlockingKafkaConnection.bootstrap(broker.bootstrap_servers, timeout=30.0)


def broker_node_id(conn: BlockingKafkaConnection) -> int:
    response = conn.request(ApiKey.METADATA, topics=[])
    (broker,) = response.brokers
    return int(broker.node_id)


def produce(bootstrap: str, topic: str, timestamps: list[int]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for ts in timestamps:
        producer.produce(topic, value=b"v", partition=0, timestamp=ts)
    assert producer.flush(30) == 0


def test_metadata_manager_against_broker(kafka_broker: Any, kafka_topic: Any) -> None:
    topic = kafka_topic(kafka_broker, partitions=3)
    with connect(kafka_broker) as conn:
        node = broker_node_id(conn)
        m = MetadataManager(
            MetadataConfig(allow_auto_create_topics=False), conn.versions, random=seeded_random()
        )
        m.set_subscription([topic])
        d = Driver(m, conn, node)
        d.until(lambda: bool(d.of(ClusterUpdated)))
        cluster = d.of(ClusterUpdated)[-1].cluster
        assert set(cluster.nodes) == {node}
        assert cluster.cluster_id
        partitions = cluster.partitions_for(topic)
        assert partitions is not None and [p.partition for p in partitions] == [0, 1, 2]
        for p in partitions:
            leader = cluster.leader_for(tp(topic, p.partition))
            assert leader is not None and leader[0] == node and (leader[1] or 0) >= 0
        topic_id = cluster.topic_id(topic)
        assert topic_id is not None and cluster.topic_name(topic_id) == topic

        missing = f"missing-{uuid.uuid4().hex[:8]}"
        key = m.fetch_topic_metadata([missing], deadline_ms=d.now + 60_000, now_ms=d.now)
        d.until(lambda: bool(d.of(TopicMetadataCompleted)))
        (done,) = d.of(TopicMetadataCompleted)
        assert done.request_key == key
        assert isinstance(done.error, UnknownTopicOrPartitionError)

        listing = m.fetch_topic_metadata(None, deadline_ms=d.now + 60_000, now_ms=d.now)
        d.until(lambda: len(d.of(TopicMetadataCompleted)) == 2)
        listed = d.of(TopicMetadataCompleted)[-1]
        assert listed.request_key == listing and listed.result is not None
        assert topic in listed.result and missing not in listed.result


def test_coordinator_manager_against_broker(kafka_broker: Any) -> None:
    _host, port = kafka_broker.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with connect(kafka_broker) as conn:
        node = broker_node_id(conn)
        m = CoordinatorManager(
            CoordinatorConfig(group_id=f"group-{uuid.uuid4().hex[:8]}"),
            conn.versions,
            random=seeded_random(),
        )
        d = Driver(m, conn, node)
        d.until(lambda: bool(d.of(CoordinatorChanged)))
        (found,) = d.of(CoordinatorChanged)
        assert found.node_id == node
        assert found.port == int(port)
        m.mark_coordinator_unknown("test: NOT_COORDINATOR", d.now)
        d.until(lambda: len(d.of(CoordinatorChanged)) == 3)
        lost, again = d.of(CoordinatorChanged)[1:]
        assert lost.node_id is None and again.node_id == node


def test_offsets_manager_against_broker(kafka_broker: Any, kafka_topic: Any) -> None:
    topic = kafka_topic(kafka_broker, partitions=1)
    base = 1_600_000_000_000
    produce(kafka_broker.bootstrap_servers, topic, [base + 1_000 * i for i in range(5)])
    with connect(kafka_broker) as conn:
        node = broker_node_id(conn)
        metadata = MetadataManager(MetadataConfig(), conn.versions, random=seeded_random())
        metadata.set_subscription([topic])
        md = Driver(metadata, conn, node)
        md.until(lambda: bool(md.of(ClusterUpdated)))

        subs = SubscriptionState(default_reset_strategy=OffsetResetStrategy(ResetKind.EARLIEST))
        m = OffsetsManager(
            OffsetsConfig(),
            conn.versions,
            subs,
            random=seeded_random(),
            wall_clock_ms=lambda: base + 10_000,
        )
        m.on_cluster_updated(md.of(ClusterUpdated)[-1].cluster)
        d = Driver(m, conn, node)
        part = tp(topic, 0)
        m.beginning_offsets([part], d.now + 60_000, d.now)
        m.end_offsets([part], d.now + 60_000, d.now)
        m.offsets_for_times({part: base + 2_500}, d.now + 60_000, d.now)
        d.until(lambda: len(d.of(ListOffsetsCompleted)) == 3)
        results = {e.kind: e for e in d.of(ListOffsetsCompleted)}
        assert all(e.error is None for e in results.values())
        assert results["beginning_offsets"].offsets == {part: 0}
        assert results["end_offsets"].offsets == {part: 5}
        found = results["offsets_for_times"].result
        assert found is not None
        record = found[part]
        assert isinstance(record, OffsetAndTimestamp)
        assert (record.offset, record.timestamp) == (3, base + 3_000)

        late = m.offsets_for_times({part: base + 60_000}, d.now + 60_000, d.now)
        d.until(lambda: len(d.of(ListOffsetsCompleted)) == 4)
        (none_found,) = [e for e in d.of(ListOffsetsCompleted) if e.request_key == late]
        assert none_found.result == {part: None}

        # Resets (records have timestamps base .. base + 4 s; the wall clock says base + 10 s).
        subs.assign_from_user([part])
        subs.reset_initializing_positions()
        d.until(lambda: subs.position(part) is not None)
        position = subs.position(part)
        assert position is not None and position.offset == 0
        assert position.current_leader.leader == node

        subs.request_offset_reset(part, OffsetResetStrategy(ResetKind.LATEST))
        d.until(lambda: subs.position(part) is not None)
        assert (subs.position(part) or position).offset == 5

        subs.request_offset_reset(
            part, OffsetResetStrategy(ResetKind.BY_DURATION, timedelta(seconds=8))
        )  # base + 2 s → offset 2
        d.until(lambda: subs.position(part) is not None)
        assert (subs.position(part) or position).offset == 2
        subs.request_offset_reset(
            part, OffsetResetStrategy(ResetKind.BY_DURATION, timedelta(seconds=1))
        )  # base + 9 s: no record that recent → latest
        d.until(lambda: subs.position(part) is not None)
        assert (subs.position(part) or position).offset == 5
