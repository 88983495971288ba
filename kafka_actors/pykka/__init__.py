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

from kafka_actors.bridges.errors import BridgeRequestFailedError, SubscriberFailedError

# The protocol shared with Thespian.
from kafka_actors.bridges.messages import (
    Assign,
    BatchRejected,
    BridgeStats,
    Close,
    Closed,
    Commit,
    CommitFailed,
    CommitOk,
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
from kafka_actors.pykka.bridge import KafkaBridge, call
from kafka_actors.pykka.messages import BatchFailed, Call
from kafka_actors.pykka.subscriber import StreamSubscriber

# A literal list, as type checkers read it (not ``[*other.__all__]``).
__all__ = [
    "Assign",
    "BatchFailed",
    "BatchRejected",
    "BridgeRequestFailedError",
    "BridgeStats",
    "Call",
    "Close",
    "Closed",
    "Commit",
    "CommitFailed",
    "CommitOk",
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
    "call",
]
