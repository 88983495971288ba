"""The share fetch manager (pure, fake clock and cluster): share session epochs per broker,
acquired ranges applied to decoded batches with their delivery counts, gaps, acknowledgements
piggybacked on the next ShareFetch or sent by ShareAcknowledge (commit, close at epoch -1),
session errors and failures starting a new session, partitions added and forgotten, bounds."""

from __future__ import annotations

import datetime
import uuid
from types import SimpleNamespace
from typing import Any

from kafka_actors.errors import (
    InvalidRecordStateError,
    KafkaConnectionError,
    NotLeaderOrFollowerError,
    ShareSessionNotFoundError,
    TopicAuthorizationFailedError,
)
from kafka_actors.protocol.fetch.manager import MetadataRefreshNeeded
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.build import RecordSpec, build_batch, concat
from kafka_actors.protocol.share.acknowledgements import AcknowledgeType
from kafka_actors.protocol.share.fetch import (
    MAX_ACQUIRED_PER_PARTITION,
    AcknowledgementsCommitted,
    AckResult,
    ShareCloseCompleted,
    ShareCommitCompleted,
    ShareFetchConfig,
    ShareFetchManager,
    next_epoch,
)
from kafka_actors.protocol.wire.apis import ApiKey

A_ID = uuid.UUID("aaaaaaaa-0000-0000-0000-000000000001")
B_ID = uuid.UUID("bbbbbbbb-0000-0000-0000-000000000002")
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


class Cluster:
    def __init__(self, leaders: dict[TopicPartition, int]) -> None:
        self.leaders = leaders
        self.ids = {"a": str(A_ID), "b": str(B_ID)}

    def leader_for(self, tp: TopicPartition) -> tuple[int, int | None] | None:
        node = self.leaders.get(tp)
        return None if node is None else (node, 0)

    def topic_id(self, name: str) -> str | None:
        return self.ids.get(name)

    def topic_name(self, topic_id: Any) -> str | None:
        return {v: k for k, v in self.ids.items()}.get(str(topic_id))

    def node(self, node_id: int) -> object | None:
        return object() if node_id in (1, 2) else None


def _manager(**config: Any) -> ShareFetchManager:
    m = ShareFetchManager(
        ShareFetchConfig(group_id="g", **config),
        member_id="m",
        fetch_version=2,
        acknowledge_version=2,
    )
    m.on_cluster_updated(Cluster({A0: 1, A1: 1, B0: 2}))
    return m


def _records(first: int, count: int) -> bytes:
    return build_batch(
        [RecordSpec(value=f"v{first + i}".encode()) for i in range(count)], base_offset=first
    )


def _part(
    partition: int,
    *,
    data: bytes = b"",
    acquired: tuple[tuple[int, int, int], ...] = (),
    code: int = 0,
    ack_code: int = 0,
) -> Any:
    return SimpleNamespace(
        partition_index=partition,
        error_code=code,
        error_message=None,
        acknowledge_error_code=ack_code,
        acknowledge_error_message=None,
        records=data,
        acquired_records=tuple(
            SimpleNamespace(first_offset=f, last_offset=last, delivery_count=d)
            for f, last, d in acquired
        ),
    )


def _fetch_response(*topics: tuple[uuid.UUID, list[Any]], code: int = 0) -> Any:
    return SimpleNamespace(
        error_code=code,
        error_message=None,
        throttle_time=datetime.timedelta(0),
        acquisition_lock_timeout=datetime.timedelta(seconds=30),
        responses=tuple(SimpleNamespace(topic_id=t, partitions=tuple(p)) for t, p in topics),
        node_endpoints=(),
    )


def _ack_response(*topics: tuple[uuid.UUID, list[tuple[int, int]]], code: int = 0) -> Any:
    return SimpleNamespace(
        error_code=code,
        error_message=None,
        throttle_time=datetime.timedelta(0),
        acquisition_lock_timeout=datetime.timedelta(seconds=30),
        responses=tuple(
            SimpleNamespace(
                topic_id=t,
                partitions=tuple(
                    SimpleNamespace(partition_index=p, error_code=c, error_message=None)
                    for p, c in parts
                ),
            )
            for t, parts in topics
        ),
        node_endpoints=(),
    )


def _by_node(requests: Any) -> dict[int, Any]:
    return {r.node: r for r in requests}


