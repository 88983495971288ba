"""A poll told before the group actors run is not lost.

``KafkaConsumer(...); subscribe(...); poll(...)`` tells the membership actor a PollEvent
before the supervision tree has started it: that tell is dropped (no such child yet). The
member then used to join only at the next poll event (a waiting poll re-sends one every
100 ms; a ``poll(0)`` never). The facade remembers in the shared context that the application
polled, and the membership actor's first incarnation acts on it when it is built, as a restarted
one does (no pykka, no broker: the actor is built around a stub context, as in
``test_routing_behaviour``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kafka_actors.actors.events import PollEvent, PositionsChangedEvent
from kafka_actors.actors.facade import Facade
from kafka_actors.actors.managers import MembershipActor
from kafka_actors.config import ConsumerConfig
from kafka_actors.log import get_logger
from kafka_actors.protocol import membership as m848
from kafka_actors.protocol.member_state import MemberState
from kafka_actors.protocol.subscription import SubscriptionState


class _DroppingCtx:
    """A context whose tells all fail (the target actor is not running yet)."""

    def __init__(self) -> None:
        self.polled = False
        self.told: list[tuple[str, Any]] = []

    def tell(self, name: str, message: Any) -> bool:
        self.told.append((name, message))
        return False


def _facade(ctx: _DroppingCtx) -> Facade:
    facade = object.__new__(Facade)
    facade.ctx = ctx  # type: ignore[assignment]
    return facade


def test_a_poll_is_remembered_even_when_its_tell_is_dropped() -> None:
    ctx = _DroppingCtx()
    facade = _facade(ctx)
    assert facade.tell("fetch", PositionsChangedEvent("t")) is False
    assert ctx.polled is False  # only a poll counts
    assert facade.tell("membership", PollEvent("t")) is False
    assert ctx.polled is True
    assert [name for name, _ in ctx.told] == ["fetch", "membership"]


def _membership(*, polled: bool, generation: int) -> tuple[MembershipActor, Any]:
    config = ConsumerConfig.from_dict({"bootstrap.servers": "localhost:9092", "group.id": "g"})
    manager = m848.ConsumerMembershipManager(
        m848.MembershipConfig.from_consumer_config(config, heartbeat_api_version=1),
        random=lambda: 0.5,
        member_id_factory=lambda: "member-1",
        client_id="c",
    )
    subscriptions = SubscriptionState()
    subscriptions.subscribe(["orders"])
    ctx = SimpleNamespace(
        polled=polled,
        coordinator_id=None,
        cluster=None,
        subscriptions=subscriptions,
        now_ms=lambda: 1_000,
    )
    actor = object.__new__(MembershipActor)
    actor.ctx = ctx  # type: ignore[assignment]
    actor.log = get_logger("membership")
    actor.manager = manager
    actor.generation = generation
    return actor, manager


def test_the_first_incarnation_joins_on_a_poll_told_before_it_ran() -> None:
    actor, manager = _membership(polled=True, generation=1)
    assert manager.state is MemberState.UNSUBSCRIBED
    actor.rebuild()
    assert manager.state is MemberState.JOINING


def test_the_first_incarnation_waits_for_a_poll_when_none_was_told() -> None:
    actor, manager = _membership(polled=False, generation=1)
    actor.rebuild()
    # Java's semantics: subscribing alone does not join; the first poll does
    assert manager.state is MemberState.UNSUBSCRIBED


@pytest.mark.parametrize("polled", [False, True])
def test_a_restarted_incarnation_rejoins_without_a_poll(polled: bool) -> None:
    actor, manager = _membership(polled=polled, generation=2)
    actor.rebuild()
    assert manager.state is MemberState.JOINING
