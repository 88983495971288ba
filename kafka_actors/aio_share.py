"""``AsyncKafkaShareConsumer``: the share consumer (KIP-932) for asyncio, on the same actors
and core as ``KafkaShareConsumer``.

Owns: the asyncio front end of one share consumer: every call that waits is a coroutine that
awaits the core's ``concurrent.futures.Future`` (bridged to the loop, never waited for on the
loop's thread); ``async for`` over the records; the acknowledgement-commit callback, run on
the loop.

Nothing blocks the loop: records come from the share fetch actor by a collect event with a
future; its completion deposits them in the core's kept records (under the core's lock, on
whichever thread completes it), whether or not the coroutine that asked still waits. So a
cancelled ``poll`` loses nothing: the records acquired for it are handed out by the next
poll, or released at close (the broker delivers them again). The actors' AppSignal has an
observer that wakes the loop (``call_soon_threadsafe``) when records arrived, a background
event (an acknowledgement result, an error) came or a future completed.

Thread safety: use one consumer from one event loop (the loop of its first coroutine call).

May touch: the share consumer core (its context, facade and hand-out state, through their
public methods), the event loop.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterable
from types import TracebackType
from typing import Final, Self

from kafka_actors.aio_loop import EventLoopBridge
from kafka_actors.errors import KafkaError
from kafka_actors.log import new_trace_id, traced
from kafka_actors.metrics import MetricsView
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.share.fetch import ShareConsumerRecord
from kafka_actors.serialization import K, V
from kafka_actors.share_consumer import ShareFrontEnd
from kafka_actors.structs import ShareConsumerRecords

__all__ = ["AsyncKafkaShareConsumer"]

#: How long a waiting poll waits for a wake-up before it looks again.
_POLL_WAIT_S: Final = 0.1
#: The poll timeout of ``async for`` (it polls again when it returned nothing).
_ITER_POLL_S: Final = 1.0


class AsyncKafkaShareConsumer(ShareFrontEnd[K, V]):
    """A member of a share group for asyncio (see :mod:`kafka_actors.aio_share`); the
    constructor is ``KafkaShareConsumer``'s."""

    def _setup(self) -> None:
        self._loop_bridge = EventLoopBridge(self._core)
        self._iterated: deque[ShareConsumerRecord[K, V]] = deque()
        self._poll_lock: asyncio.Lock | None = None
        self._close_lock: asyncio.Lock | None = None
        self._closed = False

    def _bind(self) -> asyncio.AbstractEventLoop:
        return self._loop_bridge.bind("AsyncKafkaShareConsumer")[0]

    def _raise_pending(self) -> None:
        self._facade.process_background()  # acknowledgement callbacks run here, on the loop
        self._core.raise_collect_error()

    # -- context manager, iteration ---------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._bind()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[ShareConsumerRecord[K, V]]:
        return self

    async def __anext__(self) -> ShareConsumerRecord[K, V]:
        """The next record; in implicit mode the records handed out so are acknowledged
        ACCEPT by the poll that follows them (when the iterator is advanced past the last of
        a poll)."""
        while not self._iterated:
            if self._closed:
                raise StopAsyncIteration
            self._iterated = deque(await self.poll(_ITER_POLL_S))
        return self._iterated.popleft()

    # -- subscription -------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join the share group for ``topics`` (non-blocking; an empty list is refused: use
        ``await unsubscribe()``)."""
        if not self._core.subscribe(topics, new_trace_id()):
            raise ValueError("subscribe() needs at least one topic; use await unsubscribe()")

    async def unsubscribe(self) -> None:
        """Acknowledge what is pending, leave the share group, drop the subscription."""
        self._bind()
        self._facade.ensure_open()
        core = self._core
        trace = new_trace_id()
        with traced(trace):
            if not core.subscription():
                return
            self._iterated.clear()
            core.prepare_close(trace)
            deadline = core.deadline(None)
            future = core.leave_group(deadline, trace)
            if future is not None:
                await self._loop_bridge.result(future, deadline, "unsubscribe")
            core.drop_subscription(trace)
            self._raise_pending()

    # -- poll ----------------------------------------------------------------------------------

    async def poll(self, timeout: float = 0.0) -> ShareConsumerRecords[K, V]:
        """Records acquired for this member (at most ``max.poll.records``), waiting up to
        ``timeout`` seconds; the semantics of ``KafkaShareConsumer.poll``. Cancelling it
        loses nothing (see the module docstring)."""
        self._bind()
        if self._poll_lock is None:
            self._poll_lock = asyncio.Lock()
        facade = self._facade
        core = self._core
        facade.ensure_open()
        core.require_subscription()
        trace = new_trace_id()
        deadline = time.monotonic() + max(0.0, float(timeout))
        async with self._poll_lock:
            with traced(trace), self._ctx.metrics.polling():
                core.begin_poll(trace)
                step = self._step
                step.start(trace)
                #: The fetch generation when the last collect was asked, and when.
                seen: int | None = None
                asked = 0.0
                while True:
                    self._raise_pending()
                    step.turn(trace)
                    core.raise_collect_error()
                    if core.has_kept():
                        return core.hand_out(trace)
                    now = time.monotonic()
                    # Ask the share fetch actor again only when records may have arrived
                    # since the last collect (or a little while passed), not at every wake-up.
                    generation = step.generation
                    if seen is None or generation != seen or now - asked >= _POLL_WAIT_S:
                        seen, asked = generation, now
                        if core.collect(trace).done():
                            core.raise_collect_error()
                            if core.has_kept():
                                continue
                    if time.monotonic() >= deadline:
                        return ShareConsumerRecords({})
                    # Until records arrive (the share fetch actor wakes the loop), a collect
                    # completes, or a little while passes: then collect again.
                    await self._loop_bridge.wait(min(deadline, time.monotonic() + _POLL_WAIT_S))
                    facade.ensure_open()

    # -- acknowledgements ---------------------------------------------------------------------

    async def commit_sync(
        self, timeout: float | None = None
    ) -> dict[TopicPartition, KafkaError | None]:
        """Send the pending acknowledgements now and await them: per partition, None or the
        error; the acknowledgement-commit callbacks run on the loop."""
        self._bind()
        self._facade.ensure_open()
        trace = new_trace_id()
        deadline = self._core.deadline(timeout)
        with traced(trace):
            future = self._core.commit(deadline, trace)
            result: dict[TopicPartition, KafkaError | None] = await self._loop_bridge.result(
                future, deadline, "commit_sync"
            )
            self._raise_pending()
            return result

    async def client_instance_id(self, timeout: float | None = None) -> uuid.UUID:
        """As ``KafkaShareConsumer.client_instance_id``, awaited (KIP-714)."""
        self._bind()
        return await self._loop_bridge.client_instance_id(timeout)

    def metrics(self) -> MetricsView:
        """As ``KafkaShareConsumer.metrics()``; the share fetch figures are those the actor
        last published (never waited for on the loop)."""
        return self._ctx.metrics.view(lambda: self._core.flat_metrics(timeout=0.0))

    async def acquisition_lock_timeout_ms(self) -> int | None:
        """As ``KafkaShareConsumer.acquisition_lock_timeout_ms()``: the broker's acquisition
        lock timeout (ms) from the last ShareFetch answer; ``None`` until one arrived. The
        fetch actor is asked from a worker thread (bounded, 5 s), never on the loop."""
        figures = await asyncio.to_thread(self._core.flat_metrics, 5.0)
        value = figures.get("share-acquisition-lock-timeout-ms")
        return None if value is None else int(value)

    # -- close --------------------------------------------------------------------------------

    async def close(self, timeout: float | None = None) -> None:
        """As ``KafkaShareConsumer.close``: acknowledge what is pending, close the share
        sessions (records handed out or kept and not acknowledged are released), leave the
        group, stop the actors (joined in a worker thread). Idempotent."""
        if self._closed:
            return
        self._bind()
        if self._close_lock is None:
            self._close_lock = asyncio.Lock()
        async with self._close_lock:
            if self._closed or self._facade.closed:
                self._closed = True
                return
            core = self._core
            trace = new_trace_id()
            with traced(trace):
                deadline = core.start_close(timeout)
                collecting = core.collect(trace) if core.healthy() else None
                if collecting is not None and not collecting.done():
                    # Records acquired for a poll that no one waits for any more are released
                    # by the close with the rest.
                    await asyncio.wait(
                        [asyncio.wrap_future(collecting)],
                        timeout=max(0.0, min(1.0, deadline - time.monotonic())),
                    )
                self._iterated.clear()
                for step, start in core.close_steps(deadline, trace):
                    try:
                        future = start()
                        if future is not None:
                            await self._loop_bridge.result(future, deadline, f"close(): {step}")
                    except Exception as exc:
                        core.close_step_failed(step, exc)
                core.end_steps()
                self._closed = True
                await asyncio.to_thread(core.stop, deadline)
                self._loop_bridge.detach()
                self._loop_bridge.wake()
