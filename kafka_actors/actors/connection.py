"""Where the per-node connection state machine used to live: it is pure (no sockets, no
threads, no clock), so it moved to :mod:`kafka_actors.protocol.connection`. This module
re-exports its public names for code that imports them from here. Owns nothing; may touch
nothing.
"""

from kafka_actors.protocol.connection import *  # noqa: F403
