"""DemandStream (the bridge's pure stream state) and the protocol's picklability."""

from __future__ import annotations

import pickle

import pytest

from kafka_actors.errors import NotCoordinatorError
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord, TimestampType
from kafka_actors.thespian.errors import SubscriberFailedError
from kafka_actors.thespian.messages import (
    BatchRejected,
    BridgeStats,
    CommitFailed,
    CommitOk,
    ErrorInfo,
    Handled,
    PartitionsRevoked,
    RecordBatch,
    Request,
)
from kafka_actors.thespian.stream import DemandStream, record_size


def rec(partition: int, offset: int, value: bytes = b"vv") -> ConsumerRecord:
    return ConsumerRecord(
        "t", partition, offset, 0, TimestampType.CREATE_TIME, b"k", value, (("h", b"x"),), 3
    )


def test_nothing_flows_without_demand() -> None:
    s = DemandStream()
    s.add([rec(0, 0), rec(0, 1)])
    assert s.take() == ()
    assert not s.wants_fetch
    s.request(1)
    assert [r.offset for r in s.take()] == [0]
    assert s.demand == 0 and s.buffered_records == 1
    assert not s.wants_fetch  # no demand: do not fetch


def test_fetch_only_when_buffer_drained_and_demand_remains() -> None:
    s = DemandStream()
    s.request(5)
    assert s.wants_fetch
    s.add([rec(0, i) for i in range(3)])
    assert not s.wants_fetch  # buffered records first
    assert len(s.take()) == 3
    assert s.demand == 2 and s.wants_fetch


def test_take_respects_limit_order_and_acknowledged_positions_count_as_delivered() -> None:
    s = DemandStream()
    s.add([rec(0, 0), rec(1, 10), rec(0, 1), rec(1, 11)])
    s.request(10)
    first = s.take(limit=3)
    assert [(r.partition, r.offset) for r in first] == [(0, 0), (1, 10), (0, 1)]
    positions = s.sent(1, first)
    assert positions == {TopicPartition("t", 0): 2, TopicPartition("t", 1): 11}
    assert s.delivered == {}  # sent is not delivered until the subscriber acknowledges
    second = s.take()
    assert [r.offset for r in second] == [11]
    s.sent(2, second)
    assert s.delivered_records == 4 and s.demand == 6
    assert s.acknowledge(1) == 1
    assert s.delivered == {TopicPartition("t", 0): 2, TopicPartition("t", 1): 11}
    assert s.acknowledge(2) == 1
    assert s.delivered == {TopicPartition("t", 0): 2, TopicPartition("t", 1): 12}
    assert s.acknowledge(2) == 0  # cumulative and idempotent


def test_window_of_batches_in_flight_whatever_the_demand() -> None:
    s = DemandStream(max_in_flight=3)
    s.request(10_000_000)
    s.add([rec(0, i) for i in range(100)])
    seq = 0
    while s.can_send:
        batch = s.take(limit=10)
        seq += 1
        s.sent(seq, batch)
    assert seq == 3 and s.in_flight == 3 and s.buffered_records == 70
    assert not s.wants_fetch  # records wait in the buffer: no fetching beyond one poll
    assert s.oldest_in_flight == 1
    assert s.acknowledge(2) == 2 and s.can_send and s.in_flight == 1
    assert s.oldest_in_flight == 3
    assert s.delivered == {TopicPartition("t", 0): 20}
    with pytest.raises(ValueError):
        DemandStream(max_in_flight=0)


def test_rejected_batch_and_later_ones_rewind_to_their_first_offsets() -> None:
    s = DemandStream()
    s.request(100)
    s.add([rec(0, 0), rec(0, 1), rec(1, 0), rec(0, 2), rec(1, 1), rec(2, 5), rec(0, 3)])
    s.sent(1, s.take(limit=2))  # p0 0..1
    b2 = s.take(limit=2)  # p1 0, p0 2
    s.sent(2, b2)
    s.sent(3, s.take(limit=2))  # p1 1, p2 5
    s.acknowledge(1)
    assert s.buffered_records == 1  # p0 3
    rewound = s.reject(2, b2)
    t0, t1, t2 = (TopicPartition("t", p) for p in range(3))
    assert rewound == {t0: 2, t1: 0, t2: 5}
    assert s.in_flight == 0 and s.demand == 0
    assert s.buffered_records == 0  # p0 3 follows the rewind point of p0
    assert s.delivered == {t0: 2}  # batch 1 only
    assert s.rejected_batches == 1


