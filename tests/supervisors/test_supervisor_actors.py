"""The pykka shell: real actors supervised, restarted, escalated, shut down, faulted.

Timers run on a ManualScheduler wherever a restart delay matters, so the tests advance time
instead of sleeping; waits on other threads are bounded and assert behaviour, not timing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pykka
import pytest

from kafka_actors.clock import ManualClock, ManualScheduler, ThreadScheduler
from kafka_actors.supervisors.core import (
    ChildSpec,
    ChildStatus,
    ExitReason,
    Restart,
    Strategy,
    SupervisorSpec,
)
from kafka_actors.supervisors.errors import (
    ChildRestartingError,
    ChildTimeoutError,
    InjectedFault,
    SupervisorEscalation,
    SupervisorFatalError,
)
from kafka_actors.supervisors.faults import FaultInjector
from kafka_actors.supervisors.supervisor import (
    ChildContext,
    ChildExited,
    ChildTable,
    SupervisedActor,
    Supervision,
    Supervisor,
    SupervisorTree,
    TreeStatus,
    start_tree,
)
from kafka_actors.testing import capture_logs

WAIT = 15.0


class Events:
    """A thread-safe event log tests can wait on."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.items: list[tuple[Any, ...]] = []

    def add(self, *item: Any) -> None:
        with self._cond:
            self.items.append(item)
            self._cond.notify_all()

    def wait_for(self, pred: Callable[[list[tuple[Any, ...]]], bool]) -> list[tuple[Any, ...]]:
        with self._cond:
            assert self._cond.wait_for(lambda: pred(self.items), timeout=WAIT), self.items
            return list(self.items)

    def wait_item(self, *item: Any) -> None:
        self.wait_for(lambda items: item in items)

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        with self._cond:
            return [i for i in self.items if i[0] == kind]


def wait_until(pred: Callable[[], bool], what: str = "") -> None:
    deadline = time.monotonic() + WAIT
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


class Worker(SupervisedActor):
    """Logs its lifecycle; 'crash' by tell fails it, 'ping' answers (name, generation)."""

    def __init__(
        self,
        context: ChildContext,
        events: Events,
        fail_start: Callable[[int], bool] | None = None,
        hang_on_stop: threading.Event | None = None,
        block: threading.Event | None = None,
    ) -> None:
        super().__init__(context=context)
        self.events = events
        self.fail_start = fail_start
        self.hang_on_stop = hang_on_stop
        self.block = block

    def on_start(self) -> None:
        self.events.add("start", self.supervised_name, self.generation)
        if self.fail_start is not None and self.fail_start(self.generation):
            raise RuntimeError(f"{self.supervised_name} cannot start")

    def on_receive(self, message: Any) -> Any:
        if message == "crash":
            raise RuntimeError(f"{self.supervised_name} crashed")
        if message == "block" and self.block is not None:
            self.block.wait(WAIT)
            return "unblocked"
        if message == "ping":
            return (self.supervised_name, self.generation)
        return None

    def on_stop(self) -> None:
        self.events.add("stop", self.supervised_name, self.generation)
        if self.hang_on_stop is not None:
            self.hang_on_stop.wait(WAIT)

    def on_failure(self, *_exc: Any) -> None:
        self.events.add("failure", self.supervised_name, self.generation)


def worker(name: str, events: Events, **kw: Any) -> ChildSpec:
    opts = {k: kw.pop(k) for k in ("fail_start", "hang_on_stop", "block") if k in kw}
    kw.setdefault("min_backoff", 1.0)
    kw.setdefault("max_backoff", 8.0)
    kw.setdefault("random_factor", 0.0)
    return ChildSpec(name, lambda ctx: Worker.start(ctx, events, **opts), **kw)


@pytest.fixture(autouse=True)
def _stop_this_tests_actors() -> Iterator[None]:
    """Stop the actors a test started (newest first), leaving any others alone."""
    before = set(pykka.ActorRegistry.get_all())
    yield
    for ref in reversed(pykka.ActorRegistry.get_all()):
        if ref not in before:
            try:
                ref.stop(block=True, timeout=WAIT)
            except pykka.Timeout:
                pass


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def tree_of(
    children: list[ChildSpec],
    clock: ManualClock,
    strategy: Strategy = Strategy.ONE_FOR_ONE,
    max_restarts: int = 5,
    **kw: Any,
) -> SupervisorTree:
    scheduler = clock.scheduler()
    tree = start_tree(
        SupervisorSpec(strategy=strategy, max_restarts=max_restarts, period=60.0),
        children,
        clock=clock,
        scheduler=scheduler,
        **kw,
    )
    _schedulers[id(tree)] = scheduler
    return tree


