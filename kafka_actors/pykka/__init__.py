"""pykka front end: a bridge actor that owns a KafkaConsumer and streams it to a service's
pykka actor by messages, with demand, back-pressure and rebalance notices answered by the
service (the same protocol and contract as :mod:`kafka_actors.thespian`).

Owns: the public names of the bridge (:class:`KafkaBridge`, :func:`call`), the subscriber base
class (:class:`StreamSubscriber`) and the protocol's names: the messages shared with the
Thespian bridge (:mod:`kafka_actors.bridges.messages`) plus pykka's own ``Call`` and
``BatchFailed`` (:mod:`kafka_actors.pykka.messages`). Imported as
``kafka_actors.pykka``; inside it, ``import pykka`` is the pykka package (absolute imports).

May touch: nothing beyond its own modules.
"""

from kafka_actors.bridges import messages as _shared
from kafka_actors.bridges.errors import BridgeRequestFailedError, SubscriberFailedError

# The protocol shared with Thespian (type checkers read ``__all__ +=`` of its list).
from kafka_actors.bridges.messages import *  # noqa: F403
from kafka_actors.pykka.bridge import KafkaBridge, call
from kafka_actors.pykka.messages import BatchFailed, Call
from kafka_actors.pykka.subscriber import StreamSubscriber

__all__ = [
    "BatchFailed",
    "BridgeRequestFailedError",
    "Call",
    "KafkaBridge",
    "StreamSubscriber",
    "SubscriberFailedError",
    "call",
]
__all__ += _shared.__all__
