"""pykka shells around the supervision core: supervised actors, supervisors, safe child calls.

Owns:

* :class:`SupervisedActor`: base class of every actor that lives in a supervision tree. It
  tells its parent :class:`ChildExited` exactly once, when its thread ends, however it ends,
  and consults fault injection before each message.
* :class:`Supervision`: the reusable helper that makes any ``SupervisedActor`` a supervisor
  (the :class:`Supervisor` actor uses it; so does the NetworkActor for the request managers).
  It drives :class:`~kafka_actors.supervisors.core.SupervisorCore` and carries out its actions
  with pykka (``start()``, ``stop(block=False)``) and timers (``tell_later``): it never blocks
  on another actor while running, so supervisors cannot deadlock.
* :class:`ChildTable` / :class:`SupervisedRef`: how callers outside the tree talk to children
  without hanging: an answer, or :class:`ChildRestartingError` (retriable) while the child is
  down, or :class:`SupervisorFatalError` once the tree gave up. Tells to a child announced
  with :meth:`ChildTable.expect` that has not run yet are kept for its first incarnation.
* :func:`start_tree`: starts a root supervisor and returns a :class:`SupervisorTree` handle
  (``fatal_error``, ``ask``, ``shutdown``).
* Process exit: actor threads are daemon threads, and every tree not shut down by its owner
  (a consumer that was never closed) is shut down by an ``atexit`` hook, each bounded by
  :data:`EXIT_SHUTDOWN_TIMEOUT_S`, so that a forgotten ``close()`` never keeps the
  interpreter from exiting (non-daemon threads are joined *before* ``atexit`` runs).

May touch: pykka actors it starts (via their factories) and their refs, the scheduler.

The pykka facts this module relies on (pinned by ``tests/runtime/test_pykka_contract.py``;
the private hooks behind them live in :mod:`kafka_actors.runtime`):

* An exception in ``on_receive`` for a ``tell`` calls :meth:`RuntimeActor.on_crash` then
  ``on_failure``; for an ``ask`` the exception goes to the caller and the actor lives on.
* An exception in ``on_start`` calls only ``on_crash``: neither ``on_failure`` nor ``on_stop``
  runs. An exception in ``on_stop`` also lands in ``on_crash``.
* ``actor_ref.stop()`` (from anyone) is a message: ``on_stop`` runs, no failure hook.

So ``on_failure``/``on_stop`` alone miss start and stop failures; ``SupervisedActor`` instead
records the first failure seen by ``on_crash`` and notifies from ``on_thread_exit`` (the
thread's last act), which no exit path skips.
"""

from __future__ import annotations

import atexit
import os
import random as _random
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import pykka

from kafka_actors.clock import (
    Clock,
    ManualClock,
    Scheduler,
    SystemClock,
    default_scheduler,
    tell_later,
)
from kafka_actors.log import get_logger
from kafka_actors.runtime import AlreadySet, FirstWinsFuture, RuntimeActor
from kafka_actors.supervisors.core import (
    Action,
    ChildSpec,
    ChildStatus,
    Escalate,
    ExitReason,
    GiveUp,
    ScheduleRestart,
    ShutdownComplete,
    StartChild,
    StopChild,
    SupervisorCore,
    SupervisorSpec,
)
from kafka_actors.supervisors.errors import (
    ChildRestartingError,
    ChildTimeoutError,
    InjectedFault,
    SupervisionError,
    SupervisorEscalation,
    SupervisorFatalError,
)
from kafka_actors.supervisors.faults import FaultInjector

__all__ = [
    "ChildContext",
    "ChildExited",
    "ChildTable",
    "ChildTimeoutError",
    "ShutdownResult",
    "SupervisedActor",
    "SupervisedRef",
    "Supervision",
    "Supervisor",
    "SupervisorTree",
    "TreeStatus",
    "start_tree",
]


# -- messages -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ChildExited:
    """A supervised actor's thread ended (child → parent, via ``tell``)."""

    name: str
    generation: int
    reason: ExitReason
    exception: BaseException | None = None


