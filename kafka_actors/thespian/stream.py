"""The Thespian bridge's stream state: :class:`DemandStream`, shared with the pykka bridge.

Owns: nothing of its own; the pure state machine lives in :mod:`kafka_actors.bridges.stream`
and is re-exported here under its old path.

May touch: nothing.
"""

from kafka_actors.bridges.stream import DemandStream, first_offsets, record_size

__all__ = ["DemandStream", "first_offsets", "record_size"]