def _partitions(request: Any) -> dict[tuple[uuid.UUID, int], tuple[Any, ...]]:
    return {
        (t.topic_id, p.partition_index): tuple(
            (b.first_offset, b.last_offset, tuple(b.acknowledge_types))
            for b in p.acknowledgement_batches
        )
        for t in request.topics
        for p in t.partitions
    }


def test_next_epoch() -> None:
    assert [next_epoch(e) for e in (-1, 0, 1, 41, 2**31 - 1)] == [0, 1, 2, 42, 1]


def test_one_session_per_leader_opens_at_epoch_zero_then_counts_up() -> None:
    m = _manager()
    m.on_assignment({A0, A1, B0})
    requests = _by_node(m.poll(0).requests)
    assert set(requests) == {1, 2}
    one = requests[1].request
    assert int(one.__api_key__) == ApiKey.SHARE_FETCH and int(one.__version__) == 2
    assert one.share_session_epoch == 0
    assert set(_partitions(one)) == {(A_ID, 0), (A_ID, 1)}
    assert (one.group_id, one.member_id, one.max_records, one.share_acquire_mode) == (
        "g",
        "m",
        500,
        0,
    )
    assert _partitions(requests[2].request) == {(B_ID, 0): ()}
    assert m.poll(1).requests == ()  # one request in flight per broker
    m.on_response(requests[1].request_id, _fetch_response((A_ID, [_part(0), _part(1)])), 5)
    (again,) = m.poll(5).requests
    assert again.node == 1
    assert again.request.share_session_epoch == 1
    assert again.request.topics == ()  # the session has them
    m.on_response(again.request_id, _fetch_response(), 6)
    (third,) = m.poll(6).requests
    assert third.request.share_session_epoch == 2


def test_acquired_ranges_select_records_with_their_delivery_counts_and_gaps_are_acknowledged() -> (
    None
):
    m = _manager()
    m.on_assignment({A0})
    (req,) = m.poll(0).requests
    # Offsets 0..9 in the data; 2..4 acquired (delivered twice before), 7..12 acquired (first
    # delivery; 10..12 are not in the data: gaps).
    data = _records(0, 10)
    part = _part(0, data=data, acquired=((7, 12, 1), (2, 4, 3)))
    m.on_response(req.request_id, _fetch_response((A_ID, [part])), 1)
    assert m.poll(1).requests == ()  # a broker with buffered records is not fetched from
    result = m.collect(4)
    got = [(r.offset, r.delivery_count, r.value) for r in result.records[A0]]
    assert got == [(2, 3, b"v2"), (3, 3, b"v3"), (4, 3, b"v4"), (7, 1, b"v7")]
    rest = m.collect(100)
    assert [(r.offset, r.delivery_count) for r in rest.records[A0]] == [(8, 1), (9, 1)]
    assert m.pending_acknowledgements()[A0].batches() == [(10, 12, (0,))]
    # Drained: the next ShareFetch carries the gaps and the application's acknowledgements.
    m.acknowledge({A0: [(o, AcknowledgeType.ACCEPT) for o in (2, 3, 4, 7, 8)] + [(9, 2)]})
    (nxt,) = m.poll(2).requests
    assert nxt.request.share_session_epoch == 1
    assert _partitions(nxt.request) == {
        (A_ID, 0): ((2, 4, (1,)), (7, 8, (1,)), (9, 9, (2,)), (10, 12, (0,)))
    }
    m.on_response(nxt.request_id, _fetch_response((A_ID, [_part(0)])), 3)
    (event,) = [e for e in m.poll(3).events if isinstance(e, AcknowledgementsCommitted)]
    assert event.results == (AckResult(A0, frozenset({2, 3, 4, 7, 8, 9}), None),)


def test_acknowledgements_are_never_sent_at_epoch_zero() -> None:
    m = _manager()
    m.on_assignment({A0})
    (req,) = m.poll(0).requests
    m.on_response(
        req.request_id,
        _fetch_response((A_ID, [_part(0, data=_records(0, 2), acquired=((0, 1, 1),))])),
        1,
    )
    m.collect(10)
    # The session is lost (the broker does not know it any more).
    (nxt,) = m.poll(2).requests
    m.on_response(nxt.request_id, _fetch_response(code=ShareSessionNotFoundError.code), 3)
    m.acknowledge({A0: [(0, 1), (1, 1)]})
    (reopen,) = m.poll(4).requests
    assert reopen.request.share_session_epoch == 0
    assert _partitions(reopen.request) == {(A_ID, 0): ()}  # no acknowledgements in it
    m.on_response(reopen.request_id, _fetch_response((A_ID, [_part(0)])), 5)
    (then,) = m.poll(6).requests
    assert then.request.share_session_epoch == 1
    assert _partitions(then.request) == {(A_ID, 0): ((0, 1, (1,)),)}