@dataclass(frozen=True)
class RestartDue:
    """Timer → supervisor: the restart delay of plan ``token`` has passed."""

    token: int


@dataclass(frozen=True)
class StopTimedOut:
    """Timer → supervisor: child ``name`` (``generation``) was asked to stop ``timeout`` ago."""

    name: str
    generation: int


@dataclass(frozen=True)
class ShutdownRequest:
    """Caller → supervisor: stop every child in order, then stop; result into ``reply``."""

    reply: pykka.Future[ShutdownResult] | None = None


@dataclass(frozen=True)
class AddChild:
    """Caller → supervisor: add a child (last in start order) and start it."""

    spec: ChildSpec


@dataclass(frozen=True)
class ShutdownResult:
    """How a shutdown went: the children that did not stop within their timeout."""

    not_stopped: tuple[str, ...] = ()
    completed: bool = True


# -- tree-wide state and child lookup -----------------------------------------------------


class TreeStatus:
    """Shared by every supervisor of one tree: whether (and why) the root gave up."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fatal: SupervisorFatalError | None = None
        self._callbacks: list[Callable[[SupervisorFatalError], None]] = []

    @property
    def fatal_error(self) -> SupervisorFatalError | None:
        return self._fatal

    def on_fatal(self, callback: Callable[[SupervisorFatalError], None]) -> None:
        """Call ``callback(error)`` when the root gives up (at once if it already has)."""
        with self._lock:
            if self._fatal is None:
                self._callbacks.append(callback)
                return
            error = self._fatal
        callback(error)

    def set_fatal(self, error: SupervisorFatalError) -> None:
        with self._lock:
            if self._fatal is not None:
                return
            self._fatal = error
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback(error)
            except Exception:
                get_logger("supervisor").exception("fatal_callback_failed")


@dataclass
class _Entry:
    status: ChildStatus
    generation: int = 0
    ref: pykka.ActorRef[Any] | None = None
    waiters: weakref.WeakSet[pykka.Future[Any]] = field(default_factory=weakref.WeakSet)
    #: Messages told before the first incarnation ran (see :meth:`ChildTable.expect`); None
    #: once one ran, or for a child nobody announced.
    early: list[Any] | None = None


class ChildTable:
    """Thread-safe view of one supervisor's children, for callers on any thread."""

    def __init__(self, supervisor: str, tree: TreeStatus) -> None:
        self.supervisor = supervisor
        self.tree = tree
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    # -- supervisor side --

    def _set_running(self, name: str, generation: int, ref: pykka.ActorRef[Any]) -> None:
        with self._lock:
            entry = self._entries.get(name)
            early = entry.early if entry is not None else None
            self._entries[name] = _Entry(ChildStatus.RUNNING, generation, ref)
            try:
                for message in early or ():
                    ref.tell(message)  # first, in order: later tells wait for the lock
            except pykka.ActorDeadError:
                pass  # it died at once: the supervisor sees it; the messages go with it

    def _set_status(self, name: str, status: ChildStatus | None) -> None:
        with self._lock:
            entry = self._entries.get(name)
            if status is None:
                self._entries.pop(name, None)
            elif entry is None:
                self._entries[name] = _Entry(status)
            else:
                entry.status = status

    def _child_down(self, name: str, generation: int) -> None:
        """The incarnation ``generation`` is gone: fail the calls still waiting on it."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is None or entry.generation != generation:
                return
            entry.ref = None
            waiters = list(entry.waiters)
            entry.waiters = weakref.WeakSet()
        error = self._down_error(name)
        for future in waiters:
            future.set_exception(exc_info=(type(error), error, None))  # first wins

    # -- caller side --

    def expect(self, names: Sequence[str]) -> None:
        """Announce children the supervisor is about to start for the first time. Until one of
        them runs, a message told to it is kept and delivered to it, first, when it starts,
        instead of being refused (a caller telling right after starting the tree loses
        nothing and waits for no retry). Asks are refused as before (restarting); a child that
        has run once is refused while it restarts, as any other."""
        with self._lock:
            for name in names:
                if name not in self._entries:
                    self._entries[name] = _Entry(ChildStatus.RESTARTING, early=[])

    def status(self, name: str) -> ChildStatus | None:
        with self._lock:
            entry = self._entries.get(name)
            return entry.status if entry is not None else None

    def ref(self, name: str) -> SupervisedRef:
        return SupervisedRef(self, name)

    def current(self, name: str) -> tuple[pykka.ActorRef[Any], int]:
        """The running incarnation of ``name``, or raise the error a caller should see."""
        found = self._current(name, None)
        assert found is not None
        return found

    def _current(
        self, name: str, keep: tuple[Any] | None
    ) -> tuple[pykka.ActorRef[Any], int] | None:
        """:meth:`current`; with ``keep`` (a message to tell), None when the message was kept
        for a child not started yet (see :meth:`expect`)."""
        fatal = self.tree.fatal_error
        if fatal is not None:
            raise fatal
        with self._lock:
            entry = self._entries.get(name)
            if entry is None:
                raise KeyError(f"supervisor {self.supervisor!r} has no child {name!r}")
            if keep is not None and entry.early is not None:
                entry.early.append(keep[0])
                return None
            if entry.ref is not None and entry.status is not ChildStatus.STOPPED:
                return entry.ref, entry.generation
            status = entry.status
        raise self._down_error(name, status)

    def _down_error(self, name: str, status: ChildStatus | None = None) -> SupervisionError:
        fatal = self.tree.fatal_error
        if fatal is not None:
            return fatal
        if status is ChildStatus.STOPPED:
            return ChildRestartingError(f"actor {name!r} is stopped (no restart)", child=name)
        if status is ChildStatus.STOPPING:
            return ChildRestartingError(f"actor {name!r} is stopping", child=name)
        return ChildRestartingError(child=name)

    def tell(self, name: str, message: Any) -> None:
        found = self._current(name, (message,))
        if found is None:
            return  # kept for the first incarnation (see expect)
        ref, _generation = found
        try:
            ref.tell(message)
        except pykka.ActorDeadError:
            raise self._down_error(name) from None

    def ask(self, name: str, message: Any, timeout: float) -> Any:
        """The child's answer; ChildRestartingError / SupervisorFatalError / ChildTimeoutError.

        Never waits past ``timeout``; returns early with an error if the child dies meanwhile.
        An exception raised by a child that is still alive is re-raised unchanged.
        """
        ref, generation = self.current(name)
        future: pykka.Future[Any] = ref.ask(message, block=False)
        with self._lock:
            entry = self._entries.get(name)
            registered = entry is not None and entry.generation == generation and (entry.ref is ref)
            if registered and entry is not None:
                entry.waiters.add(future)
        if not registered:
            # The incarnation went down between the lookup and now: answer for it. The
            # future tolerates a second completion (see FirstWinsFuture).
            error = self._down_error(name)
            future.set_exception(exc_info=(type(error), error, None))
        try:
            return future.get(timeout=timeout)
        except pykka.Timeout:
            raise ChildTimeoutError(child=name, timeout=timeout) from None
        except pykka.ActorDeadError:
            raise self._down_error(name) from None
        except SupervisionError:
            raise
        except Exception as exc:
            if not ref.is_alive():
                raise self._down_error(name) from exc
            raise


class SupervisedRef:
    """A stable handle on a supervised child, whatever its current incarnation."""

    def __init__(self, table: ChildTable, name: str) -> None:
        self.table = table
        self.name = name

    def ask(self, message: Any, timeout: float) -> Any:
        return self.table.ask(self.name, message, timeout)

    def tell(self, message: Any) -> None:
        self.table.tell(self.name, message)

    def __repr__(self) -> str:
        return f"<SupervisedRef {self.table.supervisor}/{self.name}>"


# -- supervised actors ----------------------------------------------------------------------


@dataclass(frozen=True)
class ChildContext:
    """What a supervisor hands a child's factory; pass it to ``SupervisedActor.__init__``."""

    name: str
    generation: int
    parent: pykka.ActorRef[Any] | None
    tree: TreeStatus
    faults: FaultInjector | None = None
    path: str = ""


