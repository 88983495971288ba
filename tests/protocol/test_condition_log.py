"""ConditionLog: the schedule of the lines about a repeating failure, with a fake clock."""

from __future__ import annotations

import pytest

from kafka_actors.protocol.condition_log import REPEAT_INTERVAL_MS, Cleared, ConditionLog, Report


def test_first_occurrence_reports_then_counts_until_the_interval() -> None:
    log: ConditionLog[str] = ConditionLog(interval_ms=1_000)
    assert log.occurred("down", 0) == Report(first=True, occurrences=1, failing_for_ms=0)
    # Every 100 ms for a second: nothing until the interval has passed since the first line.
    assert [log.occurred("down", t) for t in range(100, 1_000, 100)] == [None] * 9
    report = log.occurred("down", 1_000)
    assert report == Report(first=False, occurrences=10, failing_for_ms=1_000)
    assert report.fields() == {"occurrences": 10, "failing_for_ms": 1_000}
    # The next window counts from the last line, not from the start.
    assert log.occurred("down", 1_500) is None
    assert log.occurred("down", 2_000) == Report(first=False, occurrences=2, failing_for_ms=2_000)


def test_at_most_one_line_per_interval_whatever_the_rate() -> None:
    log: ConditionLog[str] = ConditionLog(interval_ms=30_000)
    lines = [r for t in range(0, 120_000, 1) if (r := log.occurred("x", t)) is not None]
    assert len(lines) == 4  # t = 0, 30 s, 60 s, 90 s
    assert sum(r.occurrences for r in lines) == 90_001  # occurrences up to the last line
    assert Report(True, 1, 0).fields() == {}


def test_clear_reports_once_and_the_next_occurrence_starts_again() -> None:
    log: ConditionLog[int] = ConditionLog(interval_ms=1_000)
    assert log.cleared(1, 0) is None  # never started: nothing to say
    log.occurred(1, 0)
    log.occurred(1, 10)
    log.occurred(1, 20)
    assert log.active(1) and bool(log)
    assert log.cleared(1, 500) == Cleared(occurrences=3, failing_for_ms=500)
    assert log.cleared(1, 600) is None
    assert not log.active(1) and not log
    assert log.occurred(1, 700) == Report(first=True, occurrences=1, failing_for_ms=0)


def test_keys_are_independent() -> None:
    log: ConditionLog[tuple[str, int]] = ConditionLog(interval_ms=1_000)
    assert log.occurred(("a", 1), 0) is not None
    assert log.occurred(("b", 1), 1) is not None
    assert log.occurred(("a", 1), 2) is None
    assert sorted(log.keys()) == [("a", 1), ("b", 1)]
    assert [k for k, _ in log.cleared_all(5)] == [("a", 1), ("b", 1)]
    assert log.keys() == []


def test_no_interval_reports_only_the_start() -> None:
    log: ConditionLog[str] = ConditionLog(interval_ms=None)
    assert log.occurred("t", 0) is not None
    assert all(log.occurred("t", t) is None for t in range(1, 10_000_000, 100_000))
    log.forget("t")  # no longer wanted: forgotten without a line
    assert log.cleared("t", 1) is None
    assert log.occurred("t", 2) is not None


def test_default_interval_and_validation() -> None:
    log: ConditionLog[str] = ConditionLog()
    log.occurred("k", 0)
    assert log.occurred("k", REPEAT_INTERVAL_MS - 1) is None
    assert log.occurred("k", REPEAT_INTERVAL_MS) is not None
    with pytest.raises(ValueError):
        ConditionLog(interval_ms=-1)
