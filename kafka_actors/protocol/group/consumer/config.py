"""What the KIP-848 member needs from the consumer configuration: :class:`MembershipConfig`.

Owns: the configuration values the membership manager, its heartbeat request manager and its
reconciler read (Java's config names in the comments). Re-exported by
:mod:`kafka_actors.protocol.group.consumer.membership`.

May touch: nothing; pure data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kafka_actors.errors import ConfigError

if TYPE_CHECKING:
    from kafka_actors.config import ConsumerConfig

__all__ = ["MembershipConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MembershipConfig:
    """What the membership manager needs from the consumer configuration (Java names)."""

    group_id: str
    group_instance_id: str | None = None  # group.instance.id: static membership
    rack_id: str | None = None  # client.rack
    rebalance_timeout_ms: int = 300_000  # max.poll.interval.ms
    server_assignor: str | None = None  # group.remote.assignor
    auto_commit_enabled: bool = True  # enable.auto.commit
    retry_backoff_ms: int = 100  # retry.backoff.ms
    retry_backoff_max_ms: int = 1_000  # retry.backoff.max.ms
    heartbeat_api_version: int = 1  # negotiated ConsumerGroupHeartbeat version (0 or 1)

    @classmethod
    def from_consumer_config(
        cls, config: ConsumerConfig, *, heartbeat_api_version: int = 1
    ) -> MembershipConfig:
        if config.group_id is None:
            raise ConfigError("group.id is required to join a consumer group", key="group.id")
        return cls(
            group_id=config.group_id,
            group_instance_id=config.group_instance_id,
            rack_id=config.client_rack or None,
            rebalance_timeout_ms=config.max_poll_interval_ms,
            server_assignor=config.group_remote_assignor,
            auto_commit_enabled=config.enable_auto_commit,
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
            heartbeat_api_version=heartbeat_api_version,
        )
