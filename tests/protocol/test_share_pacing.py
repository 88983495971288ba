"""Never hammer a broker (issue 20), the share consumer's protocol managers: with a fake clock
polled every millisecond and a broker answering every request with a failure one millisecond
later, the ShareGroupHeartbeat, ShareFetch and ShareAcknowledge requests over a window stay
within Java's schedule (``retry.backoff.ms`` 100 doubling to ``retry.backoff.max.ms`` 1000,
jitter 0.2, at its shortest) plus :data:`MARGIN`; a success resets the backoff."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_actors.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidShareSessionEpochError,
    KafkaConnectionError,
    KafkaStorageError,
    KafkaTimeoutError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    ShareSessionLimitReachedError,
    ShareSessionNotFoundError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from kafka_actors.protocol.group.events import CoordinatorUnknown
from kafka_actors.protocol.messages import TopicPartition, UnsentRequest
from kafka_actors.protocol.share.fetch import ShareFetchConfig, ShareFetchManager
from kafka_actors.protocol.share.membership import ShareMembershipConfig, ShareMembershipManager
from kafka_actors.protocol.wire.apis import ApiKey
from tests.protocol.java_backoff import MARGIN, java_max_requests

WINDOW_MS = 10_000
LATENCY_MS = 1
A_ID = uuid.UUID("aaaaaaaa-0000-0000-0000-000000000001")
A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)
#: The jitter at its two ends and in the middle: every one stays within the schedule.
JITTERS = (0.0, 0.5, 0.999)


def test_the_schedule() -> None:
    # 0, then 80, 240, 560, 1200, then every 800 ms.
    assert java_max_requests(1_199) == 4
    assert java_max_requests(WINDOW_MS) == 16


# -- ShareGroupHeartbeat -----------------------------------------------------------------------


def _heartbeat(code: int, interval_ms: int = 5_000) -> Any:
    return SimpleNamespace(
        error_code=code,
        error_message=None,
        member_id="m-1",
        member_epoch=1,
        heartbeat_interval=datetime.timedelta(milliseconds=interval_ms),
        assignment=None,
    )


def _run_membership(
    m: ShareMembershipManager,
    answer: Callable[[ShareMembershipManager, UnsentRequest, int], None],
    start_ms: int,
    end_ms: int,
) -> int:
    """Poll every millisecond; each request is answered ``LATENCY_MS`` later by ``answer``; a
    lost coordinator is found again at once. Returns the heartbeats sent."""
    sent = 0
    pending: list[tuple[int, UnsentRequest]] = []
    for now in range(start_ms, end_ms):
        for due, request in [p for p in pending if p[0] <= now]:
            pending.remove((due, request))
            answer(m, request, now)
        result = m.poll(now)
        if any(isinstance(e, CoordinatorUnknown) for e in result.events):
            m.on_coordinator_discovered(now)
        for request in result.requests:
            assert int(request.request.__api_key__) == ApiKey.SHARE_GROUP_HEARTBEAT
            sent += 1
            pending.append((now + LATENCY_MS, request))
    return sent


def _member(jitter: float) -> ShareMembershipManager:
    m = ShareMembershipManager(
        ShareMembershipConfig(group_id="g"), member_id="m-1", random=lambda: jitter
    )
    m.on_coordinator_discovered(0)
    m.subscribe(["a"])
    return m


def _answer_code(code: int) -> Callable[[ShareMembershipManager, UnsentRequest, int], None]:
    def answer(m: ShareMembershipManager, request: UnsentRequest, now: int) -> None:
        m.on_response(request.request_id, _heartbeat(code), now)

    return answer


def _answer_failure(
    error: BaseException,
) -> Callable[[ShareMembershipManager, UnsentRequest, int], None]:
    def answer(m: ShareMembershipManager, request: UnsentRequest, now: int) -> None:
        m.on_failure(request.request_id, error, now)

    return answer


HEARTBEAT_FAILURES = {
    "COORDINATOR_NOT_AVAILABLE": _answer_code(CoordinatorNotAvailableError.code),
    "NOT_COORDINATOR": _answer_code(NotCoordinatorError.code),
    "COORDINATOR_LOAD_IN_PROGRESS": _answer_code(CoordinatorLoadInProgressError.code),
    "disconnect": _answer_failure(KafkaConnectionError("gone", node=1)),
    "timeout": _answer_failure(KafkaTimeoutError("no answer")),
}


@pytest.mark.parametrize("jitter", JITTERS)
@pytest.mark.parametrize("failure", sorted(HEARTBEAT_FAILURES))
def test_share_heartbeats_back_off_to_the_maximum_while_they_fail(
    failure: str, jitter: float
) -> None:
    m = _member(jitter)
    sent = _run_membership(m, HEARTBEAT_FAILURES[failure], 0, WINDOW_MS)
    assert sent <= java_max_requests(WINDOW_MS) + MARGIN
    # It keeps trying: never fewer than one every retry.backoff.max.ms (1.2 s with jitter).
    assert sent >= WINDOW_MS // 1_200


def test_a_successful_heartbeat_resets_the_share_heartbeat_backoff() -> None:
    m = _member(0.5)
    # A minute of failures: the backoff is at its maximum.
    _run_membership(m, _answer_code(CoordinatorNotAvailableError.code), 0, 60_000)
    # The coordinator is back: the member joins, then heartbeats at its interval.
    sent = _run_membership(m, _answer_code(0), 60_000, 70_000)
    assert 2 <= sent <= 4  # the retry (within 1 s), then one every 5 s
    # It fails again: the first retry comes after retry.backoff.ms, not the maximum.
    answers: list[int] = []

    def fail(m: ShareMembershipManager, request: UnsentRequest, now: int) -> None:
        answers.append(now)
        m.on_response(request.request_id, _heartbeat(CoordinatorNotAvailableError.code), now)

    _run_membership(m, fail, 70_000, 80_000)
    assert len(answers) >= 2
    assert answers[1] - answers[0] <= 100 + 2 * LATENCY_MS + 1


# -- ShareFetch / ShareAcknowledge ---------------------------------------------------------------


class Cluster:
    def __init__(self, leaders: dict[TopicPartition, int]) -> None:
        self.leaders = leaders

    def leader_for(self, tp: TopicPartition) -> tuple[int, int | None] | None:
        node = self.leaders.get(tp)
        return None if node is None else (node, 0)

    def topic_id(self, name: str) -> str | None:
        return str(A_ID) if name == "a" else None

    def topic_name(self, topic_id: Any) -> str | None:
        return "a" if str(topic_id) == str(A_ID) else None

    def node(self, node_id: int) -> object | None:
        return object() if node_id in (1, 2) else None


def _part(partition: int, code: int = 0) -> Any:
    return SimpleNamespace(
        partition_index=partition,
        error_code=code,
        error_message=None,
        acknowledge_error_code=0,
        acknowledge_error_message=None,
        records=b"",
        acquired_records=(),
    )


def _share_response(code: int = 0, parts: tuple[Any, ...] = ()) -> Any:
    return SimpleNamespace(
        error_code=code,
        error_message=None,
        throttle_time=datetime.timedelta(0),
        acquisition_lock_timeout=datetime.timedelta(seconds=30),
        responses=(SimpleNamespace(topic_id=A_ID, partitions=parts),) if parts else (),
        node_endpoints=(),
    )


def _fetched(request: UnsentRequest) -> set[int]:
    """The partitions of topic a a ShareFetch adds to (or fetches in) its session."""
    return {p.partition_index for t in request.request.topics for p in t.partitions}


def _fetching(requests: list[UnsentRequest]) -> list[set[int]]:
    """The partitions each ShareFetch (to one broker) fetches: those it adds, and at an epoch
    after 0 those of the session before it, less those it forgets."""
    out: list[set[int]] = []
    session: set[int] = set()
    for request in requests:
        body = request.request
        if int(body.__api_key__) != ApiKey.SHARE_FETCH:
            out.append(set())
            continue
        forgotten = {p for f in body.forgotten_topics_data for p in f.partitions}
        base = set() if body.share_session_epoch == 0 else session
        session = (base | _fetched(request)) - forgotten
        out.append(set(session))
    return out


def _fetcher(jitter: float, leaders: dict[TopicPartition, int] | None = None) -> ShareFetchManager:
    m = ShareFetchManager(
        ShareFetchConfig(group_id="g"),
        member_id="m",
        fetch_version=1,
        acknowledge_version=1,
        random=lambda: jitter,
    )
    m.on_cluster_updated(Cluster(leaders or {A0: 1}))
    m.on_assignment(leaders or {A0: 1})
    return m


Answer = Callable[[ShareFetchManager, UnsentRequest, int], None]


def _run_fetcher(
    m: ShareFetchManager,
    answer: Answer,
    start_ms: int,
    end_ms: int,
    *,
    each_ms: Callable[[ShareFetchManager, int], None] | None = None,
) -> list[UnsentRequest]:
    """Poll every millisecond (after ``each_ms``: the application), answer each request
    ``LATENCY_MS`` later with ``answer``; returns the requests sent."""
    sent: list[UnsentRequest] = []
    pending: list[tuple[int, UnsentRequest]] = []
    for now in range(start_ms, end_ms):
        for due, request in [p for p in pending if p[0] <= now]:
            pending.remove((due, request))
            answer(m, request, now)
        if each_ms is not None:
            each_ms(m, now)
        for request in m.poll(now).requests:
            sent.append(request)
            pending.append((now + LATENCY_MS, request))
    return sent


def _top_level(code: int) -> Answer:
    def answer(m: ShareFetchManager, request: UnsentRequest, now: int) -> None:
        m.on_response(request.request_id, _share_response(code), now)

    return answer


def _failure(error: BaseException) -> Answer:
    def answer(m: ShareFetchManager, request: UnsentRequest, now: int) -> None:
        m.on_failure(request.request_id, error, now)

    return answer


def _partition_error(code: int, *, metadata_at_once: bool = False) -> Answer:
    """Every fetched partition answered with ``code``; ``metadata_at_once``: the metadata
    refresh it asks for comes back at once, naming the same leader."""

    def answer(m: ShareFetchManager, request: UnsentRequest, now: int) -> None:
        parts = tuple(_part(p, code) for p in sorted(_fetched(request)))
        m.on_response(request.request_id, _share_response(0, parts), now)
        if metadata_at_once:
            m.on_cluster_updated(Cluster({A0: 1}))

    return answer


def _application(m: ShareFetchManager, now: int) -> None:
    """An application that polls (and catches what it raises) every millisecond."""
    try:
        m.collect(500)
    except Exception:  # the partition's error, raised to the application
        pass


FETCH_FAILURES = {
    "disconnect": _failure(KafkaConnectionError("gone", node=1)),
    "timeout": _failure(KafkaTimeoutError("no answer")),
    "SHARE_SESSION_NOT_FOUND": _top_level(ShareSessionNotFoundError.code),
    "INVALID_SHARE_SESSION_EPOCH": _top_level(InvalidShareSessionEpochError.code),
    "SHARE_SESSION_LIMIT_REACHED": _top_level(ShareSessionLimitReachedError.code),
    "COORDINATOR_NOT_AVAILABLE": _top_level(CoordinatorNotAvailableError.code),
    "UNKNOWN_SERVER_ERROR": _top_level(UnknownServerError.code),
}


@pytest.mark.parametrize("jitter", JITTERS)
@pytest.mark.parametrize("failure", sorted(FETCH_FAILURES))
def test_share_fetches_back_off_while_the_broker_fails_them(failure: str, jitter: float) -> None:
    m = _fetcher(jitter)
    sent = _run_fetcher(m, FETCH_FAILURES[failure], 0, WINDOW_MS, each_ms=_application)
    # A lost session is reopened at once once (as Java), then backs off: one more.
    allowed = java_max_requests(WINDOW_MS) + MARGIN + ("SESSION" in failure)
    assert len(sent) <= allowed
    assert len(sent) >= WINDOW_MS // 1_200


PARTITION_FAILURES = {
    "NOT_LEADER_OR_FOLLOWER": _partition_error(NotLeaderOrFollowerError.code),
    "NOT_LEADER_OR_FOLLOWER, metadata at once": _partition_error(
        NotLeaderOrFollowerError.code, metadata_at_once=True
    ),
    "UNKNOWN_TOPIC_OR_PARTITION, metadata at once": _partition_error(
        UnknownTopicOrPartitionError.code, metadata_at_once=True
    ),
    "KAFKA_STORAGE_ERROR, metadata at once": _partition_error(
        KafkaStorageError.code, metadata_at_once=True
    ),
    "COORDINATOR_NOT_AVAILABLE": _partition_error(CoordinatorNotAvailableError.code),
    "UNKNOWN_SERVER_ERROR": _partition_error(UnknownServerError.code),
}


@pytest.mark.parametrize("jitter", JITTERS)
@pytest.mark.parametrize("failure", sorted(PARTITION_FAILURES))
def test_a_partition_the_broker_answers_with_an_error_is_fetched_again_only_after_a_backoff(
    failure: str, jitter: float
) -> None:
    m = _fetcher(jitter)
    sent = _run_fetcher(m, PARTITION_FAILURES[failure], 0, WINDOW_MS, each_ms=_application)
    fetches = [r for r, parts in zip(sent, _fetching(sent), strict=True) if A0.partition in parts]
    assert len(fetches) <= java_max_requests(WINDOW_MS) + MARGIN
    # Between two, the session forgets the partition (one request each time at most).
    assert len(sent) <= 2 * len(fetches) + MARGIN


def test_a_partition_refused_by_a_broker_that_is_no_longer_its_leader_moves_at_once() -> None:
    m = _fetcher(0.5)
    (req,) = m.poll(0).requests
    parts = (_part(0, NotLeaderOrFollowerError.code),)
    m.on_response(req.request_id, _share_response(0, parts), 1)
    m.on_cluster_updated(Cluster({A0: 2}))
    moved = [r for r in m.poll(2).requests if r.node == 2]
    assert len(moved) == 1 and _fetched(moved[0]) == {0}


def test_the_other_partitions_of_a_broker_are_fetched_while_one_backs_off() -> None:
    m = _fetcher(0.5, {A0: 1, A1: 1})
    (req,) = m.poll(0).requests
    parts = (_part(0, CoordinatorNotAvailableError.code), _part(1))
    m.on_response(req.request_id, _share_response(0, parts), 1)
    (nxt,) = m.poll(2).requests  # a-1 fetched again at once; a-0 forgotten meanwhile
    forgotten = {p for f in nxt.request.forgotten_topics_data for p in f.partitions}
    assert forgotten == {0}
    m.on_response(nxt.request_id, _share_response(0, (_part(1),)), 3)
    readded: list[int] = []

    def ok(m: ShareFetchManager, request: UnsentRequest, now: int) -> None:
        if 0 in _fetched(request):
            readded.append(now - LATENCY_MS)
        parts = tuple(_part(p) for p in sorted(_fetched(request)))
        m.on_response(request.request_id, _share_response(0, parts), now)

    _run_fetcher(m, ok, 3, 300)
    # a-0 is added back once, after retry.backoff.ms (100, no jitter) from its error at 1.
    assert readded == [101]


def test_a_success_resets_the_share_fetch_backoff() -> None:
    m = _fetcher(0.5)
    _run_fetcher(m, _failure(KafkaConnectionError("gone", node=1)), 0, 60_000)
    times: list[int] = []

    def ok_then_fail(m: ShareFetchManager, request: UnsentRequest, now: int) -> None:
        times.append(now)
        if len(times) == 1:
            m.on_response(request.request_id, _share_response(0, (_part(0),)), now)
        else:
            m.on_failure(request.request_id, KafkaConnectionError("gone", node=1), now)

    _run_fetcher(m, ok_then_fail, 60_000, 61_000)
    # After the success, the next fetch goes at once; after its failure, retry.backoff.ms.
    assert len(times) >= 3
    assert times[1] - times[0] <= 2 * LATENCY_MS
    assert times[2] - times[1] <= 100 + 2 * LATENCY_MS + 1


def test_share_acknowledge_failures_back_off_while_the_application_commits() -> None:
    """The application acknowledges and commits every millisecond (records of a-0, handed
    out once); every request to the broker fails: the ShareAcknowledge requests (and
    ShareFetch) stay within the schedule."""
    m = _fetcher(0.5)
    (req,) = m.poll(0).requests
    acquired = SimpleNamespace(first_offset=0, last_offset=9_999_999, delivery_count=1)
    part = _part(0)
    part.acquired_records = (acquired,)
    m.on_response(req.request_id, _share_response(0, (part,)), 1)
    offsets = iter(range(10_000_000))
    commit_ids = iter(range(1, 10_000_000))

    def application(m: ShareFetchManager, now: int) -> None:
        m.acknowledge({A0: [(next(offsets), 1)]})
        m.commit(next(commit_ids))

    sent = _run_fetcher(
        m, _failure(KafkaConnectionError("gone", node=1)), 2, 2 + WINDOW_MS, each_ms=application
    )
    assert len(sent) <= java_max_requests(WINDOW_MS) + MARGIN
