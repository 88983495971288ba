"""Client-side assignors: Java's known assignments, invariants, stickiness, cooperative rounds."""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_actors.errors import InconsistentGroupProtocolError
from kafka_actors.protocol.group.classic.assignors import (
    ASSIGNORS,
    Assignment,
    CooperativeStickyAssignor,
    RebalanceProtocol,
    Subscription,
    decode_subscription,
    encode_subscription,
    get_assignor,
    rebalance_protocol,
    select_group_protocol,
)
from kafka_actors.protocol.messages import TopicPartition as TP

ALL = sorted(ASSIGNORS)


def parts(assignment: Mapping[str, Assignment]) -> dict[str, list[str]]:
    return {m: [str(tp) for tp in a.partitions] for m, a in assignment.items()}


def subs(topics_by_member: Mapping[str, tuple[str, ...]]) -> dict[str, Subscription]:
    return {m: Subscription(topics=t) for m, t in topics_by_member.items()}


# -- known assignments (Java javadoc examples and the semantics they document) -------------------


def test_range_three_members_seven_partitions_is_contiguous_3_2_2() -> None:
    result = get_assignor("range").assign({"t": 7}, subs({m: ("t",) for m in ("c3", "c1", "c2")}))
    assert parts(result) == {
        "c1": ["t-0", "t-1", "t-2"],
        "c2": ["t-3", "t-4"],
        "c3": ["t-5", "t-6"],
    }


def test_range_is_per_topic() -> None:
    # RangeAssignor javadoc: two consumers, two topics of three partitions each.
    result = get_assignor("range").assign(
        {"t0": 3, "t1": 3}, subs({"C0": ("t0", "t1"), "C1": ("t0", "t1")})
    )
    assert parts(result) == {"C0": ["t0-0", "t0-1", "t1-0", "t1-1"], "C1": ["t0-2", "t1-2"]}


def test_range_only_counts_members_subscribed_to_the_topic() -> None:
    result = get_assignor("range").assign(
        {"a": 4, "b": 2}, subs({"m1": ("a",), "m2": ("a", "b"), "m3": ("b",)})
    )
    assert parts(result) == {"m1": ["a-0", "a-1"], "m2": ["a-2", "a-3", "b-0"], "m3": ["b-1"]}


def test_static_members_sort_first_by_instance_id() -> None:
    subscriptions = {
        "a-dynamic": Subscription(("t",)),
        "b-static": Subscription(("t",), group_instance_id="zz"),
        "c-static": Subscription(("t",), group_instance_id="aa"),
    }
    result = get_assignor("range").assign({"t": 3}, subscriptions)
    assert parts(result) == {"c-static": ["t-0"], "b-static": ["t-1"], "a-dynamic": ["t-2"]}


def test_roundrobin_identical_subscriptions() -> None:
    # RoundRobinAssignor javadoc: C0 [t0p0, t0p2, t1p1], C1 [t0p1, t1p0, t1p2].
    result = get_assignor("roundrobin").assign(
        {"t0": 3, "t1": 3}, subs({"C0": ("t0", "t1"), "C1": ("t0", "t1")})
    )
    assert parts(result) == {"C0": ["t0-0", "t0-2", "t1-1"], "C1": ["t0-1", "t1-0", "t1-2"]}


def test_roundrobin_skips_members_not_subscribed() -> None:
    # RoundRobinAssignor javadoc: C0 [t0p0], C1 [t1p0], C2 [t1p1, t2p0, t2p1, t2p2].
    result = get_assignor("roundrobin").assign(
        {"t0": 1, "t1": 2, "t2": 3},
        subs({"C0": ("t0",), "C1": ("t0", "t1"), "C2": ("t0", "t1", "t2")}),
    )
    assert parts(result) == {
        "C0": ["t0-0"],
        "C1": ["t1-0"],
        "C2": ["t1-1", "t2-0", "t2-1", "t2-2"],
    }


@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky"])
def test_sticky_first_assignment_matches_java_javadoc(name: str) -> None:
    # StickyAssignor javadoc: three consumers, four topics of two partitions.
    topics = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
    result = get_assignor(name).assign(topics, subs({c: tuple(topics) for c in ("C0", "C1", "C2")}))
    assert parts(result) == {
        "C0": ["t0-0", "t1-1", "t3-0"],
        "C1": ["t0-1", "t2-0", "t3-1"],
        "C2": ["t1-0", "t2-1"],
    }


def test_sticky_member_leaves_survivors_keep_everything() -> None:
    topics = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
    first = {
        "C0": [TP("t0", 0), TP("t1", 1), TP("t3", 0)],
        "C2": [TP("t1", 0), TP("t2", 1)],
    }
    a = get_assignor("sticky")
    subscriptions = {
        c: Subscription(tuple(topics), user_data=a.subscription_user_data(list(topics), owned, 1))
        for c, owned in first.items()
    }
    result = a.assign(topics, subscriptions)
    for c, owned in first.items():
        assert set(owned) <= set(result[c].partitions)
    assert sorted(len(r.partitions) for r in result.values()) == [4, 4]


