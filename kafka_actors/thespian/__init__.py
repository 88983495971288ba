"""Thespian front end: a bridge actor that owns a KafkaConsumer and serves it by messages.

Owns: the public names of the bridge (:class:`KafkaBridge`), the subscriber base class
(:class:`StreamSubscriber`) and the protocol (:mod:`kafka_actors.thespian.messages`). Needs the
``thespian`` extra (``pip install kafka-actors[thespian]``).

May touch: nothing beyond its own modules.
"""

from kafka_actors.bridges import messages as _shared

# The protocol: the shared names (type checkers read ``__all__ +=`` of their list) and
# Configure.
from kafka_actors.bridges.messages import *  # noqa: F403
from kafka_actors.thespian.bridge import KafkaBridge
from kafka_actors.thespian.errors import BridgeRequestFailedError, SubscriberFailedError
from kafka_actors.thespian.messages import Configure
from kafka_actors.thespian.subscriber import StreamSubscriber

__all__ = [
    "BridgeRequestFailedError",
    "Configure",
    "KafkaBridge",
    "StreamSubscriber",
    "SubscriberFailedError",
]
__all__ += _shared.__all__
