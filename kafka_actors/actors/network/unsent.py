"""Requests the NetworkActor holds that are on no connection.

Owns: :class:`UnsentRequests`: requests for any node (``ANY_NODE`` / ``BOOTSTRAP_NODE``) not
given to a node yet, requests for a node whose address is not known yet, responses held back
by fault injection (``Delay``) and requests whose response fault injection dropped (``Drop``):
adding and taking them, their deadlines and which of them expired. Routing and answering them
is the NetworkActor's. Pure: the caller gives it the clock's readings. May touch: nothing.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from kafka_actors.protocol.connection.node import Completed, PendingRequest
from kafka_actors.protocol.messages import ANY_NODE

__all__ = ["Delayed", "UnsentRequests"]


@dataclass(order=True)
class Delayed:
    """A response held back by fault injection (``Delay``) until ``due`` (monotonic s)."""

    due: float
    seq: int
    node: int = dataclasses.field(compare=False)
    event: Completed = dataclasses.field(compare=False)


class UnsentRequests:
    """The requests on no connection (module docstring)."""

    __slots__ = ("_any", "_delayed", "_dropped", "_seq", "_waiting")

    def __init__(self) -> None:
        #: Requests for ANY_NODE / BOOTSTRAP_NODE not given to a node yet, oldest first.
        self._any: deque[PendingRequest] = deque()
        #: Requests for a node whose address is not known yet, by node id.
        self._waiting: dict[int, deque[PendingRequest]] = {}
        self._delayed: list[Delayed] = []
        self._dropped: list[PendingRequest] = []
        self._seq = 0

    # -- for any node --------------------------------------------------------------------------

    def add_any(self, pending: PendingRequest) -> None:
        """Queue a request for any node (also one taken back from a lost connection)."""
        self._any.append(pending)

    def has_any(self) -> bool:
        return bool(self._any)

    def any_pending(self) -> Iterator[PendingRequest]:
        """The requests for any node, oldest first (read only)."""
        return iter(self._any)

    def take_any(self) -> deque[PendingRequest]:
        """Every request for any node, oldest first; the queue is left empty (give back what
        stays with :meth:`add_any`, in order)."""
        taken, self._any = self._any, deque()
        return taken

    # -- for a node whose address is unknown ---------------------------------------------------

    def wait_for(self, node: int, pending: PendingRequest) -> None:
        self._waiting.setdefault(node, deque()).append(pending)

    def take_waiting(self, node: int) -> deque[PendingRequest]:
        """The requests that waited for ``node``'s address (it is known now), oldest first."""
        return self._waiting.pop(node, deque())

    # -- fault injection -------------------------------------------------------------------------

    def delay(self, due: float, node: int, event: Completed) -> None:
        """Hold a response back until ``due``."""
        self._seq += 1
        heapq.heappush(self._delayed, Delayed(due, self._seq, node, event))

    def take_due(self, now: float) -> list[Delayed]:
        """The held-back responses whose time came, earliest first."""
        due: list[Delayed] = []
        while self._delayed and self._delayed[0].due <= now:
            due.append(heapq.heappop(self._delayed))
        return due

    def drop(self, pending: PendingRequest) -> None:
        """A request whose response was dropped: it waits for its deadline."""
        self._dropped.append(pending)

    # -- deadlines -------------------------------------------------------------------------------

    def expire(self, now: float) -> tuple[list[tuple[PendingRequest, int]], list[PendingRequest]]:
        """Take the requests whose deadline passed: ``(unsent, dropped)``, where ``unsent`` is
        ``(request, ANY_NODE or the node id it waited for)``, each in queue order."""
        unsent: list[tuple[PendingRequest, int]] = []
        for kind, waiting in [(ANY_NODE, self._any), *self._waiting.items()]:
            if waiting and any(p.deadline <= now for p in waiting):
                keep = deque(p for p in waiting if p.deadline > now)
                unsent.extend((p, kind) for p in waiting if p.deadline <= now)
                waiting.clear()
                waiting.extend(keep)
        dropped: list[PendingRequest] = []
        if self._dropped:
            dropped = [p for p in self._dropped if p.deadline <= now]
            self._dropped = [p for p in self._dropped if p.deadline > now]
        return unsent, dropped

    def deadlines(self) -> Iterator[float]:
        """Every time something here must be looked at again (deadlines, held-back ends)."""
        if self._delayed:
            yield self._delayed[0].due
        for pending in self._dropped:
            yield pending.deadline
        for pending in self._any:
            yield pending.deadline
        for waiting in self._waiting.values():
            for pending in waiting:
                yield pending.deadline

    def take_all(self) -> list[tuple[PendingRequest, int | None]]:
        """Everything held, emptied (the shutdown fails it): ``(request, node)``, where node is
        the node id it waited for or was answered by, None for any node or a dropped one."""
        held: list[tuple[PendingRequest, int | None]] = [(p, None) for p in self._any]
        self._any = deque()
        for node_id, waiting in self._waiting.items():
            held.extend((p, node_id) for p in waiting)
        self._waiting = {}
        held.extend((p, None) for p in self._dropped)
        self._dropped = []
        held.extend((item.event.request, item.node) for item in self._delayed)
        self._delayed = []
        return held
