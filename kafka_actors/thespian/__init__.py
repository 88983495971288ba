"""Thespian front end: a bridge actor that owns a KafkaConsumer and serves it by messages.

Owns: the public names of the bridge (:class:`KafkaBridge`), the subscriber base class
(:class:`StreamSubscriber`) and the protocol (:mod:`kafka_actors.thespian.messages`). Needs the
``thespian`` extra (``pip install kafka-actors[thespian]``).

May touch: nothing beyond its own modules.
"""

from kafka_actors.thespian.bridge import KafkaBridge
from kafka_actors.thespian.errors import BridgeRequestFailedError, SubscriberFailedError

# The protocol: the shared names and Configure.
from kafka_actors.thespian.messages import (
    Assign,
    BatchRejected,
    BridgeStats,
    Close,
    Closed,
    Commit,
    CommitFailed,
    CommitOk,
    Configure,
    Configured,
    ErrorInfo,
    GetStats,
    Handled,
    PartitionsAssigned,
    PartitionsLost,
    PartitionsRevoked,
    RebalanceAck,
    RecordBatch,
    Request,
    StreamError,
    Subscribe,
    Subscribed,
)
from kafka_actors.thespian.subscriber import StreamSubscriber

# A literal list, as type checkers read it (not ``[*other.__all__]``).
__all__ = [
    "Assign",
    "BatchRejected",
    "BridgeRequestFailedError",
    "BridgeStats",
    "Close",
    "Closed",
    "Commit",
    "CommitFailed",
    "CommitOk",
    "Configure",
    "Configured",
    "ErrorInfo",
    "GetStats",
    "Handled",
    "KafkaBridge",
    "PartitionsAssigned",
    "PartitionsLost",
    "PartitionsRevoked",
    "RebalanceAck",
    "RecordBatch",
    "Request",
    "StreamError",
    "StreamSubscriber",
    "Subscribe",
    "Subscribed",
    "SubscriberFailedError",
]
