"""SASL mechanisms (PLAIN, SCRAM-SHA-256/512) and the SaslExchange state machine, without I/O.

The SCRAM client is checked against the RFC 7677 test vector and against an independent
server-side computation written here from RFC 5802 (hashlib/hmac only).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from kio.static.primitive import i64Timedelta

from kafka_actors.config import ConsumerConfig, Password
from kafka_actors.errors import (
    AuthenticationError,
    ConfigError,
    IllegalSaslStateError,
    KafkaError,
    PolicyViolationError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
    UnsupportedVersionError,
)
from kafka_actors.log import get_logger
from kafka_actors.protocol.connection.sasl import (
    MIN_SCRAM_ITERATIONS,
    PlainMechanism,
    SaslExchange,
    SaslMechanism,
    SaslState,
    ScramMechanism,
    escape_sasl_name,
    mechanism_from_config,
)
from kafka_actors.protocol.wire.apis import ApiKey, VersionRange, request_type, response_type
from kafka_actors.protocol.wire.framing import decode_request, decode_response, encode_response
from kafka_actors.protocol.wire.versions import NegotiatedVersions
from kafka_actors.testing import capture_logs

SECRET = "hunter2-very-SECRET-pw"

# RFC 7677 section 3 (SCRAM-SHA-256, user "user", password "pencil").
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


# -- An independent SCRAM server (RFC 5802 section 3), for checking the client ------------------


class ScramServer:
    """Server side of one SCRAM exchange, holding only StoredKey/ServerKey as a broker does."""

    def __init__(
        self,
        digest: str,
        username: str,
        password: str,
        *,
        salt: bytes = b"kafka-actors-salt",
        iterations: int = 4096,
        server_nonce: str = "SERVERnonce-42",
    ) -> None:
        self.digest = digest
        self.username = username
        salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", digest).digest()
        self.stored_key = hashlib.new(digest, client_key).digest()
        self.server_key = hmac.new(salted, b"Server Key", digest).digest()
        self.salt, self.iterations, self.server_nonce = salt, iterations, server_nonce
        self.client_first_bare = ""
        self.server_first = ""
        self.authenticated = False

    def first(self, client_first: bytes) -> bytes:
        text = client_first.decode()
        assert text.startswith("n,,"), text
        self.client_first_bare = text[3:]
        attrs = dict(part.split("=", 1) for part in self.client_first_bare.split(","))
        name = attrs["n"].replace("=2C", ",").replace("=3D", "=")
        assert name == self.username
        self.nonce = attrs["r"] + self.server_nonce
        salt = base64.b64encode(self.salt).decode()
        self.server_first = f"r={self.nonce},s={salt},i={self.iterations}"
        return self.server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        text = client_final.decode()
        without_proof, _, proof_part = text.rpartition(",p=")
        assert without_proof == f"c=biws,r={self.nonce}"
        auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
        signature = hmac.new(self.stored_key, auth_message, self.digest).digest()
        proof = base64.b64decode(proof_part)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if hashlib.new(self.digest, client_key).digest() != self.stored_key:
            return b"e=invalid-proof"
        self.authenticated = True
        server_signature = hmac.new(self.server_key, auth_message, self.digest).digest()
        return b"v=" + base64.b64encode(server_signature)


def nonce(value: str = "clientNONCE") -> Callable[[], str]:
    return lambda: value


# -- PLAIN -------------------------------------------------------------------------------------


def test_plain_initial_response_is_nul_user_nul_password() -> None:
    mech = PlainMechanism("alice", Password("alice-secret"))
    assert not mech.complete
    assert mech.initial_response() == b"\x00alice\x00alice-secret"
    assert mech.complete
    assert mech.evaluate(b"") is None
    with pytest.raises(AuthenticationError):
        mech.evaluate(b"unexpected")


def test_plain_utf8_and_nul_rejected() -> None:
    assert PlainMechanism("jörg", "pä55").initial_response() == "\x00jörg\x00pä55".encode()
    with pytest.raises(ConfigError) as info:
        PlainMechanism("a\x00b", "x")
    assert info.value.key == "sasl.username"
    with pytest.raises(ConfigError) as info:
        PlainMechanism("a", f"{SECRET}\x00")
    assert SECRET not in str(info.value)


# -- SCRAM -------------------------------------------------------------------------------------


def test_scram_sha256_rfc7677_vector() -> None:
    mech = ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce_factory=nonce(RFC_CLIENT_NONCE))
    assert mech.initial_response() == RFC_CLIENT_FIRST
    assert mech.evaluate(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert not mech.complete
    assert mech.evaluate(RFC_SERVER_FINAL) is None
    assert mech.complete


def test_scram_sha256_rfc7677_vector_agrees_with_the_test_server() -> None:
    # The independent server reproduces the RFC's values, so it can judge other exchanges.
    server = ScramServer(
        "sha256",
        "user",
        "pencil",
        salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="),
        server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    )
    assert server.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL


@pytest.mark.parametrize(
    ("mechanism", "digest"), [("SCRAM-SHA-512", "sha512"), ("SCRAM-SHA-256", "sha256")]
)
@pytest.mark.parametrize("iterations", [4096, 8192])
def test_scram_exchange_against_independent_server(
    mechanism: str, digest: str, iterations: int
) -> None:
    server = ScramServer(digest, "alice", SECRET, iterations=iterations)
    mech = ScramMechanism(mechanism, "alice", Password(SECRET), nonce_factory=nonce("abc123"))
    server_first = server.first(mech.initial_response())
    client_final = mech.evaluate(server_first)
    assert client_final is not None
    server_final = server.final(client_final)
    assert server.authenticated
    assert mech.evaluate(server_final) is None
    assert mech.complete


def test_scram_sha512_default_nonces_are_fresh_and_server_accepts() -> None:
    seen = set()
    for _ in range(3):
        server = ScramServer("sha512", "alice", SECRET)
        mech = ScramMechanism("SCRAM-SHA-512", "alice", SECRET)
        first = mech.initial_response()
        seen.add(first)
        final = mech.evaluate(server.first(first))
        assert final is not None
        mech.evaluate(server.final(final))
        assert mech.complete and server.authenticated
    assert len(seen) == 3


def test_scram_wrong_password_is_refused_by_server_and_reported() -> None:
    server = ScramServer("sha512", "alice", SECRET)
    mech = ScramMechanism("SCRAM-SHA-512", "alice", "wrong-password", nonce_factory=nonce())
    final = mech.evaluate(server.first(mech.initial_response()))
    assert final is not None
    answer = server.final(final)
    assert answer == b"e=invalid-proof" and not server.authenticated
    with pytest.raises(AuthenticationError) as info:
        mech.evaluate(answer)
    assert "invalid-proof" in str(info.value)
    assert not info.value.retriable


def _at_server_final(mechanism: str = "SCRAM-SHA-256") -> tuple[ScramMechanism, ScramServer]:
    digest = "sha256" if mechanism.endswith("256") else "sha512"
    server = ScramServer(digest, "alice", SECRET)
    mech = ScramMechanism(mechanism, "alice", SECRET, nonce_factory=nonce())
    final = mech.evaluate(server.first(mech.initial_response()))
    assert final is not None
    server.final(final)
    return mech, server


@pytest.mark.parametrize(
    "server_final",
    [
        b"v=" + base64.b64encode(b"\x00" * 32),  # wrong signature
        RFC_SERVER_FINAL,  # a valid signature of another exchange
        b"v=not-base64!!",
        b"x=something",
        b"",
    ],
)
def test_scram_server_final_mismatch_is_an_authentication_error(server_final: bytes) -> None:
    mech, _ = _at_server_final()
    with pytest.raises(AuthenticationError) as info:
        mech.evaluate(server_final)
    assert not info.value.retriable
    assert not mech.complete
    with pytest.raises(IllegalSaslStateError):  # a failed mechanism stays failed
        mech.evaluate(server_final)


def test_scram_server_signature_of_wrong_length_is_a_mismatch() -> None:
    mech, _server = _at_server_final("SCRAM-SHA-512")
    # A SHA-256-sized signature where SHA-512 is expected.
    with pytest.raises(AuthenticationError, match="server signature"):
        mech.evaluate(b"v=" + base64.b64encode(b"\x01" * 32))


@pytest.mark.parametrize("iterations", [1, 4095])
def test_scram_iterations_below_4096_are_refused(iterations: int) -> None:
    mech = ScramMechanism("SCRAM-SHA-256", "alice", SECRET, nonce_factory=nonce("cn"))
    mech.initial_response()
    with pytest.raises(AuthenticationError, match=f"iterations {iterations} .* minimum 4096"):
        mech.evaluate(f"r=cnSRV,s={base64.b64encode(b'salt').decode()},i={iterations}".encode())
    assert MIN_SCRAM_ITERATIONS == 4096


@pytest.mark.parametrize(
    "iterations", ["100001", "2147483647", "99999999999", "9" * 5000, "\u00b2"]
)
def test_scram_iterations_above_the_maximum_are_refused_before_pbkdf2(iterations: str) -> None:
    """Issue 10, bug 4: a hostile server's huge iteration count made the client spin."""
    from kafka_actors.errors import ScramIterationsError

    mech = ScramMechanism("SCRAM-SHA-512", "alice", SECRET, nonce_factory=nonce("cn"))
    mech.initial_response()
    salt = base64.b64encode(b"salt").decode()
    expected = AuthenticationError if iterations == "\u00b2" else ScramIterationsError
    with pytest.raises(expected, match="iteration") as caught:
        mech.evaluate(f"r=cnSRV,s={salt},i={iterations}".encode())
    assert not mech.complete
    if expected is ScramIterationsError:
        assert "maximum 100000" in str(caught.value)


