"""Reconciliation: ordering of revocation steps, newer targets, fencing mid-way, topic names."""

from __future__ import annotations

from typing import Any

from membership_harness import MEMBER_ID, TOPIC_IDS, Harness, tps

from kafka_actors.errors import RequestTimedOutError
from kafka_actors.protocol.group.consumer.membership import (
    AssignmentChanged,
    CommitBeforeRevocation,
    InvokeAssigned,
    InvokeLost,
    InvokeRevoked,
    MemberEpochChanged,
    MemberState,
    NeedTopicNames,
    PauseFetching,
)

S = MemberState
REBALANCE_EVENTS = (
    PauseFetching,
    CommitBeforeRevocation,
    InvokeRevoked,
    AssignmentChanged,
    InvokeAssigned,
    InvokeLost,
)


def kinds(events: list[Any]) -> list[str]:
    return [type(e).__name__ for e in events if isinstance(e, REBALANCE_EVENTS)]


def new_target(h: Harness, assignment: dict[str, list[int]], epoch: int = 2) -> None:
    h.advance(5_000)
    h.respond(h.heartbeat(), epoch=epoch, assignment=assignment)


def test_revocation_order_without_auto_commit() -> None:
    h = Harness()
    h.stable_with({"a": [0, 1]})
    new_target(h, {"a": [1], "b": [0]})
    assert h.m.state is S.RECONCILING
    events = h.take_events()
    assert kinds(events) == ["PauseFetching", "InvokeRevoked"]
    assert h.of(PauseFetching, events)[0].partitions == tps(("a", 0))
    (revoked,) = h.of(InvokeRevoked, events)
    assert revoked.partitions == tps(("a", 0))
    # Records of a-0 must not be returned any more; it is still owned until the callback ends.
    assert h.m.partitions_pending_revocation == tps(("a", 0))
    assert h.m.assignment == tps(("a", 0), ("a", 1))

    h.m.on_callback_completed(revoked.callback_id)
    events = h.take_events()
    assert kinds(events) == ["AssignmentChanged", "InvokeAssigned"]
    assert h.of(AssignmentChanged, events)[0].assignment == tps(("a", 1), ("b", 0))
    (assigned,) = h.of(InvokeAssigned, events)
    assert assigned.partitions == tps(("b", 0))
    assert assigned.assignment == tps(("a", 1), ("b", 0))
    assert h.m.partitions_pending_revocation == frozenset()
    assert h.m.partitions_awaiting_callback == tps(("b", 0))
    assert h.m.state is S.RECONCILING

    h.m.on_callback_completed(assigned.callback_id)
    assert h.m.state is S.ACKNOWLEDGING
    ack = h.heartbeat().request
    assert {(str(t.topic_id), t.partitions) for t in ack.topic_partitions} == {
        (TOPIC_IDS["a"], (1,)),
        (TOPIC_IDS["b"], (0,)),
    }
    assert ack.member_epoch == 2
    assert h.m.state is S.STABLE


def test_revocation_order_with_auto_commit() -> None:
    h = Harness(auto_commit=True, rebalance_timeout_ms=60_000)
    h.stable_with({"a": [0, 1]})
    new_target(h, {"a": [1]})
    # KAFKA-18641: with auto-commit the reconciliation starts only from an application poll.
    assert kinds(h.take_events()) == []
    h.advance(10)
    h.m.on_poll(h.now)
    events = h.take_events()
    assert kinds(events) == ["PauseFetching", "CommitBeforeRevocation"]
    (commit,) = h.of(CommitBeforeRevocation, events)
    assert commit.partitions == tps(("a", 0))
    assert commit.deadline_ms == h.now + 60_000
    assert kinds(h.take_events()) == []  # no callback before the commit completes

    h.m.on_commit_done(commit.commit_id + 1000)  # not ours: ignored
    assert kinds(h.take_events()) == []
    h.m.on_commit_done(commit.commit_id, RequestTimedOutError())  # failed: proceed anyway
    events = h.take_events()
    assert kinds(events) == ["InvokeRevoked"]
    h.m.on_callback_completed(h.of(InvokeRevoked, events)[0].callback_id)
    events = h.take_events()
    assert kinds(events) == ["AssignmentChanged", "InvokeAssigned"]
    assert h.of(InvokeAssigned, events)[0].partitions == frozenset()


def test_auto_commit_also_before_pure_additions() -> None:
    h = Harness(auto_commit=True)
    h.stable_with({"a": [0]})
    new_target(h, {"a": [0, 1]})
    h.m.on_poll(h.now)
    events = h.take_events()
    assert kinds(events) == ["CommitBeforeRevocation"]
    h.m.on_commit_done(h.of(CommitBeforeRevocation, events)[0].commit_id)
    events = h.take_events()
    assert kinds(events) == ["AssignmentChanged", "InvokeAssigned"]
    assert h.of(InvokeAssigned, events)[0].partitions == tps(("a", 1))


