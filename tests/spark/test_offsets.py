"""The pure parts of the Spark source: offsets JSON, the fair per-trigger split, range splitting,
options, and the OffsetPlanner's decisions (assignment, revocation fences, jumps to the group's
offset, commits never backwards). No Spark, no broker."""

from __future__ import annotations

import itertools
from collections.abc import Hashable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_actors.errors import ConfigError
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.spark.offsets import (
    OffsetPlanner,
    OffsetRange,
    Ownership,
    fair_split,
    offsets_from_json,
    offsets_to_json,
    parse_starting_offsets,
    split_ranges,
)
from kafka_actors.spark.options import SourceOptions

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


def test_offsets_json_round_trip() -> None:
    offsets = {T1: 7, T0: 42, TopicPartition("a", 3): 0}
    data = offsets_to_json(offsets)
    assert data == {"a": {"3": 0}, "t": {"0": 42, "1": 7}}
    assert list(data) == ["a", "t"]
    assert offsets_from_json(data) == offsets
    assert offsets_from_json('{"t": {"0": 42, "1": 7}}') == {T0: 42, T1: 7}
    assert offsets_from_json(None) == {}


@pytest.mark.parametrize(
    "bad", ['{"t": 3}', '{"t": {"x": 1}}', '{"t": {"0": "1"}}', '{"t": {"0": true}}', "[1]"]
)
def test_offsets_json_refuses_bad_input(bad: str) -> None:
    with pytest.raises(ValueError):
        offsets_from_json(bad)


def test_starting_offsets() -> None:
    assert parse_starting_offsets(None) == "latest"
    assert parse_starting_offsets(" Earliest ") == "earliest"
    assert parse_starting_offsets('{"t": {"0": -2, "1": 5}}') == {T0: -2, T1: 5}
    with pytest.raises(ValueError):
        parse_starting_offsets("newest")
    with pytest.raises(ValueError):
        parse_starting_offsets('{"t": {"0": -3}}')


def test_fair_split_water_filling() -> None:
    assert fair_split({"a": 100, "b": 100}, 50) == {"a": 25, "b": 25}
    # a small partition leaves its share to the others
    assert fair_split({"a": 5, "b": 100, "c": 100}, 60) == {"a": 5, "b": 28, "c": 27}
    assert fair_split({"a": 5, "b": 0}, 60) == {"a": 5, "b": 0}
    assert fair_split({"a": 3, "b": 3, "c": 3}, 2) == {"a": 1, "b": 1, "c": 0}
    assert fair_split({}, 10) == {}
    with pytest.raises(ValueError):
        fair_split({"a": 1}, -1)


@given(
    st.dictionaries(st.integers(0, 20), st.integers(0, 1000), max_size=12),
    st.integers(0, 5000),
)
def test_fair_split_properties(available: dict[Hashable, int], limit: int) -> None:
    grant = fair_split(available, limit)
    assert set(grant) == set(available)
    assert all(0 <= grant[k] <= available[k] for k in available)
    assert sum(grant.values()) == min(limit, sum(available.values()))
    # max-min fairness: a key short of its availability gets at least any other key's grant - 1
    for k, g in grant.items():
        if g < available[k]:
            assert all(other <= g + 1 for other in grant.values())


def test_split_ranges_min_partitions() -> None:
    ranges = [OffsetRange("t", 0, 0, 90), OffsetRange("t", 1, 10, 20), OffsetRange("t", 2, 5, 5)]
    assert split_ranges(ranges, None) == ranges[:2]
    pieces = split_ranges(ranges, 10)
    assert len(pieces) >= 10
    for p in (0, 1):
        mine = [r for r in pieces if r.partition == p]
        assert mine[0].start == ranges[p].start and mine[-1].end == ranges[p].end
        assert all(a.end == b.start for a, b in itertools.pairwise(mine))
    assert split_ranges([OffsetRange("t", 0, 0, 3)], 10) == [
        OffsetRange("t", 0, 0, 1),
        OffsetRange("t", 0, 1, 2),
        OffsetRange("t", 0, 2, 3),
    ]


def _planner(*partitions: TopicPartition, committed: int | None = None) -> OffsetPlanner:
    planner = OffsetPlanner()
    planner.assigned(partitions)
    for tp in partitions:
        planner.resolved(tp, committed, 0)
    return planner


def test_new_partitions_are_established_then_read() -> None:
    planner = _planner(T0, T1, committed=None)
    first = planner.latest({}, {T0: 100, T1: 100})
    assert first == {T0: 0, T1: 0}
    assert planner.ranges({}, first) == []
    second = planner.latest(first, {T0: 100, T1: 30}, limit=80)
    assert second == {T0: 50, T1: 30}
    assert planner.ranges(first, second) == [
        OffsetRange("t", 0, 0, 50),
        OffsetRange("t", 1, 0, 30),
    ]


def test_committed_offsets_win_over_starting_offsets() -> None:
    planner = OffsetPlanner()
    planner.assigned([T0])
    planner.resolved(T0, 40, 0)
    assert planner.latest({}, {}) == {T0: 40}


def test_checkpoint_ahead_of_group_is_kept() -> None:
    planner = _planner(T0, committed=10)
    assert planner.latest({T0: 25}, {T0: 30}) == {T0: 30}


