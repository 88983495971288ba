"""What the asyncio front ends share (``AsyncKafkaConsumer``, ``AsyncKafkaShareConsumer``): the
bridge between the actors' threads and one event loop.

Owns: :class:`EventLoopBridge`, an object each asyncio front end holds: it binds the front end
to the loop of its first coroutine call, observes the core's AppSignal and wakes that loop
(coalesced ``call_soon_threadsafe``) when an actor notifies, waits on the loop for the next
wake-up (:meth:`EventLoopBridge.wait`) and awaits a core request's
``concurrent.futures.Future`` up to a deadline (:meth:`EventLoopBridge.result`: never waited
for on the loop's thread; a request not answered, or whose caller is cancelled, is cancelled).

May touch: the core's AppSignal and facade (through the core).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
import uuid
from collections.abc import Callable
from typing import Any

from kafka_actors.core.consumer_core import ActorCore
from kafka_actors.errors import ConsumerClosedError, IllegalStateError, InvalidArgumentError
from kafka_actors.log import new_trace_id, traced

__all__ = ["EventLoopBridge"]


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def running_loop_of(
    bound: asyncio.AbstractEventLoop | None, kind: str
) -> asyncio.AbstractEventLoop:
    """The running event loop, which must be ``bound`` once an asyncio front end (``kind``,
    e.g. "AsyncKafkaConsumer") is bound: each is used from the loop it first ran on (its
    futures and wake-ups belong to that loop). Raises IllegalStateError otherwise."""
    loop = asyncio.get_running_loop()
    if bound is not None and loop is not bound:
        raise IllegalStateError(f"An {kind} is bound to the event loop it first ran on")
    return loop


class EventLoopBridge:
    """The loop side of an asyncio front end (see the module docstring). ``on_wake`` (if
    given) runs on the loop after the waiters are resolved, at every wake-up."""

    def __init__(self, core: ActorCore, on_wake: Callable[[], None] | None = None) -> None:
        self._core = core
        self._on_wake_extra = on_wake
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._wake_scheduled = False

    def bind(self, kind: str) -> tuple[asyncio.AbstractEventLoop, bool]:
        """The loop this front end runs on, and whether this call bound it (the first)."""
        first = self._loop is None
        loop = self._loop = running_loop_of(self._loop, kind)
        if first:
            self._core.ctx.signal.add_observer(self._signal_observer)
        return loop, first

    def _signal_observer(self) -> None:
        """Called on actor threads on every AppSignal.notify: wake the loop (coalesced)."""
        if self._wake_scheduled:
            return
        loop = self._loop
        if loop is None:
            return
        self._wake_scheduled = True
        try:
            loop.call_soon_threadsafe(self.wake)
        except RuntimeError:  # the loop is closed
            self._wake_scheduled = False

    def detach(self) -> None:
        """Stop observing the core's signal (at close)."""
        self._core.ctx.signal.remove_observer(self._signal_observer)

    def resolve_waiters(self) -> None:
        self._wake_scheduled = False
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def wake(self) -> None:
        """On the loop: end the waits, then the front end's own wake-up work."""
        self.resolve_waiters()
        if self._on_wake_extra is not None:
            self._on_wake_extra()

    async def wait(self, deadline: float) -> None:
        """Until the next wake-up or the monotonic ``deadline``."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        loop = self._loop if self._loop is not None else asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        handle = loop.call_later(remaining, _resolve, waiter)
        try:
            await waiter
        finally:
            handle.cancel()
            if not waiter.done():
                waiter.cancel()

    async def result(
        self, future: concurrent.futures.Future[Any], deadline: float, what: str
    ) -> Any:
        """Await a request of the core on the loop, up to ``deadline``; a request not
        answered then (or whose caller is cancelled) is cancelled (no more retries)."""
        wrapped = asyncio.wrap_future(future)
        remaining = max(0.0, deadline - time.monotonic())
        try:
            done, _ = await asyncio.wait([wrapped], timeout=remaining)
        except asyncio.CancelledError:
            future.cancel()
            raise
        if done:
            return wrapped.result()
        wrapped.cancel()
        facade = self._core.facade
        facade.raise_if_fatal()
        if facade.closed:
            raise ConsumerClosedError(f"{what}: the consumer was closed")
        raise ActorCore.timeout_error(future, what)

    async def client_instance_id(self, timeout: float | None) -> uuid.UUID:
        """The id the broker assigned the client for its telemetry (KIP-714), awaited up to
        ``timeout`` seconds (default: default.api.timeout.ms); for both asyncio front ends."""
        if timeout is not None and timeout < 0:
            raise InvalidArgumentError("The timeout cannot be negative.")
        core = self._core
        trace = new_trace_id()
        deadline = core.deadline(timeout)
        with traced(trace):
            future = core.client_instance_id(deadline, trace)
            result: uuid.UUID = await self.result(future, deadline, "clientInstanceId")
            return result
