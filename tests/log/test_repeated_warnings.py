"""Visible but not noisy (issue 20): a failing condition is a WARNING when it starts, repeats
at most once per interval with a count while it lasts, and a missing topic is a WARNING once
per topic. Log lines are captured as tests/log/test_log.py does (``log.configure(json=True)``
into a buffer), and counted: no wall-clock timing is asserted."""

from __future__ import annotations

import io
import json
import socket
import time
from collections import Counter
from typing import Any

import pytest
import structlog

from kafka_actors import log
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.metadata import MetadataConfig, MetadataManager
from tests.managers.harness import T, metadata_response, only_request, seeded_random, versions

UNKNOWN_TOPIC = 3


@pytest.fixture(autouse=True)
def _clear_contextvars() -> object:
    yield
    structlog.contextvars.clear_contextvars()


def _capture(level: str = "DEBUG") -> io.StringIO:
    out = io.StringIO()
    log.configure(json=True, level=level, stream=out)
    return out


def _lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- a missing topic, on the pure metadata manager (fake clock) --------------------------------


def _manager() -> MetadataManager:
    config = MetadataConfig(allow_auto_create_topics=False)
    return MetadataManager(config, versions(metadata=12), random=seeded_random())


def _respond(m: MetadataManager, now: int, topics: list[T]) -> None:
    request = only_request(m.poll(now))
    m.on_response(request.request_id, metadata_response(12, topics), now)


def test_missing_subscribed_topic_warns_once_and_again_only_after_it_reappeared() -> None:
    """Fails on the old code: UNKNOWN_TOPIC_OR_PARTITION of a subscribed topic was INFO at
    every Metadata response, never a WARNING."""
    out = _capture()
    m = _manager()
    m.set_subscription(["orders", "nope"])
    now = 0
    for _ in range(20):  # twenty responses still without the topic
        _respond(m, now, [T("orders"), T("nope", error=UNKNOWN_TOPIC)])
        now += 10_000
    warned = [e for e in _lines(out) if e["event"] == "topic_not_found"]
    assert [(e["topic"], e["level"], e["subscribed"]) for e in warned] == [
        ("nope", "warning", True)
    ]
    _respond(m, now, [T("orders"), T("nope")])  # created
    found = [e for e in _lines(out) if e["event"] == "topic_found"]
    assert [(e["topic"], e["level"]) for e in found] == [("nope", "info")]
    now += 10_000
    m.request_update("test")
    for _ in range(5):  # deleted again
        _respond(m, now, [T("orders"), T("nope", error=UNKNOWN_TOPIC)])
        now += 10_000
    warned = [e for e in _lines(out) if e["event"] == "topic_not_found"]
    assert len(warned) == 2, warned


def test_missing_assigned_topics_warn_once_per_topic() -> None:
    """Fails on the old code (no topic_not_found WARNING at all)."""
    out = _capture()
    m = _manager()
    m.set_assigned_topics(["gone-a", "gone-b"])
    now = 0
    for _ in range(20):
        _respond(m, now, [T("gone-a", error=UNKNOWN_TOPIC), T("gone-b", error=UNKNOWN_TOPIC)])
        now += 10_000
    warned = Counter(
        (e["topic"], e["assigned"]) for e in _lines(out) if e["event"] == "topic_not_found"
    )
    assert warned == {("gone-a", True): 1, ("gone-b", True): 1}


# -- an unreachable broker, through a real consumer (closed loopback port) ---------------------


def test_unreachable_broker_logs_a_bounded_number_of_warnings() -> None:
    """Reconnect attempts every 20..100 ms until 20 attempts failed (counted from the DEBUG
    lines): the node's condition is a WARNING once (the repeat interval is 30 s), and so is
    "every broker down". Fails on the old code, which said both again at each
    reconnect.backoff.max.ms (here ~15 times each)."""
    out = _capture()
    from kafka_actors import KafkaConsumer

    consumer = KafkaConsumer(
        {
            "bootstrap.servers": f"127.0.0.1:{_closed_port()}",
            "group.id": "quiet-logs",
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 100,
        }
    )
    try:
        consumer.subscribe(["orders"])
        deadline = time.monotonic() + 60  # a bound for a loaded machine, not a timing
        while _count(out, "node_connect_failed") < 20:
            assert time.monotonic() < deadline, Counter(e["event"] for e in _lines(out))
            consumer.poll(0.2)
    finally:
        consumer.close(timeout=1)
    warnings = Counter(e["event"] for e in _lines(out) if e["level"] == "warning")
    assert 1 <= warnings["node_unavailable"] <= 2, warnings
    assert 1 <= warnings["all_brokers_unavailable"] <= 2, warnings


def _count(out: io.StringIO, event: str) -> int:
    return sum(1 for e in _lines(out) if e["event"] == event)


# -- unknown topics on the mock cluster, auto creation off -------------------------------------


