"""The consumer core: one consumer's actors and state, under every front end.

Owns: the consumer's lifetime (building the supervision tree of actors, stopping it), its
:class:`~kafka_actors.actors.context.ConsumerContext` and
:class:`~kafka_actors.actors.facade.Facade`, rebalance-safe commits, the subscription state
as the application changes it (subscribe, assign, seek, pause...), giving assigned partitions
a position, and every request to the actors (commits, committed offsets, offset lookups,
metadata, leaving the group). A request returns a ``concurrent.futures.Future`` at once and
never blocks: :class:`~kafka_actors.consumer.KafkaConsumer` waits on it,
:class:`~kafka_actors.aio.AsyncKafkaConsumer` awaits it, the Thespian bridge chains on it.
The hand-out bookkeeping lives beside it in :mod:`kafka_actors.core.handout`.

Supervision tree of one consumer::

    root (Supervisor, one_for_one)
    ├── facade                 FacadeActor: background events for the application threads
    └── network                NetworkActor: connections; supervises the request managers
        ├── metadata  ├── coordinator  ├── membership
        ├── commit    ├── offsets      └── fetch

Three calls block, each bounded and for a reason given in its docstring:
:meth:`ConsumerCore.stop_actors` (joins the actors' threads), and two asks
(:meth:`HandOut.poll_records`, :meth:`ConsumerCore.fetch_metrics`).

Thread safety: every method may be called from any thread.

May touch: everything under ``kafka_actors.actors``, the supervisors, the config.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import random as _random
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from kafka_actors.actors.base import versions_learned
from kafka_actors.actors.context import ConsumerContext, complete, fail
from kafka_actors.actors.events import (
    AssignmentChangedEvent,
    ClientInstanceIdEvent,
    CommitEvent,
    CommitOnCloseEvent,
    EnforceRebalanceEvent,
    FetchCommittedEvent,
    LeaveGroupEvent,
    ListOffsetsEvent,
    PositionsChangedEvent,
    ResetPositionsEvent,
    SubscriptionChangedEvent,
    TelemetryCloseEvent,
    TopicMetadataEvent,
)
from kafka_actors.actors.facade import (
    AsyncCommitDone,
    Facade,
    FacadeActor,
)
from kafka_actors.actors.managers import (
    CloseFetchEvent,
    CommitActor,
    CoordinatorActor,
    FetchActor,
    FetchMetricsEvent,
    MembershipActor,
    MetadataActor,
    OffsetsActor,
)
from kafka_actors.actors.managers.telemetry import TelemetryActor
from kafka_actors.actors.network import NetworkActor
from kafka_actors.actors.network.bootstrap import check_bootstrap_resolvable
from kafka_actors.actors.network.transport import system_resolver
from kafka_actors.clock import SystemClock, default_scheduler
from kafka_actors.config import SHARE_ONLY_KEYS, ConsumerConfig
from kafka_actors.core.handout import HandOut
from kafka_actors.errors import (
    ConfigError,
    IllegalStateError,
    InvalidGroupIdError,
    KafkaError,
    KafkaTimeoutError,
    UnsupportedVersionError,
)
from kafka_actors.log import get_logger, new_trace_id
from kafka_actors.protocol.group.consumer.membership import CONSUMER_PROTOCOL_NOT_SUPPORTED_MSG
from kafka_actors.protocol.group.membership_operation import GroupMembershipOperation
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.records import decode as _records
from kafka_actors.protocol.request_state import RequestState, retry_backoff
from kafka_actors.protocol.subscription import (
    NO_LEADER,
    FetchPosition,
    LeaderAndEpoch,
    OffsetResetStrategy,
    ResetKind,
    SubscriptionState,
)
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.serialization import Deserializer, as_deserializer
from kafka_actors.structs import ConsumerGroupMetadata, ConsumerRebalanceListener
from kafka_actors.supervisors import (
    ChildRestartingError,
    ChildSpec,
    ChildTable,
    FaultInjector,
    SupervisorSpec,
    SupervisorTree,
    start_tree,
)
from kafka_actors.supervisors.supervisor import ShutdownResult, TreeStatus

if TYPE_CHECKING:
    # (health() and current_lag() import kafka_actors.core.health when first called)
    from kafka_actors.health import ConsumerHealth

__all__ = [
    "DEFAULT_CLOSE_TIMEOUT_S",
    "ConsumerCore",
    "build_config",
    "commit_offsets",
]

DEFAULT_CLOSE_TIMEOUT_S: Final = 30.0
#: The JoinGroup reason of enforce_rebalance() without one (Java's).
ENFORCE_REBALANCE_DEFAULT_REASON: Final = "rebalance enforced by user"

_client_ids = itertools.count(1)
_log = get_logger("consumer")


def build_config(
    config: Mapping[str, object] | ConsumerConfig | None, kwargs: Mapping[str, object]
) -> ConsumerConfig:
    """A front end's configuration: Kafka's own keys in a dict (or a ConsumerConfig), and the
    same names with underscores as keywords (``bootstrap_servers``)."""
    if isinstance(config, ConsumerConfig):
        built = config.with_overrides(_keys(kwargs)) if kwargs else config
    else:
        mapping: dict[str, object] = dict(config or {})
        mapping.update(_keys(kwargs))
        built = ConsumerConfig.from_dict(mapping)
    share_keys = sorted(SHARE_ONLY_KEYS & built.explicit_keys)
    if share_keys:
        raise ConfigError(
            f"{share_keys[0]} is a share consumer's configuration (KafkaShareConsumer); a "
            "consumer does not use it",
            key=share_keys[0],
        )
    if built.sasl_enabled and built.sasl_mechanism == "GSSAPI":
        # The optional binding is checked now, not when the network actor starts.
        from kafka_actors.kerberos import require_gssapi

        require_gssapi()
    return built


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


def commit_offsets(
    offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None,
) -> dict[TopicPartition, OffsetAndMetadata] | None:
    """Offsets an application gives a commit (ints or OffsetAndMetadata), checked."""
    if offsets is None:
        return None
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, value in offsets.items():
        om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))
        if om.offset < 0:
            raise ValueError(f"Invalid negative offset {om.offset} for partition {tp}")
        out[tp] = om
    return out


class _Request(concurrent.futures.Future[Any]):
    """A request's future; ``restarting`` names the target while a retry waits for it."""

    restarting: str | None = None