EXIT_SHUTDOWN_TIMEOUT_S = 2.0
"""How long the exit hook waits for each tree still running when the interpreter exits."""


class SupervisedActor(RuntimeActor):
    """A pykka actor that tells its parent when it exits and honours fault injection.

    Subclasses use the ordinary pykka hooks (``on_start``, ``on_receive``, ``on_stop``,
    ``on_failure``) and must pass ``context`` to ``__init__``. The exit reason is
    ``EXCEPTION`` if anything failed (``on_start``, a told message, ``on_stop``, an injected
    crash), ``NORMAL`` otherwise. An injected crash kills the actor even when the matching
    message came through ``ask`` (the caller receives the :class:`InjectedFault`).
    """

    # Daemon threads: a tree its owner never shut down must not keep the process alive (the
    # exit hook below shuts such trees down in order instead).
    use_daemon_thread = True
    # A caller that gave up on a child (ChildTable) must not make a late answer raise.
    reply_future = FirstWinsFuture

    def __init__(
        self,
        *,
        context: ChildContext | None = None,
        name: str | None = None,
        faults: FaultInjector | None = None,
    ) -> None:
        super().__init__()
        self.context = context
        self.supervised_name: str = (
            context.name if context is not None else (name or type(self).__name__)
        )
        self.generation = context.generation if context is not None else 0
        self.faults: FaultInjector | None = (
            faults if faults is not None else (context.faults if context is not None else None)
        )
        self._exit_exception: BaseException | None = None
        self._failure_handled = False
        self._injected = False

    def _record_failure(self, exception: BaseException | None) -> None:
        if self._exit_exception is None and exception is not None:
            self._exit_exception = exception

    def on_crash(self, exception: BaseException | None) -> None:
        self._failure_handled = True
        self._record_failure(exception)

    def before_receive(self, message: Any) -> None:
        faults = self.faults
        if faults is not None and faults.should_crash(self.supervised_name, message):
            fault = InjectedFault(self.supervised_name, message)
            self._injected = True
            self._record_failure(fault)
            # Die after this message whether it came by tell (pykka's failure path) or ask.
            pykka.ActorRegistry.unregister(self.actor_ref)
            self.actor_stopped.set()
            raise fault

    def on_thread_exit(self) -> None:
        if self._injected and not self._failure_handled:
            exc = self._exit_exception
            try:
                if exc is not None:
                    self.on_failure(type(exc), exc, exc.__traceback__)
            except Exception:
                get_logger("supervisor").exception("on_failure_failed", actor=self.supervised_name)
        self._notify_parent()

    def _notify_parent(self) -> None:
        context = self.context
        if context is None or context.parent is None:
            return
        exc = self._exit_exception
        reason = ExitReason.EXCEPTION if exc is not None else ExitReason.NORMAL
        try:
            context.parent.tell(ChildExited(context.name, context.generation, reason, exc))
        except pykka.ActorDeadError:
            pass  # the parent is gone; its own parent deals with the subtree


