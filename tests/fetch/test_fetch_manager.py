"""FetchManager: request shape, fetch sessions (KIP-227), preferred read replicas (KIP-392),
the bounded prefetch buffer, collect (stale data, pause, max.poll.records), read_committed,
error paths, positions, lag and metrics — with fabricated kio Fetch responses."""

from __future__ import annotations

import datetime
import struct
import uuid

import pytest

from kafka_actors.errors import (
    CorruptRecordError,
    KafkaConnectionError,
    OffsetOutOfRangeError,
    TopicAuthorizationFailedError,
)
from kafka_actors.protocol.fetch.manager import (
    FINAL_EPOCH,
    FetchConfig,
    FetchManager,
    MetadataRefreshNeeded,
)
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.build import build_control_batch
from kafka_actors.protocol.records.decode import IsolationLevel
from kafka_actors.protocol.subscription import (
    EARLIEST,
    LATEST,
    NO_RESET,
    FetchPosition,
    LeaderAndEpoch,
    SubscriptionState,
)
from kafka_actors.protocol.wire.apis import ApiKey, VersionRange
from kafka_actors.protocol.wire.versions import NegotiatedVersions

from .fetch_harness import (
    TOPIC_IDS,
    Part,
    batch,
    by_node,
    cluster,
    fetch_response,
    forgotten,
    requested,
    session_of,
    setup,
)

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
U0 = TopicPartition("u", 0)
LEADERS = {T0: (1, 5), T1: (1, 5), U0: (2, 7)}


def values(records: tuple[object, ...] | list[object]) -> list[int]:
    return [r.offset for r in records]  # type: ignore[attr-defined]


# -- request shape -------------------------------------------------------------------------


def test_one_request_per_leader_with_config_and_leader_epochs() -> None:
    fm, _ = setup(
        {T0: 10, T1: 20, U0: 0},
        LEADERS,
        fetch_min_bytes=7,
        fetch_max_bytes=9000,
        fetch_max_wait_ms=250,
        max_partition_fetch_bytes=1234,
        isolation_level=IsolationLevel.READ_COMMITTED,
        client_rack="rack-a",
    )
    result = fm.poll(0)
    reqs = by_node(result.requests)
    assert set(reqs) == {1, 2}
    one = reqs[1].request
    assert one.max_wait == datetime.timedelta(milliseconds=250)
    assert (one.min_bytes, one.max_bytes, one.isolation_level, one.rack_id) == (
        7,
        9000,
        1,
        "rack-a",
    )
    assert one.replica_state.replica_id == -1
    assert session_of(reqs[1]) == (0, 0)  # full fetch creating a session
    parts = requested(reqs[1])
    assert set(parts) == {T0, T1}
    assert (parts[T0].fetch_offset, parts[T1].fetch_offset) == (10, 20)
    assert parts[T0].partition_max_bytes == 1234
    assert parts[T0].current_leader_epoch == 5
    assert parts[T0].last_fetched_epoch == -1
    assert {t.topic_id for t in one.topics} == {uuid.UUID(TOPIC_IDS["t"])}
    assert requested(reqs[2])[U0].current_leader_epoch == 7
    # One fetch in flight per node: nothing more until the responses come.
    assert fm.poll(1).requests == ()
    assert fm.in_flight_nodes() == {1, 2}


def test_version_below_13_names_topics_and_below_7_has_no_session() -> None:
    fm, _ = setup({T0: 3}, LEADERS, version=12)
    req = fm.poll(0).requests[0]
    assert req.request.topics[0].topic == "t"
    assert session_of(req) == (0, 0)
    fm4, _ = setup({T0: 3}, LEADERS, version=4)
    req4 = fm4.poll(0).requests[0]
    assert session_of(req4) == (0, FINAL_EPOCH)  # sessionless full fetch
    fm4.on_response(req4.request_id, fetch_response(4, {T0: Part()}), 1)
    assert session_of(fm4.poll(2).requests[0]) == (0, FINAL_EPOCH)


def test_versions_from_negotiated_versions_per_node() -> None:
    subs = SubscriptionState()
    subs.assign_from_user([T0, U0])
    subs.seek(T0, 0)
    subs.seek(U0, 0)
    fm = FetchManager(subs, FetchConfig())
    fm.on_cluster_updated(cluster(LEADERS))
    assert fm.poll(0).requests == ()  # no versions known: nothing sent
    fm.set_node_versions(1, NegotiatedVersions(broker={ApiKey.FETCH: VersionRange(0, 11)}))
    fm.set_default_versions(NegotiatedVersions(broker={ApiKey.FETCH: VersionRange(0, 17)}))
    reqs = by_node(fm.poll(1).requests)
    assert type(reqs[1].request).__module__.endswith("fetch.v11.request")
    assert type(reqs[2].request).__module__.endswith("fetch.v17.request")


def test_unknown_topic_id_caps_version_or_waits_for_metadata() -> None:
    subs = SubscriptionState()
    subs.assign_from_user([T0])
    subs.seek(T0, 0)
    fm = FetchManager(subs, FetchConfig())
    fm.set_default_versions(NegotiatedVersions(broker={ApiKey.FETCH: VersionRange(4, 17)}))
    fm.on_cluster_updated(cluster(LEADERS, with_ids=False))
    req = fm.poll(0).requests[0]
    assert type(req.request).__module__.endswith("fetch.v12.request")
    # A node that only speaks v13+ cannot name the topic: refresh metadata and wait.
    fixed, _ = setup({T0: 0}, LEADERS, version=13)
    fixed.on_cluster_updated(cluster(LEADERS, with_ids=False))
    result = fixed.poll(0)
    assert result.requests == ()
    assert result.events == (MetadataRefreshNeeded("unknown topic id", (T0,)),)
    assert fixed.poll(1).requests == ()
    fixed.on_cluster_updated(cluster(LEADERS))
    assert requested(fixed.poll(2).requests[0]).keys() == {T0}


