"""SASL/OAUTHBEARER start-up: the NetworkActor makes no connection attempt before the token
source has an outcome (its first token, or its first error), and starts one as soon as it
has: no attempt failed with "no token yet", no "node unavailable" warning, no reconnect
backoff to sit out at start."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pykka
import pytest

from kafka_actors.errors import OAuthBearerTokenError
from kafka_actors.protocol.wire import requests as rq
from tests.actors.network_helpers import events, network_config, send

StartNetwork = Callable[..., pykka.ActorRef[Any]]


@pytest.fixture
def listener() -> Iterator[tuple[socket.socket, list[socket.socket]]]:
    """A loopback listener that accepts connections and never answers (counts them)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server, accepted
    stop.set()
    thread.join(5)
    for conn in accepted:
        conn.close()
    server.close()


def oauth_config(server: socket.socket, provider: Callable[[], Any]) -> Any:
    port = server.getsockname()[1]
    return network_config(
        f"127.0.0.1:{port}",
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.provider": provider,
        },
    )


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def warnings(stream: Any) -> list[dict[str, Any]]:
    lines = [json.loads(x) for x in stream.getvalue().splitlines() if x.startswith("{")]
    return [line for line in lines if line.get("level") in ("warning", "error")]


def test_no_connection_attempt_before_the_first_token(
    start_network: StartNetwork, listener: Any, captured_logs: Any
) -> None:
    server, accepted = listener
    release = threading.Event()
    fetched = threading.Event()

    def provider() -> tuple[str, float]:
        release.wait(30)
        fetched.set()
        return "opaque-token", time.time() + 3600

    ref = start_network(oauth_config(server, provider))
    send(ref, rq.metadata_request(12, topics=None), timeout_ms=30_000)
    time.sleep(0.5)  # the first fetch is under way: nothing may happen on the network
    assert not fetched.is_set()
    assert [e.kind for e in events(ref)] == []
    assert accepted == []

    assert warnings(captured_logs) == []

    release.set()  # the token is there: the attempt starts at once (no backoff to sit out)
    wait_for(lambda: len(accepted) == 1)
    assert events(ref)[0].kind == "connect"


def test_a_failed_first_fetch_releases_the_connection_attempt(
    start_network: StartNetwork, listener: Any
) -> None:
    """The gate waits for an outcome, not for success: a provider that fails releases the
    attempt (whose SASL step then fails with the provider's typed error, as before)."""
    server, accepted = listener
    failures: list[float] = []

    def provider() -> tuple[str, float]:
        time.sleep(0.2)
        failures.append(time.monotonic())
        raise OAuthBearerTokenError("the identity provider said no")

    ref = start_network(oauth_config(server, provider))
    send(ref, rq.metadata_request(12, topics=None), timeout_ms=30_000)
    wait_for(lambda: len(accepted) == 1)
    assert failures, "the attempt started before the first fetch had an outcome"
