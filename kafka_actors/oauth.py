"""SASL/OAUTHBEARER token retrieval off the NetworkActor's thread, cached and refreshed.

Owns: :class:`OAuthBearerTokenSource`, one worker thread per consumer that obtains access
tokens (the OIDC client-credentials flow over HTTP, or the user's token provider callable,
sync or async), keeps the current one, and fetches the next before expiry on the schedule of
``sasl.login.refresh.*`` (:func:`kafka_actors.protocol.connection.oauth.refresh_at`); failures are
retried with ``sasl.login.retry.backoff.ms`` .. ``sasl.login.retry.backoff.max.ms`` (exponential,
jitter 0.2). May touch: urllib (the token endpoint only), threading, the wall clock (token expiries
are epoch seconds), logging (never a token or a secret).

The NetworkActor never waits for it: :meth:`OAuthBearerTokenSource.current` answers at once
with the cached token, the last error (typed :class:`AuthenticationError` subclasses: the
connection attempt fails and backs off), or :class:`OAuthTokenUnavailableError` (retriable)
while the first fetch is under way.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import random as _random
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

from kafka_actors.config import ConsumerConfig, uses_jwt_bearer_grant
from kafka_actors.errors import (
    AuthenticationError,
    OAuthBearerTokenError,
    OAuthTokenRetrievalError,
    OAuthTokenUnavailableError,
)
from kafka_actors.log import get_logger
from kafka_actors.protocol.connection.oauth import (
    MAX_TOKEN_RESPONSE_BYTES,
    AssertionClaims,
    OAuthBearerToken,
    RefreshSettings,
    assertion_claims,
    check_provided_token,
    client_credentials_request,
    compact_jws,
    jwt_bearer_request,
    parse_assertion_template,
    parse_jwt,
    parse_token_response,
    refresh_at,
    signing_input,
)

__all__ = [
    "OAuthBearerTokenSource",
    "TokenFetcher",
    "assertion_builder",
    "client_credentials_fetcher",
    "jwt_bearer_fetcher",
]

#: Obtains one token (blocking; runs on the source's worker thread).
TokenFetcher = Callable[[], OAuthBearerToken]

#: Java leaves sasl.login.connect/read.timeout.ms unset (the JDK's default); a worker thread
#: blocked forever would never refresh, so we bound each HTTP call.
_DEFAULT_HTTP_TIMEOUT_S = 10.0


def client_credentials_fetcher(
    config: ConsumerConfig, *, wall_clock: Callable[[], float] = time.time
) -> TokenFetcher:
    """The OIDC client-credentials token request of ``config`` (KIP-768)."""
    url = config.sasl_oauthbearer_token_endpoint_url
    client_id = config.sasl_oauthbearer_client_credentials_client_id
    secret = config.sasl_oauthbearer_client_credentials_client_secret
    assert url and client_id and secret is not None  # ConsumerConfig validated them
    timeout = _http_timeout(config)
    scope = config.sasl_oauthbearer_scope
    sub_claim = config.sasl_oauthbearer_sub_claim_name

    def fetch() -> OAuthBearerToken:
        body, headers = client_credentials_request(client_id, secret.value(), scope)
        token = _post_token_request(url, body, headers, timeout)
        return parse_jwt(token, wall_clock(), sub_claim_name=sub_claim)

    return fetch


def _read_text(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise OAuthBearerTokenError(
            f"The {what} {path!r} could not be read: {type(exc).__name__}"
        ) from None


AssertionSigner = Callable[[bytes], bytes]


def assertion_signer(
    key_file: str, algorithm: str, passphrase: str | None = None
) -> AssertionSigner:
    """Sign with the PEM private key of ``key_file`` (RSA for RS256, P-256 for ES256); the JWS
    signature of ES256 is ``r || s`` (RFC 7518 §3.4), not DER. Needs ``cryptography``."""
    try:
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
    except ImportError:
        raise OAuthBearerTokenError(
            "Signing a jwt-bearer assertion needs the 'cryptography' package "
            "(pip install kafka-actors[tls])"
        ) from None
    try:
        with open(key_file, "rb") as handle:
            pem = handle.read()
        key = serialization.load_pem_private_key(
            pem, password=passphrase.encode("utf-8") if passphrase else None
        )
    except (OSError, ValueError, TypeError) as exc:
        raise OAuthBearerTokenError(
            f"The assertion private key {key_file!r} could not be loaded: {type(exc).__name__}"
        ) from None
    if algorithm == "RS256":
        if not isinstance(key, rsa.RSAPrivateKey):
            raise OAuthBearerTokenError(
                "sasl.oauthbearer.assertion.algorithm RS256 needs an RSA key"
            )
        rsa_key = key
        return lambda data: rsa_key.sign(data, padding.PKCS1v15(), hashes.SHA256())
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise OAuthBearerTokenError("sasl.oauthbearer.assertion.algorithm ES256 needs a P-256 key")
    ec_key = key

    def sign_es256(data: bytes) -> bytes:
        r, s = decode_dss_signature(ec_key.sign(data, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")

    return sign_es256


def assertion_builder(
    config: ConsumerConfig,
    *,
    wall_clock: Callable[[], float] = time.time,
    new_jti: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> Callable[[], str]:
    """The assertion of each token request: the file's contents (read again on each request,
    so that a rotated assertion is used) or a fresh one signed with the private key."""
    ready = config.sasl_oauthbearer_assertion_file
    if ready:
        return lambda: _read_text(ready, "assertion file")
    key_file = config.sasl_oauthbearer_assertion_private_key_file
    assert key_file  # ConsumerConfig validated it
    passphrase = config.sasl_oauthbearer_assertion_private_key_passphrase
    algorithm = config.sasl_oauthbearer_assertion_algorithm
    sign = assertion_signer(key_file, algorithm, passphrase.value() if passphrase else None)
    header_t: dict[str, object] = {}
    payload_t: dict[str, object] = {}
    template = config.sasl_oauthbearer_assertion_template_file
    if template:
        header_t, payload_t = parse_assertion_template(_read_text(template, "assertion template"))
    settings = AssertionClaims(
        algorithm=algorithm,
        iss=config.sasl_oauthbearer_assertion_claim_iss,
        sub=config.sasl_oauthbearer_assertion_claim_sub,
        aud=config.sasl_oauthbearer_assertion_claim_aud,
        exp_seconds=config.sasl_oauthbearer_assertion_claim_exp_seconds,
        nbf_seconds=config.sasl_oauthbearer_assertion_claim_nbf_seconds,
        jti_include=config.sasl_oauthbearer_assertion_claim_jti_include,
        template_header=header_t,
        template_payload=payload_t,
    )

    def build() -> str:
        header, payload = assertion_claims(settings, wall_clock(), new_jti())
        part = signing_input(header, payload)
        return compact_jws(part, sign(part.encode("ascii")))

    return build


def jwt_bearer_fetcher(
    config: ConsumerConfig, *, wall_clock: Callable[[], float] = time.time
) -> TokenFetcher:
    """The jwt-bearer token request of ``config`` (KIP-1139, RFC 7523)."""
    url = config.sasl_oauthbearer_token_endpoint_url
    assert url  # ConsumerConfig validated it
    build = assertion_builder(config, wall_clock=wall_clock)
    scope = config.sasl_oauthbearer_scope
    sub_claim = config.sasl_oauthbearer_sub_claim_name
    timeout = _http_timeout(config)

    def fetch() -> OAuthBearerToken:
        body, headers = jwt_bearer_request(build(), scope)
        token = _post_token_request(url, body, headers, timeout)
        return parse_jwt(token, wall_clock(), sub_claim_name=sub_claim)

    return fetch


def _http_timeout(config: ConsumerConfig) -> float:
    timeouts = [
        t / 1000
        for t in (config.sasl_login_connect_timeout_ms, config.sasl_login_read_timeout_ms)
        if t is not None
    ]
    return max(timeouts) if timeouts else _DEFAULT_HTTP_TIMEOUT_S


def _post_token_request(url: str, body: bytes, headers: dict[str, str], timeout: float) -> str:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            status = int(answer.status)
            payload = answer.read(MAX_TOKEN_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        status = int(exc.code)
        try:
            payload = exc.read(MAX_TOKEN_RESPONSE_BYTES + 1)
        finally:
            exc.close()
    except (OSError, ValueError) as exc:
        raise OAuthTokenRetrievalError(
            f"The token endpoint {url} could not be reached: {type(exc).__name__}: "
            f"{getattr(exc, 'reason', None) or exc}"
        ) from None
    return parse_token_response(payload, status)


def provider_fetcher(
    provider: Callable[[], Any], *, wall_clock: Callable[[], float] = time.time
) -> TokenFetcher:
    """A user's token provider: returns ``(token, expiry_epoch_seconds)``, or an awaitable of
    it (run to completion on the worker thread in its own event loop)."""

    def fetch() -> OAuthBearerToken:
        try:
            answer = provider()
            if inspect.isawaitable(answer):
                answer = asyncio.run(_await(answer))
        except AuthenticationError:
            raise
        except Exception as exc:
            raise OAuthBearerTokenError(f"The token provider failed: {type(exc).__name__}") from exc
        if not isinstance(answer, tuple) or len(answer) != 2:
            raise OAuthBearerTokenError(
                "The token provider must return (token, expiry epoch seconds)"
            )
        return check_provided_token(answer[0], answer[1], wall_clock())

    return fetch


async def _await(awaitable: Any) -> Any:
    return await awaitable


class OAuthBearerTokenSource:
    """The current access token of one consumer, fetched and refreshed on a worker thread.

    ``on_change`` (optional) is called from the worker after each fetch (success or failure),
    e.g. to wake the NetworkActor. :meth:`close` stops the worker (joined, bounded).
    """

    def __init__(
        self,
        fetch: TokenFetcher,
        settings: RefreshSettings,
        *,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 10_000,
        wall_clock: Callable[[], float] = time.time,
        random: Callable[[], float] | None = None,
        on_change: Callable[[], None] | None = None,
        name: str = "kafka-actors-oauth",
    ) -> None:
        self._fetch = fetch
        self._settings = settings
        self._backoff_ms = retry_backoff_ms
        self._backoff_max_ms = max(retry_backoff_max_ms, retry_backoff_ms)
        self._wall = wall_clock
        self._random = random or _random.Random().random
        self._on_change = on_change
        self._lock = threading.Lock()
        self._token: OAuthBearerToken | None = None
        self._error: AuthenticationError | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._log = get_logger("oauth")
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        #: Tokens obtained so far (a test and metrics figure).
        self.fetch_count = 0
        self.failure_count = 0

    def start(self) -> OAuthBearerTokenSource:
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()
        return self

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def settled(self) -> bool:
        """Whether the first fetch has an outcome (a token or an error): before that, a
        connection would only fail with "no token yet". Never blocks."""
        with self._lock:
            return self._token is not None or self._error is not None

    def current(self) -> OAuthBearerToken:
        """The cached token if still valid; else the last error; else (first fetch under way)
        OAuthTokenUnavailableError. Never blocks."""
        with self._lock:
            token, error = self._token, self._error
        if token is not None and not token.expired(self._wall()):
            return token
        if token is not None:
            self._wake.set()  # expired while a refresh failed or is late: try now
        if error is not None:
            raise copy.copy(error)  # each connection tags its own copy with its node
        raise OAuthTokenUnavailableError("No SASL/OAUTHBEARER token yet: the fetch is under way")

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                token = self._fetch()
            except AuthenticationError as exc:
                failures += 1
                self.failure_count += 1
                with self._lock:
                    self._error = exc
                delay = min(self._backoff_max_ms, self._backoff_ms * 2 ** min(failures - 1, 32))
                delay_s = delay * (0.8 + 0.4 * self._random()) / 1000
                self._log.warning(
                    "oauth_token_fetch_failed",
                    error=str(exc),
                    error_type=type(exc).__name__,
                    retry_in_ms=round(delay_s * 1000),
                )
            except Exception as exc:  # a bug in a fetcher: keep the thread, report typed
                failures += 1
                self.failure_count += 1
                with self._lock:
                    self._error = OAuthBearerTokenError(
                        f"Obtaining the SASL/OAUTHBEARER token failed: {type(exc).__name__}"
                    )
                delay_s = self._backoff_max_ms / 1000
                self._log.warning("oauth_token_fetch_crashed", error_type=type(exc).__name__)
            else:
                failures = 0
                self.fetch_count += 1
                now = self._wall()
                with self._lock:
                    self._token, self._error = token, None
                delay_s = max(0.0, refresh_at(token, now, self._settings, self._random()) - now)
                self._log.info(
                    "oauth_token_obtained",
                    principal=token.principal,
                    expires_in_s=round(token.expires_at - now, 1),
                    refresh_in_s=round(delay_s, 1),
                )
            if self._on_change is not None:
                try:
                    self._on_change()
                except Exception:  # pragma: no cover - a waker must not stop refreshing
                    self._log.exception("oauth_on_change_failed")
            self._wake.clear()
            self._wake.wait(delay_s)

    def __repr__(self) -> str:
        with self._lock:
            token = self._token
        return f"OAuthBearerTokenSource(token={token!r}, fetches={self.fetch_count})"


def token_source_from_config(
    config: ConsumerConfig, *, on_change: Callable[[], None] | None = None
) -> OAuthBearerTokenSource:
    """The (not yet started) token source ``sasl.oauthbearer.*`` describes."""
    provider = config.sasl_oauthbearer_token_provider
    if provider is not None:
        fetch = provider_fetcher(provider)
    elif uses_jwt_bearer_grant(config):
        fetch = jwt_bearer_fetcher(config)
    else:
        fetch = client_credentials_fetcher(config)
    settings = RefreshSettings(
        window_factor=config.sasl_login_refresh_window_factor,
        window_jitter=config.sasl_login_refresh_window_jitter,
        min_period_seconds=config.sasl_login_refresh_min_period_seconds,
        buffer_seconds=config.sasl_login_refresh_buffer_seconds,
    )
    return OAuthBearerTokenSource(
        fetch,
        settings,
        retry_backoff_ms=config.sasl_login_retry_backoff_ms,
        retry_backoff_max_ms=config.sasl_login_retry_backoff_max_ms,
        on_change=on_change,
    )
