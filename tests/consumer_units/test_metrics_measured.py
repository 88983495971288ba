"""Every value ``metrics()`` reports is measured (issue 10): the counters behind it."""

from __future__ import annotations

import time

from kafka_actors.actors.context import ConsumerMetrics
from kafka_actors.protocol.fetch.manager import FetchMetrics


def test_time_between_poll_last_is_the_gap_between_the_last_two_polls() -> None:
    metrics = ConsumerMetrics()
    assert metrics.snapshot()["time-between-poll-last"] == 0.0  # fewer than two polls
    metrics.polled()
    assert metrics.snapshot()["time-between-poll-last"] == 0.0
    time.sleep(0.05)
    metrics.polled()
    gap = metrics.snapshot()["time-between-poll-last"]
    assert gap >= 50.0 - 1.0
    time.sleep(0.2)
    # not the time since the last poll (which grows while nobody polls)
    assert metrics.snapshot()["time-between-poll-last"] == gap


def test_commit_latency_avg_ignores_untimed_auto_commits() -> None:
    metrics = ConsumerMetrics()
    metrics.committed(30.0)
    metrics.committed(None)  # an interval auto-commit: counted, not timed
    metrics.committed(10.0)
    snap = metrics.snapshot()
    assert snap["commit-total"] == 3.0
    assert snap["commit-latency-avg"] == 20.0


def test_no_unmeasured_records_fetched_total() -> None:
    metrics = ConsumerMetrics()
    metrics.fetch_completed(12.0, 1_000)
    snap = metrics.snapshot()
    assert "records-fetched-total" not in snap  # it was always 0: nothing counted it
    assert snap["fetch-total"] == 1.0 and snap["fetch-size-avg"] == 1_000.0


def test_fetch_throttle_time_average_over_all_fetch_responses() -> None:
    m = FetchMetrics(
        fetch_responses=4, fetch_throttle_time_total_ms=300, fetch_throttle_time_max_ms=200
    )
    assert m.fetch_throttle_time_avg_ms == 75.0
    assert FetchMetrics().fetch_throttle_time_avg_ms is None
