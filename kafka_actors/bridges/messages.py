"""The protocol every bridge speaks with the actors of a service: frozen dataclass messages.

Owns: one frozen dataclass per message kind shared by the Thespian bridge
(:mod:`kafka_actors.thespian`) and the pykka bridge (:mod:`kafka_actors.pykka`); each bridge
adds what its runtime needs (Thespian: ``Configure`` and the ``PoisonMessage`` returns; pykka:
``Call``, the reply address Thespian gives implicitly as the sender). All of them pickle
(records are :class:`~kafka_actors.protocol.records.decode.ConsumerRecord` named tuples, partitions
:class:`~kafka_actors.protocol.messages.TopicPartition` dataclasses, errors travel as
:class:`ErrorInfo` values, never as exception objects), so they cross process boundaries under
Thespian's ``multiprocTCPBase``.

The stream follows Reactive Streams: the bridge sends :class:`Subscribed` (onSubscribe), the
subscriber signals demand with :class:`Request` (a number of *records*), the bridge sends
:class:`RecordBatch` messages whose sizes never exceed the outstanding demand. Each stream
message carries ``seq`` (1, 2, ... per subscriber; 0 means outside the stream); a subscriber
acknowledges the batches it handled with :class:`Handled` (or ``Request.handled``), which
frees the bridge's window of batches in flight and makes their positions what
``Commit(offsets=None)`` commits. Rebalances arrive as :class:`PartitionsRevoked` /
:class:`PartitionsAssigned` / :class:`PartitionsLost`, each answered by
:class:`RebalanceAck`; the reconciliation waits for that answer, and commits sent before it
are still the member's.

May touch: nothing (plain values).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_actors.errors import KafkaError
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord, TimestampType

__all__ = [
    "Assign",
    "BatchRejected",
    "BridgeStats",
    "Close",
    "Closed",
    "Commit",
    "CommitFailed",
    "CommitOk",
    "Configured",
    "ErrorInfo",
    "GetStats",
    "Handled",
    "PartitionsAssigned",
    "PartitionsLost",
    "PartitionsRevoked",
    "RebalanceAck",
    "RecordBatch",
    "Request",
    "StreamError",
    "Subscribe",
    "Subscribed",
]

ActorAddress = Any  # a Thespian ActorAddress (picklable) or a pykka ActorRef


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """An error as a picklable value: the class name, its message, whether a retry may work."""

    type: str
    message: str
    retriable: bool

    @classmethod
    def of(cls, error: BaseException) -> ErrorInfo:
        retriable = isinstance(error, KafkaError) and error.retriable
        return cls(type(error).__name__, str(error), retriable)

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"


# -- lifecycle -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Configured:
    client_id: str
    group_id: str | None


@dataclass(frozen=True, slots=True)
class Close:
    """Close the stream and the consumer. With group-assigned partitions the subscriber first
    gets a :class:`PartitionsRevoked` of all of them and may commit before acknowledging (up
    to ``timeout_s``). Replied with :class:`Closed`."""

    timeout_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Closed:
    pass


# -- subscription and the stream ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Subscribe:
    """Join the group for ``topics`` (or a ``pattern``) and stream records to ``subscriber``."""

    topics: tuple[str, ...]
    subscriber: ActorAddress
    pattern: str | None = None


@dataclass(frozen=True, slots=True)
class Assign:
    """Manual assignment of ``partitions``; stream records to ``subscriber``."""

    partitions: tuple[TopicPartition, ...]
    subscriber: ActorAddress


@dataclass(frozen=True, slots=True)
class Subscribed:
    """onSubscribe: sent to the subscriber (and to the sender of Subscribe/Assign). The
    subscriber's demand starts at zero."""

    topics: tuple[str, ...] = ()
    partitions: tuple[TopicPartition, ...] = ()
    pattern: str | None = None
    seq: int = 0  # position in the stream (1, 2, ...); see the module docstring


@dataclass(frozen=True, slots=True)
class Request:
    """Subscriber → bridge: ``n`` more records may be sent (demand adds up). ``handled``
    (when > 0) also acknowledges every record batch up to that ``seq`` (see :class:`Handled`)."""

    n: int
    handled: int = 0


@dataclass(frozen=True, slots=True)
class Handled:
    """Subscriber → bridge: every :class:`RecordBatch` up to ``seq`` has been handled
    (cumulative). Frees the bridge's in-flight window; their positions become what
    ``Commit(offsets=None)`` commits."""

    seq: int


