"""The Thespian bridge's protocol: every message between a bridge, its subscriber and its users.

Owns: one frozen dataclass per message kind. All of them pickle (records are
:class:`~kafka_actors.protocol.records.ConsumerRecord` named tuples, partitions
:class:`~kafka_actors.protocol.messages.TopicPartition` dataclasses, errors travel as
:class:`ErrorInfo` values, never as exception objects), so they cross process boundaries under
``multiprocTCPBase``. Actor addresses are Thespian's own ``ActorAddress`` values.

The stream follows Reactive Streams: the bridge sends :class:`Subscribed` (onSubscribe), the
subscriber signals demand with :class:`Request` (a number of *records*), the bridge sends
:class:`RecordBatch` messages whose sizes never exceed the outstanding demand.

Flow control: besides the demand, the bridge keeps at most ``Configure.max_in_flight_batches``
record batches in flight to its subscriber, i.e. sent and not yet acknowledged by the
subscriber's ``Request.handled`` or :class:`Handled` (cumulative: the ``seq`` of the last batch
the subscriber handled). Thespian's TCP transport (``asyncTransportBase``) runs 20 transmits of
an actor process at once and queues the rest; from 950 queued the sending actor blocks inside
``send`` until the queue drains (it handles no message meanwhile), beyond 1050 new sends fail,
and a transmit not done within the transmit period (five minutes) fails: all without
telling the sending actor. The window keeps the bridge far below those whatever the demand.
The default (16) is also below the 20 transmits that run at once, so batches go straight to
sockets, none waits in that queue, and the subscriber's transport takes them all in between
two messages it handles: a batch waits about one batch's processing time, far from the
transmit period. A subscriber that never acknowledges receives at most that many batches.
:meth:`Commit(offsets=None) <Commit>` commits acknowledged positions.

Failures: a subscriber that raises on a :class:`RecordBatch` (Thespian tries it again, then
returns it to the bridge as ``PoisonMessage``) does not lose its records: the bridge treats
that batch and every later unacknowledged one as not delivered, seeks back to their first
offsets, sets the demand to zero and sends :class:`BatchRejected`. A request the bridge raises
on is answered with a typed error (:class:`CommitFailed` for a Commit, else
:class:`StreamError`), never with silence.

Ordering: Thespian does not promise that two messages from one actor to another arrive in the
order sent (``multiprocTCPBase`` keeps up to 20 transmits in flight at once, each on its own
connection, and was seen delivering a later batch first). Every message of the stream
to the subscriber (Subscribed, RecordBatch, Partitions*, StreamError) therefore carries
``seq``, 1, 2, ... per subscriber, and the subscriber handles them in that order
(:class:`~kafka_actors.thespian.subscriber.StreamSubscriber` does). ``seq`` 0 means outside
the stream (the copy of Subscribed sent to the requester).

May touch: nothing (plain values).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_actors.errors import KafkaError
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.records import ConsumerRecord, TimestampType

__all__ = [
    "Assign",
    "BatchRejected",
    "BridgeStats",
    "Close",
    "Closed",
    "Commit",
    "CommitFailed",
    "CommitOk",
    "Configure",
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

ActorAddress = Any  # thespian.actors.ActorAddress (picklable)


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
class Configure:
    """Create the bridge's consumer from Kafka configuration keys (``bootstrap.servers``...).

    ``poll_timeout_ms``: how long one ``poll()`` may block the bridge's message loop while the
    subscriber has demand (default 0: never); ``idle_interval_ms``: how often the bridge polls
    when records do not flow (no demand, or the last poll was empty). Replied with
    :class:`Configured` or :class:`StreamError`. ``max_batch_records``: the most records in
    one :class:`RecordBatch` (a tick polls several times, up to the demand, to fill one: under
    ``multiprocTCPBase`` each message costs a transmit). ``max_in_flight_batches``: the most
    batches sent to the subscriber and not yet acknowledged (see the module docstring: Flow
    control; 1 .. 512, far below Thespian's queued-transmit limits; above 20 batches queue in
    Thespian's transport, and the window times a batch's processing time must stay well
    under its transmit period, five minutes)."""

    config: Mapping[str, object]
    poll_timeout_ms: int = 0
    idle_interval_ms: int = 20
    max_batch_records: int = 2000
    commit_timeout_ms: int | None = None  # default: default.api.timeout.ms
    max_in_flight_batches: int = 16
    #: A :class:`~kafka_actors.supervisors.FaultInjector` for tests, passed to the consumer as
    #: ``faults=``. In-process system bases only (``simpleSystemBase``): an injector holds a
    #: lock and predicates, so it cannot travel to another process.
    faults: Any = None


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
    came back as ``PoisonMessage`` (the subscriber raised on it). It and every later batch
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

    records: tuple[ConsumerRecord, ...]
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
    rejected_batches: int = 0  # record batches returned as PoisonMessage