def test_partitions_without_known_leader_ask_for_metadata_once() -> None:
    fm, _ = setup({T0: 0, U0: 0}, {T0: (1, 5)})
    result = fm.poll(0)
    assert [r.node for r in result.requests] == [1]
    assert result.events == (MetadataRefreshNeeded("no known leader", (U0,)),)
    fm.on_response(result.requests[0].request_id, fetch_response(17, {T0: Part()}, session_id=9), 1)
    again = fm.poll(2)
    assert again.events == ()  # not asked again until the cluster changes
    assert [r.node for r in again.requests] == [1]
    fm.on_cluster_updated(cluster(LEADERS))
    assert [r.node for r in fm.poll(3).requests] == [2]


def test_not_fetchable_partitions_are_not_fetched() -> None:
    fm, subs = setup({T0: 0, T1: 0, U0: 0}, LEADERS)
    subs.pause([T1])
    subs.mark_pending_revocation([U0])
    reqs = fm.poll(0).requests
    assert [set(requested(r)) for r in reqs] == [{T0}]


# -- fetch sessions ------------------------------------------------------------------------


def test_session_epochs_and_incremental_requests() -> None:
    fm, _ = setup({T0: 0, T1: 0}, LEADERS)
    first = fm.poll(0).requests[0]
    assert session_of(first) == (0, 0)
    fm.on_response(
        first.request_id,
        fetch_response(17, {T0: Part(batch(0, 3), high_watermark=3), T1: Part()}, session_id=77),
        5,
    )
    # T0 has buffered data: it leaves the session (forgotten); T1 is unchanged: not resent.
    second = fm.poll(6).requests[0]
    assert session_of(second) == (77, 1)
    assert requested(second) == {}
    assert forgotten(second) == {T0}
    fm.on_response(second.request_id, fetch_response(17, {}, session_id=77), 7)
    assert values(fm.collect().records[T0]) == [0, 1, 2]
    # T0 comes back at its new position; T1 still unchanged.
    third = fm.poll(8).requests[0]
    assert session_of(third) == (77, 2)
    assert {tp: p.fetch_offset for tp, p in requested(third).items()} == {T0: 3}
    assert forgotten(third) == set()
    # An incremental response carries only partitions with news.
    fm.on_response(
        third.request_id,
        fetch_response(17, {T1: Part(batch(0, 1), high_watermark=1)}, session_id=77),
        9,
    )
    assert fm.buffered_partitions() == {T1}
    assert session_of(fm.poll(10).requests[0]) == (77, 3)


def test_removed_partitions_are_forgotten_and_node_without_partitions_closes_session() -> None:
    fm, subs = setup({T0: 0, T1: 0, U0: 0}, LEADERS)
    reqs = by_node(fm.poll(0).requests)
    fm.on_response(
        reqs[1].request_id, fetch_response(17, {T0: Part(), T1: Part()}, session_id=5), 1
    )
    fm.on_response(reqs[2].request_id, fetch_response(17, {U0: Part()}, session_id=6), 1)
    subs.assign_from_user([T0, U0])
    reqs = by_node(fm.poll(2).requests)
    assert forgotten(reqs[1]) == {T1}
    assert requested(reqs[1]) == {}
    assert session_of(reqs[1]) == (5, 1)
    fm.on_response(reqs[1].request_id, fetch_response(17, {}, session_id=5), 3)
    fm.on_response(reqs[2].request_id, fetch_response(17, {}, session_id=6), 3)
    subs.assign_from_user([U0])
    reqs = by_node(fm.poll(4).requests)
    assert session_of(reqs[1]) == (5, FINAL_EPOCH)  # node 1 has nothing left: close
    assert requested(reqs[1]) == {}
    assert session_of(reqs[2]) == (6, 2)
    assert fm.session(1) is None
    fm.on_response(reqs[1].request_id, fetch_response(17, {}), 5)
    assert all(r.node != 1 for r in fm.poll(6).requests)


@pytest.mark.parametrize(
    ("code", "expected"),
    [(70, (0, 0)), (71, (42, 0))],  # FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH
)
def test_session_errors_lead_to_a_full_fetch(code: int, expected: tuple[int, int]) -> None:
    fm, _ = setup({T0: 0, T1: 0}, LEADERS)
    first = fm.poll(0).requests[0]
    fm.on_response(first.request_id, fetch_response(17, {T0: Part(), T1: Part()}, session_id=42), 1)
    second = fm.poll(2).requests[0]
    assert session_of(second) == (42, 1)
    fm.on_response(second.request_id, fetch_response(17, {}, error=code), 3)
    third = fm.poll(3).requests[0]  # no backoff for session errors
    assert session_of(third) == expected
    assert set(requested(third)) == {T0, T1}  # full: every partition again


