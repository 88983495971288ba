"""Show 2 (issue 12): SASL re-authentication in place (KIP-368) against a Kafka 4.4 broker.

The broker limits every SASL session to ``connections.max.reauth.ms`` = 3 s (it closes a
connection whose session expired). A consumer reads a topic that a producer keeps writing to
for 20 s (``KAFKA_ACTORS_REAUTH_SECONDS=60`` for the issue's full minute) with PLAIN,
SCRAM-SHA-256 and OAUTHBEARER: every connection re-authenticates on its own socket many times,
no connection is lost or re-made, and every record arrives.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

pytest.importorskip("cryptography")

from kafka_actors.actors.network import ConnectionEvent, GetConnectionEvents
from kafka_actors.consumer import KafkaConsumer
from kafka_actors.testing.broker import KafkaBroker
from kafka_actors.testing.security import ListenerSpec
from tests.security.test_oauth_broker import (
    AUDIENCE,
    CLIENT_ID,
    CLIENT_SECRET,
    ISSUER,
    IdentityProvider,
)

pytestmark = pytest.mark.broker

# 6 s: the client re-authenticates at 85-95 % of it (Java's window), 0.3-0.9 s before the broker
# closes the connection; 3 s left 0.15-0.45 s, which a loaded 2-core machine running four
# workers missed once (the broker closed the connection; the client reconnected).
REAUTH_MS = 6_000
SECONDS = float(os.environ.get("KAFKA_ACTORS_REAUTH_SECONDS", "20"))
PASSWORD = "alice-secret"


@pytest.fixture(scope="module")
def idp() -> Iterator[IdentityProvider]:
    provider = IdentityProvider(lifetime=30.0)
    try:
        yield provider
    finally:
        provider.close()


@pytest.fixture(scope="module")
def reauth_broker(idp: IdentityProvider) -> Iterator[KafkaBroker]:
    listeners = [
        ListenerSpec("SASL_PLAINTEXT", "SASL_PLAINTEXT", ("PLAIN", "SCRAM-SHA-256")),
        ListenerSpec("OAUTH", "SASL_PLAINTEXT", ("OAUTHBEARER",)),
    ]
    config = {
        "connections.max.reauth.ms": REAUTH_MS,
        "sasl.oauthbearer.jwks.endpoint.url": idp.jwks_url,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
    }
    allowed = f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={idp.jwks_url},{idp.token_url}"
    with KafkaBroker(
        broker_config=config,
        listeners=listeners,
        users={"alice": PASSWORD},
        jvm_options=[allowed],
    ) as broker:
        yield broker


def _config(broker: KafkaBroker, idp: IdentityProvider, mechanism: str) -> dict[str, object]:
    listener = "OAUTH" if mechanism == "OAUTHBEARER" else "SASL_PLAINTEXT"
    conf: dict[str, object] = {
        "bootstrap.servers": broker.listener_bootstrap(listener),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "group.id": f"reauth-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "fetch.max.wait.ms": 200,
    }
    if mechanism == "OAUTHBEARER":
        conf.update(
            {
                "sasl.oauthbearer.token.endpoint.url": idp.token_url,
                "sasl.oauthbearer.client.credentials.client.id": CLIENT_ID,
                "sasl.oauthbearer.client.credentials.client.secret": CLIENT_SECRET,
            }
        )
    else:
        conf.update({"sasl.username": "alice", "sasl.password": PASSWORD})
    return conf


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "OAUTHBEARER"])
def test_consumer_reauthenticates_in_place_without_reconnecting(
    reauth_broker: KafkaBroker, idp: IdentityProvider, mechanism: str
) -> None:
    from confluent_kafka import Producer

    topic = f"reauth-{mechanism.lower()}"
    reauth_broker.create_topic(topic, partitions=2)
    produced: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": reauth_broker.bootstrap_servers})
        i = 0
        while not stop.is_set():
            value = f"r{i}"
            producer.produce(topic, value=value.encode())
            producer.poll(0)
            produced.append(value)
            i += 1
            time.sleep(0.05)
        assert producer.flush(30) == 0

    seen: set[str] = set()
    producer_thread = threading.Thread(target=produce, daemon=True)
    with KafkaConsumer(_config(reauth_broker, idp, mechanism)) as consumer:
        consumer.subscribe([topic])
        producer_thread.start()
        started = time.monotonic()
        try:
            while time.monotonic() - started < SECONDS:
                # Any failed request would surface here as a raised, typed error.
                seen.update(r.value.decode() for r in consumer.poll(0.5))
        finally:
            stop.set()
            producer_thread.join(60)
        deadline = time.monotonic() + 60
        while not set(produced) <= seen and time.monotonic() < deadline:
            seen.update(r.value.decode() for r in consumer.poll(0.5))
        network, _ = consumer._tree.children.current("network")
        recorded: tuple[ConnectionEvent, ...] = network.ask(GetConnectionEvents(None), timeout=10)
    assert produced and set(produced) <= seen
    kinds = Counter(e.kind for e in recorded)
    print(f"{mechanism}: {len(seen)} records in {SECONDS:.0f} s, connection events {dict(kinds)}")
    # From each node's first ready on, no connection was lost, refused or re-made: the
    # re-authentications happened in place. (Before it: under load the first OAUTHBEARER
    # attempt can start before the first token arrived and fail with "the fetch is under
    # way", then connect after its backoff; a startup wart of its own, noted on issue 22.)
    first_ready: dict[int, int] = {}
    for index, event in enumerate(recorded):
        if event.kind == "ready":
            first_ready.setdefault(event.node, index)
    assert first_ready, kinds
    after = [e for i, e in enumerate(recorded) if e.node in first_ready and i > first_ready[e.node]]
    later = Counter(e.kind for e in after)
    assert later["disconnected"] == later["connect_failed"] == later["auth_failed"] == 0, later
    assert later["connect"] == 0, later
    assert kinds["auth_failed"] == kinds["disconnected"] == 0, kinds
    assert later["reauthenticated"] >= 1, later
    # ... and re-authenticated in place, many times (every 85-95 % of REAUTH_MS per connection).
    assert kinds["reauthenticated"] >= SECONDS / (REAUTH_MS / 1000) - 2, kinds
