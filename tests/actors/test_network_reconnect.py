"""A broker killed under the NetworkActor (a dedicated one-node Kafka 4.x, so the session
brokers other tests share are not disturbed): reconnect attempts back off exponentially with
jitter, and requests succeed again once the broker is back."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pykka
import pytest

from kafka_actors.actors.network import RequestFailed, Response
from kafka_actors.errors import KafkaConnectionError
from kafka_actors.protocol.wire import requests as rq
from kafka_actors.testing import KafkaBroker
from tests.actors.network_helpers import events, metadata, network_config, send

StartNetwork = Callable[..., pykka.ActorRef[Any]]


@pytest.fixture(scope="module")
def own_broker() -> Iterator[KafkaBroker]:
    with KafkaBroker() as broker:
        yield broker


@pytest.mark.broker
def test_broker_killed_backoff_then_recovery(
    own_broker: KafkaBroker, start_network: StartNetwork, captured_logs: Any
) -> None:
    base_ms, max_ms = 100, 1_600
    config = network_config(
        own_broker.bootstrap_servers,
        **{"reconnect.backoff.ms": base_ms, "reconnect.backoff.max.ms": max_ms},
    )
    ref = start_network(config)
    node = int(metadata(ref).response.brokers[0].node_id)
    metadata(ref, node=node)
    own_broker.kill_broker(0)
    deadline = time.monotonic() + 30
    while not any(e.kind == "disconnected" for e in events(ref, node)):
        assert time.monotonic() < deadline, "the actor did not notice the dead broker"
        time.sleep(0.05)
    # A request for the dead node fails at the next failed attempt with a retriable
    # connection error (Java's NetworkClientDelegate.checkDisconnects), not at its timeout:
    # its sender retries it through its own backoff.
    waiting = send(ref, rq.metadata_request(12, topics=None), node=node, timeout_ms=180_000)
    failed = waiting.get(timeout=30)
    assert isinstance(failed, RequestFailed) and failed.node == node
    assert isinstance(failed.error, KafkaConnectionError) and failed.error.retriable
    # The actor reconnects while it has something to send: a request kept waiting for the
    # node (sent again as soon as the last one failed) keeps it trying.
    deadline = time.monotonic() + 60
    while sum(e.kind == "connect_failed" for e in events(ref, node)) < 7:
        assert time.monotonic() < deadline, "too few reconnect attempts"
        again = send(ref, rq.metadata_request(12, topics=None), node=node, timeout_ms=180_000)
        assert isinstance(again.get(timeout=30), RequestFailed)
    recorded = [e for e in events(ref, node) if e.kind != "ready"][1:]  # from the disconnect on
    failures = [e for e in recorded if e.kind in ("disconnected", "connect_failed")]
    attempts = [e for e in recorded if e.kind == "connect"]
    assert failures[0].kind == "disconnected"
    for n, failure in enumerate(failures[:7]):
        nominal = min(max_ms, base_ms * 2**n) / 1000
        assert failure.backoff is not None
        assert nominal * 0.8 - 1e-6 <= failure.backoff <= min(max_ms / 1000, nominal * 1.2)
    # Attempt n+1 starts when backoff n has passed (not before; a little after at most).
    for failure, attempt in zip(failures[1:7], attempts[1:7], strict=True):
        gap = attempt.at - failure.at
        assert failure.backoff is not None
        assert failure.backoff - 0.005 <= gap <= failure.backoff + 1.0
    own_broker.start_broker(0)
    deadline = time.monotonic() + 200
    while not isinstance(
        reply := send(ref, rq.metadata_request(12, topics=None), node=node).get(timeout=200),
        Response,
    ):
        assert time.monotonic() < deadline, f"no answer from the restarted broker: {reply}"
        time.sleep(0.2)
    assert reply.node == node
    assert isinstance(metadata(ref, node=node), Response)
    assert events(ref, node)[-1].kind == "ready"
    # Churn is logged once per state change at INFO; the retries in between at DEBUG.
    lines = [json.loads(x) for x in captured_logs.getvalue().splitlines() if x.startswith("{")]
    mine = [e for e in lines if e.get("node") == node and e.get("event", "").startswith("node_")]
    after_kill = mine[[e["event"] for e in mine].index("node_disconnected") :]
    infos = [e["event"] for e in after_kill if e["level"] == "info"]
    # ... and the end of the outage once (issue 20: a failing condition is logged when it
    # starts, at most every 30 s while it lasts, and when it clears).
    assert infos == ["node_disconnected", "node_ready", "node_available_again"]
    retries = [e for e in after_kill if e["event"] in ("node_connecting", "node_connect_failed")]
    assert len(retries) >= 14 and all(e["level"] == "debug" for e in retries)