def test_full_response_missing_partitions_is_rejected() -> None:
    fm, _ = setup({T0: 0, T1: 0}, LEADERS)
    first = fm.poll(0).requests[0]
    fm.on_response(first.request_id, fetch_response(17, {T0: Part(batch(0, 2))}, session_id=42), 1)
    assert fm.buffered_partitions() == frozenset()  # data of a bad response is not used
    assert session_of(fm.poll(2).requests[0]) == (0, 0)


def test_broker_closing_the_session_means_full_fetch_next() -> None:
    fm, _ = setup({T0: 0}, LEADERS)
    first = fm.poll(0).requests[0]
    fm.on_response(first.request_id, fetch_response(17, {T0: Part()}, session_id=42), 1)
    second = fm.poll(2).requests[0]
    fm.on_response(second.request_id, fetch_response(17, {}, session_id=0), 3)
    third = fm.poll(4).requests[0]
    assert session_of(third) == (0, 0)
    assert set(requested(third)) == {T0}


def test_request_failure_backs_off_and_restarts_the_session() -> None:
    fm, _ = setup({T0: 0}, LEADERS, retry_backoff_ms=100)
    first = fm.poll(0).requests[0]
    fm.on_response(first.request_id, fetch_response(17, {T0: Part()}, session_id=42), 1)
    second = fm.poll(2).requests[0]
    fm.on_failure(second.request_id, KafkaConnectionError("gone", node=1), 10)
    assert fm.in_flight_nodes() == frozenset()
    result = fm.poll(50)
    assert result.requests == ()
    assert result.time_until_next_poll_ms == 60
    third = fm.poll(110).requests[0]
    assert session_of(third) == (42, 0)  # close the old session, open a new one
    assert fm.metrics().fetch_failures == 1


def test_close_sends_final_epoch_to_every_session() -> None:
    fm, _ = setup({T0: 0, U0: 0}, LEADERS)
    reqs = by_node(fm.poll(0).requests)
    fm.on_response(reqs[1].request_id, fetch_response(17, {T0: Part()}, session_id=5), 1)
    fm.close()
    closing = by_node(fm.poll(2).requests)
    assert set(closing) == {1}  # node 2 still has its fetch in flight
    assert session_of(closing[1]) == (5, FINAL_EPOCH)
    fm.on_response(reqs[2].request_id, fetch_response(17, {U0: Part()}, session_id=6), 3)
    closing = by_node(fm.poll(4).requests)
    assert session_of(closing[2]) == (6, FINAL_EPOCH)
    assert fm.poll(5).requests == ()


# -- preferred read replica ----------------------------------------------------------------


def test_preferred_read_replica_is_used_until_it_expires() -> None:
    fm, subs = setup({T0: 0}, LEADERS, metadata_max_age_ms=1000, client_rack="r3")
    first = fm.poll(0).requests[0]
    assert first.node == 1
    fm.on_response(
        first.request_id,
        fetch_response(17, {T0: Part(preferred_read_replica=3, high_watermark=9)}, session_id=1),
        10,
    )
    assert subs.preferred_read_replica(T0, 10) == 3
    reqs = by_node(fm.poll(11).requests)
    assert set(reqs) == {1, 3}
    assert session_of(reqs[1])[1] == FINAL_EPOCH  # the leader's session is closed
    assert requested(reqs[3])[T0].fetch_offset == 0
    assert reqs[3].request.rack_id == "r3"
    fm.on_response(reqs[1].request_id, fetch_response(17, {}), 12)
    fm.on_response(reqs[3].request_id, fetch_response(17, {T0: Part()}, session_id=2), 12)
    assert [r.node for r in fm.poll(500).requests] == [3]
    in_flight = fm.in_flight_request_id(3)
    assert in_flight is not None
    fm.on_response(in_flight, fetch_response(17, {}, session_id=2), 501)
    # Expired after metadata.max.age.ms: back to the leader.
    assert 1 in {r.node for r in fm.poll(1010).requests}


def test_preferred_read_replica_failure_goes_back_to_leader() -> None:
    fm, subs = setup({T0: 0}, LEADERS)
    first = fm.poll(0).requests[0]
    fm.on_response(first.request_id, fetch_response(17, {T0: Part(preferred_read_replica=3)}), 1)
    replica = fm.poll(2).requests[0]
    assert replica.node == 3
    fm.on_failure(replica.request_id, KafkaConnectionError("down", node=3), 3)
    assert subs.preferred_read_replica(T0, 3) is None
    assert [r.node for r in fm.poll(4).requests] == [1]


def test_preferred_read_replica_offset_out_of_range_retries_leader_without_reset() -> None:
    fm, subs = setup({T0: 0}, LEADERS)
    first = fm.poll(0).requests[0]
    fm.on_response(first.request_id, fetch_response(17, {T0: Part(preferred_read_replica=3)}), 1)
    replica = fm.poll(2).requests[0]
    fm.on_response(replica.request_id, fetch_response(17, {T0: Part(error=1)}), 3)
    assert not subs.is_offset_reset_needed(T0)
    assert [r.node for r in fm.poll(4).requests] == [1]


def test_unknown_preferred_replica_node_falls_back_to_leader() -> None:
    fm, subs = setup({T0: 0}, LEADERS)
    subs.update_preferred_read_replica(T0, 9, expire_ms=10_000)  # node 9 not in the cluster
    assert [r.node for r in fm.poll(0).requests] == [1]
    assert subs.preferred_read_replica(T0, 0) is None


# -- buffer --------------------------------------------------------------------------------


