"""``health()`` of every consumer front end: :func:`read_facts` gathers the consumer's local
state into :class:`HealthFacts`, :func:`health_of` derives the
:class:`~kafka_actors.health.ConsumerHealth` from them (pure: the time is one of the facts).

Owns: the verdict (live, ready, the reasons) and which :class:`~kafka_actors.health.GroupStatus`
a member state means. Reads only what the consumer holds locally (the context: member status
as the membership actor published it, the coordinator, the connection states the NetworkActor
keeps, the subscription state, the metrics' heartbeat and poll times): no broker round trip, no
ask of an actor, a few short lock holds. May touch: the context, read only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from kafka_actors.actors.context import ConsumerContext, MemberStatus
from kafka_actors.actors.network.status import NodeState
from kafka_actors.health import BrokerConnection, ConsumerHealth, GroupStatus, PartitionHealth
from kafka_actors.protocol.group.coordinator import coordinator_connection_id
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.decode import IsolationLevel
from kafka_actors.protocol.subscription import TopicPartitionState

__all__ = ["HealthFacts", "connections_of", "current_lag", "health_of", "read_facts"]

#: Member states in which the member is in its group: it owns its assignment (KIP-848
#: reconciling and acknowledging included: it heartbeats and keeps what it is not asked to
#: give up; classic and share: STABLE).
_IN_GROUP: Final = frozenset({"STABLE", "RECONCILING", "ACKNOWLEDGING"})
#: Member states of a member leaving (``unsubscribe()``, ``close()``, a poll-timer leave).
_LEAVING: Final = frozenset({"PREPARE_LEAVING", "LEAVING"})
#: The " (node=N)" a connection error's text ends with.
_NODE_SUFFIX: Final = re.compile(r" \(node=-?\d+\)$")
#: Connection ids from here on are coordinator connections (broker ids are far below).
_COORDINATOR_IDS_FROM: Final = 2**30


@dataclass(frozen=True, slots=True)
class HealthFacts:
    """What ``health()`` reads, at one instant ``now_ms`` (the metrics clock, ms)."""

    now_ms: int
    #: ``consumer``, ``classic``, ``share``; None without ``group.id``.
    group_protocol: str | None
    #: Subscribed to topics or a pattern (the group assigns partitions).
    subscribed: bool
    member: MemberStatus | None
    coordinator_id: int | None
    assignment: frozenset[TopicPartition]
    partitions: tuple[PartitionHealth, ...]
    connections: tuple[BrokerConnection, ...]
    last_heartbeat_ok_ms: int | None
    #: When the application last polled (a poll's end; its start while none ended).
    last_poll_ms: int | None
    #: A poll runs now.
    polling: bool
    #: ``max.poll.interval.ms``; None where no poll timer applies (share consumers).
    max_poll_interval_ms: int | None
    closed: bool
    error: BaseException | None = None
    #: A member in its group whose last good heartbeat is older than this is not ready
    #: (the coordinator drops a member after its session timeout); None: not checked.
    session_timeout_ms: int | None = None
    #: When the last poll started: ``max.poll.interval.ms`` runs from there, as the
    #: member's poll timer (Java's) does; None: ``last_poll_ms`` is used.
    last_poll_started_ms: int | None = None


def _partition(
    tp: TopicPartition, state: TopicPartitionState, isolation: IsolationLevel
) -> PartitionHealth:
    position = state.position.offset if state.has_position and state.position else None
    end = state.end_offset(isolation)
    lag = None if position is None or end is None else end - position
    return PartitionHealth(tp, position, state.high_watermark, lag, state.paused)


def partitions_of(
    states: Iterable[tuple[TopicPartition, TopicPartitionState]], isolation: IsolationLevel
) -> tuple[PartitionHealth, ...]:
    return tuple(
        sorted(
            (_partition(tp, state, isolation) for tp, state in states),
            key=lambda p: (p.partition.topic, p.partition.partition),
        )
    )


def connections_of(nodes: Iterable[NodeState]) -> tuple[BrokerConnection, ...]:
    """The NetworkActor's connection ids to brokers: a coordinator connection's id is
    ``2**31 - 1 - broker id`` (:func:`~kafka_actors.protocol.group.coordinator.
    coordinator_connection_id`), a bootstrap entry's is negative."""
    out = []
    for node_id, address, state, error in nodes:
        if node_id < 0:
            out.append(BrokerConnection(node_id, address, state, error, "bootstrap"))
        elif node_id >= _COORDINATOR_IDS_FROM:
            broker = coordinator_connection_id(node_id)  # its own inverse
            out.append(BrokerConnection(broker, address, state, error, "coordinator"))
        else:
            out.append(BrokerConnection(node_id, address, state, error))
    return tuple(sorted(out, key=lambda c: (c.kind != "broker", c.node_id)))


def isolation_of(ctx: ConsumerContext) -> IsolationLevel:
    if ctx.config.isolation_level == "read_committed":
        return IsolationLevel.READ_COMMITTED
    return IsolationLevel.READ_UNCOMMITTED


def current_lag(ctx: ConsumerContext, tp: TopicPartition) -> int | None:
    """Java's ``currentLag``: the end offset (high watermark, or the last stable offset under
    ``read_committed``) of the partition's last fetch minus its position; None when either
    is unknown. The caller checks that ``tp`` is assigned."""
    return ctx.subscriptions.partition_lag(tp, isolation_of(ctx))


