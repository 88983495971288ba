"""Rebalance-safe commits without a broker: the pure tracker and its thread-safe shell on a
manual clock (handed out vs committed, waiting revocations, the maximum duration)."""

from __future__ import annotations

from kafka_actors.actors.safe_commits import RebalanceSafeCommits
from kafka_actors.clock import ManualClock
from kafka_actors.protocol.group.safe_commits import SafeCommitTracker
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition

A, B, C = (TopicPartition("t", p) for p in range(3))


def test_nothing_handed_out_settles_at_once() -> None:
    tracker = SafeCommitTracker()
    settled = tracker.await_settled("k", [A, B], now_ms=0, deadline_ms=100)
    assert settled is not None and not settled.expired and settled.waited_ms == 0


def test_waits_until_every_revoked_partition_is_committed() -> None:
    tracker = SafeCommitTracker()
    tracker.handed_out(A, 10)
    tracker.handed_out(B, 5)
    tracker.handed_out(C, 7)  # not revoked: does not hold the revocation
    assert tracker.await_settled("k", [A, B], now_ms=0, deadline_ms=1000) is None
    assert tracker.outstanding([A, B]) == {A: (10, None), B: (5, None)}
    assert tracker.committed({A: OffsetAndMetadata(10)}, now_ms=5) == []
    assert tracker.committed({B: 4}, now_ms=6) == []  # not far enough
    [settled] = tracker.committed({B: 5, C: 1}, now_ms=9)
    assert settled.key == "k" and not settled.expired and settled.waited_ms == 9
    assert tracker.waiting == 0
    # The revoked partitions are forgotten; the others are still tracked.
    assert tracker.outstanding([A, B, C]) == {C: (7, 1)}


def test_handed_out_only_moves_forward_and_commits_overwrite() -> None:
    tracker = SafeCommitTracker()
    tracker.handed_out(A, 10)
    tracker.handed_out(A, 3)  # a seek back: the records up to 9 were still handed out
    tracker.committed({A: 10}, now_ms=0)
    tracker.committed({A: 4}, now_ms=0)  # the last commit counts
    assert tracker.outstanding([A]) == {A: (10, 4)}


def test_deadline_expires_with_what_was_left() -> None:
    tracker = SafeCommitTracker()
    tracker.handed_out(A, 10)
    assert tracker.await_settled(1, [A], now_ms=0, deadline_ms=50) is None
    assert tracker.next_deadline_ms() == 50
    assert tracker.expire(now_ms=49) == []
    [settled] = tracker.expire(now_ms=50)
    assert settled.expired and settled.outstanding == {A: (10, None)}
    assert tracker.waiting == 0


def test_shell_runs_the_continuation_on_commit_or_after_the_max_duration() -> None:
    clock = ManualClock()
    safe = RebalanceSafeCommits(clock, clock.scheduler(), max_duration_ms=2000)
    acked: list[str] = []
    safe.handed_out_batch({A: 9, B: 4})
    safe.after_committed([A], lambda: acked.append("a"))
    safe.after_committed([B], lambda: acked.append("b"))
    assert acked == [] and safe.waiting == 2
    clock.advance(1.0)
    safe.committed({A: OffsetAndMetadata(10)})
    assert acked == ["a"]
    clock.advance(0.999)
    assert acked == ["a"]
    clock.advance(0.002)  # B's two seconds are over: acknowledged anyway
    assert acked == ["a", "b"] and safe.waiting == 0
    safe.after_committed([C], lambda: acked.append("c"))  # nothing handed out: at once
    assert acked == ["a", "b", "c"]


def test_config_keys_and_validation() -> None:
    import pytest

    from kafka_actors.config import ConsumerConfig
    from kafka_actors.errors import ConfigError

    base = {"bootstrap.servers": "localhost:9092", "group.id": "g"}
    default = ConsumerConfig.from_dict(base)
    assert not default.rebalance_safe_commits
    assert default.rebalance_safe_commits_max_duration == default.max_poll_interval_ms
    on = ConsumerConfig.from_dict(
        {
            **base,
            "rebalance.safe.commits": "true",
            "rebalance.safe.commits.max.duration.ms": "20000",
            "max.poll.interval.ms": 30_000,
        }
    )
    assert on.rebalance_safe_commits and on.rebalance_safe_commits_max_duration == 20_000
    for bad in (
        {"rebalance.safe.commits.max.duration.ms": 0},
        {"rebalance.safe.commits.max.duration.ms": 300_001},
        {"rebalance.safe.commits.max.duration.ms": -2},
        {"rebalance.safe.commits": "maybe"},
    ):
        with pytest.raises(ConfigError) as info:
            ConsumerConfig.from_dict({**base, **bad})
        assert info.value.key is not None and info.value.key.startswith("rebalance.safe.commits")
    with pytest.raises(ConfigError):
        ConsumerConfig.from_dict(
            {"bootstrap.servers": "localhost:9092", "rebalance.safe.commits": True}
        )
