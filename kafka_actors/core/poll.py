"""One poll step for every front end: :class:`PollStep`.

Owns: what a poll does around its collect, written once for ``KafkaConsumer.poll``,
``AsyncKafkaConsumer.getmany`` (and its siblings), ``KafkaShareConsumer.poll`` and
``AsyncKafkaShareConsumer.poll``: the poll's :class:`~kafka_actors.actors.events.PollEvent` to
the group actors (membership and commit: the poll timer, auto-commit, a join to start;
coalesced with :class:`~kafka_actors.actors.events.PollLatch`), the checks before each
collect (the core's :meth:`PollCore.prepare_collect`), the generation of the fetch buffer a
poll that found nothing waits on, what ends such a wait (:meth:`PollStep.ready`), and telling
the group actors again while a poll waits (every :data:`POLL_EVENT_INTERVAL_S`, as Java sends a
PollEvent per loop of ``poll()``). Front ends differ only in how they wait: blocking on the
context's signal, or awaiting their loop's wake-up, until :meth:`PollStep.ready` or
:attr:`PollStep.next_event_at`.

Polls that follow one another with records (a consumer reading at full speed: hundreds or
thousands of polls a second) tell a group actor at most once per :data:`POLL_EVENT_SPACING_S`:
each event wakes the actor's thread, and two wake-ups per poll were a third of the voluntary
context switches of a no-op ``ParallelConsumer`` (the GIL changing hands each time). What an
event does is not changed, only how stale an actor's view of the last poll may be: the poll
timer (``max.poll.interval.ms``, far longer), an auto-commit or a reconciliation due, happen
at most that much later. A poll that follows one that returned nothing tells the actors as
always (a join to start, an error the group reported once per poll).

May touch: the consumer's context (fetch buffer generation, background events), the facade
(tells, wake-up, open), the core it is given (through :class:`PollCore`).
"""

from __future__ import annotations

import time
from typing import Final, Protocol

from kafka_actors.actors.context import ConsumerContext
from kafka_actors.actors.events import PollEvent, PollLatch, PositionsChangedEvent
from kafka_actors.actors.facade import Facade
from kafka_actors.supervisors import SupervisorTree

__all__ = ["POLL_EVENT_INTERVAL_S", "POLL_EVENT_SPACING_S", "PollCore", "PollStep"]

#: A waiting poll tells the group actors again this often: with auto-commit, a new assignment
#: is reconciled on a poll event only, which must not wait for the poll's timeout.
POLL_EVENT_INTERVAL_S: Final = 0.1

#: A poll right after one that returned records tells an actor only when its last event is at
#: least this old (module doc).
POLL_EVENT_SPACING_S: Final = 0.01


class PollCore(Protocol):
    """What a poll step needs of its core (``ConsumerCore``, ``ShareCore``)."""

    def prepare_collect(self, trace: str) -> None:
        """The checks and position updates before each collect (raises what the application
        must see: the group protocol refused, an unsupported broker ...)."""
        ...

    def init_done(self) -> bool:
        """Whether a positions lookup a poll waits for ended (wakes a waiting poll)."""
        ...


class PollStep:
    """One poll's steps (see the module docstring); one per front end, used by its polling
    thread only (the sync consumer's poll lock, the asyncio loop)."""

    def __init__(
        self,
        ctx: ConsumerContext,
        facade: Facade,
        tree: SupervisorTree,
        core: PollCore,
        *,
        group: bool,
        commit_while_waiting: bool = True,
    ) -> None:
        self._ctx = ctx
        self._buffer = ctx.fetch_buffer
        self._facade = facade
        self._tree = tree
        self._core = core
        #: The group actors told at each poll, each with its PollLatch (none without a group).
        self._latches = {"membership": PollLatch(), "commit": PollLatch()} if group else {}
        #: Who a waiting poll tells again: membership (its poll timer, a reconciliation
        #: waiting for a poll), and the commit manager (its auto-commit) unless the front end
        #: auto-commits at the start of each call only (the asyncio consumer: what a call
        #: returns is committed by a later call, as before the auto-commit moved here).
        self._waiting_targets = tuple(
            t for t in self._latches if commit_while_waiting or t != "commit"
        )
        #: When a waiting poll tells the group actors again (monotonic seconds).
        self.next_event_at = float("inf")
        #: The last poll returned records (:meth:`delivered`): this one may space its events.
        self._delivered = False

    @property
    def generation(self) -> int:
        """The fetch buffer's generation: read before a collect, waited on when it found
        nothing (:meth:`ready`)."""
        return self._buffer.generation

    def start(self, trace: str) -> None:
        """A poll begins: its PollEvent to the membership and commit actors, unless the one an
        earlier poll told an actor is still in its inbox (:class:`PollLatch`): the actor reads
        its clock for that event after this poll started, so it stands for this poll too (the
        poll timer, auto-commit due, a rebalance to start). Saves a queue put and a thread
        wake-up per poll and actor when polls come faster than the actors run. An event not
        received within POLL_EVENT_INTERVAL_S (a restarting actor's inbox) is not trusted.
        Right after a poll that returned records, an actor told less than
        POLL_EVENT_SPACING_S ago is not told again (module doc)."""
        spaced = self._delivered
        self._delivered = False
        if not self._latches:
            return
        facade = self._facade
        now = time.monotonic()
        for target, latch in self._latches.items():
            age = now - latch.told_at
            if (latch.pending and age < POLL_EVENT_INTERVAL_S) or (
                spaced and age < POLL_EVENT_SPACING_S
            ):
                continue
            latch.pending = True
            latch.told_at = now
            if not facade.tell(target, PollEvent(trace, latch=latch)):
                latch.pending = False
        self.next_event_at = now + POLL_EVENT_INTERVAL_S

    def delivered(self) -> None:
        """The poll returns records: the next one may space its events (module doc)."""
        self._delivered = True

    def turn(self, trace: str) -> None:
        """Each turn of a poll before it collects (after the front end ran what the
        background reported): a pending ``wakeup()``, the core's checks and positions."""
        self._facade.check_wakeup()
        self._core.prepare_collect(trace)

    def idle(self, trace: str) -> None:
        """A collect found nothing and the poll is about to wait (the sync front end): the
        fetch actor looks at the positions again, in case a seek or a reset moved them."""
        self._facade.tell("fetch", PositionsChangedEvent(trace))

    def ready(self, seen: int) -> bool:
        """Whether a poll waiting since it found nothing at generation ``seen`` should look
        again: background events, data (or an error) buffered since, a ``wakeup()``, the tree
        gave up, the consumer closed, a positions lookup ended."""
        facade = self._facade
        return (
            bool(self._ctx.background)
            or self._buffer.generation != seen
            or facade.wakeup_pending()
            or self._tree.fatal_error is not None
            or facade.closed
            or self._core.init_done()
        )

    def wait_until(self, deadline: float) -> float:
        """Until when a poll that found nothing may wait: its ``deadline``, or sooner when the
        group actors are to be told again."""
        return min(deadline, self.next_event_at)

    def waited(self, trace: str) -> None:
        """After a wait: the group actors are told again when due (a poll still waiting)."""
        if not self._waiting_targets:
            return
        now = time.monotonic()
        if now < self.next_event_at:
            return
        event = PollEvent(trace, waiting=True)
        for target in self._waiting_targets:
            self._facade.tell(target, event)
        self.next_event_at = now + POLL_EVENT_INTERVAL_S
