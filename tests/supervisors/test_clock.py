"""Clocks and schedulers: ManualClock/ManualScheduler determinism, the real timer thread."""

from __future__ import annotations

import threading
import time

import pykka
import pytest

from kafka_actors.clock import (
    ManualClock,
    SystemClock,
    ThreadScheduler,
    default_scheduler,
    tell_later,
)


def test_system_clock_reads_real_time() -> None:
    clock = SystemClock()
    a = clock.monotonic()
    assert clock.monotonic() >= a
    assert abs(clock.wall_ms() - time.time() * 1000) < 5000


def test_manual_clock_moves_only_when_advanced() -> None:
    clock = ManualClock(monotonic=10.0, wall_ms=1_000)
    assert clock.monotonic() == 10.0 and clock.wall_ms() == 1_000
    clock.advance(1.5)
    assert clock.monotonic() == 11.5 and clock.wall_ms() == 2_500
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_manual_scheduler_fires_in_deadline_order_at_their_deadlines() -> None:
    clock = ManualClock()
    sched = clock.scheduler()
    seen: list[tuple[str, float]] = []
    sched.call_later(3.0, lambda: seen.append(("c", clock.monotonic())))
    sched.call_later(1.0, lambda: seen.append(("a", clock.monotonic())))
    sched.call_later(2.0, lambda: seen.append(("b", clock.monotonic())))
    sched.call_later(2.0, lambda: seen.append(("b2", clock.monotonic())))  # FIFO on ties
    assert clock.advance(0.5) == 0 and seen == []
    assert clock.advance(2.0) == 3
    assert seen == [("a", 1.0), ("b", 2.0), ("b2", 2.0)]
    assert clock.monotonic() == 2.5
    clock.advance(10.0)
    assert seen[-1] == ("c", 3.0)
    assert sched.pending() == 0


def test_manual_scheduler_cancel_and_callbacks_scheduling_callbacks() -> None:
    clock = ManualClock()
    sched = clock.scheduler()
    seen: list[float] = []
    handle = sched.call_later(1.0, lambda: seen.append(-1.0))
    assert handle.cancel() is True
    assert handle.cancel() is False

    def chain() -> None:
        seen.append(clock.monotonic())
        if len(seen) < 3:
            sched.call_later(1.0, chain)

    sched.call_later(1.0, chain)
    clock.advance(5.0)
    assert seen == [1.0, 2.0, 3.0]
    fired = sched.call_later(0.0, lambda: seen.append(99.0))
    assert sched.run_due() == 1 and seen[-1] == 99.0
    assert fired.cancel() is False


def test_two_manual_schedulers_on_one_clock_interleave_by_deadline() -> None:
    clock = ManualClock()
    s1, s2 = clock.scheduler(), clock.scheduler()
    seen: list[str] = []
    s1.call_later(2.0, lambda: seen.append("s1@2"))
    s2.call_later(1.0, lambda: seen.append("s2@1"))
    s1.call_later(3.0, lambda: seen.append("s1@3"))
    clock.advance(3.0)
    assert seen == ["s2@1", "s1@2", "s1@3"]


def test_failing_callback_does_not_stop_the_others() -> None:
    clock = ManualClock()
    sched = clock.scheduler()
    seen: list[int] = []

    def bad() -> None:
        raise RuntimeError("callback failure")

    sched.call_later(1.0, bad)
    sched.call_later(2.0, lambda: seen.append(1))
    clock.advance(3.0)
    assert seen == [1]


def test_thread_scheduler_runs_callbacks_in_deadline_order_on_one_thread() -> None:
    sched = ThreadScheduler(name="test-timer")
    try:
        done = threading.Event()
        seen: list[tuple[str, str]] = []
        lock = threading.Lock()

        def record(tag: str) -> None:
            with lock:
                seen.append((tag, threading.current_thread().name))
                if len(seen) == 3:
                    done.set()

        handles = {
            "c": sched.call_later(0.06, lambda: record("c")),
            "a": sched.call_later(0.02, lambda: record("a")),
            "b": sched.call_later(0.04, lambda: record("b")),
        }
        cancelled = sched.call_later(0.03, lambda: record("x"))
        assert cancelled.cancel()
        assert done.wait(10.0)
        # Fired in deadline order (deadlines are "now + delay" at each call).
        assert [t for t, _ in seen] == sorted(handles, key=lambda t: handles[t].deadline)
        assert {n for _, n in seen} == {"test-timer"}
        # An earlier timer added while the thread sleeps on a later one wakes it.
        late = threading.Event()
        early = threading.Event()
        sched.call_later(30.0, late.set)
        sched.call_later(0.01, early.set)
        assert early.wait(10.0) and not late.is_set()
    finally:
        sched.close()
    with pytest.raises(RuntimeError):
        sched.call_later(0.0, lambda: None)


def test_thread_scheduler_survives_a_failing_callback() -> None:
    sched = ThreadScheduler()
    try:
        ok = threading.Event()

        def bad() -> None:
            raise RuntimeError("callback failure")

        sched.call_later(0.0, bad)
        sched.call_later(0.01, ok.set)
        assert ok.wait(10.0)
    finally:
        sched.close()


def test_thread_scheduler_keeps_real_time_while_a_test_patches_time_monotonic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 22: a test that monkeypatched time.monotonic (a fake "now" far behind the real
    # clock, as FakeTime's 1000.0 is on a machine up for longer) while a timer left by an
    # earlier test was due made the default scheduler's thread wait for hours: none of its
    # timers fired after it, in that test or in the next ones of the worker.
    sched = ThreadScheduler()
    try:
        leftover = threading.Event()
        sched.call_later(0.1, leftover.set)
        real = time.monotonic
        monkeypatch.setattr(time, "monotonic", lambda: real() - 100_000.0)
        assert leftover.wait(10.0)
        monkeypatch.undo()
        later = threading.Event()
        sched.call_later(0.01, later.set)
        assert later.wait(10.0)
    finally:
        sched.close()


def test_thread_scheduler_survives_an_infinite_delay() -> None:
    # A timer of float("inf") (a caller's timeout passed through) made Condition.wait raise
    # OverflowError in the timer thread: the thread ended and no later timer ever fired.
    sched = ThreadScheduler()
    try:
        sched.call_later(float("inf"), lambda: None)
        sched.call_later(1e300, lambda: None)
        time.sleep(0.05)
        later = threading.Event()
        sched.call_later(0.01, later.set)
        assert later.wait(10.0)
        assert sched.pending() == 2
    finally:
        sched.close()


class _Sink(pykka.ThreadingActor):
    def __init__(self, got: list[object], event: threading.Event) -> None:
        super().__init__()
        self.got = got
        self.event = event

    def on_receive(self, message: object) -> None:
        self.got.append(message)
        self.event.set()


def test_tell_later_delivers_to_the_actor_and_tolerates_a_dead_one() -> None:
    got: list[object] = []
    event = threading.Event()
    ref = _Sink.start(got, event)
    try:
        tell_later(default_scheduler(), 0.01, ref, "hello")
        assert event.wait(10.0)
        assert got == ["hello"]
    finally:
        ref.stop()
    clock = ManualClock()
    sched = clock.scheduler()
    tell_later(sched, 1.0, ref, "to the dead")
    assert clock.advance(1.0) == 1  # fired, no exception escaped
    assert got == ["hello"]


def test_default_scheduler_is_shared() -> None:
    assert default_scheduler() is default_scheduler()