def test_commit_sends_share_acknowledge_and_answers_per_partition() -> None:
    m = _manager()
    m.on_assignment({A0, A1})
    (req,) = m.poll(0).requests
    parts = [
        _part(0, data=_records(0, 3), acquired=((0, 2, 1),)),
        _part(1, data=_records(5, 1), acquired=((5, 5, 1),)),
    ]
    m.on_response(req.request_id, _fetch_response((A_ID, parts)), 1)
    m.collect(2)  # offsets 0, 1 of a-0; a-0's offset 2 and a-1 stay buffered
    m.acknowledge({A0: [(0, 1), (1, 3)]})
    m.commit(7)
    (ack,) = m.poll(2).requests
    assert int(ack.request.__api_key__) == ApiKey.SHARE_ACKNOWLEDGE
    assert ack.request.share_session_epoch == 1
    assert _partitions(ack.request) == {(A_ID, 0): ((0, 0, (1,)), (1, 1, (3,)))}
    m.on_response(ack.request_id, _ack_response((A_ID, [(0, InvalidRecordStateError.code)])), 3)
    events = m.poll(3).events
    (done,) = [e for e in events if isinstance(e, ShareCommitCompleted)]
    assert done.commit_id == 7
    assert isinstance(done.results[A0], InvalidRecordStateError)
    (callback,) = [e for e in events if isinstance(e, AcknowledgementsCommitted)]
    assert callback.results[0].offsets == frozenset({0, 1})
    assert m.session(1) is not None and m.session(1).epoch == 2  # type: ignore[union-attr]


def test_a_commit_with_nothing_pending_completes_at_once() -> None:
    m = _manager()
    m.commit(1)
    assert ShareCommitCompleted(1, {}) in m.poll(0).events


def test_failed_request_fails_its_acknowledgements_and_resets_the_session() -> None:
    m = _manager()
    m.on_assignment({A0})
    (req,) = m.poll(0).requests
    m.on_response(
        req.request_id,
        _fetch_response((A_ID, [_part(0, data=_records(0, 1), acquired=((0, 0, 1),))])),
        1,
    )
    m.collect(10)
    m.acknowledge({A0: [(0, 1)]})
    (nxt,) = m.poll(2).requests
    assert _partitions(nxt.request) == {(A_ID, 0): ((0, 0, (1,)),)}
    m.on_failure(nxt.request_id, KafkaConnectionError("gone", node=1), 3)
    (event,) = [e for e in m.poll(3).events if isinstance(e, AcknowledgementsCommitted)]
    assert isinstance(event.results[0].error, KafkaConnectionError)
    assert m.session(1).epoch == 0  # type: ignore[union-attr]
    assert m.poll(3).requests == ()  # backing off
    (reopen,) = m.poll(200).requests
    assert reopen.request.share_session_epoch == 0


def test_assignment_change_forgets_partitions_and_drops_their_buffered_data() -> None:
    m = _manager()
    m.on_assignment({A0, A1})
    (req,) = m.poll(0).requests
    m.on_response(req.request_id, _fetch_response((A_ID, [_part(0), _part(1)])), 1)
    m.on_assignment({A0})
    (nxt,) = m.poll(2).requests
    assert [(f.topic_id, tuple(f.partitions)) for f in nxt.request.forgotten_topics_data] == [
        (A_ID, (1,))
    ]
    m.on_response(
        nxt.request_id,
        _fetch_response((A_ID, [_part(1, data=_records(0, 1), acquired=((0, 0, 1),))])),
        3,
    )
    assert m.collect(10).records == {}  # a-1 is not ours any more
    assert m.session(1).partitions == frozenset({A0})  # type: ignore[union-attr]