# -- the supervision helper -----------------------------------------------------------------


class Supervision:
    """Makes ``owner`` (any :class:`SupervisedActor`) the supervisor of ``children``.

    The owner calls :meth:`start` from ``on_start``, passes every message to :meth:`handle`
    first in ``on_receive`` (True means "consumed"; let exceptions from it propagate), calls
    :meth:`stop_children_now` from ``on_stop`` and :meth:`owner_failed` from ``on_failure``
    (fallbacks: after an orderly :meth:`request_shutdown` they have nothing left to do).

    The pattern (the NetworkActor supervising the request managers)::

        class NetworkActor(SupervisedActor):
            def __init__(self, context: ChildContext, managers: list[ChildSpec]) -> None:
                super().__init__(context=context)
                self.supervision = Supervision(self, SupervisorSpec(...), managers)

            def on_start(self) -> None:
                self.supervision.start()

            def on_receive(self, message: Any) -> Any:
                if self.supervision.handle(message):
                    return None
                ...  # the actor's own messages

            def on_stop(self) -> None:
                self.supervision.stop_children_now()

            def on_failure(self, *exc_info: Any) -> None:
                self.supervision.owner_failed(exc_info[1])

    ``table`` may be shared by successive incarnations of a supervisor that is itself
    restarted (pass the same :class:`ChildTable` from its factory), so callers outside keep one
    handle on its children across restarts.

    When the core gives up: a supervisor with a parent raises :class:`SupervisorEscalation`
    out of :meth:`handle` (so the owner fails and its parent sees a failed child); the root
    records :class:`SupervisorFatalError` in the tree and stops its owner. ``on_give_up``
    replaces that behaviour.
    """

    def __init__(
        self,
        owner: SupervisedActor,
        spec: SupervisorSpec,
        children: Sequence[ChildSpec],
        *,
        scheduler: Scheduler | None = None,
        clock: Clock | None = None,
        random: Callable[[], float] | None = None,
        table: ChildTable | None = None,
        on_give_up: Callable[[GiveUp], None] | None = None,
        on_shutdown: Callable[[ShutdownResult], None] | None = None,
    ) -> None:
        self.owner = owner
        self.name = owner.supervised_name
        context = owner.context
        self.parent = context.parent if context is not None else None
        if context is not None:
            self.tree = context.tree
        else:
            self.tree = table.tree if table is not None else TreeStatus()
        if table is not None:
            table.tree = self.tree  # a shared table follows the tree it now lives in
        self.path = (context.path + "/" if context is not None and context.path else "") + self.name
        self.clock: Clock = clock or SystemClock()
        if scheduler is None:
            # Timers must run on the same clock the core reads.
            scheduler = clock.scheduler() if isinstance(clock, ManualClock) else default_scheduler()
        self.scheduler: Scheduler = scheduler
        self.table = table or ChildTable(self.name, self.tree)
        self.core = SupervisorCore(self.name, spec, children, random or _random.Random().random)
        self._on_give_up = on_give_up
        self._on_shutdown = on_shutdown
        self._shutdown_replies: list[pykka.Future[ShutdownResult]] = []
        self._refs: dict[str, tuple[int, pykka.ActorRef[Any]]] = {}
        self._specs: dict[str, ChildSpec] = {}
        self.result: ShutdownResult | None = None
        self._log = get_logger("supervisor", supervisor=self.path)
        for child in children:  # known (and "restarting" for callers) until started
            self.table._set_status(child.name, ChildStatus.RESTARTING)

    # -- owner entry points --

    def start(self) -> None:
        self._log.info("supervisor_starting", children=self.core.children())
        self._run(self.core.start(self.clock.monotonic()))

    def handle(self, message: Any) -> bool:
        """Process a supervision message; False if ``message`` is not one."""
        now = self.clock.monotonic()
        if isinstance(message, ChildExited):
            self._run(self._child_exited(message, now))
        elif isinstance(message, RestartDue):
            self._run(self.core.restart_due(message.token, now))
        elif isinstance(message, StopTimedOut):
            if self.core.is_stopping(message.name, message.generation):
                self._log.warning(
                    "child_stop_timed_out", child=message.name, generation=message.generation
                )
                if self._refs.get(message.name, (None,))[0] == message.generation:
                    del self._refs[message.name]
                self.table._child_down(message.name, message.generation)
            self._run(self.core.stop_timed_out(message.name, message.generation, now))
        elif isinstance(message, ShutdownRequest):
            self.request_shutdown(message.reply)
        elif isinstance(message, AddChild):
            try:
                actions = self.core.add_child(message.spec, now)
            except (ValueError, RuntimeError) as exc:
                self._log.warning("add_child_refused", child=message.spec.name, error=str(exc))
                if self.core.child_status(message.spec.name) is None:
                    self.table._set_status(message.spec.name, None)
                return True
            self.table._set_status(message.spec.name, ChildStatus.RESTARTING)
            self._run(actions)
        else:
            return False
        return True

    def request_shutdown(self, reply: pykka.Future[ShutdownResult] | None = None) -> None:
        """Orderly stop of every child (reverse start order); ``reply`` gets the result."""
        if self.result is not None:
            if reply is not None:
                reply.set(self.result)
            return
        if reply is not None:
            self._shutdown_replies.append(reply)
        self._log.info("supervisor_shutting_down")
        self._run(self.core.shutdown(self.clock.monotonic()))

    def owner_failed(self, exception: BaseException | None) -> tuple[str, ...]:
        """For the owner's ``on_failure`` (and a failed ``on_start``): the owner itself crashed.

        Stops the children (:meth:`stop_children_now`). At the root nobody will restart the
        tree, so the crash is recorded as the fatal error callers will see.
        """
        not_stopped = self.stop_children_now()
        if self.parent is None and self._on_give_up is None and self.core.give_up_cause is None:
            self._log.error("supervisor_crashed", error=repr(exception), fatal=True)
            self.tree.set_fatal(
                SupervisorFatalError(
                    f"fatal: supervisor {self.path!r} crashed: {exception!r}",
                    supervisor=self.path,
                )
            )
        return not_stopped

    def stop_children_now(self) -> tuple[str, ...]:
        """Synchronously stop the children still running, in reverse start order.

        For the owner's ``on_stop``/``on_failure`` (the owner is already marked stopped, so the
        children's exit notices fail fast instead of queueing). Each child gets its
        ``shutdown_timeout``; the names of those that did not stop are returned and logged.
        """
        not_stopped: list[str] = []
        for name in reversed(self.core.children()):
            entry = self._refs.pop(name, None)
            if entry is None:
                continue
            generation, ref = entry
            timeout = self._specs[name].shutdown_timeout if name in self._specs else 5.0
            try:
                ref.stop(block=True, timeout=timeout)
            except pykka.Timeout:
                not_stopped.append(name)
                self._log.warning("child_stop_timed_out", child=name, generation=generation)
            self.table._child_down(name, generation)
            self.table._set_status(name, ChildStatus.STOPPED)
        if self.result is None:
            self.result = ShutdownResult(tuple(not_stopped))
        return tuple(not_stopped)

    # -- internals --

    def _child_exited(self, msg: ChildExited, now: float) -> list[Action]:
        current = self._refs.get(msg.name)
        if current is None or current[0] != msg.generation:
            self._log.debug("stale_exit_ignored", child=msg.name, generation=msg.generation)
            return []
        del self._refs[msg.name]
        self.table._child_down(msg.name, msg.generation)
        log = self._log.bind(child=msg.name, generation=msg.generation, reason=msg.reason.value)
        if msg.exception is not None:
            log.warning("child_exited", error=repr(msg.exception))
        else:
            log.info("child_exited")
        return self.core.child_exited(msg.name, msg.generation, msg.reason, msg.exception, now)

    def _run(self, actions: list[Action]) -> None:
        pending = list(actions)
        escalation: GiveUp | None = None
        while pending:
            action = pending.pop(0)
            if isinstance(action, StartChild):
                pending += self._start_child(action)
            elif isinstance(action, StopChild):
                self._stop_child(action)
            elif isinstance(action, ScheduleRestart):
                self._log.info(
                    "child_restarting",
                    child=action.name,
                    delay=round(action.delay, 6),
                    attempt=action.attempt,
                    group=list(action.group),
                )
                tell_later(
                    self.scheduler, action.delay, self.owner.actor_ref, RestartDue(action.token)
                )
            elif isinstance(action, Escalate):
                escalation = action.cause
                self._finish(ShutdownResult(action.not_stopped, completed=True))
            elif isinstance(action, ShutdownComplete):
                self._finish(ShutdownResult(action.not_stopped, completed=True))
                self._log.info("supervisor_stopped", not_stopped=list(action.not_stopped))
                if self._on_shutdown is not None:
                    self._on_shutdown(self.result or ShutdownResult())
        self._sync_table()
        cause = self.core.give_up_cause
        if cause is not None and self.parent is None and self._on_give_up is None:
            # The root's decision is final: callers get the fatal error from now on.
            self.tree.set_fatal(SupervisorFatalError(supervisor=self.path, cause=cause))
        if escalation is not None:
            self._give_up(escalation)

    def _give_up(self, cause: GiveUp) -> None:
        log = self._log.bind(child=cause.child, restarts=cause.restarts)
        if self._on_give_up is not None:
            log.error("supervisor_gave_up", cause=cause.describe())
            self._on_give_up(cause)
            return
        if self.parent is not None:
            log.error("supervisor_escalating", cause=cause.describe())
            raise SupervisorEscalation(supervisor=self.path, cause=cause)
        log.error("supervisor_gave_up", cause=cause.describe(), fatal=True)
        self.tree.set_fatal(SupervisorFatalError(supervisor=self.path, cause=cause))
        self.owner.actor_ref.stop(block=False)

    def _finish(self, result: ShutdownResult) -> None:
        self.result = result
        replies, self._shutdown_replies = self._shutdown_replies, []
        for reply in replies:
            try:
                reply.set(result)
            except AlreadySet:
                pass

    def _sync_table(self) -> None:
        known = set(self.core.children())
        for name in known:
            self.table._set_status(name, self.core.child_status(name))
        for name in list(self._specs):
            if name not in known:
                self.table._set_status(name, None)
                del self._specs[name]

    def _start_child(self, action: StartChild) -> list[Action]:
        context = ChildContext(
            name=action.name,
            generation=action.generation,
            parent=self.owner.actor_ref,
            tree=self.tree,
            faults=self.owner.faults,
            path=self.path,
        )
        self._specs[action.name] = action.spec
        try:
            ref = action.spec.factory(context)
            if not isinstance(ref, pykka.ActorRef) or not issubclass(
                ref.actor_class, SupervisedActor
            ):
                if isinstance(ref, pykka.ActorRef):
                    ref.stop(block=False)
                raise TypeError(
                    f"factory of {action.name!r} must return the ActorRef of a SupervisedActor"
                )
        except Exception as exc:
            self._log.warning(
                "child_start_failed",
                child=action.name,
                generation=action.generation,
                error=repr(exc),
            )
            return self.core.child_start_failed(
                action.name, action.generation, exc, self.clock.monotonic()
            )
        self._refs[action.name] = (action.generation, ref)
        self.table._set_running(action.name, action.generation, ref)
        self._log.info("child_started", child=action.name, generation=action.generation)
        return []

    def _stop_child(self, action: StopChild) -> None:
        entry = self._refs.get(action.name)
        self._log.info("child_stopping", child=action.name, generation=action.generation)
        if entry is not None and entry[0] == action.generation:
            entry[1].stop(block=False)
        tell_later(
            self.scheduler,
            action.timeout,
            self.owner.actor_ref,
            StopTimedOut(action.name, action.generation),
        )


