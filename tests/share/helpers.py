"""Helpers of the share-group tests: producing (all at once or trickled while members
consume), the share API, and bookkeeping of who got which offset."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

SYNC = ("KafkaShareConsumer", "AcknowledgeType", "TopicPartition")
ASYNC = (*SYNC, "AsyncKafkaShareConsumer")


def share_api() -> Any:
    """The ``kafka_actors`` module, with its share consumer names (:data:`ASYNC`) loaded: a
    share consumer that cannot be imported fails the test that asks for it (never a skip)."""
    import kafka_actors

    for name in ASYNC:
        getattr(kafka_actors, name)  # lazily imported: an import error surfaces here
    return kafka_actors


def share_config(broker: Any, group: str, **extra: object) -> dict[str, object]:
    """Our share consumer's config for ``group`` on ``broker``; ``extra`` by Kafka's names
    with underscores (``share_acknowledgement_mode="explicit"``)."""
    config: dict[str, object] = {"bootstrap.servers": broker.bootstrap_servers, "group.id": group}
    config.update({k.replace("_", "."): v for k, v in extra.items()})
    return config


def first_batch(consumer: Any, timeout: float = 60.0) -> list[Any]:
    """Poll a sync share consumer until its first non-empty batch."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = list(consumer.poll(0.5))
        if records:
            return records
    raise AssertionError(f"no record within {timeout} s")


def poll_for(consumer: Any, seconds: float, *, until: Any = None, ack: Any = None) -> list[Any]:
    """Poll a sync share consumer for up to ``seconds`` (or until ``until(records so far)``);
    with ``ack``, acknowledge each record so (explicit mode)."""
    got: list[Any] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (until is not None and until(got)):
        for record in consumer.poll(0.5):
            got.append(record)
            if ack is not None:
                consumer.acknowledge(record, ack)
    return got


def value_of(i: int) -> bytes:
    return b"record-%06d" % i


def produce(bootstrap: str, topic: str, n: int, *, start: int = 0, partition: int = 0) -> None:
    """``n`` records ``record-<i>`` (keys ``k<i>``) into ``partition`` of ``topic``, at once."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0})
    for i in range(start, start + n):
        producer.produce(topic, value_of(i), b"k%d" % i, partition=partition)
        producer.poll(0)
    assert producer.flush(60) == 0


@contextmanager
def trickle(
    bootstrap: str, topic: str, n: int, *, every: int = 20, pause: float = 0.05
) -> Iterator[threading.Thread]:
    """Produce ``n`` records in the background, ``every`` at a time with ``pause`` between:
    records arrive while the members already fetch, so that the work spreads over them
    (produced all at once, the first member's fetch would acquire a whole batch)."""
    from confluent_kafka import Producer

    failure: list[BaseException] = []

    def run() -> None:
        try:
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 0})
            for i in range(n):
                producer.produce(topic, value_of(i), b"k%d" % i, partition=0)
                if (i + 1) % every == 0:
                    assert producer.flush(60) == 0
                    time.sleep(pause)
            assert producer.flush(60) == 0
        except BaseException as exc:  # reported by the with block
            failure.append(exc)

    thread = threading.Thread(target=run, name="trickle", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        thread.join(120)
    if failure:
        raise failure[0]
