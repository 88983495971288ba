"""Never hammer a broker (issue 20), the Spark source: the driver's polling thread after a
failed poll, the lookups and commits Spark's next trigger repeats (a trigger without new data
comes every 10 ms: ``spark.sql.streaming.pollingDelay``), and the executors' range reader wait
``retry.backoff.ms`` doubling to ``retry.backoff.max.ms`` with jitter after a failure (Java's
schedule at its shortest plus :data:`~tests.protocol.java_backoff.MARGIN`), reset by a
success. A fake consumer and a fake clock (no broker, no Spark)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_actors.errors import (
    CommitFailedError,
    KafkaConnectionError,
    KafkaTimeoutError,
)
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.retrying import PacedRetry
from kafka_actors.spark import reader as reader_module
from kafka_actors.spark.coordinator import GroupMember
from kafka_actors.spark.options import SourceOptions
from kafka_actors.spark.reader import RangeReader
from tests.protocol.java_backoff import MARGIN, java_max_requests

WINDOW_S = 10.0
TRIGGER_S = 0.010
TP = TopicPartition("t", 0)


class FakeTime:
    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)

    def wait(self, seconds: float) -> bool:
        self.sleep(seconds)
        return False


class FakeConsumer:
    """What GroupMember calls; each lookup or commit fails when its flag says so."""

    def __init__(self, fake: FakeTime, initial_ms: int, max_ms: int) -> None:
        self.fake = fake
        self.config = SimpleNamespace(
            retry_backoff_ms=initial_ms, retry_backoff_max_ms=max_ms, request_timeout_ms=30_000
        )
        self.listener: Any = None
        self.go = threading.Event()
        self.poll_fails = False
        self.member: GroupMember | None = None
        self.fail: set[str] = set()
        self.calls: dict[str, list[float]] = {}
        self.stop_at: float | None = None

    def _call(self, name: str) -> None:
        self.calls.setdefault(name, []).append(self.fake.now)
        if name in self.fail:
            if name == "commit_sync":
                raise CommitFailedError("rebalance in progress")
            raise KafkaTimeoutError(f"{name} timed out")

    def subscribe(self, topics: Any = None, *, listener: Any = None, pattern: Any = None) -> None:
        self.listener = listener

    def poll(self, timeout: float = 0.0) -> Any:
        self.go.wait()
        if not self.poll_fails:
            if self.listener is not None:
                listener, self.listener = self.listener, None
                listener.on_partitions_assigned({TP})
            time.sleep(0.001)  # (real time: the test's own thread runs)
            return []
        self.calls.setdefault("poll", []).append(self.fake.now)
        if self.stop_at is not None and self.fake.now >= self.stop_at:
            assert self.member is not None
            self.member._stopping.set()
        raise KafkaConnectionError("no broker")

    def pause(self, partitions: Any) -> None:
        pass

    def assignment(self) -> set[TopicPartition]:
        return {TP}

    def committed(self, partitions: Any) -> dict[TopicPartition, Any]:
        self._call("committed")
        return dict.fromkeys(partitions)

    def beginning_offsets(self, partitions: Any) -> dict[TopicPartition, int]:
        self._call("beginning_offsets")
        return dict.fromkeys(partitions, 0)

    def end_offsets(self, partitions: Any) -> dict[TopicPartition, int]:
        self._call("end_offsets")
        return dict.fromkeys(partitions, 100)

    def commit_sync(self, offsets: Any, timeout: float | None = None) -> None:
        self._call("commit_sync")

    def wakeup(self) -> None:
        pass

    def close(self, timeout: float | None = None) -> None:
        pass


def _member(
    monkeypatch: pytest.MonkeyPatch, initial_ms: int, max_ms: int
) -> tuple[GroupMember, FakeConsumer, FakeTime]:
    fake = FakeTime()
    # (time itself too: the code before the request states slept and read time directly)
    monkeypatch.setattr(time, "monotonic", fake.monotonic)
    consumer = FakeConsumer(fake, initial_ms, max_ms)
    options = SourceOptions.parse(
        {
            "kafka.bootstrap.servers": "127.0.0.1:1",
            "kafka.group.id": "g",
            "subscribe": "t",
            "startingOffsets": "earliest",
        }
    )
    member = GroupMember(options, consumer=consumer)  # type: ignore[arg-type]
    consumer.member = member

    def paced() -> PacedRetry:
        return PacedRetry(consumer.config, monotonic=fake.monotonic, random=lambda: 0.0)

    member._poll_retry = paced()
    member._resolve_retry = paced()
    member._end_offsets_retry = paced()
    member._commit_retry = paced()
    member._wait = fake.wait
    return member, consumer, fake


BACKOFFS = [(100, 1_000), (1_000, 10_000)]


@pytest.mark.parametrize("backoff", BACKOFFS)
def test_the_polling_thread_backs_off_while_polls_fail(
    monkeypatch: pytest.MonkeyPatch, backoff: tuple[int, int]
) -> None:
    initial, maximum = backoff
    member, consumer, fake = _member(monkeypatch, initial, maximum)
    monkeypatch.setattr(time, "sleep", fake.sleep)  # (the old fixed sleep)
    consumer.poll_fails = True
    consumer.stop_at = fake.now + WINDOW_S
    consumer.go.set()
    member._thread.join(10)
    assert not member._thread.is_alive()
    polls = [t for t in consumer.calls["poll"] if t < consumer.stop_at]
    assert len(polls) <= java_max_requests(WINDOW_S * 1000, initial_ms=initial, max_ms=maximum) + (
        MARGIN
    )


@pytest.mark.parametrize("backoff", BACKOFFS)
@pytest.mark.parametrize("failing", ["committed", "end_offsets", "commit_sync"])
def test_lookups_and_commits_a_trigger_repeats_back_off(
    monkeypatch: pytest.MonkeyPatch, failing: str, backoff: tuple[int, int]
) -> None:
    initial, maximum = backoff
    member, consumer, fake = _member(monkeypatch, initial, maximum)
    consumer.go.set()
    try:
        member.initial_offsets()  # assigned, resolved at 0
        consumer.fail.add(failing)
        consumer.calls.clear()
        start = {"t": {"0": 0}}
        if failing == "committed":
            # a partition that comes back: resolved (committed offset, then start) again
            member._planner.lost({TP})
            member._planner.assigned({TP})
        started = fake.now
        commit = 1
        while fake.now - started < WINDOW_S:
            if failing == "commit_sync":
                start = {"t": {"0": commit}}  # Spark finished the batch ending there
            member.latest_offsets(start, None)
            fake.sleep(TRIGGER_S)
        calls = consumer.calls.get(failing, [])
        assert (
            1
            <= len(calls)
            <= (java_max_requests(WINDOW_S * 1000, initial_ms=initial, max_ms=maximum) + MARGIN)
        )
        # A success resets the backoff: the next trigger's call goes at once.
        consumer.fail.clear()
        fake.sleep(maximum * 1.2 / 1000.0)
        member.latest_offsets(start, None)
        consumer.calls.clear()
        consumer.fail.add(failing)
        if failing == "committed":
            member._planner.lost({TP})
            member._planner.assigned({TP})
        if failing == "commit_sync":
            start = {"t": {"0": 50}}
        member.latest_offsets(start, None)
        assert len(consumer.calls.get(failing, [])) == 1
    finally:
        member.stop()


def test_the_range_reader_backs_off_while_it_cannot_fetch(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTime()
    monkeypatch.setattr(time, "monotonic", fake.monotonic)
    monkeypatch.setattr(time, "sleep", fake.sleep)
    fetched: list[float] = []

    def fetch(*_args: Any) -> Any:
        fetched.append(fake.now)
        raise KafkaConnectionError("no broker")

    leader = reader_module._Leader("127.0.0.1", 9092, 0, None)
    monkeypatch.setattr(RangeReader, "_fetch", fetch)
    monkeypatch.setattr(RangeReader, "_leader", lambda *_: leader)
    reader = RangeReader(
        {"bootstrap.servers": "127.0.0.1:9092", "retry.backoff.ms": "100"},
        poll_timeout_ms=int(WINDOW_S * 1000),
    )
    monkeypatch.setattr(reader._pool, "channel", lambda *_: SimpleNamespace(connected=True))
    monkeypatch.setattr(reader, "_random", SimpleNamespace(random=lambda: 0.0))
    reader._retry = PacedRetry(reader._config, monotonic=fake.monotonic, random=lambda: 0.0)
    with pytest.raises(KafkaTimeoutError):
        list(reader.read("t", 0, 0, 10))
    assert 2 <= len(fetched) <= java_max_requests(WINDOW_S * 1000) + MARGIN + 1
