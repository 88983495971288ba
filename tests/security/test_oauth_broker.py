"""Show 1 (issue 12): SASL/OAUTHBEARER against a Kafka 4.x broker that validates JWTs.

The test generates an RSA key, serves its JWKS and an OIDC client-credentials token endpoint
on loopback (http.server threads), and starts a broker with a SASL_PLAINTEXT and a SASL_SSL
OAUTHBEARER listener using Kafka's ``OAuthBearerValidatorCallbackHandler`` (expected audience
and issuer checked, the URL allowed by the JVM property). Our consumer then reads every record
with the client-credentials flow, with the jwt-bearer grant (KIP-1139: an assertion signed
with the client's own RSA key, which the token endpoint verifies with the public key), and
with a token provider callable; tokens living 10 s are
refreshed during the run; a wrong client secret gives a typed error, retried with back-off,
and no secret reaches the logs.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

cryptography = pytest.importorskip("cryptography")
from cryptography.exceptions import InvalidSignature  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import padding, rsa  # noqa: E402

from kafka_actors.consumer import KafkaConsumer as Consumer  # noqa: E402
from kafka_actors.errors import OAuthTokenRetrievalError  # noqa: E402
from kafka_actors.testing.broker import KafkaBroker  # noqa: E402
from kafka_actors.testing.security import ListenerSpec  # noqa: E402

pytestmark = pytest.mark.broker

CLIENT_ID = "kafka-actors-app"
CLIENT_SECRET = "oauth-client-secret-4711"
AUDIENCE = "kafka-broker"
ISSUER = "http://127.0.0.1/test-idp"
KID = "test-key-1"
RECORDS = 300
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
ASSERTION_SUBJECT = "jwt-bearer-service"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(n: int) -> str:
    return _b64url(n.to_bytes((n.bit_length() + 7) // 8, "big"))


class IdentityProvider:
    """JWKS and client-credentials token endpoints on loopback; RS256 tokens."""

    def __init__(self, lifetime: float) -> None:
        self.lifetime = lifetime
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.issued: list[float] = []
        self.refused = 0
        #: The client's own key pair for the jwt-bearer grant: the endpoint knows the public key.
        self.client_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.assertions: list[dict[str, Any]] = []
        numbers = self.key.public_key().public_numbers()
        jwks = {
            "keys": [
                {
                    "kty": "RSA",
                    "kid": KID,
                    "use": "sig",
                    "alg": "RS256",
                    "n": _uint(numbers.n),
                    "e": _uint(numbers.e),
                }
            ]
        }
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, payload: object) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer(200, jwks) if self.path == "/jwks" else self._answer(404, {})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
                form = urllib.parse.parse_qs(body)
                if self.path == "/token" and form.get("grant_type") == [JWT_BEARER]:
                    claims = idp.check_assertion(form.get("assertion", [""])[0])
                    if claims is None:
                        idp.refused += 1
                        self._answer(400, {"error": "invalid_grant"})
                    else:
                        self._answer(200, {"access_token": idp.token(str(claims["sub"]))})
                    return
                basic = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
                if (
                    self.path != "/token"
                    or self.headers.get("Authorization") != f"Basic {basic}"
                    or "grant_type=client_credentials" not in body
                ):
                    idp.refused += 1
                    self._answer(401, {"error": "invalid_client"})
                    return
                self._answer(200, {"access_token": idp.token(CLIENT_ID), "token_type": "Bearer"})

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.jwks_url, self.token_url = f"{base}/jwks", f"{base}/token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def check_assertion(self, assertion: str) -> dict[str, Any] | None:
        """The claims of a jwt-bearer assertion signed (RS256) by the client's key, addressed to
        this endpoint and valid now; None otherwise."""
        try:
            header_b64, claims_b64, signature_b64 = assertion.split(".")
            header = json.loads(base64.urlsafe_b64decode(header_b64 + "=" * (-len(header_b64) % 4)))
            claims = json.loads(base64.urlsafe_b64decode(claims_b64 + "=" * (-len(claims_b64) % 4)))
            signature = base64.urlsafe_b64decode(signature_b64 + "=" * (-len(signature_b64) % 4))
            self.client_key.public_key().verify(
                signature,
                f"{header_b64}.{claims_b64}".encode(),
                padding.PKCS1v15(),
                hashes.SHA256(),
            )
        except (ValueError, InvalidSignature):
            return None
        now = time.time()
        if (
            header.get("alg") != "RS256"
            or claims.get("aud") != self.token_url
            or not claims.get("sub")
            or not claims.get("nbf", now) <= now < claims.get("exp", 0)
        ):
            return None
        self.assertions.append(claims)
        return dict(claims)

    def token(self, subject: str) -> str:
        now = time.time()
        self.issued.append(now)
        header = {"alg": "RS256", "typ": "JWT", "kid": KID}
        claims = {
            "sub": subject,
            "iss": ISSUER,
            "aud": AUDIENCE,
            "iat": int(now),
            "exp": int(now + self.lifetime),
            "scope": "kafka",
            "jti": uuid.uuid4().hex,
        }
        signing = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = self.key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing}.{_b64url(signature)}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture(scope="module")
def idp() -> Iterator[IdentityProvider]:
    provider = IdentityProvider(lifetime=10.0)
    try:
        yield provider
    finally:
        provider.close()


@pytest.fixture(scope="module")
def oauth_broker(idp: IdentityProvider) -> Iterator[KafkaBroker]:
    listeners = [
        ListenerSpec("OAUTH_PLAIN", "SASL_PLAINTEXT", ("OAUTHBEARER",)),
        ListenerSpec("OAUTH_SSL", "SASL_SSL", ("OAUTHBEARER",)),
    ]
    config = {
        "sasl.oauthbearer.jwks.endpoint.url": idp.jwks_url,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
    }
    allowed = f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={idp.jwks_url},{idp.token_url}"
    with KafkaBroker(broker_config=config, listeners=listeners, jvm_options=[allowed]) as broker:
        yield broker


def _produce(broker: KafkaBroker, topic: str) -> None:
    from confluent_kafka import Producer

    broker.create_topic(topic, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(RECORDS):
        producer.produce(topic, value=f"v{i}".encode(), key=str(i).encode())
    assert producer.flush(60) == 0


def _client(broker: KafkaBroker, listener: str, **extra: object) -> dict[str, object]:
    spec = broker.listener(listener)
    conf: dict[str, object] = {
        "bootstrap.servers": broker.listener_bootstrap(listener),
        "security.protocol": spec.security_protocol,
        "sasl.mechanism": "OAUTHBEARER",
        "group.id": f"g-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "reconnect.backoff.max.ms": 500,
    }
    if spec.uses_ssl:
        conf["ssl.truststore.location"] = str(broker.ca_path)
    conf.update(extra)
    return conf


def _consume_all(conf: dict[str, object], topic: str, *, min_seconds: float = 0.0) -> set[str]:
    seen: set[str] = set()
    started = time.monotonic()
    deadline = started + 120
    with Consumer(conf) as consumer:
        consumer.subscribe([topic])
        while time.monotonic() < deadline:
            for record in consumer.poll(0.5):
                seen.add(record.value.decode())
            if len(seen) >= RECORDS and time.monotonic() - started >= min_seconds:
                break
    return seen


@pytest.mark.parametrize("listener", ["OAUTH_PLAIN", "OAUTH_SSL"])
def test_client_credentials_flow_consumes_everything_across_token_refreshes(
    oauth_broker: KafkaBroker,
    idp: IdentityProvider,
    listener: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kafka_actors")
    topic = f"oauth-cc-{listener.lower()}"
    _produce(oauth_broker, topic)
    before = len(idp.issued)
    conf = _client(
        oauth_broker,
        listener,
        **{
            "sasl.oauthbearer.token.endpoint.url": idp.token_url,
            "sasl.oauthbearer.client.credentials.client.id": CLIENT_ID,
            "sasl.oauthbearer.client.credentials.client.secret": CLIENT_SECRET,
            "sasl.oauthbearer.scope": "kafka",
        },
    )
    # Run past one token lifetime (10 s): the source refreshes half-way (at ~5 s and ~10 s).
    seen = _consume_all(conf, topic, min_seconds=15.0)
    assert seen == {f"v{i}" for i in range(RECORDS)}
    assert len(idp.issued) - before >= 3
    # No connection was tried before the first token (it would fail "no token yet", warn
    # that the broker is unavailable and sit out a reconnect backoff).
    assert "token yet" not in caplog.text
    assert "node_unavailable" not in caplog.text and "node_connect_failed" not in caplog.text


def test_jwt_bearer_grant_consumes_everything_across_token_refreshes(
    oauth_broker: KafkaBroker, idp: IdentityProvider, tmp_path: Path
) -> None:
    """KIP-1139: the token comes from the jwt-bearer grant, with an assertion this client signs
    from a private key file (encrypted PEM) and the endpoint verifies; refreshed tokens use new
    assertions (a new jti each)."""
    key_file = tmp_path / "client-key.pem"
    key_file.write_bytes(
        idp.client_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"key-pass"),
        )
    )
    topic = "oauth-jwt-bearer"
    _produce(oauth_broker, topic)
    before = len(idp.assertions)
    conf = _client(
        oauth_broker,
        "OAUTH_PLAIN",
        **{
            "sasl.oauthbearer.token.endpoint.url": idp.token_url,
            "sasl.oauthbearer.jwt.retriever.class": (
                "org.apache.kafka.common.security.oauthbearer.JwtBearerJwtRetriever"
            ),
            "sasl.oauthbearer.assertion.private.key.file": str(key_file),
            "sasl.oauthbearer.assertion.private.key.passphrase": "key-pass",
            "sasl.oauthbearer.assertion.claim.iss": CLIENT_ID,
            "sasl.oauthbearer.assertion.claim.sub": ASSERTION_SUBJECT,
            "sasl.oauthbearer.assertion.claim.aud": idp.token_url,
            "sasl.oauthbearer.assertion.claim.jti.include": True,
            "sasl.oauthbearer.scope": "kafka",
        },
    )
    seen = _consume_all(conf, topic, min_seconds=12.0)
    assert seen == {f"v{i}" for i in range(RECORDS)}
    granted = idp.assertions[before:]
    assert len(granted) >= 2  # the first token and at least one refresh (10 s tokens)
    assert {claims["sub"] for claims in granted} == {ASSERTION_SUBJECT}
    assert len({claims["jti"] for claims in granted}) == len(granted)


def test_token_provider_callable(oauth_broker: KafkaBroker, idp: IdentityProvider) -> None:
    topic = "oauth-provider"
    _produce(oauth_broker, topic)
    calls: list[float] = []

    def provider() -> tuple[str, float]:
        calls.append(time.time())
        token = idp.token("callable-user")
        return token, time.time() + idp.lifetime

    conf = _client(oauth_broker, "OAUTH_PLAIN", **{"sasl.oauthbearer.token.provider": provider})
    seen = _consume_all(conf, topic)
    assert seen == {f"v{i}" for i in range(RECORDS)}
    assert calls


def test_wrong_client_secret_is_typed_backed_off_and_not_logged(
    oauth_broker: KafkaBroker, idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    from kafka_actors.log import configure

    configure(stdlib=True, level="DEBUG")  # the kafka_actors logger is restored by conftest
    caplog.set_level(logging.DEBUG)
    _wrong_secret(oauth_broker, idp, caplog)


def _wrong_secret(
    oauth_broker: KafkaBroker, idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = "wrong-secret-0815"
    refused_before = idp.refused
    conf = _client(
        oauth_broker,
        "OAUTH_PLAIN",
        **{
            "sasl.oauthbearer.token.endpoint.url": idp.token_url,
            "sasl.oauthbearer.client.credentials.client.id": CLIENT_ID,
            "sasl.oauthbearer.client.credentials.client.secret": wrong,
            "sasl.login.retry.backoff.ms": 100,
            "sasl.login.retry.backoff.max.ms": 400,
        },
    )
    started = time.monotonic()
    errors: list[OAuthTokenRetrievalError] = []
    with Consumer(conf) as consumer:
        consumer.subscribe(["whatever"])
        # poll raises at the endpoint's first refusal; keep polling (each failed attempt raises
        # again) until the token source has retried, so that the retry is seen whatever
        # close() takes (closing stops the retries: stopping at the first error raced the
        # first, jittered back-off)
        while time.monotonic() - started < 60 and (not errors or idp.refused - refused_before < 2):
            try:
                consumer.poll(0.5)
            except OAuthTokenRetrievalError as exc:
                errors.append(exc)
    assert errors, "no OAuthTokenRetrievalError raised"
    assert errors[0].status == 401
    elapsed = time.monotonic() - started
    refused = idp.refused - refused_before
    # retried with back-off (100 ms doubling to 400 ms, jitter 0.2): at least one retry, and
    # no more than one request per 80 ms (the smallest jittered back-off) plus the first
    assert 2 <= refused <= 1 + elapsed / 0.08
    text = caplog.text + "".join(str(e) + repr(e) for e in errors)
    assert wrong not in text and CLIENT_SECRET not in text
    assert "oauth_token_fetch_failed" in caplog.text


def test_token_the_broker_rejects_is_a_typed_sasl_failure(
    oauth_broker: KafkaBroker, idp: IdentityProvider
) -> None:
    """A well-formed JWT signed by a key the JWKS does not hold: the broker answers with its
    RFC 7628 JSON error, we send the \\x01, it fails the exchange; the consumer raises."""
    from kafka_actors.errors import SaslAuthenticationFailedError

    stranger = IdentityProvider(lifetime=60.0)  # another key, same claims
    try:

        def provider() -> tuple[str, float]:
            return stranger.token("intruder"), time.time() + 60

        conf = _client(oauth_broker, "OAUTH_PLAIN", **{"sasl.oauthbearer.token.provider": provider})
        started = time.monotonic()
        with Consumer(conf) as consumer, pytest.raises(SaslAuthenticationFailedError) as info:
            consumer.subscribe(["whatever"])
            while time.monotonic() - started < 60:
                consumer.poll(0.5)
        assert "invalid_token" in str(info.value)
    finally:
        stranger.close()
