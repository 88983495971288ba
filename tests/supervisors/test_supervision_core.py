"""The pure supervision rules: strategies, restart types, intensity, backoff, shutdown."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from kafka_actors.supervisors.core import (
    Action,
    ChildSpec,
    ChildStatus,
    Escalate,
    ExitReason,
    Restart,
    ScheduleRestart,
    ShutdownComplete,
    StartChild,
    StopChild,
    Strategy,
    SupervisorCore,
    SupervisorSpec,
    backoff_delay,
)

BOOM = RuntimeError("boom")
EXC = ExitReason.EXCEPTION


def spec(name: str, **kw: Any) -> ChildSpec:
    kw.setdefault("min_backoff", 0.0)
    kw.setdefault("max_backoff", 0.0)
    return ChildSpec(name=name, factory=lambda ctx: None, **kw)


def make(
    names: list[str] | list[ChildSpec],
    strategy: Strategy = Strategy.ONE_FOR_ONE,
    max_restarts: int = 10,
    period: float = 5.0,
    rnd: Callable[[], float] | None = None,
) -> tuple[SupervisorCore, list[Action]]:
    specs = [n if isinstance(n, ChildSpec) else spec(n) for n in names]
    core = SupervisorCore(
        "sup",
        SupervisorSpec(strategy=strategy, max_restarts=max_restarts, period=period),
        specs,
        rnd or (lambda: 0.0),
    )
    return core, core.start(0.0)


def starts(actions: list[Action]) -> list[tuple[str, int]]:
    return [(a.name, a.generation) for a in actions if isinstance(a, StartChild)]


def stops(actions: list[Action]) -> list[tuple[str, int]]:
    return [(a.name, a.generation) for a in actions if isinstance(a, StopChild)]


def drain_stops(core: SupervisorCore, actions: list[Action], now: float) -> list[Action]:
    """Play the children's side: every StopChild is followed by that child's exit."""
    out: list[Action] = []
    queue = list(actions)
    while queue:
        a = queue.pop(0)
        out.append(a)
        if isinstance(a, StopChild):
            queue += core.child_exited(a.name, a.generation, ExitReason.NORMAL, None, now)
    return out


# -- start ------------------------------------------------------------------------------


def test_start_starts_every_child_in_order_with_generation_1() -> None:
    core, actions = make(["a", "b", "c"])
    assert actions == [
        StartChild("a", 1, core._children["a"].spec),
        StartChild("b", 1, core._children["b"].spec),
        StartChild("c", 1, core._children["c"].spec),
    ]
    assert [core.child_status(n) for n in "abc"] == [ChildStatus.RUNNING] * 3
    with pytest.raises(RuntimeError):
        core.start(0.0)


def test_duplicate_names_and_bad_specs_are_rejected() -> None:
    with pytest.raises(ValueError):
        make(["a", "a"])
    with pytest.raises(ValueError):
        spec("x", min_backoff=2.0, max_backoff=1.0)
    with pytest.raises(ValueError):
        SupervisorSpec(max_restarts=-1)


# -- strategies -------------------------------------------------------------------------


def test_one_for_one_restarts_only_the_failed_child() -> None:
    core, _ = make(["a", "b", "c"], Strategy.ONE_FOR_ONE)
    actions = core.child_exited("b", 1, EXC, BOOM, 1.0)
    assert actions == [StartChild("b", 2, core._children["b"].spec)]
    assert core.generation("a") == 1 and core.generation("c") == 1


def test_rest_for_one_stops_later_children_in_reverse_then_restarts_in_order() -> None:
    core, _ = make(["a", "b", "c", "d"], Strategy.REST_FOR_ONE)
    actions = core.child_exited("b", 1, EXC, BOOM, 1.0)
    # Sequential stop: only the last child is asked first.
    assert stops(actions) == [("d", 1)]
    assert starts(actions) == []
    assert core.child_status("c") is ChildStatus.RESTARTING
    actions = core.child_exited("d", 1, ExitReason.NORMAL, None, 1.1)
    assert stops(actions) == [("c", 1)]
    actions = core.child_exited("c", 1, ExitReason.NORMAL, None, 1.2)
    assert starts(actions) == [("b", 2), ("c", 2), ("d", 2)]
    assert core.generation("a") == 1


def test_one_for_all_restarts_every_child() -> None:
    core, _ = make(["a", "b", "c"], Strategy.ONE_FOR_ALL)
    actions = drain_stops(core, core.child_exited("b", 1, EXC, BOOM, 1.0), 1.0)
    assert stops(actions) == [("c", 1), ("a", 1)]
    assert starts(actions) == [("a", 2), ("b", 2), ("c", 2)]


def test_group_restart_waits_for_delay_and_for_every_member_to_stop() -> None:
    specs = [spec("a", min_backoff=1.0, max_backoff=1.0), spec("b")]
    core, _ = make(specs, Strategy.ONE_FOR_ALL)
    actions = core.child_exited("a", 1, EXC, BOOM, 1.0)
    sched = [a for a in actions if isinstance(a, ScheduleRestart)]
    assert len(sched) == 1 and sched[0].delay == 1.0 and sched[0].group == ("a", "b")
    assert stops(actions) == [("b", 1)]
    # Timer first: still waiting for b.
    assert core.restart_due(sched[0].token, 2.0) == []
    assert starts(core.child_exited("b", 1, ExitReason.NORMAL, None, 2.5)) == [("a", 2), ("b", 2)]


def test_member_of_pending_group_that_dies_on_its_own_is_not_a_new_failure() -> None:
    core, _ = make(["a", "b", "c"], Strategy.ONE_FOR_ALL, max_restarts=1)
    actions = core.child_exited("a", 1, EXC, BOOM, 1.0)
    assert stops(actions) == [("c", 1)]
    # b crashes while waiting for its turn to be stopped: part of the same restart.
    assert core.child_exited("b", 1, EXC, BOOM, 1.0) == []
    actions = core.child_exited("c", 1, ExitReason.NORMAL, None, 1.0)
    assert starts(actions) == [("a", 2), ("b", 2), ("c", 2)]


def test_rest_for_one_failure_of_earlier_child_merges_pending_restart() -> None:
    specs = [spec("a"), spec("b", min_backoff=5.0, max_backoff=5.0), spec("c")]
    core, _ = make(specs, Strategy.REST_FOR_ONE)
    first = core.child_exited("b", 1, EXC, BOOM, 1.0)
    (sched_b,) = [a for a in first if isinstance(a, ScheduleRestart)]
    assert stops(first) == [("c", 1)]
    # a fails before b's restart is due: one group a, b, c restarted after a's delay (0).
    second = core.child_exited("a", 1, EXC, BOOM, 1.5)
    assert starts(second) == []  # c is still stopping
    third = core.child_exited("c", 1, ExitReason.NORMAL, None, 1.6)
    assert starts(third) == [("a", 2), ("b", 2), ("c", 2)]
    assert core.restart_due(sched_b.token, 6.0) == []  # merged plan's timer is stale


# -- restart types ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("restart", "reason", "restarted"),
    [
        (Restart.PERMANENT, ExitReason.NORMAL, True),
        (Restart.PERMANENT, ExitReason.SHUTDOWN, True),
        (Restart.PERMANENT, ExitReason.EXCEPTION, True),
        (Restart.TRANSIENT, ExitReason.NORMAL, False),
        (Restart.TRANSIENT, ExitReason.SHUTDOWN, False),
        (Restart.TRANSIENT, ExitReason.EXCEPTION, True),
        (Restart.TEMPORARY, ExitReason.NORMAL, False),
        (Restart.TEMPORARY, ExitReason.EXCEPTION, False),
    ],
)
def test_restart_types(restart: Restart, reason: ExitReason, restarted: bool) -> None:
    core, _ = make([spec("a", restart=restart)])
    exc = BOOM if reason is ExitReason.EXCEPTION else None
    actions = core.child_exited("a", 1, reason, exc, 1.0)
    assert (starts(actions) == [("a", 2)]) is restarted
    if not restarted:
        assert actions == []
        expected = None if restart is Restart.TEMPORARY else ChildStatus.STOPPED
        assert core.child_status("a") is expected


def test_temporary_child_in_a_group_is_stopped_and_not_restarted() -> None:
    specs = [spec("a"), spec("t", restart=Restart.TEMPORARY), spec("c")]
    core, _ = make(specs, Strategy.ONE_FOR_ALL)
    actions = drain_stops(core, core.child_exited("a", 1, EXC, BOOM, 1.0), 1.0)
    assert stops(actions) == [("c", 1), ("t", 1)]
    assert starts(actions) == [("a", 2), ("c", 2)]
    assert core.child_status("t") is None


def test_down_transient_child_is_started_with_its_group_as_otp_does() -> None:
    specs = [spec("a"), spec("tr", restart=Restart.TRANSIENT)]
    core, _ = make(specs, Strategy.ONE_FOR_ALL)
    assert core.child_exited("tr", 1, ExitReason.NORMAL, None, 0.5) == []
    actions = drain_stops(core, core.child_exited("a", 1, EXC, BOOM, 1.0), 1.0)
    assert starts(actions) == [("a", 2), ("tr", 2)]


# -- stale notifications ---------------------------------------------------------------


def test_stale_exit_of_an_old_generation_is_ignored() -> None:
    core, _ = make(["a"])
    assert starts(core.child_exited("a", 1, EXC, BOOM, 1.0)) == [("a", 2)]
    assert core.child_exited("a", 1, EXC, BOOM, 1.1) == []  # duplicate / late
    assert core.child_exited("zzz", 1, EXC, BOOM, 1.1) == []
    assert core.generation("a") == 2
    assert core.child_status("a") is ChildStatus.RUNNING


# -- intensity and escalation ------------------------------------------------------------


def test_more_than_max_restarts_within_period_escalates_after_stopping_in_reverse() -> None:
    core, _ = make(["a", "b", "c"], max_restarts=2, period=10.0)
    assert starts(core.child_exited("b", 1, EXC, BOOM, 1.0)) == [("b", 2)]
    assert starts(core.child_exited("b", 2, EXC, BOOM, 2.0)) == [("b", 3)]
    actions = core.child_exited("b", 3, EXC, BOOM, 3.0)  # third within 10 s > 2
    assert core.give_up_cause is not None
    assert stops(actions) == [("c", 1)]  # one at a time, last started first
    assert not any(isinstance(a, Escalate) for a in actions)
    actions = core.child_exited("c", 1, ExitReason.NORMAL, None, 3.1)
    assert stops(actions) == [("a", 1)]
    actions = core.child_exited("a", 1, ExitReason.NORMAL, None, 3.2)
    (esc,) = actions
    assert isinstance(esc, Escalate)
    assert esc.cause.child == "b" and esc.cause.exception is BOOM
    assert esc.cause.restarts == 3 and esc.cause.max_restarts == 2
    assert "'b'" in esc.cause.describe() and "boom" in esc.cause.describe()
    assert core.terminated


def test_restarts_outside_the_period_do_not_count() -> None:
    core, _ = make(["a"], max_restarts=2, period=10.0)
    now = 0.0
    for gen in range(1, 8):  # one failure every 6 s: at most 2 in any 10 s window
        now += 6.0
        assert starts(core.child_exited("a", gen, EXC, BOOM, now)) == [("a", gen + 1)]
    assert core.give_up_cause is None


def test_max_restarts_zero_escalates_on_first_failure() -> None:
    core, _ = make(["a"], max_restarts=0)
    actions = core.child_exited("a", 1, EXC, BOOM, 1.0)
    assert len(actions) == 1 and isinstance(actions[0], Escalate)


def test_normal_exits_of_transient_children_do_not_count_towards_intensity() -> None:
    core, _ = make([spec("t", restart=Restart.TRANSIENT), spec("p")], max_restarts=1)
    assert core.child_exited("t", 1, ExitReason.NORMAL, None, 1.0) == []
    assert starts(core.child_exited("p", 1, EXC, BOOM, 1.0)) == [("p", 2)]
    assert core.give_up_cause is None


# -- backoff ---------------------------------------------------------------------------


def test_backoff_formula() -> None:
    assert backoff_delay(0.1, 10.0, 0.2, 0, 0.0) == 0.1
    assert backoff_delay(0.1, 10.0, 0.2, 3, 0.0) == pytest.approx(0.8)
    assert backoff_delay(0.1, 10.0, 0.2, 3, 0.5) == pytest.approx(0.8 * 1.1)
    assert backoff_delay(0.1, 10.0, 0.2, 20, 0.5) == pytest.approx(10.0 * 1.1)
    assert backoff_delay(0.1, 10.0, 0.0, 5000, 0.9) == 10.0  # no overflow


def test_backoff_delays_follow_the_formula_with_seeded_random() -> None:
    seed_rng = random.Random(42)
    expected_rng = random.Random(42)
    child = spec("a", min_backoff=0.5, max_backoff=3.0, random_factor=0.3, reset_after=100.0)
    core, _ = make([child], max_restarts=100, rnd=seed_rng.random)
    now = 0.0
    delays = []
    for n in range(7):
        gen = core.generation("a")
        now += 0.01
        (sched,) = core.child_exited("a", gen, EXC, BOOM, now)
        assert isinstance(sched, ScheduleRestart)
        assert sched.attempt == n and sched.group == ("a",)
        expected = min(3.0, 0.5 * 2**n) * (1 + expected_rng.random() * 0.3)
        assert sched.delay == pytest.approx(expected)
        delays.append(sched.delay)
        now += sched.delay
        assert starts(core.restart_due(sched.token, now)) == [("a", gen + 1)]
    assert delays[4] >= 3.0 and delays[6] <= 3.0 * 1.3


def test_backoff_resets_after_a_quiet_period() -> None:
    child = spec("a", min_backoff=1.0, max_backoff=60.0, random_factor=0.0, reset_after=30.0)
    core, _ = make([child], max_restarts=100, period=1.0)
    now = 0.0
    for expected in (1.0, 2.0, 4.0):
        now += 1.0
        (sched,) = core.child_exited("a", core.generation("a"), EXC, BOOM, now)
        assert isinstance(sched, ScheduleRestart) and sched.delay == expected
        now += sched.delay
        core.restart_due(sched.token, now)
    assert core.consecutive_restarts("a") == 3
    # Ran 29.9 s: not quiet long enough, backoff keeps growing.
    now += 29.9
    (sched,) = core.child_exited("a", core.generation("a"), EXC, BOOM, now)
    assert isinstance(sched, ScheduleRestart) and sched.delay == 8.0
    now += sched.delay
    core.restart_due(sched.token, now)
    # Ran 30 s after its restart: healthy again, back to min_backoff.
    now += 30.0
    (sched,) = core.child_exited("a", core.generation("a"), EXC, BOOM, now)
    assert isinstance(sched, ScheduleRestart) and sched.delay == 1.0 and sched.attempt == 0


def test_backoff_is_per_child() -> None:
    a = spec("a", min_backoff=1.0, max_backoff=60.0, random_factor=0.0)
    b = spec("b", min_backoff=0.25, max_backoff=60.0, random_factor=0.0)
    core, _ = make([a, b], max_restarts=100)
    (s1,) = core.child_exited("a", 1, EXC, BOOM, 1.0)
    (s2,) = core.child_exited("b", 1, EXC, BOOM, 1.0)
    assert isinstance(s1, ScheduleRestart) and isinstance(s2, ScheduleRestart)
    assert (s1.delay, s2.delay) == (1.0, 0.25)
    assert starts(core.restart_due(s2.token, 1.25)) == [("b", 2)]
    assert starts(core.restart_due(s1.token, 2.0)) == [("a", 2)]


def test_pending_restart_timer_of_unknown_token_is_ignored() -> None:
    core, _ = make(["a"])
    assert core.restart_due(999, 1.0) == []


# -- shutdown --------------------------------------------------------------------------


def test_shutdown_stops_children_one_by_one_in_reverse_start_order() -> None:
    core, _ = make(["a", "b", "c"])
    actions = core.shutdown(1.0)
    assert stops(actions) == [("c", 1)]
    assert core.child_status("a") is ChildStatus.STOPPING
    assert stops(core.child_exited("c", 1, ExitReason.NORMAL, None, 1.1)) == [("b", 1)]
    assert stops(core.child_exited("b", 1, ExitReason.NORMAL, None, 1.2)) == [("a", 1)]
    assert core.child_exited("a", 1, ExitReason.NORMAL, None, 1.3) == [ShutdownComplete(())]
    assert core.terminated
    assert core.shutdown(2.0) == [ShutdownComplete(())]


def test_shutdown_moves_on_after_a_stop_timeout_and_reports_the_child() -> None:
    core, _ = make([spec("a"), spec("hang", shutdown_timeout=2.0), spec("c")])
    actions = core.shutdown(1.0)
    assert actions == [StopChild("c", 1, 5.0)]
    assert core.child_exited("c", 1, ExitReason.NORMAL, None, 1.0) == [StopChild("hang", 1, 2.0)]
    assert core.stop_timed_out("c", 1, 6.0) == []  # c already exited: stale timer
    assert core.stop_timed_out("hang", 1, 3.0) == [StopChild("a", 1, 5.0)]
    assert core.child_exited("a", 1, ExitReason.NORMAL, None, 3.5) == [ShutdownComplete(("hang",))]
    assert core.child_exited("hang", 1, ExitReason.NORMAL, None, 60.0) == []  # late


def test_shutdown_cancels_pending_restarts_and_ignores_their_timers() -> None:
    core, _ = make([spec("a", min_backoff=1.0, max_backoff=1.0), spec("b")])
    (sched,) = core.child_exited("a", 1, EXC, BOOM, 1.0)
    assert isinstance(sched, ScheduleRestart)
    actions = core.shutdown(1.5)
    assert actions == [StopChild("b", 1, 5.0)]
    assert core.restart_due(sched.token, 2.0) == []
    assert core.child_exited("b", 1, ExitReason.NORMAL, None, 2.1) == [ShutdownComplete(())]


def test_exit_during_shutdown_is_not_restarted() -> None:
    core, _ = make(["a", "b"])
    core.shutdown(1.0)
    # a crashes while waiting for its turn: no restart, no new stop for it.
    assert core.child_exited("a", 1, EXC, BOOM, 1.0) == []
    assert core.child_exited("b", 1, ExitReason.NORMAL, None, 1.1) == [ShutdownComplete(())]


def test_group_restart_stop_timeout_restarts_anyway() -> None:
    core, _ = make(["a", "b"], Strategy.ONE_FOR_ALL)
    assert stops(core.child_exited("a", 1, EXC, BOOM, 1.0)) == [("b", 1)]
    assert starts(core.stop_timed_out("b", 1, 6.0)) == [("a", 2), ("b", 2)]
    assert core.child_exited("b", 1, ExitReason.NORMAL, None, 7.0) == []  # stale


def test_add_child_starts_it_last_in_order() -> None:
    core, _ = make(["a"], Strategy.REST_FOR_ONE)
    (start,) = core.add_child(spec("z"), 1.0)
    assert isinstance(start, StartChild) and (start.name, start.generation) == ("z", 1)
    assert core.children() == ["a", "z"]
    assert stops(core.child_exited("a", 1, EXC, BOOM, 2.0)) == [("z", 1)]
    with pytest.raises(ValueError):
        core.add_child(spec("a"), 2.0)


def test_start_failure_counts_as_an_exception_exit() -> None:
    core, _ = make(["a"], max_restarts=1)
    assert starts(core.child_start_failed("a", 1, BOOM, 0.0)) == [("a", 2)]
    (esc,) = core.child_start_failed("a", 2, BOOM, 0.1)
    assert isinstance(esc, Escalate) and esc.cause.reason is ExitReason.EXCEPTION
