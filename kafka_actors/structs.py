"""The public value types of kafka-actors, in one place: what a front end hands to the
application or takes from it (the package's face re-exports them).

Owns: :class:`ConsumerRecords` (the records of one poll), :class:`ConsumerRebalanceListener`,
:class:`RebalanceReply` (the deferred acknowledgement of a rebalance callback),
:class:`ConsumerGroupMetadata` and :class:`ShareConsumerRecords`; and re-exports the value
types the pure protocol layer defines because its own code uses them: :class:`TopicPartition`,
:class:`OffsetAndMetadata`, :class:`ConsumerRecord`, :class:`ShareConsumerRecord`,
:class:`AcknowledgeType` and :data:`GroupMembershipOperation` (close's ``membership``).

May touch: the protocol layer's value types only (it is imported by the actors, the cores and
the front ends alike).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Never, Protocol

from kafka_actors.protocol.group.membership_operation import GroupMembershipOperation
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.records.decode import ConsumerRecord, K_co, V_co

if TYPE_CHECKING:
    from kafka_actors.protocol.share.acknowledgements import AcknowledgeType
    from kafka_actors.protocol.share.buffer import ShareConsumerRecord

__all__ = [
    "EMPTY_RECORDS",
    "AcknowledgeType",
    "CallbackSink",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "ConsumerRecords",
    "GroupMembershipOperation",
    "OffsetAndMetadata",
    "RebalanceReply",
    "ShareConsumerRecord",
    "ShareConsumerRecords",
    "TopicPartition",
]


class CallbackSink(Protocol):
    """Who is told when a rebalance callback is acknowledged (the facade)."""

    def callback_done(self, reply: RebalanceReply, error: BaseException | None) -> None: ...


class ConsumerRebalanceListener:
    """Called on the polling thread when partitions are revoked, assigned or lost.

    Override what you need. ``on_partitions_lost`` defaults to ``on_partitions_revoked``, as in
    Java. Each method may defer its acknowledgement (see :mod:`kafka_actors.actors.facade`):
    call ``consumer.defer_rebalance_ack()`` and ``ack()`` the reply later, or return a
    ``concurrent.futures.Future``.
    """

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        return None

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        return None

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        return self.on_partitions_revoked(lost)


class RebalanceReply:
    """The acknowledgement of one rebalance callback; ``ack()`` it from any thread, once."""

    def __init__(self, facade: CallbackSink, event: Any, method: str) -> None:
        self._facade = facade
        self.event = event
        self.method = method
        self.partitions: frozenset[TopicPartition] = event.partitions
        self.deferred = False
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._timer: Any = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def ack(self, error: BaseException | None = None) -> None:
        """Acknowledge the callback (with ``error`` if it failed); later calls are ignored."""
        with self._lock:
            if self._done.is_set():
                return
            self._done.set()
        if self._timer is not None:
            self._timer.cancel()
        self._facade.callback_done(self, error)

    def __repr__(self) -> str:
        state = "done" if self.done else ("deferred" if self.deferred else "running")
        return f"<RebalanceReply {self.method} {sorted(map(str, self.partitions))} {state}>"


class ConsumerRecords(Generic[K_co, V_co]):
    """Records of one poll, grouped by partition; iterable (partition order, then offsets).

    Generic as its records are: a ``KafkaConsumer[K, V]`` polls ``ConsumerRecords[K, V]``."""

    __slots__ = ("_by_partition", "_count")

    def __init__(
        self, by_partition: Mapping[TopicPartition, list[ConsumerRecord[K_co, V_co]]]
    ) -> None:
        self._by_partition = {tp: recs for tp, recs in by_partition.items() if recs}
        self._count = sum(len(r) for r in self._by_partition.values())

    def __iter__(self) -> Iterator[ConsumerRecord[K_co, V_co]]:
        # A C-level iterator: no generator frame resumed per record.
        return itertools.chain.from_iterable(self._by_partition.values())

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def count(self) -> int:
        return self._count

    def is_empty(self) -> bool:
        return self._count == 0

    def partitions(self) -> set[TopicPartition]:
        return set(self._by_partition)

    def records(self, partition: TopicPartition | str) -> list[ConsumerRecord[K_co, V_co]]:
        """Records of one partition, or of every partition of a topic (a topic name)."""
        if isinstance(partition, str):
            return [r for tp, rs in self._by_partition.items() if tp.topic == partition for r in rs]
        return list(self._by_partition.get(partition, ()))

    def by_partition(self) -> dict[TopicPartition, list[ConsumerRecord[K_co, V_co]]]:
        return {tp: list(rs) for tp, rs in self._by_partition.items()}

    def __repr__(self) -> str:
        return f"<ConsumerRecords {self._count} records, {len(self._by_partition)} partitions>"


#: No records, of any key and value types.
EMPTY_RECORDS: ConsumerRecords[Never, Never] = ConsumerRecords({})




@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """Java's ConsumerGroupMetadata: for transactional producers (sendOffsetsToTransaction).

    ``generation_id`` is the member epoch under the consumer protocol, the generation under
    the classic one (-1 when not in the group)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


class ShareConsumerRecords(Generic[K_co, V_co]):
    """What ``poll()`` returns: the records of one poll, in partition order. Generic as its
    records are: a ``KafkaShareConsumer[K, V]`` polls ``ShareConsumerRecords[K, V]``."""

    __slots__ = ("_by_partition",)

    def __init__(
        self, by_partition: Mapping[TopicPartition, list[ShareConsumerRecord[K_co, V_co]]]
    ) -> None:
        self._by_partition = {tp: list(r) for tp, r in by_partition.items() if r}

    def __iter__(self) -> Iterator[ShareConsumerRecord[K_co, V_co]]:
        for tp in sorted(self._by_partition):
            yield from self._by_partition[tp]

    def __len__(self) -> int:
        return sum(len(r) for r in self._by_partition.values())

    def __bool__(self) -> bool:
        return bool(self._by_partition)

    def count(self) -> int:
        return len(self)

    def is_empty(self) -> bool:
        return not self._by_partition

    def partitions(self) -> set[TopicPartition]:
        return set(self._by_partition)

    def records(self, partition: TopicPartition) -> list[ShareConsumerRecord[K_co, V_co]]:
        return list(self._by_partition.get(partition, ()))

    def __repr__(self) -> str:
        return f"ShareConsumerRecords({len(self)} records, {len(self._by_partition)} partitions)"


#: The share consumer's value types, re-exported here and imported on first use (a consumer
#: of a classic or KIP-848 group never loads the share protocol).
_SHARE_TYPES = {
    "AcknowledgeType": "kafka_actors.protocol.share.acknowledgements",
    "ShareConsumerRecord": "kafka_actors.protocol.share.buffer",
}


def __getattr__(name: str) -> Any:
    module = _SHARE_TYPES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
