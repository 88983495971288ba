"""What ``health()`` of the consumers returns: :class:`ConsumerHealth`, for a liveness or
readiness probe (``docs/production.md``, "Health").

Owns: the values (:class:`ConsumerHealth`, :class:`GroupStatus`, :class:`PartitionHealth`,
:class:`BrokerConnection`). How they are derived from the consumer's local state is
:mod:`kafka_actors.core.health` (pure, with an injected clock). May touch: the protocol's
value types only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kafka_actors.protocol.messages import TopicPartition

__all__ = ["BrokerConnection", "ConsumerHealth", "GroupStatus", "PartitionHealth"]


class GroupStatus(enum.StrEnum):
    """Whether the consumer is in its group and, if not, why.

    ``IN_GROUP`` is the one value where it is (``STABLE``, or reconciling a new assignment
    while it heartbeats); every other value says why not.
    """

    #: In the group: it owns its assignment (or is reconciling a new one) and the
    #: coordinator is known.
    IN_GROUP = "in_group"
    #: No ``group.id``: the consumer reads partitions it ``assign()``-ed; there is no group.
    NO_GROUP = "no_group"
    #: Not subscribed (never, or ``unsubscribe()``-d): it joins no group.
    NOT_SUBSCRIBED = "not_subscribed"
    #: Subscribed, joining: no member epoch (generation) from the coordinator yet, or a
    #: classic rebalance (JoinGroup / SyncGroup) in progress.
    JOINING = "joining"
    #: The coordinator fenced the member (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID): it gives
    #: its partitions up (onPartitionsLost, run by the next poll) and rejoins.
    FENCED = "fenced"
    #: No coordinator is known (it moved, or no broker answers FindCoordinator): the member
    #: cannot heartbeat until one is found.
    COORDINATOR_UNKNOWN = "coordinator_unknown"
    #: Leaving or left the group (``unsubscribe()``, ``close()``).
    LEFT = "left"
    #: The application did not call poll for longer than ``max.poll.interval.ms``: the member
    #: left the group (or is about to) and rejoins at the next poll.
    POLL_INTERVAL_EXCEEDED = "poll_interval_exceeded"
    #: The consumer is closed.
    CLOSED = "closed"
    #: A fatal error (authorization, an unsupported group protocol, the supervision tree gave
    #: up): the consumer will not recover; see :attr:`ConsumerHealth.error`.
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class PartitionHealth:
    """One assigned partition as the consumer's fetch state holds it."""

    partition: TopicPartition
    #: The next offset to fetch (None: not known yet, e.g. the committed offset is looked up).
    position: int | None
    #: The high watermark of the partition's last fetch response (None: no fetch yet).
    high_watermark: int | None
    #: ``high_watermark - position`` (the last stable offset under ``read_committed``), as
    #: :meth:`~kafka_actors.KafkaConsumer.current_lag`; None when either is unknown.
    lag: int | None
    paused: bool = False


@dataclass(frozen=True, slots=True)
class BrokerConnection:
    """One connection to a broker as the consumer's network actor last reported it.

    ``node_id`` is the broker's id (negative for a ``bootstrap.servers`` entry). ``kind``:
    ``broker`` (metadata, fetches), ``coordinator`` (the group coordinator's own
    connection, as Java keeps one) or ``bootstrap``. ``state``: ``connecting``, ``up``
    (ready for requests), ``down`` (the last attempt failed or the connection was lost;
    ``error`` says why) or ``idle`` (closed after ``connections.max.idle.ms``, reopened when
    needed)."""

    node_id: int
    address: str
    state: str
    error: str | None = None
    kind: str = "broker"

    @property
    def up(self) -> bool:
        return self.state == "up"


@dataclass(frozen=True, slots=True)
class ConsumerHealth:
    """What ``health()`` returns: a snapshot of the consumer's local state and a verdict.

    Built from what the consumer already holds (no request to a broker, no wait on an
    actor), so a probe may call it every second, from any thread.

    * :attr:`live` False means the process should be restarted: the consumer failed for
      good, was closed, or the application stopped polling for longer than
      ``max.poll.interval.ms`` (a stuck poll loop);
    * :attr:`ready` True means it is consuming: in its group (or, without a group, polling
      assigned partitions), a coordinator known, a broker connection up, polled recently;
    * :attr:`reasons` says, in a few words each, why either verdict is False (empty when the
      consumer is live and ready).
    """

    live: bool
    ready: bool
    reasons: tuple[str, ...]
    group_status: GroupStatus
    #: The member state machine's own state name (KIP-848 ``MemberState``: ``STABLE``,
    #: ``RECONCILING`` ...; classic: ``STABLE``, ``PREPARING_REBALANCE`` ...; share:
    #: ``STABLE`` ...); None without a group or before the member was built.
    member_state: str | None
    #: ``group.protocol`` (``consumer``, ``classic``) or ``share``; None without ``group.id``.
    group_protocol: str | None
    #: The coordinator's broker id; None while unknown (or without a group).
    coordinator_id: int | None
    member_id: str | None
    #: The member epoch (``group.protocol=consumer`` and share groups); None otherwise.
    member_epoch: int | None
    #: The generation (``group.protocol=classic``); None otherwise.
    generation: int | None
    assignment: frozenset[TopicPartition]
    #: Milliseconds since the last heartbeat answered without error; None: none yet.
    last_heartbeat_age_ms: int | None
    #: Milliseconds since the application last polled (0 while a poll is running); None:
    #: never polled.
    last_poll_age_ms: int | None
    #: The assigned partitions, by topic and partition.
    partitions: tuple[PartitionHealth, ...]
    #: Every broker connection, by node id.
    connections: tuple[BrokerConnection, ...]
    #: The fatal error (``repr``) when :attr:`group_status` is ``FAILED``.
    error: str | None = None

    @property
    def in_group(self) -> bool:
        return self.group_status is GroupStatus.IN_GROUP

    @property
    def coordinator_known(self) -> bool:
        return self.coordinator_id is not None

    @property
    def connections_up(self) -> int:
        """How many broker connections are ready for requests."""
        return sum(1 for c in self.connections if c.up)

    @property
    def total_lag(self) -> int | None:
        """The sum of the known lags; None when no partition's lag is known."""
        lags = [p.lag for p in self.partitions if p.lag is not None]
        return sum(lags) if lags else None
