"""What a parallel consumer (threads or asyncio) is built from, checked once.

Owns: :class:`ParallelSettings`, the options of :class:`~kafka_actors.parallel.ParallelConsumer`
and :class:`~kafka_actors.parallel.AsyncParallelConsumer` turned into the values they run with
(the consumer's configuration without auto-commit, the scheduler's :class:`WorkConfig`, the
revocation budget, the producer's configuration), and reading the broker's
``offset.metadata.max.bytes`` once at subscription. May touch: confluent-kafka's AdminClient
(:func:`read_offset_metadata_max_bytes` only), logging.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import IllegalStateError, KafkaError
from kafka_actors.parallel.messages import FailurePolicy, Ordering
from kafka_actors.parallel.scheduler import DEFAULT_OFFSET_METADATA_MAX_BYTES, WorkConfig

__all__ = ["ParallelSettings", "offset_metadata_limit", "read_offset_metadata_max_bytes"]

#: How long reading the broker's ``offset.metadata.max.bytes`` may take (seconds).
_READ_LIMIT_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class ParallelSettings:
    """The checked options of one parallel consumer."""

    #: the user's configuration, as given
    user: ConsumerConfig
    #: the scheduler's options; ``offset_metadata_max_bytes`` is the default until the broker's
    #: limit is known (:meth:`with_metadata_limit`) unless it was given
    work_config: WorkConfig
    #: the limit given by the user; None: read from the broker at subscription
    metadata_max_bytes: int | None
    #: how long a revocation waits for the revoked partitions' records in flight
    revocation_timeout_ms: int
    #: the dead-letter producer's and the admin client's configuration
    client_config: Mapping[str, Any]
    dead_letter_topic: str | None

    @classmethod
    def build(
        cls,
        config: Mapping[str, object] | ConsumerConfig,
        *,
        owner: str,
        ordering: Ordering | str,
        max_concurrency: int,
        max_attempts: int,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int,
        dead_letter_topic: str | None,
        on_failure: FailurePolicy | str,
        max_in_flight_per_partition: int,
        max_buffered_per_partition: int,
        max_uncommitted_per_partition: int,
        offset_metadata_max_bytes: int | None,
        producer_config: Mapping[str, Any] | None,
        revocation_timeout_ms: int | None,
    ) -> ParallelSettings:
        """Check everything now: a ConfigError names the option, a missing ``group.id`` is an
        IllegalStateError (``owner`` names the class in the message)."""
        user = (
            config if isinstance(config, ConsumerConfig) else ConsumerConfig.from_dict(dict(config))
        )
        if not user.group_id:
            raise IllegalStateError(f"{owner} needs a group.id: it commits offsets")
        # WorkConfig turns the names into its enums and checks every value (ConfigError).
        work_config = WorkConfig(
            ordering=ordering,  # type: ignore[arg-type]
            max_concurrency=max_concurrency,
            max_in_flight_per_partition=max_in_flight_per_partition,
            max_buffered_per_partition=max_buffered_per_partition,
            max_uncommitted_per_partition=max_uncommitted_per_partition,
            max_attempts=max_attempts,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            dead_letters=dead_letter_topic is not None,
            on_failure=on_failure,  # type: ignore[arg-type]
            offset_metadata_max_bytes=offset_metadata_max_bytes
            or DEFAULT_OFFSET_METADATA_MAX_BYTES,
        )
        return cls(
            user=user,
            work_config=work_config,
            metadata_max_bytes=offset_metadata_max_bytes,
            revocation_timeout_ms=(
                revocation_timeout_ms
                if revocation_timeout_ms is not None
                else user.max_poll_interval_ms // 2
            ),
            client_config={
                "bootstrap.servers": ",".join(map(str, user.bootstrap_servers)),
                **dict(producer_config or {}),
            },
            dead_letter_topic=dead_letter_topic,
        )

    @property
    def consumer_config(self) -> ConsumerConfig:
        """The consumer's configuration: it commits nothing by itself (only completed offsets
        are committed, by the parallel consumer)."""
        return self.user.with_overrides({"enable.auto.commit": False})

    def with_metadata_limit(self, limit: int) -> WorkConfig:
        """The scheduler's options once the broker's limit is known."""
        return dataclasses.replace(self.work_config, offset_metadata_max_bytes=limit)


def read_offset_metadata_max_bytes(client_config: Mapping[str, Any], timeout: float) -> int:
    """The broker's ``offset.metadata.max.bytes`` (DescribeConfigs on a broker through
    confluent-kafka's AdminClient). Raises when it cannot be read."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({**client_config, "log_level": 0})
    brokers = admin.list_topics(timeout=timeout).brokers
    if not brokers:
        raise KafkaError("no broker in the cluster's metadata")
    broker_id = str(min(brokers))
    resource = ConfigResource(ResourceType.BROKER, broker_id)
    futures = admin.describe_configs([resource], request_timeout=timeout)
    entries = next(iter(futures.values())).result(timeout=timeout)
    entry = entries.get("offset.metadata.max.bytes")
    if entry is None or entry.value is None:
        raise KafkaError("offset.metadata.max.bytes is not in the broker's configuration")
    return int(entry.value)


def offset_metadata_limit(client_config: Mapping[str, Any], log: Any) -> int:
    """The broker's ``offset.metadata.max.bytes``, or the default (with a warning) when it
    cannot be read; logged either way. Blocks up to ten seconds (an asyncio caller runs it in a
    thread)."""
    try:
        limit = read_offset_metadata_max_bytes(client_config, _READ_LIMIT_TIMEOUT_S)
        source = "broker"
    except Exception as exc:
        limit = DEFAULT_OFFSET_METADATA_MAX_BYTES
        source = "default"
        log.warning("offset_metadata_max_bytes_not_read", error=repr(exc), using=limit)
    log.info("offset_metadata_max_bytes", value=limit, source=source)
    return limit
