"""Classic membership: no record of a lost partition may be returned once onPartitionsLost is
asked for.

The manager clears the assignment only when the callback's reply comes back to it, while the
application thread polls on (the membership actor may be slow to take the reply, a loaded
machine). Java's ConsumerCoordinator clears it on the application thread right after
onPartitionsLost returns, so a listener that forgets a lost partition's position must never see
a record of it again; here the partitions are marked pending revocation (PauseFetching) before
the callback is asked for, as for onPartitionsRevoked.

Seen in ``tests/consumer_resilience/test_recovery.py`` (classic, fenced by UNKNOWN_MEMBER_ID):
records of a lost partition were handed out after onPartitionsLost, the test's member kept
their position (4: 2008), committed it in the next generation, then committed the position
it had reached from the group's older committed offset (4: 766): committed offsets went
backwards.

The events the manager publishes are applied to a :class:`SubscriptionState` as the
membership actor and the facade apply them (``PauseFetching`` → pending revocation,
``AssignmentChanged`` → the assignment, onPartitionsAssigned done → fetchable).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.heartbeat.v4 import request as hb_req
from kio.schema.join_group.v9 import request as join_req
from kio.schema.sync_group.v5 import request as sync_req

from kafka_actors.protocol.group.consumer.membership import InvokeAssigned, InvokeLost
from kafka_actors.protocol.group.events import AssignmentChanged, PauseFetching
from kafka_actors.protocol.subscription import OffsetResetStrategy, SubscriptionState

from .classic_harness import (
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    UNKNOWN_MEMBER_ID,
    Driver,
    heartbeat_response,
    join_response,
    sync_response,
    tps,
)

OWNED = tps(("a", 0), ("a", 1))


class Mirror:
    """The consumer's SubscriptionState as the actors keep it from the manager's events."""

    def __init__(self) -> None:
        self.subs = SubscriptionState(OffsetResetStrategy.of("earliest"))
        self.subs.subscribe(["a", "b"])
        self.seen = 0

    def apply(self, d: Driver) -> list[InvokeLost]:
        """Apply the events published since the last call; return the InvokeLost among them,
        each with the lost partitions checked at the moment it is published."""
        lost: list[InvokeLost] = []
        for event in d.events[self.seen :]:
            if isinstance(event, PauseFetching):
                self.subs.mark_pending_revocation(event.partitions)
            elif isinstance(event, AssignmentChanged):
                added = event.assignment - self.subs.assigned_partitions()
                self.subs.assign_from_subscribed_awaiting_callback(event.assignment, added)
                for tp in added:
                    self.subs.seek(tp, 100)
            elif isinstance(event, InvokeAssigned):
                self.subs.enable_fetching_for_new_partitions(event.partitions)
            elif isinstance(event, InvokeLost):
                lost.append(event)
                returnable = sorted(
                    str(tp) for tp in event.partitions if self.subs.is_fetchable(tp)
                )
                assert not returnable, f"records of lost partitions still returned: {returnable}"
        self.seen = len(d.events)
        return lost


def _stable(**config: Any) -> tuple[Driver, Mirror]:
    d = Driver(**config)
    mirror = Mirror()
    join = d.join_request("a")
    d.respond(join, join_response(generation=1, member_id="m-1"))
    sync = d.one(sync_req.SyncGroupRequest)
    d.respond(sync, sync_response(OWNED))
    d.complete_callbacks()
    mirror.apply(d)
    assert all(mirror.subs.is_fetchable(tp) for tp in OWNED)
    return d, mirror


def _heartbeat_answers(code: int) -> Callable[[Driver], None]:
    def fence(d: Driver) -> None:
        d.advance(3_000)
        d.respond(d.one(hb_req.HeartbeatRequest), heartbeat_response(code))
        d.m.on_poll(d.now)  # the next application poll releases the partitions as lost

    return fence


def _leave_during_rebalance(d: Driver) -> None:
    d.m.subscribe(["a", "b"])
    d.m.on_poll(d.now)
    d.complete_callbacks()
    d.one(join_req.JoinGroupRequest)
    d.m.leave_group(d.now)  # a rebalance is in progress: released as lost (as Java)


@pytest.mark.parametrize(
    ("how", "config"),
    [
        (_heartbeat_answers(UNKNOWN_MEMBER_ID), {}),
        (_heartbeat_answers(ILLEGAL_GENERATION), {"auto_commit_enabled": True}),
        (_heartbeat_answers(FENCED_INSTANCE_ID), {"group_instance_id": "instance-1"}),
        (_leave_during_rebalance, {"assignors": ("cooperative-sticky",)}),
    ],
    ids=["unknown-member-id", "illegal-generation", "fatal", "leave-during-rebalance"],
)
def test_lost_partitions_are_not_returned_once_on_partitions_lost_is_asked(
    how: Callable[[Driver], None], config: dict[str, Any]
) -> None:
    d, mirror = _stable(**config)
    how(d)
    d.poll()
    (lost,) = mirror.apply(d)
    assert lost.partitions == OWNED
    # The reply is not back yet (the actor is slow): still assigned, still not returned.
    d.advance(1_000)
    d.poll()
    mirror.apply(d)
    assert mirror.subs.assigned_partitions() == OWNED
    assert not [tp for tp in OWNED if mirror.subs.is_fetchable(tp)]
    d.m.on_callback_completed(lost.callback_id)
    d.poll()
    mirror.apply(d)
    assert mirror.subs.assigned_partitions() == frozenset()
