"""Show 6 of the KafkaConsumer issue: a rebalance listener defers its revocation reply, and
another thread commits while the reply is pending (KIP-944's point), under both group
protocols.

Member A consumes; member B joins, so A's ``on_partitions_revoked`` runs (on A's polling
thread). It defers its reply and hands the revoked partitions to a committer thread, which,
while the reply is pending:

* commits (``commit_sync`` with the processed offsets, or with no argument: every consumed
  position) and then ``commit_async`` from that thread: both succeed;
* reads the committed offsets back through a third consumer (``committed()``, OffsetFetch):
  they are exactly the processed offsets (nothing skipped, nothing ahead);
* sees that no member owns the revoked partitions yet (the group waits for the reply);

and only then acknowledges. Meanwhile A keeps polling and never gets a record of a partition
whose revocation is pending. B starts each partition it takes over exactly at the committed
offset, and across A and B every record is processed once.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kafka_actors import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord
from tests.consumer.helpers import produce, unique
from tests.consumer_resilience.common import PROTOCOLS, member_config, wait_until

pytestmark = pytest.mark.broker

PARTITIONS = 4
TOTAL = 2000


@pytest.mark.timeout(240)
@pytest.mark.parametrize("what", ["offsets", "consumed"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_commit_from_another_thread_while_revocation_reply_pending(
    kafka_broker: Any, protocol: str, what: str
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique(f"deferred-{protocol}-{what}")
    kafka_broker.create_topic(topic, partitions=PARTITIONS)
    produce(bootstrap, topic, TOTAL)
    group = unique("deferred")
    everything = {TopicPartition(topic, p) for p in range(PARTITIONS)}
    config = member_config(bootstrap, group, protocol, **{"max.poll.records": 10})

    consumer_a = KafkaConsumer(config)
    consumer_b = KafkaConsumer(config)
    watcher = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    processed_a: dict[TopicPartition, int] = {}
    processed_b: dict[TopicPartition, int] = {}
    records_a: list[ConsumerRecord] = []
    records_b: list[ConsumerRecord] = []
    pending: set[TopicPartition] = set()
    checked: list[dict[TopicPartition, int]] = []  # committed offsets seen while pending
    problems: list[str] = []
    closing = threading.Event()

    def committer(
        revoked: set[TopicPartition], snapshot: dict[TopicPartition, int], reply: Any
    ) -> None:
        try:
            if what == "offsets":
                result = consumer_a.commit_sync(snapshot, timeout=30)
            else:
                result = consumer_a.commit_sync(timeout=30)  # every consumed position
            got = {tp: om.offset for tp, om in result.items() if tp in snapshot}
            if got != snapshot:
                problems.append(f"commit_sync committed {got}, processed {snapshot}")
            consumer_a.commit_async(snapshot).result(30)
            seen = watcher.committed(revoked, timeout=30)
            offsets = {tp: om.offset for tp, om in seen.items() if om is not None}
            offsets = {tp: offset for tp, offset in offsets.items() if tp in snapshot}
            if offsets != snapshot:
                problems.append(f"committed() reads {offsets}, processed {snapshot}")
            if not closing.is_set():
                taken = consumer_b.assignment() & revoked
                if taken:
                    problems.append(f"{sorted(map(str, taken))} owned by B before the reply")
                time.sleep(0.5)  # A polls on with the reply pending
            checked.append(offsets)
        except BaseException as exc:
            problems.append(f"{type(exc).__name__}: {exc}")
        finally:
            pending.difference_update(revoked)
            reply.ack()

    class Deferring(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
            if not revoked:
                return None
            reply = consumer_a.defer_rebalance_ack()
            pending.update(revoked)
            # Every partition A had records of since it got it: its processed offset; one it
            # read nothing from has nothing to commit and stays out of the checks.
            snapshot = {tp: processed_a.pop(tp) for tp in revoked if tp in processed_a}
            threading.Thread(
                target=committer, args=(set(revoked), snapshot, reply), name="committer"
            ).start()
            return None

    class CommitOnRevoke(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
            offsets = {tp: processed_b.pop(tp) for tp in revoked if tp in processed_b}
            if offsets:
                consumer_b.commit_sync(offsets, timeout=30)

    stop = threading.Event()

    def poll_a() -> None:
        while not stop.is_set():
            for r in consumer_a.poll(0.2):
                tp = TopicPartition(r.topic, r.partition)
                if tp in pending:
                    problems.append(f"A got {tp}@{r.offset} while its revocation was pending")
                records_a.append(r)
                processed_a[tp] = r.offset + 1
            time.sleep(0.1)  # slow (~100 records/s): B gets its share of the backlog

    def poll_b() -> None:
        while not stop.is_set():
            for r in consumer_b.poll(0.2):
                records_b.append(r)
                processed_b[TopicPartition(r.topic, r.partition)] = r.offset + 1

    def processed() -> int:
        return len({(r.partition, r.offset) for r in records_a + records_b})

    threads = [threading.Thread(target=poll_a, name="poll-a", daemon=True)]
    try:
        consumer_a.subscribe([topic], listener=Deferring())
        threads[0].start()
        wait_until(lambda: len(records_a) >= 200, 60, "A consumed nothing")
        assert consumer_a.assignment() == everything
        consumer_b.subscribe([topic], listener=CommitOnRevoke())
        threads.append(threading.Thread(target=poll_b, name="poll-b", daemon=True))
        threads[1].start()
        wait_until(
            lambda: processed() >= TOTAL and bool(checked) and bool(records_b),
            120,
            lambda: f"{processed()} of {TOTAL} processed, {len(checked)} checked commits",
        )
        assignment_b = consumer_b.assignment()
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        closing.set()
        consumer_b.close(timeout=30)
        consumer_a.close(timeout=30)  # its last revocation is deferred too, and commits
    try:
        final = watcher.committed(everything, timeout=30)
    finally:
        watcher.close(timeout=10)

    assert not problems, problems[:5]
    assert assignment_b, "B never got partitions"
    # B continued each partition it took over exactly at the offset A committed.
    first_b: dict[TopicPartition, int] = {}
    for r in records_b:
        first_b.setdefault(TopicPartition(r.topic, r.partition), r.offset)
    for offsets in checked:
        for tp, offset in offsets.items():
            if tp in first_b:
                assert first_b[tp] == offset, (tp, first_b[tp], offset)
    seen = [(r.partition, r.offset) for r in records_a + records_b]
    assert len(seen) == len(set(seen)) == TOTAL, f"{len(seen) - len(set(seen))} twice"
    ends = consumer_ends(bootstrap, everything)
    assert {tp: om.offset if om else None for tp, om in final.items()} == ends


def consumer_ends(bootstrap: str, partitions: set[TopicPartition]) -> dict[TopicPartition, Any]:
    with KafkaConsumer({"bootstrap.servers": bootstrap}) as consumer:
        return dict(consumer.end_offsets(partitions))
