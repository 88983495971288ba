"""SaslExchange and TlsChannel against a real Kafka 4.x broker (SASL_PLAINTEXT, SSL, SASL_SSL).

A small blocking pump plays the network actor's part: TCP connect → TLS handshake (SSL
listeners) → ApiVersions → SaslExchange (SASL listeners) → a Metadata request, which the
broker only answers on an authenticated connection.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

import pytest

from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import (
    SaslAuthenticationFailedError,
    SslAuthenticationError,
    UnsupportedSaslMechanismError,
)
from kafka_actors.protocol.connection.sasl import SaslExchange, mechanism_from_config
from kafka_actors.protocol.connection.tls import TlsChannel, build_ssl_context
from kafka_actors.protocol.wire.apis import ApiKey, response_type_for
from kafka_actors.protocol.wire.framing import decode_response, encode_request
from kafka_actors.protocol.wire.requests import metadata_request
from kafka_actors.protocol.wire.versions import ApiVersionsHandshake, Done, NegotiatedVersions
from kafka_actors.testing.broker import KafkaBroker

pytestmark = pytest.mark.broker

TIMEOUT = 60.0


class Connection:
    """One blocking connection, secured and authenticated the way the network actor will."""

    def __init__(self, address: str, config: ConsumerConfig, *, authenticate: bool = True) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT)
        self.channel: TlsChannel | None = None
        self.buffer = bytearray()
        self.correlation_id = 0
        self.exchange: SaslExchange | None = None
        try:
            if config.ssl_enabled:
                self.channel = TlsChannel(build_ssl_context(config), host)
                self._tls_handshake(self.channel)
            self.versions = self._api_versions()
            if config.sasl_enabled and authenticate:
                self.exchange = SaslExchange(mechanism_from_config(config), self.versions)
                while not self.exchange.done:
                    request = self.exchange.next_request()
                    assert request is not None
                    self.exchange.on_response(self.request(request))
        except BaseException:
            self.close()
            raise

    def _tls_handshake(self, channel: TlsChannel) -> None:
        while True:
            try:
                done = channel.handshake()
            finally:
                self.sock.sendall(channel.bytes_to_send())
            if done:
                return
            self._feed(channel)

    def _feed(self, channel: TlsChannel) -> None:
        data = self.sock.recv(65536)
        if data:
            channel.receive(data)
        else:
            channel.receive_eof()

    def _api_versions(self) -> NegotiatedVersions:
        handshake = ApiVersionsHandshake()
        request, _ = handshake.initial_request()
        while True:
            cid = self._send(request)
            step = handshake.handle_response_bytes(self._frame(), correlation_id=cid)
            if isinstance(step, Done):
                return step.versions
            request = step.request

    def _send(self, request: Any) -> int:
        self.correlation_id += 1
        frame = encode_request(request, correlation_id=self.correlation_id, client_id="sec-test")
        if self.channel is not None:
            self.channel.write(frame)
            self.sock.sendall(self.channel.bytes_to_send())
        else:
            self.sock.sendall(frame)
        return self.correlation_id

    def _frame(self) -> bytes:
        while True:
            if len(self.buffer) >= 4:
                (size,) = struct.unpack_from(">i", self.buffer)
                if len(self.buffer) >= 4 + size:
                    frame = bytes(self.buffer[4 : 4 + size])
                    del self.buffer[: 4 + size]
                    return frame
            if self.channel is not None:
                self._feed(self.channel)
                self.buffer += self.channel.read()
                if self.channel.peer_closed:
                    raise ConnectionError("broker closed the TLS session")
            else:
                data = self.sock.recv(65536)
                if not data:
                    raise ConnectionError("broker closed the connection")
                self.buffer += data

    def request(self, request: Any) -> Any:
        cid = self._send(request)
        return decode_response(self._frame(), response_type_for(request), correlation_id=cid)

    def metadata(self) -> Any:
        version = self.versions.version_for(ApiKey.METADATA)
        return self.request(metadata_request(version, topics=None))

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
            try:
                self.sock.sendall(self.channel.bytes_to_send())
            except OSError:
                pass
        self.sock.close()


def client_config(broker: KafkaBroker, listener: str, **overrides: object) -> ConsumerConfig:
    spec = broker.listener(listener)
    settings: dict[str, object] = {
        "bootstrap.servers": broker.listener_bootstrap(listener),
        "security.protocol": spec.security_protocol,
    }
    if spec.uses_ssl:
        settings["ssl.truststore.location"] = str(broker.ca_path)
    settings.update(overrides)
    return ConsumerConfig.from_dict(settings)


def sasl_settings(
    broker: KafkaBroker, mechanism: str, *, password: str | None = None
) -> dict[str, object]:
    user = "alice"
    return {
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password if password is not None else broker.users[user],
    }


def first_address(config: ConsumerConfig) -> str:
    return str(config.bootstrap_servers[0])


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_authentication_succeeds(
    kafka_broker_secured: KafkaBroker, listener: str, mechanism: str
) -> None:
    config = client_config(
        kafka_broker_secured, listener, **sasl_settings(kafka_broker_secured, mechanism)
    )
    conn = Connection(first_address(config), config)
    try:
        assert conn.exchange is not None and conn.exchange.done
        assert conn.exchange.authenticate_version == 2
        assert conn.exchange.session_lifetime_ms >= 0
        assert conn.metadata().brokers, "an authenticated connection gets metadata"
        if listener == "SASL_SSL":
            assert conn.channel is not None and conn.channel.tls_version in ("TLSv1.2", "TLSv1.3")
    finally:
        conn.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_is_refused_by_the_broker(
    kafka_broker_secured: KafkaBroker, mechanism: str
) -> None:
    wrong = "definitely-not-the-PASSWORD"
    config = client_config(
        kafka_broker_secured,
        "SASL_PLAINTEXT",
        **sasl_settings(kafka_broker_secured, mechanism, password=wrong),
    )
    with pytest.raises(SaslAuthenticationFailedError) as info:
        Connection(first_address(config), config)
    error = info.value
    assert not error.retriable and error.code == 58
    assert "Authentication failed" in str(error)
    assert wrong not in str(error) and wrong not in repr(error)


def test_ssl_listener_without_sasl(kafka_broker_secured: KafkaBroker) -> None:
    config = client_config(kafka_broker_secured, "SSL")
    conn = Connection(first_address(config), config)
    try:
        assert conn.metadata().brokers
    finally:
        conn.close()


def test_ssl_listener_with_untrusted_ca(kafka_broker_secured: KafkaBroker) -> None:
    # No truststore setting: the system CAs, which do not include the test CA.
    config = ConsumerConfig.from_dict(
        {
            "bootstrap.servers": kafka_broker_secured.listener_bootstrap("SSL"),
            "security.protocol": "SSL",
        }
    )
    with pytest.raises(SslAuthenticationError):
        Connection(first_address(config), config)


def test_broker_lists_its_mechanisms_when_ours_is_not_enabled(
    kafka_broker_secured: KafkaBroker,
) -> None:
    # SASL_PLAINTEXT enables PLAIN and SCRAM only: ask for another mechanism.
    class OAuthBearerLookalike:
        name = "OAUTHBEARER"
        complete = False

        def initial_response(self) -> bytes:
            raise AssertionError("must not be reached")

        def evaluate(self, challenge: bytes) -> bytes | None:
            raise AssertionError("must not be reached")

    config = client_config(
        kafka_broker_secured, "SASL_PLAINTEXT", **sasl_settings(kafka_broker_secured, "PLAIN")
    )
    conn = Connection(first_address(config), config, authenticate=False)
    try:
        exchange = SaslExchange(OAuthBearerLookalike(), conn.versions)
        request = exchange.next_request()
        with pytest.raises(UnsupportedSaslMechanismError) as info:
            exchange.on_response(conn.request(request))
        assert "OAUTHBEARER" in str(info.value)
        for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            assert mechanism in str(info.value)
        assert set(exchange.broker_mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    finally:
        conn.close()