def test_scram_iterations_at_the_bounds_are_accepted() -> None:
    from kafka_actors.errors import ScramIterationsError
    from kafka_actors.protocol.connection.sasl import MAX_SCRAM_ITERATIONS

    for iterations in (MIN_SCRAM_ITERATIONS, 16384, MAX_SCRAM_ITERATIONS):
        server = ScramServer("sha256", "alice", SECRET, iterations=iterations)
        mech = ScramMechanism("SCRAM-SHA-256", "alice", SECRET, nonce_factory=nonce("cn"))
        final = mech.evaluate(server.first(mech.initial_response()))
        assert final is not None
        mech.evaluate(server.final(final))
        assert server.authenticated and mech.complete, iterations
    assert issubclass(ScramIterationsError, AuthenticationError)


@pytest.mark.parametrize(
    "server_nonce",
    ["other-nonce", "cn", "xcnSRV", "CNSRV"],  # unrelated, not extended, prefix elsewhere, case
)
def test_scram_server_nonce_must_extend_client_nonce(server_nonce: str) -> None:
    mech = ScramMechanism("SCRAM-SHA-512", "alice", SECRET, nonce_factory=nonce("cn"))
    mech.initial_response()
    with pytest.raises(AuthenticationError, match="nonce"):
        mech.evaluate(f"r={server_nonce},s=c2FsdA==,i=4096".encode())


