"""The pacing harness: one API answering one retriable error for a window, and how many
requests of that API the broker received in it (ours, librdkafka's), against the bound
Java's retry schedule allows.

Owns: per case, one librdkafka mock cluster and the consumer it runs (ours, or
confluent-kafka's); both are closed before :func:`run_case` returns. Test code only.

How a case runs: a fresh 3-broker mock cluster, a topic of one partition holding a few
records. The consumer is built with ``retry.backoff.ms`` = :data:`RETRY_BACKOFF_MS` and
``retry.backoff.max.ms`` = :data:`RETRY_BACKOFF_MAX_MS`. A ``start`` case queues the error
for the API (many times over: every request of it in the window is answered with it) before
the consumer starts; a ``steady`` case first lets the consumer receive a record (joined,
fetching), then queues it. A ``none`` case injects nothing: its condition (an unknown topic,
a deleted topic, a coordinator that is down) is the error. The mock records every request;
the window opens at the first request of the API after the injection and lasts
:data:`WINDOW_S`; the count is the requests of the API whose arrival falls in it.

The bound (:func:`java_bound`): Java's ``ExponentialBackoff`` waits
``retry.backoff.ms * 2^n`` capped at ``retry.backoff.max.ms``, times a jitter in [0.8, 1.2].
The most attempts that schedule fits in the window is with every jitter at 0.8 (the first
attempt at the window's start); the bound is that plus :data:`MARGIN` (a request already in
flight when the window opens, and one counted at its edge).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.testing.mock import MockCluster

RETRY_BACKOFF_MS = 100
RETRY_BACKOFF_MAX_MS = 1_000
JITTER = 0.2
MARGIN = 2
WINDOW_S = 3.0
#: How long a steady case may take to receive its first record (join, assignment, fetch).
WARMUP_S = 20.0
#: Errors queued per injection: more than any client sends in a window, however fast.
QUEUED = 100_000
RECORDS = 5
#: The heartbeat interval the mock hands KIP-848 and share members (the window is longer).
HEARTBEAT_INTERVAL_MS = 1_000

UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
NETWORK_EXCEPTION = 13
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
REBALANCE_IN_PROGRESS = 27
KAFKA_STORAGE_ERROR = 56
UNSUPPORTED_VERSION = 35
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 76
UNSTABLE_OFFSET_COMMIT = 88

ERROR_NAMES: dict[int, str] = {
    UNKNOWN_TOPIC_OR_PARTITION: "UNKNOWN_TOPIC_OR_PARTITION",
    LEADER_NOT_AVAILABLE: "LEADER_NOT_AVAILABLE",
    NOT_LEADER_OR_FOLLOWER: "NOT_LEADER_OR_FOLLOWER",
    REQUEST_TIMED_OUT: "REQUEST_TIMED_OUT",
    NETWORK_EXCEPTION: "NETWORK_EXCEPTION",
    COORDINATOR_LOAD_IN_PROGRESS: "COORDINATOR_LOAD_IN_PROGRESS",
    COORDINATOR_NOT_AVAILABLE: "COORDINATOR_NOT_AVAILABLE",
    NOT_COORDINATOR: "NOT_COORDINATOR",
    REBALANCE_IN_PROGRESS: "REBALANCE_IN_PROGRESS",
    KAFKA_STORAGE_ERROR: "KAFKA_STORAGE_ERROR",
    UNSUPPORTED_VERSION: "UNSUPPORTED_VERSION",
    FENCED_LEADER_EPOCH: "FENCED_LEADER_EPOCH",
    UNKNOWN_LEADER_EPOCH: "UNKNOWN_LEADER_EPOCH",
    UNSTABLE_OFFSET_COMMIT: "UNSTABLE_OFFSET_COMMIT",
}


def java_attempts(window_ms: float, backoff_ms: int, max_ms: int, jitter: float = JITTER) -> int:
    """Attempts Java's exponential schedule fits in ``window_ms`` with every jitter at its
    lowest (``1 - jitter``), the first attempt at 0."""
    attempts, elapsed, n = 1, 0.0, 0
    while True:
        elapsed += (1 - jitter) * min(backoff_ms * 2**n, max_ms)
        if elapsed > window_ms:
            return attempts
        attempts += 1
        n += 1


def java_bound(window_s: float = WINDOW_S, per_attempt: int = 1) -> int:
    """The most requests in the window: ``per_attempt`` per attempt of Java's schedule, plus
    :data:`MARGIN`."""
    attempts = java_attempts(window_s * 1000, RETRY_BACKOFF_MS, RETRY_BACKOFF_MAX_MS)
    return attempts * per_attempt + MARGIN


# -- the cases ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Case:
    """``api`` answers ``error`` (``None``: the ``condition`` is the error) for the window.

    ``client``: ``assign`` (manual assignment with a group.id), ``consumer`` (KIP-848
    subscription), ``classic`` (classic-protocol subscription), ``share`` (share group).
    ``inject``: ``start`` (before the consumer starts) or ``steady`` (after its first record).
    ``action``: what the window does besides polling: ``poll``, ``commit`` (one
    ``commit_sync`` over the window), ``close`` (closing the consumer), ``ack`` (share:
    acknowledge explicitly then one ``commit_sync``).
    ``condition``: for ``none`` cases, ``unknown_topic``, ``deleted_topic``,
    ``coordinator_down``; ``leader_change`` (a steady case: the partition's leader moves
    to another broker once the error is queued).
    """

    api: ApiKey
    error: int | None
    client: str
    inject: str = "start"
    action: str = "poll"
    condition: str = ""
    #: librdkafka does the same thing here (its column is measured).
    peer: bool = True
    #: Requests one attempt may take (ApiVersions: the request, then the v0 fallback Java
    #: sends on UNSUPPORTED_VERSION before it disconnects).
    per_attempt: int = 1
    #: The client is given only the first broker's address (one node to connect to).
    one_bootstrap: bool = False
    #: The client may rightly send no request of the API in the window (a Fetch of a deleted
    #: topic stops as soon as a Metadata answer says it is gone; whether one more Fetch goes
    #: first is a race with the deletion): then a Metadata request in the window is the proof
    #: that the case ran (the client was looking for the topic), and zero is within bound.
    may_stop: bool = False

    @property
    def id(self) -> str:
        return f"{self.api.api_name}-{self.what}-{self.client}-{self.inject}"

    @property
    def what(self) -> str:
        """The error's name, or the condition."""
        if self.error is None:
            return self.condition
        return ERROR_NAMES[self.error] + (f" ({self.condition})" if self.condition else "")


