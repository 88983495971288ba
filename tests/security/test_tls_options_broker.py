"""Show 3 (issue 12): the TLS settings against the testkit's SSL listener (Kafka 4.4).

PKCS12 trust and key stores with passwords; a cipher suite the broker does not offer (an
ECDSA suite against its RSA certificate) is a typed SslAuthenticationError; TLS 1.3 pinned
(and TLS 1.2 pinned) is what the handshake negotiates; a broker whose certificate names
another host is refused by the default host name check and accepted with
``ssl.endpoint.identification.algorithm=""``; a user-built ``ssl.SSLContext`` is used as is.
"""

from __future__ import annotations

import socket
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("cryptography")
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from kafka_actors.config import ConsumerConfig
from kafka_actors.consumer import KafkaConsumer
from kafka_actors.errors import ConfigError, SslAuthenticationError
from kafka_actors.protocol.connection.tls import TlsChannel, build_ssl_context
from kafka_actors.testing.broker import KafkaBroker
from kafka_actors.testing.security import ListenerSpec

pytestmark = pytest.mark.broker

STORE_PASSWORD = "p12-store-pass"
RECORDS = 20


@pytest.fixture(scope="module")
def ssl_broker() -> Iterator[KafkaBroker]:
    with KafkaBroker(listeners=[ListenerSpec("SSL", "SSL")]) as broker:
        yield broker