@pytest.mark.parametrize(
    "server_first",
    [
        b"s=c2FsdA==,r=cnX,i=4096",  # out of order
        b"r=cnX,i=4096",  # no salt
        b"r=cnX,s=c2FsdA==",  # no iterations
        b"r=cnX,s=***,i=4096",  # bad base64
        b"r=cnX,s=,i=4096",  # empty salt
        b"r=cnX,s=c2FsdA==,i=-4096",
        b"r=cnX,s=c2FsdA==,i=4k",
        b"m=ext,r=cnX,s=c2FsdA==,i=4096",  # mandatory extension
        b"garbage",
        b"\xff\xfe",
        b"",
    ],
)
def test_scram_malformed_server_first(server_first: bytes) -> None:
    mech = ScramMechanism("SCRAM-SHA-256", "alice", SECRET, nonce_factory=nonce("cn"))
    mech.initial_response()
    with pytest.raises(AuthenticationError):
        mech.evaluate(server_first)


def test_scram_server_first_may_carry_extensions() -> None:
    mech = ScramMechanism("SCRAM-SHA-256", "alice", SECRET, nonce_factory=nonce("cn"))
    mech.initial_response()
    reply = mech.evaluate(b"r=cnX,s=c2FsdA==,i=4096,tokenauth=true")
    assert reply is not None and reply.startswith(b"c=biws,r=cnX,p=")


