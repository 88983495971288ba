"""``KafkaConsumer``: the public consumer API (Java's semantics, Python's manners).

Owns: the blocking front end on the consumer core (:mod:`kafka_actors.core`): each API call
checks its arguments, asks the core (whose requests return futures) and waits on this thread
for the answer, bounded by the call's deadline, interruptible by ``wakeup()``; ``poll()``'s
loop (background events, rebalance callbacks on the polling thread, waiting for records);
leaving the group and closing with the callbacks on the calling thread. The actors, their
supervision tree, the subscription state and the hand-out of records belong to the core.

Thread safety: every method may be called from any thread, concurrently; the rebalance
listener runs on the thread that calls ``poll()`` (or ``unsubscribe()`` / ``close()``).

Group protocol: ``group.protocol=consumer`` (the default, KIP-848) needs a broker with the
consumer group protocol enabled (Kafka 4.x, or 3.7+ with
``group.coordinator.rebalance.protocols=classic,consumer``). Against any other broker the
consumer does not fall back: a 3.7-3.9 broker as shipped advertises ConsumerGroupHeartbeat but
answers it with UNSUPPORTED_VERSION, older brokers lack the API; either way ``subscribe()``
succeeds (or, when the broker's versions are already known to lack the API, raises) and the
next ``poll()`` raises ``UnsupportedVersionError`` whose message says to set
``group.protocol=classic``, as Java's consumer fails. From then on ``subscribe()`` and
``poll()`` while subscribed raise it again; ``unsubscribe()``, ``assign()`` (which works on
any broker) and ``close()`` still work.

May touch: the consumer core, the facade (waiting, background events), the config.
"""

from __future__ import annotations

import concurrent.futures
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from kafka_actors.config import ConsumerConfig
from kafka_actors.core import (
    DEFAULT_CLOSE_TIMEOUT_S,
    ConsumerCore,
    build_config,
    commit_offsets,
)
from kafka_actors.core.poll import PollStep
from kafka_actors.errors import CallTimeout, InvalidArgumentError, KafkaTimeoutError
from kafka_actors.log import new_trace_id, traced
from kafka_actors.metrics import MetricsView
from kafka_actors.protocol.group.membership_operation import check_membership_operation
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.metadata import PartitionInfo
from kafka_actors.protocol.offsets.list_offsets import LookupKind, OffsetAndTimestamp
from kafka_actors.protocol.records import decode as _records
from kafka_actors.protocol.subscription import ResetKind
from kafka_actors.serialization import Deserializer, K, V
from kafka_actors.structs import (
    ConsumerGroupMetadata,
    ConsumerRebalanceListener,
    ConsumerRecords,
    GroupMembershipOperation,
    RebalanceReply,
)
from kafka_actors.supervisors import FaultInjector

if TYPE_CHECKING:
    from kafka_actors.health import ConsumerHealth  # health() imports it when first called

__all__ = ["KafkaConsumer"]

_T = TypeVar("_T")