A = ApiKey
CNA, NC, CLIP = COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS

CASES: tuple[Case, ...] = (
    # ApiVersions: every connection's first request fails; the reconnects follow
    # reconnect.backoff.ms doubling to reconnect.backoff.max.ms (set as the retry backoff).
    Case(A.API_VERSIONS, UNSUPPORTED_VERSION, "assign", per_attempt=2, one_bootstrap=True),
    # Metadata: a topic's error while the consumer looks for its leader.
    Case(A.METADATA, LEADER_NOT_AVAILABLE, "assign"),
    Case(A.METADATA, UNKNOWN_TOPIC_OR_PARTITION, "consumer"),
    # FindCoordinator. The mock's error answers to FindCoordinator v3 carry a null host (the
    # schema forbids it): our decoder closes the connection, so these count the reconnects
    # after an undecodable answer; tests/pacing/test_pacing_broker.py has the real error.
    *(Case(A.FIND_COORDINATOR, e, "consumer") for e in (CNA, CLIP)),
    Case(A.FIND_COORDINATOR, CNA, "classic"),
    Case(A.FIND_COORDINATOR, CNA, "share", peer=False),
    # OffsetFetch: position initialisation of an assigned partition.
    *(Case(A.OFFSET_FETCH, e, "assign") for e in (CNA, NC, CLIP, UNSTABLE_OFFSET_COMMIT)),
    Case(A.OFFSET_FETCH, CLIP, "consumer"),
    # ListOffsets: the reset of a partition without a committed offset.
    *(
        Case(A.LIST_OFFSETS, e, "assign")
        for e in (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION)
    ),
    # Fetch
    *(
        Case(A.FETCH, e, "assign", inject="steady")
        for e in (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR)
    ),
    # OffsetCommit: one commit_sync retrying over the window.
    *(
        Case(A.OFFSET_COMMIT, e, "assign", inject="steady", action="commit")
        for e in (CNA, NC, CLIP, REQUEST_TIMED_OUT)
    ),
    # OffsetsForLeaderEpoch: not here. Moving the leader on the mock makes no consumer
    # (ours or librdkafka) validate its position: the mock's batches carry no leader epoch.
    # Classic group
    *(Case(A.JOIN_GROUP, e, "classic") for e in (CNA, NC, CLIP)),
    *(Case(A.SYNC_GROUP, e, "classic") for e in (CNA, NC, REBALANCE_IN_PROGRESS)),
    *(Case(A.HEARTBEAT, e, "classic", inject="steady") for e in (CNA, NC, CLIP)),
    Case(A.LEAVE_GROUP, CNA, "classic", inject="steady", action="close"),
    # KIP-848
    *(Case(A.CONSUMER_GROUP_HEARTBEAT, e, "consumer") for e in (CNA, NC, CLIP)),
    Case(A.CONSUMER_GROUP_HEARTBEAT, CNA, "consumer", inject="steady"),
    # Share groups (the Python binding of librdkafka has no share consumer: no peer column)
    *(Case(A.SHARE_GROUP_HEARTBEAT, e, "share", peer=False) for e in (CNA, NC, CLIP)),
    Case(A.SHARE_GROUP_HEARTBEAT, CNA, "share", inject="steady", peer=False),
    *(
        Case(A.SHARE_FETCH, e, "share", inject="steady", peer=False)
        for e in (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION)
    ),
    Case(A.SHARE_ACKNOWLEDGE, NOT_LEADER_OR_FOLLOWER, "share", "steady", "ack", peer=False),
    # No injection: the condition is the error.
    Case(A.METADATA, None, "assign", "none", condition="unknown_topic"),
    Case(A.OFFSET_FETCH, None, "assign", "none", condition="unknown_topic"),
    Case(A.METADATA, None, "consumer", "none", condition="unknown_topic"),
    Case(A.METADATA, None, "classic", "none", condition="unknown_topic"),
    Case(A.FETCH, None, "assign", "none", condition="deleted_topic", may_stop=True),
    Case(A.METADATA, None, "assign", "none", condition="deleted_topic"),
    Case(A.FIND_COORDINATOR, None, "consumer", "none", condition="coordinator_down"),
    Case(A.FIND_COORDINATOR, None, "classic", "none", condition="coordinator_down"),
)


