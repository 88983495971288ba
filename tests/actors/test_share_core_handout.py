"""The share consumer core's hand-out bookkeeping (no broker: what the core tells the share
fetch actor is recorded): a poll's records are acknowledged as offset ranges, explicit mode's
acknowledge() calls go to the actor together at the next poll (RENEW at once), runs of kept
records are handed out in order, max.poll.records at a time, each once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kafka_actors.actors.managers.share_fetch import ShareAcknowledgeEvent
from kafka_actors.core.share_core import ShareCore, build_share_config
from kafka_actors.errors import IllegalStateError, RecordDeserializationError
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.decode import TimestampType
from kafka_actors.protocol.share.acknowledgements import AcknowledgeType
from kafka_actors.protocol.share.fetch import ShareCollectResult, ShareConsumerRecord

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)
ACCEPT, RELEASE, RENEW = (int(t) for t in (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, 4))


def _records(tp: TopicPartition, offsets: Any) -> tuple[ShareConsumerRecord, ...]:
    return tuple(
        ShareConsumerRecord(
            tp.topic, tp.partition, o, 0, TimestampType.CREATE_TIME, b"k", b"v", (), None, 1
        )
        for o in offsets
    )


def _core(
    mode: str, max_poll_records: int = 500, **kwargs: Any
) -> Iterator[tuple[ShareCore, list[Any]]]:
    config = build_share_config(
        {
            "bootstrap.servers": "127.0.0.1:1",
            "group.id": "g",
            "share.acknowledgement.mode": mode,
            "max.poll.records": max_poll_records,
        },
        {},
    )
    core = ShareCore(config, **kwargs)
    told: list[Any] = []

    def tell(name: str, message: Any) -> bool:
        if isinstance(message, ShareAcknowledgeEvent):
            told.append(dict(message.acknowledgements))
        return True

    core.ctx.tell = tell  # type: ignore[method-assign]
    try:
        yield core, told
    finally:
        core.stop_actors(5.0)


@pytest.fixture
def implicit() -> Iterator[tuple[ShareCore, list[Any]]]:
    yield from _core("implicit", max_poll_records=4)


@pytest.fixture
def explicit() -> Iterator[tuple[ShareCore, list[Any]]]:
    yield from _core("explicit")


def test_implicit_mode_acknowledges_a_poll_as_ranges_and_hands_out_each_record_once(
    implicit: tuple[ShareCore, list[Any]],
) -> None:
    core, told = implicit
    core._keep(ShareCollectResult({A0: _records(A0, [0, 1, 2, 5, 6]), A1: _records(A1, [9])}))
    first = core.hand_out("t")
    assert [(r.partition, r.offset) for r in first] == [(0, 0), (0, 1), (0, 2), (0, 5)]
    assert told == []  # nothing acknowledged before the next poll
    core.begin_poll("t")
    assert told == [{A0: ((0, 2, ACCEPT), (5, 5, ACCEPT))}]
    second = core.hand_out("t")
    assert [(r.partition, r.offset) for r in second] == [(0, 6), (1, 9)]
    assert not core.has_kept()
    core.prepare_close("t")
    assert told[1] == {A0: ((6, 6, ACCEPT),), A1: ((9, 9, ACCEPT),)}


def test_explicit_acknowledgements_go_together_at_the_next_poll_renew_at_once(
    explicit: tuple[ShareCore, list[Any]],
) -> None:
    core, told = explicit
    core._keep(ShareCollectResult({A0: _records(A0, range(6))}))
    records = list(core.hand_out("t"))
    for r in records[:3]:
        core.acknowledge(r, AcknowledgeType.ACCEPT, "t")
    core.acknowledge(records[3], AcknowledgeType.RELEASE, "t")
    assert told == []  # kept until the next poll (one message, not one per record)
    core.acknowledge(records[4], AcknowledgeType.RENEW, "t")
    # RENEW goes at once, after what was acknowledged before it.
    assert told == [{A0: ((0, 2, ACCEPT), (3, 3, RELEASE))}, {A0: ((4, 4, RENEW),)}]
    with pytest.raises(IllegalStateError):
        core.begin_poll("t")  # offsets 4 (renewed only) and 5 are not acknowledged
    with pytest.raises(IllegalStateError):
        core.acknowledge(records[0], AcknowledgeType.ACCEPT, "t")  # already acknowledged
    core.acknowledge(records[4], AcknowledgeType.ACCEPT, "t")
    core.acknowledge(records[5], AcknowledgeType.ACCEPT, "t")
    core.begin_poll("t")
    assert told[2] == {A0: ((4, 5, ACCEPT),)}


def test_a_record_a_deserializer_fails_on_is_released_and_the_others_come_once_in_order() -> None:
    def value(raw: bytes | None) -> Any:
        if raw == b"bad":
            raise ValueError("cannot read it")
        return raw

    made = _core("implicit", value_deserializer=value)
    core, told = next(made)
    try:
        bad = _records(A1, [7])[0]._replace(value=b"bad")
        core._keep(
            ShareCollectResult(
                {A0: _records(A0, [0, 1]), A1: (*_records(A1, [6]), bad, *_records(A1, [8]))}
            )
        )
        with pytest.raises(RecordDeserializationError):
            core.hand_out("t")
        assert told == [{A1: ((7, 7, RELEASE),)}]
        got = list(core.hand_out("t"))
        assert [(r.partition, r.offset) for r in got] == [(0, 0), (0, 1), (1, 6), (1, 8)]
        assert not core.has_kept()
    finally:
        made.close()  # stops the actors


def _bad_value(raw: bytes | None) -> Any:
    if raw == b"bad":
        raise ValueError("cannot read it")
    return raw


def _with_bad_record(core: ShareCore) -> None:
    bad = _records(A1, [7])[0]._replace(value=b"bad")
    core._keep(ShareCollectResult({A1: (*_records(A1, [6]), bad, *_records(A1, [8]))}))


def test_explicit_a_failed_record_is_released_next_poll_unless_acknowledged_by_offset() -> None:
    """Java's share consumer: the error carries topic, partition, offset and the raw bytes;
    the record's acknowledgement (RELEASE unless acknowledge_offset says otherwise) goes with
    the next poll's; acknowledging by offset is valid only for such a record, until then."""
    made = _core("explicit", value_deserializer=_bad_value)
    core, told = next(made)
    try:
        _with_bad_record(core)
        with pytest.raises(RecordDeserializationError) as caught:
            core.hand_out("t")
        error = caught.value
        assert (error.topic, error.partition, error.offset) == ("a", 1, 7)
        assert (error.key, error.value) == (b"k", b"bad")
        assert isinstance(error.__cause__, ValueError)
        assert told == []  # not released at once: the application may say otherwise
        with pytest.raises(IllegalStateError):
            core.acknowledge_offset("a", 1, 6, AcknowledgeType.REJECT, "t")  # not a failed one
        with pytest.raises(IllegalStateError):
            core.acknowledge_offset("a", 1, 7, AcknowledgeType.RENEW, "t")  # never handed out
        core.acknowledge_offset("a", 1, 7, AcknowledgeType.REJECT, "t")
        core.begin_poll("t")  # the failed record does not hold the next poll back
        assert told == [{A1: ((7, 7, int(AcknowledgeType.REJECT)),)}]
        with pytest.raises(IllegalStateError):
            core.acknowledge_offset("a", 1, 7, AcknowledgeType.ACCEPT, "t")  # already sent
        got = list(core.hand_out("t"))
        assert [(r.partition, r.offset) for r in got] == [(1, 6), (1, 8)]
        # Left alone, a failed record is released, by a commit as by a poll.
        _with_bad_record(core)
        for r in got:
            core.acknowledge(r, AcknowledgeType.ACCEPT, "t")
        core.begin_poll("t")
        told.clear()
        with pytest.raises(RecordDeserializationError):
            core.hand_out("t")
        core.flush_acknowledged("t")  # what commit_sync / commit_async / close start with
        assert told == [{A1: ((7, 7, RELEASE),)}]
    finally:
        made.close()


