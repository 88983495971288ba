"""Rebalance-safe commits, the thread-safe shell shared by the sync and asyncio consumers.

Owns: :class:`RebalanceSafeCommits`, the :class:`~kafka_actors.protocol.group.safe_commits.
SafeCommitTracker` of one consumer behind a lock, with the timer that bounds each wait by
``rebalance.safe.commits.max.duration.ms``. Who feeds it:

* the consumer core's hand-out bookkeeping (:class:`~kafka_actors.core.HandOut`, created
  with the tracker by :class:`~kafka_actors.core.ConsumerCore`) reports records handed out
  to the application (:meth:`RebalanceSafeCommits.handed_out`): what ``KafkaConsumer.poll``
  returns, what ``AsyncKafkaConsumer.getmany`` / ``getone`` return;
* the commit actor reports every successful commit, whoever asked for it (sync, async,
  auto-commit, the commit before a revocation, on close): :meth:`committed`;
* the facade, once the listener acknowledged a revocation, asks :meth:`after_committed` to
  delay the acknowledgement to the membership manager until the revoked partitions' handed-out
  records are committed, or the maximum duration passes (then it proceeds and logs what was
  left uncommitted: those records may be processed again by the next owner).

Meanwhile the revoked partitions are pending revocation, so no further record of them is
handed out (the fetch actor and the front ends skip partitions that are not fetchable).

May touch: the scheduler and clock of the shared context (timers), the pure tracker.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from kafka_actors.clock import Cancellable, Clock, Scheduler
from kafka_actors.log import get_logger
from kafka_actors.protocol.group.safe_commits import SafeCommitTracker, Settled
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition

__all__ = ["RebalanceSafeCommits"]


class RebalanceSafeCommits:
    """See the module docstring. Every method may be called from any thread."""

    def __init__(
        self,
        clock: Clock,
        scheduler: Scheduler,
        max_duration_ms: int,
        *,
        client_id: str = "",
        group_id: str | None = None,
    ) -> None:
        self._clock = clock
        self._scheduler = scheduler
        self.max_duration_ms = max_duration_ms
        self._tracker = SafeCommitTracker()
        self._lock = threading.Lock()
        self._continuations: dict[int, tuple[Callable[[], None], Cancellable | None]] = {}
        self._keys = itertools.count(1)
        self._log = get_logger("safe_commits", client_id=client_id, group_id=group_id)

    def _now_ms(self) -> int:
        return int(self._clock.monotonic() * 1000)

    def handed_out(self, tp: TopicPartition, next_offset: int) -> None:
        with self._lock:
            self._tracker.handed_out(tp, next_offset)

    def handed_out_batch(self, last_offsets: Mapping[TopicPartition, int]) -> None:
        """``last_offsets``: per partition, the offset of the last record handed out."""
        with self._lock:
            for tp, offset in last_offsets.items():
                self._tracker.handed_out(tp, offset + 1)

    def committed(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int]) -> None:
        if not offsets:
            return
        with self._lock:
            done = self._tracker.committed(offsets, self._now_ms())
        self._run(done)

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            self._tracker.forget(partitions)

    def outstanding(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, Any]:
        with self._lock:
            return dict(self._tracker.outstanding(partitions))

    def after_committed(
        self, partitions: Iterable[TopicPartition], then: Callable[[], None]
    ) -> None:
        """Run ``then`` (on any thread) once the handed-out records of ``partitions`` are
        committed, or after the maximum duration; at once when nothing is outstanding."""
        wanted = frozenset(partitions)
        now = self._now_ms()
        with self._lock:
            key = next(self._keys)
            settled = self._tracker.await_settled(key, wanted, now, now + self.max_duration_ms)
            if settled is None:
                outstanding = self._tracker.outstanding(wanted)
                timer = self._scheduler.call_later(self.max_duration_ms / 1000.0, self._expire)
                self._continuations[key] = (then, timer)
        if settled is not None:
            then()
            return
        self._log.info(
            "revocation_waits_for_commits",
            partitions=sorted(str(tp) for tp in wanted),
            outstanding={str(tp): v for tp, v in outstanding.items()},
            max_duration_ms=self.max_duration_ms,
        )

    def _expire(self) -> None:
        with self._lock:
            done = self._tracker.expire(self._now_ms())
        self._run(done)

    def _run(self, done: list[Settled]) -> None:
        for settled in done:
            with self._lock:
                entry = self._continuations.pop(cast(int, settled.key), None)
            if entry is None:
                continue
            then, timer = entry
            if timer is not None:
                timer.cancel()
            if settled.expired:
                self._log.warning(
                    "revocation_commit_wait_expired",
                    partitions=sorted(str(tp) for tp in settled.partitions),
                    uncommitted={str(tp): v for tp, v in settled.outstanding.items()},
                    waited_ms=settled.waited_ms,
                )
            else:
                self._log.info(
                    "revocation_commits_settled",
                    partitions=sorted(str(tp) for tp in settled.partitions),
                    waited_ms=settled.waited_ms,
                )
            try:
                then()
            except Exception:
                self._log.exception("revocation_continuation_failed")

    @property
    def waiting(self) -> int:
        with self._lock:
            return self._tracker.waiting
