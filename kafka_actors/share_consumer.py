"""``KafkaShareConsumer``: a share group member (KIP-932, "queues for Kafka") with Java's API
and semantics, Python's manners.

Owns: the blocking front end on the share consumer core (:mod:`kafka_actors.core.share_core`):
each call checks its arguments, asks the core and waits on this thread (bounded by its
deadline, interruptible by ``wakeup()``); ``poll()``'s loop (acknowledging the last poll's
records, collecting from the share fetch actor, waiting for records); the
acknowledgement-commit callback, run on this thread in ``poll``, ``commit_sync`` and
``close``; waiting for each step of the core's close sequence.

A broker without share groups (Kafka before 4.2, or share groups not enabled): the first
``poll()`` raises :class:`~kafka_actors.errors.ShareGroupsNotSupportedError`, whose message
says what to enable.

Thread safety: every method may be called from any thread (``poll`` from one at a time).

May touch: the share consumer core, the facade (waiting, background events), the config.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, Generic, Self

from kafka_actors.core.poll import PollStep
from kafka_actors.core.share_core import (
    AcknowledgementCommitCallback,
    ShareCore,
    build_share_config,
)
from kafka_actors.errors import InvalidArgumentError, KafkaError, KafkaTimeoutError
from kafka_actors.health import ConsumerHealth
from kafka_actors.log import new_trace_id, traced
from kafka_actors.metrics import MetricsView
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.share.acknowledgements import AcknowledgeType
from kafka_actors.protocol.share.fetch import ShareConsumerRecord
from kafka_actors.serialization import Deserializer, K, V
from kafka_actors.structs import ShareConsumerRecords
from kafka_actors.supervisors import FaultInjector

__all__ = [
    "AcknowledgeType",
    "KafkaShareConsumer",
    "ShareConsumerRecord",
    "ShareConsumerRecords",
    "ShareFrontEnd",
]

#: How long a waiting poll waits before it asks the share fetch actor again.
_POLL_WAIT_S: Final = 0.1


class ShareFrontEnd(Generic[K, V]):
    """What both share consumer front ends share: the constructor (Kafka's keys in a dict or
    as keywords, deserializers, fault injector), and the calls that never wait.

    Generic in the records' key and value types, inferred from ``key_deserializer`` /
    ``value_deserializer`` (``bytes | None`` for one not given), as ``KafkaConsumer`` is."""

    def __init__(
        self,
        config: Mapping[str, object] | None = None,
        *,
        key_deserializer: Deserializer[K] | None = None,
        value_deserializer: Deserializer[V] | None = None,
        faults: FaultInjector | None = None,
        **kwargs: object,
    ) -> None:
        self._core = core = ShareCore(
            build_share_config(config, kwargs),
            key_deserializer=key_deserializer,
            value_deserializer=value_deserializer,
            faults=faults,
        )
        self.config = core.config
        self._ctx = core.ctx
        self._facade = core.facade
        #: The poll step every front end shares (core); a share group's actors need no
        #: PollEvent.
        self._step = PollStep(core.ctx, core.facade, core.tree, core, group=False)
        self._setup()

    def _setup(self) -> None:
        """The front end's own state (called at the end of the constructor)."""

    @property
    def core(self) -> ShareCore:
        """The share consumer core under this front end (:mod:`kafka_actors.core`)."""
        return self._core

    def subscription(self) -> set[str]:
        """The topics subscribed to (empty when not subscribed)."""
        return self._core.subscription()

    def acknowledge(
        self,
        record: ShareConsumerRecord[K, V],
        type: AcknowledgeType = AcknowledgeType.ACCEPT,
    ) -> None:
        """Acknowledge one record of the last poll (explicit mode only; never waits): sent
        with the next ShareFetch to its partition's leader, or by ``commit_sync`` /
        ``commit_async`` / ``close``."""
        self._core.acknowledge(record, type, new_trace_id())

    def acknowledge_offset(
        self, topic: str, partition: int, offset: int, type: AcknowledgeType
    ) -> None:
        """Acknowledge a record whose deserializer failed, by its topic, partition and offset
        (Java's ``acknowledge(topic, partition, offset, type)``; explicit mode only; never
        waits). ``poll`` raised RecordDeserializationError for it (``e.topic``,
        ``e.partition``, ``e.offset``; ``e.key`` / ``e.value`` the raw bytes): it is released
        with the next poll's, commit's or close's acknowledgements unless this says ACCEPT or
        REJECT (or RELEASE) before. IllegalStateError for any other offset, or once those
        acknowledgements went."""
        self._core.acknowledge_offset(topic, partition, offset, type, new_trace_id())

    def commit_async(self) -> None:
        """Send the pending acknowledgements now; their results reach the callback."""
        self._facade.ensure_open()
        trace = new_trace_id()
        with traced(trace):
            self._core.commit_async(trace)

    def set_acknowledgement_commit_callback(
        self, callback: AcknowledgementCommitCallback | None
    ) -> None:
        """``callback(offsets, error)`` once per partition result, on the application's
        thread (the polling thread; the loop for asyncio), in ``poll``, ``commit_sync`` or
        ``close``."""
        self._core.callback = callback

    def health(self) -> ConsumerHealth:
        """The share consumer's health for a liveness or readiness probe
        (:class:`~kafka_actors.health.ConsumerHealth`), as ``KafkaConsumer.health()``: the
        share group membership (member epoch, coordinator, assignment), heartbeat and poll
        ages, broker connections and the verdict. A share group has no poll timer and the
        broker holds the positions, so no poll-interval verdict and no partitions' lag.
        Reads local state only, never waits: callable from any thread (and on an asyncio
        loop: a plain method)."""
        return self._core.health()

    def wakeup(self) -> None:
        """A waiting ``poll`` (or the next one) raises WakeupError."""
        self._facade.wakeup()


