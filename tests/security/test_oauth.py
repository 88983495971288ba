"""SASL/OAUTHBEARER without a broker: the RFC 7628 mechanism, token checks, the refresh
schedule, the configuration keys, the client-credentials HTTP call against a token endpoint
served on loopback, and the token source's worker thread (provider callables, refresh, errors)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import (
    ConfigError,
    OAuthBearerTokenError,
    OAuthTokenRetrievalError,
    OAuthTokenUnavailableError,
)
from kafka_actors.oauth import (
    OAuthBearerTokenSource,
    client_credentials_fetcher,
    provider_fetcher,
    token_source_from_config,
)
from kafka_actors.protocol.connection.oauth import (
    OAuthBearerMechanism,
    OAuthBearerToken,
    RefreshSettings,
    parse_jwt,
    parse_token_response,
    refresh_at,
)
from kafka_actors.protocol.connection.sasl import mechanism_from_config
from tests.security.token_server import LocalTokenServer

SECRET = "s3cr3t-client-secret"


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def make_jwt(exp: float, *, sub: str = "alice", iat: float | None = None) -> str:
    claims: dict[str, Any] = {"sub": sub, "exp": exp}
    if iat is not None:
        claims["iat"] = iat
    return f"{_b64({'alg': 'RS256', 'typ': 'JWT'})}.{_b64(claims)}.c2lnbmF0dXJl"


# -- the mechanism -------------------------------------------------------------------------------


def test_client_first_message_is_rfc7628_bearer() -> None:
    mech = OAuthBearerMechanism(OAuthBearerToken("tok.en.x", time.time() + 60))
    assert mech.initial_response() == b"n,,\x01auth=Bearer tok.en.x\x01\x01"
    assert mech.evaluate(b"") is None
    assert mech.complete
    assert "tok.en.x" not in repr(mech)


def test_server_json_error_is_answered_with_kvsep_then_fails() -> None:
    mech = OAuthBearerMechanism(OAuthBearerToken("t", time.time() + 60))
    mech.initial_response()
    challenge = json.dumps({"status": "invalid_token", "scope": "x"}).encode()
    assert mech.evaluate(challenge) == b"\x01"
    assert mech.server_error == "invalid_token"
    assert not mech.complete


def test_mechanism_from_config_uses_the_token_source() -> None:
    config = ConsumerConfig.from_dict(
        {
            "bootstrap.servers": "localhost:9092",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.provider": lambda: ("abc", time.time() + 60),
        }
    )

    class Source:
        def current(self) -> OAuthBearerToken:
            return OAuthBearerToken("abc", time.time() + 60)

    mech = mechanism_from_config(config, token_source=Source())
    assert mech.name == "OAUTHBEARER"
    assert mech.initial_response() == b"n,,\x01auth=Bearer abc\x01\x01"


# -- token checks ----------------------------------------------------------------------------------


def test_parse_jwt_reads_lifetime_and_subject() -> None:
    now = 1_000_000.0
    token = parse_jwt(make_jwt(now + 100, iat=now - 5), now)
    assert (token.expires_at, token.issued_at, token.principal) == (now + 100, now - 5, "alice")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("opaque-token", "not a JWT"),
        ("a.b", "not a JWT"),
        (f"{_b64({})}.!!!.x", "base64url"),
        (f"{_b64({})}.{_b64({'sub': 'a'})}.x", "'exp'"),
        (f"{_b64({})}.{_b64({'exp': 2e9})}.x", "'sub'"),
        (f"{_b64({})}.{_b64({'exp': 'soon', 'sub': 'a'})}.x", "not a number"),
    ],
)
def test_bad_tokens_are_typed_errors(text: str, fragment: str) -> None:
    with pytest.raises(OAuthBearerTokenError, match=fragment) as info:
        parse_jwt(text, 1_000_000.0)
    assert text not in str(info.value) or len(text) < 5


def test_expired_jwt_is_a_typed_error_without_the_token() -> None:
    token = make_jwt(999.0)
    with pytest.raises(OAuthBearerTokenError, match="expired") as info:
        parse_jwt(token, 1000.0)
    assert token not in str(info.value)


def test_token_endpoint_answers() -> None:
    assert parse_token_response(b'{"access_token": "x.y.z", "expires_in": 5}', 200) == "x.y.z"
    with pytest.raises(OAuthTokenRetrievalError, match="HTTP 401: invalid_client") as info:
        parse_token_response(b'{"error": "invalid_client"}', 401)
    assert info.value.status == 401
    with pytest.raises(OAuthTokenRetrievalError, match="no access_token"):
        parse_token_response(b'{"token_type": "Bearer"}', 200)
    with pytest.raises(OAuthTokenRetrievalError, match="larger than"):
        parse_token_response(b" " * (2 << 20), 200)


# -- refresh schedule ------------------------------------------------------------------------


def test_refresh_short_token_half_way() -> None:
    token = OAuthBearerToken("t", 1010.0, 1000.0)
    assert refresh_at(token, 1000.0, RefreshSettings(), 0.5) == 1005.0


def test_refresh_in_window_and_bounded() -> None:
    settings = RefreshSettings(window_factor=0.8, window_jitter=0.05)
    token = OAuthBearerToken("t", 1000.0 + 3600, 1000.0)
    assert refresh_at(token, 1000.0, settings, 0.0) == pytest.approx(1000.0 + 0.8 * 3600)
    assert refresh_at(token, 1000.0, settings, 1.0) == pytest.approx(1000.0 + 0.85 * 3600)
    # buffer: never later than 300 s before expiry
    late = RefreshSettings(window_factor=1.0, window_jitter=0.0)
    assert refresh_at(token, 1000.0, late, 0.0) == 1000.0 + 3600 - 300
    # min period: never sooner than 60 s from now
    old = OAuthBearerToken("t", 1000.0 + 3600, 1000.0 - 100_000)
    assert refresh_at(old, 1000.0, RefreshSettings(window_factor=0.5), 0.0) >= 1060.0


# -- configuration ---------------------------------------------------------------------------

BASE = {"bootstrap.servers": "localhost:9092", "security.protocol": "SASL_SSL"}


def test_config_by_kafka4_names_and_secret_hidden() -> None:
    config = ConsumerConfig.from_dict(
        {
            **BASE,
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.endpoint.url": "http://127.0.0.1:1/token",
            "sasl.oauthbearer.client.credentials.client.id": "app",
            "sasl.oauthbearer.client.credentials.client.secret": SECRET,
            "sasl.oauthbearer.scope": "kafka",
            "sasl.login.refresh.window.factor": "0.9",
            "sasl.login.retry.backoff.max.ms": 500,
        }
    )
    assert config.sasl_oauthbearer_client_credentials_client_id == "app"
    assert config.sasl_login_refresh_window_factor == 0.9
    assert SECRET not in repr(config) and SECRET not in str(config.originals())


def test_config_by_jaas_options() -> None:
    config = ConsumerConfig.from_dict(
        {
            **BASE,
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
            "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
            f'OAuthBearerLoginModule required clientId="app" clientSecret="{SECRET}" '
            'scope="kafka";',
        }
    )
    assert config.sasl_oauthbearer_client_credentials_client_id == "app"
    secret = config.sasl_oauthbearer_client_credentials_client_secret
    assert secret is not None and secret.value() == SECRET
    assert config.sasl_oauthbearer_scope == "kafka"


def test_a_jaas_config_leaves_ssl_ca_location_processed() -> None:
    """SASL_SSL with an OAUTHBEARER sasl.jaas.config: ssl.ca.location still becomes the PEM
    trust store (it was skipped, so the broker's CA was not trusted)."""
    config = ConsumerConfig.from_dict(
        {
            **BASE,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
            "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
            f'OAuthBearerLoginModule required clientId="app" clientSecret="{SECRET}";',
            "ssl.ca.location": "/etc/ssl/ca.pem",
        }
    )
    assert config.ssl_truststore_location == "/etc/ssl/ca.pem"
    assert config.sasl_oauthbearer_client_credentials_client_id == "app"


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({}, "sasl.oauthbearer.token.endpoint.url"),
        (
            {"sasl.oauthbearer.token.endpoint.url": "ftp://x/t"},
            "sasl.oauthbearer.token.endpoint.url",
        ),
        (
            {"sasl.oauthbearer.token.endpoint.url": "http://x/t"},
            "sasl.oauthbearer.client.credentials.client.id",
        ),
        (
            {
                "sasl.oauthbearer.token.endpoint.url": "http://x/t",
                "sasl.oauthbearer.client.credentials.client.id": "a",
            },
            "sasl.oauthbearer.client.credentials.client.secret",
        ),
        ({"sasl.login.refresh.window.factor": 0.3}, "sasl.login.refresh.window.factor"),
        ({"sasl.oauthbearer.token.provider": "not callable"}, "sasl.oauthbearer.token.provider"),
    ],
)
def test_config_errors_name_the_key(extra: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        ConsumerConfig.from_dict({**BASE, "sasl.mechanism": "OAUTHBEARER", **extra})
    assert info.value.key == key


# -- the client-credentials call against a loopback token endpoint -------------------------------


class TokenEndpoint(LocalTokenServer):
    """An OIDC token endpoint on loopback: client credentials by HTTP Basic."""

    def __init__(self, lifetime: float = 60.0) -> None:
        self.lifetime = lifetime
        self.requests: list[tuple[str, str]] = []
        super().__init__(self._answer)

    def _answer(self, headers: Mapping[str, str], body: str) -> tuple[int, dict[str, Any]]:
        auth = headers.get("Authorization", "")
        self.requests.append((auth, body))
        expected = "Basic " + base64.b64encode(f"app:{SECRET}".encode()).decode()
        if auth != expected or "grant_type=client_credentials" not in body:
            return 401, {"error": "invalid_client"}
        now = time.time()
        return 200, {"access_token": make_jwt(now + self.lifetime, iat=now), "token_type": "Bearer"}


@pytest.fixture
def endpoint() -> Iterator[TokenEndpoint]:
    server = TokenEndpoint()
    try:
        yield server
    finally:
        server.close()


def _cc_config(url: str, secret: str = SECRET, **extra: Any) -> ConsumerConfig:
    return ConsumerConfig.from_dict(
        {
            **BASE,
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.endpoint.url": url,
            "sasl.oauthbearer.client.credentials.client.id": "app",
            "sasl.oauthbearer.client.credentials.client.secret": secret,
            "sasl.oauthbearer.scope": "kafka",
            **extra,
        }
    )


def test_client_credentials_post(endpoint: TokenEndpoint) -> None:
    token = client_credentials_fetcher(_cc_config(endpoint.url))()
    assert token.principal == "alice"
    auth, body = endpoint.requests[0]
    assert auth.startswith("Basic ")
    assert sorted(body.split("&")) == ["grant_type=client_credentials", "scope=kafka"]


def test_wrong_secret_is_typed_and_secret_free(endpoint: TokenEndpoint) -> None:
    with pytest.raises(OAuthTokenRetrievalError) as info:
        client_credentials_fetcher(_cc_config(endpoint.url, secret="wrong-secret"))()
    assert info.value.status == 401
    assert "wrong-secret" not in str(info.value) and "wrong-secret" not in repr(info.value)


def test_unreachable_endpoint_is_typed() -> None:
    with pytest.raises(OAuthTokenRetrievalError, match="could not be reached"):
        client_credentials_fetcher(
            _cc_config("http://127.0.0.1:1/token", **{"sasl.login.connect.timeout.ms": 2000})
        )()


# -- the token source's worker thread --------------------------------------------------------------


def _wait_for(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_source_fetches_off_thread_and_refreshes_short_tokens(endpoint: TokenEndpoint) -> None:
    endpoint.lifetime = 1.0  # refreshed half-way (min period + buffer exceed the lifetime)
    source = token_source_from_config(_cc_config(endpoint.url))
    with pytest.raises(OAuthTokenUnavailableError):
        source.current()  # not started: answers at once, never blocks
    source.start()
    try:
        _wait_for(lambda: source.fetch_count >= 3)
        assert source.current().principal == "alice"
        assert source.failure_count == 0
    finally:
        source.close()
    assert not source._thread.is_alive()


def test_source_reports_wrong_secret_and_retries_with_backoff(endpoint: TokenEndpoint) -> None:
    config = _cc_config(
        endpoint.url,
        secret="wrong-secret",
        **{"sasl.login.retry.backoff.ms": 20, "sasl.login.retry.backoff.max.ms": 100},
    )
    source = token_source_from_config(config).start()
    try:
        _wait_for(lambda: source.failure_count >= 3)
        with pytest.raises(OAuthTokenRetrievalError) as info:
            source.current()
        assert info.value.status == 401
    finally:
        source.close()
    assert source.fetch_count == 0


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_token_provider_sync_and_async(kind: str) -> None:
    calls: list[float] = []

    def sync_provider() -> tuple[str, float]:
        calls.append(time.time())
        return f"opaque-{len(calls)}", time.time() + 0.6

    async def async_provider() -> tuple[str, float]:
        await asyncio.sleep(0)
        return sync_provider()

    provider = sync_provider if kind == "sync" else async_provider
    source = OAuthBearerTokenSource(provider_fetcher(provider), RefreshSettings()).start()
    try:
        _wait_for(lambda: len(calls) >= 3)
        assert source.current().value.startswith("opaque-")
    finally:
        source.close()


@pytest.mark.parametrize(
    "answer",
    [("tok", 1.0), ("", time.time() + 60), ("has space", time.time() + 60), "just-a-token"],
)
def test_bad_provider_answers_are_typed(answer: object) -> None:
    with pytest.raises(OAuthBearerTokenError):
        provider_fetcher(lambda: answer)()


def test_failing_provider_is_typed() -> None:
    def boom() -> tuple[str, float]:
        raise RuntimeError("iam down")

    with pytest.raises(OAuthBearerTokenError, match="RuntimeError"):
        provider_fetcher(boom)()


def test_log_redaction_hides_jwts_and_bearer_credentials() -> None:
    from kafka_actors.log import redact_secrets

    jwt = make_jwt(2e9)
    event = {
        "event": "x",
        "error": f"broker said: bad token {jwt} (status invalid_token)",
        "detail": {"nested": "auth=Bearer opaque-credential-123\x01"},
        "bearer": "anything",
        "principal": "alice",
    }
    out = redact_secrets(None, "info", dict(event))
    text = repr(out)
    assert jwt not in text and "opaque-credential-123" not in text
    assert out["bearer"] == "[hidden]" and out["principal"] == "alice"
    assert "status invalid_token" in out["error"]