def _produce(broker: KafkaBroker, topic: str) -> None:
    from confluent_kafka import Producer

    broker.create_topic(topic, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(RECORDS):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(60) == 0


def _base(broker: KafkaBroker, **extra: object) -> dict[str, object]:
    return {
        "bootstrap.servers": broker.listener_bootstrap("SSL"),
        "security.protocol": "SSL",
        "group.id": f"tls-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        **extra,
    }


def _consume(conf: dict[str, object], topic: str) -> list[str]:
    values: list[str] = []
    with KafkaConsumer(conf) as consumer:
        consumer.subscribe([topic])
        for _ in range(240):
            values.extend(r.value.decode() for r in consumer.poll(0.5))
            if len(values) >= RECORDS:
                break
    return values


def _expect_ssl_error(conf: dict[str, object]) -> SslAuthenticationError:
    with KafkaConsumer(conf) as consumer, pytest.raises(SslAuthenticationError) as info:
        consumer.subscribe(["anything"])
        for _ in range(120):
            consumer.poll(0.5)
    return info.value


def _handshake(broker: KafkaBroker, config: dict[str, object]) -> TlsChannel:
    """One TLS handshake with the SSL listener, as the NetworkActor makes it."""
    cfg = ConsumerConfig.from_dict(config)
    host, _, port = broker.listener_bootstrap("SSL").rpartition(":")
    channel = TlsChannel(build_ssl_context(cfg), host)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        while True:
            try:
                done = channel.handshake()
            finally:
                sock.sendall(channel.bytes_to_send())
            if done:
                return channel
            data = sock.recv(65536)
            if data:
                channel.receive(data)
            else:
                channel.receive_eof()


@pytest.fixture(scope="module")
def pkcs12_stores(ssl_broker: KafkaBroker, tmp_path_factory: Any) -> tuple[Path, Path]:
    """A PKCS12 trust store of the test CA and a PKCS12 key store (a key and its chain)."""
    certs = ssl_broker.certificates
    assert certs is not None
    directory = tmp_path_factory.mktemp("p12")
    ca = x509.load_pem_x509_certificate(certs.ca_cert.read_bytes())
    encryption = serialization.BestAvailableEncryption(STORE_PASSWORD.encode())
    truststore = directory / "truststore.p12"
    truststore.write_bytes(
        pkcs12.serialize_key_and_certificates(b"ca", None, None, [ca], encryption)
    )
    key_dir = certs.ca_cert.parent
    key = serialization.load_pem_private_key((key_dir / "broker.key").read_bytes(), None)
    cert = x509.load_pem_x509_certificate((key_dir / "broker.pem").read_bytes())
    keystore = directory / "keystore.p12"
    keystore.write_bytes(
        pkcs12.serialize_key_and_certificates(b"client", key, cert, [ca], encryption)  # type: ignore[arg-type]
    )
    return truststore, keystore


def test_pkcs12_stores_with_passwords(
    ssl_broker: KafkaBroker, pkcs12_stores: tuple[Path, Path]
) -> None:
    truststore, keystore = pkcs12_stores
    topic = "tls-pkcs12"
    _produce(ssl_broker, topic)
    conf = _base(
        ssl_broker,
        **{
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(truststore),
            "ssl.truststore.password": STORE_PASSWORD,
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(keystore),
            "ssl.keystore.password": STORE_PASSWORD,
        },
    )
    assert sorted(_consume(conf, topic)) == sorted(f"v{i}" for i in range(RECORDS))
    wrong = {**conf, "ssl.truststore.password": "not-the-password"}
    with pytest.raises(ConfigError) as info:
        build_ssl_context(ConsumerConfig.from_dict(wrong))
    assert info.value.key == "ssl.truststore.password"
    assert "not-the-password" not in str(info.value)


def test_cipher_suite_the_broker_does_not_offer_is_typed(ssl_broker: KafkaBroker) -> None:
    conf = _base(
        ssl_broker,
        **{
            "ssl.truststore.location": str(ssl_broker.ca_path),
            # The broker's certificate is RSA: an ECDSA-only suite list leaves nothing shared.
            "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        },
    )
    error = _expect_ssl_error(conf)
    assert "handshake" in str(error).lower()
    # ... while a suite the broker offers works, and is the one negotiated (TLS 1.2).
    offered = {**conf, "ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"}
    channel = _handshake(ssl_broker, offered)
    assert channel.cipher == "ECDHE-RSA-AES256-GCM-SHA384"
    assert channel.tls_version == "TLSv1.2"


@pytest.mark.parametrize(
    ("settings", "version"),
    [
        ({"ssl.enabled.protocols": "TLSv1.3"}, "TLSv1.3"),
        ({"ssl.protocol": "TLSv1.2"}, "TLSv1.2"),
        ({"ssl.enabled.protocols": "TLSv1.2"}, "TLSv1.2"),
    ],
)
def test_pinned_protocol_is_negotiated(
    ssl_broker: KafkaBroker, settings: dict[str, str], version: str
) -> None:
    conf = _base(ssl_broker, **{"ssl.truststore.location": str(ssl_broker.ca_path), **settings})
    assert _handshake(ssl_broker, conf).tls_version == version
    topic = f"tls-pinned-{version.lower().replace('.', '')}-{uuid.uuid4().hex[:6]}"
    _produce(ssl_broker, topic)
    assert len(_consume(conf, topic)) == RECORDS


def test_user_supplied_ssl_context(ssl_broker: KafkaBroker) -> None:
    context = ssl.create_default_context(cafile=str(ssl_broker.ca_path))
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    topic = "tls-context"
    _produce(ssl_broker, topic)
    conf = _base(ssl_broker, **{"ssl.context": context})
    assert _handshake(ssl_broker, conf).tls_version == "TLSv1.2"
    assert len(_consume(conf, topic)) == RECORDS
    with pytest.raises(ConfigError) as info:
        build_ssl_context(ConsumerConfig.from_dict({**conf, "ssl.truststore.location": "x"}))
    assert info.value.key == "ssl.truststore.location"


def test_hostname_check_off_accepts_a_certificate_for_another_name() -> None:
    listeners = [ListenerSpec("SSL", "SSL")]
    with KafkaBroker(listeners=listeners, certificate_names=("DNS:kafka.other.example",)) as b:
        topic = "tls-other-name"
        _produce(b, topic)
        conf = _base(b, **{"ssl.truststore.location": str(b.ca_path)})
        error = _expect_ssl_error(conf)
        assert "hostname" in str(error).lower() or "ip address" in str(error).lower()
        unchecked = {**conf, "ssl.endpoint.identification.algorithm": ""}
        assert len(_consume(unchecked, topic)) == RECORDS
