"""The values of parallel processing: options, what the scheduler hands out, what a failure
turns into, and the health report. Frozen dataclasses (and :class:`Task`, a named tuple: one
is made per record) and string enums, in one place.

Owns: :class:`Ordering`, :class:`FailurePolicy`, :class:`PauseReason`, :class:`HealthState`,
:class:`Task`, :class:`DeadLetter`, the failure decisions (:class:`RetryScheduled`,
:class:`DeadLetterDue`, :class:`PartitionStopped`, :class:`RecordSkipped`), and the health
values (:class:`InFlightRecord`, :class:`PausedPartition`, :class:`StoppedPartition`,
:class:`ParallelHealth`). May touch: the protocol's value types only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord

__all__ = [
    "DeadLetter",
    "DeadLetterDue",
    "FailureDecision",
    "FailurePolicy",
    "HealthState",
    "InFlightRecord",
    "Ordering",
    "ParallelHealth",
    "PartitionStopped",
    "PauseReason",
    "PausedPartition",
    "RecordSkipped",
    "RetryScheduled",
    "StoppedPartition",
    "Task",
]


class Ordering(enum.StrEnum):
    """What may run at the same time.

    * ``KEY``: records of one key one at a time, in offset order; different keys (and
      records without a key: each is its own key) concurrently;
    * ``PARTITION``: one record of a partition at a time, in offset order (a plain poll loop's
      order, with partitions concurrently);
    * ``UNORDERED``: any record at any time (bounded by the in-flight limits).
    """

    KEY = "key"
    PARTITION = "partition"
    UNORDERED = "unordered"


class FailurePolicy(enum.StrEnum):
    """What happens to a record that failed ``max_attempts`` times when there is no
    dead-letter topic.

    * ``STOP`` (the default): its partition starts nothing more and its commit stays before the
      record (nothing is lost; the next owner, or a restart, tries it again); ``health()``
      reports the partition as stopped and the state ``stalled``;
    * ``SKIP``: the record counts as completed (it is lost on purpose) and is counted in
      ``records-abandoned-total``.
    """

    STOP = "stop"
    SKIP = "skip"


class PauseReason(enum.StrEnum):
    """Why a partition takes no new work or is not fetched."""

    #: Records received and not started reached ``max_buffered_per_partition``: not fetched.
    BUFFER_FULL = "buffer_full"
    #: Offsets above the committed one reached ``max_uncommitted_per_partition``: not fetched.
    WINDOW_FULL = "window_full"
    #: The offset map could outgrow ``offset.metadata.max.bytes``: no record starts until
    #: records complete and the map shrinks.
    OFFSET_MAP_FULL = "offset_map_full"
    #: A record failed for good under ``on_failure="stop"``.
    STOPPED = "stopped"
    #: The partition is being revoked: no record starts; those in flight are awaited.
    REVOKING = "revoking"


class HealthState(enum.StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    REBALANCING = "rebalancing"
    #: A partition is stopped (a failed record) or cannot start work (offset map full).
    STALLED = "stalled"
    #: The consumer failed (a fatal error, or a handler pool that cannot run).
    FAILED = "failed"
    CLOSED = "closed"


class Task(NamedTuple):
    """Run the handler on ``record``: attempt ``attempt`` (1 for the first).

    A named tuple, not a frozen dataclass as the other values here: one is made per record
    handed out, and a frozen dataclass's ``__init__`` (``object.__setattr__`` per field)
    costs about twice a tuple's making (as ``ConsumerRecord``, for the same reason)."""

    work_id: int
    record: ConsumerRecord
    attempt: int
    #: A record of its key (under partition ordering: of its partition) waited behind it
    #: when it started: its success lets that one start (a worker may run it next).
    followed: bool = False
    #: The next record of a *run* (records of one key started together for one worker,
    #: :meth:`~kafka_actors.parallel.scheduler.WorkScheduler.succeeded_next`): the worker runs
    #: it once this one succeeded, without reporting this success (the outcome of a later
    #: record of the run, or of the one where the worker stops, settles the ones before it).
    run_next: Task | None = None
    #: The scheduler's :attr:`~kafka_actors.parallel.scheduler.WorkScheduler.interruptions`
    #: when the run started: when it has changed, the worker stops the run (a partition began
    #: revoking, was removed or stopped meanwhile).
    interruptions: int = 0


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Produce ``record`` to the dead-letter topic: it failed ``attempts`` times, the last
    with ``error_type``: ``error_message``. ``send`` counts the produce attempts (1 first)."""

    work_id: int
    record: ConsumerRecord
    attempts: int
    error_type: str
    error_message: str
    send: int


@dataclass(frozen=True, slots=True)
class RetryScheduled:
    work_id: int
    attempt: int
    backoff_ms: int
    retry_at_ms: int


@dataclass(frozen=True, slots=True)
class DeadLetterDue:
    dead_letter: DeadLetter


@dataclass(frozen=True, slots=True)
class PartitionStopped:
    stopped: StoppedPartition


@dataclass(frozen=True, slots=True)
class RecordSkipped:
    partition: TopicPartition
    offset: int
    attempts: int


FailureDecision = RetryScheduled | DeadLetterDue | PartitionStopped | RecordSkipped


@dataclass(frozen=True, slots=True)
class InFlightRecord:
    """A record in flight: its place, key, age since its first attempt and attempts so far."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    age_ms: int
    attempts: int


@dataclass(frozen=True, slots=True)
class PausedPartition:
    partition: TopicPartition
    reason: PauseReason


@dataclass(frozen=True, slots=True)
class StoppedPartition:
    """A partition stopped at ``offset`` by a record that failed ``attempts`` times."""

    partition: TopicPartition
    offset: int
    attempts: int
    error_type: str
    error_message: str


@dataclass(frozen=True, slots=True)
class ParallelHealth:
    """What ``ParallelConsumer.health()`` returns (``docs/parallel.md``)."""

    state: HealthState
    assignment: frozenset[TopicPartition]
    #: Milliseconds since the last poll returned (None: no poll yet).
    last_poll_age_ms: int | None
    oldest_in_flight: InFlightRecord | None
    in_flight: int
    retrying: int
    dead_letters_sent: int
    paused: tuple[PausedPartition, ...]
    stopped: tuple[StoppedPartition, ...]
    error: str | None = None
