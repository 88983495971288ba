"""The configuration of a classic group member: :class:`ClassicMembershipConfig`.

Owns: what the classic membership manager and its collaborators
(:mod:`kafka_actors.protocol.group.classic.membership`,
:mod:`kafka_actors.protocol.group.classic.heartbeat`,
:mod:`kafka_actors.protocol.group.classic.rebalance`) need from the consumer configuration, with
Java's names, and its validation.

May touch: nothing outside itself; pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kafka_actors.errors import ConfigError
from kafka_actors.protocol.group.classic.assignors import ASSIGNORS

if TYPE_CHECKING:
    from kafka_actors.config import ConsumerConfig

__all__ = ["ClassicMembershipConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassicMembershipConfig:
    """What the classic membership manager needs from the consumer configuration (Java names)."""

    group_id: str
    group_instance_id: str | None = None  # group.instance.id: static membership
    rack_id: str | None = None  # client.rack
    session_timeout_ms: int = 45_000  # session.timeout.ms
    heartbeat_interval_ms: int = 3_000  # heartbeat.interval.ms
    rebalance_timeout_ms: int = 300_000  # max.poll.interval.ms
    assignors: tuple[str, ...] = ("range", "cooperative-sticky")  # partition.assignment.strategy
    auto_commit_enabled: bool = True  # enable.auto.commit
    retry_backoff_ms: int = 100  # retry.backoff.ms
    retry_backoff_max_ms: int = 1_000  # retry.backoff.max.ms
    request_timeout_ms: int = 30_000  # request.timeout.ms
    # Negotiated API versions (the actor passes the coordinator's).
    join_group_version: int = 9
    sync_group_version: int = 5
    heartbeat_version: int = 4
    leave_group_version: int = 5

    def __post_init__(self) -> None:
        if not self.assignors:
            raise ConfigError(
                "partition.assignment.strategy needs at least one assignor",
                key="partition.assignment.strategy",
            )
        unknown = [name for name in self.assignors if name not in ASSIGNORS]
        if unknown:
            raise ConfigError(
                f"unknown assignors {unknown}; known: {', '.join(ASSIGNORS)}",
                key="partition.assignment.strategy",
            )
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(
                "heartbeat.interval.ms must be lower than session.timeout.ms",
                key="heartbeat.interval.ms",
            )

    @classmethod
    def from_consumer_config(
        cls, config: ConsumerConfig, **versions: int
    ) -> ClassicMembershipConfig:
        """From the consumer's configuration; ``versions`` sets the ``*_version`` fields."""
        if config.group_id is None:
            raise ConfigError("group.id is required to join a consumer group", key="group.id")
        return cls(
            group_id=config.group_id,
            group_instance_id=config.group_instance_id,
            rack_id=config.client_rack or None,
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            rebalance_timeout_ms=config.max_poll_interval_ms,
            assignors=tuple(config.partition_assignment_strategy),
            auto_commit_enabled=config.enable_auto_commit,
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
            request_timeout_ms=config.request_timeout_ms,
            **versions,
        )
