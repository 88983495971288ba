"""Test actors for the Thespian bridge: a subscriber that records what it receives.

Module-level classes (importable by name), so they run under both simpleSystemBase and
multiprocTCPBase; every message is a picklable frozen dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records import ConsumerRecord
from kafka_actors.thespian import (
    CommitFailed,
    CommitOk,
    PartitionsAssigned,
    PartitionsLost,
    PartitionsRevoked,
    RecordBatch,
    StreamError,
    StreamSubscriber,
)


@dataclass(frozen=True, slots=True)
class SetMode:
    """Before the stream starts: initial demand ``window``; ``replenish`` False: never ask for
    more after the first demand (a subscriber that stops requesting)."""

    window: int
    replenish: bool = True
    ack_revocations: bool = True  # False: never acknowledge a revocation (nor commit in it)


@dataclass(frozen=True, slots=True)
class Resume:
    """Start requesting again: ``n`` more records, then replenish after each batch."""

    n: int


@dataclass(frozen=True, slots=True)
class CommitProcessed:
    """Commit every processed position through the bridge."""


@dataclass(frozen=True, slots=True)
class GetState:
    pass


@dataclass(frozen=True, slots=True)
class State:
    records: tuple[ConsumerRecord, ...]
    batch_sizes: tuple[int, ...]
    max_batch_over_demand: int  # largest (records received - demand outstanding), must be <= 0
    events: tuple[tuple[str, frozenset[TopicPartition], int], ...]
    commits: tuple[CommitOk | CommitFailed, ...]
    acks: tuple[int, ...]
    errors: tuple[str, ...]
    positions: dict[TopicPartition, int]
    reordered: int  # stream messages that arrived before a predecessor (put back in order)


class RecordingSubscriber(StreamSubscriber):
    """Records batches, rebalance notifications (and the revocation commits), commits."""

    window = 500

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.records: list[ConsumerRecord] = []
        self.batch_sizes: list[int] = []
        self.outstanding = 0
        self.over_demand = -(10**9)
        self.replenish = True
        self.ack_revocations = True
        self.events: list[tuple[str, frozenset[TopicPartition], int]] = []
        self.commits: list[CommitOk | CommitFailed] = []
        self.acks: list[int] = []
        self.errors: list[str] = []

    def request(self, n: int) -> None:
        if n > 0:
            self.outstanding += n
        super().request(n)

    def on_batch(self, message: RecordBatch) -> None:
        size = len(message.records)
        self.over_demand = max(self.over_demand, size - self.outstanding)
        self.outstanding -= size
        self.records.extend(message.records)
        self.batch_sizes.append(size)
        self.processed(dict(message.positions))
        if self.replenish:
            self.request(size)

    def on_revoked(self, message: PartitionsRevoked) -> None:
        self.events.append(("revoked", message.partitions, message.rebalance_id))
        if not self.ack_revocations:
            return
        offsets = {tp: self.positions[tp] for tp in message.partitions if tp in self.positions}
        for tp in message.partitions:
            self.positions.pop(tp, None)

        def then(result: CommitOk | CommitFailed) -> None:
            self.commits.append(result)
            self._ack(message.rebalance_id, result)

        if offsets:
            self.commit(offsets, then)
        else:
            self._ack(message.rebalance_id, None)

    def _ack(self, rid: int, result: CommitOk | CommitFailed | None) -> None:
        from kafka_actors.thespian import RebalanceAck

        error = str(result.error) if isinstance(result, CommitFailed) else None
        self.acks.append(rid)
        self.send(self.bridge, RebalanceAck(rid, error))

    def on_assigned(self, message: PartitionsAssigned) -> None:
        self.events.append(("assigned", message.partitions, message.rebalance_id))
        self._ack(message.rebalance_id, None)

    def on_lost(self, message: PartitionsLost) -> None:
        self.events.append(("lost", message.partitions, message.rebalance_id))
        super().on_lost(message)

    def on_stream_error(self, message: StreamError) -> None:
        self.errors.append(str(message.error))

    def on_other(self, message: Any, sender: Any) -> None:
        if isinstance(message, SetMode):
            self.window = message.window
            self.replenish = message.replenish
            self.ack_revocations = message.ack_revocations
        elif isinstance(message, Resume):
            self.replenish = True
            self.request(message.n)
        elif isinstance(message, CommitProcessed):
            self.commit(None, self.commits.append)
        elif isinstance(message, GetState):
            self.send(
                sender,
                State(
                    records=tuple(self.records),
                    batch_sizes=tuple(self.batch_sizes),
                    max_batch_over_demand=self.over_demand,
                    events=tuple(self.events),
                    commits=tuple(self.commits),
                    acks=tuple(self.acks),
                    errors=tuple(self.errors),
                    positions=dict(self.positions),
                    reordered=self.reordered,
                ),
            )
