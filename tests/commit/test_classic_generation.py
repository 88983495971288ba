"""Commits of a classic group member without a stable generation fail at once, as Java's
(``generationIfStable()`` null): RebalanceInProgressError during a rebalance, CommitFailedError
when not joined; never an OffsetCommit with generation -1 for a subscribed member.

Found by tests/interop/test_mixed_groups.py (cooperative-sticky): our member's commits during
a rebalance went out with generation -1 and came back as ILLEGAL_GENERATION, reported as
"the member is no longer part of the group" while Java's member in the same group reported
RebalanceInProgressException.
"""

from __future__ import annotations

from kio.schema.sync_group.v5 import request as sync_req

from kafka_actors.errors import CommitFailedError, RebalanceInProgressError
from kafka_actors.protocol.group.consumer.membership import MemberEpochChanged
from kafka_actors.protocol.offsets.commit import CommitCompleted
from kafka_actors.protocol.subscription import FetchPosition
from tests.classic.classic_harness import Driver, join_response, sync_response

from .harness import MEMBER_ID, Harness, oam, request_offsets, tp


def _subscribed(h: Harness) -> None:
    h.subs.subscribe({"a"})
    h.subs.assign_from_subscribed([tp("a", 0)])
    h.subs.seek(tp("a", 0), FetchPosition(10, None))


def test_commit_during_a_rebalance_fails_with_rebalance_in_progress_without_a_request() -> None:
    h = Harness(protocol="classic")
    _subscribed(h)
    h.m.on_member_epoch_changed(MemberEpochChanged(MEMBER_ID, None, rebalancing=True))
    h.m.commit_sync({tp("a", 0): oam(12)}, h.now + 10_000, "sync")
    h.nothing_sent()
    (done,) = h.take(CommitCompleted)
    assert type(done.error) is RebalanceInProgressError
    assert "poll()" in str(done.error)
    h.m.commit_async(None, "async")
    h.nothing_sent()
    (done,) = h.take(CommitCompleted)
    assert type(done.error) is RebalanceInProgressError


def test_commit_when_not_joined_fails_with_commit_failed_without_a_request() -> None:
    h = Harness(protocol="classic")
    _subscribed(h)
    h.m.on_member_epoch_changed(MemberEpochChanged(MEMBER_ID, None))
    h.m.commit_sync(None, h.now + 10_000, "sync")
    h.nothing_sent()
    (done,) = h.take(CommitCompleted)
    assert type(done.error) is CommitFailedError
    assert "not part of an active group" in str(done.error)


def test_commit_with_a_stable_generation_carries_it() -> None:
    h = Harness(protocol="classic")
    _subscribed(h)
    h.m.on_member_epoch_changed(MemberEpochChanged(MEMBER_ID, None, rebalancing=True))
    h.m.on_member_epoch_changed(MemberEpochChanged(MEMBER_ID, 4))
    h.m.commit_sync(None, h.now + 10_000, "sync")
    request = h.send()
    assert request.request.generation_id_or_member_epoch == 4
    assert request_offsets(request) == {tp("a", 0): oam(10)}
    h.ok(request)
    (done,) = h.take(CommitCompleted)
    assert done.error is None


def test_standalone_commit_still_goes_out_with_generation_minus_one() -> None:
    h = Harness(protocol="classic")
    h.own({tp("a", 0): 10})
    h.m.commit_sync(None, h.now + 10_000, "sync")
    request = h.send()
    assert request.request.generation_id_or_member_epoch == -1
    h.ok(request)
    (done,) = h.take(CommitCompleted)
    assert done.error is None


def test_classic_manager_publishes_rebalancing_while_join_or_sync_is_in_flight() -> None:
    d = Driver()
    join = d.join_request("a")
    assert MemberEpochChanged("", None, rebalancing=True) in d.take()
    d.respond(join, join_response(generation=3, member_id="m-1", leader="m-0"))
    sync = d.one(sync_req.SyncGroupRequest)
    assert MemberEpochChanged("m-1", None, rebalancing=True) in d.take()
    d.respond(sync, sync_response([tp("a", 0)]))
    events = d.take()
    assert MemberEpochChanged("m-1", 3, rebalancing=False) in events


def test_illegal_generation_while_rebalancing_again_is_rebalance_in_progress() -> None:
    """The commit left with generation 4; the JoinGroup of the next rebalance reached the
    coordinator first, so the answer is ILLEGAL_GENERATION while the member is rebalancing:
    it is still in the group (poll and retry), not gone."""
    h = Harness(protocol="classic")
    _subscribed(h)
    h.m.on_member_epoch_changed(MemberEpochChanged(MEMBER_ID, 4))
    h.m.commit_sync(None, h.now + 10_000, "sync")
    request = h.send()
    h.m.on_member_epoch_changed(MemberEpochChanged(MEMBER_ID, None, rebalancing=True))
    h.ok(request, {tp("a", 0): 22})
    (done,) = h.take(CommitCompleted)
    assert type(done.error) is RebalanceInProgressError
    assert "generation 4" in str(done.error)


def test_illegal_generation_read_after_a_newer_generation_is_rebalance_in_progress() -> None:
    """The membership finished the next rebalance (generation 5, same member id) before the
    answer to the commit sent with generation 4 was read (ciF's landing run: the mixed group
    with Java members, cooperative-sticky): the member is in the group, so poll and retry,
    not "no longer part of the group"."""
    h = Harness(protocol="classic")
    _subscribed(h)
    h.m.on_member_epoch_changed(MemberEpochChanged(MEMBER_ID, 4))
    h.m.commit_sync(None, h.now + 10_000, "sync")
    request = h.send()
    h.m.on_member_epoch_changed(MemberEpochChanged(MEMBER_ID, 5))
    h.ok(request, {tp("a", 0): 22})
    (done,) = h.take(CommitCompleted)
    assert type(done.error) is RebalanceInProgressError
    assert "generation 4" in str(done.error)


def test_illegal_generation_of_a_stable_member_is_commit_failed_naming_the_sent_one() -> None:
    """Same generation when the answer is read: the coordinator moved on without this member."""
    h = Harness(protocol="classic")
    _subscribed(h)
    h.m.on_member_epoch_changed(MemberEpochChanged(MEMBER_ID, 4))
    h.m.commit_sync(None, h.now + 10_000, "sync")
    request = h.send()
    h.ok(request, {tp("a", 0): 22})
    (done,) = h.take(CommitCompleted)
    assert type(done.error) is CommitFailedError
    assert "generation 4" in str(done.error)


def test_illegal_generation_after_a_new_member_id_is_commit_failed() -> None:
    """The member was fenced and joined again under a new member id: the commit's partitions
    may belong to another member now."""
    h = Harness(protocol="classic")
    _subscribed(h)
    h.m.on_member_epoch_changed(MemberEpochChanged(MEMBER_ID, 4))
    h.m.commit_sync(None, h.now + 10_000, "sync")
    request = h.send()
    h.m.on_member_epoch_changed(MemberEpochChanged("another-id", 5))
    h.ok(request, {tp("a", 0): 22})
    (done,) = h.take(CommitCompleted)
    assert type(done.error) is CommitFailedError
