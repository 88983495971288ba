"""SASL/OAUTHBEARER: the client mechanism and the pure parts of token handling (sans-I/O).

Owns: the OAUTHBEARER client of RFC 7628 as Kafka speaks it (KIP-255), the client-side checks
of an access token (KIP-768's ``LoginAccessTokenValidator``: a JWT of three base64url parts
whose payload has ``exp`` and the subject claim), the OIDC client-credentials token request
and the parsing of its answer, and the refresh schedule of Kafka's
``ExpiringCredentialRefreshingLogin`` (``sasl.login.refresh.*``). May touch: errors. No
sockets, no threads, no clock of its own (``now`` is passed in), no logging.

The HTTP call itself and the refresh thread live in :mod:`kafka_actors.oauth`.

Tokens and client secrets never appear in a ``repr``/``str`` or in an error message of this
module.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import urllib.parse
from dataclasses import dataclass, field
from typing import Final

from kafka_actors.errors import (
    AuthenticationError,
    IllegalSaslStateError,
    OAuthBearerTokenError,
    OAuthTokenRetrievalError,
)

__all__ = [
    "OAuthBearerMechanism",
    "OAuthBearerToken",
    "RefreshSettings",
    "assertion_claims",
    "client_credentials_request",
    "jwt_bearer_request",
    "parse_jwt",
    "parse_token_response",
    "refresh_at",
    "signing_input",
]

_HIDDEN: Final = "[hidden]"
#: RFC 7628 separator (``kvsep``).
_KVSEP: Final = "\x01"
#: Upper bound on a token endpoint's answer we parse (bytes); real answers are a few KiB.
MAX_TOKEN_RESPONSE_BYTES: Final = 1 << 20


@dataclass(frozen=True)
class OAuthBearerToken:
    """An access token with its lifetime (epoch seconds). ``value`` is a secret."""

    value: str = field(repr=False)
    expires_at: float
    issued_at: float | None = None
    principal: str | None = None

    def __repr__(self) -> str:
        return (
            f"OAuthBearerToken(value={_HIDDEN}, expires_at={self.expires_at}, "
            f"issued_at={self.issued_at}, principal={self.principal!r})"
        )

    def expired(self, now: float) -> bool:
        return now >= self.expires_at


# -- Token checks ----------------------------------------------------------------------------


def _b64url_json(part: str, what: str) -> dict[str, object]:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        decoded = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise OAuthBearerTokenError(
            f"The access token's {what} is not base64url-encoded JSON"
        ) from None
    if not isinstance(decoded, dict):
        raise OAuthBearerTokenError(f"The access token's {what} is not a JSON object")
    return decoded


def _number_claim(claims: dict[str, object], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise OAuthBearerTokenError(f"The access token's {name!r} claim is not a number")
    return float(value)


def parse_jwt(token: str, now: float, *, sub_claim_name: str = "sub") -> OAuthBearerToken:
    """Check an access token as Kafka's client does before using it, and read its lifetime.

    A JWT (``header.payload.signature``, each base64url) whose payload holds a numeric ``exp``
    (epoch seconds) in the future and a string subject claim (``sasl.oauthbearer.sub.claim.name``,
    default ``sub``); ``iat`` is optional. The signature is not verified here: the broker does
    that. Raises :class:`OAuthBearerTokenError` (never quoting the token).
    """
    token = token.strip()
    if not token:
        raise OAuthBearerTokenError("The access token is empty")
    parts = token.split(".")
    if len(parts) != 3:
        raise OAuthBearerTokenError(
            f"The access token is not a JWT: it has {len(parts)} parts, 3 are expected"
        )
    _b64url_json(parts[0], "header")
    claims = _b64url_json(parts[1], "payload")
    expires_at = _number_claim(claims, "exp")
    if expires_at is None:
        raise OAuthBearerTokenError("The access token has no 'exp' claim")
    issued_at = _number_claim(claims, "iat")
    subject = claims.get(sub_claim_name)
    if not isinstance(subject, str) or not subject.strip():
        raise OAuthBearerTokenError(f"The access token has no {sub_claim_name!r} claim")
    if expires_at <= now:
        raise OAuthBearerTokenError(
            f"The access token expired at {expires_at:.0f} (now {now:.0f}, epoch seconds)"
        )
    return OAuthBearerToken(token, expires_at, issued_at, subject)


def check_provided_token(token: object, expires_at: object, now: float) -> OAuthBearerToken:
    """A token provider's ``(token, expiry_epoch_seconds)`` answer, checked: a non-empty
    string without spaces or ``\\x01`` and an expiry in the future. Opaque (non-JWT) tokens are
    allowed, as a custom Java login callback handler may give them."""
    if not isinstance(token, str) or not token.strip():
        raise OAuthBearerTokenError("The token provider returned no token (expected a string)")
    if any(ch in token for ch in (" ", _KVSEP, "\n", "\r", "\t")):
        raise OAuthBearerTokenError("The token provider's token contains whitespace or \\x01")
    if isinstance(expires_at, bool) or not isinstance(expires_at, (int, float)):
        raise OAuthBearerTokenError(
            "The token provider returned no expiry (expected epoch seconds as a number)"
        )
    expiry = float(expires_at)
    if not math.isfinite(expiry) or expiry <= now:
        raise OAuthBearerTokenError(
            f"The token provider's token expired at {expiry:.0f} (now {now:.0f}, epoch seconds)"
        )
    return OAuthBearerToken(token, expiry, None, None)


# -- The OIDC client-credentials request (KIP-768) ---------------------------------------------


def client_credentials_request(
    client_id: str, client_secret: str, scope: str | None
) -> tuple[bytes, dict[str, str]]:
    """The form body and headers of the token request (RFC 6749 §4.4, client authentication by
    HTTP Basic with the form-urlencoded id and secret, §2.3.1), as Kafka's
    ``ClientCredentialsJwtRetriever`` sends it."""
    form = {"grant_type": "client_credentials"}
    if scope:
        form["scope"] = scope
    body = urllib.parse.urlencode(form).encode("ascii")
    basic = (
        urllib.parse.quote(client_id, safe="") + ":" + urllib.parse.quote(client_secret, safe="")
    )
    headers = {
        "Authorization": "Basic " + base64.b64encode(basic.encode("utf-8")).decode("ascii"),
        "Content-Type": "application/x-www-form-urlencoded",
        "Accept": "application/json",
        "Cache-Control": "no-cache",
    }
    return body, headers


# -- The jwt-bearer grant (RFC 7523, KIP-1139) ------------------------------------------------

JWT_BEARER_GRANT: Final = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def jwt_bearer_request(assertion: str, scope: str | None) -> tuple[bytes, dict[str, str]]:
    """The form body and headers of the jwt-bearer token request (RFC 7523 §2.1): the grant
    type and the signed assertion, no client authentication header, as Kafka's
    ``JwtBearerJwtRetriever`` sends it."""
    form = {"grant_type": JWT_BEARER_GRANT, "assertion": assertion}
    if scope:
        form["scope"] = scope
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "Accept": "application/json",
        "Cache-Control": "no-cache",
    }
    return urllib.parse.urlencode(form).encode("ascii"), headers


@dataclass(frozen=True)
class AssertionClaims:
    """``sasl.oauthbearer.assertion.claim.*`` and the template file's parts (parsed JSON)."""

    algorithm: str = "RS256"
    iss: str | None = None
    sub: str | None = None
    aud: str | None = None
    exp_seconds: int = 300
    nbf_seconds: int = 60
    jti_include: bool = False
    template_header: dict[str, object] = field(default_factory=dict)
    template_payload: dict[str, object] = field(default_factory=dict)