class ActorCore:
    """What every core shares: one client's context, its supervision tree (the facade and the
    NetworkActor supervising the request managers ``managers(ctx)`` builds), the facade, and
    requests to the actors as futures (:meth:`request`). :class:`ConsumerCore` and the share
    consumer's core (:mod:`kafka_actors.core.share_core`) derive from it."""

    def __init__(
        self,
        cfg: ConsumerConfig,
        managers: Callable[[ConsumerContext], list[ChildSpec]],
        *,
        faults: FaultInjector | None = None,
        kind: str = "consumer",
    ) -> None:
        if not cfg.client_id:
            cfg = cfg.with_overrides(
                {"client.id": f"{kind}-{cfg.group_id or ''}-{next(_client_ids)}"}
            )
        if cfg.bootstrap_resolve_timeout_ms == 0:
            # KIP-909's default, as Java: the names are resolved now, a ConfigError if none is.
            check_bootstrap_resolvable(cfg.bootstrap_servers, system_resolver)
        self.config = cfg
        self.log = _log.bind(client_id=cfg.client_id, group_id=cfg.group_id)
        subscriptions = SubscriptionState(
            OffsetResetStrategy.of(cfg.auto_offset_reset, cfg.auto_offset_reset_duration)
        )
        network_table = ChildTable("network", TreeStatus())
        rng = _random.Random()
        self.ctx = ctx = ConsumerContext(
            config=cfg,
            clock=SystemClock(),
            scheduler=default_scheduler(),
            subscriptions=subscriptions,
            random=rng.random,
            network_table=network_table,
            group_protocol=cfg.group_protocol,
        )
        children = managers(ctx)
        if cfg.enable_metrics_push:
            # KIP-714 client telemetry: every kind of consumer runs the same actor.
            children.append(ChildSpec("telemetry", lambda c: TelemetryActor.start(ctx, context=c)))
        manager_spec = SupervisorSpec(max_restarts=5, period=30.0)
        # what the front end tells them before they run (subscribe, the first poll, a lookup
        # right after construction) waits for them instead of being dropped and retried
        network_table.expect([spec.name for spec in children])

        def start_network(c: Any) -> Any:
            return NetworkActor.start(
                cfg,
                children=children,
                supervisor_spec=manager_spec,
                context=c,
                table=network_table,
                faults=faults,
                metrics=ctx.metrics,
                connection_states=ctx.connection_states,
                on_versions=functools.partial(versions_learned, ctx),
            )

        self.tree: SupervisorTree = start_tree(
            SupervisorSpec(max_restarts=1, period=60.0),
            [
                ChildSpec("facade", lambda c: FacadeActor.start(ctx, context=c)),
                ChildSpec("network", start_network, shutdown_timeout=10.0),
            ],
            name=f"{kind}[{cfg.client_id}]",
            faults=faults,
            on_fatal=lambda error: ctx.fail_outstanding(error),
        )
        ctx.root_table = self.tree.children
        self.facade = Facade(ctx, lambda: self.tree.fatal_error)

    def ensure_open(self) -> None:
        """ConsumerClosedError once closed, the fatal error once the consumer failed."""
        self.facade.ensure_open()

    def deadline(self, timeout: float | None) -> float:
        """A call's monotonic deadline: ``timeout`` seconds, default.api.timeout.ms if None."""
        return self.facade.deadline(timeout, self.config.default_api_timeout_ms)

    def request(
        self,
        target: str,
        make: Callable[[concurrent.futures.Future[Any], int], Any],
        deadline: float,
        what: str,
    ) -> concurrent.futures.Future[Any]:
        """Send ``make(future, deadline_ms)`` to ``target``; a future of its result.

        A target that is restarting is retried until the monotonic ``deadline`` (the
        restarted actor rebuilt its state), each retry after the backoff of a request state
        (``retry.backoff.ms`` doubling to ``retry.backoff.max.ms``, jitter 0.2); reaching the
        deadline so, the future fails with KafkaTimeoutError. Cancelling the future stops the
        retries. Raises at once when the consumer failed for good."""
        self.facade.raise_if_fatal()
        result = _Request()
        self.ctx.track(result)
        state = RequestState(retry_backoff(self.config, self.ctx.random))

        def attempt() -> None:
            if result.done():
                return
            try:
                self.facade.raise_if_fatal()
            except BaseException as exc:
                fail(result, exc)
                return
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            self.ctx.track(future)
            if self.facade.tell(target, make(future, self.facade.deadline_ms(deadline))):
                result.restarting = None
            else:
                fail(future, ChildRestartingError(child=target))
            future.add_done_callback(answered)

        def answered(future: concurrent.futures.Future[Any]) -> None:
            error = future.exception()
            if isinstance(error, ChildRestartingError):
                result.restarting = target
                now = time.monotonic()
                if now >= deadline:
                    timeout = KafkaTimeoutError(
                        f"{what} timed out: the {target} actor is restarting"
                    )
                    timeout.__cause__ = error
                    fail(result, timeout)
                    return
                backoff_s = state.on_failed_attempt(self.ctx.now_ms()) / 1000.0
                self.ctx.scheduler.call_later(min(backoff_s, deadline - now), attempt)
            elif error is not None:
                fail(result, error)
            else:
                complete(result, future.result())

        attempt()
        return result

    # -- client telemetry (KIP-714) -------------------------------------------------------------

    def client_instance_id(self, deadline: float, trace: str) -> concurrent.futures.Future[Any]:
        """A future of the client instance id the broker assigned (``uuid.UUID``); raises
        IllegalStateError at once when ``enable.metrics.push`` is false (as Java)."""
        self.facade.ensure_open()
        if not self.config.enable_metrics_push:
            raise IllegalStateError(
                "Telemetry is not enabled. Set config `enable.metrics.push` to `true`."
            )
        known = self.ctx.client_instance_id
        if known is not None:  # a zero timeout still answers (as Java)
            done: concurrent.futures.Future[Any] = concurrent.futures.Future()
            done.set_result(known)
            return done
        return self.request(
            "telemetry", lambda f, d: ClientInstanceIdEvent(f, trace), deadline, "clientInstanceId"
        )

    def close_telemetry(self, trace: str) -> concurrent.futures.Future[Any] | None:
        """The close's terminating telemetry push: a future completed once it was answered
        (or there is none to send); None when telemetry is off or the actors failed."""
        if not self.config.enable_metrics_push or self.tree.fatal_error is not None:
            return None
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.ctx.track(future)
        if not self.ctx.tell("telemetry", TelemetryCloseEvent(future, trace)):
            return None
        return future

    @staticmethod
    def timeout_error(future: concurrent.futures.Future[Any], what: str) -> KafkaTimeoutError:
        """The error of a wait on a request's future that reached its deadline."""
        target = getattr(future, "restarting", None)
        if target is not None:
            return KafkaTimeoutError(f"{what} timed out: the {target} actor is restarting")
        return KafkaTimeoutError(f"{what} timed out")

    def stop_actors(self, timeout: float) -> ShutdownResult:
        """Stop the actors within ``timeout`` seconds, then fail every outstanding request
        with ConsumerClosedError. The one call that blocks (it joins the actors' threads):
        the sync front end calls it on its closing thread, the asyncio one in a worker
        thread (a thread started here would not start at interpreter shutdown)."""
        from kafka_actors.errors import ConsumerClosedError

        result = self.tree.shutdown(timeout=timeout)
        self.ctx.fail_outstanding(ConsumerClosedError("The consumer is closed"))
        return result


