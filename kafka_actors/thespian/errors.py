"""Typed errors of the Thespian bridge, shared with the pykka bridge.

Owns: nothing of its own; :class:`SubscriberFailedError` and :class:`BridgeRequestFailedError`
live in :mod:`kafka_actors.bridges.errors` and are re-exported here under their old path.

May touch: nothing.
"""

from kafka_actors.bridges.errors import BridgeRequestFailedError, SubscriberFailedError

__all__ = ["BridgeRequestFailedError", "SubscriberFailedError"]
