"""SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256/512), SSL and SASL_SSL listeners, checked with
librdkafka (confluent-kafka) as the client."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from kafka_actors.testing.broker import KafkaBroker
from kafka_actors.testing.security import SASL_MECHANISMS, ListenerSpec

pytestmark = pytest.mark.broker

CASES = [
    *[("SASL_PLAINTEXT", m) for m in SASL_MECHANISMS],
    ("SSL", None),
    *[("SASL_SSL", m) for m in SASL_MECHANISMS],
]


def _ids(case: tuple[str, str | None]) -> str:
    return f"{case[0]}-{case[1] or 'nosasl'}"


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_listener_accepts_valid_credentials(
    kafka_broker_secured: KafkaBroker, case: tuple[str, str | None]
) -> None:
    listener, mechanism = case
    conf = kafka_broker_secured.client_config(listener, mechanism=mechanism)
    assert conf["security.protocol"] == kafka_broker_secured.listener(listener).security_protocol
    md = AdminClient({**conf, "log_level": 3}).list_topics(timeout=30)
    assert len(md.brokers) == 1
    # The broker advertises this listener's own port to clients that came through it.
    (b,) = md.brokers.values()
    assert f"{b.host}:{b.port}" == kafka_broker_secured.listener_bootstrap(listener)
    topic = f"sec-{listener}-{mechanism or 'none'}-{time.time_ns()}".lower()
    p = Producer({**conf, "log_level": 3})
    p.produce(topic, b"secret payload")
    assert p.flush(60) == 0


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_listener_rejects_bad_credentials(
    kafka_broker_secured: KafkaBroker, case: tuple[str, str | None]
) -> None:
    listener, mechanism = case
    conf = dict(kafka_broker_secured.client_config(listener, mechanism=mechanism))
    if mechanism is None:
        # SSL without the test CA: the broker's certificate cannot be verified.
        del conf["ssl.ca.location"]
    else:
        conf["sasl.password"] = "not-the-password"
    with pytest.raises(KafkaException):
        AdminClient({**conf, "log_level": 0}).list_topics(timeout=5)


def test_plaintext_listener_stays_open(kafka_broker_secured: KafkaBroker) -> None:
    md = AdminClient({"bootstrap.servers": kafka_broker_secured.bootstrap_servers}).list_topics(
        timeout=30
    )
    assert len(md.brokers) == 1


def test_ca_is_a_pem_certificate(kafka_broker_secured: KafkaBroker) -> None:
    text = kafka_broker_secured.ca_path.read_text()
    assert text.startswith("-----BEGIN CERTIFICATE-----")


def test_listener_spec_validation() -> None:
    with pytest.raises(ValueError):
        ListenerSpec("SASL", "SASL_PLAINTEXT")  # no mechanism
    with pytest.raises(ValueError):
        ListenerSpec("X", "SSL", ("PLAIN",))  # mechanism without SASL
    with pytest.raises(ValueError):
        ListenerSpec("X", "SASL_SSL", ("AWS_MSK_IAM",))
    with pytest.raises(ValueError):
        ListenerSpec("lower", "SSL")
