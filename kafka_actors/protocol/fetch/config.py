"""The consumer settings fetching uses: :class:`FetchConfig`.

Owns: the Java-named fetch settings shared by the fetch manager
(:mod:`kafka_actors.protocol.fetch.manager`) and the fetch buffer
(:mod:`kafka_actors.protocol.fetch.buffer`); in a module of its own so that neither imports
the other for it.

May touch: nothing; pure values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kafka_actors.protocol.records.decode import DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES
from kafka_actors.protocol.subscription import IsolationLevel

if TYPE_CHECKING:
    from kafka_actors.config import ConsumerConfig

__all__ = ["FetchConfig"]


@dataclass(frozen=True, slots=True)
class FetchConfig:
    """The consumer settings fetching uses (Java names, Java defaults)."""

    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    fetch_max_wait_ms: int = 500
    max_partition_fetch_bytes: int = 1_048_576
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    client_rack: str = ""
    check_crcs: bool = True
    retry_backoff_ms: int = 100
    metadata_max_age_ms: int = 300_000
    max_poll_records: int = 500
    #: Bound of the raw bytes buffered ahead of the application; None: fetch.max.bytes.
    prefetch_buffer_bytes: int | None = None
    #: Timeout of each Fetch request; None: the NetworkActor's request.timeout.ms.
    request_timeout_ms: int | None = None
    #: Fetch a partition with one buffered response again from where its data ends (see the
    #: module docstring); False: Java's rule (no fetch while data is buffered). The consumer
    #: turns it on (:meth:`from_consumer_config`).
    fetch_ahead: bool = False
    #: Bound on one batch's decompressed records (``max.decompressed.batch.bytes``).
    max_decompressed_batch_bytes: int = DEFAULT_MAX_DECOMPRESSED_BATCH_BYTES

    @property
    def buffer_limit(self) -> int:
        return self.prefetch_buffer_bytes or self.fetch_max_bytes

    @classmethod
    def from_consumer_config(
        cls,
        config: ConsumerConfig,
        *,
        prefetch_buffer_bytes: int | None = None,
        fetch_ahead: bool = True,
    ) -> FetchConfig:
        return cls(
            fetch_min_bytes=config.fetch_min_bytes,
            fetch_max_bytes=config.fetch_max_bytes,
            fetch_max_wait_ms=config.fetch_max_wait_ms,
            max_partition_fetch_bytes=config.max_partition_fetch_bytes,
            isolation_level=(
                IsolationLevel.READ_COMMITTED
                if config.isolation_level.lower() == "read_committed"
                else IsolationLevel.READ_UNCOMMITTED
            ),
            client_rack=config.client_rack,
            check_crcs=config.check_crcs,
            retry_backoff_ms=config.retry_backoff_ms,
            metadata_max_age_ms=config.metadata_max_age_ms,
            max_poll_records=config.max_poll_records,
            prefetch_buffer_bytes=prefetch_buffer_bytes,
            fetch_ahead=fetch_ahead,
            max_decompressed_batch_bytes=config.max_decompressed_batch_bytes,
        )