def test_partition_with_buffered_data_is_not_fetched_again() -> None:
    fm, _ = setup({T0: 0, T1: 0}, LEADERS)
    first = fm.poll(0).requests[0]
    fm.on_response(
        first.request_id, fetch_response(17, {T0: Part(batch(0, 2)), T1: Part()}, session_id=3), 1
    )
    second = fm.poll(2).requests[0]
    assert forgotten(second) == {T0}
    assert fm.buffered_partitions() == {T0}


def test_full_buffer_stops_fetching_until_collected() -> None:
    data = batch(0, 5)
    fm, _ = setup({T0: 0, U0: 0}, LEADERS, prefetch_buffer_bytes=len(data))
    reqs = by_node(fm.poll(0).requests)
    fm.on_response(reqs[1].request_id, fetch_response(17, {T0: Part(data)}, session_id=1), 1)
    fm.on_response(reqs[2].request_id, fetch_response(17, {U0: Part()}, session_id=2), 1)
    assert fm.buffered_bytes == len(data)
    assert fm.poll(2).requests == ()  # full: U0 is not fetched either
    assert values(fm.collect().records[T0]) == [0, 1, 2, 3, 4]
    assert fm.buffered_bytes == 0
    assert {r.node for r in fm.poll(3).requests} == {1, 2}


# -- collect -------------------------------------------------------------------------------


def _deliver(
    fm: FetchManager, parts: dict[TopicPartition, Part], now: int = 1, session_id: int = 1
) -> None:
    for request in fm.poll(now).requests:
        mine = {tp: p for tp, p in parts.items() if tp in requested(request)}
        for tp in requested(request):
            mine.setdefault(tp, Part())
        fm.on_response(request.request_id, fetch_response(17, mine, session_id=session_id), now)


def test_collect_returns_records_in_order_and_advances_positions() -> None:
    fm, subs = setup({T0: 0}, LEADERS)
    _deliver(fm, {T0: Part(batch(0, 3, leader_epoch=4) + batch(3, 2, leader_epoch=5))})
    result = fm.collect()
    assert values(result.records[T0]) == [0, 1, 2, 3, 4]
    assert [r.value for r in result.records[T0]] == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    assert result.records[T0][0].leader_epoch == 4
    assert result.positions[T0] == FetchPosition(5, 5, LeaderAndEpoch(1, 5))
    assert subs.position(T0) == FetchPosition(5, 5, LeaderAndEpoch(1, 5))
    assert fm.collect().records == {}


def test_records_below_the_position_are_dropped() -> None:
    fm, _ = setup({T0: 2}, LEADERS)
    _deliver(fm, {T0: Part(batch(0, 5))})  # the broker returns the whole batch
    assert values(fm.collect().records[T0]) == [2, 3, 4]


def test_max_poll_records_across_partitions() -> None:
    fm, subs = setup({T0: 0, T1: 0, U0: 0}, LEADERS, max_poll_records=4)
    _deliver(fm, {T0: Part(batch(0, 3)), T1: Part(batch(0, 3)), U0: Part(batch(0, 3))})
    first = fm.collect()
    assert first.record_count == 4
    assert {tp: values(r) for tp, r in first.records.items()} == {T0: [0, 1, 2], T1: [0]}
    second = fm.collect(2)
    assert {tp: values(r) for tp, r in second.records.items()} == {T1: [1, 2]}
    third = fm.collect()
    assert {tp: values(r) for tp, r in third.records.items()} == {U0: [0, 1, 2]}
    assert subs.position(T1).offset == 3  # type: ignore[union-attr]
    assert subs.all_consumed()[T1].offset == 0  # the consumed view moves at hand-out
    # Drained partitions go to the end of the fetch order (fairness).
    assert subs.fetchable_partitions() == (T0, T1, U0)
    with pytest.raises(ValueError):
        fm.collect(0)


def test_collected_partition_moves_to_end_of_fetch_order() -> None:
    fm, subs = setup({T0: 0, T1: 0}, LEADERS)
    _deliver(fm, {T0: Part(batch(0, 1))})
    fm.collect()
    assert subs.fetchable_partitions() == (T1, T0)


def test_a_position_set_with_no_known_leader_takes_the_leader_it_is_fetched_from() -> None:
    """A position set while no leader was known (a committed offset applied before any
    Metadata answer): the fetch records the leader it goes to. Left unknown, the position's
    first records give it an offset epoch and the next Metadata, naming that same leader,
    would count as a leader change and put it awaiting validation (KIP-320) for nothing."""
    fm, subs = setup({T0: 0}, LEADERS)
    subs.seek(T0, 0)  # after the cluster view: the position's leader is unknown
    assert subs.position(T0) == FetchPosition(0)
    _deliver(fm, {T0: Part(batch(0, 3, leader_epoch=5))})
    assert values(fm.collect().records[T0]) == [0, 1, 2]
    assert subs.position(T0) == FetchPosition(3, 5, LeaderAndEpoch(1, 5))
    fm.on_cluster_updated(cluster(LEADERS))  # the same leader
    assert subs.fetchable_partitions() == (T0,)
    # A real leader change still validates.
    fm.on_cluster_updated(cluster({T0: (2, 6), T1: (1, 5), U0: (2, 7)}))
    assert subs.fetchable_partitions() == ()


