"""The supervision rules as a pure state machine (no threads, no actors, no clock of its own).

Owns: child specs, restart strategies (one_for_one / rest_for_one / one_for_all), restart
types (permanent / transient / temporary), restart intensity, escalation, ordered shutdown and
the per-child restart backoff. May touch: nothing; every input carries ``now`` (monotonic
seconds) and randomness comes from the injected ``random`` callable. The actor shell
(:mod:`kafka_actors.supervisors.supervisor`) feeds it events and carries out the actions.

Rules (OTP's, with Akka BackoffSupervisor's delay):

* A child exit is *expected* if the supervisor asked for it (a restart group or shutdown) and
  *stale* if it names an older generation; both lead to no decision. Otherwise: permanent
  children are always restarted, transient ones only after an abnormal exit (reason
  ``EXCEPTION``), temporary ones never (and are forgotten, as OTP deletes them).
* Strategy: one_for_one restarts the failed child; rest_for_one also stops the children started
  after it (in reverse start order) and restarts them all in start order; one_for_all does the
  same with every child. As in OTP, a temporary child caught in a group is stopped and not
  restarted, and a non-temporary child that was already down is started with the group.
* Intensity: each restart decision is time-stamped; if more than ``max_restarts`` decisions
  fall within the last ``period`` seconds the supervisor gives up: it stops every child one by
  one in reverse start order and then emits :class:`Escalate` (its parent treats it as a failed
  child; the root records a fatal cause).
* Backoff: the restart runs ``min(max_backoff, min_backoff * 2**n) * (1 + r * random_factor)``
  seconds after the failure, ``r`` in [0, 1) from ``random``, ``n`` the number of consecutive
  restarts of that child; ``n`` goes back to 0 when the child had run for ``reset_after``
  seconds before failing. A group restart waits for the failed child's delay *and* for every
  member to have stopped.
* Stopping is sequential: one ``StopChild`` at a time, each with the child's
  ``shutdown_timeout``; a child that does not exit in time is reported in ``not_stopped`` and
  the supervisor moves on (the old incarnation's late exit is then stale).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = [
    "Action",
    "ChildSpec",
    "ChildStatus",
    "Escalate",
    "ExitReason",
    "GiveUp",
    "Restart",
    "ScheduleRestart",
    "ShutdownComplete",
    "StartChild",
    "StopChild",
    "Strategy",
    "SupervisorCore",
    "SupervisorSpec",
    "backoff_delay",
]


class Strategy(Enum):
    ONE_FOR_ONE = "one_for_one"
    REST_FOR_ONE = "rest_for_one"
    ONE_FOR_ALL = "one_for_all"


class Restart(Enum):
    PERMANENT = "permanent"
    TRANSIENT = "transient"
    TEMPORARY = "temporary"


class ExitReason(Enum):
    NORMAL = "normal"  # the child stopped itself or was stopped (actor_ref.stop())
    SHUTDOWN = "shutdown"  # stopped as part of an orderly shutdown
    EXCEPTION = "exception"  # failed: exception in on_start / on_receive / on_stop


class ChildStatus(Enum):
    RUNNING = "running"
    RESTARTING = "restarting"  # down (or being stopped) with a restart planned
    STOPPING = "stopping"  # being stopped for good (shutdown / escalation)
    STOPPED = "stopped"  # down, no restart planned


@dataclass(frozen=True)
class ChildSpec:
    """How to start one child and how to restart it.

    ``factory`` is opaque to the core; the actor shell calls it with a ``ChildContext`` and
    expects a started pykka ``ActorRef``. Times are in seconds.
    """

    name: str
    factory: Callable[..., Any]
    restart: Restart = Restart.PERMANENT
    min_backoff: float = 0.1
    max_backoff: float = 10.0
    random_factor: float = 0.2
    reset_after: float = 10.0
    shutdown_timeout: float = 5.0

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a child needs a name")
        if self.min_backoff < 0 or self.max_backoff < self.min_backoff:
            raise ValueError("need 0 <= min_backoff <= max_backoff")
        if self.random_factor < 0:
            raise ValueError("random_factor must be >= 0")
        if self.reset_after < 0 or self.shutdown_timeout <= 0:
            raise ValueError("reset_after must be >= 0 and shutdown_timeout > 0")


@dataclass(frozen=True)
class SupervisorSpec:
    """Strategy and restart intensity (more than ``max_restarts`` within ``period`` s: give up)."""

    strategy: Strategy = Strategy.ONE_FOR_ONE
    max_restarts: int = 3
    period: float = 5.0

    def __post_init__(self) -> None:
        if self.max_restarts < 0 or self.period <= 0:
            raise ValueError("need max_restarts >= 0 and period > 0")


@dataclass(frozen=True)
class GiveUp:
    """Why a supervisor gave up: the child whose failure exceeded the restart intensity."""

    supervisor: str
    child: str
    reason: ExitReason
    exception: BaseException | None
    restarts: int
    max_restarts: int
    period: float

    def describe(self) -> str:
        last = f"; last error: {self.exception!r}" if self.exception is not None else ""
        return (
            f"child {self.child!r} exited ({self.reason.value}) {self.restarts} times within "
            f"{self.period:g}s, more than max_restarts={self.max_restarts}{last}"
        )


# -- actions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class StartChild:
    name: str
    generation: int
    spec: ChildSpec


@dataclass(frozen=True)
class StopChild:
    """Ask the child to stop; report ``stop_timed_out`` if it has not exited after ``timeout``."""

    name: str
    generation: int
    timeout: float


@dataclass(frozen=True)
class ScheduleRestart:
    """Call ``restart_due(token)`` after ``delay`` s; ``group`` will be started then."""

    name: str
    delay: float
    token: int
    group: tuple[str, ...]
    attempt: int


@dataclass(frozen=True)
class Escalate:
    """Every child is stopped; report ``cause`` to the parent (or record it, at the root)."""

    cause: GiveUp
    not_stopped: tuple[str, ...]


@dataclass(frozen=True)
class ShutdownComplete:
    not_stopped: tuple[str, ...]


Action = StartChild | StopChild | ScheduleRestart | Escalate | ShutdownComplete


def backoff_delay(
    min_backoff: float, max_backoff: float, random_factor: float, n: int, r: float
) -> float:
    """Akka's BackoffSupervisor delay: ``min(max, min * 2**n) * (1 + r * random_factor)``."""
    try:
        base = min(max_backoff, math.ldexp(min_backoff, n))
    except OverflowError:
        base = max_backoff
    return base * (1.0 + r * random_factor)


