"""The poll step every front end shares (kafka_actors.core.poll.PollStep): who a waiting poll
tells again, and when; what ends a wait."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kafka_actors.actors.events import PollEvent
from kafka_actors.core.poll import POLL_EVENT_SPACING_S, PollStep
from kafka_actors.protocol.fetch.buffer import FetchBuffer
from kafka_actors.protocol.subscription import SubscriptionState


class _Facade:
    closed = False

    def __init__(self) -> None:
        self.told: list[tuple[str, Any]] = []

    def tell(self, target: str, event: Any) -> bool:
        self.told.append((target, event))
        return True

    def check_wakeup(self) -> None:
        pass

    def wakeup_pending(self) -> bool:
        return False


class _Core:
    def __init__(self) -> None:
        self.prepared: list[str] = []

    def prepare_collect(self, trace: str) -> None:
        self.prepared.append(trace)

    def init_done(self) -> bool:
        return False


def _step(*, group: bool = True, commit_while_waiting: bool = True) -> tuple[Any, _Facade, Any]:
    facade = _Facade()
    ctx = SimpleNamespace(fetch_buffer=FetchBuffer(SubscriptionState()), background=[])
    tree = SimpleNamespace(fatal_error=None)
    step = PollStep(
        ctx,  # type: ignore[arg-type]
        facade,  # type: ignore[arg-type]
        tree,  # type: ignore[arg-type]
        _Core(),
        group=group,
        commit_while_waiting=commit_while_waiting,
    )
    return step, facade, ctx


def test_a_waiting_poll_tells_the_group_actors_again_only_when_due() -> None:
    step, facade, _ = _step()
    step.start("t")
    assert [t for t, _ in facade.told] == ["membership", "commit"]
    step.waited("t")  # woken before the interval passed: nothing more
    assert len(facade.told) == 2
    step.next_event_at = 0.0  # the interval passed
    step.waited("t")
    assert [(t, e.waiting) for t, e in facade.told[2:]] == [("membership", True), ("commit", True)]
    assert all(isinstance(e, PollEvent) for _, e in facade.told)


def test_the_asyncio_consumer_tells_the_commit_manager_at_call_starts_only() -> None:
    step, facade, _ = _step(commit_while_waiting=False)
    step.start("t")
    assert [t for t, _ in facade.told] == ["membership", "commit"]
    step.next_event_at = 0.0
    step.waited("t")
    assert [t for t, _ in facade.told[2:]] == ["membership"]


def test_without_a_group_nothing_is_told_and_a_wait_lasts_until_the_deadline() -> None:
    step, facade, _ = _step(group=False)
    step.start("t")
    step.waited("t")
    assert facade.told == []
    assert step.wait_until(12.5) == 12.5


def test_a_wait_ends_when_the_fetch_buffer_was_woken() -> None:
    step, _, ctx = _step()
    seen = step.generation
    assert not step.ready(seen)
    ctx.fetch_buffer.wakeup()
    assert step.ready(seen)
    step.turn("t")
    assert step._core.prepared == ["t"]


def _received(facade: _Facade) -> None:
    """The actors took every event told so far (what their before_receive does)."""
    for _, event in facade.told:
        if event.latch is not None:
            event.latch.pending = False


def test_polls_returning_records_back_to_back_space_their_events() -> None:
    step, facade, _ = _step()
    step.start("t1")
    _received(facade)
    step.delivered()  # t1 returned records
    step.start("t2")  # at once: the actors heard of a poll less than the spacing ago
    assert [t for t, _ in facade.told] == ["membership", "commit"]
    for _, event in facade.told:  # as if told the spacing ago
        event.latch.told_at -= POLL_EVENT_SPACING_S
    step.delivered()
    step.start("t3")
    assert [e.trace_id for _, e in facade.told] == ["t1", "t1", "t3", "t3"]


def test_a_poll_after_one_that_returned_nothing_tells_the_actors_at_once() -> None:
    step, facade, _ = _step()
    step.start("t1")
    _received(facade)
    step.start("t2")  # t1 returned nothing (no delivered()): told however recent t1 was
    _received(facade)
    step.delivered()
    step.start("t3")  # spaced: within the spacing after a poll that returned records
    step.start("t4")  # t3 returned nothing: told
    assert [e.trace_id for _, e in facade.told] == ["t1", "t1", "t2", "t2", "t4", "t4"]
