"""The testkit's ``client_config`` (for every listener kind) is a config our consumer accepts
as it is, with the same meaning: the CA file becomes the PEM trust store."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import ConfigError
from kafka_actors.testing.security import ListenerSpec, client_config

LISTENERS = [
    ListenerSpec("SASL_SSL", "SASL_SSL", ("PLAIN", "SCRAM-SHA-512")),
    ListenerSpec("SASL_PLAINTEXT", "SASL_PLAINTEXT", ("SCRAM-SHA-256",)),
    ListenerSpec("SSL", "SSL"),
]


@pytest.mark.parametrize("spec", LISTENERS, ids=lambda s: s.name)
def test_client_config_is_accepted_by_kafka_consumer_config(
    spec: ListenerSpec, tmp_path: Path
) -> None:
    ca = tmp_path / "ca.pem"
    conf = client_config(spec, "127.0.0.1:9093", user="alice", password="pw", ca_path=ca)
    config = ConsumerConfig.from_dict({**conf, "group.id": "g"})
    assert config.security_protocol == spec.security_protocol
    if spec.uses_ssl:
        assert config.ssl_truststore_location == str(ca)
        assert config.ssl_truststore_type == "PEM"
    else:
        assert config.ssl_truststore_location is None
    if spec.uses_sasl:
        assert config.sasl_mechanism == spec.sasl_mechanisms[0]
        assert config.sasl_username == "alice"
        assert config.sasl_password is not None and config.sasl_password.value() == "pw"


def test_ssl_ca_location_and_truststore_location_together_is_an_error() -> None:
    with pytest.raises(ConfigError) as info:
        ConsumerConfig.from_dict(
            {"bootstrap.servers": "h:1", "ssl.ca.location": "/a", "ssl.truststore.location": "/b"}
        )
    assert info.value.key == "ssl.ca.location"
