"""The telemetry actor: the shell of :class:`~kafka_actors.protocol.telemetry.TelemetryManager`
(KIP-714: GetTelemetrySubscriptions, PushTelemetry).

Owns: the callers waiting for the client instance id (``ClientInstanceIdEvent``: completed
once the subscription is loaded, failed with IllegalStateError when telemetry is off) and for
the terminating push of a close (``TelemetryCloseEvent``: completed once it was answered or
when there is nothing to push). The metrics it pushes are read from the consumer's own
registry (``ctx.metrics``) when a push is built. It publishes no events.

May touch: the NetworkActor (``Send``), the shared context (metrics, clock, versions).
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from kafka_actors.actors.context import complete, fail
from kafka_actors.actors.events import ClientInstanceIdEvent, TelemetryCloseEvent
from kafka_actors.actors.routing import RoutingManagerActor
from kafka_actors.errors import IllegalStateError
from kafka_actors.protocol.messages import PollResult
from kafka_actors.protocol.telemetry import (
    TelemetryConfig,
    TelemetryManager,
    TelemetryPoint,
    metric_points,
)
from kafka_actors.protocol.wire.apis import ApiKey

__all__ = ["TelemetryActor"]


class TelemetryActor(RoutingManagerActor):
    """A new incarnation fetches the subscription again, under the client instance id an
    earlier one was assigned (``ctx.client_instance_id``)."""

    component = "telemetry"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._id_waiters: list[concurrent.futures.Future[Any]] = []
        self._close_waiters: list[concurrent.futures.Future[Any]] = []

    def build(self) -> TelemetryManager:
        ctx = self.ctx
        versions = ctx.versions
        assert versions is not None
        supported = versions.supports(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS) and versions.supports(
            ApiKey.PUSH_TELEMETRY
        )
        return TelemetryManager(
            TelemetryConfig.from_consumer_config(ctx.config),
            supported=supported,
            collect=self._collect,
            wall_ms=ctx.clock.wall_ms,
            random=ctx.random,
            now_ms=ctx.now_ms(),
            client_id=ctx.config.client_id,
            client_instance_id=ctx.client_instance_id,
        )

    def _connections(self) -> tuple[tuple[int, str, str, str | None], ...]:
        return self.ctx.connection_states.snapshot()

    def _collect(self) -> list[TelemetryPoint]:
        return metric_points(self.ctx.metrics.registry.snapshot().values())

    def handle(self, message: Any, now_ms: int) -> Any:
        if isinstance(message, ClientInstanceIdEvent):
            self._id_waiters.append(message.future)
            return None
        if isinstance(message, TelemetryCloseEvent):
            self.manager.initiate_close(now_ms)
            if any(state == "up" for _node, _address, state, _error in self._connections()):
                self._close_waiters.append(message.future)
            else:
                # No broker connection is up: the push could not go before the close's
                # deadline anyway (Java waits for it to be sent, not answered); the close does
                # not wait for it (it still goes if a connection comes up before the stop).
                complete(message.future, None)
            return None
        return super().handle(message, now_ms)

    def handle_unbuilt(self, message: Any, now_ms: int) -> bool:
        """A close before any broker answered: no subscription, so no terminating push."""
        if isinstance(message, TelemetryCloseEvent):
            complete(message.future, None)
            return True
        return False

    def poll_manager(self, now_ms: int) -> PollResult:
        manager: TelemetryManager = self.manager
        result = manager.poll(now_ms)
        instance = manager.client_instance_id
        if instance is not None:
            self.ctx.client_instance_id = instance
        if self._id_waiters and (instance is not None or not manager.enabled):
            waiters, self._id_waiters = self._id_waiters, []
            for future in waiters:
                if instance is not None:
                    complete(future, instance)
                else:
                    fail(
                        future,
                        IllegalStateError(
                            "Client telemetry is disabled (the broker does not support it or "
                            "refused it), so the client has no instance id"
                        ),
                    )
        if self._close_waiters and manager.closing_done:
            waiters, self._close_waiters = self._close_waiters, []
            for future in waiters:
                complete(future, None)
        return result
