"""client.dns.lookup: names are resolved on a resolver thread (never on the NetworkActor's
loop) by an injectable resolver; every address of a name is tried in turn
(``use_all_dns_ips``); ``resolve_canonical_bootstrap_servers_only`` gives TLS the canonical
name of a bootstrap server's address."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pykka
import pytest

from kafka_actors.actors.network import GetNodeStates, bootstrap_node_id
from kafka_actors.errors import KafkaConnectionError, KafkaError
from kafka_actors.protocol.wire import requests as rq
from kafka_actors.testing import KafkaBroker
from tests.actors.network_helpers import events, metadata, network_config, send

StartNetwork = Callable[..., pykka.ActorRef[Any]]
BOOT = bootstrap_node_id(0)


def _entry(ip: str, port: int) -> tuple[Any, ...]:
    if ":" in ip:
        return (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (ip, port, 0, 0))
    return (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (ip, port))


class FakeResolver:
    """Answers every name with the given addresses; records the calls and their threads."""

    def __init__(self, ips: Sequence[str], gate: threading.Event | None = None) -> None:
        self.ips = list(ips)
        self.gate = gate
        self.calls: list[tuple[str, int, str]] = []

    def __call__(self, host: str, port: int) -> list[tuple[Any, ...]]:
        self.calls.append((host, port, threading.current_thread().name))
        if self.gate is not None:
            assert self.gate.wait(30)
        return [_entry(ip, port) for ip in self.ips]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server
    server.close()


@pytest.mark.broker
def test_localhost_with_two_addresses_only_one_listening(
    kafka_broker: KafkaBroker, start_network: StartNetwork
) -> None:
    host, port = kafka_broker.bootstrap_servers.split(",")[0].rsplit(":", 1)
    assert host == "127.0.0.1"  # the testkit's broker listens on IPv4 loopback only
    resolver = FakeResolver(["::1", "127.0.0.1"])  # as a dual-stack hosts file answers
    config = network_config(f"localhost:{port}", **{"reconnect.backoff.ms": 10})
    ref = start_network(config, resolver=resolver)
    answer = metadata(ref)
    assert answer.node == BOOT
    kinds = [e.kind for e in events(ref, BOOT)]
    assert kinds[:4] == ["connect", "connect_failed", "connect", "ready"], kinds
    assert resolver.calls and all(c[:2] == ("localhost", int(port)) for c in resolver.calls)
    assert all(c[2].startswith("kafka-actors-dns") for c in resolver.calls)  # off the loop


def test_slow_resolution_does_not_block_the_loop(
    start_network: StartNetwork, listener: socket.socket
) -> None:
    gate = threading.Event()
    resolver = FakeResolver(["127.0.0.1"], gate)
    port = listener.getsockname()[1]
    ref = start_network(network_config(f"slow.example:{port}"), resolver=resolver)
    pending = send(ref, rq.metadata_request(12, topics=None), timeout_ms=8_000)
    deadline = time.monotonic() + 10
    while not resolver.calls:
        assert time.monotonic() < deadline, "no resolution started"
        time.sleep(0.01)
    # The resolver is blocked; the actor still answers at once.
    started = time.monotonic()
    states = ref.ask(GetNodeStates(), timeout=5)
    assert time.monotonic() - started < 5
    assert states[BOOT][0] == "connecting"  # type: ignore[index]
    gate.set()
    listener.settimeout(30)
    conn, _ = listener.accept()  # the connection follows the answer
    conn.close()
    pending.get(timeout=90)  # answered (a failure: the listener is no broker), never lost


def test_resolution_failure_is_a_connection_failure(start_network: StartNetwork) -> None:
    def broken(host: str, port: int) -> list[tuple[Any, ...]]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    ref = start_network(
        network_config("no-such-host.invalid:9092", **{"request.timeout.ms": 2_000}),
        resolver=broken,
    )
    reply = send(ref, rq.metadata_request(12, topics=None), timeout_ms=2_000).get(timeout=30)
    assert isinstance(reply.error, KafkaError)
    failed = [e for e in events(ref, BOOT) if e.kind == "connect_failed"]
    assert failed and "Cannot resolve 'no-such-host.invalid'" in (failed[0].error or "")


@pytest.mark.parametrize(
    ("lookup", "canonical"),
    [("use_all_dns_ips", False), ("resolve_canonical_bootstrap_servers_only", True)],
)
def test_tls_server_name_per_lookup_mode(
    start_network: StartNetwork, listener: socket.socket, lookup: str, canonical: bool
) -> None:
    port = listener.getsockname()[1]
    try:
        expected = socket.getnameinfo(("127.0.0.1", port), socket.NI_NAMEREQD)[0]
    except OSError:
        pytest.skip("127.0.0.1 has no reverse name here")
    names: list[str] = []

    def tls(host: str, node: int) -> Any:
        names.append(host)
        raise KafkaConnectionError("stop here (test)")

    ref = start_network(
        network_config(f"bootstrap.alias:{port}", **{"client.dns.lookup": lookup}),
        resolver=FakeResolver(["127.0.0.1"]),
        tls=tls,
    )
    send(ref, rq.metadata_request(12, topics=None), timeout_ms=1_000).get(timeout=30)
    assert names
    assert names[0] == (expected if canonical else "bootstrap.alias")
