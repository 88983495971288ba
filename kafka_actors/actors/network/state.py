"""What the parts of the NetworkActor share: its state and the calls between its parts.

The NetworkActor is one actor on one thread: one state, no locks. Its code is split by seam
into parts, each a class in a module of its own (:mod:`.connections`, :mod:`.requests`,
:mod:`.rebootstrap`; :mod:`.actor` assembles them with the pykka hooks and the I/O round).
:class:`NetworkBase` declares the state they share (set in ``NetworkActor.__init__``) and, as
abstract methods, every call one part makes into another: that list is the interface between
the seams. Also owns the per-node record (:class:`Node`) and a delayed answer
(:class:`Delayed`, fault injection). May touch: nothing of its own.
"""

from __future__ import annotations

import abc
import concurrent.futures
import dataclasses
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kafka_actors.actors.network.inbox import SelectorInbox
from kafka_actors.actors.network.messages import ConnectionEvent
from kafka_actors.actors.network.status import ConnectionStates
from kafka_actors.actors.network.transport import Resolver, Transport
from kafka_actors.clock import Clock
from kafka_actors.config import BrokerAddress, ConsumerConfig
from kafka_actors.errors import KafkaError
from kafka_actors.metrics import ConsumerMetrics
from kafka_actors.protocol.condition_log import ConditionLog
from kafka_actors.protocol.connection.node import (
    Completed,
    ConnectionSettings,
    Event,
    MechanismFactory,
    NodeConnection,
    PendingRequest,
)
from kafka_actors.protocol.connection.tls import TlsChannel
from kafka_actors.supervisors import SupervisedActor, Supervision

if TYPE_CHECKING:
    from kafka_actors.oauth import OAuthBearerTokenSource  # imported only for OAUTHBEARER

__all__ = [
    "ALL_DOWN",
    "Delayed",
    "NetworkBase",
    "Node",
]

#: The key of the "every known node is down" condition in ``NetworkBase._unavailable``.
ALL_DOWN: Final = "all"


@dataclass(eq=False)
class Node:
    """One node as the NetworkActor knows it: its connection state machine and transport."""

    node_id: int
    address: BrokerAddress
    conn: NodeConnection
    log: Any
    transport: Transport | None = None
    address_index: int = 0
    #: The addresses the name resolved to, as (getaddrinfo entry, host name for TLS); None:
    #: to be resolved (first attempt, all tried, or the address changed).
    addresses: list[tuple[Any, str]] | None = None
    #: The token of the resolution this node waits for (0: none).
    resolving: int = 0
    down_announced: bool = False
    #: Named by the latest Metadata response that named this node (False: learned only from
    #: ``UpdateNodes``, e.g. a coordinator connection, which no Metadata response names).
    in_metadata: bool = False
    #: Left out of a newer Metadata response: no longer a candidate, no new requests; its
    #: connection stays until its in-flight requests are answered, then it is forgotten.
    retired: bool = False


@dataclass(order=True)
class Delayed:
    """A response held back by fault injection (``Delay``) until ``due`` (monotonic s)."""

    due: float
    seq: int
    node: int = dataclasses.field(compare=False)
    event: Completed = dataclasses.field(compare=False)


class NetworkBase(SupervisedActor):
    """The NetworkActor's shared state and the calls between its parts (module docstring).

    Grouped by the part that owns the state (it is set in ``NetworkActor.__init__``) and
    implements the calls (each declared abstract here, with what it does).
    """

    # -- NetworkActor (actor.py) ------------------------------------------------------------
    config: ConsumerConfig
    settings: ConnectionSettings
    metrics: ConsumerMetrics | None
    connection_states: ConnectionStates | None
    supervision: Supervision
    _clock: Clock
    _random: Callable[[], float]
    _log: Any
    _token_source: OAuthBearerTokenSource | None
    _inbox: SelectorInbox
    _closed: bool
    _seq: Iterator[int]

    #: False while the OAUTHBEARER token source has no first outcome (no attempt starts).
    @abc.abstractmethod
    def _may_connect(self) -> bool: ...

    # -- NetworkConnections (connections.py) -------------------------------------------------
    #: Every node: real ones (learned from Metadata) and the bootstrap pseudo nodes.
    _nodes: dict[int, Node]
    _bootstrap: list[int]
    _sasl: MechanismFactory | None
    _tls: Callable[[str, int], TlsChannel] | None
    _resolver: Resolver
    _canonical_bootstrap: bool
    _resolver_pool: concurrent.futures.ThreadPoolExecutor | None
    _events: deque[ConnectionEvent]
    #: The "node unavailable" conditions (key: node id; ``ALL_DOWN``: every node down; the
    #: metadata recovery ones, see rebootstrap.py), for the schedule of their log lines.
    _unavailable: ConditionLog[int | str]
    #: Node ids a newer Metadata response left out (until one names them again): a request
    #: for one of them fails at once with a retriable error instead of waiting for it.
    _removed: set[int]

    #: Start a connection attempt to the node (resolving its name first if needed).
    @abc.abstractmethod
    def _connect(self, node: Node, now: float) -> None: ...

    #: Learn or update a node's address; requests waiting for it are queued on it.
    @abc.abstractmethod
    def _set_address(self, node_id: int, address: BrokerAddress) -> None: ...

    #: Append a :class:`ConnectionEvent` of ``kind`` for the node to the event log.
    @abc.abstractmethod
    def _record(self, node: Node, kind: str, error: KafkaError | None = None) -> None: ...

    #: A newer Metadata response left the node out: stop using it, forget it once idle.
    @abc.abstractmethod
    def _retire(self, node: Node) -> None: ...

    #: Forget a retired node once nothing is in flight on it (True: it is gone).
    @abc.abstractmethod
    def _forget_retired(self, node: Node) -> bool: ...

    #: Unregister and close the node's socket (if any), counted as a closed connection.
    @abc.abstractmethod
    def _drop_transport(self, node: Node) -> None: ...

    #: Close the node's transport because of ``error``; fail what must fail.
    @abc.abstractmethod
    def _close_node(self, node: Node, error: KafkaError) -> None: ...

    #: The node is ready: log the end of its "unavailable" condition (if it was reported).
    @abc.abstractmethod
    def _node_available(self, node: Node) -> None: ...

    # -- NetworkRequests (requests.py) -------------------------------------------------------
    #: Requests for ANY_NODE / BOOTSTRAP_NODE not given to a node yet.
    _unassigned: deque[PendingRequest]
    #: Requests for a node whose address is not known yet.
    _waiting: dict[int, deque[PendingRequest]]
    _delayed: list[Delayed]
    _dropped: list[PendingRequest]

    #: Act on what a node's connection state machine reported.
    @abc.abstractmethod
    def _handle(self, node: Node, events: Iterable[Event]) -> None: ...

    #: Answer ``pending`` with :class:`RequestFailed` carrying ``error``.
    @abc.abstractmethod
    def _fail(self, pending: PendingRequest, error: KafkaError, node: int) -> None: ...

    # -- NetworkRebootstrap (rebootstrap.py) -------------------------------------------------
    _rebootstrap: bool
    _rebootstrap_trigger: float
    _metadata_wanted_since: float | None

    #: Learn node addresses from a Metadata response.
    @abc.abstractmethod
    def _learn(self, response: Any) -> None: ...

    #: Forget every known broker and start again from the bootstrap servers.
    @abc.abstractmethod
    def _do_rebootstrap(self, now: float, reason: str) -> None: ...

    #: A Metadata response came: log the end of a reported recovery condition.
    @abc.abstractmethod
    def _metadata_answered(self) -> None: ...
