"""Errors raised by the supervision layer.

Owns: the exceptions a caller of a supervised actor may see (a child restarting, a tree that
gave up), the escalation error a nested supervisor dies with, and :class:`InjectedFault`.
May touch: nothing (plain exception classes).

``retriable`` follows the project's convention for errors: True means the same call may succeed
if retried (after backoff); False means the consumer is unusable and the user must close it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kafka_actors.supervisors.core import GiveUp

__all__ = [
    "ChildRestartingError",
    "InjectedFault",
    "SupervisionError",
    "SupervisorEscalation",
    "SupervisorFatalError",
]


class SupervisionError(Exception):
    """Base of the supervision errors."""

    retriable: bool = False


class ChildRestartingError(SupervisionError):
    """The actor that should answer is down and being restarted: retry after a backoff."""

    retriable = True

    def __init__(self, child: str, detail: str = "") -> None:
        self.child = child
        super().__init__(f"actor {child!r} is restarting" + (f": {detail}" if detail else ""))


class SupervisorEscalation(SupervisionError):
    """A supervisor exceeded its restart intensity; it dies with this so its parent sees why."""

    def __init__(self, supervisor: str, cause: GiveUp) -> None:
        self.supervisor = supervisor
        self.cause = cause
        super().__init__(f"supervisor {supervisor!r} gave up: {cause.describe()}")


class SupervisorFatalError(SupervisionError):
    """The root supervisor gave up; the consumer cannot continue. ``cause`` names the failure."""

    def __init__(self, supervisor: str, cause: GiveUp) -> None:
        self.supervisor = supervisor
        self.cause = cause
        super().__init__(f"fatal: supervision tree {supervisor!r} gave up: {cause.describe()}")


class InjectedFault(Exception):
    """Raised inside an actor by fault injection (:meth:`FaultInjector.crash`)."""

    def __init__(self, actor: str, message: object = None) -> None:
        self.actor = actor
        self.message = message
        super().__init__(f"injected fault in {actor!r}")
