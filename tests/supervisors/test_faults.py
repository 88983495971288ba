"""FaultInjector rules: counting, predicates, per-node filters, clear, thread safety."""

from __future__ import annotations

import threading

import pytest

from kafka_actors.supervisors.faults import Delay, Drop, ErrorCode, FaultInjector


def test_unused_injector_answers_nothing() -> None:
    f = FaultInjector()
    assert not f.should_crash("a", object())
    assert f.on_response(1, 0) is None
    assert not f.take_sever(0)
    assert f.pending() == 0


def test_crash_n_times_then_healthy_and_only_for_that_actor() -> None:
    f = FaultInjector()
    f.crash("fetch", times=2)
    assert not f.should_crash("commit", "m")
    assert f.should_crash("fetch", "m1")
    assert f.should_crash("fetch", "m2")
    assert not f.should_crash("fetch", "m3")
    assert f.pending() == 0


def test_crash_predicate_only_consumes_on_match() -> None:
    f = FaultInjector()
    f.crash("fetch", when=lambda m: m == "poison", times=1)
    assert not f.should_crash("fetch", "ok")
    assert not f.should_crash("fetch", "ok")
    assert f.should_crash("fetch", "poison")
    assert not f.should_crash("fetch", "poison")


def test_crash_until_cleared() -> None:
    f = FaultInjector()
    f.crash("a", times=None)
    assert all(f.should_crash("a", i) for i in range(50))
    f.clear()
    assert not f.should_crash("a", 0)


def test_response_rules_in_order_with_node_filter() -> None:
    f = FaultInjector()
    f.error_response(api_key=10, error_code=15, times=2)
    f.delay_response(api_key=1, seconds=0.5, times=1, node=2)
    f.drop_response(api_key=1, times=1)
    assert f.on_response(10, 1) == ErrorCode(15)
    assert f.on_response(10, 3) == ErrorCode(15)
    assert f.on_response(10, 1) is None
    assert f.on_response(1, 1) == Drop()  # the delay rule is for node 2 only
    assert f.on_response(1, 2) == Delay(0.5)
    assert f.on_response(1, 2) is None
    with pytest.raises(ValueError):
        f.drop_response(1, times=0)
    with pytest.raises(ValueError):
        f.delay_response(1, seconds=-1)


def test_sever_is_taken_once_per_request() -> None:
    f = FaultInjector()
    f.sever(1)
    f.sever(1)
    assert not f.take_sever(2)
    assert f.take_sever(1)
    assert f.take_sever(1)
    assert not f.take_sever(1)


def test_clear_removes_everything() -> None:
    f = FaultInjector()
    f.crash("a")
    f.drop_response(1)
    f.sever(1)
    assert f.pending() == 3
    f.clear()
    assert f.pending() == 0
    assert not f.should_crash("a", 0) and f.on_response(1) is None and not f.take_sever(1)


def test_counts_are_exact_under_concurrency() -> None:
    f = FaultInjector()
    f.crash("a", times=500)
    f.error_response(3, 7, times=500)
    hits = [0, 0]
    lock = threading.Lock()

    def worker() -> None:
        mine = [0, 0]
        for _ in range(300):
            mine[0] += f.should_crash("a", None)
            mine[1] += f.on_response(3, 0) is not None
        with lock:
            hits[0] += mine[0]
            hits[1] += mine[1]

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert hits == [500, 500]


def test_apis_and_errors_by_kafkas_names_classes_and_numbers() -> None:
    from kafka_actors.errors import FencedMemberEpochError, NotCoordinatorError
    from kafka_actors.protocol.wire.apis import ApiKey

    f = FaultInjector()
    f.error_response("ConsumerGroupHeartbeat", "FENCED_MEMBER_EPOCH")
    f.error_response("CONSUMER_GROUP_HEARTBEAT", FencedMemberEpochError)
    f.error_response(ApiKey.HEARTBEAT, NotCoordinatorError("x"))
    f.error_response(68, 110)  # the numeric form keeps working
    f.delay_response("Fetch", seconds=0.25)
    f.drop_response("offsetcommit")
    assert [f.on_response(68, 1) for _ in range(4)] == [
        ErrorCode(110),
        ErrorCode(110),
        ErrorCode(110),
        None,
    ]
    assert f.on_response(12, 1) == ErrorCode(16)
    assert f.on_response(1, 1) == Delay(0.25)
    assert f.on_response(8, 1) == Drop()
    assert f.pending() == 0


def test_unknown_names_are_refused_with_the_known_ones() -> None:
    from kafka_actors.errors import KafkaError

    f = FaultInjector()
    with pytest.raises(ValueError, match="ConsumerGroupHeartbeat"):
        f.error_response("ConsumerGroupHeartbeatz", "FENCED_MEMBER_EPOCH")
    with pytest.raises(ValueError, match="unknown Kafka error name"):
        f.error_response("Heartbeat", "FENCED_MEMBER")
    with pytest.raises(ValueError, match="no single Kafka error code"):
        f.error_response("Heartbeat", KafkaError)
    with pytest.raises(ValueError, match="NONE"):
        f.error_response("Heartbeat", "NONE")
    with pytest.raises(TypeError):
        f.error_response("Heartbeat", 1.5)  # type: ignore[arg-type]
    assert f.pending() == 0
