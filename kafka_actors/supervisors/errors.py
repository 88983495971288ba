"""Errors raised by the supervision layer, placed in the project's hierarchy (kafka_actors.errors).

Owns: the exceptions a caller of a supervised actor may see (a child restarting or not
answering in time, a tree that gave up), the escalation error a nested supervisor dies with,
and :class:`InjectedFault`. May touch: nothing (plain exception classes).

* :class:`ChildRestartingError` (retriable): the actor that should answer is down; retry after
  a backoff (the supervisor is restarting it, or it exited for good if transient/temporary).
* :class:`ChildTimeoutError` (retriable, a ``KafkaTimeoutError``): no answer within the timeout.
* :class:`SupervisorFatalError` (a ``FatalConsumerError``): the root gave up; ``cause`` says
  which child failed how often, and its last exception.
* :class:`SupervisorEscalation` (fatal): what a nested supervisor dies with when it gives up,
  so that its parent sees a failed child with the reason attached.
* :class:`InjectedFault`: raised inside an actor by fault injection; deliberately not a
  ``KafkaError`` (it stands for an arbitrary bug).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka_actors.errors import (
    FatalConsumerError,
    FatalError,
    KafkaError,
    KafkaTimeoutError,
    RetriableError,
)

if TYPE_CHECKING:
    from kafka_actors.supervisors.core import GiveUp

__all__ = [
    "ChildRestartingError",
    "ChildTimeoutError",
    "InjectedFault",
    "SupervisionError",
    "SupervisorEscalation",
    "SupervisorFatalError",
]


class SupervisionError(KafkaError):
    """Base of the supervision errors (``retriable`` comes from the concrete class)."""


class ChildRestartingError(SupervisionError, RetriableError):
    """The actor that should answer is down (being restarted, or stopped): retry later."""

    def __init__(self, message: str | None = None, *, child: str = "", **context: Any) -> None:
        self.child = child
        super().__init__(message or f"actor {child!r} is restarting", **context)

    def _extra_state(self) -> dict[str, Any]:
        return {"child": self.child}


class ChildTimeoutError(SupervisionError, KafkaTimeoutError):
    """A child did not answer within the caller's timeout (slow or hung): retriable."""

    def __init__(
        self,
        message: str | None = None,
        *,
        child: str = "",
        timeout: float | None = None,
        **context: Any,
    ) -> None:
        self.child = child
        self.timeout = timeout
        super().__init__(message or f"actor {child!r} did not answer within {timeout}s", **context)

    def _extra_state(self) -> dict[str, Any]:
        return {"child": self.child, "timeout": self.timeout}


class _SupervisorGaveUp(SupervisionError):
    """A supervisor gave up (``cause``); the default message is ``_template`` filled with the
    supervisor's name and the cause's description."""

    _template = "supervisor {supervisor!r} gave up: {cause}"

    def __init__(
        self,
        message: str | None = None,
        *,
        supervisor: str = "",
        cause: GiveUp | None = None,
        **context: Any,
    ) -> None:
        self.supervisor = supervisor
        self.cause = cause
        described = cause.describe() if cause is not None else "unknown cause"
        super().__init__(
            message or self._template.format(supervisor=supervisor, cause=described), **context
        )

    def _extra_state(self) -> dict[str, Any]:
        return {"supervisor": self.supervisor, "cause": self.cause}


class SupervisorEscalation(_SupervisorGaveUp, FatalError):
    """A supervisor exceeded its restart intensity; it dies with this so its parent sees why."""


class SupervisorFatalError(_SupervisorGaveUp, FatalConsumerError):
    """The root supervisor gave up: the consumer cannot continue. ``cause`` names the failure."""

    _template = "fatal: supervision tree {supervisor!r} gave up: {cause}"


class InjectedFault(Exception):
    """Raised inside an actor by fault injection (:meth:`FaultInjector.crash`)."""

    def __init__(self, actor: str, message: object = None) -> None:
        self.actor = actor
        self.message = message
        super().__init__(f"injected fault in {actor!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.actor, self.message))
