"""One node as the NetworkActor knows it.

Owns: :class:`Node` (a node's connection state machine, its address, the addresses its name
resolved to, its socket, and what the latest Metadata response said of it) and
:data:`ALL_DOWN`. The NetworkActor keeps one per node, real and bootstrap. May touch: nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from kafka_actors.actors.network.transport import Transport
from kafka_actors.config import BrokerAddress
from kafka_actors.protocol.connection.node import NodeConnection

__all__ = ["ALL_DOWN", "Node"]

#: The key of the "every known node is down" condition in the NetworkActor's "unavailable" log.
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
