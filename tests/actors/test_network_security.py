"""The NetworkActor over SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), SSL and SASL_SSL
listeners of a real Kafka 4.x broker: right credentials work; a wrong password gives callers a
typed, non-retriable AuthenticationError, reconnects back off exponentially (KAFKA-15165), and
no secret reaches the logs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pykka
import pytest

from kafka_actors.actors.network import ANY_NODE, RequestFailed, Response
from kafka_actors.errors import AuthenticationError, SaslAuthenticationFailedError
from kafka_actors.protocol.wire import requests as rq
from tests.actors.network_helpers import events, metadata, network_config, send

StartNetwork = Callable[..., pykka.ActorRef[Any]]

USER, PASSWORD = "alice", "alice-secret"
WRONG = "not-alices-password-5e1f"

CASES = [
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ("SSL", None),
    ("SASL_SSL", "PLAIN"),
    ("SASL_SSL", "SCRAM-SHA-512"),
]


def secure_config(
    broker: Any, listener: str, mechanism: str | None, password: str, **kw: Any
) -> Any:
    spec = broker.listener(listener)
    values: dict[str, Any] = {"security.protocol": spec.security_protocol}
    if mechanism is not None:
        values.update(
            {"sasl.mechanism": mechanism, "sasl.username": USER, "sasl.password": password}
        )
    if spec.uses_ssl:
        values["ssl.truststore.location"] = str(broker.ca_path)
    values.update(kw)
    return network_config(broker.listener_bootstrap(listener), **values)


def lines(stream: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]


@pytest.mark.broker
@pytest.mark.parametrize(("listener", "mechanism"), CASES, ids=lambda v: str(v))
def test_right_credentials(
    kafka_broker_secured: Any,
    start_network: StartNetwork,
    captured_logs: Any,
    listener: str,
    mechanism: str | None,
) -> None:
    ref = start_network(secure_config(kafka_broker_secured, listener, mechanism, PASSWORD))
    meta = metadata(ref)
    [broker] = meta.response.brokers
    # The broker names its node on the listener we came in by; the actor connects there too.
    assert str(broker.port) == kafka_broker_secured.listener_bootstrap(listener).rsplit(":", 1)[1]
    direct = metadata(ref, node=int(broker.node_id))
    assert isinstance(direct, Response) and direct.node == int(broker.node_id)
    ready = [e for e in lines(captured_logs) if e.get("event") == "node_ready"]
    assert len(ready) == 2 and all(e["authenticated"] is (mechanism is not None) for e in ready)
    assert PASSWORD not in captured_logs.getvalue()


@pytest.mark.broker
@pytest.mark.parametrize(
    ("listener", "mechanism"),
    [
        ("SASL_PLAINTEXT", "PLAIN"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
        ("SASL_SSL", "SCRAM-SHA-512"),
    ],
    ids=lambda v: str(v),
)
def test_wrong_password_is_typed_backs_off_and_stays_secret(
    kafka_broker_secured: Any,
    start_network: StartNetwork,
    captured_logs: Any,
    listener: str,
    mechanism: str,
) -> None:
    base_ms, max_ms = 100, 1_600
    config = secure_config(
        kafka_broker_secured,
        listener,
        mechanism,
        WRONG,
        **{"reconnect.backoff.ms": base_ms, "reconnect.backoff.max.ms": max_ms},
    )
    ref = start_network(config)
    for _ in range(6):
        reply = send(ref, rq.metadata_request(12, topics=None), node=ANY_NODE, timeout_ms=30_000)
        failed = reply.get(timeout=40)
        assert isinstance(failed, RequestFailed)
        assert isinstance(failed.error, AuthenticationError) and not failed.error.retriable
        assert isinstance(failed.error, SaslAuthenticationFailedError)
    recorded = events(ref)
    attempts = [e for e in recorded if e.kind == "connect"]
    failures = [e for e in recorded if e.kind == "auth_failed"]
    assert len(attempts) == len(failures) == 6
    assert not any(e.kind == "ready" for e in recorded)
    # Attempt n+1 starts only after the backoff chosen at failure n, which grows as
    # min(max, base * 2^n) with jitter 0.2.
    for n, (failure, attempt) in enumerate(zip(failures, attempts[1:], strict=False)):
        nominal = min(max_ms, base_ms * 2**n) / 1000
        assert failure.backoff is not None
        assert nominal * 0.8 - 1e-6 <= failure.backoff <= min(max_ms / 1000, nominal * 1.2)
        gap = attempt.at - failure.at
        assert gap >= failure.backoff - 0.005
        assert gap <= failure.backoff + 1.0  # scheduling slack on a loaded machine
    text = captured_logs.getvalue()
    assert WRONG not in text and PASSWORD not in text
    warnings = [e for e in lines(captured_logs) if e.get("event") == "node_authentication_failed"]
    assert len(warnings) == 6
    # Churn is announced once; repeats are at debug level.
    assert [e["level"] for e in warnings] == ["warning"] + ["debug"] * 5
