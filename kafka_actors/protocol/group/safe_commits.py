"""Rebalance-safe commits, the pure bookkeeping (zio-kafka's ``rebalanceSafeCommits``).

Owns: :class:`SafeCommitTracker`: per partition, the offset after the last record handed out
to the application and the last offset the group committed for it; and the revocations that
wait until, for each of their partitions, the committed offset has reached the handed-out one
(or their deadline has passed). A revocation acknowledged only then moves no record that the
application processed without committing it: the next owner starts where this one stopped.

May touch: nothing. Pure: no threads, no clock (time is ``now_ms`` from the caller), no I/O.
The thread-safe shell with timers is :mod:`kafka_actors.actors.safe_commits`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition

__all__ = ["Outstanding", "SafeCommitTracker", "Settled"]

#: Per partition: (offset after the last record handed out, last committed offset or None).
Outstanding = dict[TopicPartition, tuple[int, int | None]]


@dataclass(frozen=True, slots=True)
class Settled:
    """A waiting revocation is over: ``expired`` when its deadline passed first, with what was
    still ``outstanding`` then (empty when every handed-out record was committed)."""

    key: Hashable
    partitions: frozenset[TopicPartition]
    expired: bool
    outstanding: Outstanding
    waited_ms: int


@dataclass(slots=True)
class _Waiter:
    key: Hashable
    partitions: frozenset[TopicPartition]
    started_ms: int
    deadline_ms: int


class SafeCommitTracker:
    """Handed-out vs committed offsets, and revocations waiting for them to meet."""

    def __init__(self) -> None:
        self._handed_out: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._waiters: dict[Hashable, _Waiter] = {}

    # -- inputs ------------------------------------------------------------------------------

    def handed_out(self, tp: TopicPartition, next_offset: int) -> None:
        """Records of ``tp`` up to ``next_offset - 1`` reached the application."""
        if next_offset > self._handed_out.get(tp, -1):
            self._handed_out[tp] = next_offset

    def committed(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int], now_ms: int
    ) -> list[Settled]:
        """The group stored ``offsets``; returns the revocations this settles."""
        for tp, value in offsets.items():
            offset = value.offset if isinstance(value, OffsetAndMetadata) else int(value)
            self._committed[tp] = offset
        return self._settle(now_ms, expired_only=False)

    def await_settled(
        self, key: Hashable, partitions: Iterable[TopicPartition], now_ms: int, deadline_ms: int
    ) -> Settled | None:
        """A revocation of ``partitions`` waits: settled now (returned), or registered under
        ``key`` until :meth:`committed` or :meth:`expire` settles it."""
        waiter = _Waiter(key, frozenset(partitions), now_ms, deadline_ms)
        if not self.outstanding(waiter.partitions):
            return self._finish(waiter, now_ms, expired=False)
        self._waiters[key] = waiter
        return None

    def expire(self, now_ms: int) -> list[Settled]:
        """Revocations whose deadline has passed (and any settled meanwhile)."""
        return self._settle(now_ms, expired_only=True)

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """The partitions left this member (lost, or revoked without waiting)."""
        for tp in partitions:
            self._handed_out.pop(tp, None)
            self._committed.pop(tp, None)

    # -- reading -----------------------------------------------------------------------------

    def outstanding(self, partitions: Iterable[TopicPartition]) -> Outstanding:
        """Partitions whose handed-out records are not all committed."""
        out: Outstanding = {}
        for tp in partitions:
            handed = self._handed_out.get(tp)
            if handed is None:
                continue
            committed = self._committed.get(tp)
            if committed is None or committed < handed:
                out[tp] = (handed, committed)
        return out

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def next_deadline_ms(self) -> int | None:
        return min((w.deadline_ms for w in self._waiters.values()), default=None)

    # -- internals ---------------------------------------------------------------------------

    def _settle(self, now_ms: int, *, expired_only: bool) -> list[Settled]:
        done: list[Settled] = []
        for key, waiter in list(self._waiters.items()):
            left = self.outstanding(waiter.partitions)
            if not left:
                del self._waiters[key]
                done.append(self._finish(waiter, now_ms, expired=False))
            elif now_ms >= waiter.deadline_ms:
                del self._waiters[key]
                done.append(self._finish(waiter, now_ms, expired=True, left=left))
            elif expired_only:
                continue
        return done

    def _finish(
        self, waiter: _Waiter, now_ms: int, *, expired: bool, left: Outstanding | None = None
    ) -> Settled:
        self.forget(waiter.partitions)
        return Settled(
            waiter.key, waiter.partitions, expired, dict(left or {}), now_ms - waiter.started_ms
        )