def test_cooperative_member_joins_two_rounds() -> None:
    a = CooperativeStickyAssignor()
    owned = {"c0": [TP("t", p) for p in (0, 1, 2)], "c1": [TP("t", p) for p in (3, 4, 5)]}
    round1 = {
        m: Subscription(("t",), owned_partitions=tuple(o), generation_id=1)
        for m, o in owned.items()
    }
    round1["c2"] = Subscription(("t",))
    result1 = a.assign({"t": 6}, round1)
    assert parts(result1) == {"c0": ["t-0", "t-1"], "c1": ["t-3", "t-4"], "c2": []}
    assert a.partitions_transferring({"t": 6}, round1) == {TP("t", 2): "c2", TP("t", 5): "c2"}
    # c0 and c1 revoke t-2 / t-5 and rejoin; the follow-up rebalance hands them to c2.
    round2 = {
        m: Subscription(("t",), owned_partitions=result1[m].partitions, generation_id=2)
        for m in result1
    }
    result2 = a.assign({"t": 6}, round2)
    assert parts(result2) == {"c0": ["t-0", "t-1"], "c1": ["t-3", "t-4"], "c2": ["t-2", "t-5"]}


def test_cooperative_higher_generation_wins_a_conflicting_claim() -> None:
    a = CooperativeStickyAssignor()
    subscriptions = {
        "old": Subscription(("t",), owned_partitions=(TP("t", 0), TP("t", 1)), generation_id=3),
        "new": Subscription(("t",), owned_partitions=(TP("t", 0),), generation_id=4),
    }
    result = a.assign({"t": 2}, subscriptions)
    assert parts(result) == {"new": ["t-0"], "old": ["t-1"]}


def test_cooperative_generation_from_user_data_for_v0_v1_subscriptions() -> None:
    a = CooperativeStickyAssignor()
    # Decoded from v1: no generation field, the generation is in the user data.
    v1 = decode_subscription(
        encode_subscription(
            Subscription(("t",), user_data=struct.pack(">i", 9), owned_partitions=(TP("t", 0),)), 1
        )
    )
    assert v1.generation_id == -1
    subscriptions = {
        "a": Subscription(("t",), owned_partitions=(TP("t", 0),), generation_id=8),
        "b": v1,
    }
    result = a.assign({"t": 2}, subscriptions)
    assert parts(result) == {"a": ["t-1"], "b": ["t-0"]}


def test_cooperative_equal_generation_double_claim_is_withheld_from_everyone() -> None:
    a = CooperativeStickyAssignor()
    subscriptions = {
        "a": Subscription(("t",), owned_partitions=(TP("t", 0), TP("t", 1)), generation_id=5),
        "b": Subscription(("t",), owned_partitions=(TP("t", 0), TP("t", 2)), generation_id=5),
    }
    result = a.assign({"t": 4}, subscriptions)
    assigned = [tp for r in result.values() for tp in r.partitions]
    assert TP("t", 0) not in assigned
    assert TP("t", 1) in result["a"].partitions and TP("t", 2) in result["b"].partitions
    assert TP("t", 0) in a.partitions_transferring({"t": 4}, subscriptions)


def test_topics_without_metadata_are_skipped() -> None:
    for name in ALL:
        result = get_assignor(name).assign(
            {"known": 2}, subs({"m1": ("known", "gone"), "m2": ("gone",)})
        )
        assert sorted(str(tp) for r in result.values() for tp in r.partitions) == [
            "known-0",
            "known-1",
        ]
        assert result["m2"].partitions == ()


def test_no_members_gives_no_assignment() -> None:
    for name in ALL:
        assert get_assignor(name).assign({"t": 3}, {}) == {}


# -- rebalance protocol and group protocol selection ---------------------------------------------


def test_rebalance_protocol_is_the_best_one_all_assignors_support() -> None:
    assert rebalance_protocol(["range", "cooperative-sticky"]) is RebalanceProtocol.EAGER
    assert rebalance_protocol(["cooperative-sticky"]) is RebalanceProtocol.COOPERATIVE
    assert rebalance_protocol(["roundrobin"]) is RebalanceProtocol.EAGER
    assert rebalance_protocol(["sticky", "cooperative-sticky"]) is RebalanceProtocol.EAGER
    with pytest.raises(ValueError):
        rebalance_protocol(["no-such"])


