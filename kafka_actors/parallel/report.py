"""What the parallel front ends say about their work: failure log lines, ``health()`` and
``metrics()`` from a scheduler snapshot. Shared by :class:`~.consumer.ParallelConsumer`
(threads) and :class:`~.aio.AsyncParallelConsumer` (asyncio), so both report alike.

Owns: :func:`report_failure`, :func:`log_assigned`, :func:`health_of`, :func:`metrics_of`.
May touch: the scheduler's values (:mod:`.messages`, :mod:`.scheduler`), structlog loggers;
no state of its own.
"""

from __future__ import annotations

from typing import Any

from kafka_actors.errors import PartitionStoppedError
from kafka_actors.parallel.messages import (
    DeadLetterDue,
    FailureDecision,
    HealthState,
    ParallelHealth,
    PartitionStopped,
    PauseReason,
    RecordSkipped,
    RetryScheduled,
)
from kafka_actors.parallel.scheduler import AssignResult, WorkSnapshot
from kafka_actors.protocol.records.decode import ConsumerRecord

__all__ = ["health_of", "log_assigned", "metrics_of", "report_failure"]


def report_failure(
    log: Any,
    decision: FailureDecision,
    record: ConsumerRecord,
    error: BaseException,
    dead_letter_topic: str | None,
) -> None:
    """Log a failed attempt's decision once: a retry, a record failed for good (then
    dead-lettered), a stopped partition, a skipped record."""
    log = log.bind(
        topic=record.topic, partition=record.partition, offset=record.offset, key=record.key
    )
    if isinstance(decision, RetryScheduled):
        log.warning(
            "record_retry",
            attempt=decision.attempt,
            backoff_ms=decision.backoff_ms,
            exception_type=type(error).__name__,
            error=str(error),
        )
    elif isinstance(decision, DeadLetterDue):
        log.warning(
            "record_failed",
            attempts=decision.dead_letter.attempts,
            exception_type=type(error).__name__,
            error=str(error),
            dead_letter_topic=dead_letter_topic,
        )
    elif isinstance(decision, PartitionStopped):
        stopped = PartitionStoppedError(
            f"partition stopped: the record at offset {record.offset} failed "
            f"{decision.stopped.attempts} times and there is no dead-letter topic",
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
        )
        stopped.__cause__ = error
        log.error(
            "partition_stopped",
            attempts=decision.stopped.attempts,
            exception_type=type(error).__name__,
            error=str(error),
            reason=str(stopped),
        )
    elif isinstance(decision, RecordSkipped):
        log.error(
            "record_skipped",
            attempts=decision.attempts,
            exception_type=type(error).__name__,
            error=str(error),
        )


def log_assigned(log: Any, result: AssignResult) -> None:
    """Log a partition taken, with what its committed map said."""
    tp = result.partition
    if result.map_error is not None:
        log.warning(
            "offset_map_ignored",
            topic=tp.topic,
            partition=tp.partition,
            error=str(result.map_error),
        )
    log.info(
        "partition_assigned",
        topic=tp.topic,
        partition=tp.partition,
        committed=result.committed,
        inherited_completed=result.inherited_completed,
    )


def health_of(
    snap: WorkSnapshot,
    *,
    now_ms: int,
    last_poll_ms: int | None,
    error: BaseException | None,
    closed: bool,
    revoking: bool,
) -> ParallelHealth:
    """``health()`` of a front end (``docs/parallel.md``)."""
    if error is not None:
        state = HealthState.FAILED
    elif closed:
        state = HealthState.CLOSED
    elif last_poll_ms is None:
        state = HealthState.STARTING
    elif revoking:
        state = HealthState.REBALANCING
    elif snap.stopped or any(p.reason is PauseReason.OFFSET_MAP_FULL for p in snap.paused):
        state = HealthState.STALLED
    else:
        state = HealthState.RUNNING
    return ParallelHealth(
        state=state,
        assignment=snap.assignment,
        last_poll_age_ms=None if last_poll_ms is None else now_ms - last_poll_ms,
        oldest_in_flight=snap.oldest_in_flight,
        in_flight=snap.in_flight,
        retrying=snap.retrying,
        dead_letters_sent=snap.counters.dead_lettered,
        paused=snap.paused,
        stopped=snap.stopped,
        error=None if error is None else repr(error),
    )


def metrics_of(
    snap: WorkSnapshot,
    *,
    now_ms: int,
    last_poll_ms: int | None,
    commits: int,
    commit_failures: int,
    offset_metadata_max_bytes: int,
) -> dict[str, float]:
    """``metrics()`` of a front end: Java-style names (``docs/parallel.md``)."""
    c = snap.counters
    oldest = snap.oldest_in_flight
    return {
        "assigned-partitions": float(len(snap.assignment)),
        "records-received-total": float(c.received),
        "records-skipped-completed-total": float(c.skipped_completed),
        "records-started-total": float(c.started),
        "records-completed-total": float(c.succeeded),
        "records-failed-attempts-total": float(c.failed_attempts),
        "records-retried-total": float(c.retried),
        "records-exhausted-total": float(c.exhausted),
        "records-dead-lettered-total": float(c.dead_lettered),
        "dead-letter-send-failures-total": float(c.dead_letter_failures),
        "records-abandoned-total": float(c.abandoned),
        "records-in-flight-abandoned-total": float(c.abandoned_in_flight),
        "records-in-flight": float(snap.in_flight),
        "records-running": float(snap.running),
        "records-retrying": float(snap.retrying),
        "records-buffered": float(snap.buffered),
        "oldest-in-flight-age-ms": float(oldest.age_ms) if oldest else 0.0,
        "partitions-paused": float(len(snap.paused)),
        "partitions-stopped": float(len(snap.stopped)),
        "offset-map-full-total": float(c.offset_map_full),
        "offset-map-size-max": float(max(snap.committed_map_bytes.values(), default=0)),
        "offset-metadata-max-bytes": float(offset_metadata_max_bytes),
        "commit-total": float(commits),
        "commit-failed-total": float(commit_failures),
        "last-poll-seconds-ago": (
            -1.0 if last_poll_ms is None else (now_ms - last_poll_ms) / 1000.0
        ),
    }
