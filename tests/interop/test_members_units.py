"""The interop tests' own judges, checked on made-up logs (no broker)."""

from __future__ import annotations

from tests.interop.members import (
    MemberLog,
    cross_member_duplicates_after_commit,
    parse_assignment,
    parse_table,
)


def _log(
    name: str, consumed: list[tuple[int, int, int]], commits: list[tuple[int, int, int, bool]]
) -> MemberLog:
    log = MemberLog(name)
    for partition, offset, at_ms in consumed:
        log.add_consumed(partition, offset, f"p{partition}o{offset}".encode(), at_ms)
    for partition, offset, at_ms, ok in commits:
        log.add_commit({partition: offset}, ok, at_ms)
    return log


def test_a_record_read_again_after_its_commit_is_reported() -> None:
    first = _log("a", [(0, 5, 100)], [(0, 6, 110, True)])
    second = _log("b", [(0, 5, 200)], [])
    (problem,) = cross_member_duplicates_after_commit([first, second])
    assert "partition 0 offset 5" in problem and "consumed again by b" in problem


def test_a_record_read_again_without_a_successful_commit_is_allowed() -> None:
    first = _log("a", [(0, 5, 100)], [(0, 6, 110, False)])
    second = _log("b", [(0, 5, 200)], [(0, 6, 210, True)])
    assert cross_member_duplicates_after_commit([first, second]) == []


def test_a_commit_after_the_second_read_is_not_blamed() -> None:
    first = _log("a", [(0, 5, 100)], [(0, 6, 300, True)])
    second = _log("b", [(0, 5, 200)], [])
    assert cross_member_duplicates_after_commit([first, second]) == []


def test_consumer_groups_tables_are_parsed() -> None:
    text = (
        "\nGROUP  CONSUMER-ID  HOST        CLIENT-ID  #PARTITIONS  CURRENT-ASSIGNMENT\n"
        "g      m-1          /127.0.0.1  c-1        2            t:0,1\n"
        "g      m-2          /127.0.0.1  c-2        0            -\n"
    )
    rows = parse_table(text)
    assert [r["CLIENT-ID"] for r in rows] == ["c-1", "c-2"]
    assert parse_assignment(rows[0]["CURRENT-ASSIGNMENT"], "t") == {0, 1}
    assert parse_assignment(rows[1]["CURRENT-ASSIGNMENT"], "t") == set()


def test_kafka_39_assignment_cells_are_parsed() -> None:
    assert parse_assignment("(0,1)", "t") == {0, 1}
    assert parse_assignment("t(2),u(0,1)", "t") == {2}
    assert parse_assignment("t:0;u:1,2", "u") == {1, 2}