# -- state ------------------------------------------------------------------------------


class _State(Enum):
    DOWN = "down"
    RUNNING = "running"
    STOPPING = "stopping"
    PENDING = "pending"  # down, waiting for its restart plan


@dataclass
class _Child:
    spec: ChildSpec
    order: int
    state: _State = _State.DOWN
    generation: int = 0
    started_at: float | None = None
    consecutive: int = 0
    plan: int | None = None
    forget_when_down: bool = False


@dataclass
class _Plan:
    token: int
    members: set[str]
    timer_done: bool = False


@dataclass
class _Phase:
    """Shutdown or escalation in progress."""

    cause: GiveUp | None
    not_stopped: list[str] = field(default_factory=list)


class SupervisorCore:
    """Pure supervision decisions; see the module docstring for the rules.

    Every method returns the actions to carry out, in order.
    """

    def __init__(
        self,
        name: str,
        spec: SupervisorSpec,
        children: Sequence[ChildSpec],
        random: Callable[[], float],
    ) -> None:
        self.name = name
        self.spec = spec
        self._random = random
        self._children: dict[str, _Child] = {}
        self._order = 0
        for child in children:
            self._add(child)
        self._restarts: list[float] = []
        self._plans: dict[int, _Plan] = {}
        self._next_token = 0
        self._stop_queue: list[str] = []
        self._stopping: str | None = None
        self._phase: _Phase | None = None
        self._terminated = False
        self._started = False

    # -- queries ------------------------------------------------------------------------

    @property
    def terminated(self) -> bool:
        """True once shutdown or escalation has finished."""
        return self._terminated

    @property
    def give_up_cause(self) -> GiveUp | None:
        """Set from the moment the supervisor decides to give up (before children stop)."""
        return self._phase.cause if self._phase is not None else None

    def is_stopping(self, name: str, generation: int) -> bool:
        """True if that incarnation was asked to stop and has not exited yet."""
        c = self._children.get(name)
        return c is not None and c.generation == generation and c.state is _State.STOPPING

    def children(self) -> list[str]:
        """Names of the known children in start order."""
        return [c.spec.name for c in self._ordered()]

    def generation(self, name: str) -> int:
        return self._children[name].generation

    def child_status(self, name: str) -> ChildStatus | None:
        """The child's status, or None if it is unknown (or a forgotten temporary child)."""
        c = self._children.get(name)
        if c is None:
            return None
        if c.state is _State.RUNNING:
            if c.plan is not None:
                return ChildStatus.RESTARTING
            return ChildStatus.STOPPING if c.spec.name in self._stop_queue else ChildStatus.RUNNING
        if c.state is _State.STOPPING:
            return ChildStatus.RESTARTING if c.plan is not None else ChildStatus.STOPPING
        if c.state is _State.PENDING:
            return ChildStatus.RESTARTING
        return ChildStatus.STOPPED

    def consecutive_restarts(self, name: str) -> int:
        return self._children[name].consecutive

    # -- events -------------------------------------------------------------------------

    def start(self, now: float) -> list[Action]:
        """Start every child in order."""
        if self._started:
            raise RuntimeError("supervisor already started")
        self._started = True
        return [self._start_child(c, now) for c in self._ordered()]

    def add_child(self, spec: ChildSpec, now: float) -> list[Action]:
        """Add a child after the others (it is last in start order) and start it."""
        if self._phase is not None or self._terminated:
            raise RuntimeError(f"supervisor {self.name!r} is stopping")
        child = self._add(spec)
        return [self._start_child(child, now)] if self._started else []

    def child_start_failed(
        self, name: str, generation: int, exception: BaseException, now: float
    ) -> list[Action]:
        """The factory raised: same as the child exiting with an exception."""
        return self.child_exited(name, generation, ExitReason.EXCEPTION, exception, now)

    def child_exited(
        self,
        name: str,
        generation: int,
        reason: ExitReason,
        exception: BaseException | None,
        now: float,
    ) -> list[Action]:
        c = self._children.get(name)
        if c is None or c.generation != generation or c.state in (_State.DOWN, _State.PENDING):
            return []  # stale: an older incarnation, or one we already gave up waiting for
        actions: list[Action] = []
        if c.state is _State.STOPPING or c.plan is not None or self._phase is not None:
            # Expected: we asked it to stop (or were about to).
            self._went_down(c)
            actions += self._pump(now)
            return actions
        restart = c.spec.restart is Restart.PERMANENT or (
            c.spec.restart is Restart.TRANSIENT and reason is ExitReason.EXCEPTION
        )
        if not restart:
            c.state = _State.DOWN
            if c.spec.restart is Restart.TEMPORARY:
                del self._children[name]
            return actions
        self._restarts = [t for t in self._restarts if now - t < self.spec.period]
        self._restarts.append(now)
        if len(self._restarts) > self.spec.max_restarts:
            c.state = _State.DOWN
            cause = GiveUp(
                supervisor=self.name,
                child=name,
                reason=reason,
                exception=exception,
                restarts=len(self._restarts),
                max_restarts=self.spec.max_restarts,
                period=self.spec.period,
            )
            return self._begin_stop_all(cause, now)
        if c.started_at is not None and now - c.started_at >= c.spec.reset_after:
            c.consecutive = 0
        attempt = c.consecutive
        delay = backoff_delay(
            c.spec.min_backoff, c.spec.max_backoff, c.spec.random_factor, attempt, self._random()
        )
        c.consecutive += 1
        c.state = _State.PENDING
        return self._plan_restart(c, delay, attempt, now)

    def restart_due(self, token: int, now: float) -> list[Action]:
        """The timer of ``ScheduleRestart(token=...)`` fired."""
        plan = self._plans.get(token)
        if plan is None:
            return []  # merged into a later plan, or cancelled by shutdown
        plan.timer_done = True
        return self._pump(now)

    def stop_timed_out(self, name: str, generation: int, now: float) -> list[Action]:
        """The ``StopChild`` timeout passed; if the child is still stopping, stop waiting."""
        c = self._children.get(name)
        if c is None or c.generation != generation or c.state is not _State.STOPPING:
            return []
        if self._phase is not None:
            self._phase.not_stopped.append(name)
        self._went_down(c)
        return self._pump(now)

    def shutdown(self, now: float) -> list[Action]:
        """Stop every child, one at a time in reverse start order, then ShutdownComplete."""
        if self._terminated:
            return [ShutdownComplete(())]
        if self._phase is not None:
            return []  # already stopping; completion will be reported once
        return self._begin_stop_all(None, now)

    # -- internals ----------------------------------------------------------------------

    def _add(self, spec: ChildSpec) -> _Child:
        if spec.name in self._children:
            raise ValueError(f"duplicate child name {spec.name!r}")
        child = _Child(spec=spec, order=self._order)
        self._order += 1
        self._children[spec.name] = child
        return child

    def _ordered(self) -> list[_Child]:
        return sorted(self._children.values(), key=lambda c: c.order)

    def _start_child(self, c: _Child, now: float) -> StartChild:
        c.generation += 1
        c.state = _State.RUNNING
        c.started_at = now
        c.plan = None
        return StartChild(c.spec.name, c.generation, c.spec)

    def _went_down(self, c: _Child) -> None:
        if self._stopping == c.spec.name:
            self._stopping = None
        if c.spec.name in self._stop_queue:
            self._stop_queue.remove(c.spec.name)
        if c.forget_when_down:
            del self._children[c.spec.name]
            c.state = _State.DOWN
        elif c.plan is not None:
            c.state = _State.PENDING
        else:
            c.state = _State.DOWN

    def _group(self, failed: _Child) -> list[_Child]:
        strategy = self.spec.strategy
        if strategy is Strategy.ONE_FOR_ONE:
            return [failed]
        ordered = self._ordered()
        if strategy is Strategy.REST_FOR_ONE:
            return [c for c in ordered if c.order >= failed.order]
        return ordered

    def _plan_restart(self, failed: _Child, delay: float, attempt: int, now: float) -> list[Action]:
        token = self._next_token
        self._next_token += 1
        plan = _Plan(token=token, members={failed.spec.name})
        failed.plan = token
        to_stop: list[_Child] = []
        for c in self._group(failed):
            if c is failed:
                continue
            if c.plan is not None and c.plan != token:
                old = self._plans.pop(c.plan, None)  # merge the older plan into this one
                if old is not None:
                    for member in old.members:
                        if member in self._children:
                            self._children[member].plan = token
                            plan.members.add(member)
                continue
            if c.spec.restart is Restart.TEMPORARY:
                if c.state is _State.RUNNING:
                    c.forget_when_down = True
                    to_stop.append(c)
                continue
            plan.members.add(c.spec.name)
            c.plan = token
            if c.state is _State.RUNNING:
                to_stop.append(c)
            elif c.state is _State.DOWN:
                c.state = _State.PENDING
        self._plans[token] = plan
        for c in sorted(to_stop, key=lambda c: c.order, reverse=True):
            if c.spec.name not in self._stop_queue and self._stopping != c.spec.name:
                self._stop_queue.append(c.spec.name)
        actions: list[Action] = []
        if delay > 0:
            group = tuple(c.spec.name for c in self._ordered() if c.spec.name in plan.members)
            actions.append(ScheduleRestart(failed.spec.name, delay, token, group, attempt))
        else:
            plan.timer_done = True
        actions += self._pump(now)
        return actions

    def _begin_stop_all(self, cause: GiveUp | None, now: float) -> list[Action]:
        self._phase = _Phase(cause=cause)
        self._plans.clear()
        for c in self._children.values():
            c.plan = None
            if c.state is _State.PENDING:
                c.state = _State.DOWN
        self._stop_queue = [
            c.spec.name
            for c in reversed(self._ordered())
            if c.state is _State.RUNNING and c.spec.name != self._stopping
        ]
        return self._pump(now)

    def _pump(self, now: float) -> list[Action]:
        """Issue the next stop, start the plans that are ready, finish shutdown if done."""
        actions: list[Action] = []
        while self._stopping is None and self._stop_queue:
            name = self._stop_queue.pop(0)
            c = self._children.get(name)
            if c is None or c.state is not _State.RUNNING:
                continue
            c.state = _State.STOPPING
            self._stopping = name
            actions.append(StopChild(name, c.generation, c.spec.shutdown_timeout))
        if self._phase is not None:
            if self._stopping is None and not self._stop_queue and not self._terminated:
                self._terminated = True
                not_stopped = tuple(self._phase.not_stopped)
                if self._phase.cause is not None:
                    actions.append(Escalate(self._phase.cause, not_stopped))
                else:
                    actions.append(ShutdownComplete(not_stopped))
            return actions
        for token in sorted(self._plans):
            plan = self._plans[token]
            if not plan.timer_done:
                continue
            members = [self._children[m] for m in plan.members if m in self._children]
            if any(c.state is not _State.PENDING for c in members):
                continue
            del self._plans[token]
            for c in sorted(members, key=lambda c: c.order):
                actions.append(self._start_child(c, now))
        return actions
