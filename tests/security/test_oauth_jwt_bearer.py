"""The OAuth jwt-bearer grant (KIP-1139, RFC 7523) without a broker: the assertion's header and
claims at an injected time, its RS256/ES256 signature checked with the public key, a ready
assertion read again on each request, the token request against a loopback endpoint that checks
the assertion, and the configuration's typed errors."""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

cryptography = pytest.importorskip("cryptography")

from cryptography.exceptions import InvalidSignature  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature  # noqa: E402

from kafka_actors.config import ConsumerConfig  # noqa: E402
from kafka_actors.errors import ConfigError, OAuthTokenRetrievalError  # noqa: E402
from kafka_actors.oauth import (  # noqa: E402
    assertion_builder,
    jwt_bearer_fetcher,
    token_source_from_config,
)
from kafka_actors.protocol.connection.oauth import (  # noqa: E402
    JWT_BEARER_GRANT,
    AssertionClaims,
    assertion_claims,
    jwt_bearer_request,
)
from tests.security.token_server import LocalTokenServer  # noqa: E402

BASE = {"bootstrap.servers": "localhost:9092", "security.protocol": "SASL_SSL"}
RETRIEVER = "org.apache.kafka.common.security.oauthbearer.JwtBearerJwtRetriever"
NOW = 1_700_000_000.0


def _unb64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def decode(assertion: str) -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
    header, payload, signature = assertion.split(".")
    return (
        json.loads(_unb64(header)),
        json.loads(_unb64(payload)),
        f"{header}.{payload}".encode(),
        _unb64(signature),
    )


def verify(assertion: str, public_key: Any) -> dict[str, Any]:
    """The assertion's claims if its signature is the public key's (else InvalidSignature)."""
    header, payload, signed, signature = decode(assertion)
    if header["alg"] == "RS256":
        public_key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
    else:
        assert header["alg"] == "ES256" and len(signature) == 64
        der = encode_dss_signature(
            int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
        )
        public_key.verify(der, signed, ec.ECDSA(hashes.SHA256()))
    return payload


def write_key(path: Path, key: Any, passphrase: bytes | None = None) -> Path:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase)
        if passphrase
        else serialization.NoEncryption()
    )
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    return path


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _config(url: str = "http://127.0.0.1:1/token", **extra: Any) -> ConsumerConfig:
    return ConsumerConfig.from_dict(
        {
            **BASE,
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.endpoint.url": url,
            "sasl.oauthbearer.jwt.retriever.class": RETRIEVER,
            **extra,
        }
    )


# -- the assertion ------------------------------------------------------------------------------


def test_claims_and_header_at_the_injected_time() -> None:
    settings = AssertionClaims(
        algorithm="ES256", iss="me", sub="svc", aud="idp", exp_seconds=120, nbf_seconds=30
    )
    header, payload = assertion_claims(settings, NOW + 0.7, jti="ignored")
    assert header == {"alg": "ES256", "typ": "JWT"}
    assert payload == {
        "iss": "me",
        "sub": "svc",
        "aud": "idp",
        "iat": int(NOW),
        "exp": int(NOW) + 120,
        "nbf": int(NOW) - 30,
    }
    _, with_jti = assertion_claims(AssertionClaims(jti_include=True), NOW, jti="id-1")
    assert with_jti["jti"] == "id-1" and "iss" not in with_jti


def test_template_members_are_added_and_configured_claims_win() -> None:
    settings = AssertionClaims(
        sub="svc",
        template_header={"kid": "k1", "alg": "none"},
        template_payload={"sub": "other", "scope": "kafka", "exp": 1},
    )
    header, payload = assertion_claims(settings, NOW)
    assert header == {"kid": "k1", "alg": "RS256", "typ": "JWT"}
    assert payload["sub"] == "svc" and payload["scope"] == "kafka"
    assert payload["exp"] == int(NOW) + 300


