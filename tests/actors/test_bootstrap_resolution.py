"""KIP-909, ``bootstrap.resolve.timeout.ms``: with 0 (Java's default) the bootstrap names are
resolved when a consumer is built (an unresolvable one skipped with a warning, none resolvable a
ConfigError); with a positive value they are resolved in the background and retried with the
reconnect backoff, a late name is used once it resolves, and none resolved in time fails the
consumer for good with BootstrapResolutionError, raised by every later call."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Sequence
from typing import Any

import pytest

from kafka_actors import AsyncKafkaConsumer, KafkaConsumer, TopicPartition
from kafka_actors.actors.network import actor as network_actor
from kafka_actors.actors.network.bootstrap import BootstrapResolution, check_bootstrap_resolvable
from kafka_actors.config import ConsumerConfig, parse_bootstrap_servers
from kafka_actors.core import consumer_core
from kafka_actors.errors import BootstrapResolutionError, ConfigError
from kafka_actors.testing import KafkaBroker, capture_logs


def _entry(port: int) -> tuple[Any, ...]:
    return (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", port))


class Dns:
    """A resolver: ``names`` resolve to 127.0.0.1 once they have failed ``fail_first``
    times; any other name is the system's."""

    def __init__(self, names: Sequence[str], fail_first: int = 0) -> None:
        self.names = set(names)
        self.fail_first = fail_first
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> list[tuple[Any, ...]]:
        if host not in self.names:
            return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.calls.append(host)
        if len([c for c in self.calls if c == host]) <= self.fail_first:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [_entry(port)]


def test_the_config_key_is_a_non_negative_long_defaulting_to_zero() -> None:
    assert ConsumerConfig.from_dict({"bootstrap.servers": "h:1"}).bootstrap_resolve_timeout_ms == 0
    config = ConsumerConfig.from_dict(
        {"bootstrap.servers": "h:1", "bootstrap.resolve.timeout.ms": 120_000}
    )
    assert config.bootstrap_resolve_timeout_ms == 120_000
    with pytest.raises(ConfigError) as raised:
        ConsumerConfig.from_dict({"bootstrap.servers": "h:1", "bootstrap.resolve.timeout.ms": -1})
    assert raised.value.key == "bootstrap.resolve.timeout.ms"


def test_construction_check_skips_unresolvable_names_and_refuses_none() -> None:
    servers = parse_bootstrap_servers("gone.test:1,here.test:2,also-gone.test:3")
    dns = Dns(["here.test"])
    with capture_logs() as logs:
        assert check_bootstrap_resolvable(servers, dns) == (servers[1],)
    warned = [e for e in logs if e["event"] == "bootstrap_server_unresolvable"]
    assert [e["address"] for e in warned] == ["gone.test:1", "also-gone.test:3"]
    with pytest.raises(ConfigError) as raised:
        check_bootstrap_resolvable(parse_bootstrap_servers("gone.test:1"), dns)
    assert raised.value.key == "bootstrap.servers"
    assert "No resolvable bootstrap urls" in str(raised.value)


def test_resolution_budget_state_machine() -> None:
    servers = parse_bootstrap_servers("late.test:9092")
    off = BootstrapResolution(0.0, start=100.0)
    assert not off.watching and off.deadline() is None and off.expired(1e9, servers) is None
    watch = BootstrapResolution(2.0, start=100.0)
    assert watch.watching and watch.deadline() == 102.0
    watch.failed("late.test:9092: Name or service not known")
    assert watch.expired(101.9, servers) is None
    error = watch.expired(102.0, servers)
    assert isinstance(error, BootstrapResolutionError)
    assert "late.test:9092" in str(error) and "bootstrap.resolve.timeout.ms=2000" in str(error)
    assert "Name or service not known" in str(error)
    assert watch.failure is error and not watch.watching
    assert watch.expired(200.0, servers) is None  # reported once; kept in .failure
    resolved = BootstrapResolution(2.0, start=100.0)
    resolved.resolved()
    assert not resolved.watching and resolved.expired(1e9, servers) is None


def test_a_consumer_with_no_resolvable_bootstrap_name_is_refused_when_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consumer_core, "system_resolver", Dns([]))
    with pytest.raises(ConfigError) as raised:
        KafkaConsumer({"bootstrap.servers": "nowhere.invalid:9092", "group.id": "g"})
    assert raised.value.key == "bootstrap.servers"