@dataclass(slots=True)
class Outcome:
    """What one client did in one case's window."""

    count: int
    window_s: float
    #: Requests per API key over the whole run (diagnostics).
    by_api: dict[int, int] = field(default_factory=dict)
    note: str = ""


# -- the clients ----------------------------------------------------------------------------


class _Ours:
    """Our consumer (sync front end) behind the few calls a case needs."""

    def __init__(self, case: Case, bootstrap: str, group: str) -> None:
        import kafka_actors

        config: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "retry.backoff.ms": RETRY_BACKOFF_MS,
            "retry.backoff.max.ms": RETRY_BACKOFF_MAX_MS,
            "reconnect.backoff.ms": RETRY_BACKOFF_MS,
            "reconnect.backoff.max.ms": RETRY_BACKOFF_MAX_MS,
        }
        self.share = case.client == "share"
        if self.share:
            if case.action == "ack":
                config["share.acknowledgement.mode"] = "explicit"
            self.consumer: Any = kafka_actors.KafkaShareConsumer(config)
        else:
            config.update(
                {
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "allow.auto.create.topics": False,
                    "group.protocol": "classic" if case.client == "classic" else "consumer",
                }
            )
            self.consumer = kafka_actors.KafkaConsumer(config)
        self.last: list[Any] = []

    def start(self, case: Case, topic: str) -> None:
        if case.client == "assign":
            import kafka_actors

            self.consumer.assign([kafka_actors.TopicPartition(topic, 0)])
        else:
            self.consumer.subscribe([topic])

    def poll(self, seconds: float) -> int:
        try:
            records = list(self.consumer.poll(seconds))
        except Exception as exc:  # a typed error surfaced by poll: the case goes on
            logging.getLogger(__name__).debug("poll raised %r", exc)
            time.sleep(seconds)
            return 0
        if records:
            self.last = records
        return len(records)

    def commit(self, seconds: float) -> None:
        import kafka_actors

        last = self.last[-1]
        tp = kafka_actors.TopicPartition(last.topic, last.partition)
        try:
            self.consumer.commit_sync({tp: last.offset + 1}, timeout=seconds)
        except Exception as exc:
            logging.getLogger(__name__).debug("commit_sync raised %r", exc)

    def ack(self, seconds: float) -> None:
        import kafka_actors

        for record in self.last:
            self.consumer.acknowledge(record, kafka_actors.AcknowledgeType.ACCEPT)
        try:
            self.consumer.commit_sync(timeout=seconds)
        except Exception as exc:
            logging.getLogger(__name__).debug("commit_sync raised %r", exc)

    def close(self, seconds: float) -> None:
        try:
            self.consumer.close(timeout=seconds)
        except Exception as exc:
            logging.getLogger(__name__).debug("close raised %r", exc)