def test_group_protocol_is_chosen_by_votes_among_common_protocols() -> None:
    members = {
        "a": ["range", "cooperative-sticky"],
        "b": ["cooperative-sticky", "range"],
        "c": ["cooperative-sticky"],
    }
    # only cooperative-sticky is common to all
    assert select_group_protocol(members) == "cooperative-sticky"
    # both common: each member votes for its first; most votes win
    members = {
        "a": ["range", "roundrobin"],
        "b": ["roundrobin", "range"],
        "c": ["roundrobin", "range"],
    }
    assert select_group_protocol(members) == "roundrobin"
    # a tie is broken deterministically
    tie = {"a": ["range", "roundrobin"], "b": ["roundrobin", "range"]}
    assert select_group_protocol(tie) == select_group_protocol(dict(reversed(list(tie.items()))))
    with pytest.raises(InconsistentGroupProtocolError):
        select_group_protocol({"a": ["range"], "b": ["roundrobin"]})


# -- properties -----------------------------------------------------------------------------------

TOPICS = ["t0", "t1", "t2", "t3"]


@st.composite
def groups(
    draw: st.DrawFn, identical: bool = False
) -> tuple[dict[str, int], dict[str, Subscription]]:
    topics = {
        t: draw(st.integers(0, 9))
        for t in draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True))
    }
    members = draw(
        st.lists(st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=7, unique=True)
    )
    if identical:
        chosen = tuple(draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True)))
        return topics, {m: Subscription(chosen) for m in members}
    return topics, {
        m: Subscription(tuple(draw(st.lists(st.sampled_from(TOPICS), max_size=4, unique=True))))
        for m in members
    }


def check_valid(
    topics: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    result: Mapping[str, Assignment],
    complete: bool = True,
) -> None:
    assert set(result) == set(subscriptions)
    counts = Counter(tp for r in result.values() for tp in r.partitions)
    assert all(n == 1 for n in counts.values()), "a partition was assigned twice"
    for member, assignment in result.items():
        for tp in assignment.partitions:
            assert tp.topic in subscriptions[member].topics, "assigned to a non-subscriber"
            assert 0 <= tp.partition < topics[tp.topic]
    if complete:
        wanted = {
            TP(t, p)
            for t, n in topics.items()
            if any(t in s.topics for s in subscriptions.values())
            for p in range(n)
        }
        assert set(counts) == wanted


def spread(result: Mapping[str, Assignment]) -> int:
    sizes = [len(r.partitions) for r in result.values()]
    return max(sizes) - min(sizes)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(groups(), st.sampled_from(ALL))
def test_every_subscribed_partition_assigned_exactly_once(
    group: tuple[dict[str, int], dict[str, Subscription]], name: str
) -> None:
    topics, subscriptions = group
    check_valid(topics, subscriptions, get_assignor(name).assign(topics, subscriptions))


@settings(max_examples=150)
@given(groups(identical=True), st.sampled_from(["roundrobin", "sticky", "cooperative-sticky"]))
def test_balanced_within_one_for_identical_subscriptions(
    group: tuple[dict[str, int], dict[str, Subscription]], name: str
) -> None:
    topics, subscriptions = group
    assert spread(get_assignor(name).assign(topics, subscriptions)) <= 1


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(groups(), st.sampled_from(["sticky", "cooperative-sticky"]))
def test_sticky_general_case_cannot_be_improved_by_one_move(
    group: tuple[dict[str, int], dict[str, Subscription]], name: str
) -> None:
    topics, subscriptions = group
    result = get_assignor(name).assign(topics, subscriptions)
    for receiver, r in result.items():
        for giver, g in result.items():
            if len(g.partitions) >= len(r.partitions) + 2:
                movable = [tp for tp in g.partitions if tp.topic in subscriptions[receiver].topics]
                assert not movable, f"{receiver} could take {movable[0]} from {giver}"