def test_stale_data_discarded_after_seek() -> None:
    fm, subs = setup({T0: 0, T1: 0}, LEADERS)
    _deliver(fm, {T0: Part(batch(0, 3)), T1: Part(batch(0, 3))})
    subs.seek(T0, 100)
    result = fm.collect()
    assert set(result.records) == {T1}
    assert subs.position(T0) == FetchPosition(100)
    assert fm.buffered_partitions() == frozenset()


def test_seek_to_the_same_offset_keeps_the_data() -> None:
    fm, subs = setup({T0: 0}, LEADERS)
    _deliver(fm, {T0: Part(batch(0, 3))})
    subs.seek(T0, 0)
    assert values(fm.collect().records[T0]) == [0, 1, 2]


def test_seek_between_partial_collects_discards_the_rest() -> None:
    fm, subs = setup({T0: 0}, LEADERS)
    _deliver(fm, {T0: Part(batch(0, 5))})
    assert values(fm.collect(2).records[T0]) == [0, 1]
    subs.seek(T0, 1)  # back: the buffered rest (from 2) does not continue offset 1
    assert fm.collect().records == {}
    assert subs.position(T0) == FetchPosition(1)


def test_poll_frees_buffer_of_stale_data() -> None:
    fm, subs = setup({T0: 0}, LEADERS)
    _deliver(fm, {T0: Part(batch(0, 3))})
    assert fm.buffered_bytes > 0
    subs.seek(T0, 50)
    fm.poll(5)
    assert fm.buffered_bytes == 0


@pytest.mark.parametrize("how", ["revoke", "pending_revocation", "reset"])
def test_data_of_partitions_no_longer_owned_is_never_returned(how: str) -> None:
    fm, subs = setup({T0: 0, T1: 0}, LEADERS)
    _deliver(fm, {T0: Part(batch(0, 3)), T1: Part(batch(0, 3))})
    if how == "revoke":
        subs.assign_from_user([T1])
    elif how == "pending_revocation":
        subs.mark_pending_revocation([T0])
    else:
        subs.request_offset_reset([T0], EARLIEST)
    result = fm.collect()
    assert set(result.records) == {T1}
    assert T0 not in result.positions


def test_paused_partition_data_is_kept_until_resume() -> None:
    fm, subs = setup({T0: 0, T1: 0}, LEADERS)
    _deliver(fm, {T0: Part(batch(0, 3)), T1: Part(batch(0, 3))})
    subs.pause([T0])
    result = fm.collect()
    assert set(result.records) == {T1}
    assert fm.buffered_partitions() == {T0}
    fm.poll(5)  # poll does not drop a paused partition's data
    assert fm.buffered_partitions() == {T0}
    assert T0 not in {tp for r in fm.poll(6).requests for tp in requested(r)}
    subs.resume([T0])
    assert values(fm.collect().records[T0]) == [0, 1, 2]


def test_concurrent_seek_between_check_and_advance_drops_records() -> None:
    """A seek racing the hand-out wins: the records taken are not returned."""

    class SeekingSubs(SubscriptionState):
        def advance_position(
            self, tp: TopicPartition, expected_offset: int, new_position: FetchPosition
        ) -> bool:
            self.seek(tp, 40)  # another thread seeks right now
            return super().advance_position(tp, expected_offset, new_position)

    subs = SeekingSubs()
    fm, _ = setup({T0: 0}, LEADERS, subscriptions=subs)
    _deliver(fm, {T0: Part(batch(0, 3))})
    result = fm.collect()
    assert result.records == {}
    assert subs.position(T0) == FetchPosition(40)


# -- read_committed ------------------------------------------------------------------------


def _transactional_log() -> bytes:
    # producer 7: 0..2 aborted (marker at 3); plain 4..5; producer 8: 6..7 committed (marker 8)
    return (
        batch(0, 3, producer_id=7, producer_epoch=0, transactional=True)
        + build_control_batch(base_offset=3, producer_id=7, producer_epoch=0, commit=False)
        + batch(4, 2)
        + batch(6, 2, producer_id=8, producer_epoch=0, transactional=True)
        + build_control_batch(base_offset=8, producer_id=8, producer_epoch=0, commit=True)
    )


def test_read_committed_skips_aborted_transactions_and_control_batches() -> None:
    fm, subs = setup({T0: 0}, LEADERS, isolation_level=IsolationLevel.READ_COMMITTED)
    request = fm.poll(0).requests[0]
    assert request.request.isolation_level == 1
    part = Part(_transactional_log(), high_watermark=9, last_stable_offset=9, aborted=[(7, 0)])
    fm.on_response(request.request_id, fetch_response(17, {T0: part}, session_id=1), 1)
    result = fm.collect()
    assert values(result.records[T0]) == [4, 5, 6, 7]
    assert subs.position(T0) is not None
    assert subs.position(T0).offset == 9  # type: ignore[union-attr]  # past the marker


def test_read_uncommitted_returns_aborted_records() -> None:
    fm, subs = setup({T0: 0}, LEADERS)
    _deliver(fm, {T0: Part(_transactional_log(), aborted=[(7, 0)])})
    assert values(fm.collect().records[T0]) == [0, 1, 2, 4, 5, 6, 7]
    assert subs.position(T0).offset == 9  # type: ignore[union-attr]


