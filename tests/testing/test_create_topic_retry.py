"""The testkit's ``create_topic`` retries what a broker just started may do to an admin
request (close the connection it accepted: a transport error; time out), with backoff, and
takes TOPIC_ALREADY_EXISTS after a retry as done; other errors raise at once. No broker: the
admin client is a stand-in (seen in a full run: a fresh broker closed the first CreateTopics
connection 10 ms after accepting it)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_actors.testing import KafkaCluster


class _Future:
    def __init__(self, outcome: KafkaError | None) -> None:
        self.outcome = outcome

    def result(self, timeout: float) -> None:
        if self.outcome is not None:
            raise KafkaException(self.outcome)


class _Admin:
    def __init__(self, outcomes: list[KafkaError | None]) -> None:
        self.outcomes = outcomes
        self.calls = 0

    def create_topics(self, topics: list[Any], **kw: Any) -> dict[str, _Future]:
        self.calls += 1
        return {topics[0].topic: _Future(self.outcomes.pop(0))}


def _cluster(monkeypatch: pytest.MonkeyPatch, admin: _Admin) -> tuple[KafkaCluster, list[float]]:
    cluster = KafkaCluster()
    sleeps: list[float] = []
    monkeypatch.setattr(cluster, "_admin", lambda: admin)
    monkeypatch.setattr(cluster, "wait_for_topic", lambda *a, **kw: None)
    monkeypatch.setattr("kafka_actors.testing.broker.time.sleep", sleeps.append)
    return cluster, sleeps


def test_a_transport_error_is_retried_with_growing_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = KafkaError(KafkaError._TRANSPORT)
    admin = _Admin([transport, transport, None])
    cluster, sleeps = _cluster(monkeypatch, admin)
    cluster.create_topic("t")
    assert admin.calls == 3
    assert len(sleeps) == 2 and 0.07 <= sleeps[0] <= 0.13 and sleeps[1] > sleeps[0]


def test_already_exists_after_a_retry_is_done_but_not_at_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exists = KafkaError(KafkaError.TOPIC_ALREADY_EXISTS)
    admin = _Admin([KafkaError(KafkaError._TIMED_OUT), exists])
    cluster, _ = _cluster(monkeypatch, admin)
    cluster.create_topic("t")
    assert admin.calls == 2
    first = _Admin([exists])
    cluster, sleeps = _cluster(monkeypatch, first)
    with pytest.raises(KafkaException):
        cluster.create_topic("t")  # a topic that existed before: the caller's mistake
    assert first.calls == 1 and sleeps == []


def test_other_errors_raise_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    admin = _Admin([KafkaError(KafkaError.INVALID_REPLICATION_FACTOR)])
    cluster, sleeps = _cluster(monkeypatch, admin)
    with pytest.raises(KafkaException):
        cluster.create_topic("t")
    assert admin.calls == 1 and sleeps == []
