"""CommitManager: auto-commit on the application's poll, the commit before a revocation (a round
trip with the real KIP-848 membership manager), the commit on close."""

from __future__ import annotations

import datetime
import random
from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.consumer_group_heartbeat.v1 import response as hb
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta

from kafka_actors.errors import CoordinatorLoadInProgressError, KafkaTimeoutError
from kafka_actors.protocol.group.consumer.membership import (
    CommitBeforeRevocation,
    ConsumerMembershipManager,
    InvokeAssigned,
    InvokeRevoked,
    MemberEpochChanged,
    MembershipConfig,
)
from kafka_actors.protocol.offsets.commit import (
    AutoCommitCompleted,
    CommitCompleted,
    CommitForRevocationDone,
)

from .harness import MEMBER_ID, TOPIC_IDS, Harness, oam, request_offsets, tp

# -- auto-commit --------------------------------------------------------------------------------


def test_auto_commit_every_interval_on_the_application_poll() -> None:
    h = Harness(auto_commit=True, interval_ms=5_000)
    h.own({tp("a", 0): 10})
    h.m.maybe_auto_commit_on_poll(h.now)  # starts the interval
    h.nothing_sent()
    h.advance(4_999)
    h.m.maybe_auto_commit_on_poll(h.now)
    h.nothing_sent()
    h.advance(1)
    h.m.maybe_auto_commit_on_poll(h.now)
    request = h.send()
    assert request_offsets(request) == {tp("a", 0): oam(10)}
    h.ok(request)
    (done,) = h.take(AutoCommitCompleted)
    assert done.error is None and done.offsets == {tp("a", 0): oam(10)}
    assert h.take(CommitCompleted) == []  # auto-commits are not the application's commits


def test_auto_commit_is_skipped_when_nothing_changed_since_the_last_commit() -> None:
    h = Harness(auto_commit=True, interval_ms=1_000)
    h.own({tp("a", 0): 10})
    h.m.maybe_auto_commit_on_poll(h.now)
    h.advance(1_000)
    h.m.maybe_auto_commit_on_poll(h.now)
    h.ok(h.send())
    h.advance(1_000)
    h.m.maybe_auto_commit_on_poll(h.now)
    h.nothing_sent()  # same position: nothing to commit
    h.subs.seek(tp("a", 0), 11)
    h.m.maybe_auto_commit_on_poll(h.now)
    h.nothing_sent()  # changed, but the interval restarted with the skipped one
    h.advance(1_000)
    h.m.maybe_auto_commit_on_poll(h.now)
    assert request_offsets(h.send()) == {tp("a", 0): oam(11)}


def test_one_auto_commit_in_flight_at_most() -> None:
    h = Harness(auto_commit=True, interval_ms=1_000)
    h.own({tp("a", 0): 10})
    h.m.maybe_auto_commit_on_poll(h.now)
    h.advance(1_000)
    h.m.maybe_auto_commit_on_poll(h.now)
    first = h.send()
    assert h.m.auto_commit_in_flight
    for offset in (11, 12):
        h.subs.seek(tp("a", 0), offset)
        h.advance(1_000)
        h.m.maybe_auto_commit_on_poll(h.now)
        h.nothing_sent()
    h.ok(first)
    assert not h.m.auto_commit_in_flight
    h.advance(1_000)
    h.m.maybe_auto_commit_on_poll(h.now)
    assert request_offsets(h.send()) == {tp("a", 0): oam(12)}


def test_auto_commit_after_a_retriable_failure_comes_after_the_backoff() -> None:
    h = Harness(auto_commit=True, interval_ms=5_000)
    h.own({tp("a", 0): 10})
    h.m.maybe_auto_commit_on_poll(h.now)
    h.advance(5_000)
    h.m.maybe_auto_commit_on_poll(h.now)
    h.ok(h.send(), {tp("a", 0): 14})
    (done,) = h.take(AutoCommitCompleted)
    assert isinstance(done.error, CoordinatorLoadInProgressError)
    h.nothing_sent()  # auto-commits are not retried by themselves
    h.advance(200)  # past the first backoff (100 ms +- 20 %), well before the interval
    h.m.maybe_auto_commit_on_poll(h.now)
    assert request_offsets(h.send()) == {tp("a", 0): oam(10)}


