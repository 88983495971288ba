"""The connection state of each node, as the NetworkActor last reported it: read by
``health()`` without asking the actor.

Owns: :class:`ConnectionStates` (thread-safe: the NetworkActor writes, any thread reads a
snapshot) and :data:`STATE_OF_EVENT`, the state each connection event kind leaves a node in.
May touch: nothing else.
"""

from __future__ import annotations

import threading
from typing import Final

__all__ = ["STATE_OF_EVENT", "ConnectionStates", "NodeState"]

#: (node id, address, state, error of the last failure or None)
NodeState = tuple[int, str, str, str | None]

#: The state a :class:`~kafka_actors.actors.network.messages.ConnectionEvent` kind leaves its
#: node in (``removed``: the node is forgotten; kinds not here change nothing).
STATE_OF_EVENT: Final = {
    "connect": "connecting",
    "ready": "up",
    "reauthenticated": "up",
    "connect_failed": "down",
    "auth_failed": "down",
    "disconnected": "down",
    "idle_closed": "idle",
}


class ConnectionStates:
    """Each node's connection state (``connecting``, ``up``, ``down``, ``idle``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[int, NodeState] = {}

    def record(self, node_id: int, address: str, kind: str, error: str | None) -> None:
        """A connection event of ``kind`` for the node (see :data:`STATE_OF_EVENT`)."""
        with self._lock:
            if kind == "removed":
                self._nodes.pop(node_id, None)
                return
            state = STATE_OF_EVENT.get(kind)
            if state is None:
                return
            self._nodes[node_id] = (node_id, address, state, error if state == "down" else None)

    def clear(self) -> None:
        """The NetworkActor stopped: it has no connection any more."""
        with self._lock:
            self._nodes.clear()

    def snapshot(self) -> tuple[NodeState, ...]:
        """Every node's state, by node id."""
        with self._lock:
            return tuple(sorted(self._nodes.values()))
