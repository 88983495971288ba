"""Typed errors of the bridges: what one side of a bridge reports about the other.

Owns: :class:`SubscriberFailedError` (the subscriber raised on a stream message) and
:class:`BridgeRequestFailedError` (the bridge could not handle a request), shared by the
Thespian and pykka bridges. They travel between actors as
:class:`~kafka_actors.bridges.messages.ErrorInfo` values (``type`` is the class name), never
as exception objects.

May touch: nothing.
"""

from __future__ import annotations

from kafka_actors.errors import FatalError

__all__ = ["BridgeRequestFailedError", "SubscriberFailedError"]


class SubscriberFailedError(FatalError):
    """The subscriber raised on a stream message (Thespian: it was tried again, then returned
    to the bridge as ``PoisonMessage``; pykka: the subscriber reported it with
    ``BatchFailed``). Records of a failed batch are not delivered."""


class BridgeRequestFailedError(FatalError):
    """The bridge raised on a request (or returned it as Thespian's ``PoisonMessage``)."""
