"""The events a share consumer's fetch manager publishes (KIP-932): acknowledgement results
and the completions of commitSync / close. Kept apart from :mod:`.fetch` so that the routing
table knows them without importing the share fetch manager (a consumer of a classic or
KIP-848 group never loads it). Pure values; no behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kafka_actors.errors import KafkaError
from kafka_actors.protocol.messages import TopicPartition

__all__ = [
    "AckResult",
    "AcknowledgementsCommitted",
    "ShareCloseCompleted",
    "ShareCommitCompleted",
]


@dataclass(frozen=True, slots=True)
class AckResult:
    """What became of the acknowledgements of one partition: the record offsets they settled
    and the error (None: accepted by the broker)."""

    partition: TopicPartition
    offsets: frozenset[int]
    error: KafkaError | None


@dataclass(frozen=True, slots=True)
class AcknowledgementsCommitted:
    """Acknowledgements were answered (piggybacked or committed): one result per partition,
    for the acknowledgement-commit callback."""

    results: tuple[AckResult, ...]


@dataclass(frozen=True, slots=True)
class ShareCommitCompleted:
    """The commit ``commit_id`` is over: per partition, None or the error."""

    commit_id: int
    results: Mapping[TopicPartition, KafkaError | None]


@dataclass(frozen=True, slots=True)
class ShareCloseCompleted:
    """Every share session was closed (or could not be: no broker answered in time)."""
