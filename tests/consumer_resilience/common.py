"""Shared pieces of the consumer resilience tests: a paced keyed producer writing unique ids, a
group member running on its own thread (commits in ``on_partitions_revoked``, synchronous or by
deferred reply), and readers of the group's committed offsets.

Owns nothing outside the tests. May touch: the brokers given to it (produce, admin calls).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka_actors import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka_actors.errors import KafkaError

PROTOCOLS = ["consumer", "classic"]


def member_config(bootstrap: str, group: str, protocol: str, **extra: object) -> dict[str, object]:
    """A group member's config: manual commits, small fetch waits, quick classic heartbeats."""
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.max.wait.ms": 100,
        "max.poll.records": 500,
    }
    if protocol == "classic":
        config["heartbeat.interval.ms"] = 500
        config["session.timeout.ms"] = 6000
    config.update(extra)
    return config


def record_id(value: bytes | None) -> int:
    assert value is not None
    return int(value.split(b":", 1)[0])


class PacedProducer:
    """Produces ids ``0 .. count-1`` (value ``b"<id>:x"``, key ``b"k<id % keys>"``) on its own
    thread at about ``rate`` records per second, acks=all, with retries (idempotent: a broker
    killed meanwhile neither loses nor duplicates records), until all are sent or ``stop()``."""

    def __init__(
        self, bootstrap: str, topic: str, count: int, *, rate: float, keys: int = 1024
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.count = count
        self.rate = rate
        self.keys = keys
        self.produced = 0
        self.errors: list[str] = []
        self.done = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def start(self) -> PacedProducer:
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "linger.ms": 20,
                "acks": "all",
                "enable.idempotence": True,
                "log_level": 3,
            }
        )

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))

        started = time.monotonic()
        chunk = max(1, min(1000, int(self.rate // 10)))
        try:
            for first in range(0, self.count, chunk):
                if self._stop.is_set():
                    break
                for i in range(first, min(first + chunk, self.count)):
                    while True:
                        try:
                            producer.produce(
                                self.topic,
                                value=b"%d:x" % i,
                                key=b"k%d" % (i % self.keys),
                                on_delivery=delivered,
                            )
                            break
                        except BufferError:
                            producer.poll(0.1)
                producer.poll(0)
                self.produced = min(first + chunk, self.count)
                ahead = started + self.produced / self.rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            remaining = producer.flush(120)
            if remaining:
                self.errors.append(f"{remaining} records not delivered")
        finally:
            self.done.set()

    def stop(self) -> None:
        """Stop early: ids ``0 .. produced-1`` were produced."""
        self._stop.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert self.done.is_set(), "the producer did not finish"
        assert not self.errors, self.errors[:5]


@dataclass
class MemberStats:
    """What one member did: processed ids, rebalance callbacks, commit outcomes."""

    name: str
    processed: list[int] = field(default_factory=list)
    by_partition: dict[int, int] = field(default_factory=dict)
    revoked: int = 0
    lost: int = 0
    #: Records of lost partitions processed after the last commit this member saw complete:
    #: the most the group may deliver again because of the losses.
    lost_uncommitted: int = 0
    assigned: int = 0
    commits: int = 0
    commit_errors: list[str] = field(default_factory=list)
    poll_errors: list[str] = field(default_factory=list)
    callback_threads: set[str] = field(default_factory=set)
    #: Records handed out for a partition this member did not own by its callbacks (after
    #: onPartitionsRevoked/Lost, before onPartitionsAssigned): the first few, as ``tp@offset``.
    unowned_records: list[str] = field(default_factory=list)


class Member:
    """One group member on its own thread: poll, "process" (record the ids), commit what it
    processed in ``on_partitions_revoked`` and every ``commit_every_s`` (commit_async); each
    non-empty batch takes ``work_s`` seconds to "process".

    ``mode``: ``"sync"`` (commit_sync inside the callback) or ``"deferred"`` (the callback
    defers its reply; another thread commits, then acknowledges)."""

    def __init__(
        self,
        name: str,
        config: dict[str, object],
        topic: str,
        *,
        mode: str = "sync",
        commit_every_s: float | None = 1.0,
        on_batch: Callable[[Member, int], None] | None = None,
        work_s: float = 0.0,
        faults: Any = None,
    ) -> None:
        assert mode in ("sync", "deferred")
        self.name = name
        self.topic = topic
        self.mode = mode
        self.commit_every_s = commit_every_s
        self.on_batch = on_batch
        self.work_s = work_s
        self.stats = MemberStats(name)
        self.positions: dict[TopicPartition, int] = {}
        #: Per owned partition: the first offset processed since it was assigned.
        self.first_offsets: dict[TopicPartition, int] = {}
        #: The highest offsets this member saw committed (its own commits).
        self.committed: dict[TopicPartition, int] = {}
        #: What the rebalance callbacks say this member owns.
        self.owned: set[TopicPartition] = set()
        self.stop = threading.Event()
        self.started = threading.Event()
        self.consumer = KafkaConsumer(config, faults=faults)
        self._committers = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"{name}-committer"
        )
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    # -- the listener --------------------------------------------------------------------------

    def _listener(self) -> ConsumerRebalanceListener:
        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
                member.stats.callback_threads.add(threading.current_thread().name)
                member.stats.revoked += 1
                member.owned.difference_update(revoked)
                offsets = {tp: member.positions.pop(tp) for tp in revoked if tp in member.positions}
                for tp in revoked:
                    member.first_offsets.pop(tp, None)
                if not offsets:
                    return None
                if member.mode == "sync":
                    member._commit(offsets)
                    return None
                reply = member.consumer.defer_rebalance_ack()

                def commit_then_ack() -> None:
                    try:
                        member._commit(offsets)
                    finally:
                        reply.ack()

                member._committers.submit(commit_then_ack)
                return None

            def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
                member.stats.callback_threads.add(threading.current_thread().name)
                member.stats.assigned += 1
                member.owned.update(assigned)

            def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
                # Not ours any more: the group may have given them away already, so a commit
                # would fail (and must not be attempted, as in Java).
                member.stats.lost += 1
                member.owned.difference_update(lost)
                for tp in lost:
                    position = member.positions.pop(tp, None)
                    first = member.first_offsets.pop(tp, None)
                    if position is not None and first is not None:
                        done = max(member.committed.get(tp, first), first)
                        member.stats.lost_uncommitted += max(0, position - done)

        return Listener()

    def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        try:
            self.consumer.commit_sync(offsets, timeout=30)
            self.stats.commits += 1
            self._committed(offsets)
        except KafkaError as exc:
            self.stats.commit_errors.append(f"{type(exc).__name__}: {exc}")

    def _commit_async(self, offsets: dict[TopicPartition, int]) -> None:
        def done(future: concurrent.futures.Future[Any]) -> None:
            if future.exception() is None:
                self._committed(offsets)

        self.consumer.commit_async(offsets).add_done_callback(done)

    def _committed(self, offsets: dict[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            self.committed[tp] = max(offset, self.committed.get(tp, 0))

    # -- the loop ------------------------------------------------------------------------------

    def start(self) -> Member:
        self.consumer.subscribe([self.topic], listener=self._listener())
        self._thread.start()
        return self

    def _run(self) -> None:
        consumer = self.consumer
        last_commit = time.monotonic()
        try:
            while not self.stop.is_set():
                try:
                    records = consumer.poll(0.2)
                except KafkaError as exc:
                    self.stats.poll_errors.append(f"{type(exc).__name__}: {exc}")
                    time.sleep(0.1)
                    continue
                self.started.set()
                by_partition = self.stats.by_partition
                for r in records:
                    tp = TopicPartition(r.topic, r.partition)
                    if tp not in self.owned and len(self.stats.unowned_records) < 20:
                        self.stats.unowned_records.append(f"{tp}@{r.offset}")
                    self.first_offsets.setdefault(tp, r.offset)
                    self.stats.processed.append(record_id(r.value))
                    self.positions[tp] = r.offset + 1
                    by_partition[r.partition] = by_partition.get(r.partition, 0) + 1
                if records and self.work_s:
                    time.sleep(self.work_s)  # "processing": members lag behind the producer
                if self.on_batch is not None:
                    self.on_batch(self, len(records))
                now = time.monotonic()
                if (
                    self.commit_every_s is not None
                    and self.positions
                    and now - last_commit >= self.commit_every_s
                ):
                    last_commit = now
                    self._commit_async(dict(self.positions))
        finally:
            consumer.close(timeout=30)
            self._committers.shutdown(wait=True)

    def close(self, timeout: float = 60.0) -> None:
        """Stop polling and close (on the member's own thread: the revocation commits there)."""
        self.stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self.name} did not close within {timeout}s"

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


def admin_committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as the broker reports them to confluent-kafka's admin
    (a judge independent of our consumer); -1001 where none."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as CkTopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(
        group, [CkTopicPartition(topic, p) for p in range(partitions)]
    )
    result = admin.list_consumer_group_offsets([request])[group].result(60)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    with KafkaConsumer({"bootstrap.servers": bootstrap}) as consumer:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    return {tp.partition: offset for tp, offset in ends.items()}


def set_group_session_timeout(bootstrap: str, group: str, ms: int) -> None:
    """KIP-848 groups take their session timeout from the broker (group config
    ``consumer.session.timeout.ms``), not from the member."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(
                "consumer.session.timeout.ms",
                str(ms),
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(60)


def wait_until(
    condition: Callable[[], bool], timeout: float, message: Callable[[], str] | str
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(message() if callable(message) else message)
        time.sleep(0.1)
