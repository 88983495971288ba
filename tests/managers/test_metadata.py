"""MetadataManager and Cluster: deterministic tests with fabricated Metadata responses."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_actors.errors import (
    DisconnectedError,
    InvalidRegularExpressionError,
    InvalidTopicError,
    KafkaTimeoutError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from kafka_actors.protocol.messages import ANY_NODE
from kafka_actors.protocol.metadata import (
    UNKNOWN_TOPIC_ATTEMPTS,
    Cluster,
    ClusterUpdated,
    MetadataConfig,
    MetadataErrorEvent,
    MetadataManager,
    Node,
    PartitionInfo,
    PatternSubscriptionMatched,
    TopicInfo,
    TopicMetadataCompleted,
    TopicNamesResolved,
)
from kafka_actors.protocol.wire.versions import NegotiatedVersions
from tests.managers.harness import (
    TOPIC_IDS,
    P,
    T,
    events_of,
    metadata_response,
    only_request,
    requested_topics,
    seeded_random,
    tp,
    versions,
)

LEADER_NOT_AVAILABLE = 5
UNKNOWN_TOPIC = 3
TOPIC_AUTH = 29
INVALID_TOPIC = 17


def manager(version: int = 12, **config: Any) -> MetadataManager:
    return MetadataManager(
        MetadataConfig(**config), versions(metadata=version), random=seeded_random()
    )


def respond(m: MetadataManager, now: int, topics: list[T], version: int = 12, **kw: Any) -> Any:
    """Poll at ``now``; answer the one request; return the events of the next poll."""
    request = only_request(m.poll(now))
    m.on_response(request.request_id, metadata_response(version, topics, **kw), now)
    return m.poll(now)


# -- Cluster -----------------------------------------------------------------------------------


def test_cluster_lookups() -> None:
    cluster = Cluster.build(
        nodes=[Node(1, "h1", 9092, "r1"), Node(2, "h2", 9093)],
        topics=[
            TopicInfo(
                "orders",
                str(TOPIC_IDS["orders"]),
                {1: PartitionInfo(1, 2, 7), 0: PartitionInfo(0, 1, 3)},
            ),
            TopicInfo("lost", None, {0: PartitionInfo(0, 9, 1), 1: PartitionInfo(1, None)}),
        ],
        controller_id=1,
        cluster_id="c",
    )
    assert cluster.leader_for(tp("orders", 0)) == (1, 3)
    assert cluster.leader_for(tp("orders", 1)) == (2, 7)
    assert cluster.leader_for(tp("orders", 2)) is None  # no such partition
    assert cluster.leader_for(tp("lost", 0)) is None  # leader's address unknown
    assert cluster.leader_for(tp("lost", 1)) is None  # no leader
    assert cluster.leader_for(tp("nope", 0)) is None
    assert cluster.topic_id("orders") == str(TOPIC_IDS["orders"])
    assert cluster.topic_name(TOPIC_IDS["orders"]) == "orders"
    assert cluster.topic_name(str(TOPIC_IDS["orders"])) == "orders"
    assert cluster.topic_id("lost") is None
    assert [p.partition for p in cluster.partitions_for("orders") or ()] == [0, 1]
    assert cluster.partitions_for("nope") is None
    assert cluster.node(1) == Node(1, "h1", 9092, "r1")
    assert cluster.node(3) is None
    assert cluster.topic_ids() == {"orders": str(TOPIC_IDS["orders"])}


# -- Request shapes ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 4, 7, 9, 10, 12, 13])
def test_request_shape_per_version(version: int) -> None:
    m = manager(version)
    m.set_subscription(["payments", "orders"])
    request = only_request(m.poll(0))
    assert request.node == ANY_NODE
    assert request.request.__version__ == version
    assert type(request.request).__module__ == f"kio.schema.metadata.v{version}.request"
    assert requested_topics(request.request) == ["orders", "payments"]
    if version >= 4:
        assert request.request.allow_auto_topic_creation is True


@pytest.mark.parametrize("version", [0, 1, 12])
def test_no_topics_wanted(version: int) -> None:
    """Nothing wanted: v1+ ask for no topics (brokers only); v0 cannot, its empty list means
    all topics (the response then covers all: a list_topics waiter completes from it)."""
    m = manager(version)
    request = only_request(m.poll(0))
    assert requested_topics(request.request) == []
    key = m.fetch_topic_metadata(None, deadline_ms=10_000, now_ms=0)
    m.on_response(request.request_id, metadata_response(version, [T("orders")]), 0)
    done = events_of(m.poll(0), TopicMetadataCompleted)
    if version == 0:
        assert [d.request_key for d in done] == [key]
    else:
        assert done == []


def test_allow_auto_create_topics_false_is_sent() -> None:
    m = manager(allow_auto_create_topics=False)
    m.set_subscription(["orders"])
    assert only_request(m.poll(0)).request.allow_auto_topic_creation is False


@pytest.mark.parametrize("version", [1, 2, 7, 9, 10, 13])
def test_response_applied_per_version(version: int) -> None:
    m = manager(version)
    m.set_subscription(["orders"])
    result = respond(
        m,
        0,
        [T("orders", [P(0, leader=1, epoch=4, replicas=(1, 2)), P(1, leader=2, epoch=9)])],
        version=version,
    )
    (event,) = events_of(result, ClusterUpdated)
    cluster = event.cluster
    assert cluster is m.cluster
    assert set(cluster.nodes) == {1, 2}
    assert cluster.node(2) == Node(2, "b2.local", 9093, None)
    assert cluster.controller_id == 1
    assert cluster.cluster_id == ("cluster-x" if version >= 2 else None)
    assert cluster.topic_id("orders") == (str(TOPIC_IDS["orders"]) if version >= 10 else None)
    epoch = 4 if version >= 7 else None
    assert cluster.leader_for(tp("orders", 0)) == (1, epoch)
    assert cluster.partition(tp("orders", 0)) == PartitionInfo(0, 1, epoch, (1, 2), (1, 2), ())


def test_never_two_requests_in_flight() -> None:
    m = manager()
    first = m.poll(0)
    assert len(first.requests) == 1
    m.request_update("again")
    m.set_subscription(["orders"])
    assert m.poll(1).requests == ()
    assert m.poll(50_000).requests == ()
    assert m.request_in_flight


def test_stale_response_ignored() -> None:
    m = manager()
    request = only_request(m.poll(0))
    m.on_response(request.request_id + 100, metadata_response(12, [T("orders")]), 1)
    assert m.request_in_flight
    assert m.cluster.topics == {}


# -- Timing ------------------------------------------------------------------------------------


def test_periodic_refresh_at_metadata_max_age() -> None:
    m = manager(metadata_max_age_ms=10_000)
    m.set_subscription(["orders"])
    result = respond(m, 1_000, [T("orders")])
    assert result.requests == ()
    assert result.time_until_next_poll_ms == 10_000
    assert m.poll(10_999).requests == ()
    assert len(m.poll(11_000).requests) == 1


def test_request_update_waits_for_backoff_after_success() -> None:
    m = manager(retry_backoff_ms=100, retry_backoff_max_ms=1_000)
    m.set_subscription(["orders"])
    respond(m, 1_000, [T("orders")])
    m.request_update("NOT_LEADER_OR_FOLLOWER from fetch")
    wait = m.time_to_next_update(1_000)
    assert 80 <= wait <= 120  # retry.backoff.ms with jitter 0.2
    assert m.poll(1_000 + wait - 1).requests == ()
    assert len(m.poll(1_000 + wait).requests) == 1


def test_failure_backoff_grows_exponentially_and_is_capped() -> None:
    m = manager(retry_backoff_ms=100, retry_backoff_max_ms=1_000)
    now = 0
    gaps = []
    for _ in range(8):
        request = only_request(m.poll(now))
        m.on_failure(request.request_id, DisconnectedError("gone", node=1), now)
        wait = m.time_to_next_update(now)
        assert m.poll(now + wait - 1).requests == () or wait == 0
        gaps.append(wait)
        now += wait
    for attempt, gap in enumerate(gaps):
        base = min(100 * 2**attempt, 1_000)
        assert min(base * 0.8, 1_000) <= gap <= min(base * 1.2, 1_000), (attempt, gaps)
    assert gaps[-1] <= 1_000 and gaps[-1] >= 800
    # A success resets the attempts.
    request = only_request(m.poll(now))
    m.on_response(request.request_id, metadata_response(12, []), now)
    assert m.failed_attempts == 0


def test_jitter_depends_on_the_injected_random() -> None:
    def waits(seed: int) -> list[int]:
        m = MetadataManager(MetadataConfig(), versions(), random=seeded_random(seed))
        out = []
        now = 0
        for _ in range(4):
            request = only_request(m.poll(now))
            m.on_failure(request.request_id, DisconnectedError("x"), now)
            out.append(m.time_to_next_update(now))
            now += out[-1]
        return out

    assert waits(1) == waits(1)
    assert waits(1) != waits(2)


def test_top_level_error_code_v13_retries_with_backoff() -> None:
    m = manager(13)
    request = only_request(m.poll(0))
    m.on_response(request.request_id, metadata_response(13, [], error=7), 0)  # REQUEST_TIMED_OUT
    result = m.poll(0)
    assert result.requests == () and events_of(result, ClusterUpdated) == []
    assert m.update_requested and m.failed_attempts == 1
    assert 80 <= m.time_to_next_update(0) <= 120


def test_wanted_topics_growing_while_in_flight_asks_again() -> None:
    m = manager()
    m.set_subscription(["orders"])
    request = only_request(m.poll(0))
    m.set_assigned_topics(["payments"])
    m.on_response(request.request_id, metadata_response(12, [T("orders")]), 5)
    assert m.update_requested
    wait = m.time_to_next_update(5)
    assert requested_topics(only_request(m.poll(5 + wait)).request) == ["orders", "payments"]


# -- Leader epochs -----------------------------------------------------------------------------


def test_leader_epoch_never_goes_backwards() -> None:
    m = manager(12)
    m.set_subscription(["orders"])
    respond(m, 0, [T("orders", [P(0, leader=1, epoch=5), P(1, leader=1, epoch=2)])])
    m.request_update("x")
    # Partition 0 comes back with an older epoch (a stale broker): ignored for that partition;
    # partition 1 moves forward and is taken.
    respond(m, 200, [T("orders", [P(0, leader=2, epoch=4), P(1, leader=2, epoch=3)])])
    assert m.cluster.leader_for(tp("orders", 0)) == (1, 5)
    assert m.cluster.leader_for(tp("orders", 1)) == (2, 3)
    assert m.last_seen_leader_epoch(tp("orders", 0)) == 5
    m.request_update("x")
    respond(m, 400, [T("orders", [P(0, leader=2, epoch=5), P(1, leader=2, epoch=3)])])
    assert m.cluster.leader_for(tp("orders", 0)) == (2, 5)  # equal epoch: accepted


def test_new_topic_id_resets_leader_epoch() -> None:
    m = manager(12)
    m.set_subscription(["orders"])
    respond(m, 0, [T("orders", [P(0, leader=1, epoch=9)])])
    import uuid

    recreated = uuid.UUID("00000000-0000-4000-8000-0000000000ff")
    m.request_update("x")
    respond(m, 200, [T("orders", [P(0, leader=2, epoch=0)], topic_id=recreated)])
    assert m.cluster.topic_id("orders") == str(recreated)
    assert m.cluster.leader_for(tp("orders", 0)) == (2, 0)
    assert m.last_seen_leader_epoch(tp("orders", 0)) == 0


def test_leader_epochs_before_v9_are_not_trusted() -> None:
    m = manager(8)
    m.set_subscription(["orders"])
    respond(m, 0, [T("orders", [P(0, leader=1, epoch=5)])], version=8)
    m.request_update("x")
    respond(m, 200, [T("orders", [P(0, leader=2, epoch=4)])], version=8)
    assert m.cluster.leader_for(tp("orders", 0)) == (2, 4)


# -- Per-topic errors --------------------------------------------------------------------------


def test_leader_not_available_is_retried_then_lookup_completes() -> None:
    m = manager()
    key = m.fetch_topic_metadata(["orders"], deadline_ms=60_000, now_ms=0)
    result = respond(m, 0, [T("orders", error=LEADER_NOT_AVAILABLE)])
    assert events_of(result, TopicMetadataCompleted) == []
    assert m.update_requested
    wait = m.time_to_next_update(0)
    assert 80 <= wait <= 120
    result = respond(m, wait, [T("orders", [P(0), P(1, leader=2)])])
    (done,) = events_of(result, TopicMetadataCompleted)
    assert done.request_key == key and done.error is None
    assert done.result is not None
    assert [p.partition for p in done.result["orders"]] == [0, 1]
    # The ad-hoc topic is not wanted any more.
    assert m.wanted_topics() == frozenset()


def test_partition_without_leader_is_retried() -> None:
    m = manager()
    m.set_subscription(["orders"])
    respond(m, 0, [T("orders", [P(0, leader=-1, error=LEADER_NOT_AVAILABLE)])])
    assert m.cluster.leader_for(tp("orders", 0)) is None
    assert m.update_requested


def test_unknown_topic_fails_lookup_after_a_few_answers() -> None:
    m = manager(allow_auto_create_topics=False)
    key = m.fetch_topic_metadata(["nope"], deadline_ms=60_000, now_ms=0)
    now = 0
    done: list[Any] = []
    answers = 0
    while not done:
        request = only_request(m.poll(now))
        assert requested_topics(request.request) == ["nope"]
        m.on_response(
            request.request_id, metadata_response(12, [T("nope", error=UNKNOWN_TOPIC)]), now
        )
        answers += 1
        done = events_of(m.poll(now), TopicMetadataCompleted)
        now += m.time_to_next_update(now)
    assert answers == UNKNOWN_TOPIC_ATTEMPTS
    assert done[0].request_key == key
    assert isinstance(done[0].error, UnknownTopicOrPartitionError)
    assert done[0].error.topic == "nope"


def test_topic_authorization_failed_is_typed_for_lookup_and_subscription() -> None:
    m = manager()
    m.set_subscription(["secret"])
    key = m.fetch_topic_metadata(["secret", "orders"], deadline_ms=60_000, now_ms=0)
    result = respond(m, 0, [T("secret", error=TOPIC_AUTH), T("orders")])
    (done,) = events_of(result, TopicMetadataCompleted)
    assert done.request_key == key
    assert isinstance(done.error, TopicAuthorizationFailedError)
    assert done.error.topic == "secret"
    (err,) = events_of(result, MetadataErrorEvent)
    assert isinstance(err.error, TopicAuthorizationFailedError) and err.error.topic == "secret"


def test_invalid_topic_is_typed() -> None:
    m = manager()
    m.fetch_topic_metadata(["bad name!"], deadline_ms=60_000, now_ms=0)
    result = respond(m, 0, [T("bad name!", error=INVALID_TOPIC)])
    (done,) = events_of(result, TopicMetadataCompleted)
    assert isinstance(done.error, InvalidTopicError)
    assert done.error.topic == "bad name!"


def test_lookup_deadline_gives_timeout_error() -> None:
    m = manager()
    key = m.fetch_topic_metadata(["orders"], deadline_ms=5_000, now_ms=0)
    request = only_request(m.poll(0))
    m.on_failure(request.request_id, DisconnectedError("down"), 10)
    result = m.poll(100)
    assert events_of(result, TopicMetadataCompleted) == []
    assert result.time_until_next_poll_ms is not None
    assert result.time_until_next_poll_ms <= 4_900
    (done,) = events_of(m.poll(5_000), TopicMetadataCompleted)
    assert done.request_key == key
    assert isinstance(done.error, KafkaTimeoutError)
    assert "orders" in str(done.error)


def test_empty_lookup_completes_at_once() -> None:
    m = manager()
    key = m.fetch_topic_metadata([], deadline_ms=1, now_ms=0)
    (done,) = events_of(m.poll(0), TopicMetadataCompleted)
    assert done.request_key == key and done.result == {}


def test_list_topics_asks_for_all_and_returns_every_topic() -> None:
    m = manager()
    m.set_subscription(["orders"])
    key = m.fetch_topic_metadata(None, deadline_ms=60_000, now_ms=0)
    request = only_request(m.poll(0))
    assert requested_topics(request.request) is None
    assert request.request.allow_auto_topic_creation is False
    m.on_response(
        request.request_id,
        metadata_response(12, [T("orders"), T("payments"), T("__consumer_offsets", internal=True)]),
        0,
    )
    (done,) = events_of(m.poll(0), TopicMetadataCompleted)
    assert done.request_key == key
    assert done.result is not None
    assert set(done.result) == {"orders", "payments", "__consumer_offsets"}


def test_non_retriable_failure_fails_waiters() -> None:
    m = manager()
    m.fetch_topic_metadata(["orders"], deadline_ms=60_000, now_ms=0)
    request = only_request(m.poll(0))
    m.on_failure(request.request_id, UnsupportedVersionError("no"), 0)
    result = m.poll(0)
    (done,) = events_of(result, TopicMetadataCompleted)
    assert isinstance(done.error, UnsupportedVersionError)
    assert len(events_of(result, MetadataErrorEvent)) == 1


# -- Regex subscriptions -----------------------------------------------------------------------


def test_regex_subscription_requests_all_topics_and_matches_fully() -> None:
    m = manager()
    m.set_subscription(pattern="orders")
    request = only_request(m.poll(0))
    assert requested_topics(request.request) is None
    topics = [T("orders"), T("orders-eu"), T("payments"), T("__consumer_offsets", internal=True)]
    m.on_response(request.request_id, metadata_response(12, topics), 0)
    (matched,) = events_of(m.poll(0), PatternSubscriptionMatched)
    assert matched.topics == frozenset({"orders"})  # fullmatch: not "orders-eu"
    # Same topics again: no new event.
    m.request_update("x")
    assert events_of(respond(m, 200, topics), PatternSubscriptionMatched) == []
    # A new pattern is matched at once against the topics known (the last response listed
    # all), then again when the update it asks for arrives (unchanged: no second event).
    m.set_subscription(pattern="orders.*|__.*")
    first = m.poll(400)
    (matched,) = events_of(first, PatternSubscriptionMatched)
    assert matched.topics == frozenset({"orders", "orders-eu"})  # internal topics excluded
    m.on_response(only_request(first).request_id, metadata_response(12, topics), 400)
    assert events_of(m.poll(400), PatternSubscriptionMatched) == []
    assert m.matched_topics == matched.topics


def test_regex_includes_internal_topics_when_not_excluded() -> None:
    m = manager(exclude_internal_topics=False)
    m.set_subscription(pattern="__.*")
    result = respond(m, 0, [T("__consumer_offsets", internal=True), T("orders")])
    (matched,) = events_of(result, PatternSubscriptionMatched)
    assert matched.topics == frozenset({"__consumer_offsets"})


def test_invalid_regex_is_refused() -> None:
    with pytest.raises(InvalidRegularExpressionError):
        manager().set_subscription(pattern="orders(")


def test_a_regex_only_the_broker_reads_is_not_matched_here_and_asks_for_no_topic_list() -> None:
    # RE2J's \Q...\E quoting, which Python's re refuses: with the consumer group protocol
    # the coordinator evaluates it, so it is kept (no error) and not matched locally.
    m = manager()
    m.set_subscription(pattern=r"\Qorders.\E.*", broker_evaluated=True)
    assert m.wanted_topics() == frozenset()  # no all-topics request to match it here
    result = respond(m, 0, [T("orders.eu"), T("payments")])
    assert events_of(result, PatternSubscriptionMatched) == []
    m.set_assigned_topics(["orders.eu"])
    assert m.wanted_topics() == frozenset({"orders.eu"})
    with pytest.raises(InvalidRegularExpressionError):  # the classic protocol matches here
        manager().set_subscription(pattern=r"\Qorders.\E.*")


# -- Topic ids and leader-epoch hints ----------------------------------------------------------


def test_resolve_topic_ids_known_at_once_else_after_all_topics_refresh() -> None:
    m = manager()
    m.set_subscription(["orders"])
    respond(m, 0, [T("orders")])
    orders_id = str(TOPIC_IDS["orders"])
    m.resolve_topic_ids([orders_id])
    (resolved,) = events_of(m.poll(1), TopicNamesResolved)
    assert resolved.names == {orders_id: "orders"}
    unknown = "00000000-0000-4000-8000-0000000000ee"
    payments_id = str(TOPIC_IDS["payments"])
    m.resolve_topic_ids([payments_id, unknown])
    result = m.poll(200)
    assert events_of(result, TopicNamesResolved) == []
    request = only_request(result)
    assert requested_topics(request.request) is None  # all topics, to find the ids
    m.on_response(request.request_id, metadata_response(12, [T("orders"), T("payments")]), 200)
    (resolved,) = events_of(m.poll(200), TopicNamesResolved)
    assert resolved.names == {payments_id: "payments"}  # the unknown id is left out
    assert m.wanted_topics() == frozenset({"orders"})


def test_newer_leader_epoch_hint_asks_for_update_and_fences_older_metadata() -> None:
    m = manager()
    m.set_subscription(["orders"])
    respond(m, 0, [T("orders", [P(0, leader=1, epoch=3)])])
    assert not m.update_last_seen_epoch_if_newer(tp("orders", 0), 3)
    assert not m.update_requested
    assert m.update_last_seen_epoch_if_newer(tp("orders", 0), 4)
    assert m.update_requested
    # A response still saying epoch 3 is stale: the partition's leader is unknown until
    # metadata catches up (Java keeps only metadata at the last seen epoch).
    respond(m, 200, [T("orders", [P(0, leader=1, epoch=3)])])
    assert m.cluster.leader_for(tp("orders", 0)) is None
    assert m.update_requested  # and asks again, after the backoff
    respond(m, 400, [T("orders", [P(0, leader=2, epoch=4)])])
    assert m.cluster.leader_for(tp("orders", 0)) == (2, 4)


def test_no_common_version_is_reported_not_raised() -> None:
    m = MetadataManager(MetadataConfig(), NegotiatedVersions(broker={}), random=seeded_random())
    m.fetch_topic_metadata(["orders"], deadline_ms=60_000, now_ms=0)
    result = m.poll(0)
    assert result.requests == ()
    assert isinstance(events_of(result, MetadataErrorEvent)[0].error, UnsupportedVersionError)
    (done,) = events_of(result, TopicMetadataCompleted)
    assert isinstance(done.error, UnsupportedVersionError)
    assert m.time_to_next_update(0) > 0
