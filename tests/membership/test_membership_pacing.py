"""Issue 20: a KIP-848 member never heartbeats a coordinator that keeps failing faster than
Java's request-state schedule (retry.backoff.ms doubling to retry.backoff.max.ms, jitter 0.2),
whatever the error and however fast the coordinator is rediscovered."""

from __future__ import annotations

import itertools

import pytest
from membership_harness import Harness

from kafka_actors.protocol.group.consumer.states import MemberState as S

# retry.backoff.ms=100, retry.backoff.max.ms=1000, jitter 0.2: the smallest waits are 80, 160,
# 320, 640, then 800 each. In a 10 s window that allows 1 + 4 + (10_000 - 1_200) // 800 = 16
# heartbeats at most; the old code (backoff reset on coordinator errors) sends one per poll.
WINDOW_MS = 10_000
MAX_IN_WINDOW = 16
TICK_MS = 5


def _hammer(h: Harness, code: int) -> list[int]:
    """Answer every heartbeat with ``code`` and rediscover the coordinator at once, polling
    every TICK_MS for WINDOW_MS: the times the heartbeats went out."""
    sent: list[int] = []
    end = h.now + WINDOW_MS
    while h.now < end:
        if not h.m.coordinator_known:
            h.m.on_coordinator_discovered(h.now)
        result = h.poll()
        for request in result.requests:
            sent.append(h.now)
            h.respond(request, error=code, message="not here")
        h.advance(TICK_MS)
    return sent


@pytest.mark.parametrize("code", [16, 15])  # NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE
def test_coordinator_errors_back_off_exponentially_to_the_max(code: int) -> None:
    h = Harness(seed=3)
    h.stable_with({"a": [0]})
    h.advance(5_000)
    sent = _hammer(h, code)
    assert h.m.state is S.STABLE
    assert 8 <= len(sent) <= MAX_IN_WINDOW, sent
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    # Doubling (with jitter) up to retry.backoff.max.ms, never below 80% of the schedule.
    for attempt, gap in enumerate(gaps):
        schedule = min(100 * 2**attempt, 1_000)
        assert gap >= 0.8 * schedule, (attempt, gaps)
        assert gap <= 1_000 + TICK_MS, (attempt, gaps)
    assert min(gaps[4:]) >= 800


@pytest.mark.parametrize("code", [16, 15])
def test_joining_member_paces_coordinator_errors(code: int) -> None:
    h = Harness(seed=4)
    h.m.subscribe(("a",))
    h.m.on_poll(h.now)
    sent = _hammer(h, code)
    assert h.m.state is S.JOINING
    assert 8 <= len(sent) <= MAX_IN_WINDOW, sent


def test_only_a_successful_heartbeat_resets_the_backoff() -> None:
    h = Harness(seed=5)
    h.stable_with({"a": [0]})
    h.advance(5_000)
    _hammer(h, 15)
    h.m.on_coordinator_discovered(h.now)
    h.advance(1_000)
    # Still failing after many attempts: the next heartbeat waits about the max backoff.
    h.respond(h.heartbeat(), error=15)
    h.m.on_coordinator_discovered(h.now)
    wait = h.no_heartbeat().time_until_next_poll_ms
    assert wait is not None and wait >= 800
    h.advance(wait)
    h.respond(h.heartbeat(), epoch=1)
    h.advance(5_000)
    h.respond(h.heartbeat(), error=15)
    h.m.on_coordinator_discovered(h.now)
    wait = h.no_heartbeat().time_until_next_poll_ms
    assert wait is not None and 80 <= wait <= 120