def test_records_of_a_partition_no_longer_assigned_are_still_handed_out_and_acknowledged() -> None:
    # As Java's share consumer: records the broker acquired for this member stay its own when
    # the assignment moves (the broker releases nothing for that), so the buffered ones are
    # handed out, not dropped to wait for their lock to expire, and acknowledged to the broker
    # they came from.
    m = _manager()
    m.on_assignment({A0, A1})
    (req,) = m.poll(0).requests
    parts = [
        _part(0, data=_records(0, 2), acquired=((0, 1, 1),)),
        _part(1, data=_records(0, 3), acquired=((0, 2, 1),)),
    ]
    m.on_response(req.request_id, _fetch_response((A_ID, parts)), 1)
    assert [r.offset for r in m.collect(1).records[A0]] == [0]
    m.on_assignment({A0})  # a-1 moved to another member
    rest = m.collect(100).records
    assert [r.offset for r in rest[A0]] == [1]
    assert [(r.partition, r.offset) for r in rest[A1]] == [(1, 0), (1, 1), (1, 2)]
    assert m.collect(100).records == {}
    m.acknowledge({A0: [(0, 1), (1, 1)], A1: [(0, 1), (1, 1), (2, 2)]})
    (nxt,) = m.poll(2).requests
    # a-1's acknowledgements go to broker 1 at the open session's epoch (ShareAcknowledge: a
    # ShareFetch would fetch a-0 while a-1 is being forgotten).
    assert int(nxt.request.__api_key__) == ApiKey.SHARE_ACKNOWLEDGE
    assert nxt.request.share_session_epoch == 1
    assert _partitions(nxt.request) == {
        (A_ID, 0): ((0, 1, (1,)),),
        (A_ID, 1): ((0, 1, (1,)), (2, 2, (2,))),
    }
    m.on_response(nxt.request_id, _ack_response((A_ID, [(0, 0), (1, 0)])), 3)
    (event,) = [e for e in m.poll(3).events if isinstance(e, AcknowledgementsCommitted)]
    assert event.results == (
        AckResult(A0, frozenset({0, 1}), None),
        AckResult(A1, frozenset({0, 1, 2}), None),
    )


def test_records_fetched_for_a_partition_revoked_while_the_fetch_was_in_flight_are_kept() -> None:
    m = _manager()
    m.on_assignment({A0, A1})
    (req,) = m.poll(0).requests
    m.on_assignment({A0})
    m.on_response(
        req.request_id,
        _fetch_response((A_ID, [_part(1, data=_records(5, 2), acquired=((5, 6, 1),))])),
        1,
    )
    assert [r.offset for r in m.collect(10).records[A1]] == [5, 6]
    # A partition the request did not ask for brings nothing (nothing was acquired for it).
    (nxt,) = m.poll(2).requests
    assert {(f.topic_id, tuple(f.partitions)) for f in nxt.request.forgotten_topics_data} == {
        (A_ID, (1,))
    }
    m.on_response(
        nxt.request_id,
        _fetch_response((B_ID, [_part(0, data=_records(0, 1), acquired=((0, 0, 1),))])),
        3,
    )
    assert m.collect(10).records == {}


def test_a_buffered_error_of_a_partition_no_longer_assigned_is_dropped() -> None:
    m = _manager()
    m.on_assignment({A0, A1})
    (req,) = m.poll(0).requests
    parts = [_part(1, code=TopicAuthorizationFailedError.code)]
    m.on_response(req.request_id, _fetch_response((A_ID, parts)), 1)
    assert m.buffered_count == 1
    m.on_assignment({A0})
    assert m.buffered_count == 0
    result = m.collect(10)
    assert (result.records, result.error) == ({}, None)


def test_not_leader_asks_for_metadata_and_the_partition_follows_its_new_leader() -> None:
    m = _manager()
    m.on_assignment({A0})
    (req,) = m.poll(0).requests
    m.on_response(
        req.request_id, _fetch_response((A_ID, [_part(0, code=NotLeaderOrFollowerError.code)])), 1
    )
    result = m.poll(1)
    assert MetadataRefreshNeeded("share fetch partition error", (A0,)) in result.events
    # Until the metadata says where it went, broker 1's session forgets it.
    (forget,) = result.requests
    assert [tuple(f.partitions) for f in forget.request.forgotten_topics_data] == [(0,)]
    m.on_response(forget.request_id, _fetch_response(), 2)
    m.on_cluster_updated(Cluster({A0: 2, A1: 1, B0: 2}))
    (moved,) = m.poll(3).requests
    assert moved.node == 2
    assert moved.request.share_session_epoch == 0
    assert set(_partitions(moved.request)) == {(A_ID, 0)}


