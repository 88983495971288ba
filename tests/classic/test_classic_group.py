"""Classic membership: several managers in one group behind a fake coordinator.

The leader assigns from the JoinGroup metadata the managers themselves produced, so these tests
check the eager and the cooperative protocols end to end (two rounds for cooperative).
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

from kafka_actors.protocol.group.classic.membership import ClassicMemberState
from kafka_actors.protocol.group.consumer.membership import (
    AssignmentChanged,
    InvokeAssigned,
    InvokeLost,
    InvokeRevoked,
    LeaveCompleted,
)
from kafka_actors.protocol.messages import TopicPartition

from .classic_harness import Group, tp


def _settled(group: Group) -> bool:
    return group.coordinator.state == "Stable" and all(
        m.state is ClassicMemberState.STABLE and not m.rejoin_needed
        for m in group.managers.values()
    )


def _no_double_ownership(group: Group) -> None:
    for (a, ma), (b, mb) in combinations(group.managers.items(), 2):
        shared = ma.assignment & mb.assignment
        assert not shared, f"{a} and {b} both own {sorted(map(str, shared))}"


def settle(group: Group, *, max_ticks: int = 60, step_ms: int = 1_000) -> int:
    """Tick (application polls + heartbeats) until every member is STABLE; return the ticks."""
    for ticks in range(max_ticks):
        group.tick(step_ms)
        _no_double_ownership(group)
        if _settled(group):
            return ticks
    raise AssertionError(
        "group did not settle: "
        + ", ".join(f"{n}={m.state.value}/{m.rejoin_needed}" for n, m in group.managers.items())
    )


def partitions(topic: str, *ids: int) -> frozenset[TopicPartition]:
    return frozenset(tp(topic, i) for i in ids)


def callbacks(group: Group, name: str) -> list[tuple[str, frozenset[TopicPartition]]]:
    out: list[tuple[str, frozenset[TopicPartition]]] = []
    for e in group.events[name]:
        if isinstance(e, InvokeRevoked):
            out.append(("revoked", e.partitions))
        elif isinstance(e, InvokeAssigned):
            out.append(("assigned", e.partitions))
        elif isinstance(e, InvokeLost):
            out.append(("lost", e.partitions))
    return out


def test_cooperative_two_rounds_when_a_member_joins() -> None:
    group = Group(["c1"], {"a": 6}, assignors=("cooperative-sticky",))
    settle(group)
    c1 = group.managers["c1"]
    assert c1.assignment == partitions("a", 0, 1, 2, 3, 4, 5)
    generation_before = group.coordinator.generation
    group.clear()

    # Record every moment c1 owns something: it must never give up a0..a2.
    c1_owned: list[frozenset[TopicPartition]] = []

    def watch(name: str, event: Any) -> None:
        if name == "c1" and isinstance(event, AssignmentChanged):
            c1_owned.append(event.assignment)

    group.add("c2", seed=2, assignors=("cooperative-sticky",))
    for _ in range(60):
        group.now += 1_000
        group.poll_app()
        group.run(on_event=watch)
        _no_double_ownership(group)
        if _settled(group):
            break
    c2 = group.managers["c2"]
    assert c1.assignment == partitions("a", 0, 1, 2)
    assert c2.assignment == partitions("a", 3, 4, 5)
    # Two rebalances: c1 revoked only what moved, then c2 got it in the second round.
    assert group.coordinator.generation == generation_before + 2
    assert callbacks(group, "c1") == [
        ("revoked", partitions("a", 3, 4, 5)),
        ("assigned", frozenset()),
        ("assigned", frozenset()),
    ]
    assert callbacks(group, "c2") == [
        ("assigned", frozenset()),
        ("assigned", partitions("a", 3, 4, 5)),
    ]
    assert c1_owned == [partitions("a", 0, 1, 2)]
    assert all(partitions("a", 0, 1, 2) <= owned for owned in c1_owned)


def test_cooperative_third_member_takes_one_partition_from_each() -> None:
    group = Group(["c1", "c2"], {"a": 6}, assignors=("cooperative-sticky",))
    settle(group)
    before = {n: m.assignment for n, m in group.managers.items()}
    assert sorted(len(a) for a in before.values()) == [3, 3]
    group.clear()
    group.add("c3", seed=3, assignors=("cooperative-sticky",))
    settle(group)
    after = {n: m.assignment for n, m in group.managers.items()}
    assert sorted(len(a) for a in after.values()) == [2, 2, 2]
    for name in ("c1", "c2"):
        revoked = [p for kind, p in callbacks(group, name) if kind == "revoked"]
        assert revoked == [before[name] - after[name]]
        assert len(revoked[0]) == 1
        assert not [p for kind, p in callbacks(group, name) if kind == "lost"]
    added = [p for kind, p in callbacks(group, "c3") if kind == "assigned" and p]
    assert added == [after["c3"]]


def test_eager_group_revokes_everything_then_splits() -> None:
    group = Group(["c1"], {"a": 4}, assignors=("range",))
    settle(group)
    c1 = group.managers["c1"]
    assert c1.assignment == partitions("a", 0, 1, 2, 3)
    group.clear()
    group.add("c2", seed=2, assignors=("range",))
    settle(group)
    assert callbacks(group, "c1") == [
        ("revoked", partitions("a", 0, 1, 2, 3)),
        ("assigned", partitions("a", 0, 1)),
    ]
    assert group.managers["c2"].assignment == partitions("a", 2, 3)


def test_member_leaving_hands_its_partitions_to_the_others() -> None:
    group = Group(["c1", "c2"], {"a": 4}, assignors=("cooperative-sticky",))
    settle(group)
    c2 = group.managers["c2"]
    owned = c2.assignment
    group.clear()
    c2.leave_group(group.now)
    group.run()
    assert callbacks(group, "c2") == [("revoked", owned)]
    assert group.of("c2", LeaveCompleted) == [LeaveCompleted()]
    assert c2.state is ClassicMemberState.UNJOINED and c2.member_id == ""
    del group.managers["c2"]
    settle(group)
    assert group.managers["c1"].assignment == partitions("a", 0, 1, 2, 3)
    assert group.coordinator.members.keys() == {group.managers["c1"].member_id}