def parse_assertion_template(text: str) -> tuple[dict[str, object], dict[str, object]]:
    """``sasl.oauthbearer.assertion.template.file``: a JSON object with optional ``header``
    and ``payload`` objects whose members are added to the assertion's (the configured claims
    and the computed times win)."""
    try:
        decoded = json.loads(text)
    except ValueError:
        raise OAuthBearerTokenError("The assertion template is not JSON") from None
    if not isinstance(decoded, dict):
        raise OAuthBearerTokenError("The assertion template is not a JSON object")
    parts: list[dict[str, object]] = []
    for name in ("header", "payload"):
        part = decoded.get(name, {})
        if not isinstance(part, dict):
            raise OAuthBearerTokenError(f"The assertion template's {name!r} is not an object")
        parts.append(part)
    return parts[0], parts[1]


def assertion_claims(
    settings: AssertionClaims, now: float, jti: str | None = None
) -> tuple[dict[str, object], dict[str, object]]:
    """The header and payload of a jwt-bearer assertion at ``now`` (epoch seconds): ``alg`` and
    ``typ: JWT``; ``iat`` now, ``exp`` ``exp_seconds`` later, ``nbf`` ``nbf_seconds`` earlier,
    ``iss``/``sub``/``aud`` when configured, ``jti`` (the caller's unique id) when included."""
    header: dict[str, object] = {**settings.template_header}
    header.update(alg=settings.algorithm, typ="JWT")
    payload: dict[str, object] = {**settings.template_payload}
    for name, value in (("iss", settings.iss), ("sub", settings.sub), ("aud", settings.aud)):
        if value:
            payload[name] = value
    issued = int(now)
    payload.update(iat=issued, exp=issued + settings.exp_seconds, nbf=issued - settings.nbf_seconds)
    if settings.jti_include:
        if not jti:
            raise OAuthBearerTokenError("The assertion needs a jti but none was given")
        payload["jti"] = jti
    return header, payload


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def signing_input(header: dict[str, object], payload: dict[str, object]) -> str:
    """``base64url(header) . base64url(payload)`` (RFC 7515 compact serialization)."""
    return ".".join(
        _b64url(json.dumps(part, separators=(",", ":"), sort_keys=True).encode("utf-8"))
        for part in (header, payload)
    )


