"""A broker killed under the NetworkActor (a dedicated one-node Kafka 4.x, so the session
brokers other tests share are not disturbed): reconnect attempts back off exponentially with
jitter, each one waiting for its backoff on the actor's (injected) clock, and requests
succeed again once the broker is back."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pykka
import pytest

from kafka_actors.actors.network import RequestFailed, Response
from kafka_actors.clock import ManualClock
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
    """The actor's clock is a ManualClock: time moves for it only when the test says so, so
    each backoff is checked on the actor's own clock (no attempt just short of it, one as soon
    as it passed, with nothing told to the actor), whatever the machine's load."""
    base_ms, max_ms = 100, 1_600
    config = network_config(
        own_broker.bootstrap_servers,
        **{"reconnect.backoff.ms": base_ms, "reconnect.backoff.max.ms": max_ms},
    )
    clock = ManualClock(100.0)
    ref = start_network(config, clock=clock)
    node = int(metadata(ref).response.brokers[0].node_id)
    metadata(ref, node=node)
    own_broker.kill_broker(0)
    deadline = time.monotonic() + 30
    while not any(e.kind == "disconnected" for e in events(ref, node)):
        assert time.monotonic() < deadline, "the actor did not notice the dead broker"
        time.sleep(0.05)
    for n in range(7):
        seen = events(ref, node)
        failure = seen[-1]
        assert failure.kind == ("disconnected" if n == 0 else "connect_failed"), seen
        # Exponential backoff with jitter: nominal * [0.8, 1.2), capped at the maximum.
        nominal = min(max_ms, base_ms * 2**n) / 1000
        assert failure.backoff is not None
        assert nominal * 0.8 - 1e-9 <= failure.backoff <= min(max_ms / 1000, nominal * 1.2)
        due = failure.at + failure.backoff
        # The actor reconnects while it has something to send: a request for the node.
        waiting = send(ref, rq.metadata_request(12, topics=None), node=node, timeout_ms=180_000)
        # Just short of the backoff: every message wakes the actor (events() too), and still
        # no attempt.
        clock.advance(due - 0.001 - clock.monotonic())
        assert events(ref, node) == seen, f"an attempt before its backoff ended ({n})"
        # Past it: the actor wakes by itself (nothing is told to it) and attempts at once; the
        # request fails at that failed attempt with a retriable connection error (Java's
        # NetworkClientDelegate.checkDisconnects), not at its timeout: its sender retries it
        # through its own backoff.
        clock.advance(due + 0.001 - clock.monotonic())
        failed = waiting.get(timeout=60)
        assert isinstance(failed, RequestFailed) and failed.node == node
        assert isinstance(failed.error, KafkaConnectionError) and failed.error.retriable
        attempt, again = events(ref, node)[len(seen) :]
        assert (attempt.kind, again.kind) == ("connect", "connect_failed")
        assert attempt.at == clock.monotonic() >= due
    # The broker back (it answers Metadata when start_broker returns): the next attempt,
    # once its backoff passed, connects and the request is answered.
    own_broker.start_broker(0)
    for _ in range(5):
        last = events(ref, node)[-1]
        assert last.kind == "connect_failed" and last.backoff is not None
        clock.advance(last.at + last.backoff + 0.001 - clock.monotonic())
        reply = send(ref, rq.metadata_request(12, topics=None), node=node).get(timeout=60)
        if isinstance(reply, Response):
            break
    assert isinstance(reply, Response), f"no answer from the restarted broker: {reply}"
    assert reply.node == node
    assert isinstance(metadata(ref, node=node), Response)
    after = events(ref, node)
    assert after[-1].kind == "ready"
    outage = after[[e.kind for e in after].index("disconnected") :]
    attempts = sum(e.kind == "connect" for e in outage)
    refused = sum(e.kind == "connect_failed" for e in outage)
    assert attempts == refused + 1  # every attempt failed but the last
    # Churn is logged once per state change at INFO; the retries in between at DEBUG.
    lines = [json.loads(x) for x in captured_logs.getvalue().splitlines() if x.startswith("{")]
    mine = [e for e in lines if e.get("node") == node and e.get("event", "").startswith("node_")]
    after_kill = mine[[e["event"] for e in mine].index("node_disconnected") :]
    infos = [e["event"] for e in after_kill if e["level"] == "info"]
    # ... and the end of the outage once (issue 20: a failing condition is logged when it
    # starts, at most every 30 s while it lasts, and when it clears).
    assert infos == ["node_disconnected", "node_ready", "node_available_again"]
    retries = [e for e in after_kill if e["event"] in ("node_connecting", "node_connect_failed")]
    assert len(retries) == attempts + refused
    assert all(e["level"] == "debug" for e in retries)
