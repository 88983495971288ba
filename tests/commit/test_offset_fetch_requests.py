"""The OffsetFetch requests on their own: an ``OffsetFetchRequests`` built with its config, a
SubscriptionState, a CoordinatorLink and an Outbox, without a CommitManager around it."""

from __future__ import annotations

from dataclasses import dataclass

from kafka_actors.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NotCoordinatorError,
)
from kafka_actors.log import get_logger
from kafka_actors.protocol.group.events import CoordinatorUnknown
from kafka_actors.protocol.messages import UnsentRequest
from kafka_actors.protocol.offsets.committed import (
    CommittedOffsetsFetched,
    OffsetFetchRequests,
    PositionsInitialized,
)
from kafka_actors.protocol.offsets.config import CommitConfig, CoordinatorLink
from kafka_actors.protocol.request_state import ExponentialBackoff, Outbox
from kafka_actors.protocol.subscription import (
    FetchPosition,
    OffsetResetStrategy,
    SubscriptionState,
)

from .harness import COORDINATOR, GROUP, MEMBER_ID, fetch_partitions, fetch_response, oam, tp

BACKOFF_MS = 100  # no jitter: retries come exactly this long (x2 per failure) after a failure


@dataclass
class Parts:
    fetches: OffsetFetchRequests
    link: CoordinatorLink
    outbox: Outbox
    subs: SubscriptionState

    def send_one(self, now_ms: int) -> UnsentRequest:
        requests = self.fetches.send_due(now_ms)
        assert len(requests) == 1, requests
        return requests[0]


def build(*, coordinator: int | None = COORDINATOR, version: int = 9) -> Parts:
    config = CommitConfig(group_id=GROUP, offset_fetch_version=version, request_timeout_ms=30_000)
    outbox = Outbox()
    link = CoordinatorLink(config, outbox, get_logger("commit"))
    link.coordinator = coordinator
    subs = SubscriptionState(OffsetResetStrategy.of("earliest"))
    backoff = ExponentialBackoff(BACKOFF_MS, 2, 1_000, 0.0, lambda: 0.5)
    return Parts(OffsetFetchRequests(config, subs, link, outbox, backoff), link, outbox, subs)


def test_a_fetch_goes_to_the_links_coordinator_and_its_answer_goes_to_the_outbox() -> None:
    p = build()
    p.outbox.new_id()  # ids come from the shared outbox: the fetch takes the next one
    p.fetches.fetch_committed([tp("a", 0)], 5_000, "k1")
    assert p.fetches.pending == 1 and p.outbox.drain() == ()
    request = p.send_one(0)
    assert request.node == COORDINATOR and request.request_id == 2
    assert request.timeout_ms == 5_000  # request.timeout.ms cut to the caller's deadline
    assert fetch_partitions(request) == {tp("a", 0)}
    assert p.fetches.owns(2) and not p.fetches.owns(1)
    assert p.fetches.send_due(0) == []  # in flight: not sent again
    p.fetches.on_response(2, fetch_response({tp("a", 0): oam(42)}), 10)
    assert p.outbox.drain() == (CommittedOffsetsFetched("k1", {tp("a", 0): oam(42)}, None),)
    assert p.fetches.pending == 0 and not p.fetches.owns(2)


def test_nothing_is_sent_while_the_link_knows_no_coordinator() -> None:
    p = build(coordinator=None)
    p.fetches.fetch_committed([tp("a", 0)], 5_000, "k1")
    assert p.fetches.send_due(0) == []
    assert p.fetches.poll_delays(0) == [5_000]  # only the caller's deadline
    p.link.coordinator = COORDINATOR
    assert p.send_one(1).node == COORDINATOR


def test_identical_fetches_share_one_request_and_both_callers_get_the_answer() -> None:
    p = build()
    p.link.member_id, p.link.member_epoch = MEMBER_ID, 3
    p.fetches.fetch_committed([tp("a", 0), tp("a", 1)], 5_000, "k1")
    p.fetches.fetch_committed([tp("a", 1), tp("a", 0)], 6_000, "k2")
    assert p.fetches.pending == 1
    request = p.send_one(0)
    assert p.fetches.send_due(0) == []
    p.fetches.on_response(
        request.request_id, fetch_response({tp("a", 0): oam(1), tp("a", 1): None}), 10
    )
    events = p.outbox.drain()
    assert [e.request_key for e in events] == ["k1", "k2"]
    assert all(e.offsets == {tp("a", 0): oam(1), tp("a", 1): None} for e in events)


def test_a_retriable_group_error_is_retried_after_the_backoff_only() -> None:
    p = build()
    p.fetches.fetch_committed([tp("a", 0)], 5_000, "k1")
    first = p.send_one(0)
    p.fetches.on_response(
        first.request_id,
        fetch_response({}, group_error=CoordinatorLoadInProgressError.code),
        10,
    )
    assert p.outbox.drain() == ()  # still waiting for an answer
    assert p.fetches.send_due(10 + BACKOFF_MS - 1) == []
    assert min(p.fetches.poll_delays(10)) == BACKOFF_MS
    second = p.send_one(10 + BACKOFF_MS)
    assert second.request_id != first.request_id
    p.fetches.on_response(second.request_id, fetch_response({tp("a", 0): oam(7)}), 200)
    (done,) = p.outbox.drain()
    assert done == CommittedOffsetsFetched("k1", {tp("a", 0): oam(7)}, None)


