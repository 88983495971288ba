"""Never hammer a broker (issue 20), the CLI's admin queries: a coordinator that keeps
answering a retriable error is asked again after ``retry.backoff.ms`` doubling to
``retry.backoff.max.ms`` with jitter (Java's schedule, at its shortest, plus
:data:`~tests.protocol.java_backoff.MARGIN`), until the client's timeout; no retry loop runs
inside another. A fake clock: sleeping advances it."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_actors.cli.admin import ClusterClient
from kafka_actors.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    KafkaError,
)
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.retrying import PacedRetry
from tests.protocol.java_backoff import MARGIN, java_max_requests

TIMEOUT_S = 10.0


class FakeTime:
    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


class Versions:
    def version_for(self, api: ApiKey) -> int:
        return {ApiKey.FIND_COORDINATOR: 4, ApiKey.OFFSET_FETCH: 9}.get(api, 0)

    def supports(self, api: ApiKey) -> bool:
        return True


class Broker:
    """Answers FindCoordinator (``find_code``), ConsumerGroupDescribe and OffsetFetch
    (``group_code``); counts the requests of each API."""

    def __init__(self, fake: FakeTime, find_code: int, group_code: int) -> None:
        self.fake = fake
        self.find_code = find_code
        self.group_code = group_code
        self.sent: dict[int, list[float]] = {}

    def send(self, payload: Any, node: int = -1) -> Any:
        api = int(payload.__api_key__)
        self.sent.setdefault(api, []).append(self.fake.now)
        self.fake.now += 0.001  # the round trip
        if api == ApiKey.FIND_COORDINATOR:
            entry = SimpleNamespace(
                error_code=self.find_code, error_message=None, node_id=1, host="h", port=1
            )
            return SimpleNamespace(coordinators=[entry])
        group = SimpleNamespace(error_code=self.group_code, error_message=None, topics=())
        return SimpleNamespace(groups=[group])


def _client(monkeypatch: pytest.MonkeyPatch, broker: Broker, config: Any) -> ClusterClient:
    fake = broker.fake
    # (time itself too: the retry loop before PacedRetry read it directly)
    monkeypatch.setattr(time, "monotonic", fake.monotonic)
    monkeypatch.setattr(time, "sleep", fake.sleep)
    client = object.__new__(ClusterClient)
    client._timeout = TIMEOUT_S  # type: ignore[attr-defined]
    client._retry = PacedRetry(  # type: ignore[attr-defined]
        config, monotonic=fake.monotonic, sleep=fake.sleep, random=lambda: 0.0
    )
    client._versions = Versions()  # type: ignore[assignment,attr-defined]
    client._ref = SimpleNamespace(tell=lambda message: None)  # type: ignore[assignment,attr-defined]
    client.send = broker.send  # type: ignore[method-assign]
    return client


CASES = {
    "FindCoordinator COORDINATOR_NOT_AVAILABLE": (
        CoordinatorNotAvailableError.code,
        0,
        ApiKey.FIND_COORDINATOR,
    ),
    "ConsumerGroupDescribe COORDINATOR_LOAD_IN_PROGRESS": (
        0,
        CoordinatorLoadInProgressError.code,
        ApiKey.CONSUMER_GROUP_DESCRIBE,
    ),
    "OffsetFetch COORDINATOR_LOAD_IN_PROGRESS": (
        0,
        CoordinatorLoadInProgressError.code,
        ApiKey.OFFSET_FETCH,
    ),
}


@pytest.mark.parametrize("backoff", [(100, 1_000), (500, 5_000)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_admin_queries_back_off_while_the_coordinator_fails(
    monkeypatch: pytest.MonkeyPatch, case: str, backoff: tuple[int, int]
) -> None:
    find_code, group_code, api = CASES[case]
    initial, maximum = backoff
    config = SimpleNamespace(retry_backoff_ms=initial, retry_backoff_max_ms=maximum)
    broker = Broker(FakeTime(), find_code, group_code)
    client = _client(monkeypatch, broker, config)
    started = broker.fake.now
    with pytest.raises(KafkaError):
        if api == ApiKey.OFFSET_FETCH:
            client.committed("g")
        else:
            client.describe_group("g")
    window_ms = (broker.fake.now - started) * 1000.0
    assert window_ms <= TIMEOUT_S * 1000.0 + 1
    sent = broker.sent[api]
    assert len(sent) <= java_max_requests(window_ms, initial_ms=initial, max_ms=maximum) + MARGIN
    # Each FindCoordinator is followed by one group request at most (no loop inside a loop).
    if api != ApiKey.FIND_COORDINATOR:
        assert len(broker.sent[ApiKey.FIND_COORDINATOR]) == len(sent)


def test_a_success_resets_the_admin_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    config = SimpleNamespace(retry_backoff_ms=100, retry_backoff_max_ms=1_000)
    broker = Broker(FakeTime(), CoordinatorNotAvailableError.code, 0)
    client = _client(monkeypatch, broker, config)
    with pytest.raises(KafkaError):
        client.coordinator("g")
    broker.find_code = 0
    assert client.coordinator("g") == 1  # after the backoff still running, then at once
    broker.find_code = CoordinatorNotAvailableError.code
    broker.sent.clear()
    with pytest.raises(KafkaError):
        client.coordinator("g")
    first, second = broker.sent[ApiKey.FIND_COORDINATOR][:2]
    assert second - first == pytest.approx(0.080 + 0.001)  # retry.backoff.ms (jitter 0.8)
