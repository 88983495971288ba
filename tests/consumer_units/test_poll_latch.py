"""The poll step's PollEvent coalescing (:class:`PollLatch`): a poll tells the group actors
only when the event an earlier poll told is no longer waiting in their inbox (or is older
than the resend interval), and an actor clears the latch before it reads its clock."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from kafka_actors.actors.base import ManagerActor
from kafka_actors.actors.events import PollEvent, PollLatch
from kafka_actors.core.poll import POLL_EVENT_INTERVAL_S, PollStep


class _Facade:
    def __init__(self, delivered: bool = True) -> None:
        self.told: list[tuple[str, Any]] = []
        self.delivered = delivered

    def tell(self, target: str, event: Any) -> bool:
        self.told.append((target, event))
        return self.delivered


def _consumer(facade: _Facade) -> Any:
    return SimpleNamespace(
        _facade=facade,
        _latches={"membership": PollLatch(), "commit": PollLatch()},
        _delivered=False,  # the last poll returned nothing: no spacing of events
    )


def test_a_poll_event_still_queued_stands_for_the_next_polls() -> None:
    facade = _Facade()
    consumer = _consumer(facade)
    PollStep.start(consumer, "t1")
    assert [t for t, _ in facade.told] == ["membership", "commit"]
    assert all(isinstance(e, PollEvent) and not e.waiting for _, e in facade.told)
    PollStep.start(consumer, "t2")  # neither actor received its event yet
    assert len(facade.told) == 2
    # The membership actor receives its event: the next poll tells it (only it) again.
    latch = facade.told[0][1].latch
    assert latch is consumer._latches["membership"] and latch.pending
    _received(facade.told[0][1])
    assert not latch.pending
    PollStep.start(consumer, "t3")
    assert [(t, e.trace_id) for t, e in facade.told[2:]] == [("membership", "t3")]


def test_an_event_not_received_in_time_is_not_trusted() -> None:
    facade = _Facade()
    consumer = _consumer(facade)
    PollStep.start(consumer, "t1")
    for latch in consumer._latches.values():
        latch.told_at = time.monotonic() - POLL_EVENT_INTERVAL_S  # lost (a restart, say)
    PollStep.start(consumer, "t2")
    assert [(t, e.trace_id) for t, e in facade.told[2:]] == [("membership", "t2"), ("commit", "t2")]


def test_an_event_not_delivered_is_told_again_at_the_next_poll() -> None:
    facade = _Facade(delivered=False)
    consumer = _consumer(facade)
    PollStep.start(consumer, "t1")
    assert not any(latch.pending for latch in consumer._latches.values())
    PollStep.start(consumer, "t2")
    assert len(facade.told) == 4


def test_the_latch_does_not_change_what_an_event_compares_equal_to() -> None:
    assert PollEvent("t", latch=PollLatch()) == PollEvent("t")


def _received(event: PollEvent) -> None:
    """A manager actor's before_receive for ``event`` (no actor started)."""
    actor = object.__new__(ManagerActor)
    actor.faults = None  # type: ignore[attr-defined]
    ManagerActor.before_receive(actor, event)