@pytest.mark.mock
def test_unknown_topics_on_the_mock_cluster_warn_once_per_topic() -> None:
    """assign() of one missing topic and subscribe() to another, allow.auto.create.topics off,
    each consumer with a group.id: one topic_not_found WARNING per topic, and the repeated
    OffsetFetch failures of the assignment at most one WARNING per error per 30 s. Fails on
    the old code: no topic_not_found at all, and (before the OffsetFetch retry was paced) an
    offset_fetch_completed_with_error line per failed attempt."""
    from kafka_actors import KafkaConsumer
    from kafka_actors.testing import MockCluster

    out = _capture()
    with MockCluster(1) as cluster:
        cluster.create_topic("present", 1)
        config = {
            "bootstrap.servers": cluster.bootstrap_servers,
            "allow.auto.create.topics": False,
            "retry.backoff.ms": 10,
            "retry.backoff.max.ms": 50,
        }
        assigned = KafkaConsumer({**config, "group.id": "quiet-assign"})
        subscribed = KafkaConsumer({**config, "group.id": "quiet-subscribe"})
        try:
            assigned.assign([TopicPartition("no-such-topic", 0)])
            subscribed.subscribe(["no-such-topic-b"])
            deadline = time.monotonic() + 60  # a bound for a loaded machine, not a timing
            # Until each topic was asked for at least 10 times.
            while _retriable(out, "no-such-topic") < 10 or _retriable(out, "no-such-topic-b") < 10:
                assert time.monotonic() < deadline, Counter(e["event"] for e in _lines(out))
                assigned.poll(0.1)
                subscribed.poll(0.1)
        finally:
            assigned.close(timeout=1)
            subscribed.close(timeout=1)
    lines = _lines(out)
    fetch_warnings = Counter(
        e["error"].split("(")[0] for e in lines if e["event"] == "offset_fetch_completed_with_error"
    )
    assert all(n <= 2 for n in fetch_warnings.values()), fetch_warnings
    warned = Counter(e["topic"] for e in lines if e["event"] == "topic_not_found")
    assert warned == {"no-such-topic": 1, "no-such-topic-b": 1}, warned


def _retriable(out: io.StringIO, topic: str) -> int:
    """Metadata answers naming ``topic`` missing (the warning, then the DEBUG repeats)."""
    return sum(
        1
        for e in _lines(out)
        if e.get("topic") == topic
        and e["event"] in ("topic_not_found", "topic_metadata_error_retriable")
    )


# -- FindCoordinator failures, on the pure coordinator manager (fake clock) ---------------------


def test_find_coordinator_failures_warn_once_per_interval_with_a_count() -> None:
    """GROUP_AUTHORIZATION_FAILED answered at every attempt for 100 s (backoff up to 1 s):
    WARNING at the start and at most every 30 s after (with a count), INFO when the
    coordinator is found. Fails on the old code (a WARNING at every attempt, ~100 here)."""
    from kafka_actors.protocol.group.coordinator import CoordinatorConfig, CoordinatorManager
    from tests.managers.harness import find_coordinator_response

    out = _capture()
    m = CoordinatorManager(
        CoordinatorConfig(group_id="group-a", retry_backoff_ms=100, retry_backoff_max_ms=1_000),
        versions(find_coordinator=6),
        random=seeded_random(7),
    )
    now = attempts = 0
    while now < 100_000:
        result = m.poll(now)
        if result.requests:
            request = only_request(result)
            m.on_response(request.request_id, find_coordinator_response(6, error=30), now)
            attempts += 1
        now += 50
    assert attempts >= 90
    warned = [e for e in _lines(out) if e["event"] == "find_coordinator_failed"]
    assert 1 <= len(warned) <= 4, len(warned)  # t = 0, 30 s, 60 s, 90 s
    assert "occurrences" not in warned[0]
    assert sum(e.get("occurrences", 1) for e in warned) <= attempts
    assert all(e["occurrences"] >= 20 for e in warned[1:]), warned
    while not (result := m.poll(now)).requests:
        now += 50
    m.on_response(only_request(result).request_id, find_coordinator_response(6), now)
    (recovered,) = [e for e in _lines(out) if e["event"] == "find_coordinator_recovered"]
    assert recovered["level"] == "info" and recovered["occurrences"] == attempts


# -- KIP-848 heartbeat errors, on the pure membership manager (fake clock) ----------------------


def test_heartbeat_errors_are_logged_per_interval_with_a_count() -> None:
    """COORDINATOR_LOAD_IN_PROGRESS at every heartbeat for 100 s (backoff up to 1 s): the
    heartbeat_error line at the start and at most every 30 s after, with a count; one
    heartbeat_error_cleared at the next success. Fails on the old code (a line per error)."""
    from tests.membership.membership_harness import Harness

    out = _capture()
    h = Harness()
    request = h.join("a")
    errors = 0
    while h.now < 100_000:
        h.respond(request, error=14)  # COORDINATOR_LOAD_IN_PROGRESS
        errors += 1
        while not (result := h.poll()).requests:
            h.advance(50)
        request = result.requests[0]
    assert errors >= 90
    lines = [e for e in _lines(out) if e["event"] == "heartbeat_error"]
    assert 1 <= len(lines) <= 4, len(lines)
    h.respond(request, epoch=1)
    (cleared,) = [e for e in _lines(out) if e["event"] == "heartbeat_error_cleared"]
    assert cleared["error_code"] == 14 and cleared["occurrences"] == errors
