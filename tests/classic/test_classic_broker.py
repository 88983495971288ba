"""Two classic membership managers against a real Kafka broker (JoinGroup/SyncGroup/Heartbeat/
LeaveGroup over BlockingKafkaConnection), range assignor, one topic with 4 partitions."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from kafka_actors.protocol.group.classic.membership import (
    ClassicMembershipConfig,
    ClassicMembershipManager,
    ClassicMemberState,
    NeedPartitionCounts,
)
from kafka_actors.protocol.group.consumer.membership import (
    CommitBeforeRevocation,
    CoordinatorUnknown,
    ErrorEvent,
    InvokeAssigned,
    InvokeLost,
    InvokeRevoked,
    LeaveCompleted,
)
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.testing.client import BlockingKafkaConnection

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]


def _now() -> int:
    return int(time.monotonic() * 1000)


def _find_coordinator(bootstrap: str, group: str) -> tuple[str, int]:
    with BlockingKafkaConnection.bootstrap(bootstrap, timeout=30) as conn:
        deadline = time.monotonic() + 60
        while True:
            response = conn.request(ApiKey.FIND_COORDINATOR, key=group)
            entries = getattr(response, "coordinators", None) or [response]
            entry = entries[0]
            if int(entry.error_code) == 0:
                return entry.host, int(entry.port)
            assert time.monotonic() < deadline, f"no coordinator: {entry}"
            time.sleep(0.2)


class _Member:
    """One manager on its own coordinator connection, driven by its own thread (a JoinGroup is
    held by the broker until the whole group has joined, so members must run concurrently)."""

    def __init__(self, name: str, host: str, port: int, group: str, topic: str) -> None:
        self.name = name
        self.topic = topic
        self.conn = BlockingKafkaConnection(host, port, client_id=name, timeout=90)
        config = ClassicMembershipConfig(
            group_id=group,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=300,
            rebalance_timeout_ms=30_000,
            assignors=("range",),
            auto_commit_enabled=False,
            join_group_version=self.conn.version_for(ApiKey.JOIN_GROUP),
            sync_group_version=self.conn.version_for(ApiKey.SYNC_GROUP),
            heartbeat_version=self.conn.version_for(ApiKey.HEARTBEAT),
            leave_group_version=self.conn.version_for(ApiKey.LEAVE_GROUP),
        )
        self.manager = ClassicMembershipManager(config, random=lambda: 0.5, client_id=name)
        self.manager.on_coordinator_discovered(_now())
        self.manager.subscribe([topic])
        self.errors: list[Any] = []
        self.events: list[Any] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    def step(self) -> None:
        """One round: poll the manager, handle its events, send its requests in turn."""
        manager = self.manager
        result = manager.poll(_now())
        for event in result.events:
            self.events.append(event)
            if isinstance(event, NeedPartitionCounts):
                metadata = self.conn.request(ApiKey.METADATA, topics=sorted(event.topics))
                counts = {
                    t.name: len(t.partitions) for t in metadata.topics if int(t.error_code) == 0
                }
                manager.on_partition_counts(event.request_id, counts)
            elif isinstance(event, (InvokeAssigned, InvokeRevoked, InvokeLost)):
                manager.on_callback_completed(event.callback_id)
            elif isinstance(event, CommitBeforeRevocation):
                manager.on_commit_done(event.commit_id)
            elif isinstance(event, CoordinatorUnknown):
                manager.on_coordinator_discovered(_now())  # one broker: same coordinator
            elif isinstance(event, ErrorEvent):
                self.errors.append(event)
        for request in result.requests:
            response = self.conn.send(request.request)
            manager.on_response(request.request_id, response, _now())

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                self.manager.on_poll(_now())  # the application polls often
                self.step()
                time.sleep(0.02)
        except BaseException as exc:  # surfaced by the test
            self.errors.append(exc)

    @property
    def stable(self) -> bool:
        m = self.manager
        return m.state is ClassicMemberState.STABLE and not m.rejoin_needed

    def leave(self) -> None:
        self.manager.leave_group(_now(), deadline_ms=_now() + 30_000)
        deadline = time.monotonic() + 30
        while not any(isinstance(e, LeaveCompleted) for e in self.events):
            assert time.monotonic() < deadline, "leave did not complete"
            self.step()


def _wait(condition: Any, members: list[_Member], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for m in members:
            assert not m.errors, (m.name, m.errors)
        assert time.monotonic() < deadline, f"timed out waiting for {what}: " + ", ".join(
            f"{m.name}={m.manager.state.value} {sorted(map(str, m.manager.assignment))}"
            for m in members
        )
        time.sleep(0.05)


def test_two_classic_members_split_a_topic_on_a_real_broker(kafka_broker: Any) -> None:
    topic = f"classic-{uuid.uuid4().hex[:8]}"
    group = f"classic-group-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=4)
    host, port = _find_coordinator(kafka_broker.bootstrap_servers, group)
    first = _Member("first", host, port, group, topic)
    second = _Member("second", host, port, group, topic)
    members = [first, second]
    try:
        first.thread.start()
        all_partitions = frozenset(TopicPartition(topic, p) for p in range(4))
        _wait(
            lambda: first.stable and first.manager.assignment == all_partitions,
            members,
            "the first member alone",
        )
        assert first.manager.is_leader
        generation = first.manager.generation_id
        second.thread.start()
        _wait(
            lambda: (
                first.stable
                and second.stable
                and len(first.manager.assignment) == 2
                and len(second.manager.assignment) == 2
            ),
            members,
            "both members stable",
        )
        a, b = first.manager, second.manager
        assert a.assignment | b.assignment == all_partitions
        assert not a.assignment & b.assignment
        assert a.generation_id == b.generation_id > generation
        # range: members sorted by member id, the first takes partitions 0 and 1
        low, high = sorted([a, b], key=lambda m: m.member_id)
        assert low.assignment == frozenset(TopicPartition(topic, p) for p in (0, 1))
        assert high.assignment == frozenset(TopicPartition(topic, p) for p in (2, 3))
        assert [x.is_leader for x in (a, b)].count(True) == 1
        # eager: the first member revoked everything before the second round
        revoked = [e.partitions for e in first.events if isinstance(e, InvokeRevoked)]
        assert revoked[-1] == all_partitions
        # heartbeats keep the group stable for a while
        time.sleep(2)
        assert first.stable and second.stable and a.generation_id == b.generation_id
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            if m.thread.is_alive():
                m.thread.join(timeout=60)
    for m in members:
        assert not m.errors, (m.name, m.errors)
    try:
        second.leave()
        first.leave()
        assert second.manager.state is ClassicMemberState.UNJOINED
        assert first.manager.assignment == frozenset()
    finally:
        for m in members:
            m.conn.close()
