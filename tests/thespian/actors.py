"""Test actors for the Thespian bridge: a subscriber that records what it receives.

Module-level classes (importable by name), so they run under both simpleSystemBase and
multiprocTCPBase; every message is a picklable frozen dataclass.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Any

from thespian.actors import Actor

from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord
from kafka_actors.thespian import (
    BatchRejected,
    Commit,
    CommitFailed,
    CommitOk,
    Handled,
    KafkaBridge,
    PartitionsAssigned,
    PartitionsLost,
    PartitionsRevoked,
    RebalanceAck,
    RecordBatch,
    Request,
    StreamError,
    StreamSubscriber,
    Subscribed,
)


@dataclass(frozen=True, slots=True)
class SetMode:
    """Before the stream starts: initial demand ``window``; ``replenish`` False: never ask for
    more after the first demand (a subscriber that stops requesting)."""

    window: int
    replenish: bool = True
    ack_revocations: bool = True  # False: never acknowledge a revocation (nor commit in it)
    delay_ms: float = 0.0  # time spent on each batch (a subscriber slower than the bridge)


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
class GetCount:
    """How many records so far (cheaper than GetState with many records)."""


@dataclass(frozen=True, slots=True)
class Count:
    records: int


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
    held_early: int  # stream messages still waiting for a predecessor that has not come


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
        self.delay_ms = 0.0

    def request(self, n: int) -> None:
        if n > 0:
            self.outstanding += n
        super().request(n)

    def on_batch(self, message: RecordBatch) -> None:
        if self.delay_ms:
            time.sleep(self.delay_ms / 1000)
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
            self.delay_ms = message.delay_ms
        elif isinstance(message, Resume):
            self.replenish = True
            self.request(message.n)
        elif isinstance(message, CommitProcessed):
            self.commit(None, self.commits.append)
        elif isinstance(message, GetCount):
            self.send(sender, Count(len(self.records)))
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
                    held_early=len(self._early),
                ),
            )


# -- failures -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FailOn:
    """``process`` raises on a batch holding one of ``records`` ((partition, offset)), the
    first ``times`` times it sees that record (``times`` < 0: always)."""

    records: frozenset[tuple[int, int]]
    times: int


@dataclass(frozen=True, slots=True)
class StopFailing:
    """Stop failing and start requesting again (after the subscriber stopped)."""


@dataclass(frozen=True, slots=True)
class FlakyState:
    processed: tuple[ConsumerRecord, ...]
    failures: int  # times process raised
    rejections: tuple[BatchRejected, ...]
    requesting: bool
    positions: dict[TopicPartition, int]
    commits: tuple[CommitOk | CommitFailed, ...]


class FlakySubscriber(StreamSubscriber):
    """A StreamSubscriber (its default failure handling) whose ``process`` raises on chosen
    records; keeps what it processed (only batches whose ``process`` returned)."""

    window = 400

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fail_on: dict[tuple[int, int], int] = {}
        self.done: list[ConsumerRecord] = []
        self.failures = 0
        self.rejections: list[BatchRejected] = []
        self.commits: list[CommitOk | CommitFailed] = []

    def process(self, records: tuple[ConsumerRecord, ...]) -> None:
        for record in records:
            key = (record.partition, record.offset)
            left = self.fail_on.get(key, 0)
            if left:
                self.fail_on[key] = left - 1
                self.failures += 1
                raise RuntimeError(f"cannot process offset {record.offset} of {record.partition}")
        self.done.extend(records)

    def on_batch_rejected(self, message: BatchRejected) -> None:
        self.rejections.append(message)
        super().on_batch_rejected(message)

    def on_other(self, message: Any, sender: Any) -> None:
        if isinstance(message, FailOn):
            self.fail_on = {key: message.times for key in message.records}
        elif isinstance(message, StopFailing):
            self.fail_on = {}
            self.resume_requesting()
        elif isinstance(message, CommitProcessed):
            self.commit(None, self.commits.append)
        elif isinstance(message, GetState):
            self.send(
                sender,
                FlakyState(
                    processed=tuple(self.done),
                    failures=self.failures,
                    rejections=tuple(self.rejections),
                    requesting=self.requesting,
                    positions=dict(self.positions),
                    commits=tuple(self.commits),
                ),
            )


@dataclass(frozen=True, slots=True)
class GetDropped:
    pass


@dataclass(frozen=True, slots=True)
class Dropped:
    messages: tuple[str, ...]


class DroppingBridge(KafkaBridge):
    """A bridge whose transport loses, once each, the first PartitionsAssigned naming
    partitions and the second RecordBatch it sends, without telling the bridge: what Thespian's
    TCP transport does to a large transmit whose socket the peer closed under it (EPIPE, taken
    for a refused connection: a dead letter; issue 22). Later copies (redeliveries) go through."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches_sent = 0
        self.dropped: list[str] = []

    def send(self, targetAddr: Any, msg: Any) -> None:
        if isinstance(msg, RecordBatch):
            self.batches_sent += 1
            if self.batches_sent == 2:
                self.dropped.append(f"RecordBatch {msg.seq}")
                return
        elif isinstance(msg, PartitionsAssigned) and msg.partitions:
            if not any(d.startswith("PartitionsAssigned") for d in self.dropped):
                self.dropped.append(f"PartitionsAssigned {msg.seq}")
                return
        super().send(targetAddr, msg)

    def receiveMessage(self, message: Any, sender: Any) -> None:
        if isinstance(message, GetDropped):
            self.send(sender, Dropped(tuple(self.dropped)))
        else:
            super().receiveMessage(message, sender)