def test_rs256_assertion_signed_from_the_key_file(
    tmp_path: Path, rsa_key: rsa.RSAPrivateKey
) -> None:
    key_file = write_key(tmp_path / "key.pem", rsa_key)
    template = tmp_path / "template.json"
    template.write_text(json.dumps({"header": {"kid": "k1"}, "payload": {"scope": "kafka"}}))
    ids = iter(["jti-1", "jti-2"])
    build = assertion_builder(
        _config(
            **{
                "sasl.oauthbearer.assertion.private.key.file": str(key_file),
                "sasl.oauthbearer.assertion.claim.iss": "client",
                "sasl.oauthbearer.assertion.claim.sub": "svc",
                "sasl.oauthbearer.assertion.claim.aud": "idp",
                "sasl.oauthbearer.assertion.claim.jti.include": "true",
                "sasl.oauthbearer.assertion.template.file": str(template),
            }
        ),
        wall_clock=lambda: NOW,
        new_jti=lambda: next(ids),
    )
    first, second = build(), build()
    header, _, _, _ = decode(first)
    assert header == {"alg": "RS256", "typ": "JWT", "kid": "k1"}
    claims = verify(first, rsa_key.public_key())
    assert claims == {
        "iss": "client",
        "sub": "svc",
        "aud": "idp",
        "scope": "kafka",
        "iat": int(NOW),
        "exp": int(NOW) + 300,
        "nbf": int(NOW) - 60,
        "jti": "jti-1",
    }
    assert verify(second, rsa_key.public_key())["jti"] == "jti-2"
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(InvalidSignature):
        verify(first, other.public_key())