# -- the supervisor actor ---------------------------------------------------------------------


class Supervisor(SupervisedActor):
    """A pykka actor whose only job is to supervise ``children`` (see :class:`Supervision`).

    As a child of another supervisor, build it from a factory:
    ``ChildSpec("sub", lambda ctx: Supervisor.start(spec, children, context=ctx))``.
    """

    def __init__(
        self,
        spec: SupervisorSpec,
        children: Sequence[ChildSpec],
        *,
        context: ChildContext | None = None,
        name: str = "root",
        faults: FaultInjector | None = None,
        scheduler: Scheduler | None = None,
        clock: Clock | None = None,
        random: Callable[[], float] | None = None,
        table: ChildTable | None = None,
    ) -> None:
        super().__init__(context=context, name=name, faults=faults)
        self.supervision = Supervision(
            self,
            spec,
            children,
            scheduler=scheduler,
            clock=clock,
            random=random,
            table=table,
            on_shutdown=self._shutdown_done,
        )

    def _shutdown_done(self, _result: ShutdownResult) -> None:
        self.actor_ref.stop(block=False)

    def on_start(self) -> None:
        try:
            self.supervision.start()
        except Exception as exc:
            self.supervision.owner_failed(exc)  # pykka runs no other hook after this
            raise

    def on_receive(self, message: Any) -> Any:
        if self.supervision.handle(message):
            return None
        return super().on_receive(message)

    def on_stop(self) -> None:
        self.supervision.stop_children_now()

    def on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if isinstance(exception_value, SupervisorEscalation):
            self.supervision.stop_children_now()  # already stopped; the parent takes over
        else:
            self.supervision.owner_failed(exception_value)


