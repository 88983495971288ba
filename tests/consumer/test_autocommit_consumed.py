"""Auto-commit never commits past what the application received.

Invariant (Java's: auto-commit runs in poll() before it returns new records): at any time the
committed offset of a partition is at most the offset after the last record poll() returned
before, never the offset after records the current poll() is about to return, nor after
records dropped because their partition is being revoked. A commit past them loses those
records when the consumer dies right after (or when the partition's next owner starts there).

The races are made deterministic by widening the window between the fetch actor's collect
(which moves the fetch position) and the hand-out of those records: the window is where the
commit actor may process a PollEvent told just before the collect (a waiting poll tells one
every 100 ms), or where the membership actor may start a revocation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from kafka_actors import KafkaConsumer, TopicPartition
from kafka_actors.actors.events import PollEvent
from kafka_actors.protocol.records.decode import ConsumerRecord
from kafka_actors.protocol.subscription import FetchPosition
from tests.consumer.helpers import base_config, produce, unique

pytestmark = pytest.mark.broker


def _committed(consumer: KafkaConsumer, tp: TopicPartition) -> int:
    value = consumer.committed(tp, timeout=30)[tp]
    return -1 if value is None else value.offset


def _widen_hand_out_window(consumer: KafkaConsumer, during: Any) -> None:
    """Run ``during(records)`` between the collect and the hand-out of every batch."""
    original = consumer.core.handout.hand_out

    def hand_out(
        records: Mapping[TopicPartition, tuple[ConsumerRecord, ...]],
        positions: Mapping[TopicPartition, FetchPosition],
    ) -> Any:
        if any(records.values()):
            during(records)
        return original(records, positions)

    consumer.core.handout.hand_out = hand_out  # type: ignore[method-assign]


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_auto_commit_on_poll_never_covers_the_batch_being_returned(
    kafka_broker: Any, protocol: str
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique(f"acc-{protocol}")
    tp = TopicPartition(topic, 0)
    kafka_broker.create_topic(topic, partitions=1)
    produce(bootstrap, topic, 60, partition=0)
    config = base_config(
        bootstrap,
        **{
            "group.id": unique("g"),
            "group.protocol": protocol,
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 1,
            "max.poll.records": 10,
        },
    )
    with KafkaConsumer(config) as consumer:
        consumer.subscribe([topic])

        def during(records: Mapping[TopicPartition, tuple[ConsumerRecord, ...]]) -> None:
            # The PollEvent of this poll reaches the commit actor now (after the collect).
            consumer._facade.tell("commit", PollEvent(None, waiting=True))
            time.sleep(0.3)

        _widen_hand_out_window(consumer, during)
        returned_before = -1  # offset after the last record returned by previous polls
        received = 0
        violations: list[tuple[int, int]] = []
        deadline = time.monotonic() + 90
        while received < 60:
            assert time.monotonic() < deadline, f"only {received} of 60 records arrived"
            records = list(consumer.poll(0.5))
            if not records:
                continue
            # The application crashes here, before processing the batch: what was committed
            # must not pass the start of this batch.
            committed = _committed(consumer, tp)
            if committed > max(returned_before, records[0].offset):
                violations.append((committed, records[0].offset))
            received += len(records)
            returned_before = records[-1].offset + 1
        assert violations == [], (
            "auto-commit committed past the batch being returned (committed, batch start): "
            f"{violations}"
        )
        # Auto-commit still covers everything once the application polls again.
        deadline = time.monotonic() + 30
        while _committed(consumer, tp) != 60:
            assert time.monotonic() < deadline, "auto-commit of the last batch never came"
            consumer.poll(0.2)


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_commit_before_revocation_never_covers_records_dropped_in_the_window(
    kafka_broker: Any, protocol: str
) -> None:
    """A second member joins while the first has collected records it has not handed out:
    the revocation (and its auto-commit) lands in the window; the records of the revoked
    partitions are dropped, so the commit before the revocation must not cover them."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique(f"rev-{protocol}")
    group = unique("g")
    kafka_broker.create_topic(topic, partitions=2)
    for partition in (0, 1):
        produce(bootstrap, topic, 40, partition=partition)
    config = base_config(
        bootstrap,
        **{
            "group.id": group,
            "group.protocol": protocol,
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 600_000,  # only the commit before the revocation
            "max.poll.records": 200,  # the first batch holds both partitions
        },
    )
    if protocol == "classic":
        config.update(
            {
                "heartbeat.interval.ms": 200,
                "session.timeout.ms": 10_000,
                "partition.assignment.strategy": "range",  # eager: pause, commit, revoke
            }
        )
    else:
        from tests.aio.helpers import fast_group_heartbeats

        fast_group_heartbeats(bootstrap, group, 300)
    first = KafkaConsumer(config)
    checker = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    second: KafkaConsumer | None = None
    # Per revoked partition: (first offset dropped in the window, committed meanwhile).
    window: dict[TopicPartition, tuple[int, int]] = {}
    second_joins = threading.Event()
    stop = threading.Event()
    thread = threading.Thread(target=lambda: run_second(), daemon=True)
    try:
        first.subscribe([topic])
        subs = first._ctx.subscriptions

        def during(records: Mapping[TopicPartition, tuple[ConsumerRecord, ...]]) -> None:
            if second_joins.is_set():
                return
            second_joins.set()
            deadline = time.monotonic() + 60
            revoking: list[TopicPartition] = []
            while not revoking and time.monotonic() < deadline:
                # As the waiting poll would: tell the group actors the application polls.
                first._facade.tell("membership", PollEvent(None, waiting=True))
                time.sleep(0.1)
                revoking = [t for t in records if subs.is_pending_revocation(t)]
            for t in revoking:  # let the commit before the revocation land
                committed = -1
                until = time.monotonic() + 15
                while committed < 0 and time.monotonic() < until:
                    committed = _committed(checker, t)
                    time.sleep(0.1)
                window[t] = (records[t][0].offset, committed)

        _widen_hand_out_window(first, during)

        def run_second() -> None:
            nonlocal second
            second_joins.wait(120)
            if stop.is_set():
                return
            second = KafkaConsumer({**config, "enable.auto.commit": False})
            second.subscribe([topic])
            while not stop.is_set():
                second.poll(0.1)
            second.close(timeout=10)

        thread.start()
        deadline = time.monotonic() + 120
        while not second_joins.is_set():
            assert time.monotonic() < deadline, "no records arrived"
            first.poll(0.2)
        assert window, "no partition of the collected batch was revoked in the window"
        for t, (dropped_from, committed) in window.items():
            assert 0 <= committed <= dropped_from, (
                f"{t}: committed {committed} before the revocation, but records from "
                f"{dropped_from} on were never handed out to the application"
            )
    finally:
        stop.set()
        second_joins.set()
        thread.join(60)
        first.close(timeout=10)
        checker.close(timeout=10)
