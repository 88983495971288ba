"""Flow control against Thespian's transport limits (real broker, multiprocTCPBase).

Thespian's TCP transport (thespian/system/transport/asyncTransportBase.py) keeps 20 transmits
in flight per actor process and queues the rest; from 950 queued the sender blocks in send
until the queue drains, beyond DROP_TRANSMITS_LEVEL (1050) queued transmits it fails new sends,
and a transmit queued longer than the transmit period fails, all without telling the sending
actor. A subscriber that requests
ten million records at once from a bridge fed by a fast producer must still receive every
record exactly once, in order per partition: the bridge keeps at most
``max_in_flight_batches`` batches unacknowledged whatever the demand.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from kafka_actors.thespian import (
    BridgeStats,
    Configure,
    Configured,
    GetStats,
    KafkaBridge,
    Subscribe,
    Subscribed,
)
from tests.consumer.helpers import unique
from tests.thespian.actors import Count, GetCount, RecordingSubscriber, SetMode
from tests.thespian.conftest import start_actor_system, stop_actor_system
from tests.thespian.test_bridge import bridge_config, by_partition, close, state

pytestmark = [pytest.mark.broker, pytest.mark.timeout(600)]

RECORDS = 120_000
PARTITIONS = 4
BATCH = 25  # small batches: RECORDS / BATCH = 4800 messages, over four times the drop level
WINDOW = 16


def produce_fast(bootstrap: str, topic: str, count: int, done: threading.Event) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    try:
        for i in range(count):
            while True:
                try:
                    p.produce(topic, key=f"k{i % 101}".encode(), value=f"v-{i}".encode())
                    break
                except BufferError:
                    p.poll(0.05)
            if i % 10_000 == 0:
                p.poll(0)
        assert p.flush(120) == 0
    finally:
        done.set()


def test_huge_demand_gets_every_record_exactly_once(kafka_broker: Any) -> None:
    asys = start_actor_system("multiprocTCPBase")
    try:
        run(asys, kafka_broker, RECORDS, delay_ms=1.0)
    finally:
        stop_actor_system(asys)


def test_slow_subscriber_loses_nothing_to_expired_transmits(
    kafka_broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queued transmit that waits longer than Thespian's transmit period (default five
    minutes, THESPIAN_TRANSMIT_TIMEOUT_PERIOD) fails silently: a bridge that queues hundreds of
    batches ahead of a slow subscriber loses them (seen before the window: 28,050 of 40,000
    records). Here the period is ten seconds and the subscriber takes 20 ms a batch, so a queue
    of 500 batches would already expire; the window keeps the wait far below it."""
    import thespian.system.transport as transport

    monkeypatch.setattr(transport, "DEFAULT_MAX_TRANSMIT_PERIOD", timedelta(seconds=10))
    asys = start_actor_system("multiprocTCPBase")  # forked: the actors inherit the period
    try:
        run(asys, kafka_broker, 40_000, delay_ms=20.0)
    finally:
        stop_actor_system(asys)


def run(asys: Any, kafka_broker: Any, total: int, delay_ms: float) -> None:
    topic = unique("th-flood")
    kafka_broker.create_topic(topic, partitions=PARTITIONS)
    bootstrap = kafka_broker.bootstrap_servers
    config = bridge_config(bootstrap, unique("g"), **{"max.poll.records": 500})
    bridge = asys.createActor(KafkaBridge)
    settings = Configure(config, max_batch_records=BATCH, max_in_flight_batches=WINDOW)
    assert isinstance(asys.ask(bridge, settings, 60), Configured)
    sub = asys.createActor(RecordingSubscriber)
    # Ten million records at once and never another Request: only acknowledgements flow back.
    # delay_ms per batch: the subscriber is slower than the bridge could send.
    asys.tell(sub, SetMode(window=10_000_000, replenish=False, delay_ms=delay_ms))

    produced = threading.Event()
    started = time.monotonic()
    producer = threading.Thread(
        target=produce_fast, args=(bootstrap, topic, total, produced), daemon=True
    )
    producer.start()
    assert isinstance(asys.ask(bridge, Subscribe((topic,), sub), 60), Subscribed)

    samples: list[BridgeStats] = []
    deadline = time.monotonic() + 420
    count = 0
    progressed = time.monotonic()
    unanswered = 0  # questions of this test that Thespian lost (or their answers)
    stats: BridgeStats | None = None
    while count < total:
        reply = asys.ask(sub, GetCount(), 20)
        if reply is None:
            unanswered += 1
        else:
            assert isinstance(reply, Count), reply
            if reply.records > count:
                progressed = time.monotonic()
            count = reply.records
        answer = asys.ask(bridge, GetStats(), 20)
        if answer is None:
            unanswered += 1
        else:
            assert isinstance(answer, BridgeStats), answer
            stats = answer
            samples.append(stats)
        now = time.monotonic()
        assert now < deadline and now - progressed < 120, (
            f"{count} of {total} records after {time.monotonic() - started:.0f} s; "
            f"{unanswered} questions unanswered; bridge: {stats}"
        )
        time.sleep(0.5)
    elapsed = time.monotonic() - started
    producer.join(60)
    assert produced.is_set()
    time.sleep(2.0)  # nothing more may come
    final = state(asys, sub)
    close(asys, bridge)

    keys = [(r.partition, r.offset) for r in final.records]
    assert len(keys) == len(set(keys)) == total, "a record was lost or delivered twice"
    parts = by_partition(final.records)
    assert len(parts) == PARTITIONS
    for partition, records in parts.items():
        offsets = [r.offset for r in records]
        assert offsets == list(range(len(offsets))), f"partition {partition} out of order"
    assert max(final.batch_sizes) <= BATCH
    assert max(s.in_flight_batches for s in samples) <= WINDOW
    # Stream messages that overtook others were put back in order (the offsets above), and
    # none is left waiting for a predecessor that never came (a lost transmit).
    assert final.held_early == 0, f"{final.held_early} stream messages wait for a lost one"
    assert final.errors == ()
    print(
        f"\nflood: {total} records in {len(final.batch_sizes)} batches, {elapsed:.1f} s "
        f"({total / elapsed:.0f} records/s), {final.reordered} batches arrived early, "
        f"in flight max {max(s.in_flight_batches for s in samples)}, "
        f"{unanswered} questions of the test unanswered"
    )
