"""Show 1 (issue #13): four share consumers, two sync and two asyncio, in one share group on a
topic with ONE partition (a consumer group could give it to one member only): every record
is delivered, each is acknowledged ACCEPT once in the run, none is consumed twice while all
acknowledge, and the work spreads over the four. Real Kafka 4.4 broker (``share_broker``)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from kafka_actors.testing import KafkaBroker
from tests.share.helpers import (
    poll_for,
    share_api,
    share_config,
    trickle,
)

N = 2000
WORK_S = 0.01  # each batch "takes" this long: a worker, not a tight loop


@pytest.mark.broker
def test_four_consumers_sync_and_asyncio_share_one_partition(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    ka = share_api()
    topic = kafka_topic(share_broker)
    group = share_group()
    accept = ka.AcknowledgeType.ACCEPT
    config = share_config(
        share_broker, group, share_acknowledgement_mode="explicit", max_poll_records=20
    )
    got: dict[str, list[tuple[int, int]]] = {m: [] for m in ("sync-1", "sync-2", "aio-1", "aio-2")}
    acked: dict[str, list[tuple[int, int, object]]] = {"sync-1": [], "sync-2": []}
    failures: list[BaseException] = []
    stop = threading.Event()
    lock = threading.Lock()

    def total() -> int:
        with lock:
            return len({o for records in got.values() for o, _ in records})

    def sync_worker(name: str) -> None:
        try:
            with ka.KafkaShareConsumer(config) as consumer:

                def on_complete(offsets: dict[Any, set[int]], error: object) -> None:
                    with lock:
                        for tp, offs in offsets.items():
                            acked[name].extend((tp.partition, o, error) for o in offs)

                consumer.set_acknowledgement_commit_callback(on_complete)
                consumer.subscribe([topic])
                while not stop.is_set():
                    records = consumer.poll(0.5)
                    for r in records:
                        assert r.topic == topic and r.partition == 0
                        with lock:
                            got[name].append((r.offset, r.delivery_count))
                        consumer.acknowledge(r, accept)
                    if records:
                        time.sleep(WORK_S)
                consumer.commit_sync(30.0)
        except BaseException as exc:
            failures.append(exc)

    async def async_worker(name: str) -> None:
        async with ka.AsyncKafkaShareConsumer(config) as consumer:
            consumer.subscribe([topic])
            while not stop.is_set():
                records = await consumer.poll(0.5)
                for r in records:
                    with lock:
                        got[name].append((r.offset, r.delivery_count))
                    consumer.acknowledge(r, accept)
                if records:
                    await asyncio.sleep(WORK_S)
            await consumer.commit_sync(30.0)

    def asyncio_thread() -> None:
        async def both() -> None:
            await asyncio.gather(async_worker("aio-1"), async_worker("aio-2"))

        try:
            asyncio.run(both())
        except BaseException as exc:
            failures.append(exc)

    threads = [
        threading.Thread(target=sync_worker, args=("sync-1",), daemon=True),
        threading.Thread(target=sync_worker, args=("sync-2",), daemon=True),
        threading.Thread(target=asyncio_thread, daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        time.sleep(2.0)  # the four join; records then arrive while all of them fetch
        with trickle(share_broker.bootstrap_servers, topic, N):
            deadline = time.monotonic() + 180
            while total() < N and time.monotonic() < deadline and not failures:
                time.sleep(0.2)
        # A little longer: a record delivered twice would show up now.
        time.sleep(2.0)
    finally:
        stop.set()
        for t in threads:
            t.join(90)
    assert not failures, failures
    assert not any(t.is_alive() for t in threads)

    every = [o for records in got.values() for o, _ in records]
    assert sorted(set(every)) == list(range(N)), f"missing: {set(range(N)) - set(every)}"
    assert len(every) == N, "a record was consumed twice"
    assert all(count == 1 for records in got.values() for _, count in records)
    spread = {name: len(records) for name, records in got.items()}
    assert all(spread.values()), f"the work did not reach every consumer: {spread}"
    # The sync consumers' callbacks: each record they got was ACCEPTed once, without error.
    for name in ("sync-1", "sync-2"):
        offsets = sorted(o for _, o, _ in acked[name])
        assert offsets == sorted(o for o, _ in got[name]), name
        assert all(error is None for _, _, error in acked[name]), acked[name][:5]
    # And the broker agrees: a fresh member of the group gets nothing more.
    with ka.KafkaShareConsumer(config) as late:
        late.subscribe([topic])
        assert poll_for(late, 5.0, ack=accept) == []