def test_auto_commit_disabled_sends_nothing() -> None:
    h = Harness(auto_commit=False)
    h.own({tp("a", 0): 10})
    for _ in range(3):
        h.advance(10_000)
        h.m.maybe_auto_commit_on_poll(h.now)
        h.nothing_sent()


# -- commit on close ------------------------------------------------------------------------------


def test_commit_on_close_commits_all_consumed_until_the_close_deadline() -> None:
    h = Harness(auto_commit=True)
    h.own({tp("a", 0): 10, tp("a", 1): 20})
    h.subs.seek(tp("a", 1), 25)  # consumed further since the assignment
    consumed = {tp("a", 0): oam(10), tp("a", 1): oam(25)}
    assert h.m.last_committed == {}
    h.m.commit_on_close(h.now + 2_000, "close")
    first = h.send()
    assert request_offsets(first) == consumed
    h.ok(first, {tp("a", 0): 14})  # COORDINATOR_LOAD_IN_PROGRESS: retried before the deadline
    assert h.take(CommitCompleted) == []
    assert h.m.last_committed == {}  # a failed attempt stored nothing
    h.advance(1_000)
    second = h.send()
    assert request_offsets(second) == consumed
    h.ok(second)
    (done,) = h.take(CommitCompleted)
    assert done.request_key == "close" and done.error is None
    assert done.offsets == consumed
    # What the coordinator acknowledged as committed: every consumed position.
    assert h.m.last_committed == consumed

    # Retried until the close deadline, no longer: then it fails with a timeout.
    late = Harness(auto_commit=True)
    late.own({tp("a", 0): 10})
    late.m.commit_on_close(late.now + 2_000, "close")
    late.ok(late.send(), {tp("a", 0): 14})
    late.advance(2_000)
    (done,) = late.take(CommitCompleted)
    assert done.request_key == "close"
    assert isinstance(done.error, KafkaTimeoutError)
    assert late.m.last_committed == {}

    off = Harness(auto_commit=False)
    off.own({tp("a", 0): 10})
    off.m.commit_on_close(off.now + 2_000, "close")
    result = off.nothing_sent()
    assert [e.error for e in result.events if isinstance(e, CommitCompleted)] == [None]
    assert off.m.last_committed == {}  # auto-commit off: close commits nothing


# -- before a revocation --------------------------------------------------------------------------


def test_commit_before_revocation_retries_stale_member_epoch_with_a_fresh_snapshot() -> None:
    h = Harness(auto_commit=True)
    h.own({tp("a", 0): 10, tp("a", 1): 20})
    h.m.on_member_changed(MEMBER_ID, 4)
    h.m.on_commit_before_revocation(
        CommitBeforeRevocation(frozenset({tp("a", 0)}), h.now + 30_000, commit_id=9)
    )
    first = h.send()
    # All consumed positions, the partition being revoked among them (as Java).
    assert request_offsets(first) == {tp("a", 0): oam(10), tp("a", 1): oam(20)}
    h.ok(first, {tp("a", 0): 113})  # STALE_MEMBER_EPOCH: retried while in the group
    assert h.take(CommitForRevocationDone) == []
    h.m.on_member_changed(MEMBER_ID, 5)
    h.subs.seek(tp("a", 1), 25)  # consumed more meanwhile
    h.advance(1_000)
    second = h.send()
    assert second.request.generation_id_or_member_epoch == 5
    assert request_offsets(second) == {tp("a", 0): oam(10), tp("a", 1): oam(25)}
    h.ok(second)
    assert h.take(CommitForRevocationDone) == [CommitForRevocationDone(9, None)]


def test_commit_before_revocation_does_not_retry_a_deleted_topic() -> None:
    h = Harness(auto_commit=True)
    h.own({tp("a", 0): 10})
    h.m.on_commit_before_revocation(CommitBeforeRevocation(frozenset(), h.now + 30_000, 3))
    h.ok(h.send(), {tp("a", 0): 3})
    (done,) = h.take(CommitForRevocationDone)
    assert done.commit_id == 3 and done.error is not None and done.error.code == 3


def test_commit_before_revocation_with_nothing_consumed_replies_at_once() -> None:
    h = Harness(auto_commit=True)
    h.m.on_commit_before_revocation(CommitBeforeRevocation(frozenset(), h.now + 30_000, 5))
    result = h.nothing_sent()
    assert list(result.events) == [CommitForRevocationDone(5, None)]