def test_scram_username_escaping() -> None:
    assert escape_sasl_name("a=b,c") == "a=3Db=2Cc"
    assert escape_sasl_name("=,=") == "=3D=2C=3D"
    mech = ScramMechanism("SCRAM-SHA-256", "us=er,x", SECRET, nonce_factory=nonce("N"))
    assert mech.initial_response() == b"n,,n=us=3Der=2Cx,r=N"
    server = ScramServer("sha256", "us=er,x", SECRET)
    mech = ScramMechanism("SCRAM-SHA-256", "us=er,x", SECRET, nonce_factory=nonce("N"))
    final = mech.evaluate(server.first(mech.initial_response()))
    assert final is not None
    mech.evaluate(server.final(final))
    assert server.authenticated and mech.complete


def test_scram_rejects_bad_nonce_factory_and_unknown_mechanism() -> None:
    mech = ScramMechanism("SCRAM-SHA-256", "alice", SECRET, nonce_factory=nonce("a,b"))
    with pytest.raises(AuthenticationError):
        mech.initial_response()
    with pytest.raises(ConfigError):
        ScramMechanism("SCRAM-SHA-1", "alice", SECRET)


def test_scram_call_order_is_enforced() -> None:
    mech = ScramMechanism("SCRAM-SHA-256", "alice", SECRET, nonce_factory=nonce("cn"))
    with pytest.raises(IllegalSaslStateError):
        mech.evaluate(b"r=cnX,s=c2FsdA==,i=4096")
    mech.initial_response()
    with pytest.raises(IllegalSaslStateError):
        mech.initial_response()


# -- mechanism_from_config ---------------------------------------------------------------------


def _config(**extra: object) -> ConsumerConfig:
    return ConsumerConfig.from_dict({"bootstrap.servers": "localhost:9092", **extra})


def test_mechanism_from_jaas_config_plain() -> None:
    config = _config(
        **{
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
            f'required username="alice" password="{SECRET}";',
        }
    )
    mech = mechanism_from_config(config)
    assert isinstance(mech, PlainMechanism)
    assert mech.initial_response() == f"\x00alice\x00{SECRET}".encode()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_mechanism_from_jaas_config_scram(mechanism: str) -> None:
    config = _config(
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            f'required username="bob" password="{SECRET}";',
        }
    )
    mech = mechanism_from_config(config, nonce_factory=nonce("N0"))
    assert isinstance(mech, ScramMechanism) and mech.name == mechanism
    assert mech.initial_response() == b"n,,n=bob,r=N0"
    server = ScramServer("sha256" if mechanism.endswith("256") else "sha512", "bob", SECRET)
    final = mech.evaluate(server.first(b"n,,n=bob,r=N0"))
    assert final is not None
    mech.evaluate(server.final(final))
    assert mech.complete and server.authenticated


def test_mechanism_from_config_delegation_token_extension() -> None:
    config = _config(
        **{
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            f'required username="tokenid" password="{SECRET}" tokenauth="true";',
        }
    )
    mech = mechanism_from_config(config, nonce_factory=nonce("N0"))
    assert mech.initial_response() == b"n,,n=tokenid,r=N0,tokenauth=true"


def test_mechanism_from_librdkafka_style_username_password() -> None:
    config = _config(
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "carol",
            "sasl.password": SECRET,
        }
    )
    mech = mechanism_from_config(config)
    assert isinstance(mech, ScramMechanism) and mech.username == "carol"
    assert mech.initial_response().startswith(b"n,,n=carol,r=")


def test_mechanism_from_config_without_sasl_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        mechanism_from_config(_config())
    assert info.value.key is not None


# -- SaslExchange ------------------------------------------------------------------------------


def sent(exchange: SaslExchange) -> Any:
    """The request the exchange wants sent now (there must be one)."""
    request = exchange.next_request()
    assert request is not None
    return request


def versions(
    handshake: tuple[int, int] = (0, 1), authenticate: tuple[int, int] | None = (0, 2)
) -> NegotiatedVersions:
    broker = {ApiKey.SASL_HANDSHAKE: VersionRange(*handshake)}
    if authenticate is not None:
        broker[ApiKey.SASL_AUTHENTICATE] = VersionRange(*authenticate)
    return NegotiatedVersions(broker={int(k): v for k, v in broker.items()})