def compact_jws(signed_part: str, signature: bytes) -> str:
    return f"{signed_part}.{_b64url(signature)}"


def parse_token_response(body: bytes, status: int) -> str:
    """The ``access_token`` of a token endpoint's answer; :class:`OAuthTokenRetrievalError`
    for an HTTP error (with the endpoint's ``error`` / ``error_description``, never the body's
    other fields) or an answer without a token."""
    if len(body) > MAX_TOKEN_RESPONSE_BYTES:
        raise OAuthTokenRetrievalError(
            f"The token endpoint's answer is larger than {MAX_TOKEN_RESPONSE_BYTES} bytes",
            status=status,
        )
    try:
        decoded: object = json.loads(body.decode("utf-8")) if body else None
    except (ValueError, UnicodeDecodeError):
        decoded = None
    if status != 200:
        detail = ""
        if isinstance(decoded, dict):
            parts = [
                str(decoded[k])[:200]
                for k in ("error", "error_description")
                if isinstance(decoded.get(k), str)
            ]
            detail = ": " + " - ".join(parts) if parts else ""
        raise OAuthTokenRetrievalError(
            f"The token endpoint answered HTTP {status}{detail}", status=status
        )
    if not isinstance(decoded, dict):
        raise OAuthTokenRetrievalError("The token endpoint's answer is not a JSON object")
    token = decoded.get("access_token")
    if not isinstance(token, str) or not token.strip():
        raise OAuthTokenRetrievalError("The token endpoint's answer has no access_token")
    return token.strip()


# -- The refresh schedule (sasl.login.refresh.*) -----------------------------------------------