@dataclass(frozen=True, slots=True)
class BatchRejected:
    """Bridge → subscriber, outside the stream (``seq`` 0): the record batch ``failed_seq``
    failed in the subscriber (Thespian: it came back as ``PoisonMessage``; pykka: the
    subscriber sent :class:`BatchFailed`). It and every later batch
    not yet acknowledged are void: the subscriber drops record batches numbered below
    ``resume_seq``. The bridge sought each partition of them back to ``rewound`` (their first
    offsets; none of it counts as delivered or committable) and set the demand to zero: the
    next :class:`Request` redelivers from there."""

    failed_seq: int
    resume_seq: int
    rewound: Mapping[TopicPartition, int]
    error: ErrorInfo


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """Bridge → subscriber: records in offset order per partition, never more than requested.
    ``positions`` is the next offset after the last record of each partition in the batch."""

    records: tuple[ConsumerRecord[Any, Any], ...]
    positions: Mapping[TopicPartition, int] = field(default_factory=dict)
    seq: int = 0  # position in the stream (1, 2, ...); see the module docstring

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled in columns (one tuple per field, timestamp types as ints): about 4x
        # cheaper than record by record, which is what crossing processes costs.
        columns: list[tuple[Any, ...]] = list(zip(*self.records, strict=True))
        if columns:
            columns[4] = tuple(map(int, columns[4]))
        return (_batch_from_columns, (tuple(columns), dict(self.positions), self.seq))


_TIMESTAMP_TYPES = {t.value: t for t in TimestampType}


def _batch_from_columns(
    columns: tuple[tuple[Any, ...], ...], positions: dict[TopicPartition, int], seq: int
) -> RecordBatch:
    if not columns:
        return RecordBatch((), positions, seq)
    types = _TIMESTAMP_TYPES
    make = ConsumerRecord._make
    records = tuple(
        make((t, p, o, ts, types[tt], k, v, h, e))
        for t, p, o, ts, tt, k, v, h, e in zip(*columns, strict=True)
    )
    return RecordBatch(records, positions, seq)


@dataclass(frozen=True, slots=True)
class StreamError:
    """Bridge → subscriber (or the sender of a failed request): the consumer raised. With
    ``fatal`` the bridge's consumer cannot continue; the stream has ended."""

    error: ErrorInfo
    fatal: bool = False
    seq: int = 0  # position in the stream (1, 2, ...); see the module docstring


# -- commits ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Commit:
    """Commit ``offsets`` (the next offset to read per partition), retried until the commit
    timeout. ``offsets`` None: the positions the bridge has *delivered* to the subscriber (not
    those the consumer fetched ahead). Replied with :class:`CommitOk` / :class:`CommitFailed`
    carrying the same ``request_id``."""

    request_id: int
    offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None


@dataclass(frozen=True, slots=True)
class CommitOk:
    request_id: int
    offsets: Mapping[TopicPartition, OffsetAndMetadata]


@dataclass(frozen=True, slots=True)
class CommitFailed:
    request_id: int
    error: ErrorInfo


# -- rebalance notifications ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionsRevoked:
    """onPartitionsRevoked: the bridge sends no more records of ``partitions`` (those buffered
    and not yet delivered are dropped). The revocation completes when the subscriber sends
    :class:`RebalanceAck` with ``rebalance_id``, or when the rebalance timeout
    (``max.poll.interval.ms``) passes. Commits sent before the ack are still the member's."""

    partitions: frozenset[TopicPartition]
    rebalance_id: int
    seq: int = 0  # position in the stream (1, 2, ...); see the module docstring


@dataclass(frozen=True, slots=True)
class PartitionsAssigned:
    """onPartitionsAssigned: records of ``partitions`` flow after the ack."""

    partitions: frozenset[TopicPartition]
    rebalance_id: int
    seq: int = 0  # position in the stream (1, 2, ...); see the module docstring


@dataclass(frozen=True, slots=True)
class PartitionsLost:
    """onPartitionsLost: the partitions are already owned by others; do not commit them."""

    partitions: frozenset[TopicPartition]
    rebalance_id: int
    seq: int = 0  # position in the stream (1, 2, ...); see the module docstring


@dataclass(frozen=True, slots=True)
class RebalanceAck:
    """Subscriber → bridge: the callback ``rebalance_id`` is done (``error``: it failed)."""

    rebalance_id: int
    error: str | None = None


# -- observation -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetStats:
    pass


@dataclass(frozen=True, slots=True)
class BridgeStats:
    """What the bridge holds: ``buffered_*`` are records polled and not yet delivered (bounded
    by ``max.poll.records``); ``consumer_buffered_bytes`` the consumer's prefetch buffer;
    ``rss_bytes`` the bridge process's resident set."""

    demand: int
    buffered_records: int
    buffered_bytes: int
    delivered_records: int
    polls: int
    paused: tuple[TopicPartition, ...]
    assignment: tuple[TopicPartition, ...]
    consumer_buffered_bytes: int
    rss_bytes: int
    pending_rebalance_acks: int
    pending_commits: int
    in_flight_batches: int = 0  # record batches sent and not acknowledged
    rejected_batches: int = 0  # record batches that failed in the subscriber