def handshake_response(error_code: int = 0, mechanisms: tuple[str, ...] = ()) -> Any:
    return SaslHandshakeResponse(error_code=ErrorCode(error_code), mechanisms=mechanisms)


def authenticate_response(
    version: int,
    auth_bytes: bytes = b"",
    *,
    error_code: int = 0,
    error_message: str | None = None,
    session_lifetime_ms: int | None = None,
) -> Any:
    cls: Any = response_type(ApiKey.SASL_AUTHENTICATE, version)
    values: dict[str, Any] = {
        "error_code": ErrorCode(error_code),
        "error_message": error_message,
        "auth_bytes": auth_bytes,
    }
    if session_lifetime_ms is not None:
        values["session_lifetime"] = i64Timedelta.parse(
            datetime.timedelta(milliseconds=session_lifetime_ms)
        )
    return cls(**values)


def over_the_wire(response: Any) -> Any:
    """Encode and decode a response, as the network actor will see it."""
    frame = encode_response(response, correlation_id=7)
    return decode_response(frame[4:], type(response))


def test_exchange_scram_sha512_with_authenticate_v2_and_session_lifetime() -> None:
    server = ScramServer("sha512", "alice", SECRET)
    mech = ScramMechanism("SCRAM-SHA-512", "alice", SECRET, nonce_factory=nonce())
    exchange = SaslExchange(mech, versions(), node=3)
    assert exchange.handshake_version == 1 and exchange.authenticate_version == 2

    request = sent(exchange)
    assert request.__api_key__ == ApiKey.SASL_HANDSHAKE and request.__version__ == 1
    assert request.mechanism == "SCRAM-SHA-512"
    assert exchange.next_request() is None and exchange.awaiting_response
    exchange.on_response(over_the_wire(handshake_response(0, ("PLAIN", "SCRAM-SHA-512"))))
    assert exchange.broker_mechanisms == ("PLAIN", "SCRAM-SHA-512")

    request = sent(exchange)
    assert request.__api_key__ == ApiKey.SASL_AUTHENTICATE and request.__version__ == 2
    server_first = server.first(request.auth_bytes)
    exchange.on_response(over_the_wire(authenticate_response(2, server_first)))

    request = sent(exchange)
    assert request.__api_key__ == ApiKey.SASL_AUTHENTICATE
    server_final = server.final(request.auth_bytes)
    assert server.authenticated
    assert not exchange.done
    exchange.on_response(
        over_the_wire(authenticate_response(2, server_final, session_lifetime_ms=3_600_000))
    )
    assert exchange.done and exchange.state is SaslState.COMPLETE
    assert exchange.session_lifetime_ms == 3_600_000
    assert exchange.round_trips == 2
    assert exchange.next_request() is None


def test_reauthentication_delay_follows_kafka_window() -> None:
    exchange = SaslExchange(PlainMechanism("alice", SECRET), versions())
    assert exchange.reauthentication_delay_ms(0.5) is None  # not authenticated yet
    sent(exchange)
    exchange.on_response(handshake_response(0, ("PLAIN",)))
    sent(exchange)
    exchange.on_response(authenticate_response(2, session_lifetime_ms=100_000))
    assert exchange.reauthentication_delay_ms(0.0) == 85_000
    assert exchange.reauthentication_delay_ms(0.5) == 90_000
    assert exchange.reauthentication_delay_ms(0.999999) == 94_999
    with pytest.raises(ValueError):
        exchange.reauthentication_delay_ms(1.0)
    no_limit = SaslExchange(PlainMechanism("alice", SECRET), versions())
    sent(no_limit)
    no_limit.on_response(handshake_response(0, ("PLAIN",)))
    sent(no_limit)
    no_limit.on_response(authenticate_response(2, session_lifetime_ms=0))
    assert no_limit.done and no_limit.reauthentication_delay_ms(0.5) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_server_first_bytes_fail_only_with_authentication_errors(data: bytes) -> None:
    mech = ScramMechanism("SCRAM-SHA-256", "alice", SECRET, nonce_factory=nonce("cn"))
    mech.initial_response()
    try:
        reply = mech.evaluate(data)
    except AuthenticationError as error:
        assert SECRET not in str(error)
    else:  # only a well-formed message that extends our nonce gets an answer
        assert data.startswith(b"r=cn") and reply is not None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120))
