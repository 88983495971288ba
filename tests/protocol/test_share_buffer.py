"""The share fetch buffer on its own (no manager): acquired records handed out in buffer order,
the acquired offsets without a record returned as gap acknowledgements for the broker they came
from, errors of partitions no longer assigned dropped, the prefetch question answered."""

from __future__ import annotations

from kafka_actors.errors import TopicAuthorizationFailedError
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.build import RecordSpec, build_batch
from kafka_actors.protocol.share.acknowledgements import GAP
from kafka_actors.protocol.share.buffer import ShareFetchBuffer

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)
ASSIGNED = frozenset({A0, A1})


def _buffer() -> ShareFetchBuffer:
    return ShareFetchBuffer(check_crcs=True, max_decompressed_batch_bytes=1 << 20)


def _records(first: int, count: int) -> bytes:
    return build_batch(
        [RecordSpec(value=f"v{first + i}".encode()) for i in range(count)], base_offset=first
    )


def test_collect_hands_out_acquired_records_and_returns_the_gaps() -> None:
    buffer = _buffer()
    data = _records(0, 5)
    buffer.add_records(A0, 1, data, [(1, 7, 2)])
    assert (buffer.buffered_count, buffer.buffered_bytes) == (1, len(data))
    assert not buffer.started_on(1, frozenset({A0}))

    hand_out = buffer.collect(10, ASSIGNED)

    assert [(r.offset, r.delivery_count) for r in hand_out.result.records[A0]] == [
        (1, 2),
        (2, 2),
        (3, 2),
        (4, 2),
    ]
    assert hand_out.result.error is None
    assert [(g.tp, g.node, list(g.acknowledgements)) for g in hand_out.gaps] == [
        (A0, 1, [(5, 7, GAP)])
    ]
    assert (buffer.buffered_count, buffer.buffered_bytes) == (0, 0)


def test_a_partly_collected_response_counts_as_started_and_keeps_its_partition() -> None:
    buffer = _buffer()
    buffer.add_records(A0, 1, _records(0, 4), [(0, 3, 1)])
    assert buffer.partitions_from(1) == {A0}
    assert buffer.partitions_from(2) == set()

    hand_out = buffer.collect(2, ASSIGNED)

    assert [r.offset for r in hand_out.result.records[A0]] == [0, 1]
    assert hand_out.gaps == ()
    assert buffer.started_on(1, frozenset({A0}))
    assert buffer.partitions_from(1) == {A0}
    assert [r.offset for r in buffer.collect(10, ASSIGNED).result.records[A0]] == [2, 3]


def test_errors_of_unassigned_partitions_are_dropped_records_stay() -> None:
    buffer = _buffer()
    error = TopicAuthorizationFailedError("no")
    buffer.add_error(A1, 1, error)
    buffer.add_records(A0, 1, _records(0, 1), [(0, 0, 1)])
    assert not buffer.started_on(1, frozenset({A1}))

    buffer.drop_unassigned(frozenset({A1}))  # A0 left: its acquired records stay
    assert buffer.buffered_count == 2
    buffer.drop_unassigned(frozenset())  # A1 left: its error goes

    hand_out = buffer.collect(10, frozenset())
    assert [r.offset for r in hand_out.result.records[A0]] == [0]
    assert hand_out.result.error is None


def test_an_error_is_returned_after_the_records_before_it() -> None:
    buffer = _buffer()
    error = TopicAuthorizationFailedError("no")
    buffer.add_records(A0, 1, _records(0, 1), [(0, 0, 1)])
    buffer.add_error(A1, 1, error)

    first = buffer.collect(10, ASSIGNED)
    assert list(first.result.records) == [A0] and first.result.error is None
    second = buffer.collect(10, ASSIGNED)
    assert second.result.records == {} and second.result.error is error
    assert buffer.buffered_count == 0
