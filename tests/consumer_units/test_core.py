"""The consumer core (issue 11): what its front ends rely on without a broker.

* SubscriptionState's atomic hand-out steps (``keep_handed_out``, ``seek_back_to_failed``),
  which the front ends use instead of taking its lock: keep, consume, give back.
* ``ConsumerCore.request``: a future at once; a target that is not there (restarting) is
  retried until the deadline, then KafkaTimeoutError naming it; cancelling the future stops
  the retries.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any

import pytest

from kafka_actors.config import ConsumerConfig
from kafka_actors.core import ConsumerCore
from kafka_actors.errors import KafkaTimeoutError
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.subscription import FetchPosition, SubscriptionState

T0 = TopicPartition("t", 0)


def _collected(s: SubscriptionState, start: int, end: int) -> FetchPosition:
    """The fetch manager handed records [start, end) out (their position moved to ``end``)."""
    new = FetchPosition(end, 2)
    assert s.advance_position(T0, start, new)
    return new


def _state() -> SubscriptionState:
    s = SubscriptionState()
    s.assign_from_user([T0])
    s.seek(T0, 10)
    return s


def test_keep_handed_out_consumes_when_owned_and_fetchable() -> None:
    s = _state()
    end = _collected(s, 10, 20)
    assert s.keep_handed_out(T0, end, 10, consume=False)
    assert s.all_consumed() == {T0: OffsetAndMetadata(10)}  # not returned yet
    assert s.keep_handed_out(T0, end, 10, consume=True)
    assert s.all_consumed() == {T0: OffsetAndMetadata(20, "", 2)}


def test_keep_handed_out_gives_back_records_of_a_paused_partition() -> None:
    s = _state()
    end = _collected(s, 10, 20)
    s.pause([T0])
    assert not s.keep_handed_out(T0, end, 10, consume=True)
    position = s.position(T0)
    assert position is not None and position.offset == 10  # moved back: nothing skipped
    end = _collected_after_resume(s)
    s.pause([T0])
    # A front end that keeps paused partitions' records (the asyncio buffer) keeps them.
    assert s.keep_handed_out(T0, end, 10, consume=False, keep_paused=True)
    position = s.position(T0)
    assert position is not None and position.offset == 20


def _collected_after_resume(s: SubscriptionState) -> FetchPosition:
    s.resume([T0])
    return _collected(s, 10, 20)


def test_keep_handed_out_leaves_a_seek_since_alone() -> None:
    s = _state()
    end = _collected(s, 10, 20)
    s.seek(T0, 5)
    assert s.keep_handed_out(T0, end, 10, consume=True)  # still owned: kept
    assert s.all_consumed() == {T0: OffsetAndMetadata(5)}  # the seek wins
    s.pause([T0])
    assert not s.keep_handed_out(T0, end, 10, consume=True)
    position = s.position(T0)
    assert position is not None and position.offset == 5  # not moved back over the seek


def test_keep_handed_out_of_a_partition_not_owned() -> None:
    s = _state()
    end = _collected(s, 10, 20)
    s.assign_from_user([TopicPartition("t", 1)])
    assert not s.keep_handed_out(T0, end, 10, consume=True)


def test_seek_back_to_failed_takes_the_epoch_of_the_record_before() -> None:
    s = _state()
    end = _collected(s, 10, 20)
    assert s.seek_back_to_failed(T0, end, 15, 7, first=False)
    position = s.position(T0)
    assert position is not None and (position.offset, position.offset_epoch) == (15, 7)
    assert s.all_consumed() == {T0: OffsetAndMetadata(15, "", 7)}
    assert not s.seek_back_to_failed(T0, end, 15, 7, first=False)  # no longer at ``end``
    assert not s.seek_back_to_failed(T0, None, 15, 7, first=False)


def test_seek_back_to_failed_first_record_keeps_the_consumed_epoch() -> None:
    s = SubscriptionState()
    s.assign_from_user([T0])
    s.seek(T0, FetchPosition(10, 4))
    end = _collected(s, 10, 20)
    assert s.seek_back_to_failed(T0, end, 10, None, first=True)
    position = s.position(T0)
    assert position is not None and (position.offset, position.offset_epoch) == (10, 4)


def _core() -> ConsumerCore:
    # Nothing listens there: the actors retry connecting while the test runs.
    config = ConsumerConfig.from_dict(
        {"bootstrap.servers": "127.0.0.1:1", "reconnect.backoff.ms": 1000, "retry.backoff.ms": 20}
    )
    return ConsumerCore(config)


def test_request_to_an_absent_target_is_retried_until_its_deadline() -> None:
    core = _core()
    calls: list[int] = []
    try:
        start = time.monotonic()
        future = core.request(
            "nosuch", lambda f, d: calls.append(d), start + 0.3, "lookup"
        )
        assert isinstance(future, concurrent.futures.Future)
        with pytest.raises(KafkaTimeoutError, match="lookup timed out: the nosuch actor is"):
            future.result(timeout=30)
        assert time.monotonic() - start >= 0.3
        assert len(calls) >= 2  # tried again after retry.backoff.ms
        assert core.timeout_error(future, "lookup").message.endswith("is restarting")
    finally:
        core.begin_shutdown("t")
        core.stop_actors(10)


def test_cancelling_a_request_stops_its_retries() -> None:
    core = _core()
    calls: list[int] = []
    lock = threading.Lock()

    def make(_f: concurrent.futures.Future[Any], d: int) -> None:
        with lock:
            calls.append(d)

    try:
        future = core.request("nosuch", make, time.monotonic() + 30, "lookup")
        time.sleep(0.1)
        assert future.cancel()
        time.sleep(0.1)
        with lock:
            seen = len(calls)
        time.sleep(0.3)
        with lock:
            assert len(calls) == seen  # no attempt after the cancel settled
    finally:
        core.begin_shutdown("t")
        core.stop_actors(10)