def converge(
    topics: Mapping[str, int],
    topics_by_member: Mapping[str, tuple[str, ...]],
    owned: Mapping[str, tuple[TP, ...]],
    generation: int,
    max_rounds: int = 3,
) -> tuple[dict[str, Assignment], int, list[dict[str, Assignment]]]:
    """Run cooperative rebalances as Java members would, until an assignment repeats.

    Each round every member reports what it owns; after the round each member owns exactly
    what it was assigned (revoking the rest). Returns the final assignment, the rounds, and
    every round's result.
    """
    a = CooperativeStickyAssignor()
    history: list[dict[str, Assignment]] = []
    current = dict(owned)
    for round_no in range(1, max_rounds + 1):
        subscriptions = {
            m: Subscription(
                t,
                owned_partitions=current.get(m, ()),
                generation_id=generation if current.get(m) else -1,
            )
            for m, t in topics_by_member.items()
        }
        result = a.assign(topics, subscriptions)
        # the cooperative rule: nothing assigned to a member is still owned by another
        for member, assignment in result.items():
            for tp in assignment.partitions:
                for other, theirs in current.items():
                    assert other == member or tp not in theirs, (
                        f"{tp} given to {member} while {other} owns it"
                    )
        history.append(result)
        new = {m: r.partitions for m, r in result.items()}
        generation += 1
        if new == {m: current.get(m, ()) for m in new}:
            return result, round_no, history
        current = new
    return result, max_rounds, history


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 12), min_size=1),
    st.integers(1, 6),
)
def test_cooperative_join_moves_only_what_the_new_member_gets(
    topics: dict[str, int], n: int
) -> None:
    topic_names = tuple(topics)
    members = {f"m{i}": topic_names for i in range(n)}
    start, _, _ = converge(topics, members, {}, generation=1)
    check_valid(topics, subs(members), start)
    before = {m: set(a.partitions) for m, a in start.items()}

    joined = {**members, "zz-new": topic_names}
    final, rounds, history = converge(
        topics, joined, {m: a.partitions for m, a in start.items()}, generation=5
    )
    check_valid(topics, subs(joined), final)
    assert spread(final) <= 1
    assert rounds <= 3  # revoke round, assign round, confirm round
    for member, owned in before.items():
        assert set(final[member].partitions) <= owned, "an old member gained a partition"
    moved = sum(len(owned - set(final[m].partitions)) for m, owned in before.items())
    assert moved == len(final["zz-new"].partitions)
    # two-phase: in the first round the new member receives nothing that others owned
    assert not (set(history[0]["zz-new"].partitions) & set().union(*before.values()))


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 12), min_size=1), st.integers(2, 6))
def test_cooperative_leave_keeps_survivors_partitions(topics: dict[str, int], n: int) -> None:
    topic_names = tuple(topics)
    members = {f"m{i}": topic_names for i in range(n)}
    start, _, _ = converge(topics, members, {}, generation=1)
    survivors = {m: t for m, t in members.items() if m != "m0"}
    final, rounds, _ = converge(
        topics, survivors, {m: start[m].partitions for m in survivors}, generation=5
    )
    assert rounds <= 2  # nobody else owned m0's partitions, so nothing is withheld
    for m in survivors:
        assert set(start[m].partitions) <= set(final[m].partitions)
    check_valid(topics, subs(survivors), final)


@st.composite
def messy_claims(draw: st.DrawFn) -> tuple[dict[str, int], dict[str, Subscription]]:
    topics, subscriptions = draw(groups())
    out: dict[str, Subscription] = {}
    for m, s in subscriptions.items():
        candidates = [TP(t, p) for t in TOPICS for p in range(topics.get(t, 3) + 1)]
        owned = tuple(draw(st.lists(st.sampled_from(candidates), max_size=6, unique=True)))
        gen = draw(st.integers(-1, 3))
        out[m] = Subscription(s.topics, owned_partitions=owned, generation_id=gen)
    return topics, out


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(messy_claims())
def test_cooperative_never_gives_a_partition_someone_else_claims(
    group: tuple[dict[str, int], dict[str, Subscription]],
) -> None:
    topics, subscriptions = group
    a = CooperativeStickyAssignor()
    result = a.assign(topics, subscriptions)
    check_valid(topics, subscriptions, result, complete=False)
    for member, assignment in result.items():
        kept = set(subscriptions[member].owned_partitions)
        for tp in assignment.partitions:
            if tp in kept:
                continue
            claimers = [
                o for o, s in subscriptions.items() if o != member and tp in s.owned_partitions
            ]
            assert not claimers, f"{tp} newly given to {member} but claimed by {claimers}"
    # withheld partitions are exactly those the round leaves out
    withheld = set(a.partitions_transferring(topics, subscriptions))
    assigned = {tp for r in result.values() for tp in r.partitions}
    assert not withheld & assigned
    wanted = {
        TP(t, p)
        for t, n in topics.items()
        if any(t in s.topics for s in subscriptions.values())
        for p in range(n)
    }
    assert wanted == assigned | withheld


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(messy_claims())
def test_cooperative_rounds_converge_to_a_complete_assignment(
    group: tuple[dict[str, int], dict[str, Subscription]],
) -> None:
    topics, subscriptions = group
    # after one round every member owns exactly its assignment (Java members revoke the rest)
    first = CooperativeStickyAssignor().assign(topics, subscriptions)
    topics_by_member = {m: s.topics for m, s in subscriptions.items()}
    final, rounds, _ = converge(
        topics, topics_by_member, {m: a.partitions for m, a in first.items()}, generation=10
    )
    assert rounds <= 3
    check_valid(topics, subscriptions, final)


def test_config_names_every_assignor_we_have() -> None:
    from kafka_actors.config import ASSIGNOR_CLASS_NAMES

    assert set(ASSIGNOR_CLASS_NAMES.values()) == set(ASSIGNORS)
    for name in ASSIGNORS:
        assert get_assignor(name).name == name
