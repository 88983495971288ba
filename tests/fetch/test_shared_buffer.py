"""The consumer's one FetchBuffer shared by a fetch manager (producer) and a collect on another
thread (consumer): open only while a manager fills it, the collect's statistics as return
values, the response's statistics as on_response's return value."""

from __future__ import annotations

from kafka_actors.protocol.fetch.buffer import FetchBuffer
from kafka_actors.protocol.fetch.config import FetchConfig
from kafka_actors.protocol.fetch.manager import FetchManager
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.subscription import SubscriptionState

from .fetch_harness import Part, batch, cluster, fetch_response

T0 = TopicPartition("t", 0)


def _manager(buffer: FetchBuffer, subs: SubscriptionState) -> FetchManager:
    manager = FetchManager(subs, FetchConfig(max_poll_records=3), fetch_version=17, buffer=buffer)
    manager.on_cluster_updated(cluster({T0: (1, 5)}))
    return manager


def _subs() -> SubscriptionState:
    subs = SubscriptionState()
    subs.assign_from_user([T0])
    subs.seek(T0, 0)
    return subs


def test_a_collect_answers_none_until_a_manager_fills_the_buffer_and_after_it_stopped() -> None:
    subs = _subs()
    buffer = FetchBuffer(subs)
    assert buffer.try_collect(10) is None  # no fetch actor yet: ask the actor
    first = _manager(buffer, subs)
    assert buffer.is_open
    assert buffer.try_collect(10) is not None
    second = _manager(buffer, subs)  # a restarted incarnation resets it
    first.release_buffer()  # the old incarnation's stop comes late: the buffer stays open
    assert buffer.is_open
    second.release_buffer()
    assert not buffer.is_open
    assert buffer.try_collect(10) is None


def test_statistics_come_back_as_return_values() -> None:
    subs = _subs()
    buffer = FetchBuffer(subs)
    manager = _manager(buffer, subs)
    request = manager.poll(0).requests[0]
    data = batch(0, 5)
    generation = buffer.generation
    stats = manager.on_response(
        request.request_id,
        fetch_response(17, {T0: Part(records=data, high_watermark=5)}, throttle_ms=7),
        40,
    )
    assert stats is not None
    assert (stats.latency_ms, stats.throttle_ms, dict(stats.bytes_by_topic)) == (
        40,
        7,
        {"t": len(data)},
    )
    assert buffer.generation == generation  # the actor calls wakeup(), not the manager
    buffer.wakeup()
    assert buffer.generation == generation + 1
    first = buffer.try_collect(3)
    assert first is not None
    assert [r.offset for r in first.records[T0]] == [0, 1, 2]
    assert dict(first.lag) == {T0: 2}
    assert dict(first.bytes_by_topic) == {} and first.freed_bytes == 0  # not drained yet
    rest = buffer.try_collect(3, wait=False)
    assert rest is not None
    assert [r.offset for r in rest.records[T0]] == [3, 4]
    assert dict(rest.lag) == {T0: 0}
    assert dict(rest.bytes_by_topic) == {"t": len(data)}
    assert rest.freed_bytes == len(data)
    assert buffer.bytes_consumed == len(data) and buffer.records_consumed == 5
