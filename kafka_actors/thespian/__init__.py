"""Thespian front end: a bridge actor that owns a KafkaConsumer and serves it by messages.

Owns: the public names of the bridge (:class:`KafkaBridge`), the subscriber base class
(:class:`StreamSubscriber`) and the protocol (:mod:`kafka_actors.thespian.messages`). Needs the
``thespian`` extra (``pip install kafka-actors[thespian]``).

May touch: nothing beyond its own modules.
"""

from kafka_actors.thespian import messages as _messages
from kafka_actors.thespian.bridge import KafkaBridge
from kafka_actors.thespian.errors import BridgeRequestFailedError, SubscriberFailedError
from kafka_actors.thespian.messages import *  # noqa: F403 (the protocol: shared names + Configure)
from kafka_actors.thespian.subscriber import StreamSubscriber

__all__ = [
    *_messages.__all__,
    "BridgeRequestFailedError",
    "KafkaBridge",
    "StreamSubscriber",
    "SubscriberFailedError",
]
