"""SASL client mechanisms and the per-connection SASL exchange (pure, sans-I/O).

Owns: the client side of PLAIN (RFC 4616) and SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802,
RFC 7677) as Kafka's ``PlainSaslClient`` / ``ScramSaslClient`` speak them (OAUTHBEARER, RFC
7628, lives in ``protocol.oauth`` and is chosen here), and
:class:`SaslExchange`, the state machine a connection runs after ApiVersions: SaslHandshake v1
naming the mechanism, then SaslAuthenticate round trips until the mechanism completes.
May touch: config (credentials), errors, protocol.requests / protocol.versions / protocol.apis
(kio request builders and negotiated versions). No sockets, no clock, no logging.

Secrets (the password, PLAIN's initial response, SCRAM proofs and salted passwords) never appear
in a ``repr``/``str`` or in an error message of this module. The kio ``SaslAuthenticate``
requests this module produces *do* carry them in ``auth_bytes``: never log those requests.

Usage by a connection owner (after ApiVersions gave ``versions``)::

    exchange = SaslExchange(mechanism_from_config(config), versions)
    while not exchange.done:
        request = exchange.next_request()          # kio request, or None while waiting
        if request is not None:
            send(request)                          # at request.__version__
        ...
        exchange.on_response(decoded_response)     # raises AuthenticationError subclasses
    lifetime = exchange.session_lifetime_ms        # KIP-368: 0 = no re-authentication
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

from kafka_actors.config import ConsumerConfig, Password
from kafka_actors.errors import (
    AuthenticationError,
    ConfigError,
    IllegalSaslStateError,
    KafkaError,
    SaslAuthenticationFailedError,
    ScramIterationsError,
    UnsupportedSaslMechanismError,
    UnsupportedVersionError,
    error_for_code,
)
from kafka_actors.protocol.connection.oauth import OAuthBearerMechanism, OAuthBearerToken
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.protocol.wire.requests import sasl_authenticate_request, sasl_handshake_request
from kafka_actors.protocol.wire.versions import NegotiatedVersions

__all__ = [
    "MAX_SCRAM_ITERATIONS",
    "MIN_SCRAM_ITERATIONS",
    "OAuthBearerMechanism",
    "PlainMechanism",
    "SaslExchange",
    "SaslMechanism",
    "ScramMechanism",
    "TokenSource",
    "escape_sasl_name",
    "mechanism_from_config",
]

#: Kafka's ``ScramMechanism.minIterations()`` for both SHA-256 and SHA-512.
MIN_SCRAM_ITERATIONS: Final = 4096
#: Most PBKDF2 iterations this client runs for a server (Java's client has no bound beyond
#: int, so a hostile server can make it spin for hours). A KRaft broker stores no credential
#: above 16384 iterations (``ScramControlManager.MAX_ITERATIONS``, KIP-554); 100,000 leaves
#: room for credentials made elsewhere (ZooKeeper-era ``kafka-configs``, proxies) and costs
#: about 0.1 s of PBKDF2 (SHA-256) or 0.13 s (SHA-512) per connection at the bound.
MAX_SCRAM_ITERATIONS: Final = 100_000
_HIDDEN: Final = "[hidden]"
#: SCRAM's GS2 header for a client without channel binding and without authzid.
_GS2_HEADER: Final = "n,,"
_SCRAM_HASHES: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class SaslMechanism(Protocol):
    """The client side of one SASL mechanism for one authentication."""

    @property
    def name(self) -> str:
        """The IANA mechanism name sent in SaslHandshake (``PLAIN``, ``SCRAM-SHA-256`` ...)."""
        ...

    @property
    def complete(self) -> bool:
        """True once the mechanism has nothing more to send or verify."""
        ...

    def initial_response(self) -> bytes:
        """The first client message (sent in the first SaslAuthenticate)."""
        ...

    def evaluate(self, challenge: bytes) -> bytes | None:
        """Consume a server message; return the next client message, or None when done.

        Raises :class:`AuthenticationError` when the server message is invalid or does not
        prove the server knows the credentials.
        """
        ...


def _secret_bytes(password: Password | str) -> bytes:
    text = password.value() if isinstance(password, Password) else password
    return text.encode("utf-8")


# -- PLAIN -------------------------------------------------------------------------------------


class PlainMechanism:
    """RFC 4616 PLAIN: one message ``[authzid] NUL authcid NUL passwd``, no server challenge.

    Kafka's client sends no authorization id (``\\0user\\0password``).
    """

    __slots__ = ("_complete", "_password", "_username")

    name: Final = "PLAIN"

    def __init__(self, username: str, password: Password | str) -> None:
        if "\x00" in username:
            raise ConfigError("SASL/PLAIN username must not contain NUL", key="sasl.username")
        self._username = username
        self._password = password if isinstance(password, Password) else Password(password)
        if "\x00" in self._password.value():
            raise ConfigError("SASL/PLAIN password must not contain NUL", key="sasl.password")
        self._complete = False

    @property
    def username(self) -> str:
        return self._username

    @property
    def complete(self) -> bool:
        return self._complete

    def initial_response(self) -> bytes:
        if self._complete:
            raise IllegalSaslStateError("SASL/PLAIN initial response already sent")
        self._complete = True
        return b"\x00" + self._username.encode("utf-8") + b"\x00" + _secret_bytes(self._password)

    def evaluate(self, challenge: bytes) -> bytes | None:
        # The broker answers PLAIN with empty auth bytes: there is nothing to evaluate.
        if not self._complete:
            raise IllegalSaslStateError("SASL/PLAIN evaluated before the initial response")
        if challenge:
            raise AuthenticationError("SASL/PLAIN: unexpected challenge from the server")
        return None

    def __repr__(self) -> str:
        return f"PlainMechanism(username={self._username!r}, password={_HIDDEN})"


# -- SCRAM -------------------------------------------------------------------------------------


def escape_sasl_name(name: str) -> str:
    """RFC 5802 ``saslname``: ``=`` becomes ``=3D`` and ``,`` becomes ``=2C``."""
    return name.replace("=", "=3D").replace(",", "=2C")


def _default_nonce() -> str:
    # Printable ASCII without ',' (RFC 5802 c-nonce); URL-safe base64 of 24 random bytes.
    return secrets.token_urlsafe(24)


def _parse_attributes(message: str) -> list[tuple[str, str]] | None:
    """``a=value,b=value`` into ordered pairs; None if malformed.

    RFC 5802 attributes are single letters; Kafka's SCRAM extensions (``tokenauth=true``)
    have longer alphabetic names. Values may contain ``=`` (base64).
    """
    pairs: list[tuple[str, str]] = []
    for part in message.split(","):
        name, equals, value = part.partition("=")
        if not equals or not name.isascii() or not name.isalpha():
            return None
        pairs.append((name, value))
    return pairs


class _ScramState(enum.Enum):
    INITIAL = "initial"
    AWAIT_SERVER_FIRST = "await-server-first"
    AWAIT_SERVER_FINAL = "await-server-final"
    COMPLETE = "complete"
    FAILED = "failed"


class ScramMechanism:
    """SCRAM-SHA-256 / SCRAM-SHA-512 client (RFC 5802 without channel binding, RFC 7677).

    As Kafka's ``ScramSaslClient``: client-first ``n,,n=<saslname>,r=<nonce>[,ext=value...]``
    (extensions such as ``tokenauth=true`` for delegation tokens), server-first ``r, s, i``
    whose nonce must extend ours and whose iteration count must be 4096..100,000
    (``ScramIterationsError`` otherwise),
    client-final ``c=biws,r=<nonce>,p=<proof>``, and server-final ``v=<signature>`` checked in
    constant time (``e=<error>`` is the server refusing). The password is used as its UTF-8
    bytes (Kafka does not apply SASLprep). ``nonce_factory`` is injected for tests.
    """

    __slots__ = (
        "_auth_message",
        "_client_first_bare",
        "_digest",
        "_extensions",
        "_name",
        "_nonce",
        "_nonce_factory",
        "_password",
        "_salted_password",
        "_state",
        "_username",
    )

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: Password | str,
        *,
        extensions: Sequence[tuple[str, str]] = (),
        nonce_factory: Callable[[], str] = _default_nonce,
    ) -> None:
        digest = _SCRAM_HASHES.get(mechanism.upper())
        if digest is None:
            raise ConfigError(
                f"Unsupported SCRAM mechanism {mechanism!r}; use one of {', '.join(_SCRAM_HASHES)}",
                key="sasl.mechanism",
            )
        for key, value in extensions:
            if len(key) < 2 or not key.isalnum() or "," in value:
                raise ConfigError(f"Invalid SCRAM extension {key!r}", key="sasl.jaas.config")
        self._name = mechanism.upper()
        self._digest = digest
        self._username = username
        self._password = password if isinstance(password, Password) else Password(password)
        self._extensions = tuple(extensions)
        self._nonce_factory = nonce_factory
        self._state = _ScramState.INITIAL
        self._client_first_bare = ""
        self._nonce = ""
        self._auth_message = b""
        self._salted_password = b""

    @property
    def name(self) -> str:
        return self._name

    @property
    def username(self) -> str:
        return self._username

    @property
    def complete(self) -> bool:
        return self._state is _ScramState.COMPLETE

    def _fail(
        self, message: str, error: type[AuthenticationError] = AuthenticationError
    ) -> AuthenticationError:
        self._state = _ScramState.FAILED
        self._salted_password = b""
        return error(f"{self._name}: {message}")

    def _hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self._digest).digest()

    def initial_response(self) -> bytes:
        if self._state is not _ScramState.INITIAL:
            raise IllegalSaslStateError(f"{self._name} initial response already sent")
        nonce = self._nonce_factory()
        if not nonce or "," in nonce or not nonce.isprintable() or not nonce.isascii():
            raise self._fail("invalid client nonce")
        bare = f"n={escape_sasl_name(self._username)},r={nonce}"
        for key, value in self._extensions:
            bare += f",{key}={value}"
        self._client_first_bare = bare
        self._nonce = nonce
        self._state = _ScramState.AWAIT_SERVER_FIRST
        return (_GS2_HEADER + bare).encode("utf-8")

    def evaluate(self, challenge: bytes) -> bytes | None:
        if self._state is _ScramState.AWAIT_SERVER_FIRST:
            return self._client_final(challenge)
        if self._state is _ScramState.AWAIT_SERVER_FINAL:
            self._verify_server_final(challenge)
            return None
        raise IllegalSaslStateError(f"{self._name} challenge in state {self._state.value}")

    def _client_final(self, challenge: bytes) -> bytes:
        try:
            server_first = challenge.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("server-first message is not UTF-8") from None
        pairs = _parse_attributes(server_first) or []
        if pairs and pairs[0][0] == "m":
            raise self._fail("server-first message has an unsupported mandatory extension")
        if len(pairs) < 3 or [k for k, _ in pairs[:3]] != ["r", "s", "i"]:
            raise self._fail("invalid server-first message (expected r=, s=, i=)")
        nonce, salt_text, iterations_text = (v for _, v in pairs[:3])
        if not nonce.startswith(self._nonce) or len(nonce) <= len(self._nonce):
            raise self._fail("invalid server nonce: does not extend the client nonce")
        try:
            salt = base64.b64decode(salt_text, validate=True)
        except ValueError:
            raise self._fail("invalid salt in server-first message") from None
        if not salt:
            raise self._fail("empty salt in server-first message")
        if not iterations_text.isascii() or not iterations_text.isdigit():
            raise self._fail("invalid iteration count in server-first message")
        if len(iterations_text) > 10:  # no int() of a huge digit string either
            raise self._fail(
                f"requested iterations {iterations_text[:12]}... exceed the maximum "
                f"{MAX_SCRAM_ITERATIONS}",
                ScramIterationsError,
            )
        iterations = int(iterations_text)
        if iterations < MIN_SCRAM_ITERATIONS:
            raise self._fail(
                f"requested iterations {iterations} is less than minimum {MIN_SCRAM_ITERATIONS}",
                ScramIterationsError,
            )
        if iterations > MAX_SCRAM_ITERATIONS:
            raise self._fail(
                f"requested iterations {iterations} exceed the maximum {MAX_SCRAM_ITERATIONS}",
                ScramIterationsError,
            )
        channel_binding = base64.b64encode(_GS2_HEADER.encode()).decode()
        without_proof = f"c={channel_binding},r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        salted = hashlib.pbkdf2_hmac(self._digest, _secret_bytes(self._password), salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._digest, client_key).digest()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._salted_password = salted
        self._auth_message = auth_message
        self._state = _ScramState.AWAIT_SERVER_FINAL
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_server_final(self, challenge: bytes) -> None:
        try:
            server_final = challenge.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("server-final message is not UTF-8") from None
        if server_final.startswith("e="):
            # RFC 5802 server-error values are fixed tokens (e.g. invalid-proof), no secrets.
            raise self._fail(f"server refused authentication: {server_final[2:]}")
        pairs = _parse_attributes(server_final) or []
        if not pairs or pairs[0][0] != "v":
            raise self._fail("invalid server-final message (expected v=)")
        try:
            received = base64.b64decode(pairs[0][1], validate=True)
        except ValueError:
            raise self._fail("invalid server signature encoding") from None
        server_key = self._hmac(self._salted_password, b"Server Key")
        expected = self._hmac(server_key, self._auth_message)
        if not hmac.compare_digest(received, expected):
            raise self._fail("invalid server signature in server-final message")
        self._salted_password = b""
        self._state = _ScramState.COMPLETE

    def __repr__(self) -> str:
        return (
            f"ScramMechanism({self._name!r}, username={self._username!r}, "
            f"password={_HIDDEN}, state={self._state.value!r})"
        )


# -- Construction from the consumer configuration -------------------------------------------------


class TokenSource(Protocol):
    """Where SASL/OAUTHBEARER takes its token (``kafka_actors.oauth.OAuthBearerTokenSource``):
    answers at once with a valid token or raises a typed error."""

    def current(self) -> OAuthBearerToken: ...


def mechanism_from_config(
    config: ConsumerConfig,
    *,
    nonce_factory: Callable[[], str] | None = None,
    token_source: TokenSource | None = None,
) -> SaslMechanism:
    """The mechanism ``sasl.mechanism`` names, with the credentials from ``sasl.jaas.config``
    (or ``sasl.username`` / ``sasl.password``). ``ConsumerConfig`` has already moved the JAAS
    credentials into ``sasl_username`` / ``sasl_password`` and validated them.

    Raises :class:`ConfigError` (naming the key, never the password) when SASL is not usable.
    """
    mechanism = config.sasl_mechanism.upper()
    if mechanism == "GSSAPI":
        raise ConfigError(
            "SASL/GSSAPI needs a Kerberos login and the broker's host "
            "(kafka_actors.kerberos.KerberosLogin.mechanism)",
            key="sasl.mechanism",
        )
    if mechanism == "OAUTHBEARER":
        if token_source is None:
            raise ConfigError(
                "SASL/OAUTHBEARER needs a token source (kafka_actors.oauth)",
                key="sasl.mechanism",
            )
        return OAuthBearerMechanism(token_source.current())
    username, password = config.sasl_username, config.sasl_password
    if username is None or password is None:
        raise ConfigError(
            "SASL needs credentials: set sasl.jaas.config, or sasl.username and sasl.password",
            key="sasl.jaas.config",
        )
    if mechanism == "PLAIN":
        return PlainMechanism(username, password)
    if mechanism in _SCRAM_HASHES:
        extensions = (("tokenauth", "true"),) if config.sasl_token_auth else ()
        if nonce_factory is None:
            return ScramMechanism(mechanism, username, password, extensions=extensions)
        return ScramMechanism(
            mechanism, username, password, extensions=extensions, nonce_factory=nonce_factory
        )
    raise ConfigError(
        f"sasl.mechanism {config.sasl_mechanism!r} is not supported; use one of "
        f"PLAIN, {', '.join(_SCRAM_HASHES)}, OAUTHBEARER",
        key="sasl.mechanism",
    )


# -- The per-connection exchange -------------------------------------------------------------------


class SaslState(enum.Enum):
    SEND_HANDSHAKE = "send-handshake"
    AWAIT_HANDSHAKE = "await-handshake"
    SEND_AUTHENTICATE = "send-authenticate"
    AWAIT_AUTHENTICATE = "await-authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


class SaslExchange:
    """SaslHandshake v1 then SaslAuthenticate round trips, as Kafka's SaslClientAuthenticator.

    ``versions`` are the connection's negotiated ApiVersions: SaslHandshake must reach v1
    (brokers older than Kafka 1.0 speak raw SASL tokens, which this client does not);
    SaslAuthenticate is sent at the highest common version (v0..v2). On v1+ the final response's
    ``session_lifetime`` is kept in :attr:`session_lifetime_ms` (KIP-368; 0 means the broker
    set no limit). An error answer raises the matching :class:`AuthenticationError` subclass
    carrying the broker's ``error_message``; the exchange is then :attr:`failed` for good.
    """

    def __init__(
        self,
        mechanism: SaslMechanism,
        versions: NegotiatedVersions,
        *,
        node: int | str | None = None,
    ) -> None:
        self._mechanism = mechanism
        self._node = node
        self.handshake_version = versions.version_for(ApiKey.SASL_HANDSHAKE, min_version=1)
        if not versions.supports(ApiKey.SASL_AUTHENTICATE):
            raise UnsupportedVersionError(
                "The broker does not support SaslAuthenticate (Kafka 1.0+ is needed for SASL)"
            )
        self.authenticate_version = versions.version_for(ApiKey.SASL_AUTHENTICATE)
        self._state = SaslState.SEND_HANDSHAKE
        self._pending: bytes | None = None
        self.broker_mechanisms: tuple[str, ...] = ()
        #: KIP-368 session lifetime of the last SaslAuthenticate answer (v1+), 0 when none.
        self.session_lifetime_ms = 0
        self.error: KafkaError | None = None
        self.round_trips = 0

    # ---------------------------------------------------------------- state

    @property
    def state(self) -> SaslState:
        return self._state

    @property
    def done(self) -> bool:
        """True once the broker accepted the credentials (and the server proved itself)."""
        return self._state is SaslState.COMPLETE

    @property
    def failed(self) -> bool:
        return self._state is SaslState.FAILED

    @property
    def awaiting_response(self) -> bool:
        return self._state in (SaslState.AWAIT_HANDSHAKE, SaslState.AWAIT_AUTHENTICATE)

    @property
    def mechanism_name(self) -> str:
        return self._mechanism.name

    def __repr__(self) -> str:
        return (
            f"SaslExchange(mechanism={self._mechanism.name!r}, state={self._state.value!r}, "
            f"round_trips={self.round_trips}, session_lifetime_ms={self.session_lifetime_ms})"
        )

    # ---------------------------------------------------------------- driving

    def next_request(self) -> Any | None:
        """The next kio request to send, or None while a response is awaited (or when done).

        Each request is returned once; its version is ``request.__version__``.
        """
        if self._state is SaslState.SEND_HANDSHAKE:
            self._state = SaslState.AWAIT_HANDSHAKE
            return sasl_handshake_request(self.handshake_version, mechanism=self._mechanism.name)
        if self._state is SaslState.SEND_AUTHENTICATE:
            assert self._pending is not None
            auth_bytes, self._pending = self._pending, None
            self._state = SaslState.AWAIT_AUTHENTICATE
            self.round_trips += 1
            return sasl_authenticate_request(self.authenticate_version, auth_bytes=auth_bytes)
        return None

    def on_response(self, response: Any) -> None:
        """Consume the decoded answer to the request :meth:`next_request` gave last."""
        try:
            if self._state is SaslState.AWAIT_HANDSHAKE:
                self._on_handshake(response)
            elif self._state is SaslState.AWAIT_AUTHENTICATE:
                self._on_authenticate(response)
            else:
                raise IllegalSaslStateError(
                    f"Unexpected SASL response in state {self._state.value}", node=self._node
                )
        except KafkaError as error:
            self._state = SaslState.FAILED
            self._pending = None
            self.error = error
            raise

    def _on_handshake(self, response: Any) -> None:
        if int(getattr(response, "__api_key__", -1)) != ApiKey.SASL_HANDSHAKE:
            raise IllegalSaslStateError("Expected a SaslHandshake response", node=self._node)
        self.broker_mechanisms = tuple(response.mechanisms)
        code = int(response.error_code)
        if code == UnsupportedSaslMechanismError.code:
            raise UnsupportedSaslMechanismError(
                f"Client SASL mechanism '{self._mechanism.name}' not enabled in the server, "
                f"enabled mechanisms are [{', '.join(self.broker_mechanisms)}]",
                node=self._node,
            )
        if code == IllegalSaslStateError.code:
            raise IllegalSaslStateError(
                "Unexpected handshake request with client mechanism "
                f"{self._mechanism.name}, enabled mechanisms are "
                f"[{', '.join(self.broker_mechanisms)}]",
                node=self._node,
            )
        if code != 0:
            raise error_for_code(code, node=self._node)
        self._pending = self._mechanism.initial_response()
        self._state = SaslState.SEND_AUTHENTICATE

    def _on_authenticate(self, response: Any) -> None:
        if int(getattr(response, "__api_key__", -1)) != ApiKey.SASL_AUTHENTICATE:
            raise IllegalSaslStateError("Expected a SaslAuthenticate response", node=self._node)
        code = int(response.error_code)
        if code != 0:
            message = self._redact(response.error_message)
            status = getattr(self._mechanism, "server_error", None)
            if isinstance(status, str):  # OAUTHBEARER: the broker's RFC 7628 JSON status
                message = f"{message or 'authentication failed'} (server status: {status})"
            if code == SaslAuthenticationFailedError.code:
                raise SaslAuthenticationFailedError(message, node=self._node)
            if code == IllegalSaslStateError.code:
                raise IllegalSaslStateError(message, node=self._node)
            if code == UnsupportedSaslMechanismError.code:
                raise UnsupportedSaslMechanismError(message, node=self._node)
            raise error_for_code(code, message, node=self._node)
        lifetime = getattr(response, "session_lifetime", None)
        if lifetime is not None:
            self.session_lifetime_ms = max(0, int(lifetime.total_seconds() * 1000))
        if self._mechanism.complete:
            self._state = SaslState.COMPLETE
            return
        reply = self._mechanism.evaluate(bytes(response.auth_bytes))
        if reply is not None:
            self._pending = reply
            self._state = SaslState.SEND_AUTHENTICATE
        elif self._mechanism.complete:
            self._state = SaslState.COMPLETE
        else:
            raise IllegalSaslStateError(
                f"{self._mechanism.name} produced no response before completing",
                node=self._node,
            )

    def reauthentication_delay_ms(self, random_fraction: float) -> int | None:
        """When to re-authenticate, in ms after this exchange completed (KIP-368), or None.

        As Kafka's SaslClientAuthenticator: 85% of the session lifetime plus up to 10% jitter
        (``random_fraction`` in [0, 1), injected) so that many connections do not
        re-authenticate at once. Re-authenticate with a fresh exchange and mechanism (or
        reconnect) before the broker closes the connection at the end of the session.
        """
        if self._state is not SaslState.COMPLETE or self.session_lifetime_ms <= 0:
            return None
        if not 0.0 <= random_fraction < 1.0:
            raise ValueError("random_fraction must be in [0, 1)")
        return int(self.session_lifetime_ms * (0.85 + 0.10 * random_fraction))

    def _redact(self, message: str | None) -> str | None:
        """The broker's message, with the password masked should a broker ever echo it."""
        if not message:
            return None
        password = getattr(self._mechanism, "_password", None)
        if isinstance(password, Password) and password.value():
            message = message.replace(password.value(), _HIDDEN)
        return message
