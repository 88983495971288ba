"""The request-manager skeleton: ExponentialBackoff, RequestState, Outbox."""

from __future__ import annotations

from kafka_actors.protocol.request_state import (
    ExponentialBackoff,
    Outbox,
    RequestState,
    RetriedRequest,
)


def test_request_state_backs_off_by_failures_and_resets_on_success() -> None:
    state = RequestState(ExponentialBackoff(100, 2, 1_000, 0.0, lambda: 0.5))
    assert state.can_send_request(0) and state.backoff_until_ms is None
    assert state.on_failed_attempt(10) == 100
    assert state.remaining_backoff_ms(60) == 50 and not state.can_send_request(109)
    assert state.on_failed_attempt(110) == 200 and state.attempts == 2
    assert state.backoff_until_ms == 310
    state.on_successful_attempt(400)  # Java: the next request waits backoff(0) after a success
    assert state.attempts == 0 and state.remaining_backoff_ms(450) == 50


def test_request_state_send_restarts_the_wait_and_clear_keeps_the_count() -> None:
    state = RequestState(ExponentialBackoff(100, 2, 1_000, 0.0, lambda: 0.5))
    state.on_failed_attempt(0)
    state.on_send_attempt(50)
    assert state.remaining_backoff_ms(100) == 50  # counted from the later send
    state.clear_backoff()
    assert state.can_send_request(100) and state.attempts == 1
    assert state.on_failed_attempt(100) == 200
    state.reset()
    assert state.attempts == 0 and state.can_send_request(100)


def test_outbox_drains_in_order_and_ids_are_never_reused() -> None:
    box = Outbox()
    box.publish("a")
    box.publish("b")
    assert box.drain() == ("a", "b")
    assert box.drain() == ()
    assert [box.new_id() for _ in range(3)] == [1, 2, 3]


def test_retried_request_counts_sends_and_backs_off_by_them() -> None:
    backoff = ExponentialBackoff(100, 2, 1_000, 0.0, lambda: 0.5)
    request = RetriedRequest()
    assert not request.in_flight
    request.on_send_attempt(7)
    assert request.in_flight and request.attempts == 1
    request.request_id = None
    assert request.schedule_retry(1_000, backoff) == 1_100  # backoff(attempts - 1)
    request.on_send_attempt(8)
    assert request.schedule_retry(2_000, backoff) == 2_200