def test_reject_pulls_back_positions_acknowledged_before_processing() -> None:
    s = DemandStream()
    s.request(10)
    s.add([rec(0, 4), rec(0, 5)])
    batch = s.take()
    s.sent(7, batch)
    s.acknowledge(7)  # a subscriber that acknowledged on receipt, then raised
    assert s.delivered == {TopicPartition("t", 0): 6}
    assert s.reject(7, batch) == {TopicPartition("t", 0): 4}
    assert s.delivered == {TopicPartition("t", 0): 4}


def test_buffered_bytes_follow_add_take_drop() -> None:
    s = DemandStream()
    records = [rec(0, 0, b"a" * 100), rec(1, 0, b"b" * 50), rec(1, 1, b"c" * 10)]
    s.add(records)
    assert s.buffered_bytes == sum(record_size(r) for r in records)
    assert record_size(records[0]) == 1 + 100 + 1 + 1
    assert s.drop([TopicPartition("t", 1)]) == 2
    assert s.buffered_bytes == record_size(records[0])
    s.request(1)
    s.take()
    assert s.buffered_bytes == 0 and s.buffered_records == 0


def test_drop_forgets_delivered_positions_of_revoked_partitions() -> None:
    s = DemandStream()
    s.request(4)
    s.add([rec(0, 0), rec(1, 0)])
    s.sent(1, s.take())
    s.acknowledge(1)
    s.add([rec(0, 1), rec(1, 1)])
    s.sent(2, s.take())
    s.drop([TopicPartition("t", 0)])
    assert s.delivered == {TopicPartition("t", 1): 1}
    s.acknowledge(2)  # the batch in flight no longer speaks for the revoked partition
    assert s.delivered == {TopicPartition("t", 1): 2}


def test_request_must_be_positive() -> None:
    with pytest.raises(ValueError):
        DemandStream().request(0)


def test_messages_pickle() -> None:
    tp = TopicPartition("t", 1)
    messages = [
        RecordBatch((rec(1, 5),), {tp: 6}),
        CommitOk(3, {tp: OffsetAndMetadata(6, "m", 2)}),
        CommitFailed(4, ErrorInfo.of(NotCoordinatorError("moved"))),
        PartitionsRevoked(frozenset({tp}), 9),
        BridgeStats(0, 0, 0, 0, 0, (tp,), (tp,), 0, 0, 0, 0),
        BatchRejected(3, 9, {tp: 5}, ErrorInfo.of(SubscriberFailedError("raised"))),
        Handled(4),
        Request(10, 3),
    ]
    for message in messages:
        assert pickle.loads(pickle.dumps(message)) == message
    info = ErrorInfo.of(NotCoordinatorError("moved"))
    assert info.retriable and info.type == "NotCoordinatorError"


def test_record_batch_pickles_in_columns_and_round_trips() -> None:
    records = tuple(
        ConsumerRecord(
            f"t{i % 2}",
            i % 3,
            i,
            1_700_000_000_000 + i,
            TimestampType(i % 2),
            None if i % 5 == 0 else b"k",
            None if i % 7 == 0 else b"v" * i,
            (("h", b"x"), ("n", None)) if i % 3 else (),
            None if i % 4 == 0 else i,
        )
        for i in range(50)
    )
    batch = RecordBatch(records, {TopicPartition("t0", 0): 49}, 7)
    back = pickle.loads(pickle.dumps(batch))
    assert back == batch
    assert all(type(r.timestamp_type) is TimestampType for r in back.records)
    assert pickle.loads(pickle.dumps(RecordBatch((), {}, 3))) == RecordBatch((), {}, 3)


def test_restart_keeps_buffered_records_and_forgets_demand() -> None:
    s = DemandStream()
    s.request(3)
    s.add([rec(0, 0), rec(0, 1), rec(0, 2), rec(0, 3)])
    s.take(limit=1)
    s.restart()
    assert s.demand == 0 and s.delivered == {} and s.buffered_records == 3
    s.request(5)
    assert [r.offset for r in s.take()] == [1, 2, 3]
