"""No retry storm where the mock cannot stand in: a real broker behind the FaultProxy (which
counts every request per API), for an authentication failure (SASL/PLAIN, wrong password)
and for an error the proxy writes into a real broker's answers. Same bound as the mock
cases (:func:`tests.pacing.cases.java_bound`): Java's schedule with the jitter at its lowest
in the window, plus a margin; for authentication the schedule is ``reconnect.backoff.ms``
doubling to ``reconnect.backoff.max.ms`` (set to the same 100 / 1000 ms)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kafka_actors.protocol.wire.apis import ApiKey
from tests.pacing.cases import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    ERROR_NAMES,
    MARGIN,
    QUEUED,
    RETRY_BACKOFF_MAX_MS,
    RETRY_BACKOFF_MS,
    UNKNOWN_TOPIC_OR_PARTITION,
    WINDOW_S,
    java_bound,
)
from tests.wire_faults.proxy import FaultProxy

pytestmark = pytest.mark.broker


def _address(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    return host, int(port)


def _poll_for(consumer: Any, seconds: float) -> list[BaseException]:
    """Poll ``seconds``; the errors poll raised (an authentication failure is raised)."""
    raised: list[BaseException] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            consumer.poll(0.1)
        except Exception as exc:
            raised.append(exc)
            time.sleep(0.05)
    return raised


def _count_in_window(proxy: FaultProxy, api: int) -> int:
    times = [t for a, t in list(proxy.requests) if a == api]
    assert times, f"no {ApiKey(api).api_name} request reached the proxy"
    return proxy.request_count(api, times[0], times[0] + WINDOW_S)


def test_wrong_password_reconnects_paced(kafka_broker_secured: Any) -> None:
    import kafka_actors

    target = _address(kafka_broker_secured.listener_bootstrap("SASL_PLAINTEXT"))
    with FaultProxy(target) as proxy:
        consumer = kafka_actors.KafkaConsumer(
            {
                "bootstrap.servers": proxy.address,
                "group.id": f"g-{uuid.uuid4().hex[:8]}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "alice",
                "sasl.password": "definitely-not-the-PASSWORD",
                "reconnect.backoff.ms": RETRY_BACKOFF_MS,
                "reconnect.backoff.max.ms": RETRY_BACKOFF_MAX_MS,
                "retry.backoff.ms": RETRY_BACKOFF_MS,
                "retry.backoff.max.ms": RETRY_BACKOFF_MAX_MS,
            }
        )
        try:
            consumer.subscribe(["pacing-auth"])
            raised = _poll_for(consumer, WINDOW_S + 1.0)
        finally:
            consumer.close(timeout=2.0)
        handshakes = _count_in_window(proxy, ApiKey.SASL_HANDSHAKE)
        authenticates = _count_in_window(proxy, ApiKey.SASL_AUTHENTICATE)
    bound = java_bound()
    print(f"wrong password: {handshakes} SaslHandshake, {authenticates} SaslAuthenticate in ")
    print(f"{WINDOW_S:g} s, bound {bound}; poll raised {len(raised)} times")
    assert raised, "poll raised no authentication error"
    assert handshakes <= bound, (
        f"{handshakes} SaslHandshake (one per connection) in {WINDOW_S:g} s with a wrong "
        f"password; Java's reconnect schedule allows {bound} (margin {MARGIN} included)"
    )
    assert authenticates <= bound, f"{authenticates} SaslAuthenticate in {WINDOW_S:g} s"


#: (API, error, how the consumer uses the group): errors a real broker answers, rewritten by
#: the proxy. FindCoordinator is here because the mock's error answers to FindCoordinator v3
#: carry a null host, which the schema forbids (our decoder closes the connection instead).
PROXY_CASES = [
    (ApiKey.OFFSET_FETCH, COORDINATOR_LOAD_IN_PROGRESS, "assign"),
    (ApiKey.OFFSET_FETCH, UNKNOWN_TOPIC_OR_PARTITION, "assign"),
    (ApiKey.FIND_COORDINATOR, COORDINATOR_NOT_AVAILABLE, "consumer"),
    (ApiKey.FIND_COORDINATOR, COORDINATOR_NOT_AVAILABLE, "classic"),
]


@pytest.mark.parametrize(
    ("api", "error", "client"),
    PROXY_CASES,
    ids=[f"{a.api_name}-{ERROR_NAMES[e]}-{c}" for a, e, c in PROXY_CASES],
)
def test_error_answered_by_a_real_broker(
    kafka_broker: Any, kafka_topic: Callable[..., str], api: ApiKey, error: int, client: str
) -> None:
    """The proxy rewrites every error code of the real broker's answers of ``api`` to
    ``error``; the consumer must retry paced."""
    import kafka_actors

    topic = kafka_topic(kafka_broker, 1)
    with FaultProxy(_address(kafka_broker.bootstrap_servers)) as proxy:
        proxy.arm_error(api, error, QUEUED)
        config: dict[str, object] = {
            "bootstrap.servers": proxy.address,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "retry.backoff.ms": RETRY_BACKOFF_MS,
            "retry.backoff.max.ms": RETRY_BACKOFF_MAX_MS,
        }
        if client != "assign":
            config["group.protocol"] = client
        consumer = kafka_actors.KafkaConsumer(config)
        try:
            if client == "assign":
                consumer.assign([kafka_actors.TopicPartition(topic, 0)])
            else:
                consumer.subscribe([topic])
            _poll_for(consumer, WINDOW_S + 1.0)
        finally:
            consumer.close(timeout=2.0)
        count = _count_in_window(proxy, api)
        assert proxy.applied, f"the proxy rewrote no {api.api_name} answer"
    bound = java_bound()
    what = f"{api.api_name} answering {ERROR_NAMES[error]} ({client})"
    print(f"{what}: {count} in {WINDOW_S:g} s, bound {bound}")
    assert count <= bound, (
        f"{count} {what} in {WINDOW_S:g} s; Java's schedule allows {bound} "
        f"(margin {MARGIN} included)"
    )