def test_newer_target_during_reconciliation_waits_for_the_current_one() -> None:
    h = Harness()
    h.stable_with({"a": [0, 1]})
    new_target(h, {"a": [1]})
    (revoked,) = h.of(InvokeRevoked, h.take_events())
    # While the callback runs, the member keeps heartbeating and gets a newer target.
    new_target(h, {"b": [0]}, epoch=3)
    assert h.m.state is S.RECONCILING
    assert h.m.member_epoch == 3
    assert kinds(h.take_events()) == []  # one reconciliation at a time

    h.m.on_callback_completed(revoked.callback_id)
    events = h.take_events()
    (assigned,) = h.of(InvokeAssigned, events)
    assert assigned.assignment == tps(("a", 1))  # the first target completes first
    h.m.on_callback_completed(assigned.callback_id)
    ack = h.heartbeat().request
    assert {str(t.topic_id) for t in ack.topic_partitions} == {TOPIC_IDS["a"]}
    assert h.m.state is S.RECONCILING  # the newer target is next

    events = h.take_events()
    assert kinds(events) == ["PauseFetching", "InvokeRevoked"]
    assert h.of(InvokeRevoked, events)[0].partitions == tps(("a", 1))
    h.m.on_callback_completed(h.of(InvokeRevoked, events)[0].callback_id)
    events = h.take_events()
    assert h.of(InvokeAssigned, events)[0].partitions == tps(("b", 0))
    h.m.on_callback_completed(h.of(InvokeAssigned, events)[0].callback_id)
    h.respond(h.requests[-1], epoch=3)
    assert h.heartbeat().request.topic_partitions[0].partitions == (0,)
    assert h.m.state is S.STABLE


def test_fence_during_revocation_callback() -> None:
    h = Harness()
    h.stable_with({"a": [0, 1]})
    new_target(h, {"a": [1]})
    (revoked,) = h.of(InvokeRevoked, h.take_events())
    h.advance(5_000)
    h.respond(h.heartbeat(), error=110)  # FENCED_MEMBER_EPOCH
    assert h.m.state is S.FENCED
    assert h.m.member_epoch == 0
    events = h.take_events()
    assert MemberEpochChanged(MEMBER_ID, None) in events
    assert kinds(events) == []  # the lost callback waits for the running one
    h.no_heartbeat()

    h.m.on_callback_completed(revoked.callback_id)
    events = h.take_events()
    # The stale reconciliation is discarded: no assignment update, no onPartitionsAssigned.
    # a-1 is no longer fetched nor returned (a-0 already was, being revoked).
    assert kinds(events) == ["PauseFetching", "InvokeLost"]
    assert events[0].partitions == tps(("a", 1))
    (lost,) = h.of(InvokeLost, events)
    assert lost.partitions == tps(("a", 0), ("a", 1))
    assert h.m.assignment == tps(("a", 0), ("a", 1))
    h.no_heartbeat()

    h.m.on_callback_completed(lost.callback_id)
    assert h.m.assignment == frozenset()
    assert h.m.state is S.JOINING
    body = h.heartbeat().request  # at once, no backoff
    assert body.member_epoch == 0
    assert body.subscribed_topic_names == ("a",)
    assert body.topic_partitions == ()
    assert body.server_assignor == "uniform"
    h.respond(h.requests[-1], epoch=5, assignment={"a": [0]})
    events = h.take_events()
    assert h.of(InvokeAssigned, events)[0].partitions == tps(("a", 0))


def test_fence_during_assigned_callback() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    new_target(h, {"a": [0, 1]})
    (assigned,) = h.of(InvokeAssigned, h.take_events())
    h.advance(5_000)
    h.respond(h.heartbeat(), error=25)  # UNKNOWN_MEMBER_ID
    assert h.m.state is S.FENCED
    h.m.on_callback_completed(assigned.callback_id)
    assert h.m.state is S.FENCED  # no ACKNOWLEDGING for a stale reconciliation
    (lost,) = h.of(InvokeLost, h.take_events())
    assert lost.partitions == tps(("a", 0), ("a", 1))
    h.m.on_callback_completed(lost.callback_id)
    assert h.m.state is S.JOINING


def test_unresolved_topic_ids_stay_pending() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    h.m._reconciler._topic_names.pop(TOPIC_IDS["b"])  # the metadata has not seen topic b yet
    new_target(h, {"a": [0, 1], "b": [0]})
    events = h.take_events()
    assert h.of(NeedTopicNames, events) == [NeedTopicNames(frozenset({TOPIC_IDS["b"]}))]
    (assigned,) = h.of(InvokeAssigned, events)
    assert assigned.partitions == tps(("a", 1))  # the resolvable part is reconciled
    h.m.on_callback_completed(assigned.callback_id)
    ack = h.heartbeat().request
    assert {str(t.topic_id) for t in ack.topic_partitions} == {TOPIC_IDS["a"]}
    assert h.m.state is S.RECONCILING
    assert h.m.target_assignment.partitions >= {(TOPIC_IDS["b"], 0)}

    h.names("b")
    events = h.take_events()
    (assigned,) = h.of(InvokeAssigned, events)
    assert assigned.partitions == tps(("b", 0))