def test_only_control_batches_advance_the_position_without_records() -> None:
    fm, subs = setup({T0: 3}, LEADERS)
    marker = build_control_batch(base_offset=3, producer_id=7, producer_epoch=0, commit=True)
    _deliver(fm, {T0: Part(marker)})
    result = fm.collect()
    assert result.records == {}
    assert result.positions[T0].offset == 4
    assert subs.position(T0).offset == 4  # type: ignore[union-attr]


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [6, 3, 74, 75, 56, 78])
def test_metadata_errors_ask_for_refresh_and_retry_after_it(code: int) -> None:
    fm, _ = setup({T0: 0, T1: 0}, LEADERS)
    first = fm.poll(0).requests[0]
    fm.on_response(
        first.request_id,
        fetch_response(17, {T0: Part(error=code), T1: Part()}, session_id=1),
        1,
    )
    result = fm.poll(2)
    assert result.events == (MetadataRefreshNeeded("fetch partition error", (T0,)),)
    assert {tp for r in result.requests for tp in requested(r)} == set()  # T1 unchanged
    assert all(T0 not in requested(r) for r in result.requests)
    fm.on_response(result.requests[0].request_id, fetch_response(17, {}, session_id=1), 3)
    fm.on_cluster_updated(cluster({T0: (2, 6), T1: (1, 5)}))
    reqs = by_node(fm.poll(4).requests)
    assert requested(reqs[2])[T0].current_leader_epoch == 6  # new leader, new epoch


def test_offset_out_of_range_requests_reset_with_auto_offset_reset() -> None:
    subs = SubscriptionState(default_reset_strategy=EARLIEST)
    fm, _ = setup({T0: 50}, LEADERS, subscriptions=subs)
    _deliver(fm, {T0: Part(error=1)})
    assert subs.is_offset_reset_needed(T0)
    assert subs.reset_strategy(T0) == EARLIEST
    assert fm.collect().error is None
    # Awaiting reset: not fetchable (node 1 has nothing left: its session is closed).
    assert all(T0 not in requested(r) for r in fm.poll(5).requests)


def test_offset_out_of_range_without_reset_policy_raises_at_collect() -> None:
    subs = SubscriptionState(default_reset_strategy=NO_RESET)
    fm, _ = setup({T0: 50, T1: 0}, LEADERS, subscriptions=subs)
    _deliver(fm, {T0: Part(error=1), T1: Part(batch(0, 2))})
    # Buffered in response order: T0's error comes first, with no records before it.
    second = fm.collect()
    assert second.records == {}
    assert isinstance(second.error, OffsetOutOfRangeError)
    assert (second.error.topic, second.error.partition, second.error.offset) == ("t", 0, 50)
    assert "t-0" in str(second.error)
    with pytest.raises(OffsetOutOfRangeError):
        second.raise_error()
    third = fm.collect()  # raised once (the next fetch may raise it again)
    assert third.error is None
    assert set(third.records) == {T1}


def test_offset_out_of_range_after_a_seek_is_ignored() -> None:
    subs = SubscriptionState(default_reset_strategy=NO_RESET)
    fm, _ = setup({T0: 50}, LEADERS, subscriptions=subs)
    request = fm.poll(0).requests[0]
    subs.seek(T0, 10)
    fm.on_response(request.request_id, fetch_response(17, {T0: Part(error=1)}), 1)
    assert fm.collect().error is None
    assert not subs.is_offset_reset_needed(T0)


def test_topic_authorization_failed_is_raised_at_collect() -> None:
    fm, _ = setup({T0: 0}, LEADERS)
    _deliver(fm, {T0: Part(error=29)})
    error = fm.collect().error
    assert isinstance(error, TopicAuthorizationFailedError)
    assert error.topic == "t"


def test_unknown_server_error_is_retried_silently() -> None:
    fm, _ = setup({T0: 0}, LEADERS)
    _deliver(fm, {T0: Part(error=-1)})
    assert fm.collect().error is None
    assert fm.buffered_partitions() == frozenset()


def _corrupt(data: bytes) -> bytes:
    # Flip a byte in the records area (after the 61-byte header): the CRC no longer matches.
    mutable = bytearray(data)
    mutable[65] ^= 0xFF
    return bytes(mutable)


def test_corrupt_batch_raises_after_the_good_records_and_user_can_seek_past() -> None:
    fm, subs = setup({T0: 0}, LEADERS)
    _deliver(fm, {T0: Part(batch(0, 3) + _corrupt(batch(3, 2)) + batch(5, 1))})
    first = fm.collect()
    assert values(first.records[T0]) == [0, 1, 2]
    assert first.error is None
    second = fm.collect()
    assert isinstance(second.error, CorruptRecordError)
    assert (second.error.topic, second.error.partition, second.error.offset) == ("t", 0, 3)
    assert subs.position(T0).offset == 3  # type: ignore[union-attr]
    assert isinstance(fm.collect().error, CorruptRecordError)  # until the user seeks
    assert fm.poll(5).requests == () or all(T0 not in requested(r) for r in fm.poll(6).requests)
    subs.seek(T0, 5)
    assert fm.collect().error is None
    assert T0 in {tp for r in fm.poll(7).requests for tp in requested(r)}


def test_check_crcs_off_accepts_a_bad_crc() -> None:
    fm, _ = setup({T0: 0}, LEADERS, check_crcs=False)
    data = bytearray(batch(0, 2))
    struct.pack_into(">I", data, 17, 12345)  # wrong CRC, records intact
    _deliver(fm, {T0: Part(bytes(data))})
    assert values(fm.collect().records[T0]) == [0, 1]


