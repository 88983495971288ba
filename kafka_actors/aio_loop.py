"""What the asyncio front ends share (``AsyncKafkaConsumer``, ``AsyncKafkaShareConsumer``): the
bridge between the actors' threads and one event loop.

Owns: :class:`LoopFrontEnd`, the mixin binding a front end to the loop of its first coroutine
call, the AppSignal observer that wakes that loop (coalesced ``call_soon_threadsafe``) when
an actor notifies, waiting on the loop for the next wake-up (:meth:`LoopFrontEnd._wait_wake`)
and awaiting a core request's ``concurrent.futures.Future`` up to a deadline
(:meth:`LoopFrontEnd._await`: never waited for on the loop's thread; a request not answered,
or whose caller is cancelled, is cancelled).

May touch: the front end's context (its AppSignal) and facade.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from typing import Any

from kafka_actors.actors.context import ConsumerContext
from kafka_actors.actors.facade import Facade
from kafka_actors.core.consumer_core import ActorCore
from kafka_actors.errors import ConsumerClosedError

__all__ = ["LoopFrontEnd"]


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class LoopFrontEnd:
    """The loop side of an asyncio front end (see the module docstring). The front end sets
    ``_ctx`` and ``_facade`` and calls :meth:`_init_loop` in its constructor."""

    _ctx: ConsumerContext
    _facade: Facade

    def _init_loop(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._wake_scheduled = False

    def _bind_loop(self, kind: str) -> tuple[asyncio.AbstractEventLoop, bool]:
        """The loop this front end runs on, and whether this call bound it (the first)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
            self._ctx.signal.add_observer(self._signal_observer)
            return loop, True
        if asyncio.get_running_loop() is not loop:
            raise RuntimeError(f"An {kind} is bound to the event loop it first ran on")
        return loop, False

    def _signal_observer(self) -> None:
        """Called on actor threads on every AppSignal.notify: wake the loop (coalesced)."""
        if self._wake_scheduled:
            return
        loop = self._loop
        if loop is None:
            return
        self._wake_scheduled = True
        try:
            loop.call_soon_threadsafe(self._on_wake)
        except RuntimeError:  # the loop is closed
            self._wake_scheduled = False

    def _resolve_waiters(self) -> None:
        self._wake_scheduled = False
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _on_wake(self) -> None:
        self._resolve_waiters()

    async def _wait_wake(self, deadline: float) -> None:
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

    async def _await(
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
        self._facade.raise_if_fatal()
        if self._facade.closed:
            raise ConsumerClosedError(f"{what}: the consumer was closed")
        raise ActorCore.timeout_error(future, what)