def _heartbeat(epoch: int, assignment: Mapping[str, Iterable[int]] | None) -> Any:
    kio_assignment = None
    if assignment is not None:
        kio_assignment = hb.Assignment(
            topic_partitions=tuple(
                hb.TopicPartitions(
                    topic_id=TOPIC_IDS[name], partitions=tuple(i32(p) for p in parts)
                )
                for name, parts in assignment.items()
            )
        )
    return hb.ConsumerGroupHeartbeatResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=ErrorCode(0),
        error_message=None,
        member_id=MEMBER_ID,
        member_epoch=i32(epoch),
        heartbeat_interval=i32Timedelta.parse(datetime.timedelta(milliseconds=5_000)),
        assignment=kio_assignment,
    )


class _Group:
    """The membership manager and the commit manager wired as the actor shells route events."""

    def __init__(self) -> None:
        self.h = Harness(auto_commit=True)
        self.membership = ConsumerMembershipManager(
            MembershipConfig(group_id="group-1", rebalance_timeout_ms=60_000),
            random=random.Random(3).random,
            member_id_factory=lambda: MEMBER_ID,
        )
        self.membership.on_coordinator_discovered(self.h.now)
        self.membership_events: list[Any] = []
        self.commit_requests: list[Any] = []
        self.heartbeats: list[Any] = []

    def route(self) -> None:
        """Poll both managers until quiet, routing events between them."""
        for _ in range(20):
            moved = False
            result = self.membership.poll(self.h.now)
            self.heartbeats.extend(result.requests)
            for event in result.events:
                self.membership_events.append(event)
                if isinstance(event, MemberEpochChanged):
                    self.h.m.on_member_epoch_changed(event)
                elif isinstance(event, CommitBeforeRevocation):
                    self.h.m.on_commit_before_revocation(event)
                    moved = True
            commit = self.h.poll()
            self.commit_requests.extend(commit.requests)
            for event in commit.events:
                if isinstance(event, CommitForRevocationDone):
                    self.membership.on_commit_done(event.commit_id, event.error)
                    moved = True
            if not moved:
                return

    def answer_heartbeat(self, epoch: int, assignment: Mapping[str, Iterable[int]] | None) -> None:
        self.route()
        request = self.heartbeats.pop()
        assert not self.heartbeats
        self.membership.on_response(request.request_id, _heartbeat(epoch, assignment), self.h.now)
        self.membership.on_topic_names({str(v): k for k, v in TOPIC_IDS.items()})
        self.membership.on_poll(self.h.now)
        self.route()

    def complete_callbacks(self) -> None:
        for event in self.membership_events:
            if isinstance(event, (InvokeAssigned, InvokeRevoked)):
                self.membership.on_callback_completed(event.callback_id)
        self.membership_events.clear()
        self.route()


def test_revocation_round_trip_with_the_membership_manager() -> None:
    g = _Group()
    g.membership.subscribe(["a"])
    g.membership.on_poll(g.h.now)
    g.answer_heartbeat(1, {"a": [0, 1]})
    # Nothing consumed yet: the commit asked before the first reconciliation replies at once.
    assert g.commit_requests == []
    assigned = [e for e in g.membership_events if isinstance(e, InvokeAssigned)]
    assert [e.partitions for e in assigned] == [frozenset({tp("a", 0), tp("a", 1)})]
    g.complete_callbacks()
    g.answer_heartbeat(1, None)  # the acknowledgement
    g.h.own({tp("a", 0): 10, tp("a", 1): 20})  # the application consumed

    g.h.advance(5_000)
    g.answer_heartbeat(2, {"a": [1]})  # a-0 moves away: epoch 2
    assert g.h.m.member_epoch == 2  # MemberEpochChanged reached the commit manager
    (commit,) = g.commit_requests
    assert commit.request.member_id == MEMBER_ID
    assert commit.request.generation_id_or_member_epoch == 2
    assert request_offsets(commit) == {tp("a", 0): oam(10), tp("a", 1): oam(20)}
    # No revocation callback before the commit completes.
    assert not [e for e in g.membership_events if isinstance(e, InvokeRevoked)]

    g.h.ok(commit)
    g.route()
    revoked = [e for e in g.membership_events if isinstance(e, InvokeRevoked)]
    assert [e.partitions for e in revoked] == [frozenset({tp("a", 0)})]
    assert g.h.m.last_committed[tp("a", 0)] == oam(10)