def test_truncated_trailing_batch_is_fetched_again() -> None:
    fm, subs = setup({T0: 0}, LEADERS)
    whole = batch(0, 2) + batch(2, 2)
    _deliver(fm, {T0: Part(whole[:-5])})  # the second batch is cut short
    assert values(fm.collect().records[T0]) == [0, 1]
    assert subs.position(T0).offset == 2  # type: ignore[union-attr]
    assert requested(fm.poll(5).requests[0])[T0].fetch_offset == 2


def test_data_without_a_complete_batch_makes_no_progress_and_is_refetched() -> None:
    fm, subs = setup({T0: 0}, LEADERS)
    _deliver(fm, {T0: Part(batch(0, 2)[:30])})
    result = fm.collect()
    assert result.records == {} and result.error is None
    assert subs.position(T0).offset == 0  # type: ignore[union-attr]
    assert fm.buffered_bytes == 0
    # T0 stays in the session at offset 0 (unchanged, so not resent): fetched again.
    request = fm.poll(5).requests[0]
    assert forgotten(request) == set()
    session = fm.session(1)
    assert session is not None
    assert session.session_partitions[T0].fetch_offset == 0


def test_top_level_error_backs_off_the_node() -> None:
    fm, _ = setup({T0: 0}, LEADERS, retry_backoff_ms=100)
    first = fm.poll(0).requests[0]
    fm.on_response(first.request_id, fetch_response(17, {}, error=-1), 10)
    assert fm.poll(20).requests == ()
    assert len(fm.poll(110).requests) == 1


def test_late_response_to_unknown_request_is_ignored() -> None:
    fm, _ = setup({T0: 0}, LEADERS)
    fm.on_response(999, fetch_response(17, {T0: Part(batch(0, 1))}), 1)
    fm.on_failure(998, KafkaConnectionError("x"), 1)
    assert fm.buffered_partitions() == frozenset()


# -- positions, lag, metrics -------------------------------------------------------------


def test_offsets_lag_and_metrics() -> None:
    fm, subs = setup({T0: 0}, LEADERS, isolation_level=IsolationLevel.READ_UNCOMMITTED)
    request = fm.poll(100).requests[0]
    data = batch(0, 5)
    part = Part(data, high_watermark=12, last_stable_offset=10, log_start_offset=0)
    fm.on_response(request.request_id, fetch_response(17, {T0: part}, session_id=1), 130)
    state = subs.partition_state(T0)
    assert state is not None
    assert (state.high_watermark, state.last_stable_offset, state.log_start_offset) == (12, 10, 0)
    fm.collect(3)
    assert subs.partition_lag(T0) == 9
    assert subs.partition_lag(T0, IsolationLevel.READ_COMMITTED) == 7
    metrics = fm.metrics()
    assert metrics.records_lag == {T0: 9}
    assert metrics.records_lag_max == 9
    assert metrics.records_consumed == 3
    assert metrics.bytes_consumed == 0  # not drained yet
    fm.collect()
    metrics = fm.metrics()
    assert metrics.records_consumed == 5
    assert metrics.bytes_consumed == len(data)
    assert metrics.bytes_fetched == len(data)
    assert metrics.records_lag == {T0: 7}
    assert (metrics.fetch_requests, metrics.fetch_responses) == (1, 1)
    assert metrics.last_fetch_latency_ms == 30
    assert metrics.fetch_latency_avg_ms == 30
    assert metrics.first_request_ms == 100
    assert metrics.last_response_ms == 130


def test_lag_of_a_partition_no_longer_assigned_is_dropped_at_the_next_collect() -> None:
    fm, subs = setup({T0: 0, T1: 0}, LEADERS)
    request = fm.poll(100).requests[0]
    parts = {tp: Part(batch(0, 5), high_watermark=12) for tp in (T0, T1)}
    fm.on_response(request.request_id, fetch_response(17, parts, session_id=1), 130)
    fm.collect(20)
    assert fm.metrics().records_lag == {T0: 7, T1: 7}
    fm.collect(20)  # nothing left: lags stay
    assert fm.metrics().records_lag == {T0: 7, T1: 7}
    subs.assign_from_user([T1])
    fm.collect(20)
    assert fm.metrics().records_lag == {T1: 7}


def test_stale_response_does_not_update_offsets() -> None:
    fm, subs = setup({T0: 0}, LEADERS)
    request = fm.poll(0).requests[0]
    subs.seek(T0, 7)
    fm.on_response(
        request.request_id,
        fetch_response(17, {T0: Part(batch(0, 2), high_watermark=99)}, session_id=1),
        1,
    )
    state = subs.partition_state(T0)
    assert state is not None and state.high_watermark is None
    assert fm.buffered_partitions() == frozenset()


def test_from_consumer_config() -> None:
    from kafka_actors.config import ConsumerConfig

    config = ConsumerConfig.from_dict(
        {
            "bootstrap.servers": "localhost:9092",
            "isolation.level": "read_committed",
            "client.rack": "r1",
            "fetch.max.bytes": 1000,
            "max.poll.records": 7,
        }
    )
    fc = FetchConfig.from_consumer_config(config)
    assert fc.isolation_level is IsolationLevel.READ_COMMITTED
    assert (fc.client_rack, fc.fetch_max_bytes, fc.max_poll_records) == ("r1", 1000, 7)
    assert fc.buffer_limit == 1000
    assert LATEST.kind.value == "latest"