@dataclass(eq=False)
class SupervisorTree:
    """Handle on a running root supervisor, for code outside the actor system (a facade)."""

    ref: pykka.ActorRef[Supervisor]
    children: ChildTable
    tree: TreeStatus

    @property
    def fatal_error(self) -> SupervisorFatalError | None:
        """Why the tree gave up, or None while it is alive."""
        return self.tree.fatal_error

    def raise_if_fatal(self) -> None:
        error = self.tree.fatal_error
        if error is not None:
            raise error

    def ask(self, child: str, message: Any, timeout: float) -> Any:
        return self.children.ask(child, message, timeout)

    def child(self, name: str) -> SupervisedRef:
        return self.children.ref(name)

    def add_child(self, spec: ChildSpec) -> None:
        """Add and start a child (asynchronously); callers see it as restarting until then."""
        if self.children.status(spec.name) is None:
            self.children._set_status(spec.name, ChildStatus.RESTARTING)
        self.ref.tell(AddChild(spec))

    def shutdown(self, timeout: float = 30.0) -> ShutdownResult:
        """Orderly stop (children in reverse start order); never waits longer than ``timeout``.

        Call from outside the tree (never from inside an actor of this tree).
        """
        _live_trees.pop(self, None)
        clock = SystemClock()
        deadline = clock.monotonic() + timeout
        reply: pykka.Future[ShutdownResult] = pykka.ThreadingFuture()
        try:
            self.ref.tell(ShutdownRequest(reply))
        except pykka.ActorDeadError:
            return ShutdownResult()
        try:
            result: ShutdownResult = reply.get(timeout=timeout)
        except pykka.Timeout:
            result = ShutdownResult(completed=False)
        except pykka.ActorDeadError:
            result = ShutdownResult()
        try:
            self.ref.stop(block=True, timeout=max(0.0, deadline - clock.monotonic()))
        except pykka.Timeout:
            result = ShutdownResult(result.not_stopped, completed=False)
        return result