class KafkaShareConsumer(ShareFrontEnd[K, V]):
    """A member of a share group (see :mod:`kafka_actors.share_consumer`).

    ``KafkaShareConsumer({"bootstrap.servers": "localhost:9092", "group.id": "g"})`` or with
    keywords (``bootstrap_servers=...``). ``share.acknowledgement.mode``: ``implicit`` (every
    record of a poll is acknowledged ACCEPT by the next poll, ``commit_sync``,
    ``commit_async`` or ``close``) or ``explicit`` (``acknowledge(record, type)`` each record
    before the next poll). ``faults``: a FaultInjector for tests (as ``KafkaConsumer``).
    """

    def _setup(self) -> None:
        self._poll_lock = threading.RLock()
        self._close_lock = threading.Lock()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- subscription ----------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join the share group for ``topics`` (an empty list unsubscribes)."""
        if not self._core.subscribe(topics, new_trace_id()):
            self.unsubscribe()

    def unsubscribe(self) -> None:
        """Acknowledge what is pending, leave the share group, drop the subscription."""
        self._facade.ensure_open()
        core = self._core
        trace = new_trace_id()
        with traced(trace):
            if not core.subscription():
                return
            core.prepare_close(trace)
            deadline = core.deadline(None)
            future = core.leave_group(deadline, trace)
            if future is not None:
                self._wait(future, deadline, "unsubscribe", wakeable=False)
            core.drop_subscription(trace)
            self._facade.process_background()

    # -- poll ----------------------------------------------------------------------------

    def poll(self, timeout: float = 0.0) -> ShareConsumerRecords[K, V]:
        """Records acquired for this member (at most ``max.poll.records``), waiting up to
        ``timeout`` seconds for some. In implicit mode the previous poll's records are
        acknowledged ACCEPT first; in explicit mode a poll while some are unacknowledged
        raises IllegalStateError. Runs the acknowledgement-commit callbacks on this thread and
        raises the errors the background reported. A record the key or value deserializer
        fails on raises RecordDeserializationError (its topic, partition, offset and raw
        bytes) and is released, as Java's, unless ``acknowledge_offset`` says otherwise
        (explicit mode); the other records come with the next polls."""
        facade = self._facade
        core = self._core
        ctx = self._ctx
        facade.ensure_open()
        core.require_subscription()
        trace = new_trace_id()
        deadline = time.monotonic() + max(0.0, float(timeout))
        step = self._step
        with traced(trace), self._poll_lock, ctx.metrics.polling():
            core.begin_poll(trace)
            step.start(trace)
            while True:
                facade.process_background()
                step.turn(trace)
                generation = step.generation
                core.raise_collect_error()
                if not core.has_kept():
                    # Woken meanwhile, the collect still deposits its records for the next
                    # poll: nothing is lost.
                    self._wait(core.collect(trace), time.monotonic() + 30.0, "poll")
                    core.raise_collect_error()
                if core.has_kept():
                    return core.hand_out(trace)
                if time.monotonic() >= deadline:
                    return ShareConsumerRecords({})

                def ready(seen: int = generation) -> bool:
                    return step.ready(seen)

                ctx.signal.wait_until(ready, min(deadline, time.monotonic() + _POLL_WAIT_S))
                facade.ensure_open()

    def __iter__(self) -> Iterator[ShareConsumerRecord[K, V]]:
        while True:
            yield from self.poll(1.0)

    # -- acknowledgements --------------------------------------------------------------------

    def commit_sync(self, timeout: float | None = None) -> dict[TopicPartition, KafkaError | None]:
        """Send the pending acknowledgements now and wait: per partition, None or the
        error. Runs the acknowledgement-commit callbacks."""
        facade = self._facade
        facade.ensure_open()
        core = self._core
        trace = new_trace_id()
        deadline = core.deadline(timeout)
        with traced(trace):
            future = core.commit(deadline, trace)
            result: dict[TopicPartition, KafkaError | None] = self._wait(
                future, deadline, "commit_sync"
            )
            facade.process_background()
            return result

    # -- metrics ----------------------------------------------------------------------------

    def metrics(self) -> MetricsView:
        """The consumer's metrics (Java's names) and the share fetch figures as flat values
        (``metrics()["share-acknowledgements-sent-total"]``)."""
        return self._ctx.metrics.view(lambda: self._core.flat_metrics(timeout=5.0))

    def acquisition_lock_timeout_ms(self) -> int | None:
        """The broker's acquisition lock timeout of the records it hands out (ms), from the
        last ShareFetch answer (v1+); ``None`` until one arrived. Java's
        ``acquisitionLockTimeoutMs()`` (an ``Optional``)."""
        value = self._core.flat_metrics(timeout=5.0).get("share-acquisition-lock-timeout-ms")
        return None if value is None else int(value)

    # -- waiting -------------------------------------------------------------------------------

    def client_instance_id(self, timeout: float | None = None) -> uuid.UUID:
        """The id the broker assigned this client for its telemetry (KIP-714), as
        :meth:`KafkaConsumer.client_instance_id <kafka_actors.KafkaConsumer.client_instance_id>`:
        waits up to ``timeout`` seconds (default: default.api.timeout.ms)."""
        if timeout is not None and timeout < 0:
            raise InvalidArgumentError("The timeout cannot be negative.")
        trace = new_trace_id()
        deadline = self._facade.deadline(timeout, self.config.default_api_timeout_ms)
        with traced(trace):
            future = self._core.client_instance_id(deadline, trace)
            result: uuid.UUID = self._wait(future, deadline, "clientInstanceId")
            return result

    def _wait(
        self,
        future: concurrent.futures.Future[Any],
        deadline: float,
        what: str,
        *,
        wakeable: bool = True,
    ) -> Any:
        try:
            return self._facade.wait(future, deadline, what, wakeable=wakeable)
        except KafkaTimeoutError:
            if future.done():
                raise
            future.cancel()
            raise self._core.timeout_error(future, what) from None

    # -- close ---------------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Acknowledge what is pending (implicit mode: ACCEPT for the last poll's records),
        close the share sessions (acquired records not acknowledged are released), leave the
        group, stop the actors. Never waits longer than ``timeout`` seconds (default 30).
        Idempotent."""
        with self._close_lock:
            if self._facade.closed:
                return
            core = self._core
            trace = new_trace_id()
            with traced(trace):
                deadline = core.start_close(timeout)
                for step, start in core.close_steps(deadline, trace):
                    try:
                        future = start()
                        if future is not None:
                            self._wait(future, deadline, f"close(): {step}", wakeable=False)
                    except Exception as exc:
                        core.close_step_failed(step, exc)
                core.end_steps()
                core.stop(deadline)
