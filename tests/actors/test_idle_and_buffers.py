"""connections.max.idle.ms, send.buffer.bytes, receive.buffer.bytes and KIP-219 throttling in
the connection state machine and the NetworkActor (issue 10: no accepted key without effect).

Pure tests drive :class:`NodeConnection` with a manual clock; actor tests run a NetworkActor
against the embedded mock cluster, a real broker, or a loopback listener that never answers.
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kafka_actors.actors.network import (
    GetSocketBuffers,
    Response,
    bootstrap_node_id,
)
from kafka_actors.clock import ManualClock
from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import ConfigError
from kafka_actors.protocol.connection.node import ConnectionState, NodeConnection
from tests.actors.network_helpers import events, long_fetch, metadata, network_config, send
from tests.actors.test_connection import (
    FakeBroker,
    connect_ready,
    metadata_response,
    pending,
    settings,
)

NODE = 7
BOOT = bootstrap_node_id(0)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(100.0)


# -- pure: idleness ------------------------------------------------------------------------------


def _round_trip(conn: NodeConnection, clock: ManualClock, broker: FakeBroker) -> None:
    conn.enqueue(pending(clock))
    out, _ = conn.flush(clock.monotonic())
    [(header, _body)] = broker.take(out)
    conn.touch(clock.monotonic())
    _, done = conn.receive(broker.answer(metadata_response(), header.correlation_id), 0.0)
    assert len(done) == 1


def test_idle_deadline_counts_from_the_last_use(clock: ManualClock) -> None:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(max_idle_ms=2_000), random=lambda: 0.5)
    assert conn.idle_deadline() is None  # not connected
    connect_ready(conn, clock, broker)
    conn.touch(clock.monotonic())
    assert conn.idle_deadline() == pytest.approx(102.0)
    clock.advance(1.5)
    conn.enqueue(pending(clock))
    assert conn.idle_deadline() is None  # something queued: not idle
    out, _ = conn.flush(clock.monotonic())
    assert conn.idle_deadline() is None  # in flight: not idle
    [(header, _body)] = broker.take(out)
    clock.advance(0.5)
    conn.touch(clock.monotonic())
    conn.receive(broker.answer(metadata_response(), header.correlation_id), 0.0)
    assert conn.idle_deadline() == pytest.approx(104.0)


def test_close_idle_reconnects_at_once_without_backoff(clock: ManualClock) -> None:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(max_idle_ms=1_000), random=lambda: 0.5)
    connect_ready(conn, clock, broker)
    _round_trip(conn, clock, broker)
    clock.advance(1.0)
    conn.close_idle()
    assert conn.state is ConnectionState.DISCONNECTED
    assert conn.failed_attempts == 0 and conn.last_error is None
    assert conn.connect_delay(clock.monotonic()) == 0.0
    connect_ready(conn, clock, broker)
    _round_trip(conn, clock, broker)


def test_negative_max_idle_never_expires(clock: ManualClock) -> None:
    conn = NodeConnection(NODE, settings(max_idle_ms=-1), random=lambda: 0.5)
    connect_ready(conn, clock, FakeBroker())
    assert conn.idle_deadline() is None
    with pytest.raises(RuntimeError):
        conn.close_idle()


# -- pure: throttling (KIP-219) ------------------------------------------------------------------


def test_throttled_connection_holds_requests_until_the_throttle_ends(clock: ManualClock) -> None:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5)
    connect_ready(conn, clock, broker)
    conn.throttle(clock.monotonic(), 800)
    conn.enqueue(pending(clock))
    out, failed = conn.flush(clock.monotonic())
    assert out == b"" and failed == [] and conn.queued_count == 1
    assert conn.next_deadline() == pytest.approx(100.8)  # the actor wakes up when it ends
    clock.advance(0.79)
    assert conn.flush(clock.monotonic())[0] == b""
    clock.advance(0.01)
    out, _ = conn.flush(clock.monotonic())
    assert len(broker.take(out)) == 1 and conn.in_flight_count == 1
    # a shorter throttle never shortens a longer one
    conn.throttle(clock.monotonic(), 500)
    conn.throttle(clock.monotonic(), 100)
    assert conn.throttled_until == pytest.approx(clock.monotonic() + 0.5)


# -- config -------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["send.buffer.bytes", "receive.buffer.bytes"])
def test_buffer_size_zero_or_below_minus_one_is_rejected(key: str) -> None:
    for bad in (0, -2):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            ConsumerConfig.from_dict({"bootstrap.servers": "127.0.0.1:9", key: bad})
    assert (
        getattr(
            ConsumerConfig.from_dict({"bootstrap.servers": "127.0.0.1:9", key: -1}),
            key.replace(".", "_"),
        )
        == -1
    )


# -- actor: socket buffers -----------------------------------------------------------------------


@pytest.fixture
def silent_listener() -> Iterator[socket.socket]:
    """A loopback listener that accepts (in the kernel's backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        yield sock
    finally:
        sock.close()


def _buffers(ref: Any) -> tuple[int, int]:
    deadline = time.monotonic() + 10
    while True:
        got = ref.ask(GetSocketBuffers(BOOT), timeout=10)
        if got is not None:
            return got  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, "no socket was opened"
        time.sleep(0.02)


def test_socket_buffer_sizes_are_set(silent_listener: socket.socket, start_network: Any) -> None:
    port = silent_listener.getsockname()[1]
    config = network_config(
        f"127.0.0.1:{port}", **{"send.buffer.bytes": 40_000, "receive.buffer.bytes": 50_000}
    )
    ref = start_network(config)
    send(ref, metadata_request(), timeout_ms=10_000)
    sndbuf, rcvbuf = _buffers(ref)
    if sys.platform.startswith("linux"):
        assert (sndbuf, rcvbuf) == (80_000, 100_000)  # Linux reports twice the size set
    else:  # pragma: no cover
        assert sndbuf >= 40_000 and rcvbuf >= 50_000


def test_minus_one_keeps_the_os_default(silent_listener: socket.socket, start_network: Any) -> None:
    port = silent_listener.getsockname()[1]
    config = network_config(
        f"127.0.0.1:{port}", **{"send.buffer.bytes": -1, "receive.buffer.bytes": -1}
    )
    ref = start_network(config)
    send(ref, metadata_request(), timeout_ms=10_000)
    got = _buffers(ref)
    with socket.create_connection(("127.0.0.1", port)) as plain:
        expected = (
            plain.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
            plain.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
        )
    assert got == expected
    # and the defaults: send.buffer.bytes 131072 (Java's, set, so it differs from the OS's);
    # receive.buffer.bytes -1 (the OS's, not Java's 65536: config_docs says why)
    default_ref = start_network(network_config(f"127.0.0.1:{port}"))
    send(default_ref, metadata_request(), timeout_ms=10_000)
    default = _buffers(default_ref)
    assert default[1] == expected[1]
    assert default[0] != expected[0]
    if sys.platform.startswith("linux"):
        assert default[0] == 2 * 131_072


def metadata_request() -> Any:
    from kafka_actors.protocol.wire import requests as rq

    return rq.metadata_request(12, topics=None)


# -- actor: idle connections ----------------------------------------------------------------------


def _kinds(ref: Any, node: int) -> list[str]:
    return [e.kind for e in events(ref, node)]


def test_idle_connection_closes_and_reopens_on_demand(
    mock_cluster: Any, start_network: Any
) -> None:
    config = network_config(mock_cluster.bootstrap_servers, **{"connections.max.idle.ms": 300})
    ref = start_network(config)
    assert isinstance(metadata(ref, node=BOOT), Response)
    assert _kinds(ref, BOOT) == ["connect", "ready"]
    deadline = time.monotonic() + 15
    while "idle_closed" not in _kinds(ref, BOOT):
        assert time.monotonic() < deadline, _kinds(ref, BOOT)
        time.sleep(0.05)
    closed = next(e for e in events(ref, BOOT) if e.kind == "idle_closed")
    ready = next(e for e in events(ref, BOOT) if e.kind == "ready")
    assert closed.at - ready.at >= 0.3 - 1e-3  # not before connections.max.idle.ms
    # The next request opens a new connection transparently (at once: no backoff).
    assert isinstance(metadata(ref, node=BOOT), Response)
    assert _kinds(ref, BOOT)[:5] == ["connect", "ready", "idle_closed", "connect", "ready"]
    assert "connect_failed" not in _kinds(ref, BOOT) and "disconnected" not in _kinds(ref, BOOT)


def test_default_max_idle_keeps_the_connection(mock_cluster: Any, start_network: Any) -> None:
    ref = start_network(network_config(mock_cluster.bootstrap_servers))
    assert isinstance(metadata(ref, node=BOOT), Response)
    time.sleep(1.0)
    assert isinstance(metadata(ref, node=BOOT), Response)
    assert _kinds(ref, BOOT) == ["connect", "ready"]


def test_in_flight_request_is_not_idle(
    kafka_broker: Any, kafka_topic: Any, start_network: Any
) -> None:
    """A Fetch the broker holds for 2 s on a connection with connections.max.idle.ms=300 is
    answered on the same connection: a request in flight keeps it busy."""
    from tests.actors.network_helpers import topic_leader

    config = network_config(kafka_broker.bootstrap_servers, **{"connections.max.idle.ms": 300})
    ref = start_network(config)
    topic = kafka_topic(kafka_broker)
    topic_id, leader = topic_leader(ref, topic)
    started = time.monotonic()
    reply = send(ref, long_fetch(topic, topic_id, max_wait_ms=2_000), node=leader).get(timeout=30)
    answered = time.monotonic()
    assert isinstance(reply, Response), reply
    assert answered - started >= 1.5  # the broker did hold it
    recorded = events(ref, leader)
    assert [e.kind for e in recorded][:2] == ["connect", "ready"], recorded
    assert not [e for e in recorded if e.kind == "idle_closed" and e.at < answered], recorded
    # once idle, it does close
    deadline = time.monotonic() + 15
    while "idle_closed" not in _kinds(ref, leader):
        assert time.monotonic() < deadline, _kinds(ref, leader)
        time.sleep(0.05)


def test_a_request_queued_past_its_deadline_by_a_throttle_says_so(clock: ManualClock) -> None:
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5)
    connect_ready(conn, clock, FakeBroker())
    conn.throttle(clock.monotonic(), 10_000)
    conn.enqueue(pending(clock, timeout=1.0))
    assert conn.flush(clock.monotonic())[0] == b""
    clock.advance(1.0)
    [failed], broken = conn.check_timeouts(clock.monotonic())
    assert broken is None
    assert "throttles this client" in str(failed.error)  # type: ignore[union-attr]