# -- results after the fact, session handler -------------------------------------------------


def test_result_still_owned_filters_after_revocation_or_seek() -> None:
    fm, subs = setup({T0: 0, T1: 0}, LEADERS)
    _deliver(fm, {T0: Part(batch(0, 2)), T1: Part(batch(0, 2))})
    result = fm.collect()
    assert result.assignment_id == subs.assignment_id
    assert result.still_owned(subs) is result
    subs.update_current_leader(T0, LeaderAndEpoch(2, 9))  # metadata moved on: still owned
    assert result.still_owned(subs) is result
    subs.seek(T1, 0)  # the user rewound after the collect
    assert set(result.still_owned(subs).records) == {T0}
    subs.assign_from_user([T1])
    later = result.still_owned(subs)
    assert later.records == {}
    assert later.assignment_id == subs.assignment_id


def test_forgetting_a_whole_topic_stays_incremental_with_topic_ids() -> None:
    leaders = {T0: (1, 5), U0: (1, 5)}
    fm, subs = setup({T0: 0, U0: 0}, leaders)
    first = fm.poll(0).requests[0]
    fm.on_response(first.request_id, fetch_response(17, {T0: Part(), U0: Part()}, session_id=8), 1)
    subs.assign_from_user([T0])
    second = fm.poll(2).requests[0]
    assert session_of(second) == (8, 1)
    assert forgotten(second) == {U0}
    assert second.request.forgotten_topics_data[0].topic_id == uuid.UUID(TOPIC_IDS["u"])


def test_session_handler_sends_only_added_and_changed_partitions() -> None:
    from kafka_actors.protocol.fetch.manager import FetchSessionHandler
    from kafka_actors.protocol.wire.requests import FetchPartition

    def fp(tp: TopicPartition, offset: int, epoch: int = -1) -> FetchPartition:
        return FetchPartition(tp.topic, tp.partition, offset, 100, current_leader_epoch=epoch)

    handler = FetchSessionHandler(1)
    full = handler.build({T0: fp(T0, 0), T1: fp(T1, 0)})
    assert full.is_full and (full.session_id, full.epoch) == (0, 0)
    assert handler.handle_response(0, 11, [T0, T1]) is True
    inc = handler.build({T0: fp(T0, 0), T1: fp(T1, 5), U0: fp(U0, 0)})
    assert (inc.session_id, inc.epoch, inc.is_full) == (11, 1, False)
    assert [p.partition for p in inc.to_send] == [1, 0]  # T1 changed, U0 added
    assert {p.topic for p in inc.to_send} == {"t", "u"}
    assert inc.to_forget == ()
    assert handler.handle_response(0, 11, [U0]) is True
    epoch_change = handler.build({T0: fp(T0, 0, epoch=3), U0: fp(U0, 0)})
    assert epoch_change.epoch == 2
    assert [(p.topic, p.partition) for p in epoch_change.to_send] == [("t", 0)]
    assert epoch_change.to_forget == (T1,)
    # A response naming a partition outside the session is rejected: close, start anew.
    assert handler.handle_response(0, 11, [T1]) is False
    again = handler.build({T0: fp(T0, 0, epoch=3)})
    assert (again.session_id, again.epoch) == (11, 0)
    # A full response without a session id: no session (full fetches from now on).
    assert handler.handle_response(0, 0, [T0]) is True
    assert (handler.session_id, handler.epoch) == (0, 0)


def test_session_handler_topic_id_change_forces_full_fetch() -> None:
    from kafka_actors.protocol.fetch.manager import FetchSessionHandler
    from kafka_actors.protocol.wire.requests import FetchPartition

    part = FetchPartition("t", 0, 0, 100)
    handler = FetchSessionHandler(1)
    handler.build({T0: part}, {"t": "id-1"})
    handler.handle_response(0, 5, [T0])
    assert handler.build({T0: part}, {"t": "id-1"}).epoch == 1
    handler.handle_response(0, 5, [])
    recreated = handler.build({T0: part}, {"t": "id-2"})
    assert (recreated.session_id, recreated.epoch) == (5, 0)
    assert recreated.to_send == (part,)


def test_batch_decompressing_past_the_bound_raises_after_the_good_records() -> None:
    """max.decompressed.batch.bytes reaches the decoder from the fetch path (issue 10)."""
    from kafka_actors.config import ConsumerConfig
    from kafka_actors.errors import DecompressedBatchTooLargeError
    from kafka_actors.protocol.records.build import RecordSpec, build_batch
    from kafka_actors.protocol.records.decode import CompressionType

    config = ConsumerConfig.from_dict(
        {"bootstrap.servers": "h:1", "max.decompressed.batch.bytes": 100_000}
    )
    bound = FetchConfig.from_consumer_config(config).max_decompressed_batch_bytes
    assert bound == 100_000
    big = build_batch(
        [RecordSpec(value=b"x" * 200_000)], base_offset=3, compression=CompressionType.ZSTD
    )
    fm, subs = setup({T0: 0}, LEADERS, max_decompressed_batch_bytes=bound)
    _deliver(fm, {T0: Part(batch(0, 3) + big)})
    assert values(fm.collect().records[T0]) == [0, 1, 2]
    error = fm.collect().error
    assert isinstance(error, DecompressedBatchTooLargeError)
    assert (error.topic, error.partition, error.offset) == ("t", 0, 3)
    assert subs.position(T0).offset == 3  # type: ignore[union-attr]
