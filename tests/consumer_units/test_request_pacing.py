"""Issue 20: ``ActorCore.request`` retries a restarting target after the backoff of a request
state (retry.backoff.ms doubling to retry.backoff.max.ms, jitter 0.2), not every
retry.backoff.ms flat (the old code: 100 attempts in the simulated 10 s below)."""

from __future__ import annotations

import concurrent.futures
import itertools
import time
from typing import Any

from kafka_actors.clock import ManualClock
from kafka_actors.config import ConsumerConfig
from kafka_actors.core import ConsumerCore

# Smallest waits 80, 160, 320, 640, then 800 each: 1 + 4 + (10_000 - 1_200) // 800 = 16.
MAX_IN_WINDOW = 16


def test_retries_of_a_restarting_target_back_off_exponentially() -> None:
    config = ConsumerConfig.from_dict(
        {
            "bootstrap.servers": "127.0.0.1:1",
            "reconnect.backoff.ms": 1000,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000,
        }
    )
    core = ConsumerCore(config)
    clock = ManualClock(monotonic=1_000.0)
    core.ctx.clock = clock
    core.ctx.scheduler = clock.scheduler()
    calls: list[int] = []

    def make(_f: concurrent.futures.Future[Any], _d: int) -> None:
        calls.append(core.ctx.now_ms())

    try:
        future = core.request("nosuch", make, time.monotonic() + 600, "lookup")
        for _ in range(10_000 // 5):
            clock.advance(0.005)
        assert not future.done()
        assert 8 <= len(calls) <= MAX_IN_WINDOW, calls
        gaps = [b - a for a, b in itertools.pairwise(calls)]
        for attempt, gap in enumerate(gaps):
            assert gap >= 0.8 * min(100 * 2**attempt, 1_000), (attempt, gaps)
        future.cancel()
    finally:
        core.begin_shutdown("t")
        core.stop_actors(10)
