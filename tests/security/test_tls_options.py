"""The TLS settings of issue 12 without a broker: protocol pinning, cipher suite names,
PKCS12 store errors, a user-supplied SSLContext."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest

from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import ConfigError
from kafka_actors.protocol.connection.tls import build_ssl_context, openssl_cipher_name

BASE = {"bootstrap.servers": "localhost:9092", "security.protocol": "SSL"}


def context(**settings: Any) -> ssl.SSLContext:
    return build_ssl_context(ConsumerConfig.from_dict({**BASE, **settings}))


def error(**settings: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        build_ssl_context(ConsumerConfig.from_dict({**BASE, **settings}))
    return info.value


def test_defaults_are_tls12_and_tls13() -> None:
    ctx = context()
    assert (ctx.minimum_version, ctx.maximum_version) == (
        ssl.TLSVersion.TLSv1_2,
        ssl.TLSVersion.TLSv1_3,
    )
    assert ctx.check_hostname


@pytest.mark.parametrize(
    ("settings", "lo", "hi"),
    [
        ({"ssl.protocol": "TLSv1.2"}, "TLSv1_2", "TLSv1_2"),
        ({"ssl.enabled.protocols": "TLSv1.3"}, "TLSv1_3", "TLSv1_3"),
        ({"ssl.protocol": "TLS", "ssl.enabled.protocols": ["TLSv1.2"]}, "TLSv1_2", "TLSv1_2"),
        (
            {"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"},
            "TLSv1_2",
            "TLSv1_2",
        ),
        (
            {
                "ssl.cipher.suites": "TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256,"
                "TLS_AES_128_GCM_SHA256"
            },
            "TLSv1_3",
            "TLSv1_3",
        ),
    ],
)
def test_protocol_versions(settings: dict[str, Any], lo: str, hi: str) -> None:
    ctx = context(**settings)
    assert ctx.minimum_version == ssl.TLSVersion[lo]
    assert ctx.maximum_version == ssl.TLSVersion[hi]


def test_cipher_suites_by_java_and_openssl_names() -> None:
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256") == (
        "ECDHE-RSA-AES128-GCM-SHA256"
    )
    assert openssl_cipher_name("TLS_RSA_WITH_AES_256_CBC_SHA") == "AES256-SHA"
    ctx = context(**{"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"})
    tls12 = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 == {"ECDHE-RSA-AES256-GCM-SHA384"}
    ctx = context(**{"ssl.cipher.suites": ["ECDHE-RSA-CHACHA20-POLY1305"]})
    assert "ECDHE-RSA-CHACHA20-POLY1305" in {c["name"] for c in ctx.get_ciphers()}


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"ssl.cipher.suites": "TLS_NO_SUCH_SUITE"}, "ssl.cipher.suites"),
        ({"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}, "ssl.cipher.suites"),
        (
            {
                "ssl.protocol": "TLSv1.2",
                "ssl.enabled.protocols": "TLSv1.3",
            },
            "ssl.enabled.protocols",
        ),
        ({"ssl.truststore.type": "PKCS12"}, "ssl.truststore.location"),
        ({"ssl.truststore.password": "x"}, "ssl.truststore.password"),
        (
            {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/nonexistent.p12"},
            "ssl.keystore.location",
        ),
    ],
)
def test_bad_tls_settings_name_their_key(settings: dict[str, Any], key: str) -> None:
    assert error(**settings).key == key


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ssl.protocol", "SSLv3"),
        ("ssl.enabled.protocols", "TLSv1.1"),
        ("ssl.truststore.type", "JKS"),
        ("ssl.context", "not a context"),
    ],
)
def test_bad_values_refused_by_config(key: str, value: object) -> None:
    with pytest.raises(ConfigError) as info:
        ConsumerConfig.from_dict({**BASE, key: value})
    assert info.value.key == key


def test_pkcs12_wrong_password_and_garbage(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    garbage = tmp_path / "store.p12"
    garbage.write_bytes(b"not a pkcs12 store")
    err = error(
        **{
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(garbage),
            "ssl.truststore.password": "secret-pw",
        }
    )
    assert err.key == "ssl.truststore.password" and "secret-pw" not in str(err)


def test_user_ssl_context_is_used_as_is() -> None:
    user = ssl.create_default_context()
    assert context(**{"ssl.context": user}) is user
    assert error(**{"ssl.context": user, "ssl.cipher.suites": "x"}).key == "ssl.cipher.suites"
