"""When the share fetch manager may send again after a failure: :class:`SharePacing`.

Owns: one :class:`~kafka_actors.protocol.request_state.RequestState` per broker (a ShareFetch
or ShareAcknowledge that failed: disconnect, timeout, a top-level error code) and one per
partition (a per-partition error code in a ShareFetch response), each backing off
``retry.backoff.ms`` doubling to ``retry.backoff.max.ms`` with jitter 0.2 (Java's
``RequestState``), reset only by a success (a response without a top-level error for a broker,
a partition answered without an error for a partition).

Two exceptions keep recovery as quick as Java's without ever looping:

* a share session error (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, ...) on an
  open session reopens it at once, once: the failure counts, and a second one before a success
  (the reopen failed too) backs off;
* a partition whose leader refused it (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, ...)
  follows a new leader at once; only the broker that refused it is asked again after the
  backoff.

May touch: nothing outside itself; pure (the time is a parameter).
"""

from __future__ import annotations

from collections.abc import Iterable

from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.request_state import ExponentialBackoff, RequestState

__all__ = ["SharePacing"]


class SharePacing:
    """Per-broker and per-partition backoff of the share fetch manager (see module doc)."""

    def __init__(self, backoff: ExponentialBackoff) -> None:
        self._backoff = backoff
        self._nodes: dict[int, RequestState] = {}
        self._partitions: dict[TopicPartition, RequestState] = {}
        #: The broker that refused a partition as not its leader (the backoff applies to it).
        self._refused_by: dict[TopicPartition, int] = {}

    # -- brokers ------------------------------------------------------------------------------

    def node_wait_ms(self, node: int, now_ms: int) -> int:
        """How long before a request may go to ``node`` (0: now)."""
        state = self._nodes.get(node)
        return 0 if state is None else state.remaining_backoff_ms(now_ms)

    def node_attempts(self, node: int) -> int:
        state = self._nodes.get(node)
        return 0 if state is None else state.attempts

    def node_failed(self, node: int, now_ms: int, *, at_once: bool = False) -> int:
        """A request to ``node`` failed; returns the backoff. ``at_once``: the first failure
        since a success may be followed at once (a lost share session is reopened)."""
        state = self._nodes.setdefault(node, RequestState(self._backoff))
        first = state.attempts == 0
        backoff = state.on_failed_attempt(now_ms)
        if at_once and first:
            state.clear_backoff()
            return 0
        return backoff

    def node_succeeded(self, node: int) -> None:
        self._nodes.pop(node, None)

    # -- partitions ---------------------------------------------------------------------------

    def partition_failed(
        self, tp: TopicPartition, now_ms: int, *, refused_by: int | None = None
    ) -> int:
        """``tp`` was answered with an error; ``refused_by``: the broker that is not (or no
        longer) its leader, the backoff applies only while the metadata still names it."""
        state = self._partitions.setdefault(tp, RequestState(self._backoff))
        if refused_by is None:
            self._refused_by.pop(tp, None)
        else:
            self._refused_by[tp] = refused_by
        return state.on_failed_attempt(now_ms)

    def partition_succeeded(self, tp: TopicPartition) -> None:
        self._partitions.pop(tp, None)
        self._refused_by.pop(tp, None)

    def partition_waits(self, tp: TopicPartition, leader: int, now_ms: int) -> bool:
        """Whether ``tp`` (led by ``leader``) is still backing off."""
        state = self._partitions.get(tp)
        if state is None or not state.remaining_backoff_ms(now_ms):
            return False
        refused = self._refused_by.get(tp)
        return refused is None or refused == leader

    def partition_wait_ms(self, partitions: Iterable[TopicPartition], now_ms: int) -> int | None:
        """The shortest backoff still running among ``partitions`` (None: none)."""
        waits = [
            wait
            for tp in partitions
            if (state := self._partitions.get(tp)) is not None
            and (wait := state.remaining_backoff_ms(now_ms)) > 0
        ]
        return min(waits) if waits else None

    def retain(self, partitions: frozenset[TopicPartition]) -> None:
        """Forget the partitions no longer assigned."""
        for tp in [tp for tp in self._partitions if tp not in partitions]:
            self.partition_succeeded(tp)
