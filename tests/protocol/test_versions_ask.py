"""The consumer's one ApiVersions ask (issue 22): :class:`VersionsAsk`, pure, time in ms."""

from __future__ import annotations

from kafka_actors.protocol.request_state import ExponentialBackoff
from kafka_actors.protocol.wire.versions import ASK_VERSION, AskNow, VersionsAsk

TIMEOUT_MS = 30_000


def _ask() -> VersionsAsk:
    # Jitter 0: backoffs 100, 200, 400, 800, 1000, ...
    return VersionsAsk(ExponentialBackoff(100, 2, 1000, 0.0, lambda: 0.5), timeout_ms=TIMEOUT_MS)


def _claim(ask: VersionsAsk, waiter: object, now: int) -> AskNow:
    step = ask.next(waiter, now)
    assert isinstance(step, AskNow), step
    return step


def test_one_ask_at_a_time_the_others_wait_for_its_outcome() -> None:
    ask = _ask()
    first = _claim(ask, "a", 0)
    assert first.version == ASK_VERSION
    assert ask.next("b", 0) == TIMEOUT_MS  # at most until its deadline
    assert ask.next("c", 5) == TIMEOUT_MS - 5
    assert ask.failed(first.token, 10) == ["b", "c"]
    assert ask.next("b", 10) == 100  # the backoff, for everyone
    assert ask.next("c", 60) == 50
    assert ask.failed(first.token, 70) == []  # a stale outcome changes nothing
    second = _claim(ask, "c", 110)
    assert ask.answered(second.token) == ["b"]
    assert ask.done and ask.next("a", 110) is None


def test_only_the_first_refusal_falls_back_at_once() -> None:
    ask = _ask()
    token = _claim(ask, "a", 0).token
    ask.refused(token, 1, offered=ASK_VERSION)  # it offers what it refused: one step down
    step = _claim(ask, "a", 1)  # the one fallback, at once
    assert step.version == ASK_VERSION - 1
    ask.refused(step.token, 2, offered=0)
    assert ask.next("a", 2) == 100
    step = _claim(ask, "b", 102)
    assert step.version == 0
    ask.refused(step.token, 103)
    assert ask.next("a", 103) == 200
    step = _claim(ask, "a", 303)
    assert step.version == 0  # nothing lower: v0 again, after the backoff
    assert ask.attempts == 2


def test_the_asker_going_away_or_its_deadline_is_a_failed_attempt() -> None:
    ask = _ask()
    token = _claim(ask, "a", 0).token
    assert ask.release(token, 5) == []
    assert ask.next("b", 5) == 100
    _claim(ask, "b", 105)
    # Nobody reports: the next caller after the deadline waits the next backoff from it.
    assert ask.next("c", 105 + TIMEOUT_MS) == 200
    assert isinstance(ask.next("c", 305 + TIMEOUT_MS), AskNow)
    assert ask.attempts == 2


def test_versions_from_a_stale_ask_still_end_it() -> None:
    ask = _ask()
    token = _claim(ask, "a", 0).token
    ask.release(token, 1)
    ask.next("b", 1)
    assert ask.answered(token) == ["b"]
    assert ask.done


def test_versions_learned_elsewhere_wake_the_asker_and_the_waiters() -> None:
    """A connection's handshake told the versions (issue 26): the ask under way is answered
    by no one, so its asker is woken with the waiters."""
    ask = _ask()
    token = _claim(ask, "a", 0).token
    ask.next("b", 1)
    assert ask.learned() == ["b", "a"]
    assert ask.done and ask.next("c", 2) is None
    assert ask.answered(token) == [] and ask.learned() == []


def test_versions_learned_with_no_ask_under_way_wake_the_waiters_only() -> None:
    ask = _ask()
    token = _claim(ask, "a", 0).token
    ask.failed(token, 1)
    assert ask.next("a", 2) == 99  # the backoff
    assert ask.learned() == ["a"]
