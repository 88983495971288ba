"""What commits and committed-offset fetches share: their configuration and their link to the
group coordinator.

Owns: :class:`CommitConfig` (the consumer configuration the commit manager reads, Java names),
:class:`CoordinatorLink` (who the member is — member id and member epoch or generation —, which
node the group coordinator is, the topic ids known, the log bound to the member; Java's
``CommitRequestManager`` keeps the same as ``memberInfo`` and its coordinator request manager)
and the small helpers both :class:`~kafka_actors.protocol.offsets.commit.CommitManager`
(OffsetCommit) and :class:`~kafka_actors.protocol.offsets.committed.OffsetFetchRequests`
(OffsetFetch) use to talk to the coordinator: the request timeout, the version from which topics go
by id, the timeout error of a deadline, the name of a topic in an answer.

May touch: nothing outside itself; :meth:`CoordinatorLink.mark_coordinator_unknown` publishes
:class:`~kafka_actors.protocol.group.events.CoordinatorUnknown` through the outbox it is given.
Pure: no clocks, no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kafka_actors.errors import ConfigError, KafkaConnectionError, KafkaError, KafkaTimeoutError
from kafka_actors.protocol.group.events import CoordinatorUnknown
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    from collections.abc import Hashable

    from kafka_actors.config import ConsumerConfig
    from kafka_actors.protocol.request_state import Outbox

__all__ = [
    "TOPIC_ID_VERSION",
    "CommitConfig",
    "CoordinatorLink",
    "deadline_timeout",
    "describe_offsets",
    "topic_name",
    "trace_of",
]

#: The versions from which OffsetCommit / OffsetFetch name topics by id (KIP-848 / KIP-516).
TOPIC_ID_VERSION: Final = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitConfig:
    """What the commit manager needs from the consumer configuration (Java names)."""

    group_id: str
    group_protocol: str = "consumer"  # group.protocol: consumer (KIP-848) or classic
    auto_commit_enabled: bool = True  # enable.auto.commit
    auto_commit_interval_ms: int = 5_000  # auto.commit.interval.ms
    retry_backoff_ms: int = 100  # retry.backoff.ms
    retry_backoff_max_ms: int = 1_000  # retry.backoff.max.ms
    request_timeout_ms: int = 30_000  # request.timeout.ms
    offset_commit_version: int = 9  # negotiated OffsetCommit version (2..10)
    offset_fetch_version: int = 9  # negotiated OffsetFetch version (1..10)

    def __post_init__(self) -> None:
        if self.group_protocol not in ("consumer", "classic"):
            raise ValueError(f"unknown group protocol {self.group_protocol!r}")

    @classmethod
    def from_consumer_config(
        cls,
        config: ConsumerConfig,
        *,
        offset_commit_version: int = 9,
        offset_fetch_version: int = 9,
    ) -> CommitConfig:
        if config.group_id is None:
            raise ConfigError(
                "group.id is required to commit or fetch committed offsets", key="group.id"
            )
        return cls(
            group_id=config.group_id,
            group_protocol=config.group_protocol,
            auto_commit_enabled=config.enable_auto_commit,
            auto_commit_interval_ms=config.auto_commit_interval_ms,
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
            request_timeout_ms=config.request_timeout_ms,
            offset_commit_version=offset_commit_version,
            offset_fetch_version=offset_fetch_version,
        )


class CoordinatorLink:
    """Who the member is and where its group coordinator is, for commits and offset fetches.

    The commit manager owns it and updates it (member, coordinator, topic ids, the log bound to
    the member); the commits and the offset fetches read it and make the coordinator unknown
    when an answer or a failure says so. Standalone (no group membership): member id "" and
    no epoch.
    """

    __slots__ = (
        "_outbox",
        "_request_timeout_ms",
        "coordinator",
        "log",
        "member_epoch",
        "member_id",
        "topic_ids",
    )

    def __init__(self, config: CommitConfig, outbox: Outbox, log: Any) -> None:
        self._outbox = outbox
        self._request_timeout_ms = config.request_timeout_ms
        self.log = log
        self.member_id = ""
        self.member_epoch: int | None = None
        self.coordinator: int | None = None
        self.topic_ids: dict[str, uuid.UUID] = {}

    def member_key(self) -> tuple[str, int | None]:
        """The member identity a request is made with (member id, epoch or generation)."""
        return (self.member_id, self.member_epoch)

    def all_topic_ids_known(self, partitions: Iterable[TopicPartition]) -> bool:
        return all(tp.topic in self.topic_ids for tp in partitions)

    def request_timeout(self, deadline_ms: int | None, now_ms: int) -> int:
        """``request.timeout.ms``, shortened to what is left before ``deadline_ms``."""
        timeout = self._request_timeout_ms
        if deadline_ms is not None:
            timeout = min(timeout, max(1, deadline_ms - now_ms))
        return timeout

    def mark_coordinator_unknown(self, reason: str) -> None:
        """The coordinator is gone: publish ``CoordinatorUnknown`` (once until it is known)."""
        if self.coordinator is None:
            return
        self.log.info("coordinator_unknown", reason=reason, coordinator=self.coordinator)
        self.coordinator = None
        self._outbox.publish(CoordinatorUnknown(reason))

    def request_failed(self, error: BaseException) -> KafkaError:
        """A request to the coordinator failed without an answer: the typed error, and the
        coordinator made unknown after a disconnect or a request timeout."""
        kafka_error = (
            error
            if isinstance(error, KafkaError)
            else KafkaConnectionError(f"Request failed: {error!r}")
        )
        if isinstance(kafka_error, (KafkaConnectionError, KafkaTimeoutError)):
            self.mark_coordinator_unknown(f"request failed: {kafka_error}")
        return kafka_error


def trace_of(request_key: Hashable, trace_id: str | None) -> str | None:
    """The trace id of a caller's request: its own, else a string request key."""
    if trace_id is not None:
        return trace_id
    return request_key if isinstance(request_key, str) else None


def describe_offsets(offsets: Mapping[TopicPartition, OffsetAndMetadata | None]) -> dict[str, Any]:
    """Offsets for a log line: ``{"topic-partition": offset or None}``, sorted."""
    return {str(tp): (None if o is None else o.offset) for tp, o in sorted(offsets.items())}


def deadline_timeout(cause: KafkaError | None, what: str) -> KafkaTimeoutError:
    """The error of a request that did not complete before its deadline (``__cause__``: the
    last error, if any)."""
    if isinstance(cause, KafkaTimeoutError) and cause.code is None:
        return cause
    detail = f": last error {cause}" if cause is not None else ""
    error = KafkaTimeoutError(f"{what} did not complete before its deadline{detail}")
    error.__cause__ = cause
    return error


def topic_name(topic: Any, names_by_id: Mapping[uuid.UUID, str]) -> str:
    """The name of a topic in an OffsetCommit / OffsetFetch answer (by name, or by id v10+)."""
    name = getattr(topic, "name", None)
    if name is not None:
        return str(name)
    topic_id = getattr(topic, "topic_id", None)
    return names_by_id.get(topic_id, str(topic_id)) if topic_id is not None else ""