def test_arbitrary_server_final_bytes_never_complete(data: bytes) -> None:
    mech, _ = _at_server_final()
    with pytest.raises(AuthenticationError):
        mech.evaluate(data)
    assert not mech.complete


def test_exchange_requests_encode_and_decode() -> None:
    from kafka_actors.protocol.wire.framing import encode_request

    exchange = SaslExchange(PlainMechanism("alice", SECRET), versions())
    handshake = sent(exchange)
    frame = encode_request(handshake, correlation_id=1, client_id="c")
    assert decode_request(frame[4:], request_type)[1] == handshake
    exchange.on_response(handshake_response(0, ("PLAIN",)))
    authenticate = sent(exchange)
    frame = encode_request(authenticate, correlation_id=2, client_id="c")
    decoded: Any = decode_request(frame[4:], request_type)[1]
    assert decoded.auth_bytes == f"\x00alice\x00{SECRET}".encode()


@pytest.mark.parametrize("authenticate_version", [0, 1, 2])
def test_exchange_plain_at_every_authenticate_version(authenticate_version: int) -> None:
    exchange = SaslExchange(
        PlainMechanism("alice", SECRET), versions(authenticate=(0, authenticate_version))
    )
    assert exchange.authenticate_version == authenticate_version
    sent(exchange)
    exchange.on_response(handshake_response(0, ("PLAIN",)))
    request = sent(exchange)
    assert request.__version__ == authenticate_version
    assert request.auth_bytes == f"\x00alice\x00{SECRET}".encode()
    lifetime = 90_000 if authenticate_version >= 1 else None
    exchange.on_response(
        over_the_wire(authenticate_response(authenticate_version, session_lifetime_ms=lifetime))
    )
    assert exchange.done
    assert exchange.session_lifetime_ms == (90_000 if authenticate_version >= 1 else 0)
    assert exchange.next_request() is None


def test_exchange_needs_handshake_v1_and_authenticate() -> None:
    with pytest.raises(UnsupportedVersionError):
        SaslExchange(PlainMechanism("a", SECRET), versions(handshake=(0, 0)))
    with pytest.raises(UnsupportedVersionError):
        SaslExchange(PlainMechanism("a", SECRET), versions(authenticate=None))


def test_handshake_unsupported_mechanism_lists_broker_mechanisms() -> None:
    exchange = SaslExchange(ScramMechanism("SCRAM-SHA-512", "alice", SECRET), versions(), node=1)
    sent(exchange)
    with pytest.raises(UnsupportedSaslMechanismError) as info:
        exchange.on_response(handshake_response(33, ("PLAIN", "SCRAM-SHA-256")))
    error = info.value
    assert error.code == 33 and not error.retriable and isinstance(error, AuthenticationError)
    assert "SCRAM-SHA-512" in str(error) and "PLAIN, SCRAM-SHA-256" in str(error)
    assert error.node == 1
    assert exchange.failed and exchange.error is error
    assert exchange.next_request() is None


def test_handshake_illegal_state() -> None:
    exchange = SaslExchange(PlainMechanism("alice", SECRET), versions())
    sent(exchange)
    with pytest.raises(IllegalSaslStateError) as info:
        exchange.on_response(handshake_response(34, ("PLAIN",)))
    assert info.value.code == 34 and not info.value.retriable


def test_handshake_other_error_code_maps_to_its_class() -> None:
    exchange = SaslExchange(PlainMechanism("alice", SECRET), versions())
    sent(exchange)
    with pytest.raises(PolicyViolationError):
        exchange.on_response(handshake_response(44))


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (58, SaslAuthenticationFailedError),
        (34, IllegalSaslStateError),
        (33, UnsupportedSaslMechanismError),
        (44, PolicyViolationError),
    ],
)
@pytest.mark.parametrize("version", [0, 1, 2])
def test_authenticate_error_codes(code: int, cls: type[KafkaError], version: int) -> None:
    exchange = SaslExchange(
        ScramMechanism("SCRAM-SHA-256", "alice", SECRET, nonce_factory=nonce()),
        versions(authenticate=(0, version)),
        node="broker-1:9093",
    )
    sent(exchange)
    exchange.on_response(handshake_response(0, ("SCRAM-SHA-256",)))
    sent(exchange)
    broker_message = "Authentication failed during authentication due to invalid credentials"
    with pytest.raises(cls) as info:
        exchange.on_response(
            over_the_wire(
                authenticate_response(version, error_code=code, error_message=broker_message)
            )
        )
    error = info.value
    assert error.code == code and not error.retriable
    assert broker_message in str(error)
    assert error.node == "broker-1:9093"
    assert exchange.failed and not exchange.done
    assert SECRET not in str(error) and SECRET not in repr(error)
    # A failed exchange accepts nothing more.
    assert exchange.next_request() is None
    with pytest.raises(IllegalSaslStateError):
        exchange.on_response(authenticate_response(version))