def test_close_sends_pending_acknowledgements_at_epoch_minus_one() -> None:
    m = _manager()
    m.on_assignment({A0})
    (req,) = m.poll(0).requests
    m.on_response(
        req.request_id,
        _fetch_response((A_ID, [_part(0, data=_records(0, 2), acquired=((0, 1, 1),))])),
        1,
    )
    m.collect(1)
    m.acknowledge({A0: [(0, 1)]})
    m.close()  # offset 1 was never handed out: the session's close releases it
    (close,) = m.poll(2).requests
    assert int(close.request.__api_key__) == ApiKey.SHARE_ACKNOWLEDGE
    assert close.request.share_session_epoch == -1
    assert _partitions(close.request) == {(A_ID, 0): ((0, 0, (1,)),)}
    assert ShareCloseCompleted() not in m.poll(3).events
    m.on_response(close.request_id, _ack_response((A_ID, [(0, 0)])), 4)
    assert ShareCloseCompleted() in m.poll(4).events
    assert m.closed


def test_record_limit_mode_and_renew_need_v2() -> None:
    m = _manager(record_limit=True, max_poll_records=7)
    m.on_assignment({A0})
    (req,) = m.poll(0).requests
    assert (req.request.share_acquire_mode, req.request.max_records) == (1, 7)
    m.on_response(
        req.request_id,
        _fetch_response((A_ID, [_part(0, data=_records(0, 1), acquired=((0, 0, 1),))])),
        1,
    )
    m.collect(1)
    m.acknowledge({A0: [(0, AcknowledgeType.RENEW)]})
    (nxt,) = m.poll(2).requests  # never piggybacked: a ShareFetch with RENEW may not fetch
    assert int(nxt.request.__api_key__) == ApiKey.SHARE_ACKNOWLEDGE
    assert nxt.request.is_renew_ack is True
    assert _partitions(nxt.request) == {(A_ID, 0): ((0, 0, (4,)),)}


def test_acquired_ranges_are_bounded() -> None:
    m = _manager()
    m.on_assignment({A0})
    (req,) = m.poll(0).requests
    huge = _part(0, data=_records(0, 1), acquired=((0, MAX_ACQUIRED_PER_PARTITION, 1),))
    m.on_response(req.request_id, _fetch_response((A_ID, [huge])), 1)
    assert m.buffered_count == 0
    assert m.collect(10).records == {}


def test_the_buffer_bound_stops_fetching() -> None:
    m = _manager(max_bytes=100)
    m.on_assignment({A0, B0})
    requests = _by_node(m.poll(0).requests)
    m.on_response(
        requests[1].request_id,
        _fetch_response((A_ID, [_part(0, data=_records(0, 20), acquired=((0, 19, 1),))])),
        1,
    )
    assert m.buffered_bytes > 100
    m.on_response(requests[2].request_id, _fetch_response((B_ID, [_part(0)])), 1)
    assert m.poll(2).requests == ()  # broker 2 has nothing buffered, but the buffer is full
    m.collect(100)
    assert {r.node for r in m.poll(3).requests} == {1, 2}


def test_corrupt_data_hands_out_what_precedes_it_then_raises_and_releases_the_rest() -> None:
    m = _manager()
    m.on_assignment({A0})
    (req,) = m.poll(0).requests
    good = _records(0, 2)
    bad = bytearray(_records(2, 2))
    bad[-1] ^= 0xFF  # CRC mismatch
    part = _part(0, data=concat([good, bytes(bad)]), acquired=((0, 3, 1),))
    m.on_response(req.request_id, _fetch_response((A_ID, [part])), 1)
    first = m.collect(10)
    assert [r.offset for r in first.records[A0]] == [0, 1] and first.error is None
    second = m.collect(10)
    assert second.records == {} and second.error is not None
    assert m.pending_acknowledgements()[A0].batches() == [(2, 3, (2,))]  # released


