"""Show 4 (issue #13): implicit vs explicit acknowledgement, commit_sync / commit_async with
the acknowledgement-commit callback reporting per-partition results (on the application's
thread), and close acknowledging what is pending. Real Kafka 4.4 broker (``share_broker``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from kafka_actors.testing import KafkaBroker
from tests.share.helpers import (
    first_batch,
    poll_for,
    produce,
    share_api,
    share_config,
)


class Callback:
    """Records each acknowledgement-commit callback: offsets, error, calling thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[Any, set[int]], object, int]] = []

    def __call__(self, offsets: dict[Any, set[int]], error: object) -> None:
        self.calls.append(({tp: set(o) for tp, o in offsets.items()}, error, threading.get_ident()))

    def offsets(self) -> dict[tuple[str, int], set[int]]:
        out: dict[tuple[str, int], set[int]] = {}
        for offsets, _, _ in self.calls:
            for tp, offs in offsets.items():
                out.setdefault((tp.topic, tp.partition), set()).update(offs)
        return out


@pytest.mark.broker
def test_implicit_mode_accepts_a_poll_at_the_next_poll_commit_or_close(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    ka = share_api()
    from kafka_actors.errors import IllegalStateError

    topic, group = kafka_topic(share_broker), share_group()
    n = 12
    produce(share_broker.bootstrap_servers, topic, n)
    callback = Callback()
    config = share_config(share_broker, group, max_poll_records=4)  # implicit: the default
    seen: list[int] = []
    with ka.KafkaShareConsumer(config) as consumer:
        consumer.set_acknowledgement_commit_callback(callback)
        consumer.subscribe([topic])
        first = first_batch(consumer)
        assert 0 < len(first) <= 4
        with pytest.raises(IllegalStateError):
            consumer.acknowledge(first[0], ka.AcknowledgeType.ACCEPT)  # explicit mode only
        seen += [r.offset for r in first]
        assert callback.calls == []  # nothing acknowledged yet
        # commit_sync acknowledges the last poll's records (ACCEPT) and reports per partition.
        result = consumer.commit_sync(30.0)
        assert result == {ka.TopicPartition(topic, 0): None}
        assert callback.offsets() == {(topic, 0): set(seen)}
        # Further polls acknowledge the previous poll's records; close acknowledges the last.
        seen += [
            r.offset for r in poll_for(consumer, 60.0, until=lambda g: len(seen) + len(g) >= n)
        ]
    assert sorted(seen) == list(range(n))
    assert callback.offsets() == {(topic, 0): set(range(n))}
    assert all(error is None for _, error, _ in callback.calls)
    assert {ident for _, _, ident in callback.calls} == {threading.get_ident()}
    with ka.KafkaShareConsumer(config) as late:  # all ACCEPTed: nothing left for anyone
        late.subscribe([topic])
        assert poll_for(late, 4.0) == []


@pytest.mark.broker
def test_explicit_mode_needs_every_record_acknowledged_before_the_next_poll(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    ka = share_api()
    from kafka_actors.errors import IllegalStateError

    topic, group = kafka_topic(share_broker), share_group()
    produce(share_broker.bootstrap_servers, topic, 6)
    config = share_config(share_broker, group, share_acknowledgement_mode="explicit")
    with ka.KafkaShareConsumer(config) as consumer:
        consumer.subscribe([topic])
        batch = first_batch(consumer)
        with pytest.raises(IllegalStateError):
            consumer.poll(0.5)  # the batch is not acknowledged: an error, nothing handed out
        consumer.acknowledge(batch[0], ka.AcknowledgeType.ACCEPT)
        with pytest.raises(IllegalStateError):
            consumer.acknowledge(batch[0], ka.AcknowledgeType.ACCEPT)  # already acknowledged
        if len(batch) > 1:
            with pytest.raises(IllegalStateError):
                consumer.poll(0.5)  # still one short
        for r in batch[1:]:
            consumer.acknowledge(r, ka.AcknowledgeType.ACCEPT)
        result = consumer.commit_sync(30.0)
        assert result == {ka.TopicPartition(topic, 0): None}
        rest = poll_for(
            consumer, 60.0, until=lambda g: len(batch) + len(g) >= 6, ack=ka.AcknowledgeType.ACCEPT
        )
        offsets = sorted(r.offset for r in [*batch, *rest])
        assert offsets == list(range(6))  # the IllegalStateError polls handed out nothing


@pytest.mark.broker
def test_commit_async_reports_each_partition_to_the_callback(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    ka = share_api()
    partitions = 3
    topic, group = kafka_topic(share_broker, partitions), share_group()
    for p in range(partitions):
        produce(share_broker.bootstrap_servers, topic, 5, partition=p)
    callback = Callback()
    config = share_config(share_broker, group, share_acknowledgement_mode="explicit")
    acknowledged: dict[tuple[str, int], set[int]] = {}
    with ka.KafkaShareConsumer(config) as consumer:
        consumer.set_acknowledgement_commit_callback(callback)
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(acknowledged) < partitions and time.monotonic() < deadline:
            for r in consumer.poll(0.5):
                consumer.acknowledge(r, ka.AcknowledgeType.ACCEPT)
                acknowledged.setdefault((r.topic, r.partition), set()).add(r.offset)
            assert consumer.commit_async() is None  # sends now, reports later
        assert len(acknowledged) == partitions
        # The results reach the callback during a later poll (or commit_sync / close).
        deadline = time.monotonic() + 30
        while callback.offsets() != acknowledged and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert callback.offsets() == acknowledged
    # One call per partition result, each without error, each on this thread.
    assert all(len(offsets) == 1 for offsets, _, _ in callback.calls), callback.calls
    assert all(error is None for _, error, _ in callback.calls)
    assert {ident for _, _, ident in callback.calls} == {threading.get_ident()}


@pytest.mark.broker
def test_close_sends_pending_acknowledgements_and_releases_the_rest(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    """Explicit mode: half of a batch acknowledged ACCEPT but not committed, half not
    acknowledged at all, then close(). The accepted half is never delivered again; the other
    half comes to a new member at once (delivery count 2) — long before the group's 60 s lock
    would have run out, so close released it."""
    ka = share_api()
    topic = kafka_topic(share_broker)
    group = share_group(record_lock_duration_ms=60_000)
    n = 10
    produce(share_broker.bootstrap_servers, topic, n)
    config = share_config(share_broker, group, share_acknowledgement_mode="explicit")
    consumer = ka.KafkaShareConsumer(config)
    consumer.subscribe([topic])
    batch = first_batch(consumer)
    accepted = {r.offset for r in batch[: len(batch) // 2]}
    for r in batch[: len(batch) // 2]:
        consumer.acknowledge(r, ka.AcknowledgeType.ACCEPT)
    consumer.close(30.0)
    consumer.close(30.0)  # idempotent
    held = {r.offset for r in batch} - accepted
    with ka.KafkaShareConsumer(config) as other:
        other.subscribe([topic])
        got = poll_for(
            other,
            40.0,
            until=lambda g: len(g) >= n - len(accepted),
            ack=ka.AcknowledgeType.ACCEPT,
        )
        other.commit_sync(30.0)
    offsets = [r.offset for r in got]
    assert sorted(offsets) == sorted(set(range(n)) - accepted), (accepted, offsets)
    for r in got:
        assert r.delivery_count == (2 if r.offset in held else 1), (r.offset, r.delivery_count)
