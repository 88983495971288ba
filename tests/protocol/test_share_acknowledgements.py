"""Acknowledgements as Kafka's AcknowledgementBatches: runs of one type, gaps, replacement."""

from __future__ import annotations

import pytest

from kafka_actors.protocol.share.acknowledgements import GAP, Acknowledgements, AcknowledgeType


def test_types_are_kafkas() -> None:
    assert [(t.name, int(t)) for t in AcknowledgeType] == [
        ("ACCEPT", 1),
        ("RELEASE", 2),
        ("REJECT", 3),
        ("RENEW", 4),
    ]
    assert GAP == 0


def test_consecutive_offsets_of_one_type_are_one_batch() -> None:
    acks = Acknowledgements.of((o, AcknowledgeType.ACCEPT) for o in (3, 1, 2, 5, 4))
    assert acks.batches() == [(1, 5, (1,))]
    assert len(acks) == 5


def test_a_hole_or_another_type_starts_a_new_batch() -> None:
    acks = Acknowledgements.of(
        [(0, 1), (1, 1), (2, 2), (3, 1), (5, 3), (6, 3)]  # offset 4 not acknowledged
    )
    assert acks.batches() == [(0, 1, (1,)), (2, 2, (2,)), (3, 3, (1,)), (5, 6, (3,))]


def test_gaps_are_ranges_and_a_later_acknowledgement_replaces_an_earlier_one() -> None:
    acks = Acknowledgements()
    acks.add_range(10, 19, GAP)
    acks.add(15, AcknowledgeType.RELEASE)
    assert acks.batches() == [(10, 14, (0,)), (15, 15, (2,)), (16, 19, (0,))]
    acks.add(15, GAP)
    assert acks.batches() == [(10, 19, (0,))]
    assert acks.record_offsets() == set()
    acks.add_range(12, 13, AcknowledgeType.ACCEPT)
    assert acks.record_offsets() == {12, 13}
    assert acks.offsets() == set(range(10, 20))


def test_merge_and_bad_input() -> None:
    a = Acknowledgements.of([(1, 1)])
    b = Acknowledgements.of([(2, 1), (4, 4)])
    a.merge(b)
    assert a.batches() == [(1, 2, (1,)), (4, 4, (4,))]
    assert a.has_type(AcknowledgeType.RENEW)
    with pytest.raises(ValueError):
        a.add_range(5, 4, 1)
    with pytest.raises(ValueError):
        a.add(7, 9)
