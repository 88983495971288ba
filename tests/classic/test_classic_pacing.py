"""Issue 20 for the classic protocol: Heartbeat and JoinGroup answered by a coordinator error,
the coordinator rediscovered at once each time, stay within Java's request-state schedule
(retry.backoff.ms doubling to retry.backoff.max.ms, jitter 0.2). A regression guard: the
classic member already counted these failures until a success."""

from __future__ import annotations

import itertools

import pytest
from kio.schema.heartbeat.v4 import request as hb_req
from kio.schema.join_group.v9 import request as join_req

from kafka_actors.protocol.group.classic.membership import ClassicMemberState

from .classic_harness import (
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
    Driver,
    heartbeat_response,
    join_response,
    tps,
)

WINDOW_MS = 10_000
TICK_MS = 5
# Smallest waits 80, 160, 320, 640, then 800 each: 1 + 4 + (10_000 - 1_200) // 800 = 16.
MAX_IN_WINDOW = 16


def _hammer(d: Driver, kind: type, answer: object) -> list[int]:
    sent: list[int] = []
    end = d.now + WINDOW_MS
    while d.now < end:
        if not d.m.coordinator_known:
            d.m.on_coordinator_discovered(d.now)
        for request in d.requests():
            if isinstance(request.request, kind):
                sent.append(d.now)
                d.respond(request, answer)
        d.advance(TICK_MS)
    return sent


def _check_schedule(sent: list[int]) -> None:
    assert 8 <= len(sent) <= MAX_IN_WINDOW, sent
    for attempt, gap in enumerate(b - a for a, b in itertools.pairwise(sent)):
        assert gap >= 0.8 * min(100 * 2**attempt, 1_000), (attempt, sent)


@pytest.mark.parametrize("code", [COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR])
def test_heartbeat_coordinator_errors_follow_the_schedule(code: int) -> None:
    d = Driver(retry_backoff_ms=100, retry_backoff_max_ms=1_000, heartbeat_interval_ms=100)
    d.stable_follower(tps(("a", 0)))
    d.advance(200)
    sent = _hammer(d, hb_req.HeartbeatRequest, heartbeat_response(code))  # type: ignore[arg-type]
    assert d.state() is ClassicMemberState.STABLE
    _check_schedule(sent)


@pytest.mark.parametrize("code", [COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR])
def test_join_group_coordinator_errors_follow_the_schedule(code: int) -> None:
    d = Driver(retry_backoff_ms=100, retry_backoff_max_ms=1_000)
    first = d.join_request("a")
    answer = join_response(error=code, generation=-1, member_id="")
    d.respond(first, answer)
    sent = [d.now, *_hammer(d, join_req.JoinGroupRequest, answer)]
    _check_schedule(sent)