def test_group_ahead_of_checkpoint_jumps_through_an_absent_batch() -> None:
    planner = OffsetPlanner()
    planner.assigned([T0, T1])
    planner.resolved(T0, 60, 0)  # T0: the group read up to 60 while we were away
    planner.resolved(T1, None, 0)
    end = planner.latest({T0: 20, T1: 5}, {T0: 100, T1: 9})
    assert T0 not in end and end[T1] == 9
    assert planner.ranges({T0: 20, T1: 5}, end) == [OffsetRange("t", 1, 5, 9)]
    again = planner.latest(end, {T0: 100, T1: 9})
    assert again[T0] == 60
    third = planner.latest(again, {T0: 100, T1: 9})
    assert planner.ranges(again, third) == [OffsetRange("t", 0, 60, 100)]


def test_revocation_waits_for_the_planned_offsets_to_be_committed() -> None:
    planner = _planner(T0, T1)
    e0 = planner.latest({}, {})
    e1 = planner.latest(e0, {T0: 50, T1: 50})  # batch planned: T0 up to 50
    token = object()
    assert planner.revoking([T0], token) == []
    assert planner.owned[T0].status is Ownership.REVOKING
    # no new data for T0 while revoking; T1 goes on
    e2 = planner.latest(e1, {T0: 80, T1: 80})
    assert e2 == {T0: 50, T1: 80}
    assert planner.kafka_committed(planner.to_commit(e0)) == []
    assert planner.kafka_committed({T0: 49}) == []
    assert planner.kafka_committed(planner.to_commit(e1)) == [token]
    assert T0 not in planner.owned
    # gone from the member, but carried in the offsets: the checkpoint keeps its position
    e3 = planner.latest(e2, {T1: 90})
    assert e3 == {T0: 50, T1: 90}
    assert planner.ranges(e2, e3) == [OffsetRange("t", 1, 80, 90)]


def test_partitions_of_others_are_carried_and_checkpoint_wins_when_they_come_back() -> None:
    planner = _planner(T1)
    e0 = planner.latest({T0: 70, T1: 5}, {T1: 5})
    assert e0 == {T0: 70, T1: 5}
    planner.assigned([T0])
    planner.resolved(T0, 40, 0)  # the group is behind this query's checkpoint
    e1 = planner.latest(e0, {T0: 100, T1: 5})
    assert e1 == {T0: 100, T1: 5}
    assert planner.ranges(e0, e1) == [OffsetRange("t", 0, 70, 100)]


def test_revocation_of_unplanned_partitions_completes_at_once() -> None:
    planner = OffsetPlanner()
    planner.assigned([T0])
    token = object()
    assert planner.revoking([T0], token) == [token]
    assert planner.owned == {}


def test_commits_only_owned_partitions_and_never_backwards() -> None:
    planner = _planner(T0, T1, committed=30)
    assert planner.to_commit({T0: 20, T1: 35, T2: 99}) == {T1: 35}
    planner.kafka_committed({T1: 35})
    assert planner.to_commit({T0: 31, T1: 35}) == {T0: 31}


def test_lost_and_abandoned_partitions_leave() -> None:
    planner = _planner(T0, T1, T2)
    planner.latest(planner.latest({}, {}), {T0: 5, T1: 5, T2: 5})
    planner.lost([T0])
    token = object()
    planner.revoking([T1], token)
    assert planner.abandon(token) == {T1}
    assert planner.revocation_tokens() == []
    assert set(planner.owned) == {T2}
    assert planner.forget_unowned([]) == [T2]


def test_available_now_target_bounds_the_batch() -> None:
    planner = _planner(T0, T1)
    e0 = planner.latest({}, {})
    assert planner.latest(e0, {T0: 100, T1: 100}, target={T0: 40}) == {T0: 40, T1: 0}


def test_replay_floor_skips_what_the_group_committed() -> None:
    assert OffsetPlanner.ranges({T0: 10, T1: 10}, {T0: 50, T1: 50}, floor={T0: 30, T1: 5}) == [
        OffsetRange("t", 0, 30, 50),
        OffsetRange("t", 1, 10, 50),
    ]
    assert OffsetPlanner.ranges({T0: 10}, {T0: 50}, floor={T0: 60}) == []


def _options(**extra: str) -> dict[str, str]:
    base = {"kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.group.id": "g", "subscribe": "t"}
    base.update(extra)
    return base


def test_source_options() -> None:
    options = SourceOptions.parse(
        _options(
            maxOffsetsPerTrigger="100",
            minpartitions="4",
            includeHeaders="true",
            startingOffsets="earliest",
            **{"kafka.isolation.level": "read_committed"},
        )
    )
    assert options.topics == ("t",)
    assert options.max_offsets_per_trigger == 100 and options.min_partitions == 4
    assert options.include_headers and options.fail_on_data_loss
    assert options.starting_offsets == "earliest"
    assert options.consumer_config()["enable.auto.commit"] == "false"
    assert options.consumer_config()["isolation.level"] == "read_committed"
    assert "group.id" not in options.reader_settings()


@pytest.mark.parametrize(
    "extra",
    [
        {"assign": '{"t": [0]}'},
        {"subscribePattern": "t.*"},
        {"kafka.group.id": ""},
        {"kafka.enable.auto.commit": "true"},
        {"maxOffsetsPerTrigger": "0"},
        {"failOnDataLoss": "maybe"},
        {"startingOffsets": "never"},
        {"kafka.fetch.max.bytes": "lots"},
    ],
)
def test_source_options_refused(extra: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        SourceOptions.parse(_options(**extra))