class _Librdkafka:
    """confluent-kafka's Consumer, configured the same."""

    def __init__(self, case: Case, bootstrap: str, group: str) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "retry.backoff.ms": RETRY_BACKOFF_MS,
                "retry.backoff.max.ms": RETRY_BACKOFF_MAX_MS,
                "reconnect.backoff.ms": RETRY_BACKOFF_MS,
                "reconnect.backoff.max.ms": RETRY_BACKOFF_MAX_MS,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "allow.auto.create.topics": False,
                "group.protocol": "classic" if case.client == "classic" else "consumer",
                "log_level": 0,
            }
        )
        self.last: Any = None

    def start(self, case: Case, topic: str) -> None:
        from confluent_kafka import TopicPartition

        if case.client == "assign":
            self.consumer.assign([TopicPartition(topic, 0)])
        else:
            self.consumer.subscribe([topic])

    def poll(self, seconds: float) -> int:
        msg = self.consumer.poll(seconds)
        if msg is not None and msg.error() is None:
            self.last = msg
            return 1
        return 0

    def commit(self, seconds: float) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        tp = TopicPartition(self.last.topic(), self.last.partition(), self.last.offset() + 1)
        try:
            self.consumer.commit(offsets=[tp], asynchronous=False)
        except KafkaException:
            pass

    def ack(self, seconds: float) -> None:  # pragma: no cover - no share peer
        raise NotImplementedError

    def close(self, seconds: float) -> None:
        self.consumer.close()


# -- running a case -------------------------------------------------------------------------


#: The mock closes the connection on the flexible versions of the classic group APIs our
#: consumer sends (JoinGroup v6, SyncGroup v4): every case caps them to the versions before.
CLASSIC_GROUP_VERSIONS: dict[ApiKey, int] = {
    ApiKey.JOIN_GROUP: 5,
    ApiKey.SYNC_GROUP: 3,
    ApiKey.HEARTBEAT: 3,
    ApiKey.LEAVE_GROUP: 3,
}