def start_tree(
    spec: SupervisorSpec,
    children: Sequence[ChildSpec],
    *,
    name: str = "root",
    faults: FaultInjector | None = None,
    scheduler: Scheduler | None = None,
    clock: Clock | None = None,
    random: Callable[[], float] | None = None,
    on_fatal: Callable[[SupervisorFatalError], None] | None = None,
) -> SupervisorTree:
    """Start a root :class:`Supervisor` and return its handle."""
    tree = TreeStatus()
    if on_fatal is not None:
        tree.on_fatal(on_fatal)
    table = ChildTable(name, tree)
    ref = Supervisor.start(
        spec,
        children,
        name=name,
        faults=faults,
        scheduler=scheduler,
        clock=clock,
        random=random,
        table=table,
    )
    handle = SupervisorTree(ref, table, tree)
    _live_trees[handle] = None
    return handle


_live_trees: dict[SupervisorTree, None] = {}
"""Trees started and not yet shut down, oldest first (the exit hook's work list)."""


def _shutdown_live_trees() -> None:
    """``atexit``: shut down, newest first, every tree its owner left running."""
    for handle in reversed(list(_live_trees)):
        try:
            handle.shutdown(timeout=EXIT_SHUTDOWN_TIMEOUT_S)
        except Exception:  # exiting anyway: never let one tree stop the others
            continue


atexit.register(_shutdown_live_trees)
# A forked child has none of its parent's actor threads: nothing of theirs to shut down.
os.register_at_fork(after_in_child=_live_trees.clear)
