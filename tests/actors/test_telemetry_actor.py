"""The telemetry actor's own part (kafka_actors.actors.managers.telemetry), driven by hand
around a real TelemetryManager: who waits for the client instance id and for the terminating
push, and the close that does not wait when no broker connection is up. No actor thread, no
broker."""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_actors.actors.events import ClientInstanceIdEvent, TelemetryCloseEvent
from kafka_actors.actors.managers.telemetry import TelemetryActor
from kafka_actors.errors import IllegalStateError
from kafka_actors.log import get_logger
from kafka_actors.protocol.telemetry import TelemetryConfig, TelemetryManager
from tests.protocol.test_telemetry import INSTANCE, Points, pushed, subscription


class _States:
    def __init__(self, *states: str) -> None:
        self.states = states

    def snapshot(self) -> tuple[tuple[int, str, str, str | None], ...]:
        return tuple((i, f"h:{i}", s, None) for i, s in enumerate(self.states))


def _actor(*states: str, supported: bool = True) -> TelemetryActor:
    actor: Any = object.__new__(TelemetryActor)
    actor.ctx = SimpleNamespace(connection_states=_States(*states), client_instance_id=None)
    actor.log = get_logger("telemetry")
    actor._id_waiters = []
    actor._close_waiters = []
    actor.manager = TelemetryManager(
        TelemetryConfig(),
        supported=supported,
        collect=Points(),
        wall_ms=lambda: 0,
        random=lambda: 0.5,
        now_ms=0,
    )
    return actor  # type: ignore[no-any-return]


def _subscribe(actor: TelemetryActor) -> None:
    (request,) = actor.poll_manager(0).requests
    actor.manager.on_response(request.request_id, subscription(), 0)


def test_instance_id_waiters_are_answered_once_the_subscription_is_loaded() -> None:
    actor = _actor("up")
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    actor.handle(ClientInstanceIdEvent(future), 0)
    (request,) = actor.poll_manager(0).requests
    assert not future.done()
    actor.manager.on_response(request.request_id, subscription(), 0)
    actor.poll_manager(0)
    assert future.result(0) == INSTANCE
    assert actor.ctx.client_instance_id == INSTANCE


def test_instance_id_waiters_fail_when_the_broker_has_no_telemetry() -> None:
    actor = _actor("up", supported=False)
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    actor.handle(ClientInstanceIdEvent(future), 0)
    actor.poll_manager(0)
    with pytest.raises(IllegalStateError):
        future.result(0)


def test_close_waits_for_the_terminating_push_answer() -> None:
    actor = _actor("up")
    _subscribe(actor)
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    actor.handle(TelemetryCloseEvent(future), 10)
    (push,) = actor.poll_manager(10).requests
    assert push.request.terminating
    assert not future.done()
    actor.manager.on_response(push.request_id, pushed(), 11)
    actor.poll_manager(11)
    assert future.done()


def test_close_does_not_wait_without_a_connection_up() -> None:
    actor = _actor("down", "connecting")
    _subscribe(actor)
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    actor.handle(TelemetryCloseEvent(future), 10)
    assert future.done()  # at once: the push could not be sent
    (push,) = actor.poll_manager(10).requests  # still offered, if a connection comes up
    assert push.request.terminating
