"""Pure helpers of the launcher: cluster ids, free ports, listener client configs."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kafka_actors.testing import broker
from kafka_actors.testing.security import ListenerSpec, client_config


def test_cluster_ids_are_22_char_url_safe_and_never_start_with_a_dash() -> None:
    ids = {broker._random_cluster_id() for _ in range(5000)}
    assert len(ids) == 5000
    for cid in ids:
        assert len(cid) == 22 and not cid.startswith("-")
        assert set(cid) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = broker.free_ports(8)
    assert len(set(ports)) == 8
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_client_config_per_protocol(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    sasl_ssl = ListenerSpec("SASL_SSL", "SASL_SSL", ("PLAIN", "SCRAM-SHA-512"))
    conf = client_config(sasl_ssl, "h:1", user="u", password="p", ca_path=ca)
    assert conf == {
        "bootstrap.servers": "h:1",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "p",
        "ssl.ca.location": str(ca),
    }
    conf = client_config(
        sasl_ssl, "h:1", user="u", password="p", mechanism="SCRAM-SHA-512", ca_path=ca
    )
    assert conf["sasl.mechanism"] == "SCRAM-SHA-512"
    with pytest.raises(ValueError):
        client_config(
            sasl_ssl, "h:1", user="u", password="p", mechanism="SCRAM-SHA-256", ca_path=ca
        )
    with pytest.raises(ValueError):
        client_config(ListenerSpec("S", "SSL"), "h:1", user="u", password="p")


def test_cluster_rejects_reserved_or_duplicate_listener_names() -> None:
    with pytest.raises(ValueError):
        broker.KafkaCluster(listeners=[ListenerSpec("PLAINTEXT", "SSL")])
    with pytest.raises(ValueError):
        broker.KafkaCluster(listeners=[ListenerSpec("A", "SSL"), ListenerSpec("A", "SSL")])
    with pytest.raises(ValueError):
        broker.KafkaCluster(num_brokers=0)


def test_pid_alive() -> None:
    import os

    assert broker.pid_alive(os.getpid())
    assert not broker.pid_alive(2**22 + 12345)
