"""kafka-actors: an actor-based Apache Kafka consumer for Python.

One import root. Sub-packages: ``protocol`` (pure wire code), ``actors`` (pykka actors),
``supervisors`` (supervision trees and fault injection), ``testing`` (the testkit).

The public API: :class:`KafkaConsumer`, :class:`AsyncKafkaConsumer` (asyncio),
:class:`KafkaShareConsumer`, :class:`AsyncKafkaShareConsumer` (share groups, KIP-932) with
:class:`AcknowledgeType`, :class:`ShareConsumerRecord`, :class:`ShareConsumerRecords`,
:class:`ConsumerRebalanceListener`,
:class:`TopicPartition`, :class:`OffsetAndMetadata`, :class:`ConsumerRecord` (and
``kafka_actors.errors`` for the typed errors). They are imported lazily, so importing a
sub-package (the protocol layer, the testkit) does not start anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka_actors._version import __version__  # written once, in _version.py

__all__ = [
    "AcknowledgeType",
    "AsyncKafkaConsumer",
    "AsyncKafkaShareConsumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "ConsumerRecords",
    "KafkaConsumer",
    "KafkaShareConsumer",
    "OffsetAndMetadata",
    "RebalanceReply",
    "ShareConsumerRecord",
    "ShareConsumerRecords",
    "TopicPartition",
    "__version__",
]

if TYPE_CHECKING:
    from kafka_actors.aio import AsyncKafkaConsumer
    from kafka_actors.aio_share import AsyncKafkaShareConsumer
    from kafka_actors.consumer import (
        ConsumerRebalanceListener,
        ConsumerRecords,
        KafkaConsumer,
        RebalanceReply,
    )
    from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
    from kafka_actors.protocol.records import ConsumerRecord
    from kafka_actors.share_consumer import (
        AcknowledgeType,
        KafkaShareConsumer,
        ShareConsumerRecord,
        ShareConsumerRecords,
    )

_LAZY = {
    "AsyncKafkaConsumer": "kafka_actors.aio",
    "KafkaConsumer": "kafka_actors.consumer",
    "ConsumerRebalanceListener": "kafka_actors.consumer",
    "ConsumerRecords": "kafka_actors.consumer",
    "RebalanceReply": "kafka_actors.consumer",
    "TopicPartition": "kafka_actors.protocol.messages",
    "OffsetAndMetadata": "kafka_actors.protocol.messages",
    "ConsumerRecord": "kafka_actors.protocol.records",
    "KafkaShareConsumer": "kafka_actors.share_consumer",
    "AsyncKafkaShareConsumer": "kafka_actors.aio_share",
    "AcknowledgeType": "kafka_actors.share_consumer",
    "ShareConsumerRecord": "kafka_actors.share_consumer",
    "ShareConsumerRecords": "kafka_actors.share_consumer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kafka_actors' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
