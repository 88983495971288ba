"""The share consumer's manager actors (KIP-932) follow the routing table: they run under the
consumer's names "membership" and "fetch", every event the table sends to that name in a
share consumer has a receiver, their receivers take only what the table sends there, and the
events the share managers publish have rows."""

from __future__ import annotations

import typing

from kafka_actors.actors.managers.share_fetch import ShareFetchActor
from kafka_actors.actors.managers.share_membership import ShareMembershipActor
from kafka_actors.actors.routing import ACTORS, CALLER, POLLER, ROUTES, To, route_of
from kafka_actors.log import get_logger
from kafka_actors.protocol.fetch.manager import MetadataRefreshNeeded
from kafka_actors.protocol.group import events as group_events
from kafka_actors.protocol.group.coordinator import CoordinatorChanged
from kafka_actors.protocol.metadata import ClusterUpdated
from kafka_actors.protocol.share.fetch import (
    AcknowledgementsCommitted,
    ShareCloseCompleted,
    ShareCommitCompleted,
)
from kafka_actors.testing import capture_logs

SHARE_ACTORS = (ShareMembershipActor, ShareFetchActor)


def _targets(kind: type) -> set[str]:
    steps = route_of(kind) or ()
    out: set[str] = set()
    for step in steps:
        if isinstance(step, str):
            out.add(step)
        elif isinstance(step, To):
            out.add(step.actor)
    return out


def _sent_to(name: str) -> set[type]:
    sent: set[type] = set()
    for kind, steps in ROUTES.items():
        for step in steps:
            if step == name:
                sent.add(kind)
            elif isinstance(step, To) and step.actor == name:
                sent.add(typing.get_type_hints(step.make)["return"] if step.make else kind)
    return sent


def test_share_actors_run_under_names_the_table_knows() -> None:
    assert {cls.component for cls in SHARE_ACTORS} == {"membership", "fetch"}
    assert {cls.component for cls in SHARE_ACTORS} <= set(ACTORS)


def test_share_receivers_take_only_what_the_table_sends() -> None:
    for cls in SHARE_ACTORS:
        sent = _sent_to(cls.component)
        extra = [kind.__name__ for kind in cls.receivers if kind not in sent]
        assert extra == [], (cls.__name__, extra)


def test_what_a_share_consumer_routes_to_the_share_actors_is_received() -> None:
    from kafka_actors.actors.events import TopicNames

    expected = {
        ShareMembershipActor: {CoordinatorChanged, TopicNames, ClusterUpdated},
        ShareFetchActor: {ClusterUpdated, group_events.AssignmentChanged},
    }
    for cls, kinds in expected.items():
        for kind in kinds:
            assert cls.component in _targets(kind), (kind.__name__, cls.component)
            assert any(c in cls.receivers for c in kind.__mro__), (cls.__name__, kind.__name__)


def test_share_events_have_rows() -> None:
    assert ROUTES[AcknowledgementsCommitted] == (POLLER,)
    assert ROUTES[ShareCommitCompleted] == (CALLER,)
    assert ROUTES[ShareCloseCompleted] == (CALLER,)
    # The share membership and fetch managers publish the consumer's vocabulary for the rest.
    for kind in (
        group_events.AssignmentChanged,
        group_events.NeedTopicNames,
        group_events.CoordinatorUnknown,
        group_events.ErrorEvent,
        group_events.LeaveCompleted,
        MetadataRefreshNeeded,
    ):
        assert route_of(kind) is not None, kind.__name__


def test_a_share_actor_reports_an_event_it_has_no_receiver_for() -> None:
    class Unknown:
        pass

    for cls in SHARE_ACTORS:
        actor = object.__new__(cls)
        actor.log = get_logger(cls.component)
        with capture_logs() as logs:
            actor.receive(Unknown(), 0)
        assert [e["event"] for e in logs] == ["routed_event_not_received"]
