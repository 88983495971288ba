"""SASL/GSSAPI without a KDC: configuration (sasl.kerberos.service.name, the Krb5LoginModule
options of sasl.jaas.config) and the RFC 4752 steps of GssapiMechanism over a stand-in GSS
context. The real login and broker exchange: tests/security/test_kerberos_broker.py."""

from __future__ import annotations

import pytest

from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import (
    ConfigError,
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
)
from kafka_actors.protocol.connection.gssapi import GssapiMechanism
from kafka_actors.protocol.connection.sasl import mechanism_from_config

KRB5 = "com.sun.security.auth.module.Krb5LoginModule"
BASE = {
    "bootstrap.servers": "localhost:9092",
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "GSSAPI",
}


def _error(mapping: dict[str, object]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        ConsumerConfig.from_dict({**BASE, **mapping})
    return info.value


# -- configuration --------------------------------------------------------------------------


def test_keytab_login_is_read_from_the_jaas_options() -> None:
    config = ConsumerConfig.from_dict(
        {
            **BASE,
            "sasl.kerberos.service.name": "kafka",
            "sasl.jaas.config": f"{KRB5} required useKeyTab=true storeKey=true "
            f'keyTab="/etc/security/client.keytab" principal="client@EXAMPLE.COM";',
        }
    )
    assert config.sasl_kerberos_service_name == "kafka"
    assert config.sasl_kerberos_keytab == "/etc/security/client.keytab"
    assert config.sasl_kerberos_principal == "client@EXAMPLE.COM"
    assert not config.sasl_kerberos_use_ticket_cache
    assert config.sasl_username is None and config.sasl_password is None


def test_ticket_cache_login_and_the_jaas_service_name() -> None:
    config = ConsumerConfig.from_dict(
        {
            **BASE,
            "sasl.jaas.config": f"{KRB5} required useTicketCache=true "
            'ticketCache="FILE:/tmp/krb5cc_test" serviceName=kafka;',
        }
    )
    assert config.sasl_kerberos_use_ticket_cache
    assert config.sasl_kerberos_ticket_cache == "FILE:/tmp/krb5cc_test"
    assert config.sasl_kerberos_keytab is None and config.sasl_kerberos_principal is None
    assert config.sasl_kerberos_service_name == "kafka"  # from the JAAS serviceName


def test_gssapi_needs_the_service_name() -> None:
    error = _error({})
    assert error.key == "sasl.kerberos.service.name"
    assert "No serviceName defined" in str(error)
    # Without sasl.jaas.config the default credentials are used (ticket cache, client keytab).
    config = ConsumerConfig.from_dict({**BASE, "sasl.kerberos.service.name": "kafka"})
    assert config.sasl_kerberos_keytab is None and not config.sasl_kerberos_use_ticket_cache


def test_conflicting_service_names_are_refused_as_java_does() -> None:
    error = _error(
        {
            "sasl.kerberos.service.name": "kafka",
            "sasl.jaas.config": f"{KRB5} required useTicketCache=true serviceName=other;",
        }
    )
    assert error.key == "sasl.kerberos.service.name"
    assert "Conflicting serviceName" in str(error)


@pytest.mark.parametrize(
    ("jaas", "expected"),
    [
        (f'{KRB5} required useKeyTab=true keyTab="/k";', "principal"),
        (f'{KRB5} required useKeyTab=true principal="c@R";', "keyTab"),
        (f'{KRB5} required storeKey=true principal="c@R";', "useKeyTab"),
        ('org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
         'password="p";', KRB5),
    ],
)  # fmt: skip
def test_unusable_krb5_login_options_name_the_key(jaas: str, expected: str) -> None:
    error = _error({"sasl.kerberos.service.name": "kafka", "sasl.jaas.config": jaas})
    assert error.key == "sasl.jaas.config"
    assert expected in str(error)


def test_the_credential_free_mechanism_factory_refuses_gssapi() -> None:
    """GSSAPI mechanisms need a login and the broker host (kafka_actors.kerberos), never the
    PLAIN/SCRAM path: a caller that asks the generic factory gets a ConfigError."""
    config = ConsumerConfig.from_dict({**BASE, "sasl.kerberos.service.name": "kafka"})
    with pytest.raises(ConfigError) as info:
        mechanism_from_config(config)
    assert info.value.key == "sasl.mechanism"


# -- the RFC 4752 steps -------------------------------------------------------------------------


class FakeContext:
    """A GSS context that needs ``rounds`` server tokens; wrap/unwrap mark the bytes."""

    def __init__(self, rounds: int = 1, initiator: str = "client@EXAMPLE.COM") -> None:
        self.rounds = rounds
        self.steps: list[bytes | None] = []
        self.wrapped: list[bytes] = []
        self._initiator = initiator

    @property
    def established(self) -> bool:
        return len(self.steps) > self.rounds

    @property
    def initiator(self) -> str:
        return self._initiator

    def step(self, token: bytes | None) -> bytes | None:
        self.steps.append(token)
        # The last step (mutual authentication: the server's AP-REP) produces no token.
        return None if self.established else f"token{len(self.steps)}".encode()

    def wrap(self, data: bytes) -> bytes:
        self.wrapped.append(data)
        return b"W(" + data + b")"

    def unwrap(self, data: bytes) -> bytes:
        assert data.startswith(b"W(") and data.endswith(b")")
        return data[2:-1]


def test_context_tokens_then_no_security_layer_with_the_authorization_id() -> None:
    context = FakeContext(rounds=1)
    mechanism = GssapiMechanism(lambda: context)
    assert mechanism.initial_response() == b"token1"
    # The server's AP-REP completes the context: an empty answer asks for the layer offer.
    assert mechanism.evaluate(b"ap-rep") == b""
    assert not mechanism.complete
    # The offer: no security layer (0x01) allowed, max 64 KiB; the answer picks 0x01, size 0.
    reply = mechanism.evaluate(b"W(\x07\x01\x00\x00)")
    assert reply == b"W(\x01\x00\x00\x00client@EXAMPLE.COM)"
    assert mechanism.complete
    assert context.steps == [None, b"ap-rep"]


def test_a_server_that_needs_a_security_layer_is_refused() -> None:
    context = FakeContext(rounds=0)  # established by the first step
    mechanism = GssapiMechanism(lambda: context)
    assert mechanism.initial_response() == b""
    with pytest.raises(SaslAuthenticationFailedError, match="requires a security layer"):
        mechanism.evaluate(b"W(\x04\x00\x10\x00)")  # confidentiality only
    assert not mechanism.complete
    with pytest.raises(IllegalSaslStateError):
        mechanism.evaluate(b"W(\x01\x00\x00\x00)")


def test_a_malformed_layer_offer_is_refused() -> None:
    mechanism = GssapiMechanism(lambda: FakeContext(rounds=0))
    mechanism.initial_response()
    with pytest.raises(SaslAuthenticationFailedError, match="3 bytes"):
        mechanism.evaluate(b"W(\x01\x00\x00)")


def test_a_failing_context_fails_the_mechanism_for_good() -> None:
    def broken() -> FakeContext:
        raise SaslAuthenticationFailedError("GSSAPI: login of client@R failed: no keytab")

    mechanism = GssapiMechanism(broken)
    with pytest.raises(SaslAuthenticationFailedError, match="no keytab"):
        mechanism.initial_response()
    with pytest.raises(IllegalSaslStateError):
        mechanism.initial_response()
    with pytest.raises(IllegalSaslStateError):
        mechanism.evaluate(b"")


def test_a_missing_gssapi_binding_is_a_config_error_at_construction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the binding (the kerberos extra) the consumer refuses to be built, naming the
    key and the extra, instead of failing later in its network actor."""
    import sys

    from kafka_actors.consumer import KafkaConsumer

    monkeypatch.setitem(sys.modules, "gssapi", None)  # import gssapi -> ImportError
    with pytest.raises(ConfigError) as info:
        KafkaConsumer({**BASE, "sasl.kerberos.service.name": "kafka", "group.id": "g"})
    assert info.value.key == "sasl.mechanism"
    assert "kafka-actors[kerberos]" in str(info.value)


def test_a_gssapi_jaas_config_leaves_the_other_keys_processed() -> None:
    """SASL_SSL with GSSAPI: ssl.ca.location still becomes the PEM trust store."""
    config = ConsumerConfig.from_dict(
        {
            **BASE,
            "security.protocol": "SASL_SSL",
            "sasl.kerberos.service.name": "kafka",
            "sasl.jaas.config": f"{KRB5} required useTicketCache=true;",
            "ssl.ca.location": "/etc/ssl/ca.pem",
        }
    )
    assert config.ssl_truststore_location == "/etc/ssl/ca.pem"
    assert config.sasl_kerberos_use_ticket_cache