def test_es256_assertion_from_an_encrypted_key(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    key_file = write_key(tmp_path / "ec.pem", key, b"pass phrase")
    build = assertion_builder(
        _config(
            **{
                "sasl.oauthbearer.assertion.private.key.file": str(key_file),
                "sasl.oauthbearer.assertion.private.key.passphrase": "pass phrase",
                "sasl.oauthbearer.assertion.algorithm": "ES256",
                "sasl.oauthbearer.assertion.claim.exp.seconds": 60,
            }
        ),
        wall_clock=lambda: NOW,
    )
    claims = verify(build(), key.public_key())
    assert claims["exp"] - claims["iat"] == 60 and "jti" not in claims


def test_wrong_key_type_or_passphrase_is_typed(tmp_path: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    from kafka_actors.errors import OAuthBearerTokenError

    rsa_file = write_key(tmp_path / "rsa.pem", rsa_key)
    with pytest.raises(OAuthBearerTokenError, match="ES256 needs a P-256 key"):
        assertion_builder(
            _config(
                **{
                    "sasl.oauthbearer.assertion.private.key.file": str(rsa_file),
                    "sasl.oauthbearer.assertion.algorithm": "ES256",
                }
            )
        )
    locked = write_key(tmp_path / "locked.pem", rsa_key, b"right")
    with pytest.raises(OAuthBearerTokenError, match="could not be loaded") as info:
        assertion_builder(
            _config(
                **{
                    "sasl.oauthbearer.assertion.private.key.file": str(locked),
                    "sasl.oauthbearer.assertion.private.key.passphrase": "Zq9-not-it",
                }
            )
        )
    assert "Zq9-not-it" not in str(info.value)


def test_ready_assertion_file_is_read_again_on_each_request(tmp_path: Path) -> None:
    ready = tmp_path / "assertion.jwt"
    ready.write_text("a.b.c\n")
    build = assertion_builder(_config(**{"sasl.oauthbearer.assertion.file": str(ready)}))
    assert build() == "a.b.c"
    ready.write_text("d.e.f")
    assert build() == "d.e.f"


def test_token_request_form() -> None:
    body, headers = jwt_bearer_request("x.y.z", "kafka")
    assert urllib.parse.parse_qs(body.decode()) == {
        "grant_type": [JWT_BEARER_GRANT],
        "assertion": ["x.y.z"],
        "scope": ["kafka"],
    }
    assert "Authorization" not in headers
    assert headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert "scope" not in urllib.parse.parse_qs(jwt_bearer_request("x.y.z", None)[0].decode())


# -- the token request against a loopback endpoint that checks the assertion ---------------------


class JwtBearerEndpoint(LocalTokenServer):
    """A token endpoint granting a token for an assertion the public key signed."""

    def __init__(self, public_key: Any) -> None:
        self.grants: list[dict[str, Any]] = []
        self._public_key = public_key
        super().__init__(self._answer)

    def _answer(self, headers: Mapping[str, str], body: str) -> tuple[int, dict[str, Any]]:
        form = urllib.parse.parse_qs(body)
        if form.get("grant_type") != [JWT_BEARER_GRANT]:
            return 400, {"error": "invalid_grant"}
        try:
            claims = verify(form["assertion"][0], self._public_key)
        except (InvalidSignature, KeyError, ValueError):
            return 400, {"error": "invalid_grant"}
        self.grants.append(claims)
        token = ".".join(
            base64.urlsafe_b64encode(json.dumps(p).encode()).decode().rstrip("=")
            for p in ({"alg": "none"}, {"sub": claims["sub"], "exp": claims["exp"] + 3600})
        )
        return 200, {"access_token": token + ".sig"}


@pytest.fixture
def endpoint(rsa_key: rsa.RSAPrivateKey) -> Iterator[JwtBearerEndpoint]:
    server = JwtBearerEndpoint(rsa_key.public_key())
    try:
        yield server
    finally:
        server.close()


def test_token_fetched_with_a_signed_assertion(
    endpoint: JwtBearerEndpoint, tmp_path: Path, rsa_key: rsa.RSAPrivateKey
) -> None:
    config = _config(
        endpoint.url,
        **{
            "sasl.oauthbearer.assertion.private.key.file": str(
                write_key(tmp_path / "k.pem", rsa_key)
            ),
            "sasl.oauthbearer.assertion.claim.sub": "svc",
        },
    )
    token = jwt_bearer_fetcher(config)()
    assert token.principal == "svc" and len(endpoint.grants) == 1
    source = token_source_from_config(config)
    assert source._fetch is not None  # the config selects the jwt-bearer fetcher
    assert source._fetch().principal == "svc" and len(endpoint.grants) == 2


def test_assertion_signed_by_another_key_is_refused(
    endpoint: JwtBearerEndpoint, tmp_path: Path
) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    config = _config(
        endpoint.url,
        **{
            "sasl.oauthbearer.assertion.private.key.file": str(write_key(tmp_path / "o.pem", other))
        },
    )
    with pytest.raises(OAuthTokenRetrievalError, match="invalid_grant"):
        jwt_bearer_fetcher(config)()
    assert endpoint.grants == []


# -- configuration ------------------------------------------------------------------------------


def test_config_keys_and_passphrase_hidden(tmp_path: Path) -> None:
    key = tmp_path / "k.pem"
    key.write_text("unused")
    config = _config(
        **{
            "sasl.oauthbearer.jwt.retriever.class": "JwtBearerJwtRetriever",
            "sasl.oauthbearer.assertion.private.key.file": str(key),
            "sasl.oauthbearer.assertion.private.key.passphrase": "hunter2",
            "sasl.oauthbearer.assertion.algorithm": "es256",
        }
    )
    assert config.sasl_oauthbearer_assertion_algorithm == "ES256"
    assert config.sasl_oauthbearer_assertion_claim_exp_seconds == 300
    assert config.sasl_oauthbearer_assertion_claim_nbf_seconds == 60
    assert config.sasl_oauthbearer_assertion_claim_jti_include is False
    assert "hunter2" not in repr(config)


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({}, "sasl.oauthbearer.assertion.private.key.file"),
        (
            {
                "sasl.oauthbearer.assertion.file": "{file}",
                "sasl.oauthbearer.assertion.private.key.file": "{file}",
            },
            "sasl.oauthbearer.assertion.file",
        ),
        (
            {"sasl.oauthbearer.assertion.private.key.file": "{missing}"},
            "sasl.oauthbearer.assertion.private.key.file",
        ),
        ({"sasl.oauthbearer.assertion.file": "{missing}"}, "sasl.oauthbearer.assertion.file"),
        (
            {
                "sasl.oauthbearer.assertion.file": "{file}",
                "sasl.oauthbearer.assertion.template.file": "{missing}",
            },
            "sasl.oauthbearer.assertion.template.file",
        ),
        (
            {
                "sasl.oauthbearer.assertion.file": "{file}",
                "sasl.oauthbearer.assertion.algorithm": "HS256",
            },
            "sasl.oauthbearer.assertion.algorithm",
        ),
        (
            {
                "sasl.oauthbearer.assertion.private.key.file": "{file}",
                "sasl.oauthbearer.assertion.claim.exp.seconds": 0,
            },
            "sasl.oauthbearer.assertion.claim.exp.seconds",
        ),
        (
            {
                "sasl.oauthbearer.assertion.file": "{file}",
                "sasl.oauthbearer.assertion.claim.nbf.seconds": -1,
            },
            "sasl.oauthbearer.assertion.claim.nbf.seconds",
        ),
        (
            {"sasl.oauthbearer.jwt.retriever.class": "com.example.MyRetriever"},
            "sasl.oauthbearer.jwt.retriever.class",
        ),
    ],
)
def test_config_errors_name_the_key(tmp_path: Path, extra: dict[str, Any], key: str) -> None:
    present = tmp_path / "present"
    present.write_text("a.b.c")
    values = {
        k: str(v).format(file=present, missing=tmp_path / "missing") if isinstance(v, str) else v
        for k, v in extra.items()
    }
    with pytest.raises(ConfigError) as info:
        _config(**values)
    assert info.value.key == key
