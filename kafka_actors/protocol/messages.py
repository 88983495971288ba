"""Shared value types and the request-manager contract of kafka-actors.

Owns: the frozen dataclasses that cross component boundaries (topic-partitions, offsets,
requests a manager wants sent, results of a manager's poll). Pure: no threads, sockets or
clocks. Actor-specific messages live next to their actor; the types here are the ones every
request manager and the facade share.

The request-manager contract (as Kafka's ``RequestManager.poll(now) -> PollResult``): a pure
state machine exposes

* ``poll(now_ms) -> PollResult`` — requests it wants sent now and when it next wants to be
  polled;
* ``on_response(request_id, response, now_ms)`` / ``on_failure(request_id, error, now_ms)`` —
  what became of a request it returned earlier (``request_id`` as it put in the
  :class:`UnsentRequest`);
* further methods for the application events it handles.

The actor around it only moves messages: it forwards ``UnsentRequest``s to the NetworkActor
and feeds responses back in. Time is a parameter (``now_ms``, a monotonic millisecond clock),
never read inside.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ANY_NODE",
    "COORDINATOR_NODE",
    "OffsetAndMetadata",
    "PollResult",
    "TopicIdPartition",
    "TopicPartition",
    "UnsentRequest",
]

# Special destinations for an UnsentRequest: "the least loaded ready node" and "the group
# coordinator as currently known". Real node ids are >= 0.
ANY_NODE = -1
COORDINATOR_NODE = -2


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """A topic's partition. Its hash is computed once (as Java's ``TopicPartition`` caches
    it): the fetch path looks partitions up in dicts hundreds of thousands of times a
    second with many partitions. Pickled and copied as ``(topic, partition)`` only (a string
    hash differs between processes)."""

    topic: str
    partition: int
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.topic, self.partition)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, tuple[str, int]]:
        return (TopicPartition, (self.topic, self.partition))

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    """A partition named by topic id (KIP-516), with the name once it is resolved."""

    topic_id: str  # canonical UUID string
    partition: int
    topic: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class UnsentRequest:
    """A request a manager wants sent: to ``node`` (a node id, ANY_NODE or COORDINATOR_NODE).

    ``request`` is a kio request payload at the version the manager chose from the negotiated
    versions; ``request_id`` is the manager's own handle for matching the outcome.
    """

    node: int
    request: Any
    request_id: int
    trace_id: str | None = None
    timeout_ms: int | None = None


@dataclass(frozen=True, slots=True)
class PollResult:
    requests: tuple[UnsentRequest, ...] = ()
    # Milliseconds until the manager next wants poll() called; None = only on new input.
    time_until_next_poll_ms: int | None = None
    events: tuple[Any, ...] = field(default=())


EMPTY_POLL_RESULT = PollResult()
