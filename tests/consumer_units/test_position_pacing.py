"""Issue 20: the position initialisation (``ConsumerCore.update_positions``) never starts a
committed-offsets lookup again right after a failed one: it waits the backoff of its request
state (retry.backoff.ms doubling to retry.backoff.max.ms, jitter 0.2, as Java's RequestState),
however often the front end calls it; a success resets it.

The core runs with an injected manual clock and a ``tell`` that answers each lookup at once (so
no actor nor broker is involved): the old code started one lookup per call (2,000 in the
simulated 10 s below, the ~500-1,000 OffsetFetch a second of the issue)."""

from __future__ import annotations

import concurrent.futures
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kafka_actors.actors.events import ResetPositionsEvent
from kafka_actors.clock import ManualClock
from kafka_actors.config import ConsumerConfig
from kafka_actors.core import ConsumerCore
from kafka_actors.errors import GroupAuthorizationFailedError, UnknownTopicOrPartitionError
from kafka_actors.protocol.messages import TopicPartition

T0 = TopicPartition("no-such-topic", 0)
WINDOW_MS = 10_000
TICK_MS = 5
# Smallest waits 80, 160, 320, 640, then 800 each: 1 + 4 + (10_000 - 1_200) // 800 = 16.
MAX_IN_WINDOW = 16


class _Driver:
    def __init__(self, core: ConsumerCore) -> None:
        self.core = core
        self.clock = ManualClock(monotonic=1_000.0)
        core.ctx.clock = self.clock
        self.lookups: list[int] = []
        self.answer: Callable[[concurrent.futures.Future[Any]], None] = lambda f: f.set_exception(
            UnknownTopicOrPartitionError(topic=T0.topic, partition=0)
        )
        core.ctx.tell = self._tell  # type: ignore[method-assign]
        core.ctx.subscriptions.assign_from_user([T0])

    def _tell(self, target: str, message: Any) -> bool:
        if isinstance(message, ResetPositionsEvent):
            self.lookups.append(self.core.ctx.now_ms())
            self.answer(message.future)
        return True

    def run(self, window_ms: int) -> None:
        for _ in range(window_ms // TICK_MS):
            self.core.update_positions("t")
            self.clock.advance(TICK_MS / 1000.0)


@pytest.fixture
def driver() -> Iterator[_Driver]:
    # Nothing listens there: the actors retry connecting while the test runs.
    config = ConsumerConfig.from_dict(
        {
            "bootstrap.servers": "127.0.0.1:1",
            "group.id": "g",
            "reconnect.backoff.ms": 1000,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000,
        }
    )
    core = ConsumerCore(config)
    try:
        yield _Driver(core)
    finally:
        core.begin_shutdown("t")
        core.stop_actors(10)


def test_failed_lookups_back_off_exponentially(driver: _Driver) -> None:
    driver.run(WINDOW_MS)
    lookups = driver.lookups
    assert 8 <= len(lookups) <= MAX_IN_WINDOW, lookups
    gaps = [b - a for a, b in itertools.pairwise(lookups)]
    for attempt, gap in enumerate(gaps):
        assert gap >= 0.8 * min(100 * 2**attempt, 1_000), (attempt, gaps)
        assert gap <= 1_000 + 2 * TICK_MS, (attempt, gaps)


def test_init_done_tells_the_poll_loop_when_the_retry_is_due(driver: _Driver) -> None:
    core = driver.core
    core.update_positions("t")  # the first lookup fails at once
    assert core.init_done()
    core.update_positions("t")  # takes the failure: backoff
    assert len(driver.lookups) == 1
    assert not core.init_done()
    driver.clock.advance(0.125)  # more than the first backoff (at most 120 ms)
    assert core.init_done()
    core.update_positions("t")
    assert len(driver.lookups) == 2


def test_a_success_resets_the_backoff(driver: _Driver) -> None:
    driver.run(5_000)
    core = driver.core
    # A lookup that succeeds (the partition keeps no position here: started again at once).
    driver.answer = lambda f: f.set_result(None)
    driver.run(1_100)
    successes = len(driver.lookups)
    driver.answer = lambda f: f.set_exception(UnknownTopicOrPartitionError())
    core.update_positions("t")
    core.update_positions("t")  # the new failure starts a first-attempt backoff
    assert len(driver.lookups) == successes + 1
    driver.clock.advance(0.125)
    core.update_positions("t")
    assert len(driver.lookups) == successes + 2


def test_a_non_retriable_failure_is_raised_and_paced_too(driver: _Driver) -> None:
    driver.answer = lambda f: f.set_exception(GroupAuthorizationFailedError("no"))
    raised = 0
    for _ in range(WINDOW_MS // TICK_MS):
        try:
            driver.core.update_positions("t")
        except GroupAuthorizationFailedError:
            raised += 1
        driver.clock.advance(TICK_MS / 1000.0)
    assert 8 <= len(driver.lookups) <= MAX_IN_WINDOW
    assert raised == len(driver.lookups) or raised == len(driver.lookups) - 1