# -- actor: a bootstrap broker that disconnects before any broker is known -----------------------


def test_bootstrap_broker_disconnect_before_metadata_warns(
    start_network: Any, captured_logs: Any
) -> None:
    """Java's "Bootstrap broker host:port disconnected": a bootstrap server that completes
    ApiVersions and then drops the connection, before any Metadata named a broker, is a
    WARNING (node_unavailable, reason 'bootstrap broker disconnected')."""
    import json
    import threading

    from tests.actors.test_connection import api_versions_v4

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                broker = FakeBroker()
                got: list[Any] = []
                conn.settimeout(5)
                while not got:
                    data = conn.recv(65536)
                    if not data:
                        break
                    got = broker.take(data)
                if got:
                    header, _body = got[0]
                    conn.sendall(broker.answer(api_versions_v4(), header.correlation_id))
                    time.sleep(0.1)  # ready, then the "broker" goes away

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        ref = start_network(network_config(f"127.0.0.1:{port}"))
        send(ref, metadata_request(), timeout_ms=5_000)
        deadline = time.monotonic() + 15
        while "disconnected" not in _kinds(ref, BOOT):
            assert time.monotonic() < deadline, _kinds(ref, BOOT)
            time.sleep(0.05)
        lines = [json.loads(x) for x in captured_logs.getvalue().splitlines() if x.startswith("{")]
        warned = [e for e in lines if e.get("event") == "node_unavailable"]
        assert warned, [e.get("event") for e in lines]
        assert warned[0]["level"] == "warning"
        assert warned[0]["reason"] == "bootstrap broker disconnected"
        assert warned[0]["address"] == f"127.0.0.1:{port}"
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
