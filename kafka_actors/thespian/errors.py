"""Typed errors of the Thespian bridge: what one side of a bridge reports about the other.

Owns: :class:`SubscriberFailedError` (the subscriber raised on a stream message, which came
back to the bridge) and :class:`BridgeRequestFailedError` (the bridge could not handle a
request). They travel between actors as :class:`~kafka_actors.thespian.messages.ErrorInfo`
values (``type`` is the class name), never as exception objects.

May touch: nothing.
"""

from __future__ import annotations

from kafka_actors.errors import FatalError

__all__ = ["BridgeRequestFailedError", "SubscriberFailedError"]


class SubscriberFailedError(FatalError):
    """The subscriber raised on a stream message (it was tried again, then returned to the
    bridge as Thespian's ``PoisonMessage``). Records of a failed batch are not delivered."""


class BridgeRequestFailedError(FatalError):
    """The bridge raised on a request (or returned it as Thespian's ``PoisonMessage``)."""