class ConsumerCore(ActorCore):
    """One consumer's actors and state (see :mod:`kafka_actors.core.consumer_core`)."""

    def __init__(
        self,
        config: ConsumerConfig,
        *,
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        faults: FaultInjector | None = None,
    ) -> None:
        self.uses_group = config.group_id is not None

        def managers(ctx: ConsumerContext) -> list[ChildSpec]:
            cfg = ctx.config
            if cfg.rebalance_safe_commits:
                from kafka_actors.actors.safe_commits import RebalanceSafeCommits

                ctx.safe_commits = RebalanceSafeCommits(
                    ctx.clock,
                    ctx.scheduler,
                    cfg.rebalance_safe_commits_max_duration,
                    client_id=cfg.client_id,
                    group_id=cfg.group_id,
                )
            specs = [
                ChildSpec("metadata", lambda c: MetadataActor.start(ctx, context=c)),
            ]
            if self.uses_group:
                specs += [
                    ChildSpec("coordinator", lambda c: CoordinatorActor.start(ctx, context=c)),
                    ChildSpec("membership", lambda c: MembershipActor.start(ctx, context=c)),
                    ChildSpec("commit", lambda c: CommitActor.start(ctx, context=c)),
                ]
            specs += [
                ChildSpec("offsets", lambda c: OffsetsActor.start(ctx, context=c)),
                ChildSpec("fetch", lambda c: FetchActor.start(ctx, context=c)),
            ]
            return specs

        super().__init__(config, managers, faults=faults)
        ctx, cfg = self.ctx, self.config
        self.handout = HandOut(
            ctx,
            self.facade,
            as_deserializer(key_deserializer or cfg.key_deserializer),
            as_deserializer(value_deserializer or cfg.value_deserializer),
        )
        self._init_task: concurrent.futures.Future[Any] | None = None
        # Paces the committed-offsets lookups of update_positions: after a failure the next
        # one waits retry.backoff.ms doubling to retry.backoff.max.ms (reset by a success).
        self._init_state = RequestState(retry_backoff(cfg, ctx.random))
        self._init_retry_due_ms: int | None = None
        self.log.info(
            "consumer_created",
            group_protocol=cfg.group_protocol,
            record_decoder=_records.IMPLEMENTATION,
            record_decoder_reason=_records.NATIVE_UNAVAILABLE_REASON or None,
        )

    @property
    def subscriptions(self) -> SubscriptionState:
        return self.ctx.subscriptions

    # -- checks --------------------------------------------------------------------------------

    def require_group(self, what: str) -> None:
        if not self.uses_group:
            raise InvalidGroupIdError(
                f"To use the group management or offset commit APIs ({what}), you must "
                "provide a valid group.id in the consumer configuration."
            )

    def check_group_protocol(self, *, subscribing: bool = False) -> None:
        ctx = self.ctx
        versions = ctx.versions
        if not (
            ctx.group_protocol == "consumer"
            and self.uses_group
            and (subscribing or ctx.subscriptions.has_auto_assigned_partitions())
        ):
            return
        refused = self.facade.group_protocol_error  # a heartbeat answered UNSUPPORTED_VERSION
        if refused is not None:
            raise refused
        if versions is not None and not versions.supports(ApiKey.CONSUMER_GROUP_HEARTBEAT):
            raise UnsupportedVersionError(CONSUMER_PROTOCOL_NOT_SUPPORTED_MSG)

    def prepare_collect(self, trace: str) -> None:
        """Each poll turn before it collects (:class:`~kafka_actors.core.poll.PollStep`): the
        group protocol check, then positions to update."""
        self.check_group_protocol()
        self.update_positions(trace)

    def require_subscription(self) -> None:
        if self.ctx.subscriptions.has_no_subscription_or_user_assignment():
            raise IllegalStateError(
                "Consumer is not subscribed to any topics or assigned any partitions"
            )

    # -- subscription (none of these waits) -----------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] | str | re.Pattern[str],
        listener: ConsumerRebalanceListener | None,
        pattern: str | re.Pattern[str] | None,
        trace: str,
    ) -> bool:
        """Subscribe to topic names or a regex (see ``KafkaConsumer.subscribe``); False (and
        nothing done) for an empty subscription, which the front end turns into its
        ``unsubscribe()``."""
        self.require_group("subscribe")
        self.check_group_protocol(subscribing=True)
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
            return False
        subs = self.ctx.subscriptions
        if regex is not None:
            # The consumer group protocol evaluates the regex on the broker (RE2J): Python's
            # re does not judge it; the broker's INVALID_REGULAR_EXPRESSION reaches poll()
            # as InvalidRegularExpressionError. The classic protocol matches it here.
            broker_evaluated = self.ctx.group_protocol == "consumer"
            if not regex:
                raise ValueError("A subscription regex must not be empty")
            if not broker_evaluated:
                try:
                    re.compile(regex)
                except re.error as exc:
                    raise ValueError(f"Invalid subscription regex {regex!r}: {exc}") from exc
            subs.subscribe_pattern(regex, broker_evaluated=broker_evaluated)
            names = frozenset()
        else:
            for name in names:
                if not isinstance(name, str) or not name.strip():
                    raise ValueError("Topic names in a subscription must be non-empty")
            subs.subscribe(names)
        facade = self.facade
        facade.listener = listener
        event = SubscriptionChangedEvent(names, regex, trace)
        facade.tell("metadata", event)
        facade.tell("membership", event)
        self.log.info("subscribed", topics=sorted(names), pattern=regex)
        return True

    @staticmethod
    def check_partitions(partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        wanted = list(partitions)
        for tp in wanted:
            if not isinstance(tp, TopicPartition) or not tp.topic.strip():
                raise ValueError(f"Not a valid TopicPartition: {tp!r}")
        return wanted

    def assign(self, wanted: list[TopicPartition], trace: str) -> None:
        """Manual assignment of ``wanted`` (checked, not empty); with auto-commit, the
        consumed positions of the old assignment are committed first (async), as Java does."""
        subs = self.ctx.subscriptions
        if self.uses_group and self.config.enable_auto_commit and subs.assigned_partitions():
            self.commit_async(None, None, trace)
        subs.assign_from_user(wanted)
        facade = self.facade
        event = AssignmentChangedEvent(frozenset(wanted), trace)
        facade.tell("metadata", event)
        facade.tell("fetch", PositionsChangedEvent(trace))
        facade.tell("offsets", PositionsChangedEvent(trace))
        self.log.info("assigned", partitions=sorted(str(tp) for tp in wanted))

    def must_leave(self) -> bool:
        """Whether ``unsubscribe()`` / ``close()`` leave the group first."""
        return self.uses_group and self.ctx.subscriptions.has_auto_assigned_partitions()

    def drop_subscription(self, trace: str) -> None:
        """The end of ``unsubscribe()`` (after leaving the group): no subscription, no
        assignment."""
        self.ctx.subscriptions.unsubscribe()
        self.facade.tell("metadata", SubscriptionChangedEvent(frozenset(), None, trace))
        self.facade.tell("fetch", PositionsChangedEvent(trace))

    def _require_assigned(self, partitions: Iterable[TopicPartition]) -> None:
        subs = self.ctx.subscriptions
        for tp in partitions:
            if not subs.is_assigned(tp):
                raise IllegalStateError(f"No current assignment for partition {tp}")

    def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        value = offset.offset if isinstance(offset, OffsetAndMetadata) else int(offset)
        if value < 0:
            raise ValueError(f"seek offset must not be negative: {value}")
        epoch = offset.leader_epoch if isinstance(offset, OffsetAndMetadata) else None
        subs = self.ctx.subscriptions
        self._require_assigned([partition])
        # As Java, the position carries the leader the metadata knows now: a position with no
        # known leader would be validated again when the next metadata names one.
        leader = self._current_leader(partition)
        if epoch is None:
            subs.seek(partition, FetchPosition(value, None, leader))
        else:
            # As Java: a position with a leader epoch is validated against the leader's log
            # (KIP-320) before it is fetched from.
            subs.seek_unvalidated(partition, FetchPosition(value, epoch, leader))
            self.facade.tell("offsets", PositionsChangedEvent(new_trace_id()))
        self.facade.tell("fetch", PositionsChangedEvent(new_trace_id()))

    def _current_leader(self, partition: TopicPartition) -> LeaderAndEpoch:
        """The leader of ``partition`` in the last cluster view (Java's
        ``metadata.currentLeader``); unknown before the first Metadata answer."""
        cluster = self.ctx.cluster
        found = None if cluster is None else cluster.leader_for(partition)
        return NO_LEADER if found is None else LeaderAndEpoch(found[0], found[1])

    def seek_to(self, partitions: Iterable[TopicPartition] | None, kind: ResetKind) -> None:
        subs = self.ctx.subscriptions
        wanted = list(partitions) if partitions is not None else list(subs.assigned_partitions())
        self._require_assigned(wanted)
        subs.request_offset_reset(wanted, OffsetResetStrategy(kind))
        self.facade.tell("offsets", PositionsChangedEvent(new_trace_id()))

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        wanted = list(partitions)
        self._require_assigned(wanted)
        self.ctx.subscriptions.pause(wanted)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        wanted = list(partitions)
        self._require_assigned(wanted)
        self.ctx.subscriptions.resume(wanted)
        # Records fetched before the pause may be waiting in the fetch buffer: a poll that
        # found nothing while they were paused must collect again (without this the asyncio
        # consumer waited for new data that the fetch actor, its buffer not drained, never
        # fetched: every getmany after the resume came back empty).
        self.ctx.fetch_buffer.wakeup()
        self.facade.tell("fetch", PositionsChangedEvent(new_trace_id()))

    # -- positions -------------------------------------------------------------------------------

    def check_position_partition(self, partition: TopicPartition) -> None:
        if not self.ctx.subscriptions.is_assigned(partition):
            raise IllegalStateError(
                f"You can only check the position for partitions assigned to this consumer: "
                f"{partition}"
            )

    def valid_position(self, partition: TopicPartition) -> int | None:
        """The partition's position when known; IllegalStateError when no longer assigned."""
        subs = self.ctx.subscriptions
        position = subs.valid_position(partition)
        if position is not None:
            return position.offset
        if not subs.is_assigned(partition):
            raise IllegalStateError(f"Partition {partition} is no longer assigned")
        return None

    def init_done(self) -> bool:
        """Whether the committed-offsets lookup started by :meth:`update_positions` ended, or
        the backoff after a failed one is over (the next may start)."""
        task = self._init_task
        if task is not None:
            return task.done()
        due = self._init_retry_due_ms
        return due is not None and self.ctx.now_ms() >= due

    def update_positions(self, trace: str) -> None:
        """Give every assigned partition a position: committed offsets (group) first, then
        ``auto.offset.reset`` through the offsets actor. Never blocks.

        A failed committed-offsets lookup is started again only after the backoff of its
        request state (``retry.backoff.ms`` doubling to ``retry.backoff.max.ms``, jitter 0.2,
        as Java's ``RequestState``), whatever the caller's polling frequency; a success
        resets it."""
        ctx = self.ctx
        subs = ctx.subscriptions
        state = self._init_state
        task = self._init_task
        if task is not None and task.done():
            self._init_task = None
            error = task.exception()
            if error is None:
                state.reset()
            else:
                now_ms = ctx.now_ms()
                backoff_ms = state.on_failed_attempt(now_ms)
                self._init_retry_due_ms = now_ms + backoff_ms
                # poll() and position() wait on the signal: wake them when the retry is due.
                ctx.scheduler.call_later(backoff_ms / 1000.0, ctx.signal.notify)
                if isinstance(error, KafkaError) and (
                    error.retriable or isinstance(error, KafkaTimeoutError)
                ):
                    self.log.info(
                        "initialize_positions_retry",
                        error=str(error),
                        attempts=state.attempts,
                        backoff_ms=backoff_ms,
                    )
                elif isinstance(error, ChildRestartingError):
                    pass
                else:
                    raise error
        initializing = subs.initializing_partitions()
        if not initializing:
            self._init_retry_due_ms = None
        elif self._init_task is None and state.can_send_request(ctx.now_ms()):
            self._init_retry_due_ms = None
            if self.uses_group:
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

    # -- requests: each returns a future at once ----------------------------------------------

    def commit(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None,
        deadline: float,
        trace: str,
        what: str,
    ) -> concurrent.futures.Future[dict[TopicPartition, OffsetAndMetadata]]:
        """Commit ``offsets`` (None: every consumed position), retrying retriable errors until
        the monotonic ``deadline``: a future of what was committed."""
        return self.request(
            "commit", lambda f, d: CommitEvent(offsets, True, d, f, trace), deadline, what
        )

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata] | None,
        callback: Callable[[Mapping[TopicPartition, Any], BaseException | None], Any] | None,
        trace: str,
    ) -> concurrent.futures.Future[Any]:
        """Commit once, without retries; ``callback(offsets, error)`` is queued for the
        polling thread (the facade runs it with the background events)."""
        ctx = self.ctx
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
        self, partitions: frozenset[TopicPartition], deadline: float, trace: str
    ) -> concurrent.futures.Future[dict[TopicPartition, OffsetAndMetadata | None]]:
        return self.request(
            "commit",
            lambda f, d: FetchCommittedEvent(partitions, d, f, trace),
            deadline,
            "committed",
        )

    def list_offsets(
        self, kind: str, timestamps: dict[TopicPartition, int], deadline: float, trace: str
    ) -> concurrent.futures.Future[Any]:
        return self.request(
            "offsets",
            lambda f, d: ListOffsetsEvent(kind, timestamps, d, f, trace),
            deadline,
            kind,
        )

    def topic_metadata(
        self, topics: frozenset[str] | None, deadline: float, trace: str
    ) -> concurrent.futures.Future[Any]:
        return self.request(
            "metadata",
            lambda f, d: TopicMetadataEvent(topics, d, f, trace),
            deadline,
            "list_topics" if topics is None else "partitions_for",
        )

    def commit_on_close(self, deadline: float, trace: str) -> concurrent.futures.Future[Any]:
        return self.request(
            "commit", lambda f, d: CommitOnCloseEvent(d, f, trace), deadline, "commit on close"
        )

    def leave_group(
        self,
        deadline: float,
        trace: str,
        membership: GroupMembershipOperation = "default",
    ) -> concurrent.futures.Future[Any] | None:
        """Ask the membership actor to leave (its release callbacks come as background
        events); a future of the leave, None when the actor is down. ``membership``: close's
        group membership operation (KIP-1092)."""
        ctx = self.ctx
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        ctx.track(future)
        event = LeaveGroupEvent(
            self.facade.deadline_ms(deadline), future, True, trace, membership=membership
        )
        if not ctx.tell("membership", event):
            return None
        return future

    def enforce_rebalance(self, reason: str | None, trace: str) -> None:
        """Java's enforceRebalance: a classic member rejoins on its next poll, its JoinGroup
        carrying the reason (KIP-800); the consumer protocol has no client-triggered
        rebalance, so there it only logs a warning (as Java's AsyncKafkaConsumer)."""
        if self.ctx.group_protocol == "consumer":
            self.log.warning(
                "enforce_rebalance_not_supported",
                reason="Operation not supported in the consumer group protocol (KIP-848)",
            )
            return
        if not self.uses_group:
            raise IllegalStateError(
                "Tried to force a rebalance but the consumer does not have a group."
            )
        why = reason if reason else ENFORCE_REBALANCE_DEFAULT_REASON
        self.log.info("enforce_rebalance", reason=why)
        self.facade.tell("membership", EnforceRebalanceEvent(why, trace))

    # -- close -----------------------------------------------------------------------------------

    def begin_shutdown(self, trace: str) -> None:
        """After the close's commit and leave: close the fetch sessions (unless the tree
        failed) and mark the consumer closed (every call raises ConsumerClosedError)."""
        if self.tree.fatal_error is None:
            self.ctx.tell("fetch", CloseFetchEvent(trace))
        self.facade.mark_closed()

    # -- group, metrics --------------------------------------------------------------------------

    def group_metadata(self) -> ConsumerGroupMetadata:
        self.facade.ensure_open()
        self.require_group("group_metadata")
        ctx = self.ctx
        assert self.config.group_id is not None
        epoch = ctx.member_epoch
        return ConsumerGroupMetadata(
            self.config.group_id,
            epoch if epoch is not None else -1,
            ctx.member_id or "",
            self.config.group_instance_id,
        )

    def health(self) -> ConsumerHealth:
        """``health()`` of the front ends (:mod:`kafka_actors.core.health`): local state
        only, never blocks on an actor; callable from any thread, also after close."""
        from kafka_actors.core.health import health_of, read_facts

        cfg = self.config
        return health_of(
            read_facts(
                self.ctx,
                group_protocol=cfg.group_protocol if self.uses_group else None,
                closed=self.facade.closed,
                error=self.tree.fatal_error,
                max_poll_interval_ms=cfg.max_poll_interval_ms if self.uses_group else None,
            )
        )

    def current_lag(self, partition: TopicPartition) -> int | None:
        """Java's ``currentLag`` (:func:`kafka_actors.core.health.current_lag`);
        IllegalStateError when ``partition`` is not assigned."""
        from kafka_actors.core.health import current_lag

        self.facade.ensure_open()
        if not self.ctx.subscriptions.is_assigned(partition):
            raise IllegalStateError(f"No current assignment for partition {partition}")
        return current_lag(self.ctx, partition)

    def flat_metrics(self) -> dict[str, Any]:
        """The sensors' values, and the assigned partitions (nothing asked of an actor)."""
        ctx = self.ctx
        values: dict[str, Any] = dict(ctx.metrics.snapshot())
        values["assigned-partitions"] = float(ctx.subscriptions.num_assigned_partitions())
        values["record-decoder"] = _records.IMPLEMENTATION
        return values

    def fetch_metrics(self, timeout: float) -> Any:
        """The fetch actor's own figures (a bounded ask; None when it does not answer):
        read only by ``KafkaConsumer.metrics()``'s flat values, which block by design."""
        try:
            return self.ctx.ask("fetch", FetchMetricsEvent(), timeout=timeout)
        except Exception:
            return None