def test_while_the_application_holds_records_fetches_do_not_wait_and_carry_acknowledgements() -> (
    None
):
    m = _manager()
    m.on_assignment({A0})
    (req,) = m.poll(0).requests
    assert req.request.max_wait == datetime.timedelta(milliseconds=500)
    m.on_response(
        req.request_id,
        _fetch_response((A_ID, [_part(0, data=_records(0, 10), acquired=((0, 9, 1),))])),
        1,
    )
    assert m.poll(1).requests == ()  # nothing handed out yet: no fetch ahead
    assert [r.offset for r in m.collect(4).records[A0]] == [0, 1, 2, 3]
    # The application started on it: a fetch that does not wait goes ahead.
    (ahead,) = m.poll(2).requests
    assert ahead.request.max_wait == datetime.timedelta(0)
    assert _partitions(ahead.request) == {}  # nothing acknowledged yet
    m.on_response(ahead.request_id, _fetch_response((A_ID, [_part(0)])), 2)
    assert m.poll(2).requests == ()  # it acquired nothing: no more until acknowledgements
    m.acknowledge({A0: [(o, AcknowledgeType.ACCEPT) for o in range(4)]})
    (pre,) = m.poll(3).requests
    assert int(pre.request.__api_key__) == ApiKey.SHARE_FETCH
    # The broker answers at once, whether it acquired records or not.
    assert pre.request.max_wait == datetime.timedelta(0)
    assert _partitions(pre.request) == {(A_ID, 0): ((0, 3, (1,)),)}
    m.on_response(
        pre.request_id,
        _fetch_response((A_ID, [_part(0, data=_records(10, 5), acquired=((10, 14, 1),))])),
        4,
    )
    # One response ahead at most: the new one is untouched, so acknowledgements now go with
    # ShareAcknowledge and nothing more is fetched.
    assert [r.offset for r in m.collect(4).records[A0]] == [4, 5, 6, 7]
    m.acknowledge({A0: [(o, AcknowledgeType.ACCEPT) for o in range(4, 8)]})
    (ack,) = m.poll(5).requests
    assert int(ack.request.__api_key__) == ApiKey.SHARE_ACKNOWLEDGE
    m.on_response(ack.request_id, _ack_response((A_ID, [(0, 0)])), 6)
    # Records are handed out in order, each once.
    assert [r.offset for r in m.collect(100).records[A0]] == [8, 9, 10, 11, 12, 13, 14]
    assert m.collect(100).records == {}


def test_a_fetch_that_may_wait_goes_only_once_every_record_handed_out_is_acknowledged() -> None:
    m = _manager()
    m.on_assignment({A0})
    (req,) = m.poll(0).requests
    m.on_response(
        req.request_id,
        _fetch_response((A_ID, [_part(0, data=_records(0, 3), acquired=((0, 2, 1),))])),
        1,
    )
    m.collect(10)  # the buffer is drained, the application holds 0..2
    (ahead,) = m.poll(2).requests
    assert ahead.request.max_wait == datetime.timedelta(0)  # a waiting one would hold back
    m.on_response(ahead.request_id, _fetch_response((A_ID, [_part(0)])), 3)  # acks behind it
    assert m.poll(3).requests == ()
    m.acknowledge({A0: [(0, AcknowledgeType.ACCEPT), (1, AcknowledgeType.RENEW)]})
    (partial,) = m.poll(4).requests  # RENEW: with ShareAcknowledge; offset 1, 2 still held
    assert int(partial.request.__api_key__) == ApiKey.SHARE_ACKNOWLEDGE
    m.on_response(partial.request_id, _ack_response((A_ID, [(0, 0)])), 5)
    m.acknowledge({A0: [(1, AcknowledgeType.ACCEPT), (2, AcknowledgeType.RELEASE)]})
    (long_poll,) = m.poll(6).requests  # nothing held any more: it may wait, acks with it
    assert long_poll.request.max_wait == datetime.timedelta(milliseconds=500)
    assert _partitions(long_poll.request) == {(A_ID, 0): ((1, 1, (1,)), (2, 2, (2,)))}


def test_a_refused_renewal_holds_back_no_waiting_fetch() -> None:
    """A RENEW refused (INVALID_RECORD_STATE: a group with share.renew.acknowledge.enable
    =false) ends the record's delivery, as Java's: the record is no longer held, so the next
    fetch may wait at the broker (which delivers it again once its lock expires) instead of
    the member waiting for an acknowledgement that never comes."""
    m = _manager()
    m.on_assignment({A0})
    (req,) = m.poll(0).requests
    m.on_response(
        req.request_id,
        _fetch_response((A_ID, [_part(0, data=_records(0, 1), acquired=((0, 0, 1),))])),
        1,
    )
    m.collect(10)  # the application holds offset 0
    (ahead,) = m.poll(2).requests
    m.on_response(ahead.request_id, _fetch_response((A_ID, [_part(0)])), 3)
    m.acknowledge({A0: [(0, AcknowledgeType.RENEW)]})
    (renew,) = m.poll(4).requests
    assert int(renew.request.__api_key__) == ApiKey.SHARE_ACKNOWLEDGE
    m.on_response(renew.request_id, _ack_response((A_ID, [(0, InvalidRecordStateError.code)])), 5)
    (long_poll,) = m.poll(6).requests  # nothing held any more: it may wait
    assert int(long_poll.request.__api_key__) == ApiKey.SHARE_FETCH
    assert long_poll.request.max_wait == datetime.timedelta(milliseconds=500)
