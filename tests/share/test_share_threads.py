"""KafkaShareConsumer called from many threads (issue #13, robustness): like KafkaConsumer
(docs/consumer-architecture.md) every method may be called from any thread. One thread polls
while others commit_async / commit_sync / read metrics / subscription / wakeup: every record is
acknowledged ACCEPT, none is lost or handed out twice in one delivery, no call deadlocks, the
only error poll raises is the WakeupError asked for. close() from another thread while poll
blocks: close finishes and the blocked poll returns or raises a typed error (never hangs).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kafka_actors import KafkaShareConsumer
from kafka_actors.errors import IllegalStateError, KafkaError, WakeupError
from kafka_actors.testing.share import set_share_group_config
from tests.consumer.helpers import produce, unique

TIMEOUT = 120.0


def _config(bootstrap: str, group: str, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "group.id": group, "fetch.max.wait.ms": 100, **extra}


def _topic_and_group(broker: Any, prefix: str, partitions: int) -> tuple[str, str, str]:
    """A new topic and a share group that starts at the earliest offset."""
    bootstrap = broker.bootstrap_servers
    topic, group = unique(prefix), unique(f"{prefix}-g")
    broker.create_topic(topic, partitions=partitions)
    set_share_group_config(bootstrap, group)
    return bootstrap, topic, group


@pytest.mark.broker
@pytest.mark.timeout(300)
def test_calls_from_many_threads_lose_nothing(kafka_broker: Any) -> None:
    bootstrap, topic, group = _topic_and_group(kafka_broker, "share-threads", 2)
    count = 400
    produce(bootstrap, topic, count)
    offsets: dict[tuple[int, int], list[int]] = {}
    errors: list[BaseException] = []
    wakeups = 0
    woken: list[str] = []
    stop = threading.Event()
    consumer = KafkaShareConsumer(_config(bootstrap, group, **{"max.poll.records": 25}))
    try:
        consumer.subscribe([topic])

        def hammer(name: str) -> None:
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    if name == "commit_async":
                        consumer.commit_async()
                    elif name == "commit_sync":
                        consumer.commit_sync(timeout=30.0)
                    elif name == "metrics":
                        view = consumer.metrics()
                        assert view is not None
                    elif name == "subscription":
                        assert consumer.subscription() == {topic}
                    elif name == "wakeup" and i % 20 == 0:
                        consumer.wakeup()
                except WakeupError:
                    # As Java: a wakeup aborts whichever blocking call comes first.
                    woken.append(name)
                except BaseException as exc:
                    errors.append(exc)
                    return
                time.sleep(0.005)

        threads = [
            threading.Thread(target=hammer, args=(n,), daemon=True, name=n)
            for n in ("commit_async", "commit_sync", "metrics", "subscription", "wakeup")
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and len(offsets) < count:
            try:
                batch = consumer.poll(0.5)
            except WakeupError:
                wakeups += 1
                continue
            for r in batch:
                offsets.setdefault((r.partition, r.offset), []).append(r.delivery_count)
        stop.set()
        for t in threads:
            t.join(60.0)
            assert not t.is_alive(), f"{t.name} is stuck"
        assert errors == []
        try:
            consumer.commit_sync(timeout=30.0)
        except WakeupError:  # a wakeup still pending from the hammer
            consumer.commit_sync(timeout=30.0)
    finally:
        stop.set()
        consumer.close(timeout=30.0)
    assert len(offsets) == count
    for key, counts in offsets.items():
        # Delivered again only as a new delivery (the earlier one was not acknowledged).
        assert counts == sorted(set(counts)), (key, counts)
    assert wakeups + len(woken) > 0  # wakeup() from another thread reached a blocking call


@pytest.mark.broker
@pytest.mark.timeout(180)
def test_close_from_another_thread_ends_a_blocked_poll(kafka_broker: Any) -> None:
    bootstrap, topic, group = _topic_and_group(kafka_broker, "share-close-t", 1)
    consumer = KafkaShareConsumer(_config(bootstrap, group))
    consumer.subscribe([topic])
    consumer.poll(1.0)  # joined; the topic is empty
    outcome: list[object] = []

    def poller() -> None:
        try:
            outcome.append(consumer.poll(60.0))
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=poller, daemon=True)
    t.start()
    time.sleep(1.0)
    closer_done = threading.Event()

    def closer() -> None:
        consumer.close(timeout=20.0)
        closer_done.set()

    c = threading.Thread(target=closer, daemon=True)
    c.start()
    c.join(45.0)
    t.join(45.0)
    try:
        assert closer_done.is_set(), "close() from another thread did not finish"
        assert not t.is_alive(), "poll blocked after close()"
        assert len(outcome) == 1
        result = outcome[0]
        if isinstance(result, BaseException):
            assert isinstance(result, KafkaError), repr(result)
        else:
            assert len(result) == 0  # type: ignore[arg-type]
    finally:
        consumer.close(timeout=10.0)


@pytest.mark.broker
@pytest.mark.timeout(300)
def test_explicit_acknowledgements_from_worker_threads(kafka_broker: Any) -> None:
    """Explicit mode: the polling thread hands each record to two worker threads that both
    acknowledge it ACCEPT at once: exactly one of them succeeds (the other gets
    IllegalStateError, nothing is acknowledged twice), every record's acceptance is reported
    committed, none is delivered again."""
    bootstrap, topic, group = _topic_and_group(kafka_broker, "share-threads-x", 2)
    count = 200
    produce(bootstrap, topic, count)
    committed: dict[tuple[int, int], int] = {}
    failed: list[KafkaError] = []

    def on_commit(offsets: dict[Any, set[int]], error: KafkaError | None) -> None:
        if error is not None:
            failed.append(error)
            return
        for tp, offs in offsets.items():
            for o in offs:
                committed[(tp.partition, o)] = committed.get((tp.partition, o), 0) + 1

    delivered: dict[tuple[int, int], list[int]] = {}
    outcomes: list[str] = []
    lock = threading.Lock()
    consumer = KafkaShareConsumer(
        _config(
            bootstrap,
            group,
            **{"share.acknowledgement.mode": "explicit", "max.poll.records": 20},
        )
    )
    consumer.set_acknowledgement_commit_callback(on_commit)
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and len(delivered) < count:
            batch = list(consumer.poll(0.5))
            for r in batch:
                delivered.setdefault((r.partition, r.offset), []).append(r.delivery_count)

            def ack(record: Any) -> None:
                try:
                    consumer.acknowledge(record)
                    result = "ok"
                except IllegalStateError:
                    result = "refused"
                except BaseException as exc:
                    result = repr(exc)
                with lock:
                    outcomes.append(result)

            workers = [threading.Thread(target=ack, args=(r,)) for r in batch for _ in range(2)]
            for w in workers:
                w.start()
            for w in workers:
                w.join(30.0)
                assert not w.is_alive(), "acknowledge() blocked"
            if batch:
                consumer.commit_async()
        consumer.commit_sync(timeout=30.0)
    finally:
        consumer.close(timeout=30.0)
    assert len(delivered) == count
    assert all(len(c) == 1 for c in delivered.values()), "a record was delivered again"
    assert sorted(set(outcomes)) == ["ok", "refused"], set(outcomes)
    assert outcomes.count("ok") == count and outcomes.count("refused") == count
    assert failed == []
    assert set(committed) == set(delivered)
    assert all(n == 1 for n in committed.values())


@pytest.mark.broker
@pytest.mark.timeout(180)
def test_close_twice_at_once_while_other_threads_call(kafka_broker: Any) -> None:
    """close() from two threads at once while one thread polls, another commits and a third
    reads metrics: both closes return, poll and commit_sync end with a typed error
    (ConsumerClosedError or the like), metrics() still answers, no call hangs."""
    bootstrap, topic, group = _topic_and_group(kafka_broker, "share-close2", 1)
    produce(bootstrap, topic, 50)
    consumer = KafkaShareConsumer(_config(bootstrap, group, **{"max.poll.records": 5}))
    consumer.subscribe([topic])
    consumer.poll(5.0)
    ended: dict[str, BaseException | None] = {}
    closed = threading.Event()

    def loop(name: str) -> None:
        try:
            # metrics() stays readable after close (as KafkaConsumer's, and Java's).
            while name != "metrics" or not closed.is_set():
                if name == "poll":
                    consumer.poll(0.2)
                elif name == "commit":
                    consumer.commit_sync(timeout=10.0)
                else:
                    consumer.metrics()
        except BaseException as exc:
            ended[name] = exc

    callers = [
        threading.Thread(target=loop, args=(n,), daemon=True) for n in ("poll", "commit", "metrics")
    ]
    for t in callers:
        t.start()
    time.sleep(1.0)
    closers = [threading.Thread(target=consumer.close, args=(20.0,), daemon=True) for _ in range(2)]
    for c in closers:
        c.start()
    for t in closers:
        t.join(60.0)
    assert not any(t.is_alive() for t in closers), "close() hung"
    closed.set()
    for t in callers:
        t.join(60.0)
    stuck = [n for n, t in zip(("poll", "commit", "metrics"), callers, strict=True) if t.is_alive()]
    assert stuck == [], f"{stuck} did not end after close()"
    for name in ("poll", "commit"):
        assert isinstance(ended.get(name), KafkaError), (name, ended.get(name))
    with pytest.raises(KafkaError):
        consumer.poll(0.1)