def read_facts(
    ctx: ConsumerContext,
    *,
    group_protocol: str | None,
    closed: bool,
    error: BaseException | None,
    max_poll_interval_ms: int | None,
    assignment: frozenset[TopicPartition] | None = None,
) -> HealthFacts:
    """The consumer's local state now. ``assignment``: the share assignment (a share
    consumer has no positions: no partitions are reported); None: the subscription state's."""
    activity = ctx.metrics.activity()
    subs = ctx.subscriptions
    if assignment is None:
        states = subs.partition_states()
        assignment = frozenset(tp for tp, _ in states)
        partitions = partitions_of(states, isolation_of(ctx))
    else:
        partitions = ()
    last_poll = activity.last_poll_ended_ms
    if last_poll is None or (
        activity.last_poll_ms is not None and activity.last_poll_ms > last_poll
    ):
        last_poll = activity.last_poll_ms
    heartbeat = activity.last_heartbeat_ok_ms
    return HealthFacts(
        now_ms=int(activity.now_ms),
        group_protocol=group_protocol,
        subscribed=subs.has_auto_assigned_partitions(),
        member=ctx.member_status,
        coordinator_id=ctx.coordinator_node,
        assignment=assignment,
        partitions=partitions,
        connections=connections_of(ctx.connection_states.snapshot()),
        last_heartbeat_ok_ms=None if heartbeat is None else int(heartbeat),
        last_poll_ms=None if last_poll is None else int(last_poll),
        polling=activity.polling,
        max_poll_interval_ms=max_poll_interval_ms,
        closed=closed,
        error=error,
        session_timeout_ms=ctx.config.session_timeout_ms if group_protocol is not None else None,
        last_poll_started_ms=None if activity.last_poll_ms is None else int(activity.last_poll_ms),
    )


def _poll_age(facts: HealthFacts) -> int | None:
    if facts.polling:
        return 0
    if facts.last_poll_ms is None:
        return None
    return max(0, facts.now_ms - facts.last_poll_ms)


def _group_status(facts: HealthFacts, poll_exceeded: bool) -> GroupStatus:
    if facts.error is not None:
        return GroupStatus.FAILED
    if facts.closed:
        return GroupStatus.CLOSED
    if facts.group_protocol is None:
        return GroupStatus.NO_GROUP
    if poll_exceeded:
        return GroupStatus.POLL_INTERVAL_EXCEEDED
    state = facts.member.state if facts.member is not None else None
    if state == "FATAL":
        return GroupStatus.FAILED
    if state == "STALE":
        return GroupStatus.POLL_INTERVAL_EXCEEDED
    if state == "FENCED":
        return GroupStatus.FENCED
    if state in _LEAVING:
        return GroupStatus.LEFT
    if not facts.subscribed:
        return GroupStatus.NOT_SUBSCRIBED
    if facts.coordinator_id is None:
        return GroupStatus.COORDINATOR_UNKNOWN
    if state in _IN_GROUP:
        return GroupStatus.IN_GROUP
    return GroupStatus.JOINING


def _since_poll_started(facts: HealthFacts) -> int | None:
    """How long ago the last poll started (0 while one runs): what the member's poll timer
    measures. Judging by the poll's end instead would lag the member by the poll's length
    (a member already left as STALE while health() still said live)."""
    if facts.polling:
        return 0
    started = facts.last_poll_started_ms
    if started is None:
        return _poll_age(facts)
    return max(0, facts.now_ms - started)


def health_of(facts: HealthFacts) -> ConsumerHealth:
    """The health the facts show (see :class:`~kafka_actors.health.ConsumerHealth`)."""
    poll_age = _poll_age(facts)
    since_start = _since_poll_started(facts)
    limit = facts.max_poll_interval_ms
    poll_exceeded = limit is not None and since_start is not None and since_start > limit
    status = _group_status(facts, poll_exceeded)
    reasons: list[str] = []
    if status is GroupStatus.FAILED:
        reasons.append(
            f"failed: {facts.error!r}" if facts.error is not None else "failed: member state FATAL"
        )
    elif status is GroupStatus.CLOSED:
        reasons.append("closed")
    elif poll_exceeded:
        reasons.append(
            f"poll interval exceeded: no poll for {since_start} ms (max.poll.interval.ms {limit})"
        )
    live = not reasons
    if status is GroupStatus.NO_GROUP:
        if not facts.assignment:
            reasons.append("no partitions assigned")
    elif status is not GroupStatus.IN_GROUP and live:
        reasons.append(f"not in the group: {status.value.replace('_', ' ')}")
    if live and poll_age is None:
        reasons.append("not polled yet")
    heartbeat = facts.last_heartbeat_ok_ms
    heartbeat_age = None if heartbeat is None else max(0, facts.now_ms - heartbeat)
    session = facts.session_timeout_ms
    if (
        status is GroupStatus.IN_GROUP
        and session is not None
        and heartbeat_age is not None
        and heartbeat_age > session
    ):
        reasons.append(
            f"no heartbeat answered for {heartbeat_age} ms (session timeout {session} ms)"
        )
    if live and not any(c.up for c in facts.connections):
        errors = sorted({_NODE_SUFFIX.sub("", c.error) for c in facts.connections if c.error})
        reasons.append("no broker connection up" + (f" ({errors[0]})" if errors else ""))
    member = facts.member
    classic = facts.group_protocol == "classic"
    epoch = member.epoch if member is not None else None
    return ConsumerHealth(
        live=live,
        ready=not reasons,
        reasons=tuple(reasons),
        group_status=status,
        member_state=member.state if member is not None else None,
        group_protocol=facts.group_protocol,
        coordinator_id=facts.coordinator_id if facts.group_protocol is not None else None,
        member_id=member.member_id if member is not None else None,
        member_epoch=None if classic else epoch,
        generation=epoch if classic else None,
        assignment=facts.assignment,
        last_heartbeat_age_ms=heartbeat_age,
        last_poll_age_ms=poll_age,
        partitions=facts.partitions,
        connections=facts.connections,
        error=None if facts.error is None else repr(facts.error),
    )
