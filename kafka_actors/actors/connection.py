"""Where the per-node connection state machine used to live: it is pure (no sockets, no
threads, no clock), so it moved to :mod:`kafka_actors.protocol.connection`. This module
re-exports its names for code that imports them from here. Owns nothing; may touch nothing.
"""

from kafka_actors.protocol.connection import (
    JITTER,
    Broken,
    Completed,
    ConnectionSettings,
    ConnectionState,
    Event,
    Failed,
    InFlight,
    MechanismFactory,
    NodeConnection,
    PendingRequest,
    Ready,
    Reauthenticated,
    exponential_backoff,
)

__all__ = [
    "JITTER",
    "Broken",
    "Completed",
    "ConnectionSettings",
    "ConnectionState",
    "Event",
    "Failed",
    "InFlight",
    "MechanismFactory",
    "NodeConnection",
    "PendingRequest",
    "Ready",
    "Reauthenticated",
    "exponential_backoff",
]
