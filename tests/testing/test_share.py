"""The testkit's share-group parts: the ``share_broker`` settings and the group config helper.

Checked against Kafka 4.4.0 with confluent-kafka's ShareConsumer as the client: a group's
short record lock really expires (another member gets the record with delivery count 2), its
delivery attempt limit really archives a record, and the broker's bounds are what
``share_broker_config`` says (a default broker refuses a 1 s lock).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from kafka_actors.testing import (
    KafkaBroker,
    ShareGroupConfigError,
    describe_share_group_config,
    set_share_group_config,
    share_broker_config,
)


def test_share_broker_config_lowers_the_lock_bound_and_checks_its_arguments() -> None:
    config = share_broker_config()
    assert config["group.share.min.record.lock.duration.ms"] == 1000
    assert config["group.share.record.lock.duration.ms"] == 10_000
    assert "group.share.delivery.count.limit" not in config  # Kafka's default (5) unless asked
    assert share_broker_config(2000, 3)["group.share.delivery.count.limit"] == 3
    long = share_broker_config(120_000)
    assert long["group.share.max.record.lock.duration.ms"] == 120_000
    with pytest.raises(ValueError, match=r"lock\.duration"):
        share_broker_config(999)
    with pytest.raises(ValueError, match=r"delivery\.count\.limit"):
        share_broker_config(delivery_count_limit=1)
    with pytest.raises(ValueError, match=r"delivery\.count\.limit"):
        share_broker_config(delivery_count_limit=11)


@pytest.mark.broker
def test_group_config_is_set_and_described(share_broker: KafkaBroker) -> None:
    described = set_share_group_config(
        share_broker,
        "cfg-set-and-described",
        record_lock_duration_ms=1000,
        delivery_count_limit=2,
        config={"share.heartbeat.interval.ms": 200},
    )
    assert described["share.auto.offset.reset"] == "earliest"
    assert described["share.record.lock.duration.ms"] == "1000"
    assert described["share.delivery.count.limit"] == "2"
    assert described["share.heartbeat.interval.ms"] == "200"
    again = describe_share_group_config(share_broker.bootstrap_servers, "cfg-set-and-described")
    assert again == described
    # A group that sets nothing reads the broker's defaults of share_broker_config().
    fresh = describe_share_group_config(share_broker, "cfg-never-set")
    assert fresh["share.record.lock.duration.ms"] == "10000"
    assert fresh["share.auto.offset.reset"] == "latest"


@pytest.mark.broker
@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"record_lock_duration_ms": 999}, "at least 1000"),
        ({"record_lock_duration_ms": 70_000}, "range 1000 to 60000"),
        ({"delivery_count_limit": 1}, "at least 2"),
        ({"delivery_count_limit": 11}, "range 2 to 10"),
        ({"config": {"no.such.group.config": 1}}, "no.such.group.config"),
        ({"auto_offset_reset": "nowhere"}, "share.auto.offset.reset"),
    ],
)
def test_refused_group_config_raises_with_the_brokers_reason(
    share_broker: KafkaBroker, kwargs: dict[str, Any], reason: str
) -> None:
    with pytest.raises(ShareGroupConfigError, match=reason):
        set_share_group_config(share_broker, "cfg-refused", **kwargs)


@pytest.mark.broker
def test_a_default_broker_refuses_a_short_lock(kafka_broker: KafkaBroker) -> None:
    # Why share_broker exists: Kafka's default bound is 15 s.
    with pytest.raises(ShareGroupConfigError, match="range 15000 to 60000"):
        set_share_group_config(kafka_broker, "cfg-default-broker", record_lock_duration_ms=1000)


def _produce(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    for i in range(n):
        producer.produce(topic, b"v%d" % i, b"k%d" % i)
    assert producer.flush(30) == 0


def _share_consumer(bootstrap: str, group: str, topic: str) -> Any:
    from confluent_kafka import ShareConsumer

    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "log_level": 0,
        }
    )
    consumer.subscribe([topic])
    return consumer


def _poll_until(
    consumer: Any, want: Callable[[list[Any]], bool], timeout: float, ack: Any = None
) -> list[Any]:
    """Poll until ``want(records so far)``; with ``ack``, acknowledge each record so."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while not want(got) and time.monotonic() < deadline:
        for m in consumer.poll(0.5):
            if m.error() is None:
                got.append(m)
                if ack is not None:
                    consumer.acknowledge(m, ack)
    return got


@pytest.mark.broker
def test_a_short_group_lock_expires_and_the_delivery_limit_archives(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    """Member A acquires records and holds them; after the group's 2 s lock member B gets
    them with delivery count 2, releases them, and with the group's limit of 2 they are
    archived: nobody gets them a third time."""
    from confluent_kafka import AcknowledgeType

    topic = kafka_topic(share_broker)
    group = share_group(record_lock_duration_ms=2000, delivery_count_limit=2)
    _produce(share_broker.bootstrap_servers, topic, 5)
    a = _share_consumer(share_broker.bootstrap_servers, group, topic)
    b = None
    try:
        held = _poll_until(a, bool, 60.0)
        assert held, "member A got nothing"
        held_offsets = {m.offset() for m in held}
        assert all(m.delivery_count() == 1 for m in held)
        # A neither acknowledges nor polls again: its locks run out after 2 s.
        b = _share_consumer(share_broker.bootstrap_servers, group, topic)
        release = AcknowledgeType.RELEASE

        def counts(got: list[Any]) -> dict[int, list[int]]:
            seen: dict[int, list[int]] = {}
            for m in got:
                seen.setdefault(m.offset(), []).append(m.delivery_count())
            return seen

        got = _poll_until(b, lambda got: held_offsets <= counts(got).keys(), 60.0, release)
        seen = counts(got)
        assert held_offsets <= seen.keys(), f"B never got {held_offsets - seen.keys()}"
        for offset in held_offsets:
            assert seen[offset][0] == 2, f"offset {offset}: delivery counts {seen[offset]}"
        b.commit_sync(30)
        # Released at delivery 2 = the limit: archived. None of A's batch comes back within
        # more than two lock durations.
        later = _poll_until(b, lambda got: False, 5.0, release)
        assert not {m.offset() for m in later} & held_offsets
    finally:
        a.close()
        if b is not None:
            b.close()


@pytest.mark.broker
def test_cli_broker_with_share_groups_has_the_share_settings() -> None:
    import signal

    from tests.testing.test_cli_cleanup import _first_line, _spawn

    proc = _spawn(["-m", "kafka_actors.testing", "broker", "--share-groups"])
    try:
        bootstrap = _first_line(proc)
        # Accepted only where the lock's lower bound was lowered (Kafka's default is 15 s).
        described = set_share_group_config(bootstrap, "cli", record_lock_duration_ms=1000)
        assert described["share.record.lock.duration.ms"] == "1000"
        assert describe_share_group_config(bootstrap, "other")[
            "share.record.lock.duration.ms"
        ] == str(share_broker_config()["group.share.record.lock.duration.ms"])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