def test_implicit_a_failed_record_is_released_at_once_and_cannot_be_acknowledged_by_offset() -> (
    None
):
    made = _core("implicit", value_deserializer=_bad_value)
    core, told = next(made)
    try:
        _with_bad_record(core)
        with pytest.raises(RecordDeserializationError) as caught:
            core.hand_out("t")
        assert "released" in str(caught.value)
        assert told == [{A1: ((7, 7, RELEASE),)}]
        with pytest.raises(IllegalStateError):
            core.acknowledge_offset("a", 1, 7, AcknowledgeType.REJECT, "t")
    finally:
        made.close()


def test_a_refused_renewal_ends_the_delivery_a_granted_one_does_not(
    explicit: tuple[ShareCore, list[Any]],
) -> None:
    """Java's share consumer: a RENEW the broker refuses (INVALID_RECORD_STATE, e.g. a group
    with share.renew.acknowledge.enable=false) drops the record from those to acknowledge
    (its lock expires, the broker delivers it again); the error goes to the callback, never
    fatal. A renewed record is still to be acknowledged."""
    from kafka_actors.errors import InvalidRecordStateError

    core, told = explicit
    seen: list[Any] = []
    core.callback = lambda offsets, error: seen.append((offsets, error))
    core._keep(ShareCollectResult({A0: _records(A0, range(3))}))
    records = list(core.hand_out("t"))
    core.acknowledge(records[0], AcknowledgeType.RENEW, "t")
    core.acknowledge(records[1], AcknowledgeType.RENEW, "t")
    core.acknowledge(records[2], AcknowledgeType.ACCEPT, "t")
    refused = InvalidRecordStateError("Renewing acquisition locks is not enabled for the group.")
    core._run_callback({A0: {0}}, refused)
    core._run_callback({A0: {1}}, None)
    assert seen == [({A0: {0}}, refused), ({A0: {1}}, None)]
    with pytest.raises(IllegalStateError):
        core.acknowledge(records[0], AcknowledgeType.ACCEPT, "t")  # its delivery ended
    with pytest.raises(IllegalStateError):
        core.begin_poll("t")  # offset 1 (renewed) is still to be acknowledged
    core.acknowledge(records[1], AcknowledgeType.ACCEPT, "t")
    core.begin_poll("t")
    assert told[-1] == {A0: ((1, 2, ACCEPT),)}