def test_need_topic_names_not_repeated_until_answered() -> None:
    h = Harness()
    request = h.join("a")
    h.respond(request, epoch=1, assignment={"c": [0]})
    events = h.take_events()
    first = h.of(NeedTopicNames, events)
    assert first == [NeedTopicNames(frozenset({TOPIC_IDS["c"]}))]
    h.m.on_callback_completed(h.of(InvokeAssigned, events)[0].callback_id)
    h.respond(h.ack(), epoch=1)
    assert h.of(NeedTopicNames, h.take_events()) == []
    h.m.on_topic_names({})  # answered without the name: ask again
    assert h.of(NeedTopicNames, h.take_events()) == first


def test_partially_resolved_new_target_equal_to_owned_is_acknowledged() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    h.m._reconciler._topic_names.pop(TOPIC_IDS["b"])
    new_target(h, {"a": [0], "b": [0]})
    events = h.take_events()
    assert kinds(events) == []  # nothing to revoke or assign
    assert h.of(NeedTopicNames, events)
    # The resolvable part is what the member owns: acknowledged at once, owned re-sent.
    ack = h.requests[-1].request
    assert [(str(t.topic_id), t.partitions) for t in ack.topic_partitions] == [
        (TOPIC_IDS["a"], (0,))
    ]
    assert h.m.state is S.RECONCILING  # b-0 is still pending


def test_revoked_callback_failure_stays_reconciling_and_retries_on_application_poll() -> None:
    h = Harness()
    h.stable_with({"a": [0, 1]})
    new_target(h, {"a": [1]})
    (revoked,) = h.of(InvokeRevoked, h.take_events())
    h.m.on_callback_completed(revoked.callback_id, RuntimeError("listener failed"))
    assert h.m.state is S.RECONCILING
    assert h.m.assignment == tps(("a", 0), ("a", 1))
    assert not h.m.reconciliation_in_progress
    assert kinds(h.take_events()) == []  # no retry from the background poll
    h.advance(5_000)
    body = h.heartbeat().request
    assert body.topic_partitions is None  # no ack: the broker keeps waiting (or fences)
    h.respond(h.requests[-1], epoch=2)
    h.m.on_poll(h.now)
    events = h.take_events()
    assert kinds(events) == ["InvokeRevoked"]  # a-0 is still paused
    assert h.m.partitions_pending_revocation == tps(("a", 0))


def test_assigned_callback_failure_keeps_partitions_not_fetchable() -> None:
    h = Harness()
    h.stable_with({"a": [0]})
    new_target(h, {"a": [0, 1]})
    (assigned,) = h.of(InvokeAssigned, h.take_events())
    h.m.on_callback_completed(assigned.callback_id, RuntimeError("boom"))
    assert h.m.state is S.RECONCILING
    assert h.m.assignment == tps(("a", 0), ("a", 1))
    assert h.m.partitions_awaiting_callback == tps(("a", 1))
    h.m.on_poll(h.now)
    (again,) = h.of(InvokeAssigned, h.take_events())
    assert again.partitions == frozenset()  # already in the assignment (as Java)
    h.m.on_callback_completed(again.callback_id)
    assert h.m.partitions_awaiting_callback == frozenset()
    assert h.m.state is S.ACKNOWLEDGING


def test_unknown_callback_completion_is_ignored() -> None:
    h = Harness()
    h.stable_with({"a": [0, 1]})
    new_target(h, {"a": [1]})
    (revoked,) = h.of(InvokeRevoked, h.take_events())
    h.m.on_callback_completed(revoked.callback_id + 100)
    assert kinds(h.take_events()) == []
    h.m.on_callback_completed(revoked.callback_id)
    h.m.on_callback_completed(revoked.callback_id)  # twice: the second is ignored
    assert len(h.of(InvokeAssigned, h.take_events())) == 1


def test_assignment_removed_by_broker_while_unresolved_goes_stable() -> None:
    h = Harness()
    request = h.join("a")
    h.respond(request, epoch=1, assignment={"c": [0]})
    h.complete_all_callbacks()
    h.respond(h.ack(), epoch=1)
    assert h.m.state is S.RECONCILING
    h.events.clear()
    h.advance(5_000)
    h.respond(h.heartbeat(), epoch=2, assignment={})
    events = h.take_events()
    assert kinds(events) == []
    assert h.m.state is S.STABLE
    assert h.requests[-1].request.topic_partitions == ()