class KafkaConsumer(Generic[K, V]):
    """A Kafka consumer built from actors (see :mod:`kafka_actors.consumer`).

    Generic in its records' key and value types, which a type checker infers from
    ``key_deserializer`` / ``value_deserializer`` (``bytes | None`` for one not given):
    ``KafkaConsumer(config, value_deserializer=bytes.decode)`` polls
    ``ConsumerRecords[bytes | None, str]``. Deserializers named in the config
    (``value.deserializer``) are not seen by a type checker: annotate the variable
    (``c: KafkaConsumer[str, Order] = KafkaConsumer({...})``).

    ``KafkaConsumer({"bootstrap.servers": "localhost:9092", "group.id": "g"})`` or
    ``KafkaConsumer(bootstrap_servers="localhost:9092", group_id="g")``: Kafka's own keys in a
    dict, or the same names with underscores as keywords. An unknown key or a bad value raises
    :class:`~kafka_actors.errors.ConfigError` naming the key.

    Rebalance listener callbacks run on the polling thread; a callback may acknowledge later
    (:meth:`defer_rebalance_ack`, or by returning a ``concurrent.futures.Future``), and the
    reconciliation waits for that acknowledgement up to ``max.poll.interval.ms``.

    ``faults``: a :class:`~kafka_actors.supervisors.FaultInjector` for tests and chaos runs,
    consulted by this consumer's actors and its NetworkActor: crash an actor on a matching
    message; delay, drop, or answer with a chosen Kafka error code the responses of an API;
    sever a node's connection. ``faults.error_response(api_key=68, error_code=110, times=1)``
    fences the member once (FENCED_MEMBER_EPOCH on its next ConsumerGroupHeartbeat). None
    (the default) costs nothing.
    """

    def __init__(
        self,
        config: Mapping[str, object] | ConsumerConfig | None = None,
        *,
        key_deserializer: Deserializer[K] | None = None,
        value_deserializer: Deserializer[V] | None = None,
        faults: FaultInjector | None = None,
        **kwargs: object,
    ) -> None:
        self._core = core = ConsumerCore(
            build_config(config, kwargs),
            key_deserializer=key_deserializer,
            value_deserializer=value_deserializer,
            faults=faults,
        )
        self.config = core.config
        self._ctx = core.ctx
        self._facade = core.facade
        self._tree = core.tree
        self._poll_lock = threading.RLock()
        #: The poll step every front end shares (core).
        self._step = PollStep(core.ctx, core.facade, core.tree, core, group=core.uses_group)
        self._close_lock = threading.Lock()

    @property
    def core(self) -> ConsumerCore:
        """The consumer core under this consumer (:mod:`kafka_actors.core`): for front ends
        built on a ``KafkaConsumer`` (the Thespian bridge) that chain on its futures."""
        return self._core

    # -- context manager -----------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- subscription ----------------------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] | str | re.Pattern[str] = (),
        listener: ConsumerRebalanceListener | None = None,
        *,
        pattern: str | re.Pattern[str] | None = None,
    ) -> None:
        """Subscribe to topic names, or to every topic matching a regular expression.

        ``topics`` may be an iterable of names, a compiled ``re.Pattern`` or a string (a
        single topic name, or a regex when it starts with ``^`` as librdkafka reads it).
        An empty subscription is ``unsubscribe()``.
        """
        self._facade.ensure_open()
        trace = new_trace_id()
        with traced(trace):
            if not self._core.subscribe(topics, listener, pattern, trace):
                self.unsubscribe()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Manual assignment (no group membership); an empty list is ``unsubscribe()``."""
        self._facade.ensure_open()
        wanted = self._core.check_partitions(partitions)
        if not wanted:
            self.unsubscribe()
            return
        trace = new_trace_id()
        with traced(trace):
            self._core.assign(wanted, trace)

    def unsubscribe(self) -> None:
        """Leave the group (running onPartitionsRevoked on this thread) and drop the
        subscription or assignment."""
        facade = self._facade
        facade.ensure_open()
        trace = new_trace_id()
        with traced(trace):
            if self._core.must_leave():
                deadline = facade.deadline(None, self.config.default_api_timeout_ms)
                self._leave_group(deadline, trace)
            self._core.drop_subscription(trace)
            self._core.log.info("unsubscribed")

    def subscription(self) -> set[str]:
        """The topics subscribed to (empty when not subscribed, or with assign())."""
        return set(self._ctx.subscriptions.subscription)

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer owns now (assigned by the group, or by assign())."""
        return set(self._ctx.subscriptions.assigned_partitions())

    # -- poll --------------------------------------------------------------------------------

    def poll(self, timeout: float = 0.0) -> ConsumerRecords[K, V]:
        """Records fetched since the last poll (up to ``max.poll.records``), waiting up to
        ``timeout`` seconds for some. Runs pending rebalance callbacks on this thread, keeps
        the member in the group (poll timer), auto-commits when due, and raises the errors the
        background reported (typed)."""
        handout = self._core.handout

        def collect(trace: str) -> ConsumerRecords[K, V]:
            records = handout.poll_records(self.config.max_poll_records, trace)
            if records:
                handout.handed_out_batch(records)
            return records

        return self._poll(timeout, collect, ConsumerRecords({}))

    def poll_batches(
        self,
        timeout: float = 0.0,
        max_records: int | None = None,
        *,
        include_headers: bool = False,
    ) -> dict[TopicPartition, Any]:
        """``poll()`` for users who want columns, not objects: per partition, its records as
        one ``pyarrow.RecordBatch`` with the Spark Kafka source's schema (key, value binary;
        topic string; partition int; offset long; timestamp; timestampType int; with
        ``include_headers`` also headers ``array<struct<key, value>>``), made from Arrow
        buffers filled in C: no Python object per record (on the pure-Python record path the
        same batches, converted by pyarrow). Up to ``max_records`` records (default
        ``max.poll.records``). Positions, commits, auto-commit, rebalance callbacks and
        rebalance-safe commits work exactly as for ``poll()``; the two may be mixed.

        Keys and values are the raw bytes: a consumer with key or value deserializers raises
        ``IllegalStateError``; without pyarrow, ``MissingDependencyError`` (nothing is
        consumed then)."""
        handout = self._core.handout
        limit = handout.columnar_limit(max_records, self.config.max_poll_records, "poll_batches")

        def collect(trace: str) -> dict[TopicPartition, Any]:
            batches = handout.poll_columns(limit, trace, include_headers)
            if batches:
                handout.handed_out_batches(batches)
            return batches

        return self._poll(timeout, collect, {})

    def _poll(self, timeout: float, collect: Callable[[str], _T], empty: _T) -> _T:
        """The loop of ``poll()`` and ``poll_batches()`` around the core's poll step
        (:class:`~kafka_actors.core.poll.PollStep`), blocking on the context's signal while
        it waits; ``collect(trace)`` hands out."""
        facade = self._facade
        facade.ensure_open()
        core = self._core
        ctx = self._ctx
        step = self._step
        core.require_subscription()
        trace = new_trace_id()
        deadline = time.monotonic() + max(0.0, float(timeout))
        with traced(trace), self._poll_lock, ctx.metrics.polling():
            step.start(trace)
            while True:
                facade.process_background()
                step.turn(trace)
                generation = step.generation
                records = collect(trace)
                if records:
                    step.delivered()
                    return records
                if time.monotonic() >= deadline:
                    return empty
                step.idle(trace)

                def ready(seen: int = generation) -> bool:
                    return step.ready(seen)

                ctx.signal.wait_until(ready, step.wait_until(deadline))
                facade.ensure_open()
                step.waited(trace)

    # -- waiting on the core's futures --------------------------------------------------------

    def _wait(
        self,
        future: concurrent.futures.Future[Any],
        deadline: float,
        what: str,
        *,
        wakeable: bool = True,
    ) -> Any:
        """Wait on this thread for a request of the core, up to ``deadline`` (wakeable;
        fatal errors and ``close()`` interrupt it); a request not answered is cancelled (no
        more retries)."""
        try:
            return self._facade.wait(future, deadline, what, wakeable=wakeable)
        except KafkaTimeoutError:
            if future.done():
                raise
            future.cancel()
            raise self._core.timeout_error(future, what) from None
        except BaseException:
            future.cancel()
            raise

    # -- commits -----------------------------------------------------------------------------

    def commit_sync(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        timeout: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Commit ``offsets`` (default: every consumed position), retrying retriable errors
        until ``timeout`` (default ``default.api.timeout.ms``). Returns what was committed."""
        facade = self._facade
        facade.ensure_open()
        self._core.require_group("commit_sync")
        wanted = commit_offsets(offsets)
        trace = new_trace_id()
        deadline = facade.deadline(timeout, self.config.default_api_timeout_ms)
        named = facade.commit_timeout("commit_sync", wanted, timeout)
        with traced(trace), named:
            future = self._core.commit(wanted, deadline, trace, "commit_sync")
            result: dict[TopicPartition, OffsetAndMetadata] = self._wait(
                future, deadline, "commit_sync"
            )
            return result

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        callback: Callable[[Mapping[TopicPartition, Any], BaseException | None], Any]
        | None = None,
    ) -> concurrent.futures.Future[dict[TopicPartition, OffsetAndMetadata]]:
        """Commit without waiting; ``callback(offsets, error)`` runs on the polling thread
        (next ``poll``/``commit_sync``/``close``). Also returns a Future of the result."""
        self._facade.ensure_open()
        self._core.require_group("commit_async")
        trace = new_trace_id()
        with traced(trace):
            return self._core.commit_async(commit_offsets(offsets), callback, trace)

    def committed(
        self, partitions: Iterable[TopicPartition] | TopicPartition, timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets of ``partitions`` (None where there is none)."""
        facade = self._facade
        facade.ensure_open()
        self._core.require_group("committed")
        wanted = frozenset([partitions] if isinstance(partitions, TopicPartition) else partitions)
        trace = new_trace_id()
        deadline = facade.deadline(timeout, self.config.default_api_timeout_ms)
        with traced(trace), facade.committed_timeout(wanted, timeout):
            future = self._core.committed(wanted, deadline, trace)
            result: dict[TopicPartition, OffsetAndMetadata | None] = self._wait(
                future, deadline, "committed"
            )
            return result

    # -- positions ---------------------------------------------------------------------------

    def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """The offset of the next record to fetch; waits (up to ``timeout``) until known."""
        facade = self._facade
        facade.ensure_open()
        core = self._core
        core.check_position_partition(partition)
        subs = self._ctx.subscriptions
        deadline = facade.deadline(timeout, self.config.default_api_timeout_ms)
        trace = new_trace_id()
        named = facade.position_timeout(partition, timeout)
        with traced(trace), named:
            while True:
                position = core.valid_position(partition)
                if position is not None:
                    return position
                core.update_positions(trace)
                if time.monotonic() >= deadline:
                    raise named.error()
                self._ctx.signal.wait_until(
                    lambda: subs.valid_position(partition) is not None
                    or facade.wakeup_pending()
                    or core.init_done(),
                    min(deadline, time.monotonic() + 0.5),
                )
                facade.check_wakeup()
                facade.raise_if_fatal()

    def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        """Fetch ``partition`` from ``offset`` on the next poll."""
        self._facade.ensure_open()
        self._core.seek(partition, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Move the positions of ``partitions`` (default: every assigned partition)
        to their log start offset, looked up at the next poll or position(). A partition
        not assigned raises IllegalStateError."""
        self._facade.ensure_open()
        self._core.seek_to(partitions, ResetKind.EARLIEST)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Move the positions of ``partitions`` (default: every assigned partition)
        to their end offset, looked up at the next poll or position(). A partition not
        assigned raises IllegalStateError."""
        self._facade.ensure_open()
        self._core.seek_to(partitions, ResetKind.LATEST)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop returning (and fetching) records of ``partitions`` until resume(); they
        stay assigned. A partition not assigned raises IllegalStateError."""
        self._facade.ensure_open()
        self._core.pause(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Return records of paused ``partitions`` again. A partition not assigned raises
        IllegalStateError."""
        self._facade.ensure_open()
        self._core.resume(partitions)

    def paused(self) -> set[TopicPartition]:
        """The partitions paused now."""
        return set(self._ctx.subscriptions.paused_partitions())

    # -- offsets lookups ---------------------------------------------------------------------

    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """The first offset of each partition (its log start offset), from the
        partitions' leaders; waits up to ``timeout`` seconds (default: default.api.timeout.ms)."""
        result: dict[TopicPartition, int] = self._list_offsets(
            LookupKind.BEGINNING, dict.fromkeys(partitions, -2), timeout
        )
        return result

    def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """The end offset of each partition (the offset the next record written will
        have), from the partitions' leaders; waits up to ``timeout`` seconds (default:
        default.api.timeout.ms)."""
        result: dict[TopicPartition, int] = self._list_offsets(
            LookupKind.END, dict.fromkeys(partitions, -1), timeout
        )
        return result

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Earliest offset whose timestamp is >= the given one (ms), per partition."""
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"The target time for partition {tp} is {ts}; it must be >= 0")
        result: dict[TopicPartition, OffsetAndTimestamp | None] = self._list_offsets(
            LookupKind.TIMES, dict(timestamps), timeout
        )
        return result

    def _list_offsets(
        self, kind: str, timestamps: dict[TopicPartition, int], timeout: float | None
    ) -> Any:
        facade = self._facade
        facade.ensure_open()
        trace = new_trace_id()
        deadline = facade.deadline(timeout, self.config.default_api_timeout_ms)
        if not timestamps:
            return {}
        with traced(trace), facade.list_offsets_timeout(kind, timestamps, timeout):
            future = self._core.list_offsets(kind, timestamps, deadline, trace)
            return self._wait(future, deadline, kind)

    # -- metadata ----------------------------------------------------------------------------

    def list_topics(self, timeout: float | None = None) -> dict[str, list[PartitionInfo]]:
        """Every topic the user may see (internal topics excluded) → its partitions."""
        result = self._topic_metadata(None, timeout)
        return {
            name: list(parts)
            for name, parts in result.items()
            if not (self.config.exclude_internal_topics and name.startswith("__"))
        }

    def partitions_for(self, topic: str, timeout: float | None = None) -> list[PartitionInfo]:
        """The partitions of ``topic`` from the cluster's metadata (an empty list
        for a topic the metadata does not have); waits up to ``timeout`` seconds."""
        result = self._topic_metadata(frozenset([topic]), timeout)
        return list(result.get(topic, ()))

    def _topic_metadata(
        self, topics: frozenset[str] | None, timeout: float | None
    ) -> Mapping[str, tuple[PartitionInfo, ...]]:
        facade = self._facade
        facade.ensure_open()
        trace = new_trace_id()
        deadline = facade.deadline(timeout, self.config.default_api_timeout_ms)
        with traced(trace), facade.metadata_timeout(topics, timeout):
            future = self._core.topic_metadata(topics, deadline, trace)
            result: Mapping[str, tuple[PartitionInfo, ...]] = self._wait(
                future, deadline, "list_topics" if topics is None else "partitions_for"
            )
            return result

    # -- group, metrics, wakeup, close -----------------------------------------------------------

    def client_instance_id(self, timeout: float | None = None) -> uuid.UUID:
        """The id the broker assigned this client for its telemetry (KIP-714; Java's
        ``clientInstanceId(Duration)``): known once the first GetTelemetrySubscriptions was
        answered; waits up to ``timeout`` seconds (default: default.api.timeout.ms) for it,
        then raises KafkaTimeoutError. IllegalStateError when ``enable.metrics.push`` is
        false or the broker has no client telemetry."""
        if timeout is not None and timeout < 0:
            raise InvalidArgumentError("The timeout cannot be negative.")
        facade = self._facade
        trace = new_trace_id()
        deadline = facade.deadline(timeout, self.config.default_api_timeout_ms)
        with traced(trace):
            future = self._core.client_instance_id(deadline, trace)
            result: uuid.UUID = self._wait(future, deadline, "clientInstanceId")
            return result

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group's identity as this member sees it now (group id, generation,
        member id, group instance id)."""
        return self._core.group_metadata()

    def health(self) -> ConsumerHealth:
        """The consumer's health for a liveness or readiness probe
        (:class:`~kafka_actors.health.ConsumerHealth`: ``.live``, ``.ready``, ``.reasons``,
        the group membership, coordinator, heartbeat and poll ages, partitions' positions and
        lag, broker connections). Reads local state only (no broker round trip, never waits
        on an actor): cheap enough for every second, callable from any thread, also while
        another thread polls and after ``close()`` (``docs/production.md``)."""
        return self._core.health()

    def current_lag(self, partition: TopicPartition) -> int | None:
        """Java's ``currentLag``: the partition's lag from the fetch state held locally
        (high watermark, or the last stable offset under ``read_committed``, of the last
        fetch minus the position); None when unknown (no fetch or no position yet). Sends
        no request. Raises IllegalStateError when ``partition`` is not assigned."""
        return self._core.current_lag(partition)

    def metrics(self) -> MetricsView:
        """Java's consumer metrics (``docs/metrics.md``): a mapping from
        :class:`~kafka_actors.metrics.MetricName` (group, name, tags) to a metric whose
        ``value()`` measures it now. A string key (``metrics()["records-lag"]``) reads the
        flat values this method returned before (:meth:`_flat_metrics`)."""
        return self._ctx.metrics.view(self._flat_metrics)

    def _flat_metrics(self) -> dict[str, Any]:
        """The flat values of before: fetch rate and latency, records consumed rate,
        ``records-lag`` per partition (``records-lag-max`` over them), poll rate, commits, the
        throttle time of the Fetch responses (``fetch-throttle-time-avg`` / ``-max``, ms)."""
        ctx = self._ctx
        values: dict[str, Any] = dict(ctx.metrics.snapshot())
        subs = ctx.subscriptions
        lag: dict[TopicPartition, int] = {}
        for tp in subs.assigned_partitions():
            value = subs.partition_lag(tp)
            if value is not None:
                lag[tp] = value
        values["records-lag"] = lag
        values["records-lag-max"] = max(lag.values()) if lag else 0.0
        fetch = self._core.fetch_metrics(timeout=5.0)
        if fetch is not None:
            values["fetch-throttle-time-avg"] = fetch.fetch_throttle_time_avg_ms or 0.0
            values["fetch-throttle-time-max"] = float(fetch.fetch_throttle_time_max_ms)
            values["buffered-bytes"] = fetch.buffered_bytes
            values["fetch-latency-avg"] = fetch.fetch_latency_avg_ms or 0.0
            values["fetch-latency-max"] = float(fetch.fetch_latency_max_ms)
            values["bytes-fetched-total"] = float(fetch.bytes_fetched)
        values["assigned-partitions"] = float(subs.num_assigned_partitions())
        values["record-decoder"] = _records.IMPLEMENTATION
        return values

    def wakeup(self) -> None:
        """Make the blocking call in progress (or the next one) raise WakeupError."""
        self._facade.wakeup()

    def enforce_rebalance(self, reason: str | None = None) -> None:
        """Java's ``enforceRebalance``: with ``group.protocol=classic`` the member rejoins the
        group on its next ``poll()`` (a new generation; the JoinGroup carries ``reason``, or
        "rebalance enforced by user"); without a ``group.id`` it raises
        :class:`~kafka_actors.errors.IllegalStateError`. The consumer protocol (KIP-848) has
        no client-triggered rebalance: there the call only logs a warning, as Java's."""
        self._facade.ensure_open()
        trace = new_trace_id()
        with traced(trace):
            self._core.enforce_rebalance(reason, trace)

    def defer_rebalance_ack(self) -> RebalanceReply:
        """Inside a rebalance listener callback: acknowledge it later with ``reply.ack()``
        (from any thread). The reconciliation waits for it up to max.poll.interval.ms."""
        return self._facade.defer_current()

    def close(
        self, timeout: float | None = None, membership: GroupMembershipOperation = "default"
    ) -> None:
        """Commit (with auto-commit), leave the group, stop the actors; never waits longer
        than ``timeout`` seconds (default 30), even without a coordinator.

        ``membership`` (Java's ``CloseOptions.GroupMembershipOperation``, KIP-1092) says what
        happens to the group membership; the rebalance listener releases the partitions in
        every case:

        * ``"default"``: a dynamic member leaves the group; a static member
          (``group.instance.id``) stays until its session times out, so that it can come back
          to its partitions without a rebalance (consumer protocol: the leave heartbeat with
          epoch -2; classic: no LeaveGroup);
        * ``"leave"``: leave the group, a static member too (consumer protocol: epoch -1;
          classic: LeaveGroup with the instance id);
        * ``"remain"``: stay in the group until the session times out (a dynamic member sends
          nothing; a static member of the consumer protocol sends epoch -2, as ``"default"``).

        Another value raises :class:`~kafka_actors.errors.InvalidArgumentError`.
        ``unsubscribe()`` always leaves as ``"default"``.
        """
        membership = check_membership_operation(membership)
        with self._close_lock:
            facade = self._facade
            if facade.closed:
                return
            seconds = DEFAULT_CLOSE_TIMEOUT_S if timeout is None else max(0.0, float(timeout))
            deadline = time.monotonic() + seconds
            trace = new_trace_id()
            core = self._core
            log = core.log
            with traced(trace):
                log.info("consumer_closing", timeout_s=seconds)
                fatal = self._tree.fatal_error
                subs = self._ctx.subscriptions
                if fatal is None and core.uses_group:
                    if self.config.enable_auto_commit and subs.assigned_partitions():
                        try:
                            with CallTimeout(
                                "close()",
                                timeout,
                                round(DEFAULT_CLOSE_TIMEOUT_S * 1000),
                                lambda: "the commit on close (OffsetCommit to "
                                f"{facade.describe_coordinator()})",
                                key="the default close timeout",
                            ):
                                future = core.commit_on_close(deadline, trace)
                                self._wait(future, deadline, "commit on close", wakeable=False)
                        except Exception as exc:
                            log.warning("commit_on_close_failed", error=str(exc))
                    if core.must_leave():
                        try:
                            with facade.leave_timeout(
                                timeout, round(DEFAULT_CLOSE_TIMEOUT_S * 1000)
                            ):
                                self._leave_group(deadline, trace, membership)
                        except Exception as exc:
                            log.warning("leave_on_close_failed", error=str(exc))
                    try:
                        facade.process_background()
                    except Exception:
                        pass
                if fatal is None:
                    telemetry = core.close_telemetry(trace)  # the terminating push (KIP-714)
                    if telemetry is not None:
                        try:
                            self._wait(telemetry, deadline, "telemetry push", wakeable=False)
                        except Exception as exc:
                            log.info("telemetry_close_failed", error=str(exc))
                core.begin_shutdown(trace)
                remaining = max(0.1, deadline - time.monotonic())
                result = core.stop_actors(remaining)
                log.info(
                    "consumer_closed",
                    completed=result.completed,
                    not_stopped=list(result.not_stopped),
                )

    def _leave_group(
        self, deadline: float, trace: str, membership: GroupMembershipOperation = "default"
    ) -> None:
        """Leave, running the release callbacks on this thread, until the leave completes."""
        facade = self._facade
        ctx = self._ctx
        future = self._core.leave_group(deadline, trace, membership)
        if future is None:
            return
        while not future.done():
            facade.process_background()
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError("Leaving the group timed out")  # named by close()
            ctx.signal.wait_until(
                lambda: future.done() or bool(ctx.background) or facade.closed, deadline
            )
            if facade.closed:
                return
        facade.process_background()
