"""``AsyncKafkaConsumer``: the consumer for asyncio, on the same actors as ``KafkaConsumer``.

Owns: the asyncio front end of one consumer — every API call as a coroutine that awaits the
``concurrent.futures.Future`` of its application event (bridged to the loop, never waited
for on the loop's thread), a small buffer of records collected from the fetch actor but not
yet returned (``getone`` / ``async for`` hand records out one by one), the consumed positions
as the application saw them (what ``commit()`` commits; the consumed positions move as
records are returned, and the commit manager's auto-commit commits them), and rebalance
listeners that may be coroutines. Each call runs the core's poll step
(:class:`~kafka_actors.core.poll.PollStep`) and awaits the loop's wake-up where
``KafkaConsumer.poll`` blocks.

How the loop is never blocked
-----------------------------
* Records are collected on the loop's thread, as ``KafkaConsumer.poll`` collects on its own
  (no actor round trip), when the fetch buffer's lock is free at that moment (it is never
  waited for: the actor holds it while it handles one message) and the compiled decoder is
  in use (decoding one response then takes a few ms); they go into this consumer's buffer
  before anything is awaited.
  Otherwise they come from the fetch actor by a
  :class:`~kafka_actors.actors.managers.CollectEvent` carrying a future; its completion is
  moved onto the loop by ``call_soon_threadsafe`` and deposits the records in the buffer,
  whether or not the coroutine that asked is still waiting. Either way a cancelled
  ``getmany`` (or one cut short by ``asyncio.timeout``) loses nothing: the next call returns
  those records.
* A call that finds records ready at once gives the loop a turn first (``asyncio.sleep(0)``)
  when it has not had one for 5 ms, so a consumer with a backlog does not starve other tasks.
* The actors' :class:`~kafka_actors.actors.context.AppSignal` has an observer that wakes the
  loop (coalesced ``call_soon_threadsafe``) when a fetch buffered data, a background event
  (rebalance callback, error) arrived or a future completed; waiting coroutines re-check.
* Commits, offset lookups, metadata: the event's future is awaited with
  ``asyncio.wrap_future``, bounded by the call's deadline.
* ``close()`` joins the actor threads in a worker thread (bounded by its timeout).

Rebalance callbacks
-------------------
Background events are handled on the loop as soon as they arrive (not only inside
``getmany``). A callback runs as a task on the loop: the listener's method may be a plain
function or a coroutine function, and may await any consumer call (commit, seek, position...)
or hand work to other tasks and await it. The callback is acknowledged when the coroutine
returns, bounded by ``max.poll.interval.ms`` (the rebalance timeout): past it the coroutine is
cancelled, the partitions count as lost, and the next ``getmany`` / ``getone`` raises
:class:`~kafka_actors.errors.KafkaTimeoutError` naming them (it is also logged). Before
``on_partitions_revoked`` runs, records of the revoked partitions still in this consumer's
buffer are dropped (their position moved back to the first of them); with auto-commit, the
commit manager committed the consumed positions before the revocation started (as Java).

``rebalance.safe.commits=true`` (implemented once in :mod:`kafka_actors.actors.safe_commits`,
shared with ``KafkaConsumer``): the revocation is further held until the records returned to
the application for the revoked partitions are committed (by the application's ``commit()``
calls), or ``rebalance.safe.commits.max.duration.ms`` passes.

Thread safety: use one consumer from one event loop (the loop of its first coroutine call).

May touch: the consumer core (:mod:`kafka_actors.core`: its context, facade, subscription
state and hand-out bookkeeping, through their public methods), the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from types import TracebackType
from typing import Any, Final, Generic, Self

from kafka_actors.aio_loop import EventLoopBridge
from kafka_actors.config import ConsumerConfig
from kafka_actors.core import (
    DEFAULT_CLOSE_TIMEOUT_S,
    ConsumerCore,
    build_config,
    commit_offsets,
)
from kafka_actors.core.poll import PollStep
from kafka_actors.errors import (
    ConsumerClosedError,
    KafkaTimeoutError,
    RecordDeserializationError,
)
from kafka_actors.health import ConsumerHealth
from kafka_actors.log import get_logger, new_trace_id, traced
from kafka_actors.metrics import MetricsView
from kafka_actors.protocol.group.membership_operation import check_membership_operation
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.metadata import PartitionInfo
from kafka_actors.protocol.offsets.list_offsets import LookupKind, OffsetAndTimestamp
from kafka_actors.protocol.records import decode as _records
from kafka_actors.protocol.records.arrow import records_batch
from kafka_actors.protocol.records.decode import ConsumerRecord
from kafka_actors.protocol.subscription import FetchPosition, ResetKind
from kafka_actors.serialization import Deserializer, K, V
from kafka_actors.structs import (
    ConsumerGroupMetadata,
    ConsumerRebalanceListener,
    GroupMembershipOperation,
)
from kafka_actors.supervisors import ChildRestartingError, FaultInjector, SupervisorFatalError

__all__ = ["AsyncKafkaConsumer", "ConsumerRebalanceListener"]

_log = get_logger("aio")
_REVOKED: Final = "on_partitions_revoked"
_ASSIGNED: Final = "on_partitions_assigned"
_LOST: Final = "on_partitions_lost"
#: A call that finds records ready lets the loop run other tasks first when it has not had
#: a turn for this long.
_LOOP_TURN_S: Final = 0.005
#: No partition named: records of any.
_ANY: Final[frozenset[TopicPartition]] = frozenset()


def _consumed_to(buffered: _Buffered, last: ConsumerRecord, more: bool) -> FetchPosition:
    """The consumed position once ``last`` of ``buffered`` is returned: after it while
    ``more`` records of its partition stay buffered (or the collect's end is not known), else
    where the collect ended (past control batches after the last record)."""
    end = buffered.end
    if more or end is None:
        return FetchPosition(last.offset + 1, last.leader_epoch)
    return end


class _Buffered:
    """Records of one partition collected but not yet returned (``records[start:]``: taking
    a batch is a list slice, not a Python step per record), and the position the fetch actor
    moved the partition to when it handed them out (to move it back, compare-and-set)."""

    __slots__ = ("end", "records", "start")

    def __init__(self) -> None:
        self.records: list[ConsumerRecord] = []
        self.start = 0
        self.end: FetchPosition | None = None

    def __len__(self) -> int:
        return len(self.records) - self.start

    def first(self) -> ConsumerRecord:
        return self.records[self.start]

    def add(self, records: Iterable[ConsumerRecord]) -> None:
        if self.start:
            del self.records[: self.start]
            self.start = 0
        self.records.extend(records)

    def take(self, limit: int) -> list[ConsumerRecord]:
        start = self.start
        taken = self.records[start : start + limit]
        self.start = start + len(taken)
        return taken


class _LoopListener(ConsumerRebalanceListener):
    """What the facade calls (on the loop's thread): each callback becomes a task on the loop
    and a ``concurrent.futures.Future`` that completes (acknowledges) when the task ends. The
    task drops the buffered records of revoked (or lost) partitions, then runs the
    application's listener (the commit before a revocation is the commit manager's)."""

    def __init__(self, consumer: AsyncKafkaConsumer[Any, Any]) -> None:
        self._consumer = consumer

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        return self._start(_REVOKED, revoked)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        return self._start(_ASSIGNED, assigned)

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        return self._start(_LOST, lost)

    def _start(
        self, method: str, partitions: set[TopicPartition]
    ) -> concurrent.futures.Future[None]:
        """On the loop's thread (the facade runs listener methods where it processes
        background events): run the callback as a task; its end acknowledges."""
        consumer = self._consumer
        loop = consumer._bind()
        acknowledged: concurrent.futures.Future[None] = concurrent.futures.Future()
        task = loop.create_task(self._run(method, frozenset(partitions)))
        consumer._callback_tasks.add(task)

        def finished(t: asyncio.Task[Any]) -> None:
            consumer._callback_tasks.discard(t)
            if t.cancelled():
                acknowledged.set_exception(
                    ConsumerClosedError(f"{method} was cancelled (the consumer is closing)")
                )
                return
            error = t.exception()
            if error is None:
                acknowledged.set_result(None)
            else:
                acknowledged.set_exception(error)

        task.add_done_callback(finished)
        return acknowledged

    async def _run(self, method: str, partitions: frozenset[TopicPartition]) -> None:
        consumer = self._consumer
        log = consumer._log.bind(method=method, partitions=sorted(str(tp) for tp in partitions))
        if method in (_REVOKED, _LOST):
            for tp in partitions:
                consumer._records.drop(tp, rewind=method == _REVOKED)
        if method in (_REVOKED, _LOST):
            for tp in partitions:
                consumer._records.consumed.pop(tp, None)
        listener = consumer._listener
        if listener is None:
            return
        fn = getattr(listener, method, None)
        if fn is None and method == _LOST:
            fn = getattr(listener, _REVOKED, None)
        if fn is None:
            return
        timeout = consumer.config.max_poll_interval_ms / 1000.0
        try:
            async with asyncio.timeout(timeout):
                result = fn(set(partitions))
                if inspect.isawaitable(result):
                    await result
                elif isinstance(result, concurrent.futures.Future):
                    await asyncio.wrap_future(result)
        except TimeoutError:
            error = KafkaTimeoutError(
                f"{method} did not complete within max.poll.interval.ms "
                f"({consumer.config.max_poll_interval_ms} ms); partitions "
                f"{sorted(str(tp) for tp in partitions)} count as lost"
            )
            log.error("rebalance_listener_timed_out")
            consumer._errors.append(error)
            raise error from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("rebalance_listener_failed", error=repr(exc))
            consumer._errors.append(exc)
            raise


class _LoopRecords:
    """Records collected for the application and not yet returned, on the loop's thread (see
    the module docstring): the per-partition buffer, filled by collects on the loop or from
    the fetch actor; taking records out of it (deserialized by the core's
    :class:`~kafka_actors.core.HandOut`); giving them back; the consumed positions as the
    application saw them (what ``commit()`` commits; the consumed positions the commit
    manager's auto-commit commits)."""

    def __init__(
        self,
        consumer: AsyncKafkaConsumer[Any, Any],
        core: ConsumerCore,
        config: ConsumerConfig,
        errors: list[BaseException],
    ) -> None:
        self._bind = consumer._bind
        self._on_wake = consumer._on_wake
        self._log = consumer._log
        self._core = core
        self._ctx = core.ctx
        self._facade = core.facade
        self._handout = core.handout
        self.config = config
        #: Errors for the application's next call (the consumer's list).
        self._errors = errors
        self.buffer: dict[TopicPartition, _Buffered] = {}
        #: Per partition, the last record returned to the application.
        self.consumed: dict[TopicPartition, ConsumerRecord] = {}
        self.collecting: concurrent.futures.Future[Any] | None = None
        self.collect_done: asyncio.Future[None] | None = None
        self.empty_at_generation: int | None = None
        self.collect_retry_at: float | None = None
        #: Records per collect: a few polls' worth per round trip to the fetch actor.
        self._collect_size = max(2000, 4 * config.max_poll_records)
        self._collect_on_loop = _records.IMPLEMENTATION != "python"

    def collect(self, trace: str) -> bool:
        """Collect unless a collect is under way or the last found nothing and nothing
        arrived since: True when records (or none) were deposited at once (on the loop's
        thread); else a collect from the fetch actor may have started."""
        if self.collecting is None and (
            self.empty_at_generation is None
            or self.empty_at_generation != self._ctx.fetch_buffer.generation
        ):
            if self.collect_now():
                return True
            self.start_collect(trace)
        return False

    def retry_due(self) -> bool:
        """After a collect that found the fetch actor restarting: whether to ask again now."""
        retry_at = self.collect_retry_at
        if retry_at is None or time.monotonic() < retry_at:
            return False
        self.collect_retry_at = None
        self.empty_at_generation = None
        return True

    def collect_now(self) -> bool:
        """Collect on the loop's thread, as ``KafkaConsumer.poll`` does on its own, when the
        fetch buffer's lock is free (else the caller asks the actor: the loop never waits for a
        lock). True when records (or none) were deposited; False: ask the actor.

        Only with the compiled decoder: decoding happens at collect, a whole response of a
        partition at once, which the compiled decoder does in a few ms (about what the same
        decoding on the fetch actor's thread would keep the loop from the GIL anyway); pure
        Python takes ten times as long, and on the actor's thread gives the GIL back to the
        loop every switch interval."""
        if not self._collect_on_loop:
            return False
        generation = self._ctx.fetch_buffer.generation
        ran, result = self._handout.try_collect_here(self._collect_size)
        if not ran or result is None:
            return False
        self._deposit_result(result, generation)
        return True

    def prefetch(self, trace: str) -> None:
        """Ask the fetch actor for more before this buffer runs dry, so that the next call
        finds records here instead of waiting for the round trip (not when the next call can
        collect on the loop's thread: a round trip then only adds thread switches)."""
        if self.collecting is not None or self.collect_retry_at is not None:
            return
        if self._collect_on_loop and self._ctx.fetch_buffer.is_open:
            return
        if self.empty_at_generation == self._ctx.fetch_buffer.generation:
            return  # the last collect found nothing and nothing arrived since
        buffered = 0
        for b in self.buffer.values():
            buffered += len(b)
            if buffered >= self._collect_size // 2:
                return
        self.start_collect(trace)

    def start_collect(self, trace: str) -> None:
        loop = self._bind()
        generation = self._ctx.fetch_buffer.generation
        done: asyncio.Future[None] = loop.create_future()
        self.collect_done = done
        future = self._handout.collect(self._collect_size, trace)
        self.collecting = future

        def deliver(f: concurrent.futures.Future[Any]) -> None:
            try:
                loop.call_soon_threadsafe(self._on_collected, f, generation, done)
            except RuntimeError:
                pass

        future.add_done_callback(deliver)

    def _on_collected(
        self,
        future: concurrent.futures.Future[Any],
        generation: int,
        done: asyncio.Future[None],
    ) -> None:
        """On the loop: put collected records into the buffer (whoever is still waiting)."""
        if self.collecting is future:
            self.collecting = None
        try:
            self._deposit(future, generation)
        finally:
            if not done.done():
                done.set_result(None)
            self._on_wake()

    def _deposit(self, future: concurrent.futures.Future[Any], generation: int) -> None:
        error = future.exception()
        if error is not None:
            if isinstance(error, SupervisorFatalError):
                try:
                    self._facade.raise_if_fatal()
                except BaseException as exc:
                    error = exc
                self._errors.append(error)
            elif not isinstance(error, (ChildRestartingError, KeyError)):
                self._errors.append(error)
            else:  # the fetch actor is (re)starting: ask again after the retry backoff
                self.empty_at_generation = generation
                self.collect_retry_at = time.monotonic() + self.config.retry_backoff_ms / 1000.0
            return
        self._deposit_result(future.result(), generation)

    def _deposit_result(self, result: Any, generation: int) -> None:
        if result is None or not result.records:
            self.empty_at_generation = generation
            if result is not None and result.error is not None:
                self._errors.append(result.error)
            return
        self.empty_at_generation = None
        for tp, records in result.records.items():
            if not records:
                continue
            end = result.positions.get(tp)
            if self._facade.closed:
                continue
            if not self._handout.admit(tp, end, records[0].offset):
                continue  # given back when being revoked (or reset) since the collect
            buffered = self.buffer.get(tp)
            if buffered is None:
                buffered = self.buffer[tp] = _Buffered()
            buffered.add(records)
            buffered.end = end

    def take(
        self, wanted: frozenset[TopicPartition], limit: int
    ) -> dict[TopicPartition, list[ConsumerRecord[Any, Any]]]:
        """Up to ``limit`` buffered records of fetchable partitions (round robin).

        A record a deserializer fails on stays first in its partition's buffer, and the
        partition first in the buffer: the records before it are returned (with those taken
        from other partitions), then each call raises ``RecordDeserializationError`` for it
        (the deserializer tried again) until a seek past it, as Java's consumer does."""
        out: dict[TopicPartition, list[ConsumerRecord[Any, Any]]] = {}
        if not self.buffer:
            return out
        subs = self._ctx.subscriptions
        deserializes = self._handout.deserializes
        for tp in list(self.buffer):
            if wanted and tp not in wanted:
                continue
            state = subs.partition_state(tp)
            if state is None or not state.is_fetchable:
                if state is not None and state.paused and not state.pending_revocation:
                    continue  # kept until resumed
                self.drop(tp, rewind=state is not None)
                continue
            buffered = self.buffer.pop(tp)
            taken = buffered.take(limit)
            if len(buffered):
                self.buffer[tp] = buffered  # to the end: the next call starts elsewhere
            failed = False
            if deserializes:
                taken, error = self._deserialize(tp, buffered, taken)
                if error is not None:
                    failed = True
                    if not taken:
                        if out:
                            break  # raised by the next call
                        raise error
            self._returned(tp, buffered, taken[-1])
            out[tp] = taken
            limit -= len(taken)
            if limit <= 0 or failed:
                break
        return out

    def _to_front(self, tp: TopicPartition, buffered: _Buffered) -> None:
        """Put ``tp``'s buffer back, first: the next call starts with it."""
        buffer = self.buffer
        buffer[tp] = buffered
        for other in [k for k in buffer if k != tp]:
            buffer[other] = buffer.pop(other)

    def take_one(self, wanted: frozenset[TopicPartition]) -> ConsumerRecord[Any, Any] | None:
        """One buffered record of a fetchable partition, or None (then ``_take`` decides)."""
        subs = self._ctx.subscriptions
        handout = self._handout
        for tp, buffered in self.buffer.items():
            if wanted and tp not in wanted:
                continue
            if not handout.deserializes and self._ctx.safe_commits is None:
                # The usual case in one hold of the subscription's lock: whether tp may hand
                # out, and the consumed position moved past the record (as _returned).
                record = buffered.records[buffered.start]
                if not subs.consume_one(tp, _consumed_to(buffered, record, len(buffered) > 1)):
                    return None
                buffered.start += 1
                if not len(buffered):
                    del self.buffer[tp]
                self.consumed[tp] = record
                return record
            state = subs.partition_state(tp)
            if state is None or not state.is_fetchable:
                return None
            record = buffered.records[buffered.start]
            buffered.start += 1
            if not len(buffered):
                del self.buffer[tp]
            if self._handout.deserializes:
                ok, error = self._deserialize(tp, buffered, [record])
                if error is not None:
                    raise error
                record = ok[0]
            self._returned(tp, buffered, record)
            return record
        return None

    def _deserialize(
        self, tp: TopicPartition, buffered: _Buffered, taken: list[ConsumerRecord]
    ) -> tuple[list[ConsumerRecord[Any, Any]], RecordDeserializationError | None]:
        """``taken`` (just taken from ``buffered``) deserialized up to a record a deserializer
        fails on; that record and those after it (all of them when interrupted) go back into
        the buffer, which goes first, so that the next call starts with it."""
        ok: list[ConsumerRecord[Any, Any]] = []
        error = None
        try:
            ok, error = self._handout.deserialize(taken)
        finally:
            if len(ok) < len(taken):
                buffered.start -= len(taken) - len(ok)
                self._to_front(tp, buffered)
        return ok, error

    def _returned(
        self, tp: TopicPartition, buffered: _Buffered, last: ConsumerRecord[Any, Any]
    ) -> None:
        """Records of ``tp`` up to ``last`` are returned to the application: what it consumed
        (the consumed position: after ``last``, or where the collect ended once its buffer is
        empty; what the commit manager's auto-commit commits), what rebalance-safe commits
        wait for."""
        self.consumed[tp] = last
        self._handout.returned(tp, last, _consumed_to(buffered, last, tp in self.buffer))

    def drop(self, tp: TopicPartition, *, rewind: bool) -> None:
        """Forget the buffered records of ``tp``; ``rewind``: move its position back to the
        first of them (compare-and-set with the position they were handed out with)."""
        buffered = self.buffer.pop(tp, None)
        if buffered is None or not len(buffered) or not rewind or buffered.end is None:
            return
        self._handout.rewind(tp, buffered.end, buffered.first().offset)

    def consumed_offsets(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """What the application consumed: the first record still buffered here, else the
        consumed position (moved as records are returned, never by a collect whose records
        are still on their way to this buffer)."""
        subs = self._ctx.subscriptions
        owned = subs.assigned_partitions()
        wanted = owned if partitions is None else [tp for tp in partitions if tp in owned]
        consumed = subs.all_consumed()
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp in wanted:
            buffered = self.buffer.get(tp)
            if buffered is not None and len(buffered):
                first = buffered.first()
                last = self.consumed.get(tp)
                epoch = last.leader_epoch if last is not None else first.leader_epoch
                out[tp] = OffsetAndMetadata(first.offset, "", epoch)
            elif tp in consumed:
                out[tp] = consumed[tp]
        return out


class AsyncKafkaConsumer(Generic[K, V]):
    """A Kafka consumer for asyncio (see :mod:`kafka_actors.aio`).

    Generic in its records' key and value types, inferred from ``key_deserializer`` /
    ``value_deserializer`` (``bytes | None`` for one not given), as ``KafkaConsumer`` is.

    ``AsyncKafkaConsumer("topic", bootstrap_servers="localhost:9092", group_id="g")`` or with
    a dict of Kafka's own keys as ``config=``; topics given here are subscribed at once.
    Use as ``async with`` (``close()`` on exit), then ``async for record in consumer`` or
    ``await consumer.getmany(timeout_ms=..., max_records=...)``.
    """

    def __init__(
        self,
        *topics: str,
        config: Mapping[str, object] | ConsumerConfig | None = None,
        listener: Any = None,
        key_deserializer: Deserializer[K] | None = None,
        value_deserializer: Deserializer[V] | None = None,
        faults: FaultInjector | None = None,
        **kwargs: object,
    ) -> None:
        cfg = build_config(config, kwargs)
        self._auto_commit = cfg.enable_auto_commit
        # Auto-commit is the commit manager's (at auto.commit.interval.ms on the poll events,
        # and before a revocation), on the consumed positions: moved as records leave this
        # consumer's buffer for the application (records still buffered are not consumed).
        self._core = core = ConsumerCore(
            cfg,
            key_deserializer=key_deserializer,
            value_deserializer=value_deserializer,
            faults=faults,
        )
        self.config = (
            cfg if cfg.client_id else cfg.with_overrides({"client.id": core.config.client_id})
        )
        self._ctx = core.ctx
        self._facade = core.facade
        self._handout = core.handout
        self._log = _log.bind(client_id=self.config.client_id, group_id=cfg.group_id)
        self._listener: Any = None
        self._loop_bridge = EventLoopBridge(core, self._drain_if_pending)
        #: When the loop last had a turn during a call (see ``_get``).
        self._turn_at = 0.0
        #: The poll step every front end shares (core).
        self._step = PollStep(
            core.ctx,
            core.facade,
            core.tree,
            core,
            group=core.uses_group,
            commit_while_waiting=False,
        )
        self._errors: list[BaseException] = []
        self._records = _LoopRecords(self, core, self.config, self._errors)
        self._callback_tasks: set[asyncio.Task[Any]] = set()
        self._close_lock: asyncio.Lock | None = None
        self._closed = False
        if topics:
            self.subscribe(topics, listener=listener)
        elif listener is not None:
            self._listener = listener

    @property
    def _buffer(self) -> dict[TopicPartition, _Buffered]:
        """The records collected and not yet returned, per partition (see ``_LoopRecords``)."""
        return self._records.buffer

    # -- loop binding and wake-ups -------------------------------------------------------------

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop, first = self._loop_bridge.bind("AsyncKafkaConsumer")
        if first:
            if self._ctx.background:
                loop.call_soon(self._on_wake)
        return loop

    def _on_wake(self) -> None:
        self._loop_bridge.wake()

    def _drain_if_pending(self) -> None:
        if self._ctx.background and not self._facade.closed:
            self._drain_background()

    def _drain_background(self) -> None:
        """Run what the background asked for (callbacks become tasks); keep errors for the
        application's next call."""
        try:
            self._facade.process_background()
        except BaseException as exc:
            if exc is not self._facade.fatal_error:
                self._errors.append(exc)

    def _raise_pending(self) -> None:
        self._drain_background()
        if self._errors:
            raise self._errors.pop(0)
        self._facade.ensure_open()

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

    def __aiter__(self) -> AsyncIterator[ConsumerRecord[K, V]]:
        return self

    async def __anext__(self) -> ConsumerRecord[K, V]:
        record = self._ready_one(_ANY)  # getone's fast path, without its coroutine
        if record is not None:
            return record
        try:
            return await self.getone()
        except ConsumerClosedError:
            raise StopAsyncIteration from None

    # -- subscription -------------------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] | str | re.Pattern[str] = (),
        listener: Any = None,
        *,
        pattern: str | re.Pattern[str] | None = None,
    ) -> None:
        """Subscribe to topics or a pattern (as ``KafkaConsumer.subscribe``). ``listener``:
        an object with ``on_partitions_revoked`` / ``on_partitions_assigned`` (and maybe
        ``on_partitions_lost``), each a function or a coroutine function."""
        if pattern is None and not isinstance(topics, (str, re.Pattern)):
            topics = list(topics)
            if not topics:
                raise ValueError("Empty subscription: use 'await consumer.unsubscribe()'")
        self._listener = listener
        self._facade.ensure_open()
        trace = new_trace_id()
        with traced(trace):
            if not self._core.subscribe(topics, _LoopListener(self), pattern, trace):
                raise ValueError("Empty subscription: use 'await consumer.unsubscribe()'")

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Manual assignment (no group membership)."""
        wanted = list(partitions)
        if not wanted:
            raise ValueError("Empty assignment: use 'await consumer.unsubscribe()'")
        records = self._records
        keep = set(wanted)
        for tp in list(records.buffer):
            if tp not in keep:
                records.drop(tp, rewind=True)
        self._facade.ensure_open()
        wanted = self._core.check_partitions(wanted)
        trace = new_trace_id()
        with traced(trace):
            self._core.assign(wanted, trace)

    async def unsubscribe(self) -> None:
        """Leave the group (running ``on_partitions_revoked`` on the loop) and drop the
        subscription or assignment."""
        self._bind()
        self._facade.ensure_open()
        trace = new_trace_id()
        with traced(trace):
            if self._core.must_leave():
                await self._leave_group(
                    time.monotonic() + self.config.default_api_timeout_ms / 1000
                )
            records = self._records
            for tp in list(records.buffer):
                records.drop(tp, rewind=False)
            records.consumed.clear()
            self._core.drop_subscription(trace)

    def subscription(self) -> set[str]:
        """The topics subscribed to (empty when not subscribed, or with assign())."""
        return set(self._ctx.subscriptions.subscription)

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer owns now (assigned by the group, or by assign())."""
        return set(self._ctx.subscriptions.assigned_partitions())

    # -- records ------------------------------------------------------------------------------

    async def getmany(
        self,
        *partitions: TopicPartition,
        timeout_ms: int = 0,
        max_records: int | None = None,
    ) -> dict[TopicPartition, list[ConsumerRecord[K, V]]]:
        """Records fetched so far (of ``partitions``, or of all), up to ``max_records``
        (default ``max.poll.records``), waiting up to ``timeout_ms`` for some."""
        limit = self.config.max_poll_records if max_records is None else int(max_records)
        if limit <= 0:
            raise ValueError("max_records must be positive")
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        return await self._get(frozenset(partitions), limit, deadline)

    async def getmany_batches(
        self,
        timeout_ms: int = 0,
        max_records: int | None = None,
        *,
        include_headers: bool = False,
    ) -> dict[TopicPartition, Any]:
        """``getmany()`` in columns: per partition, its records as one ``pyarrow.RecordBatch``
        (the schema and the errors of ``KafkaConsumer.poll_batches``), no Python object per
        record. Positions, ``commit()``, auto-commit, rebalance callbacks and rebalance-safe
        commits as for ``getmany()``; records a ``getmany()`` collected and did not return
        come first (converted).

        The records are collected on the loop's thread, without waiting for the fetch actor's
        lock (when it is taken, the call tries again 1 ms later); on the pure-Python record
        path decoding then also runs on the loop's thread."""
        handout = self._core.handout
        limit = handout.columnar_limit(max_records, self.config.max_poll_records, "getmany_batches")
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        trace = await self._start_call()
        records = self._records
        with traced(trace), self._ctx.metrics.polling():
            self._step.start(trace)
            while True:
                wake_by = self._turn(trace)
                done = records.collect_done
                if done is not None and not done.done():
                    await asyncio.shield(done)  # getmany's collect: its records come first
                    continue
                if records.buffer:
                    taken = records.take(frozenset(), limit)
                    if taken:
                        self._step.delivered()
                        return {
                            tp: records_batch(recs, include_headers) for tp, recs in taken.items()
                        }
                ran, result = handout.try_collect_here(limit, columnar=True)
                if ran and result is not None:
                    if result.error is not None and not result.columns:
                        raise result.error
                    batches = handout.hand_out_columns(
                        result.columns, result.positions, include_headers
                    )
                    if batches:
                        handout.handed_out_batches(batches)
                        self._step.delivered()
                        return batches
                    if result.columns:
                        continue  # all given back (being revoked since): look again
                if time.monotonic() >= deadline:
                    return {}
                if not ran:  # the fetch actor holds its lock for one message: soon free
                    wake_by = min(wake_by, time.monotonic() + 0.001)
                await self._loop_bridge.wait(min(deadline, wake_by))
                self._turn_at = time.monotonic()

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord[K, V]:
        """The next record (of ``partitions``, or of any), waiting as long as it takes."""
        wanted = frozenset(partitions)
        record = self._ready_one(wanted)
        if record is not None:
            return record
        while True:
            out = await self._get(wanted, 1, time.monotonic() + 3600.0)
            if out:
                return next(iter(out.values()))[0]

    def _ready_one(self, wanted: frozenset[TopicPartition]) -> ConsumerRecord[K, V] | None:
        """A buffered record when nothing else is due (no error to raise, no background
        event to handle): the fast path of ``getone`` and ``async for``, no actor involved."""
        if self._records.buffer and not self._errors and not self._ctx.background:
            return self._records.take_one(wanted)
        return None

    async def _get(
        self, wanted: frozenset[TopicPartition], limit: int, deadline: float
    ) -> dict[TopicPartition, list[ConsumerRecord[K, V]]]:
        trace = await self._start_call()
        with traced(trace), self._ctx.metrics.polling():
            self._step.start(trace)
            records = self._records
            while True:
                wake_by = self._turn(trace)
                out = records.take(wanted, limit)
                if out:
                    records.prefetch(trace)
                    self._step.delivered()
                    return out
                if records.collect(trace):
                    continue
                done = records.collect_done
                if done is not None and not done.done():
                    # A collect is bounded (the fetch actor answers at once): wait for it even
                    # past the deadline, so that its records are returned now.
                    await asyncio.shield(done)
                    self._turn_at = time.monotonic()
                    continue
                if time.monotonic() >= deadline:
                    return {}
                if records.retry_due():
                    continue
                retry_at = records.collect_retry_at
                if retry_at is not None:
                    wake_by = min(wake_by, retry_at)
                await self._loop_bridge.wait(min(deadline, wake_by))
                self._turn_at = time.monotonic()

    async def _start_call(self) -> str:
        """The start of a call handing records out: bound to the loop, a turn for the loop now
        and then, open and subscribed; its trace id."""
        self._bind()
        if time.monotonic() - self._turn_at >= _LOOP_TURN_S:
            # Records ready at every call would never let the loop run its other tasks (a
            # consumer with a backlog would starve them): give it a turn now and then, before
            # anything is taken (a cancellation here loses nothing).
            await asyncio.sleep(0)
            self._turn_at = time.monotonic()
        self._facade.ensure_open()
        self._core.require_subscription()
        return new_trace_id()

    def _turn(self, trace: str) -> float:
        """Each turn of a call's loop: the group actors told again when due (a call still
        waiting), what the background reported, the poll step's checks and positions
        (:class:`~kafka_actors.core.poll.PollStep`); when to tell the group actors again."""
        step = self._step
        step.waited(trace)
        self._raise_pending()
        step.turn(trace)
        return step.next_event_at

    # -- commits ------------------------------------------------------------------------------

    async def commit(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Commit ``offsets`` (default: what the application consumed), retrying retriable
        errors until ``timeout`` (default ``default.api.timeout.ms``). Returns them."""
        self._bind()
        self._facade.ensure_open()
        self._core.require_group("commit")
        if offsets is not None:
            wanted = commit_offsets(offsets)
        else:
            wanted = self._records.consumed_offsets()
        if not wanted:
            return {}
        trace = new_trace_id()
        deadline = self._facade.deadline(timeout, self.config.default_api_timeout_ms)
        named = self._facade.commit_timeout("commit", wanted, timeout)
        with traced(trace), named:
            future = self._core.commit(wanted, deadline, trace, "commit")
            result: dict[TopicPartition, OffsetAndMetadata] = await self._loop_bridge.result(
                future, deadline, "commit"
            )
            return result

    async def committed(
        self, partitions: Iterable[TopicPartition] | TopicPartition, timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets of ``partitions`` (None where there is none)."""
        self._bind()
        self._facade.ensure_open()
        self._core.require_group("committed")
        wanted = frozenset([partitions] if isinstance(partitions, TopicPartition) else partitions)
        trace = new_trace_id()
        deadline = self._facade.deadline(timeout, self.config.default_api_timeout_ms)
        with traced(trace), self._facade.committed_timeout(wanted, timeout):
            future = self._core.committed(wanted, deadline, trace)
            result: dict[TopicPartition, OffsetAndMetadata | None] = await self._loop_bridge.result(
                future, deadline, "committed"
            )
            return result

    # -- positions ----------------------------------------------------------------------------

    async def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """The offset of the next record the application gets from ``partition``."""
        self._bind()
        self._facade.ensure_open()
        core = self._core
        core.check_position_partition(partition)
        deadline = self._facade.deadline(timeout, self.config.default_api_timeout_ms)
        trace = new_trace_id()
        named = self._facade.position_timeout(partition, timeout)
        with traced(trace), named:
            while True:
                buffered = self._records.buffer.get(partition)
                if buffered is not None and len(buffered):
                    return buffered.first().offset
                position = core.valid_position(partition)
                if position is not None:
                    return position
                core.update_positions(trace)
                if time.monotonic() >= deadline:
                    raise named.error()
                await self._loop_bridge.wait(min(deadline, time.monotonic() + 0.5))
                self._facade.raise_if_fatal()

    def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        """Return records of ``partition`` from ``offset`` on."""
        self._records.drop(partition, rewind=False)
        self._facade.ensure_open()
        self._core.seek(partition, offset)
        self._records.consumed.pop(partition, None)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Move the positions of ``*partitions`` (none given: every assigned partition)
        to their log start offset, looked up at the next poll or position(). A partition
        not assigned raises IllegalStateError."""
        wanted = list(partitions) or list(self.assignment())
        for tp in wanted:
            self._records.drop(tp, rewind=False)
        self._facade.ensure_open()
        self._core.seek_to(wanted, ResetKind.EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Move the positions of ``*partitions`` (none given: every assigned partition)
        to their end offset, looked up at the next poll or position(). A partition not
        assigned raises IllegalStateError."""
        wanted = list(partitions) or list(self.assignment())
        for tp in wanted:
            self._records.drop(tp, rewind=False)
        self._facade.ensure_open()
        self._core.seek_to(wanted, ResetKind.LATEST)

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning (and fetching) records of ``*partitions`` until resume(); they
        stay assigned. A partition not assigned raises IllegalStateError."""
        self._facade.ensure_open()
        self._core.pause(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        """Return records of paused ``*partitions`` again. A partition not assigned raises
        IllegalStateError."""
        self._facade.ensure_open()
        self._core.resume(partitions)
        self._on_wake()

    def paused(self) -> set[TopicPartition]:
        """The partitions paused now."""
        return set(self._ctx.subscriptions.paused_partitions())

    # -- offsets lookups and metadata --------------------------------------------------------

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """The first offset of each partition (its log start offset), from the
        partitions' leaders; waits up to ``timeout`` seconds (default: default.api.timeout.ms)."""
        result: dict[TopicPartition, int] = await self._list_offsets(
            LookupKind.BEGINNING, dict.fromkeys(partitions, -2), timeout
        )
        return result

    async def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """The end offset of each partition (the offset the next record written will
        have), from the partitions' leaders; waits up to ``timeout`` seconds (default:
        default.api.timeout.ms)."""
        result: dict[TopicPartition, int] = await self._list_offsets(
            LookupKind.END, dict.fromkeys(partitions, -1), timeout
        )
        return result

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Earliest offset whose timestamp is >= the given one (ms), per partition."""
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"The target time for partition {tp} is {ts}; it must be >= 0")
        result: dict[TopicPartition, OffsetAndTimestamp | None] = await self._list_offsets(
            LookupKind.TIMES, dict(timestamps), timeout
        )
        return result

    async def _list_offsets(
        self, kind: str, timestamps: dict[TopicPartition, int], timeout: float | None
    ) -> Any:
        self._bind()
        self._facade.ensure_open()
        if not timestamps:
            return {}
        trace = new_trace_id()
        deadline = self._facade.deadline(timeout, self.config.default_api_timeout_ms)
        with traced(trace), self._facade.list_offsets_timeout(kind, timestamps, timeout):
            future = self._core.list_offsets(kind, timestamps, deadline, trace)
            return await self._loop_bridge.result(future, deadline, kind)

    async def list_topics(self, timeout: float | None = None) -> dict[str, list[PartitionInfo]]:
        """Every topic the user may see (internal topics excluded) → its partitions."""
        result = await self._topic_metadata(None, timeout)
        return {
            name: list(parts)
            for name, parts in result.items()
            if not (self.config.exclude_internal_topics and name.startswith("__"))
        }

    async def partitions_for(self, topic: str, timeout: float | None = None) -> list[PartitionInfo]:
        """The partitions of ``topic`` from the cluster's metadata (an empty list
        for a topic the metadata does not have); waits up to ``timeout`` seconds."""
        result = await self._topic_metadata(frozenset([topic]), timeout)
        return list(result.get(topic, ()))

    async def _topic_metadata(
        self, topics: frozenset[str] | None, timeout: float | None
    ) -> Mapping[str, tuple[PartitionInfo, ...]]:
        self._bind()
        self._facade.ensure_open()
        trace = new_trace_id()
        deadline = self._facade.deadline(timeout, self.config.default_api_timeout_ms)
        with traced(trace), self._facade.metadata_timeout(topics, timeout):
            future = self._core.topic_metadata(topics, deadline, trace)
            result: Mapping[str, tuple[PartitionInfo, ...]] = await self._loop_bridge.result(
                future, deadline, "list_topics" if topics is None else "partitions_for"
            )
            return result

    # -- group, metrics, close ----------------------------------------------------------------

    async def client_instance_id(self, timeout: float | None = None) -> uuid.UUID:
        """The id the broker assigned this client for its telemetry (KIP-714), awaited up to
        ``timeout`` seconds (default: default.api.timeout.ms); as
        :meth:`KafkaConsumer.client_instance_id <kafka_actors.KafkaConsumer.client_instance_id>`."""
        self._bind()
        return await self._loop_bridge.client_instance_id(timeout)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group's identity as this member sees it now (group id, generation,
        member id, group instance id)."""
        return self._core.group_metadata()

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's high watermark from the last fetch (None before one)."""
        state = self._ctx.subscriptions.partition_state(partition)
        return None if state is None else state.high_watermark

    def enforce_rebalance(self, reason: str | None = None) -> None:
        """Java's ``enforceRebalance``, as :meth:`KafkaConsumer.enforce_rebalance`: with
        ``group.protocol=classic`` the member rejoins on its next ``poll()`` (the JoinGroup
        carries ``reason``); the consumer protocol only logs a warning. Nothing to await."""
        self._facade.ensure_open()
        trace = new_trace_id()
        with traced(trace):
            self._core.enforce_rebalance(reason, trace)

    async def _leave_group(
        self, deadline: float, membership: GroupMembershipOperation = "default"
    ) -> None:
        future = self._core.leave_group(deadline, new_trace_id(), membership)
        if future is None:
            return
        self._drain_background()
        wrapped = asyncio.wrap_future(future)
        done, _ = await asyncio.wait([wrapped], timeout=max(0.0, deadline - time.monotonic()))
        self._drain_background()
        if not done:
            wrapped.cancel()
            raise KafkaTimeoutError("Leaving the group timed out")  # named by close()
        wrapped.result()

    async def close(
        self, timeout: float | None = None, membership: GroupMembershipOperation = "default"
    ) -> None:
        """Commit (with auto-commit), leave the group (callbacks on the loop), stop the
        actors; never waits longer than ``timeout`` seconds (default 30).

        ``membership``: what happens to the group membership (KIP-1092), ``"default"``,
        ``"leave"`` or ``"remain"``, as :meth:`KafkaConsumer.close` describes; another value
        raises :class:`~kafka_actors.errors.InvalidArgumentError`."""
        membership = check_membership_operation(membership)
        if self._closed:
            return
        self._bind()
        if self._close_lock is None:
            self._close_lock = asyncio.Lock()
        async with self._close_lock:
            if self._closed or self._facade.closed:
                self._closed = True
                return
            seconds = DEFAULT_CLOSE_TIMEOUT_S if timeout is None else max(0.0, float(timeout))
            deadline = time.monotonic() + seconds
            trace = new_trace_id()
            ctx = self._ctx
            facade = self._facade
            core = self._core
            with traced(trace):
                self._log.info("consumer_closing", timeout_s=seconds)
                fatal = core.tree.fatal_error
                if fatal is None and core.uses_group:
                    if self._auto_commit and ctx.subscriptions.assigned_partitions():
                        try:
                            await self.commit(timeout=max(0.0, deadline - time.monotonic()))
                        except Exception as exc:
                            self._log.warning("commit_on_close_failed", error=str(exc))
                    if core.must_leave():
                        try:
                            with facade.leave_timeout(
                                timeout, round(DEFAULT_CLOSE_TIMEOUT_S * 1000)
                            ):
                                await self._leave_group(deadline, membership)
                        except Exception as exc:
                            self._log.warning("leave_on_close_failed", error=str(exc))
                if fatal is None:
                    telemetry = core.close_telemetry(trace)  # the terminating push (KIP-714)
                    if telemetry is not None:
                        try:
                            await self._loop_bridge.result(telemetry, deadline, "telemetry push")
                        except Exception as exc:
                            self._log.info("telemetry_close_failed", error=str(exc))
                for tp in list(self._records.buffer):
                    self._records.drop(tp, rewind=False)
                core.begin_shutdown(trace)
                self._closed = True
                remaining = max(0.1, deadline - time.monotonic())
                result = await asyncio.to_thread(core.stop_actors, remaining)
                self._loop_bridge.detach()
                for task in list(self._callback_tasks):
                    task.cancel()
                self._on_wake()
                self._log.info(
                    "consumer_closed",
                    completed=result.completed,
                    not_stopped=list(result.not_stopped),
                )

    def health(self) -> ConsumerHealth:
        """The consumer's health, as :meth:`KafkaConsumer.health`
        (:class:`~kafka_actors.health.ConsumerHealth`). A plain method, not a coroutine: it
        reads local state only and never waits, so it is safe on the loop (a probe handler
        calls ``consumer.health()``) and from any other thread."""
        return self._core.health()

    def current_lag(self, partition: TopicPartition) -> int | None:
        """As :meth:`KafkaConsumer.current_lag` (a plain method: nothing to await): the
        lag from the fetch state held locally, None when unknown; IllegalStateError when
        ``partition`` is not assigned."""
        return self._core.current_lag(partition)

    def metrics(self) -> MetricsView:
        """Java's consumer metrics, the same as :meth:`KafkaConsumer.metrics` (nothing here
        blocks: every value is read from the sensors). A string key reads the flat values
        of before (without the fetch actor's: those need a blocking ask)."""
        return self._ctx.metrics.view(self._flat_metrics)

    def _flat_metrics(self) -> dict[str, Any]:
        values = self._core.flat_metrics()
        values["buffered-records"] = float(sum(len(b) for b in self._records.buffer.values()))
        return values