def run_case(case: Case, client: str = "ours", window_s: float = WINDOW_S) -> Outcome:
    """Run ``case`` with ``client`` (``ours`` or ``librdkafka``) on a fresh mock cluster."""
    with MockCluster(3) as cluster:
        topic = f"pacing-{uuid.uuid4().hex[:8]}"
        group = f"g-{uuid.uuid4().hex[:8]}"
        for api, version in CLASSIC_GROUP_VERSIONS.items():
            cluster.set_api_version(api, 0, version)
        cluster.set_group_initial_rebalance_delay_ms(0)
        # Heartbeats more often than the window, so a steady case sees them.
        cluster.set_share_group_heartbeat_interval_ms(HEARTBEAT_INTERVAL_MS)
        cluster.set_group_consumer_heartbeat_interval_ms(HEARTBEAT_INTERVAL_MS)
        cluster.create_topic(topic, 1)
        cluster.set_partition_leader(topic, 0, 1)
        _produce(cluster.bootstrap_servers, topic)
        factory: Callable[[Case, str, str], Any] = _Ours if client == "ours" else _Librdkafka
        cluster.start_request_tracking()
        consumer: Any = None
        try:
            bootstrap = cluster.bootstrap_servers
            if case.one_bootstrap:
                bootstrap = bootstrap.split(",")[0]
            consumer = factory(case, bootstrap, group)
            name = topic
            if case.condition == "unknown_topic":
                name = f"missing-{uuid.uuid4().hex[:8]}"
            elif case.condition == "coordinator_down":
                cluster.set_coordinator("group", group, 3)
                cluster.broker_down(3)
            if case.inject == "start" and case.error is not None:
                cluster.push_request_errors(case.api, [case.error] * QUEUED)
            consumer.start(case, name)
            note = ""
            if case.inject == "steady" or case.condition == "deleted_topic":
                if not _warm_up(consumer, lambda: _produce(cluster.bootstrap_servers, topic)):
                    note = "no record in warm-up"
                if case.condition == "deleted_topic":
                    cluster.delete_topic(topic)
                elif case.error is not None:
                    cluster.push_request_errors(case.api, [case.error] * QUEUED)
                if case.condition == "leader_change":
                    cluster.set_partition_leader(topic, 0, 2)
                cluster.clear_requests()
            started = time.monotonic()
            if case.action == "commit":
                consumer.commit(window_s)
            elif case.action == "ack":
                consumer.ack(window_s)
            elif case.action == "close":
                consumer.close(window_s)
                consumer = None
            while time.monotonic() - started < window_s + 0.5:
                if consumer is None:
                    time.sleep(0.1)
                else:
                    consumer.poll(0.1)
            requests = cluster.requests()
        finally:
            if case.error is not None:
                cluster.clear_request_errors(case.api)
            if consumer is not None:
                consumer.close(5.0)
            cluster.stop_request_tracking()
    by_api: dict[int, int] = {}
    for req in requests:
        by_api[req.api_key] = by_api.get(req.api_key, 0) + 1
    times = [r.timestamp_us for r in requests if r.api_key == case.api]
    if not times and case.may_stop and by_api.get(ApiKey.METADATA) and not note:
        return Outcome(0, window_s, by_api)
    if not times:
        return Outcome(0, window_s, by_api, note or "no request of the API")
    first = times[0]
    count = sum(1 for t in times if t - first <= window_s * 1e6)
    return Outcome(count, window_s, by_api, note)


def _produce(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    for i in range(RECORDS):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    producer.flush(10)


def _warm_up(consumer: Any, produce: Callable[[], None]) -> bool:
    """Poll until a record arrives; produce more each second (a share group starts at the
    latest offset: it sees only records produced after it joined)."""
    deadline = time.monotonic() + WARMUP_S
    produced = time.monotonic()
    while time.monotonic() < deadline:
        if consumer.poll(0.2):
            return True
        if time.monotonic() - produced > 1.0:
            produce()
            produced = time.monotonic()
    return False