class AckDroppingSubscriber(RecordingSubscriber):
    """A subscriber whose transport loses, once each, its acknowledgements (``Handled``) of the
    first ``LOST_ACKS`` stream messages, without telling it: the bridge's window fills with
    batches the subscriber has handled and the bridge never hears of (ciD, official CI)."""

    LOST_ACKS = 8

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lost_acks: set[int] = set()

    def send(self, targetAddr: Any, msg: Any) -> None:
        if isinstance(msg, Handled) and msg.seq <= self.LOST_ACKS and msg.seq not in self.lost_acks:
            self.lost_acks.add(msg.seq)
            return
        super().send(targetAddr, msg)


class CommitRaisingBridge(KafkaBridge):
    """A bridge whose handling of Commit raises out of receiveMessage (as a bug would): Thespian
    retries it, then returns it to the sender as PoisonMessage."""

    def receiveMessage(self, message: Any, sender: Any) -> None:
        if isinstance(message, Commit):
            raise RuntimeError("commit handler broken")
        super().receiveMessage(message, sender)


class RawSubscriber(Actor):  # type: ignore[misc]
    """A subscriber written against the protocol alone (no StreamSubscriber): it raises out of
    receiveMessage on a chosen record (``FailOn``), so Thespian itself retries the batch and
    returns it to the bridge as PoisonMessage. It acknowledges every batch it handles and asks
    again after a BatchRejected."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fail_on: dict[tuple[int, int], int] = {}
        self.done: list[ConsumerRecord] = []
        self.failures = 0
        self.rejections: list[BatchRejected] = []
        self.bridge: Any = None

    def receiveMessage(self, message: Any, sender: Any) -> None:
        if isinstance(message, Subscribed) and self.bridge is None:
            self.bridge = sender
            self.send(sender, Request(100_000))
        elif isinstance(message, RecordBatch):
            for record in message.records:
                key = (record.partition, record.offset)
                if self.fail_on.get(key, 0):
                    self.fail_on[key] -= 1
                    self.failures += 1
                    raise RuntimeError(f"raw subscriber cannot take offset {record.offset}")
            self.done.extend(message.records)
            self.send(sender, Handled(message.seq))
        elif isinstance(message, (PartitionsAssigned, PartitionsRevoked, PartitionsLost)):
            self.send(sender, RebalanceAck(message.rebalance_id))
        elif isinstance(message, BatchRejected):
            self.rejections.append(message)
            self.send(self.bridge, Request(100_000))
        elif isinstance(message, FailOn):
            self.fail_on = {key: message.times for key in message.records}
        elif isinstance(message, GetState):
            self.send(
                sender,
                FlakyState(
                    processed=tuple(self.done),
                    failures=self.failures,
                    rejections=tuple(self.rejections),
                    requesting=True,
                    positions={},
                    commits=(),
                ),
            )


class Collector(Actor):  # type: ignore[misc]
    """Runs the garbage collector of its own process on "collect" and answers how many
    objects it freed (tests/thespian/test_fork_safety.py)."""

    def receiveMessage(self, message: Any, sender: Any) -> None:
        if message == "collect":
            self.send(sender, gc.collect())