def test_authenticate_failure_without_message_uses_the_default_text() -> None:
    exchange = SaslExchange(PlainMechanism("alice", SECRET), versions())
    sent(exchange)
    exchange.on_response(handshake_response(0, ("PLAIN",)))
    sent(exchange)
    with pytest.raises(SaslAuthenticationFailedError, match="SASL authentication failed"):
        exchange.on_response(authenticate_response(2, error_code=58))


def test_bad_server_signature_fails_the_exchange() -> None:
    server = ScramServer("sha256", "alice", SECRET)
    exchange = SaslExchange(
        ScramMechanism("SCRAM-SHA-256", "alice", SECRET, nonce_factory=nonce()), versions()
    )
    sent(exchange)
    exchange.on_response(handshake_response(0, ("SCRAM-SHA-256",)))
    exchange.on_response(authenticate_response(2, server.first(sent(exchange).auth_bytes)))
    server.final(sent(exchange).auth_bytes)
    forged = b"v=" + base64.b64encode(b"\x00" * 32)
    with pytest.raises(AuthenticationError, match="server signature"):
        exchange.on_response(authenticate_response(2, forged))
    assert exchange.failed and not exchange.done


def test_response_of_the_wrong_api_or_at_the_wrong_time() -> None:
    exchange = SaslExchange(PlainMechanism("alice", SECRET), versions())
    with pytest.raises(IllegalSaslStateError):  # nothing sent yet
        exchange.on_response(handshake_response(0, ("PLAIN",)))
    exchange = SaslExchange(PlainMechanism("alice", SECRET), versions())
    sent(exchange)
    with pytest.raises(IllegalSaslStateError):
        exchange.on_response(authenticate_response(2))


# -- Secrets -----------------------------------------------------------------------------------


def test_no_secret_in_reprs_errors_or_logs() -> None:
    texts: list[str] = []
    config = _config(
        **{
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            f'required username="alice" password="{SECRET}";',
        }
    )
    makers: tuple[Callable[[], SaslMechanism], ...] = (
        lambda: mechanism_from_config(config),
        lambda: PlainMechanism("alice", SECRET),
        lambda: ScramMechanism("SCRAM-SHA-512", "alice", Password(SECRET)),
    )
    with capture_logs() as logs:
        get_logger("test").info("start")
        for make in makers:
            mech = make()
            texts += [repr(mech), str(mech)]
            exchange = SaslExchange(mech, versions())
            texts += [repr(exchange), str(exchange)]
            sent(exchange)
            exchange.on_response(handshake_response(0, (mech.name,)))
            texts += [repr(exchange)]
            sent(exchange)
            # A broker that echoes the password in its message is masked too.
            with pytest.raises(SaslAuthenticationFailedError) as info:
                exchange.on_response(
                    authenticate_response(
                        2, error_code=58, error_message=f"bad password {SECRET} for alice"
                    )
                )
            texts += [str(info.value), repr(info.value), info.value.message, repr(exchange)]
            assert "[hidden]" in info.value.message
        # Client-side SCRAM failures.
        mech = ScramMechanism("SCRAM-SHA-256", "alice", SECRET, nonce_factory=nonce("cn"))
        mech.initial_response()
        with pytest.raises(AuthenticationError) as scram_info:
            mech.evaluate(b"r=cnX,s=c2FsdA==,i=100")
        texts += [str(scram_info.value), repr(scram_info.value), repr(mech)]
    texts += [repr(entry) for entry in logs]
    assert logs, "the log capture must work for this check to mean anything"
    for text in texts:
        assert SECRET not in text, text
    assert any("alice" in text for text in texts)
