"""``KafkaConsumer``: the public consumer API (Java's semantics, Python's manners).

Owns: the consumer's lifetime (building the supervision tree of actors, closing it), turning
each API call into application events (through :class:`~kafka_actors.actors.facade.Facade`),
deserialization of keys and values on the calling thread, and the last check that a record
handed out by ``poll()`` belongs to a partition the consumer owns and may fetch.

Supervision tree of one consumer::

    root (Supervisor, one_for_one)
    ├── facade                 FacadeActor: background events for the application threads
    └── network                NetworkActor: connections; supervises the request managers
        ├── metadata  ├── coordinator  ├── membership
        ├── commit    ├── offsets      └── fetch

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

May touch: everything under ``kafka_actors.actors``, the supervisors, the config.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import random as _random
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kafka_actors.actors.context import ConsumerContext
from kafka_actors.actors.events import (
    AssignmentChangedEvent,
    CommitEvent,
    CommitOnCloseEvent,
    FetchCommittedEvent,
    LeaveGroupEvent,
    ListOffsetsEvent,
    PollEvent,
    PositionsChangedEvent,
    ResetPositionsEvent,
    SubscriptionChangedEvent,
    TopicMetadataEvent,
)
from kafka_actors.actors.facade import (
    AsyncCommitDone,
    CallTimeout,
    ConsumerRebalanceListener,
    ConsumerRecords,
    Facade,
    FacadeActor,
    RebalanceReply,
)
from kafka_actors.actors.managers import (
    CloseFetchEvent,
    CollectEvent,
    CommitActor,
    CoordinatorActor,
    FetchActor,
    FetchMetricsEvent,
    MembershipActor,
    MetadataActor,
    OffsetsActor,
)
from kafka_actors.actors.network import NetworkActor
from kafka_actors.clock import SystemClock, default_scheduler
from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import (
    ConfigError,
    ConsumerClosedError,
    IllegalStateError,
    InvalidGroupIdError,
    KafkaError,
    KafkaTimeoutError,
    RecordDeserializationError,
    UnsupportedVersionError,
)
from kafka_actors.log import get_logger, new_trace_id, traced
from kafka_actors.metrics import MetricsView
from kafka_actors.protocol import records as _records
from kafka_actors.protocol.apis import ApiKey
from kafka_actors.protocol.membership import CONSUMER_PROTOCOL_NOT_SUPPORTED_MSG
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.metadata import PartitionInfo
from kafka_actors.protocol.offsets import LookupKind, OffsetAndTimestamp
from kafka_actors.protocol.records import ConsumerRecord
from kafka_actors.protocol.subscription import (
    FetchPosition,
    OffsetResetStrategy,
    ResetKind,
    SubscriptionState,
)
from kafka_actors.serialization import Deserializer, as_deserializer, deserialize_records
from kafka_actors.supervisors import (
    ChildRestartingError,
    ChildSpec,
    ChildTable,
    FaultInjector,
    SupervisorFatalError,
    SupervisorSpec,
    SupervisorTree,
    start_tree,
)
from kafka_actors.supervisors.supervisor import TreeStatus

__all__ = [
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecords",
    "KafkaConsumer",
    "RebalanceReply",
]

DEFAULT_CLOSE_TIMEOUT_S: Final = 30.0
#: How often a poll waiting for records tells the group actors it is still polling.
_POLL_EVENT_INTERVAL_S: Final = 0.1
_client_ids = itertools.count(1)
_log = get_logger("consumer")

@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """Java's ConsumerGroupMetadata: for transactional producers (sendOffsetsToTransaction).

    ``generation_id`` is the member epoch under the consumer protocol, the generation under
    the classic one (-1 when not in the group)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


