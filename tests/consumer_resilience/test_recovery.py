"""Show 5 of the KafkaConsumer issue: member fencing, coordinator loss and leader change on a
3-broker cluster of this module's own (brokers are killed: no other test shares it).

One member consumes a replicated 6-partition topic while a producer keeps writing (acks=all,
idempotent), committing what it processed (commit_async every 0.5 s, commit_sync in
``on_partitions_revoked``). In turn:

1. fencing: the next group heartbeat answers FENCED_MEMBER_EPOCH (KIP-848) or
   UNKNOWN_MEMBER_ID (classic), injected through the consumer's FaultInjector: the member
   gives up its partitions (``on_partitions_lost``), rejoins, and consumes again;
2. coordinator loss, injected: NOT_COORDINATOR on the next heartbeat and the next
   OffsetCommit: the member rediscovers the coordinator and goes on;
3. coordinator loss, real: the broker that coordinates the group is killed (SIGKILL);
4. leader change: the broker leading some partitions is killed.

After each step the member must consume again (records produced after the step, of every
partition). Throughout, a separate consumer of the same group reads the committed offsets
(OffsetFetch through ``committed()``) every 0.3 s: they never go backwards. At the end every
record was processed and the committed offsets are the end offsets. Duplicates (records
processed again after lost partitions or failed commits) are counted and printed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from kafka_actors import KafkaConsumer, TopicPartition
from kafka_actors.errors import KafkaError
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.supervisors import FaultInjector
from kafka_actors.testing.broker import KafkaCluster
from tests.consumer.helpers import broker_index, leaders_of, unique
from tests.consumer_resilience.common import (
    PROTOCOLS,
    Member,
    PacedProducer,
    admin_committed,
    end_offsets,
    member_config,
    wait_until,
)

pytestmark = pytest.mark.cluster

PARTITIONS = 6
NOT_COORDINATOR = 16
UNKNOWN_MEMBER_ID = 25
FENCED_MEMBER_EPOCH = 110


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    """Three brokers and a controller for this module alone (its tests kill brokers)."""
    with KafkaCluster(num_brokers=3) as c:
        yield c


class CommittedWatch:
    """Reads the group's committed offsets every ``interval`` s from a consumer that is not a
    member, and records every time one went backwards."""

    def __init__(self, bootstrap: str, group: str, topic: str, interval: float = 0.3) -> None:
        self.partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        self.consumer = KafkaConsumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        self.interval = interval
        self.last: dict[TopicPartition, int] = {}
        self.backwards: list[str] = []
        self.reads = 0
        self.failed_reads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="committed-watch", daemon=True)

    def start(self) -> CommittedWatch:
        self._thread.start()
        return self

    def read(self) -> dict[TopicPartition, int]:
        committed = self.consumer.committed(self.partitions, timeout=10)
        return {tp: om.offset for tp, om in committed.items() if om is not None}

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                now = self.read()
            except KafkaError:
                self.failed_reads += 1  # a broker is down: read again later
                continue
            self.reads += 1
            for tp, offset in now.items():
                before = self.last.get(tp)
                if before is not None and offset < before:
                    self.backwards.append(f"{tp}: {before} -> {offset}")
                self.last[tp] = max(offset, before or 0)
            for tp in self.last.keys() - now.keys():
                self.backwards.append(f"{tp}: {self.last[tp]} -> none")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close(timeout=10)


#: Errors of a coordinator that is moving (confluent-kafka does not flag them retriable).
_MOVING = frozenset([14, 15, 16, -185, -195])  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORD..


def _coordinator_of(bootstrap: str, group: str) -> int:
    """The group coordinator's broker id, as FindCoordinator tells confluent-kafka's admin
    (retried while the coordinator moves: COORDINATOR_LOAD_IN_PROGRESS and the like)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while True:
        try:
            futures = admin.describe_consumer_groups([group], request_timeout=30)
            return int(futures[group].result(60).coordinator.id)
        except KafkaException as exc:
            if exc.args[0].code() not in _MOVING or time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_fencing_coordinator_loss_leader_change(cluster: KafkaCluster, protocol: str) -> None:
    bootstrap = cluster.bootstrap_servers
    topic = unique(f"recover-{protocol}")
    cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
    group = unique("recover")
    faults = FaultInjector()
    config = member_config(bootstrap, group, protocol, **{"max.poll.records": 200})
    started = time.monotonic()
    timings: dict[str, float] = {}

    producer = PacedProducer(bootstrap, topic, 10_000_000, rate=1000.0).start()
    member = Member("member", config, topic, commit_every_s=0.5, faults=faults).start()
    watch = CommittedWatch(bootstrap, group, topic).start()
    heartbeat_api = ApiKey.CONSUMER_GROUP_HEARTBEAT if protocol == "consumer" else ApiKey.HEARTBEAT

    def consumed_again(step: str, timeout: float = 120.0) -> None:
        """Wait until records produced after this moment were processed from every
        partition."""
        t0 = time.monotonic()
        mark = producer.produced
        seen_before = len(member.stats.processed)
        per_partition = dict(member.stats.by_partition)

        def fresh_everywhere() -> bool:
            fresh = [i for i in member.stats.processed[seen_before:] if i >= mark]
            counts = member.stats.by_partition
            return len(fresh) >= PARTITIONS * 10 and all(
                counts.get(p, 0) - per_partition.get(p, 0) >= 10 for p in range(PARTITIONS)
            )

        wait_until(
            fresh_everywhere,
            timeout,
            lambda: (
                f"{step}: the member did not consume again "
                f"(poll errors {member.stats.poll_errors[-3:]})"
            ),
        )
        timings[step] = time.monotonic() - t0

    try:
        consumed_again("warm-up")

        # 1. Fencing.
        lost_before = member.stats.lost
        code = FENCED_MEMBER_EPOCH if protocol == "consumer" else UNKNOWN_MEMBER_ID
        faults.error_response(api_key=heartbeat_api, error_code=code, times=1)
        wait_until(lambda: member.stats.lost > lost_before, 60, "partitions never lost")
        consumed_again("fenced")

        # 2. Injected coordinator loss: heartbeat and commit answer NOT_COORDINATOR.
        faults.error_response(api_key=heartbeat_api, error_code=NOT_COORDINATOR, times=1)
        faults.error_response(api_key=ApiKey.OFFSET_COMMIT, error_code=NOT_COORDINATOR, times=1)
        wait_until(lambda: faults.pending() == 0, 60, "the injected errors were not used")
        consumed_again("not-coordinator")

        # 3. The coordinator broker killed.
        coordinator = broker_index(cluster, _coordinator_of(bootstrap, group))
        cluster.kill_broker(coordinator)
        consumed_again("coordinator-killed", timeout=180)
        new_coordinator = _coordinator_of(bootstrap, group)
        assert new_coordinator != cluster.brokers[coordinator].node_id
        cluster.start_broker(coordinator)

        # 4. A partition leader killed (leading the most partitions of the topic).
        leaders = leaders_of(bootstrap, topic)
        busiest = max(set(leaders.values()), key=list(leaders.values()).count)
        victim = broker_index(cluster, busiest)
        cluster.kill_broker(victim)
        consumed_again("leader-killed", timeout=180)
        cluster.start_broker(victim)
        consumed_again("leader-back")

        producer.stop()
        producer.join(120)
        total = producer.produced
        wait_until(
            lambda: set(member.stats.processed) >= set(range(total)),
            120,
            lambda: f"{total - len(set(member.stats.processed))} records never processed",
        )
    finally:
        producer.stop()
        member.close()
        watch.stop()
        cluster.ensure_running()

    ids = member.stats.processed
    ends = end_offsets(bootstrap, topic, PARTITIONS)
    committed_now = admin_committed(bootstrap, group, topic, PARTITIONS)
    print(
        f"\n[recovery {protocol}] produced={total} processed={len(ids)} "
        f"duplicates={len(ids) - len(set(ids))} lost_callbacks={member.stats.lost} "
        f"commit_errors={len(member.stats.commit_errors)} poll_errors={member.stats.poll_errors} "
        f"committed_reads={watch.reads} failed_reads={watch.failed_reads} "
        f"steps={ {k: round(v, 1) for k, v in timings.items()} } "
        f"elapsed={time.monotonic() - started:.1f}s"
    )
    assert set(ids) == set(range(total))
    # Records of a partition after onPartitionsLost/Revoked: a position the member forgot comes
    # back and is committed later, over what the group re-read (committed offsets go back).
    assert not member.stats.unowned_records, member.stats.unowned_records
    assert not watch.backwards, f"committed offsets went backwards: {watch.backwards[:10]}"
    assert watch.reads > 10
    assert committed_now == ends, (committed_now, ends)