def test_not_coordinator_makes_the_links_coordinator_unknown() -> None:
    p = build()
    p.fetches.fetch_committed([tp("a", 0)], 5_000, "k1")
    request = p.send_one(0)
    p.fetches.on_response(
        request.request_id, fetch_response({}, group_error=NotCoordinatorError.code), 10
    )
    assert p.link.coordinator is None
    assert p.outbox.drain() == (CoordinatorUnknown("OffsetFetch error 16"),)
    assert p.fetches.send_due(1_000) == []  # waits for a coordinator


def test_a_failure_typed_by_the_link_is_retried_while_the_caller_waits() -> None:
    p = build()
    p.fetches.fetch_committed([tp("a", 0)], 5_000, "k1")
    request = p.send_one(0)
    error = p.link.request_failed(OSError("connection reset"))
    assert isinstance(error, KafkaConnectionError) and p.link.coordinator is None
    p.fetches.on_failure(request.request_id, error, 10)
    (unknown,) = p.outbox.drain()
    assert isinstance(unknown, CoordinatorUnknown)
    assert p.fetches.pending == 1 and not p.fetches.owns(request.request_id)


def test_the_deadline_without_a_coordinator_is_a_timeout_caused_by_it() -> None:
    p = build(coordinator=None)
    p.fetches.fetch_committed([tp("a", 0)], 5_000, "k1")
    p.fetches.expire(4_999)
    assert p.outbox.drain() == ()
    p.fetches.expire(5_000)
    (done,) = p.outbox.drain()
    assert isinstance(done, CommittedOffsetsFetched) and done.offsets == {}
    assert isinstance(done.error, KafkaTimeoutError)
    assert isinstance(done.error.__cause__, CoordinatorNotAvailableError)
    assert p.fetches.pending == 0


def test_close_brings_the_deadlines_forward() -> None:
    p = build(coordinator=None)
    p.fetches.fetch_committed([tp("a", 0)], 50_000, "k1")
    p.fetches.close(2_000)
    assert p.fetches.poll_delays(0) == [2_000]
    p.fetches.expire(2_000)
    (done,) = p.outbox.drain()
    assert isinstance(done.error, KafkaTimeoutError)


def test_initialize_positions_seeks_the_subscription_to_the_committed_offsets() -> None:
    p = build()
    p.subs.assign_from_user([tp("a", 0), tp("a", 1)])
    p.fetches.initialize_positions(5_000, "init")
    request = p.send_one(0)
    assert fetch_partitions(request) == {tp("a", 0), tp("a", 1)}
    p.fetches.on_response(
        request.request_id, fetch_response({tp("a", 0): oam(42, 5), tp("a", 1): None}), 10
    )
    (done,) = p.outbox.drain()
    assert done == PositionsInitialized(
        "init", {tp("a", 0): oam(42, 5)}, frozenset({tp("a", 1)}), None
    )
    state = p.subs.partition_state(tp("a", 0))
    assert state is not None and state.position == FetchPosition(42, 5)


def test_initialize_positions_with_nothing_to_position_answers_at_once() -> None:
    p = build()
    p.fetches.initialize_positions(5_000, "init")
    assert p.outbox.drain() == (PositionsInitialized("init", {}, frozenset(), None),)
    assert p.fetches.pending == 0 and p.fetches.send_due(0) == []


def test_fail_pending_answers_every_caller_and_forgets_the_requests_in_flight() -> None:
    p = build()
    p.fetches.fetch_committed([tp("a", 0)], 5_000, "k1")
    p.fetches.fetch_committed([tp("b", 0)], 5_000, "k2")
    requests = p.fetches.send_due(0)
    assert len(requests) == 2
    error = KafkaConnectionError("closed")
    p.fetches.fail_pending(error)
    assert [(e.request_key, e.error) for e in p.outbox.drain()] == [("k1", error), ("k2", error)]
    assert p.fetches.pending == 0
    assert not any(p.fetches.owns(r.request_id) for r in requests)


def test_the_link_cuts_the_request_timeout_to_the_deadline_and_reports_the_loss_once() -> None:
    outbox = Outbox()
    link = CoordinatorLink(
        CommitConfig(group_id=GROUP, request_timeout_ms=30_000), outbox, get_logger("commit")
    )
    assert link.request_timeout(None, 0) == 30_000
    assert link.request_timeout(1_000, 0) == 1_000
    assert link.request_timeout(1_000, 5_000) == 1  # past the deadline: the least timeout
    link.mark_coordinator_unknown("no coordinator yet")
    assert outbox.drain() == ()  # none known: nothing to lose
    link.coordinator = COORDINATOR
    timeout = KafkaTimeoutError("request timed out")
    assert link.request_failed(timeout) is timeout
    link.request_failed(KafkaConnectionError("again"))
    assert len(outbox.drain()) == 1 and link.coordinator is None
