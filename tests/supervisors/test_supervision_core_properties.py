"""Property test: random event sequences never break the supervisor's invariants.

A simulated environment plays the children and the timers. Whatever happens (crashes, stale
notices, late timers, hung children, shutdown at any moment), the core must:

* start an incarnation only when the previous one has exited or was abandoned after a stop
  timeout, with generations increasing by one;
* have at most one ``StopChild`` outstanding, and only for a live incarnation;
* finish a shutdown or escalation exactly once, with no child left alive but the abandoned.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_actors.supervisors.core import (
    Action,
    ChildSpec,
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
)

NAMES = ["a", "b", "c", "d"]


@dataclass
class World:
    core: SupervisorCore
    now: float = 0.0
    alive: dict[str, int] = field(default_factory=dict)  # name -> live generation
    abandoned: set[tuple[str, int]] = field(default_factory=set)
    last_gen: dict[str, int] = field(default_factory=dict)
    stopping: tuple[str, int] | None = None
    timers: list[tuple[float, int]] = field(default_factory=list)
    finished: list[Action] = field(default_factory=list)

    def apply(self, actions: list[Action]) -> None:
        for action in actions:
            assert not self.finished, f"action after the end: {action}"
            if isinstance(action, StartChild):
                assert action.name not in self.alive, f"{action.name} started twice"
                assert action.generation == self.last_gen.get(action.name, 0) + 1
                self.last_gen[action.name] = action.generation
                self.alive[action.name] = action.generation
            elif isinstance(action, StopChild):
                assert self.stopping is None, "two stops outstanding"
                assert self.alive.get(action.name) == action.generation
                self.stopping = (action.name, action.generation)
            elif isinstance(action, ScheduleRestart):
                assert action.delay > 0
                self.timers.append((self.now + action.delay, action.token))
            elif isinstance(action, (Escalate, ShutdownComplete)):
                assert self.stopping is None
                assert not self.alive, f"still alive at the end: {self.alive}"
                self.finished.append(action)

    def exit(self, name: str, reason: ExitReason) -> None:
        gen = self.alive.pop(name)
        if self.stopping == (name, gen):
            self.stopping = None
        self.apply(self.core.child_exited(name, gen, reason, None, self.now))


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Strategy, list[ChildSpec], int, list[tuple[int, int]]]:
    strategy = draw(st.sampled_from(list(Strategy)))
    count = draw(st.integers(1, len(NAMES)))
    specs = [
        ChildSpec(
            NAMES[i],
            factory=lambda ctx: None,
            restart=draw(st.sampled_from(list(Restart))),
            min_backoff=draw(st.sampled_from([0.0, 0.5])),
            max_backoff=2.0,
            random_factor=0.5,
            reset_after=3.0,
            shutdown_timeout=1.0,
        )
        for i in range(count)
    ]
    max_restarts = draw(st.integers(0, 4))
    steps = draw(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 99)), max_size=60))
    return strategy, specs, max_restarts, steps


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.integers(0, 2**32 - 1))
def test_invariants_hold_for_any_sequence(
    scenario: tuple[Strategy, list[ChildSpec], int, list[tuple[int, int]]], seed: int
) -> None:
    strategy, specs, max_restarts, steps = scenario
    period = 5.0
    core = SupervisorCore(
        "sup", SupervisorSpec(strategy, max_restarts, period), specs, random.Random(seed).random
    )
    world = World(core)
    world.apply(core.start(0.0))
    shutdown_requested = False
    for op, pick in steps:
        if world.finished:
            break
        world.now += 0.1 * (pick % 7)
        live = sorted(world.alive)
        if op <= 2 and live:  # a live child exits on its own
            name = live[pick % len(live)]
            world.exit(name, [ExitReason.EXCEPTION, ExitReason.NORMAL, ExitReason.EXCEPTION][op])
        elif op == 3 and world.timers:  # the earliest timer fires
            world.timers.sort()
            due, token = world.timers.pop(0)
            world.now = max(world.now, due)
            world.apply(core.restart_due(token, world.now))
        elif op == 4 and world.stopping is not None:  # the stopping child obeys
            world.exit(world.stopping[0], ExitReason.NORMAL)
        elif op == 5 and world.stopping is not None:  # ... or hangs past its timeout
            name, gen = world.stopping
            world.now += 1.0
            world.stopping = None
            world.alive.pop(name)
            world.abandoned.add((name, gen))
            world.apply(core.stop_timed_out(name, gen, world.now))
        elif op == 6:  # a stale notice: an old or abandoned generation
            name = NAMES[pick % len(specs)]
            old = world.last_gen.get(name, 0) - 1 - pick % 2
            if (name, old + 1) in world.abandoned:
                old += 1
            assert core.child_exited(name, old, ExitReason.EXCEPTION, None, world.now) == []
        elif op == 7 and not shutdown_requested:
            shutdown_requested = True
            world.apply(core.shutdown(world.now))
    # Drain: request shutdown, let every stop succeed, fire every timer.
    if not world.finished:
        world.apply(core.shutdown(world.now))
    for _ in range(100):
        if world.finished:
            break
        if world.stopping is not None:
            world.exit(world.stopping[0], ExitReason.NORMAL)
        elif world.timers:
            world.timers.sort()
            due, token = world.timers.pop(0)
            world.apply(core.restart_due(token, max(world.now, due)))
    assert len(world.finished) == 1
    assert core.terminated
    assert not world.alive