class KafkaConsumer:
    """A Kafka consumer built from actors (see :mod:`kafka_actors.consumer`).

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
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        faults: FaultInjector | None = None,
        **kwargs: object,
    ) -> None:
        if isinstance(config, ConsumerConfig):
            cfg = config.with_overrides(_keys(kwargs)) if kwargs else config
        else:
            mapping: dict[str, object] = dict(config or {})
            mapping.update(_keys(kwargs))
            cfg = ConsumerConfig.from_dict(mapping)
        if not cfg.client_id:
            cfg = cfg.with_overrides(
                {"client.id": f"consumer-{cfg.group_id or ''}-{next(_client_ids)}"}
            )
        self.config = cfg
        self._key_deserializer = as_deserializer(key_deserializer or cfg.key_deserializer)
        self._value_deserializer = as_deserializer(value_deserializer or cfg.value_deserializer)
        #: Per partition, a record a deserializer failed on, where its position stopped.
        self._undeserializable: dict[TopicPartition, ConsumerRecord] = {}
        self._log = _log.bind(client_id=cfg.client_id, group_id=cfg.group_id)
        subscriptions = SubscriptionState(
            OffsetResetStrategy.of(cfg.auto_offset_reset, cfg.auto_offset_reset_duration)
        )
        network_table = ChildTable("network", TreeStatus())
        rng = _random.Random()
        self._ctx = ctx = ConsumerContext(
            config=cfg,
            clock=SystemClock(),
            scheduler=default_scheduler(),
            subscriptions=subscriptions,
            random=rng.random,
            network_table=network_table,
            group_protocol=cfg.group_protocol,
        )
        self._uses_group = cfg.group_id is not None
        if cfg.rebalance_safe_commits:
            from kafka_actors.actors.safe_commits import RebalanceSafeCommits

            ctx.safe_commits = RebalanceSafeCommits(
                ctx.clock,
                ctx.scheduler,
                cfg.rebalance_safe_commits_max_duration,
                client_id=cfg.client_id,
                group_id=cfg.group_id,
            )
        managers = [
            ChildSpec("metadata", lambda c: MetadataActor.start(ctx, context=c)),
        ]
        if self._uses_group:
            managers += [
                ChildSpec("coordinator", lambda c: CoordinatorActor.start(ctx, context=c)),
                ChildSpec("membership", lambda c: MembershipActor.start(ctx, context=c)),
                ChildSpec("commit", lambda c: CommitActor.start(ctx, context=c)),
            ]
        managers += [
            ChildSpec("offsets", lambda c: OffsetsActor.start(ctx, context=c)),
            ChildSpec("fetch", lambda c: FetchActor.start(ctx, context=c)),
        ]
        manager_spec = SupervisorSpec(max_restarts=5, period=30.0)

        def start_network(c: Any) -> Any:
            return NetworkActor.start(
                cfg,
                children=managers,
                supervisor_spec=manager_spec,
                context=c,
                table=network_table,
                faults=faults,
                metrics=ctx.metrics,
            )

        self._tree: SupervisorTree = start_tree(
            SupervisorSpec(max_restarts=1, period=60.0),
            [
                ChildSpec("facade", lambda c: FacadeActor.start(ctx, context=c)),
                ChildSpec("network", start_network, shutdown_timeout=10.0),
            ],
            name=f"consumer[{cfg.client_id}]",
            faults=faults,
            on_fatal=lambda error: ctx.fail_outstanding(error),
        )
        ctx.root_table = self._tree.children
        self._facade = Facade(ctx, lambda: self._tree.fatal_error)
        self._poll_lock = threading.RLock()
        self._init_task: concurrent.futures.Future[Any] | None = None
        self._close_lock = threading.Lock()
        self._log.info(
            "consumer_created",
            group_protocol=cfg.group_protocol,
            record_decoder=_records.IMPLEMENTATION,
            record_decoder_reason=_records.NATIVE_UNAVAILABLE_REASON or None,
        )

    # -- context manager -----------------------------------------------------------------------

    def __enter__(self) -> KafkaConsumer:
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
        facade = self._facade
        facade.ensure_open()
        trace = new_trace_id()
        with traced(trace):
            self._require_group("subscribe")
            self._check_group_protocol(subscribing=True)
            regex: str | None = None
            if pattern is not None:
                regex = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
            elif isinstance(topics, re.Pattern):
                regex = topics.pattern
            elif isinstance(topics, str):
                if topics.startswith("^"):
                    regex = topics
                    names: frozenset[str] = frozenset()
                else:
                    names = frozenset([topics])
            if regex is None and not isinstance(topics, str):
                names = frozenset(topics)  # type: ignore[arg-type]
            if regex is None and not names:
                self.unsubscribe()
                return
            subs = self._ctx.subscriptions
            if regex is not None:
                try:
                    re.compile(regex)
                except re.error as exc:
                    raise ValueError(f"Invalid subscription regex {regex!r}: {exc}") from exc
                subs.subscribe_pattern(regex)
                names = frozenset()
            else:
                for name in names:
                    if not isinstance(name, str) or not name.strip():
                        raise ValueError("Topic names in a subscription must be non-empty")
                subs.subscribe(names)
            facade.listener = listener
            event = SubscriptionChangedEvent(names, regex, trace)
            facade.tell("metadata", event)
            facade.tell("membership", event)
            self._log.info("subscribed", topics=sorted(names), pattern=regex)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Manual assignment (no group membership); an empty list is ``unsubscribe()``."""
        facade = self._facade
        facade.ensure_open()
        wanted = list(partitions)
        for tp in wanted:
            if not isinstance(tp, TopicPartition) or not tp.topic.strip():
                raise ValueError(f"Not a valid TopicPartition: {tp!r}")
        if not wanted:
            self.unsubscribe()
            return
        trace = new_trace_id()
        with traced(trace):
            subs = self._ctx.subscriptions
            if self._uses_group and self.config.enable_auto_commit and subs.assigned_partitions():
                # As Java: commit the consumed positions of the old assignment (async).
                self._commit_async_internal(None, None, trace)
            subs.assign_from_user(wanted)
            event = AssignmentChangedEvent(frozenset(wanted), trace)
            facade.tell("metadata", event)
            facade.tell("fetch", PositionsChangedEvent(trace))
            facade.tell("offsets", PositionsChangedEvent(trace))
            self._log.info("assigned", partitions=sorted(str(tp) for tp in wanted))

    def unsubscribe(self) -> None:
        """Leave the group (running onPartitionsRevoked on this thread) and drop the
        subscription or assignment."""
        facade = self._facade
        facade.ensure_open()
        trace = new_trace_id()
        with traced(trace):
            subs = self._ctx.subscriptions
            if self._uses_group and subs.has_auto_assigned_partitions():
                deadline = facade.deadline(None, self.config.default_api_timeout_ms)
                self._leave_group(deadline, trace)
            subs.unsubscribe()
            facade.tell("metadata", SubscriptionChangedEvent(frozenset(), None, trace))
            facade.tell("fetch", PositionsChangedEvent(trace))
            self._log.info("unsubscribed")

    def subscription(self) -> set[str]:
        return set(self._ctx.subscriptions.subscription)

    def assignment(self) -> set[TopicPartition]:
        return set(self._ctx.subscriptions.assigned_partitions())

    # -- poll --------------------------------------------------------------------------------

    def poll(self, timeout: float = 0.0) -> ConsumerRecords:
        """Records fetched since the last poll (up to ``max.poll.records``), waiting up to
        ``timeout`` seconds for some. Runs pending rebalance callbacks on this thread, keeps
        the member in the group (poll timer), auto-commits when due, and raises the errors the
        background reported (typed)."""
        facade = self._facade
        facade.ensure_open()
        ctx = self._ctx
        subs = ctx.subscriptions
        if subs.has_no_subscription_or_user_assignment():
            raise IllegalStateError(
                "Consumer is not subscribed to any topics or assigned any partitions"
            )
        trace = new_trace_id()
        deadline = time.monotonic() + max(0.0, float(timeout))
        with traced(trace), self._poll_lock, ctx.metrics.polling():
            if self._uses_group:
                event = PollEvent(trace)
                facade.tell("membership", event)
                facade.tell("commit", event)
            while True:
                facade.process_background()
                facade.check_wakeup()
                self._check_group_protocol()
                self._update_positions(trace)
                generation = ctx.fetch_generation
                records = self._collect(trace)
                if records:
                    if ctx.safe_commits is not None:
                        ctx.safe_commits.handed_out_batch(
                            {tp: rs[-1].offset for tp, rs in records._by_partition.items()}
                        )
                    return records
                if time.monotonic() >= deadline:
                    return ConsumerRecords({})
                facade.tell("fetch", PositionsChangedEvent(trace))

                def ready(seen: int = generation) -> bool:
                    return (
                        bool(ctx.background)
                        or ctx.fetch_generation != seen
                        or facade._wakeup.is_set()
                        or self._tree.fatal_error is not None
                        or facade.closed
                        or (self._init_task is not None and self._init_task.done())
                    )

                # A waiting poll tells the group actors again every _POLL_EVENT_INTERVAL_S (Java
                # sends a PollEvent per loop of poll()): with auto-commit, a new assignment is
                # reconciled on a poll event only, which must not wait for the poll's timeout.
                ctx.signal.wait_until(
                    ready,
                    min(deadline, time.monotonic() + _POLL_EVENT_INTERVAL_S)
                    if self._uses_group
                    else deadline,
                )
                facade.ensure_open()
                if self._uses_group:
                    event = PollEvent(trace, waiting=True)
                    facade.tell("membership", event)
                    facade.tell("commit", event)

    def _collect(self, trace: str) -> ConsumerRecords:
        ctx = self._ctx
        if self._undeserializable:
            self._raise_undeserializable()
        try:
            collector = ctx.fetch_collector  # on this thread, no actor round trip
            result = collector(self.config.max_poll_records) if collector is not None else None
            if result is None:
                result = ctx.ask(
                    "fetch", CollectEvent(self.config.max_poll_records, trace), timeout=30.0
                )
        except (ChildRestartingError, KeyError):
            return ConsumerRecords({})
        except SupervisorFatalError:
            self._facade.raise_if_fatal()
            raise
        if result is None:
            return ConsumerRecords({})
        if result.error is not None and not result.records:
            raise result.error
        return self._hand_out(result.records, result.positions)

    def _raise_undeserializable(self) -> None:
        """Raise again for a record a deserializer failed on, while its partition's position
        is still at it and the deserializer still fails (tried again, as Java does: a
        deserializer may fail for a while, a schema registry being down, say). Forget it when
        the position moved (a seek past it, a reset) or the partition is no longer owned."""
        pending = self._undeserializable
        subs = self._ctx.subscriptions
        for tp, record in list(pending.items()):
            state = subs.partition_state(tp)
            if (
                state is None
                or state.position is None
                or not state.has_valid_position
                or state.position.offset != record.offset
            ):
                del pending[tp]
                continue
            if not state.is_fetchable:
                continue  # paused or being revoked: its records are not returned either
            _, error = deserialize_records(
                (record,), self._key_deserializer, self._value_deserializer
            )
            if error is not None:
                raise error
            del pending[tp]  # it deserializes now: the collect returns it

    def _hand_out(
        self,
        records: Mapping[TopicPartition, tuple[ConsumerRecord, ...]],
        positions: Mapping[TopicPartition, FetchPosition],
    ) -> ConsumerRecords:
        """Deserialize, and hand out only records of partitions still owned and fetchable;
        the position of a partition paused or being revoked since the fetch actor handed its
        records out is moved back (compare-and-set), so nothing is skipped. The consumed
        position of a partition moves past its records only here, as they are returned: an
        auto-commit or a commit before a revocation never covers records not returned.

        A record a deserializer fails on (Java's RecordDeserializationException, KIP-334): the
        records before it are returned, and its partition's position (and consumed position)
        moves back to it; the error is raised now when nothing is returned, else by the next
        poll, and by every poll after while the position stays there (see
        ``_raise_undeserializable``)."""
        kd, vd = self._key_deserializer, self._value_deserializer
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        failed: RecordDeserializationError | None = None
        for tp, recs in records.items():
            if not recs:
                continue
            if kd is None and vd is None:
                if self._keep(tp, recs, positions, consume=True):
                    out[tp] = list(recs)
                continue
            if not self._keep(tp, recs, positions, consume=False):
                continue
            try:
                batch, error = deserialize_records(recs, kd, vd)
            except BaseException:  # not a deserializer error (KeyboardInterrupt ...)
                self._stop_at(tp, 0, recs, positions)  # fetched again, deserialized again
                raise
            if error is not None:
                if self._stop_at(tp, len(batch), recs, positions):
                    failed = failed or error
                if batch:
                    out[tp] = batch
                continue
            if self._keep(tp, recs, positions, consume=True):
                out[tp] = batch
        if failed is not None and not out:
            raise failed
        return ConsumerRecords(out)

    def _stop_at(
        self,
        tp: TopicPartition,
        index: int,
        recs: tuple[ConsumerRecord, ...],
        positions: Mapping[TopicPartition, FetchPosition],
    ) -> bool:
        """Move the position (and the consumed position) of ``tp`` back to ``recs[index]``, a
        record a deserializer failed on, when still where the fetch actor moved it for
        ``recs`` (compare-and-set: a seek since wins); remember that record, so that the next
        polls raise again for it. True when done."""
        subs = self._ctx.subscriptions
        new = positions.get(tp)
        bad = recs[index]
        with subs._lock:
            state = subs.partition_state(tp)
            if state is None or new is None:
                return False
            if index > 0:
                epoch = recs[index - 1].leader_epoch
            elif state.consumed is not None and state.consumed.offset == bad.offset:
                epoch = state.consumed.offset_epoch
            else:
                epoch = None
            if not subs.seek_back_if_at(tp, new.offset, bad.offset, epoch):
                return False
            self._undeserializable[tp] = bad
        self._facade.tell("fetch", PositionsChangedEvent(new_trace_id()))
        return True

    def _keep(
        self,
        tp: TopicPartition,
        recs: tuple[ConsumerRecord, ...],
        positions: Mapping[TopicPartition, FetchPosition],
        *,
        consume: bool,
    ) -> bool:
        """True when ``tp`` is still owned and fetchable (then, with ``consume``, its consumed
        position moves to where the fetch actor moved its position); else its position moves
        back to the first of ``recs`` when still where the fetch actor left it."""
        subs = self._ctx.subscriptions
        new = positions.get(tp)
        with subs._lock:
            state = subs.partition_state(tp)
            if state is None:
                return False  # not owned any more: nothing to rewind
            if not state.is_fetchable:
                if new is not None:
                    subs.seek_back_if_at(tp, new.offset, recs[0].offset)
                return False
            if consume and new is not None and state.position is not None:
                if state.position.offset == new.offset:  # no seek since the collect
                    subs.advance_consumed(tp, new)
            return True

    def _update_positions(self, trace: str) -> None:
        """Give every assigned partition a position: committed offsets (group) first, then
        ``auto.offset.reset`` through the offsets actor. Never blocks."""
        ctx = self._ctx
        subs = ctx.subscriptions
        task = self._init_task
        if task is not None and task.done():
            self._init_task = None
            error = task.exception()
            if error is not None:
                if isinstance(error, KafkaError) and (
                    error.retriable or isinstance(error, KafkaTimeoutError)
                ):
                    self._log.info("initialize_positions_retry", error=str(error))
                elif isinstance(error, ChildRestartingError):
                    pass
                else:
                    raise error
        initializing = subs.initializing_partitions()
        if initializing and self._init_task is None:
            if self._uses_group:
                future: concurrent.futures.Future[Any] = concurrent.futures.Future()
                ctx.track(future)
                deadline_ms = ctx.now_ms() + self.config.default_api_timeout_ms
                if not ctx.tell("commit", ResetPositionsEvent(deadline_ms, future, trace)):
                    future.set_exception(ChildRestartingError(child="commit"))
                self._init_task = future
            else:
                without = subs.reset_initializing_positions()
                if without:
                    from kafka_actors.errors import NoOffsetForPartitionError

                    raise NoOffsetForPartitionError(
                        partitions=[(tp.topic, tp.partition) for tp in without]
                    )
        if subs.partitions_needing_reset(ctx.now_ms()):
            ctx.tell("offsets", PositionsChangedEvent(trace))

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
        self._require_group("commit_sync")
        wanted = _offsets(offsets)
        trace = new_trace_id()
        deadline = facade.deadline(timeout, self.config.default_api_timeout_ms)
        named = facade.commit_timeout("commit_sync", wanted, timeout)
        with traced(trace), named:
            result: dict[TopicPartition, OffsetAndMetadata] = facade.call(
                "commit",
                lambda f, d: CommitEvent(wanted, True, d, f, trace),
                deadline,
                "commit_sync",
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
        facade = self._facade
        facade.ensure_open()
        self._require_group("commit_async")
        trace = new_trace_id()
        with traced(trace):
            return self._commit_async_internal(_offsets(offsets), callback, trace)

    def _commit_async_internal(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None,
        callback: Callable[[Mapping[TopicPartition, Any], BaseException | None], Any] | None,
        trace: str,
    ) -> concurrent.futures.Future[Any]:
        ctx = self._ctx
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        ctx.track(future)
        if callback is not None:

            def done(f: concurrent.futures.Future[Any]) -> None:
                ctx.background.append(AsyncCommitDone(callback, f, offsets))
                ctx.signal.notify()

            future.add_done_callback(done)
        if not ctx.tell("commit", CommitEvent(offsets, False, 0, future, trace)):
            future.set_exception(ChildRestartingError(child="commit"))
        return future

    def committed(
        self, partitions: Iterable[TopicPartition] | TopicPartition, timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets of ``partitions`` (None where there is none)."""
        facade = self._facade
        facade.ensure_open()
        self._require_group("committed")
        wanted = frozenset([partitions] if isinstance(partitions, TopicPartition) else partitions)
        trace = new_trace_id()
        deadline = facade.deadline(timeout, self.config.default_api_timeout_ms)
        with traced(trace), facade.committed_timeout(wanted, timeout):
            result: dict[TopicPartition, OffsetAndMetadata | None] = facade.call(
                "commit",
                lambda f, d: FetchCommittedEvent(wanted, d, f, trace),
                deadline,
                "committed",
            )
            return result

    # -- positions ---------------------------------------------------------------------------

    def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """The offset of the next record to fetch; waits (up to ``timeout``) until known."""
        facade = self._facade
        facade.ensure_open()
        subs = self._ctx.subscriptions
        if not subs.is_assigned(partition):
            raise IllegalStateError(
                f"You can only check the position for partitions assigned to this consumer: "
                f"{partition}"
            )
        deadline = facade.deadline(timeout, self.config.default_api_timeout_ms)
        trace = new_trace_id()
        named = facade.position_timeout(partition, timeout)
        with traced(trace), named:
            while True:
                position = subs.valid_position(partition)
                if position is not None:
                    return position.offset
                if not subs.is_assigned(partition):
                    raise IllegalStateError(f"Partition {partition} is no longer assigned")
                self._update_positions(trace)
                if time.monotonic() >= deadline:
                    raise named.error()
                self._ctx.signal.wait_until(
                    lambda: subs.valid_position(partition) is not None
                    or facade._wakeup.is_set()
                    or (self._init_task is not None and self._init_task.done()),
                    min(deadline, time.monotonic() + 0.5),
                )
                facade.check_wakeup()
                facade.raise_if_fatal()

    def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        """Fetch ``partition`` from ``offset`` on the next poll."""
        self._facade.ensure_open()
        value = offset.offset if isinstance(offset, OffsetAndMetadata) else int(offset)
        if value < 0:
            raise ValueError(f"seek offset must not be negative: {value}")
        epoch = offset.leader_epoch if isinstance(offset, OffsetAndMetadata) else None
        subs = self._ctx.subscriptions
        if not subs.is_assigned(partition):
            raise IllegalStateError(f"No current assignment for partition {partition}")
        if epoch is None:
            subs.seek(partition, FetchPosition(value))
        else:
            # As Java: a position with a leader epoch is validated against the leader's log
            # (KIP-320) before it is fetched from.
            subs.seek_unvalidated(partition, FetchPosition(value, epoch))
            self._facade.tell("offsets", PositionsChangedEvent(new_trace_id()))
        self._facade.tell("fetch", PositionsChangedEvent(new_trace_id()))

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(partitions, ResetKind.EARLIEST)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(partitions, ResetKind.LATEST)

    def _seek_to(self, partitions: Iterable[TopicPartition] | None, kind: ResetKind) -> None:
        self._facade.ensure_open()
        subs = self._ctx.subscriptions
        wanted = list(partitions) if partitions is not None else list(subs.assigned_partitions())
        for tp in wanted:
            if not subs.is_assigned(tp):
                raise IllegalStateError(f"No current assignment for partition {tp}")
        subs.request_offset_reset(wanted, OffsetResetStrategy(kind))
        self._facade.tell("offsets", PositionsChangedEvent(new_trace_id()))

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._facade.ensure_open()
        wanted = list(partitions)
        subs = self._ctx.subscriptions
        for tp in wanted:
            if not subs.is_assigned(tp):
                raise IllegalStateError(f"No current assignment for partition {tp}")
        subs.pause(wanted)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._facade.ensure_open()
        wanted = list(partitions)
        subs = self._ctx.subscriptions
        for tp in wanted:
            if not subs.is_assigned(tp):
                raise IllegalStateError(f"No current assignment for partition {tp}")
        subs.resume(wanted)
        self._facade.tell("fetch", PositionsChangedEvent(new_trace_id()))

    def paused(self) -> set[TopicPartition]:
        return set(self._ctx.subscriptions.paused_partitions())

    # -- offsets lookups ---------------------------------------------------------------------

    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        result: dict[TopicPartition, int] = self._list_offsets(
            LookupKind.BEGINNING, dict.fromkeys(partitions, -2), timeout
        )
        return result

    def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
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
            return facade.call(
                "offsets",
                lambda f, d: ListOffsetsEvent(kind, timestamps, d, f, trace),
                deadline,
                kind,
            )

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
            result: Mapping[str, tuple[PartitionInfo, ...]] = facade.call(
                "metadata",
                lambda f, d: TopicMetadataEvent(topics, d, f, trace),
                deadline,
                "list_topics" if topics is None else "partitions_for",
            )
            return result

    # -- group, metrics, wakeup, close -----------------------------------------------------------

    def group_metadata(self) -> ConsumerGroupMetadata:
        self._facade.ensure_open()
        self._require_group("group_metadata")
        ctx = self._ctx
        assert self.config.group_id is not None
        epoch = ctx.member_epoch
        return ConsumerGroupMetadata(
            self.config.group_id,
            epoch if epoch is not None else -1,
            ctx.member_id or "",
            self.config.group_instance_id,
        )

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
        try:
            fetch = ctx.ask("fetch", FetchMetricsEvent(), timeout=5.0)
        except Exception:
            fetch = None
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

    def defer_rebalance_ack(self) -> RebalanceReply:
        """Inside a rebalance listener callback: acknowledge it later with ``reply.ack()``
        (from any thread). The reconciliation waits for it up to max.poll.interval.ms."""
        return self._facade.defer_current()

    def close(self, timeout: float | None = None) -> None:
        """Commit (with auto-commit), leave the group, stop the actors; never waits longer
        than ``timeout`` seconds (default 30), even without a coordinator."""
        with self._close_lock:
            facade = self._facade
            if facade.closed:
                return
            seconds = DEFAULT_CLOSE_TIMEOUT_S if timeout is None else max(0.0, float(timeout))
            deadline = time.monotonic() + seconds
            trace = new_trace_id()
            ctx = self._ctx
            with traced(trace):
                self._log.info("consumer_closing", timeout_s=seconds)
                fatal = self._tree.fatal_error
                subs = ctx.subscriptions
                if fatal is None and self._uses_group:
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
                                facade.call(
                                    "commit",
                                    lambda f, d: CommitOnCloseEvent(d, f, trace),
                                    deadline,
                                    "commit on close",
                                    wakeable=False,
                                )
                        except Exception as exc:
                            self._log.warning("commit_on_close_failed", error=str(exc))
                    if subs.has_auto_assigned_partitions():
                        try:
                            with facade.leave_timeout(
                                timeout, round(DEFAULT_CLOSE_TIMEOUT_S * 1000)
                            ):
                                self._leave_group(deadline, trace)
                        except Exception as exc:
                            self._log.warning("leave_on_close_failed", error=str(exc))
                    try:
                        facade.process_background()
                    except Exception:
                        pass
                if fatal is None:
                    ctx.tell("fetch", CloseFetchEvent(trace))
                facade.mark_closed()
                remaining = max(0.1, deadline - time.monotonic())
                result = self._tree.shutdown(timeout=remaining)
                ctx.fail_outstanding(ConsumerClosedError("The consumer is closed"))
                self._log.info(
                    "consumer_closed",
                    completed=result.completed,
                    not_stopped=list(result.not_stopped),
                )

    def _leave_group(self, deadline: float, trace: str) -> None:
        """Leave, running the release callbacks on this thread, until the leave completes."""
        facade = self._facade
        ctx = self._ctx
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        ctx.track(future)
        if not ctx.tell(
            "membership", LeaveGroupEvent(facade.deadline_ms(deadline), future, True, trace)
        ):
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

    # -- helpers -----------------------------------------------------------------------------

    def _require_group(self, what: str) -> None:
        if not self._uses_group:
            raise InvalidGroupIdError(
                f"To use the group management or offset commit APIs ({what}), you must "
                "provide a valid group.id in the consumer configuration."
            )

    def _check_group_protocol(self, *, subscribing: bool = False) -> None:
        versions = self._ctx.versions
        if not (
            self._ctx.group_protocol == "consumer"
            and self._uses_group
            and (subscribing or self._ctx.subscriptions.has_auto_assigned_partitions())
        ):
            return
        refused = self._facade.group_protocol_error  # a heartbeat answered UNSUPPORTED_VERSION
        if refused is not None:
            raise refused
        if versions is not None and not versions.supports(ApiKey.CONSUMER_GROUP_HEARTBEAT):
            raise UnsupportedVersionError(CONSUMER_PROTOCOL_NOT_SUPPORTED_MSG)


def _keys(kwargs: Mapping[str, object]) -> dict[str, object]:
    """Keyword arguments (``bootstrap_servers``) to Kafka keys (``bootstrap.servers``)."""
    from kafka_actors.config import config_keys

    known = set(config_keys())
    out: dict[str, object] = {}
    for name, value in kwargs.items():
        key = name.replace("_", ".")
        if key not in known:
            raise ConfigError(f"Unknown configuration {name!r}", key=name)
        out[key] = value
    return out


def _offsets(
    offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None,
) -> dict[TopicPartition, OffsetAndMetadata] | None:
    if offsets is None:
        return None
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, value in offsets.items():
        om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))
        if om.offset < 0:
            raise ValueError(f"Invalid negative offset {om.offset} for partition {tp}")
        out[tp] = om
    return out