_schedulers: dict[int, ManualScheduler] = {}


def advance_when_timer_set(tree: SupervisorTree, clock: ManualClock, seconds: float) -> None:
    """Wait until the root supervisor has set a timer (a restart), then move time on."""
    scheduler = _schedulers[id(tree)]
    wait_until(lambda: scheduler.pending() > 0, "a timer to be set")
    clock.advance(seconds)


def running(tree: SupervisorTree, name: str, generation: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return bool(tree.ask(name, "ping", WAIT) == (name, generation))
        except ChildRestartingError:
            return False

    return check


# -- pykka facts the shell relies on ------------------------------------------------------


class _Plain(pykka.ThreadingActor):
    def __init__(self, events: Events) -> None:
        super().__init__()
        self.events = events

    def on_start(self) -> None:
        raise RuntimeError("no start")

    def on_stop(self) -> None:
        self.events.add("on_stop")

    def on_failure(self, *_exc: Any) -> None:
        self.events.add("on_failure")


def test_pykka_on_start_failure_runs_neither_on_failure_nor_on_stop() -> None:
    events = Events()
    ref = _Plain.start(events)
    wait_until(lambda: not ref.is_alive(), "actor death")
    time.sleep(0.05)
    assert events.items == []


# -- SupervisedActor exit notices ---------------------------------------------------------


class Collector(pykka.ThreadingActor):
    def __init__(self, events: Events) -> None:
        super().__init__()
        self.events = events

    def on_receive(self, message: Any) -> None:
        self.events.add("msg", message)


def start_child(
    events: Events, parent: pykka.ActorRef[Any], faults: FaultInjector | None = None, **kw: Any
) -> pykka.ActorRef[Worker]:
    ctx = ChildContext("w", 7, parent, TreeStatus(), faults)
    return Worker.start(ctx, events, **kw)


def exits(events: Events) -> list[ChildExited]:
    return [i[1] for i in events.of("msg") if isinstance(i[1], ChildExited)]


def test_child_crash_by_tell_notifies_exception_once() -> None:
    events = Events()
    parent = Collector.start(events)
    ref = start_child(events, parent)
    ref.tell("crash")
    events.wait_for(lambda items: any(i[0] == "msg" for i in items))
    time.sleep(0.05)
    (exit_,) = exits(events)
    assert (exit_.name, exit_.generation, exit_.reason) == ("w", 7, ExitReason.EXCEPTION)
    assert isinstance(exit_.exception, RuntimeError)
    assert ("failure", "w", 7) in events.items


def test_child_stopped_from_outside_notifies_normal() -> None:
    events = Events()
    parent = Collector.start(events)
    ref = start_child(events, parent)
    ref.stop()
    events.wait_for(lambda items: any(i[0] == "msg" for i in items))
    (exit_,) = exits(events)
    assert exit_.reason is ExitReason.NORMAL and exit_.exception is None


def test_child_failing_in_on_start_notifies_exception() -> None:
    events = Events()
    parent = Collector.start(events)
    start_child(events, parent, fail_start=lambda gen: True)
    events.wait_for(lambda items: any(i[0] == "msg" for i in items))
    (exit_,) = exits(events)
    assert exit_.reason is ExitReason.EXCEPTION and "cannot start" in str(exit_.exception)


def test_exception_answered_to_an_ask_does_not_kill_the_child() -> None:
    events = Events()
    parent = Collector.start(events)
    ref = start_child(events, parent)
    with pytest.raises(RuntimeError):
        ref.ask("crash", timeout=WAIT)
    assert ref.ask("ping", timeout=WAIT) == ("w", 7)
    assert exits(events) == []


def test_injected_crash_kills_the_child_even_through_ask() -> None:
    events = Events()
    parent = Collector.start(events)
    faults = FaultInjector()
    faults.crash("w", when=lambda m: m == "ping")
    ref = start_child(events, parent, faults)
    with pytest.raises(InjectedFault):
        ref.ask("ping", timeout=WAIT)
    events.wait_for(lambda items: any(i[0] == "msg" for i in items))
    (exit_,) = exits(events)
    assert exit_.reason is ExitReason.EXCEPTION and isinstance(exit_.exception, InjectedFault)
    assert ("failure", "w", 7) in events.items  # on_failure ran for the ask path too
    assert not ref.is_alive()


def test_injected_crash_through_tell_runs_on_failure_once() -> None:
    events = Events()
    parent = Collector.start(events)
    faults = FaultInjector()
    faults.crash("w")
    ref = start_child(events, parent, faults)
    ref.tell("anything")
    events.wait_for(lambda items: any(i[0] == "msg" for i in items))
    (exit_,) = exits(events)
    assert isinstance(exit_.exception, InjectedFault) and exit_.exception.message == "anything"
    assert events.of("failure") == [("failure", "w", 7)]


# -- restarts -----------------------------------------------------------------------------


def test_one_for_one_restarts_the_crashed_child_after_its_backoff(clock: ManualClock) -> None:
    events = Events()
    tree = tree_of([worker("a", events), worker("b", events)], clock)
    wait_until(running(tree, "b", 1), "b started")
    tree.child("b").tell("crash")
    advance_when_timer_set(tree, clock, 0.999)  # backoff is 1 s: not yet
    assert tree.children.status("b") is ChildStatus.RESTARTING
    with pytest.raises(ChildRestartingError):
        tree.ask("b", "ping", WAIT)
    clock.advance(0.001)
    wait_until(running(tree, "b", 2), "b restarted")
    assert tree.ask("a", "ping", WAIT) == ("a", 1)
    assert [i for i in events.of("start") if i[1] == "a"] == [("start", "a", 1)]


def test_rest_for_one_real_actors_stop_in_reverse_and_restart_in_order(
    clock: ManualClock,
) -> None:
    events = Events()
    names = ["a", "b", "c", "d"]
    tree = tree_of([worker(n, events) for n in names], clock, Strategy.REST_FOR_ONE)
    for n in names:
        wait_until(running(tree, n, 1), n)
    tree.child("b").tell("crash")
    events.wait_item("stop", "c", 1)
    assert [i[1] for i in events.of("stop")] == ["d", "c"]
    advance_when_timer_set(tree, clock, 1.0)
    for n in ["b", "c", "d"]:
        wait_until(running(tree, n, 2), n)
    starts = [i for i in events.of("start") if i[2] == 2]
    assert [i[1] for i in starts] == ["b", "c", "d"]
    assert tree.ask("a", "ping", WAIT) == ("a", 1)


def test_one_for_all_restarts_every_child(clock: ManualClock) -> None:
    events = Events()
    tree = tree_of([worker(n, events) for n in "xyz"], clock, Strategy.ONE_FOR_ALL)
    for n in "xyz":
        wait_until(running(tree, n, 1), n)
    tree.child("y").tell("crash")
    events.wait_item("stop", "x", 1)
    assert [i[1] for i in events.of("stop")] == ["z", "x"]
    advance_when_timer_set(tree, clock, 1.0)
    for n in "xyz":
        wait_until(running(tree, n, 2), n)


def test_transient_child_stopped_from_outside_stays_down_permanent_comes_back(
    clock: ManualClock,
) -> None:
    events = Events()
    tree = tree_of([worker("p", events), worker("t", events, restart=Restart.TRANSIENT)], clock)
    wait_until(running(tree, "p", 1), "p")
    wait_until(running(tree, "t", 1), "t")
    pykka.ActorRegistry.get_by_class(Worker)  # sanity: registry reachable
    for name in ("p", "t"):
        ref, _gen = tree.children.current(name)
        ref.stop()
    wait_until(lambda: tree.children.status("t") is ChildStatus.STOPPED, "t stopped")
    advance_when_timer_set(tree, clock, 1.0)
    wait_until(running(tree, "p", 2), "p restarted")
    assert tree.children.status("t") is ChildStatus.STOPPED
    with pytest.raises(ChildRestartingError):
        tree.ask("t", "ping", WAIT)


def test_child_failing_in_on_start_is_restarted_until_it_starts(clock: ManualClock) -> None:
    events = Events()
    tree = tree_of([worker("s", events, fail_start=lambda gen: gen < 3)], clock)
    events.wait_item("start", "s", 1)
    advance_when_timer_set(tree, clock, 1.0)  # attempt 0: 1 s
    events.wait_item("start", "s", 2)
    advance_when_timer_set(tree, clock, 1.9)  # attempt 1: 2 s
    assert _schedulers[id(tree)].pending() == 1  # not yet due
    clock.advance(0.1)
    wait_until(running(tree, "s", 3), "s healthy")


def test_factory_that_raises_counts_as_failed_start(clock: ManualClock) -> None:
    calls: list[int] = []
    events = Events()

    def factory(ctx: ChildContext) -> pykka.ActorRef[Any]:
        calls.append(ctx.generation)
        if ctx.generation == 1:
            raise OSError("cannot build")
        return Worker.start(ctx, events)

    tree = tree_of([ChildSpec("f", factory, min_backoff=1.0, random_factor=0.0)], clock)
    advance_when_timer_set(tree, clock, 1.0)
    wait_until(running(tree, "f", 2), "f")
    assert calls == [1, 2]


def test_factory_must_return_a_supervised_actor(clock: ManualClock) -> None:
    events = Events()
    tree = tree_of(
        [ChildSpec("bad", lambda ctx: Collector.start(events), min_backoff=1.0)],
        clock,
        max_restarts=0,
    )
    wait_until(lambda: tree.fatal_error is not None, "fatal")
    assert isinstance(tree.fatal_error, SupervisorFatalError)
    assert "TypeError" in str(tree.fatal_error)


def test_stale_exit_notice_is_ignored(clock: ManualClock) -> None:
    events = Events()
    tree = tree_of([worker("a", events)], clock)
    wait_until(running(tree, "a", 1), "a")
    tree.child("a").tell("crash")
    advance_when_timer_set(tree, clock, 1.0)
    wait_until(running(tree, "a", 2), "a gen 2")
    # A late duplicate of generation 1's notice must not kill or restart generation 2.
    tree.ref.tell(ChildExited("a", 1, ExitReason.EXCEPTION, RuntimeError("old")))
    tree.ref.tell(ChildExited("nobody", 1, ExitReason.EXCEPTION, None))
    clock.advance(10.0)
    assert tree.ask("a", "ping", WAIT) == ("a", 2)
    assert tree.children.status("a") is ChildStatus.RUNNING
    assert len(events.of("start")) == 2


def test_injected_crash_twice_then_healthy(clock: ManualClock) -> None:
    events = Events()
    faults = FaultInjector()
    tree = tree_of([worker("w", events)], clock, faults=faults)
    wait_until(running(tree, "w", 1), "w")
    faults.crash("w", when=lambda m: m == "crash-me", times=2)
    for gen in (1, 2):
        with pytest.raises(ChildRestartingError) as info:
            tree.ask("w", "crash-me", WAIT)
        assert isinstance(info.value.__cause__, InjectedFault)
        advance_when_timer_set(tree, clock, 8.0)
        wait_until(running(tree, "w", gen + 1), "restarted")
    assert tree.ask("w", "crash-me", WAIT) is None  # healthy now: handled normally
    assert tree.ask("w", "ping", WAIT) == ("w", 3)
    assert faults.pending() == 0


# -- escalation and the fatal error --------------------------------------------------------


def sub_supervisor(
    name: str, children: list[ChildSpec], clock: ManualClock, max_restarts: int, **kw: Any
) -> ChildSpec:
    scheduler = clock.scheduler()
    spec = SupervisorSpec(max_restarts=max_restarts, period=60.0)
    kw.setdefault("random_factor", 0.0)
    return ChildSpec(
        name,
        lambda ctx: Supervisor.start(spec, children, context=ctx, clock=clock, scheduler=scheduler),
        **kw,
    )


def test_nested_escalation_reaches_the_root_which_records_the_fatal_cause(
    clock: ManualClock,
) -> None:
    events = Events()
    fatal_seen: list[SupervisorFatalError] = []
    sub = sub_supervisor("sub", [worker("x", events), worker("y", events)], clock, 1)
    tree = tree_of(
        [worker("first", events), sub, worker("last", events)],
        clock,
        max_restarts=0,
        on_fatal=fatal_seen.append,
    )
    wait_until(running(tree, "first", 1), "first")
    wait_until(running(tree, "last", 1), "last")
    events.wait_item("start", "y", 1)
    sub_ref, _ = tree.children.current("sub")
    sub_table = sub_ref.proxy().supervision.get(timeout=WAIT).table
    wait_until(lambda: sub_table.status("x") is ChildStatus.RUNNING, "x running")
    sub_table.tell("x", "crash")  # restart 1 of 1: fine
    wait_until(lambda: sub_table.status("x") is ChildStatus.RESTARTING, "x restarting")
    clock.advance(1.0)
    events.wait_item("start", "x", 2)
    wait_until(lambda: sub_table.status("x") is ChildStatus.RUNNING, "x running")
    sub_table.tell("x", "crash")  # second within the period: sub gives up
    wait_until(lambda: tree.fatal_error is not None, "fatal")
    error = tree.fatal_error
    assert error is not None and error.cause is not None
    assert error.cause.child == "sub"
    escalation = error.cause.exception
    assert isinstance(escalation, SupervisorEscalation) and escalation.cause is not None
    assert escalation.cause.child == "x"
    assert "'sub'" in str(error) and "'x'" in str(error)
    assert fatal_seen == [error]
    # Everything stopped: the sub's y before the sub died, then root's last before first.
    wait_until(lambda: not tree.ref.is_alive(), "root stopped")
    stops = [i[1] for i in events.of("stop")]
    assert stops.index("y") < stops.index("last") < stops.index("first")
    with pytest.raises(SupervisorFatalError):
        tree.ask("first", "ping", WAIT)
    with pytest.raises(SupervisorFatalError):
        tree.raise_if_fatal()
    assert tree.shutdown(WAIT).completed


def test_parent_restarts_an_escalating_child_supervisor(clock: ManualClock) -> None:
    events = Events()
    sub = sub_supervisor("sub", [worker("x", events)], clock, 0, min_backoff=2.0)
    tree = tree_of([sub], clock, max_restarts=3)
    events.wait_item("start", "x", 1)
    wait_until(lambda: tree.children.status("sub") is ChildStatus.RUNNING, "sub running")
    sub_ref, _ = tree.children.current("sub")
    sub_table = sub_ref.proxy().supervision.get(timeout=WAIT).table
    wait_until(lambda: sub_table.status("x") is ChildStatus.RUNNING, "x running")
    sub_table.tell("x", "crash")
    wait_until(lambda: tree.children.status("sub") is ChildStatus.RESTARTING, "sub restarting")
    assert tree.fatal_error is None
    advance_when_timer_set(tree, clock, 2.0)
    wait_until(lambda: tree.children.status("sub") is ChildStatus.RUNNING, "sub back")
    # A fresh sub supervisor starts its own children from generation 1 again.
    events.wait_for(lambda items: items.count(("start", "x", 1)) == 2)
    assert tree.fatal_error is None


# -- callers never hang --------------------------------------------------------------------


def test_ask_times_out_with_a_retriable_error_when_the_child_is_stuck(
    clock: ManualClock,
) -> None:
    events = Events()
    gate = threading.Event()
    tree = tree_of([worker("w", events, block=gate)], clock)
    wait_until(running(tree, "w", 1), "w")
    tree.child("w").tell("block")
    try:
        with pytest.raises(ChildTimeoutError) as info:
            tree.ask("w", "ping", 0.05)
        assert info.value.retriable
    finally:
        gate.set()
    assert tree.ask("w", "ping", WAIT) == ("w", 1)


def test_waiting_caller_is_released_when_its_child_is_abandoned() -> None:
    events = Events()
    gate = threading.Event()
    hang = threading.Event()
    scheduler = ThreadScheduler()
    try:
        tree = start_tree(
            SupervisorSpec(),
            [worker("w", events, block=gate, hang_on_stop=hang, shutdown_timeout=0.1)],
            scheduler=scheduler,
        )
        wait_until(running(tree, "w", 1), "w")
        tree.child("w").tell("block")  # stuck until gate opens
        outcome: list[BaseException | object] = []

        def caller() -> None:
            try:
                outcome.append(tree.ask("w", "ping", WAIT))
            except Exception as exc:
                outcome.append(exc)

        t = threading.Thread(target=caller)
        t.start()
        time.sleep(0.05)  # let the ask reach the inbox
        result: list[object] = []
        shutdown = threading.Thread(target=lambda: result.append(tree.shutdown(WAIT)))
        shutdown.start()
        t.join(WAIT)
        assert not t.is_alive(), "caller hung"
        assert len(outcome) == 1 and isinstance(outcome[0], ChildRestartingError)
        assert not gate.is_set()  # released by the supervisor, not by the child
        gate.set()
        hang.set()
        shutdown.join(WAIT)
        assert result and result[0].not_stopped == ("w",)  # type: ignore[attr-defined]
    finally:
        gate.set()
        hang.set()
        scheduler.close()


# -- shutdown ---------------------------------------------------------------------------


def test_shutdown_stops_children_in_reverse_start_order() -> None:
    events = Events()
    names = ["a", "b", "c", "d"]
    tree = start_tree(SupervisorSpec(), [worker(n, events) for n in names])
    for n in names:
        wait_until(running(tree, n, 1), n)
    result = tree.shutdown(WAIT)
    assert result.completed and result.not_stopped == ()
    assert [i[1] for i in events.of("stop")] == ["d", "c", "b", "a"]
    assert not tree.ref.is_alive()
    assert not any(r.is_alive() for r in pykka.ActorRegistry.get_by_class(Worker))


def test_shutdown_reports_a_child_hanging_in_on_stop_and_completes() -> None:
    events = Events()
    hang = threading.Event()
    scheduler = ThreadScheduler()
    try:
        tree = start_tree(
            SupervisorSpec(),
            [
                worker("a", events),
                worker("hang", events, hang_on_stop=hang, shutdown_timeout=0.2),
                worker("c", events),
            ],
            scheduler=scheduler,
        )
        for n in ("a", "hang", "c"):
            wait_until(running(tree, n, 1), n)
        result = tree.shutdown(WAIT)
        assert not hang.is_set()
        assert result.completed and result.not_stopped == ("hang",)
        assert [i[1] for i in events.of("stop")] == ["c", "hang", "a"]
        assert not tree.ref.is_alive()
    finally:
        hang.set()
        scheduler.close()


def test_stopping_the_supervisor_directly_stops_children_with_timeouts() -> None:
    events = Events()
    hang = threading.Event()
    try:
        tree = start_tree(
            SupervisorSpec(),
            [worker("a", events), worker("hang", events, hang_on_stop=hang, shutdown_timeout=0.2)],
        )
        for n in ("a", "hang"):
            wait_until(running(tree, n, 1), n)
        assert tree.ref.stop(block=True, timeout=WAIT)
        assert [i[1] for i in events.of("stop")] == ["hang", "a"]
        assert not hang.is_set()
    finally:
        hang.set()


# -- the Supervision helper inside another actor (as the NetworkActor uses it) -------------


class Hub(SupervisedActor):
    """An actor with its own work that also supervises children."""

    def __init__(self, children: list[ChildSpec], clock: ManualClock) -> None:
        super().__init__(name="hub")
        self.supervision = Supervision(
            self,
            SupervisorSpec(max_restarts=5, period=60.0),
            children,
            clock=clock,
            scheduler=clock.scheduler(),
        )
        self.handled = 0

    def on_start(self) -> None:
        self.supervision.start()

    def on_receive(self, message: Any) -> Any:
        if self.supervision.handle(message):
            return None
        self.handled += 1
        return ("hub", self.handled)

    def on_stop(self) -> None:
        self.supervision.stop_children_now()


def test_supervision_helper_in_a_custom_actor(clock: ManualClock) -> None:
    events = Events()
    hub = Hub.start([worker("m1", events), worker("m2", events)], clock)
    table = hub.proxy().supervision.get(timeout=WAIT).table
    wait_until(lambda: table.status("m2") is ChildStatus.RUNNING, "m2")
    assert hub.ask("anything", timeout=WAIT) == ("hub", 1)
    table.tell("m1", "crash")
    wait_until(lambda: table.status("m1") is ChildStatus.RESTARTING, "m1 restarting")
    assert hub.ask("more", timeout=WAIT) == ("hub", 2)
    clock.advance(1.0)
    wait_until(lambda: table.status("m1") is ChildStatus.RUNNING, "m1 back")
    assert table.ask("m1", "ping", WAIT) == ("m1", 2)
    hub.stop()
    assert [i[1] for i in events.of("stop")] == ["m2", "m1"]


# -- the root itself failing, dynamic children, a table shared across restarts --------------


def test_root_crash_stops_children_and_is_fatal(clock: ManualClock) -> None:
    events = Events()
    faults = FaultInjector()
    tree = tree_of([worker("a", events), worker("b", events)], clock, faults=faults)
    wait_until(running(tree, "b", 1), "b")
    faults.crash("root", when=lambda m: m == "poke")
    tree.ref.tell("poke")
    wait_until(lambda: tree.fatal_error is not None, "fatal")
    assert "crashed" in str(tree.fatal_error) and "InjectedFault" in str(tree.fatal_error)
    events.wait_for(lambda items: len([i for i in items if i[0] == "stop"]) == 2)
    assert [i[1] for i in events.of("stop")] == ["b", "a"]
    with pytest.raises(SupervisorFatalError):
        tree.ask("a", "ping", WAIT)


def test_add_child_at_run_time(clock: ManualClock) -> None:
    events = Events()
    tree = tree_of([worker("a", events)], clock)
    wait_until(running(tree, "a", 1), "a")
    tree.add_child(worker("late", events))
    wait_until(running(tree, "late", 1), "late")
    tree.add_child(worker("late", events))  # duplicate: refused, supervisor unharmed
    tree.add_child(worker("b", events))
    wait_until(running(tree, "b", 1), "b")
    result = tree.shutdown(WAIT)
    assert result.completed
    assert [i[1] for i in events.of("stop")] == ["b", "late", "a"]


def test_table_shared_across_restarts_of_a_nested_supervisor(clock: ManualClock) -> None:
    events = Events()
    shared = ChildTable("sub", TreeStatus())
    spec = SupervisorSpec(max_restarts=0, period=60.0)
    scheduler = clock.scheduler()
    sub = ChildSpec(
        "sub",
        lambda ctx: Supervisor.start(
            spec,
            [worker("m", events)],
            context=ctx,
            clock=clock,
            scheduler=scheduler,
            table=shared,
        ),
        min_backoff=1.0,
        random_factor=0.0,
    )
    tree = tree_of([sub], clock, max_restarts=3)
    wait_until(lambda: tree.children.status("sub") is ChildStatus.RUNNING, "sub")
    assert shared.tree is tree.tree  # rebound to the tree it lives in
    wait_until(lambda: shared.status("m") is ChildStatus.RUNNING, "m")
    first_ref, _ = shared.current("m")
    shared.tell("m", "crash")  # sub gives up at once; root restarts sub after 1 s
    wait_until(lambda: tree.children.status("sub") is ChildStatus.RESTARTING, "sub restarting")
    with pytest.raises(ChildRestartingError):
        shared.ask("m", "ping", WAIT)
    advance_when_timer_set(tree, clock, 1.0)
    wait_until(lambda: shared.status("m") is ChildStatus.RUNNING, "m back")
    assert shared.ask("m", "ping", WAIT) == ("m", 1)
    assert shared.current("m")[0] is not first_ref


def test_supervisor_events_are_logged_with_bound_names(clock: ManualClock) -> None:
    events = Events()
    with capture_logs() as logs:
        tree = tree_of([worker("w", events)], clock, max_restarts=1)
        wait_until(running(tree, "w", 1), "w")
        tree.child("w").tell("crash")
        advance_when_timer_set(tree, clock, 1.0)
        wait_until(running(tree, "w", 2), "w restarted")
        tree.child("w").tell("crash")
        wait_until(lambda: tree.fatal_error is not None, "fatal")
        wait_until(lambda: not tree.ref.is_alive(), "root stopped")
    by_event = {(e["event"], e.get("child")): e for e in logs}
    assert by_event[("child_started", "w")]["supervisor"] == "root"
    exited = by_event[("child_exited", "w")]
    assert exited["reason"] == "exception" and "crashed" in exited["error"]
    restarting = by_event[("child_restarting", "w")]
    assert restarting["delay"] == 1.0 and restarting["attempt"] == 0
    gave_up = by_event[("supervisor_gave_up", "w")]
    assert gave_up["log_level"] == "error" and gave_up["fatal"] is True