@dataclass(frozen=True)
class RefreshSettings:
    """``sasl.login.refresh.window.factor`` / ``.window.jitter`` / ``.min.period.seconds`` /
    ``.buffer.seconds`` (Java's defaults)."""

    window_factor: float = 0.8
    window_jitter: float = 0.05
    min_period_seconds: int = 60
    buffer_seconds: int = 300


def refresh_at(
    token: OAuthBearerToken, now: float, settings: RefreshSettings, random_fraction: float
) -> float:
    """When to fetch the next token (epoch seconds), as ``ExpiringCredentialRefreshingLogin``.

    A token living shorter than ``min_period + buffer`` from now is refreshed half-way to its
    expiry. Otherwise at ``factor + jitter·random`` of its lifetime (from ``iat``, else from
    now), moved no earlier than ``now + min_period`` and no later than ``expiry - buffer``.
    """
    expiry = token.expires_at
    if now >= expiry:
        return now
    if now + settings.min_period_seconds + settings.buffer_seconds > expiry:
        return now + (expiry - now) / 2
    start = token.issued_at if token.issued_at is not None and token.issued_at <= now else now
    fraction = settings.window_factor + settings.window_jitter * random_fraction
    proposed = start + (expiry - start) * fraction
    proposed = max(proposed, now + settings.min_period_seconds)
    return min(proposed, expiry - settings.buffer_seconds)


# -- The SASL mechanism (RFC 7628) ---------------------------------------------------------------


class OAuthBearerMechanism:
    """RFC 7628 OAUTHBEARER client, as Kafka's ``OAuthBearerSaslClient``.

    Client first message ``n,,\\x01auth=Bearer <token>\\x01\\x01`` (GS2 header without
    authzid, no SASL extensions). The broker accepts with an empty answer. When it refuses the
    token it answers with a JSON error (``{"status": "invalid_token", ...}``); the client then
    sends a single ``\\x01`` and the broker fails the SaslAuthenticate with
    SASL_AUTHENTICATION_FAILED (``SaslExchange`` raises it, naming the JSON status here).
    """

    __slots__ = ("_server_error", "_state", "_token")

    name: Final = "OAUTHBEARER"

    def __init__(self, token: OAuthBearerToken) -> None:
        self._token = token
        self._state = "initial"
        self._server_error: str | None = None

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    @property
    def server_error(self) -> str | None:
        """The broker's JSON error status (e.g. ``invalid_token``), once it refused."""
        return self._server_error

    def initial_response(self) -> bytes:
        if self._state != "initial":
            raise IllegalSaslStateError("SASL/OAUTHBEARER initial response already sent")
        self._state = "await-server"
        message = f"n,,{_KVSEP}auth=Bearer {self._token.value}{_KVSEP}{_KVSEP}"
        return message.encode("utf-8")

    def evaluate(self, challenge: bytes) -> bytes | None:
        if self._state == "await-server":
            if not challenge:
                self._state = "complete"
                return None
            self._server_error = _error_status(challenge)
            self._state = "await-failure"
            return _KVSEP.encode()
        if self._state == "await-failure":
            # The broker must fail the exchange after our \x01; anything else is a violation.
            raise AuthenticationError(
                "SASL/OAUTHBEARER: the broker refused the token "
                f"({self._server_error or 'no status'}) but did not end the exchange"
            )
        raise IllegalSaslStateError(f"SASL/OAUTHBEARER challenge in state {self._state}")

    def __repr__(self) -> str:
        return f"OAuthBearerMechanism(token={_HIDDEN}, state={self._state!r})"


def _error_status(challenge: bytes) -> str:
    """The ``status`` of the broker's RFC 7628 JSON error (bounded, no other fields)."""
    try:
        decoded = json.loads(challenge[:4096].decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return "unparseable server error"
    if isinstance(decoded, dict) and isinstance(decoded.get("status"), str):
        return str(decoded["status"])[:100]
    return "server error without status"