def test_a_name_never_resolved_fails_the_consumer_for_good(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Positive budget: construction does not resolve; once the budget is spent every call
    raises BootstrapResolutionError (poll, a metadata lookup, poll again); close works."""
    dns = Dns(["nowhere.test"], fail_first=10**6)
    monkeypatch.setattr(consumer_core, "system_resolver", Dns([]))  # never asked
    monkeypatch.setattr(network_actor, "system_resolver", dns)
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": "nowhere.test:9092",
            "group.id": "g",
            "bootstrap.resolve.timeout.ms": 1_000,
            "reconnect.backoff.max.ms": 200,
        }
    )
    try:
        consumer.subscribe(["t"])
        deadline = time.monotonic() + 30  # a bound on a hang, not a timing assertion
        while True:
            assert time.monotonic() < deadline, "no BootstrapResolutionError"
            try:
                consumer.poll(0.2)
            except BootstrapResolutionError:
                break
        assert len(dns.calls) >= 2  # retried within the budget
        with pytest.raises(BootstrapResolutionError):
            consumer.list_topics(timeout=5)
        with pytest.raises(BootstrapResolutionError):
            consumer.poll(0)
    finally:
        consumer.close()


def test_the_asyncio_consumer_fails_for_good_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(network_actor, "system_resolver", Dns(["nowhere.test"], 10**6))

    async def run() -> None:
        consumer: AsyncKafkaConsumer[bytes, bytes] = AsyncKafkaConsumer(
            config={
                "bootstrap.servers": "nowhere.test:9092",
                "group.id": "g",
                "bootstrap.resolve.timeout.ms": 500,
            }
        )
        try:
            consumer.subscribe(["t"])
            deadline = time.monotonic() + 30  # a bound on a hang, not a timing assertion
            while True:
                assert time.monotonic() < deadline, "no BootstrapResolutionError"
                try:
                    await consumer.getmany(timeout_ms=200)
                except BootstrapResolutionError:
                    break
            with pytest.raises(BootstrapResolutionError):
                await consumer.getmany(timeout_ms=0)
        finally:
            await consumer.close()

    asyncio.run(run())


@pytest.mark.broker
def test_a_name_that_resolves_late_is_used_within_the_budget(
    kafka_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bootstrap name fails to resolve three times (DNS not ready yet), then resolves to
    the broker: the consumer, built before that, consumes as if nothing happened."""
    from confluent_kafka import Producer

    port = int(kafka_broker.bootstrap_servers.split(",")[0].rsplit(":", 1)[1])
    dns = Dns(["kafka-later.test"], fail_first=3)
    monkeypatch.setattr(network_actor, "system_resolver", dns)
    topic = f"late-dns-{time.monotonic_ns()}"
    kafka_broker.create_topic(topic, partitions=1)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "log_level": 3})
    for i in range(5):
        producer.produce(topic, value=b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": f"kafka-later.test:{port}",
            "bootstrap.resolve.timeout.ms": 120_000,
            "reconnect.backoff.max.ms": 200,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 60  # a bound on a hang, not a timing assertion
        while len(values) < 5 and time.monotonic() < deadline:
            values.extend(r.value for r in consumer.poll(0.5))
        assert values == [b"v%d" % i for i in range(5)]
        assert dns.calls.count("kafka-later.test") >= 4
    finally:
        consumer.close()


def test_the_system_resolver_asks_for_an_ascii_name_as_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An ASCII name reaches getaddrinfo as bytes (no idna codec, whose first use imports
    unicodedata on the way to a first record); a non-ASCII one as the str it is."""
    from kafka_actors.actors.network import transport

    asked: list[object] = []

    def getaddrinfo(host: object, port: int, *args: object) -> list[tuple[Any, ...]]:
        asked.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    monkeypatch.setattr(transport.socket, "getaddrinfo", getaddrinfo)
    transport.system_resolver("broker-1.example", 9092)
    transport.system_resolver("bücher.example", 9092)
    assert asked == [b"broker-1.example", "bücher.example"]
    monkeypatch.undo()  # and the real getaddrinfo takes the bytes
    assert transport.system_resolver("127.0.0.1", 9092)[0][4][:2] == ("127.0.0.1", 9092)
