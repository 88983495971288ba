"""kafka-actors: an actor-based Apache Kafka consumer for Python.

One import root. Sub-packages: ``protocol`` (pure wire code), ``actors`` (pykka actors),
``supervisors`` (supervision trees and fault injection), ``testing`` (the testkit).

The public API: :class:`KafkaConsumer`, :class:`AsyncKafkaConsumer` (asyncio),
:class:`ParallelConsumer` and :class:`AsyncParallelConsumer` (records handled concurrently
inside partitions, key-ordered),
:class:`KafkaShareConsumer`, :class:`AsyncKafkaShareConsumer` (share groups, KIP-932) with
:class:`AcknowledgeType`, :class:`ShareConsumerRecord`, :class:`ShareConsumerRecords`,
:class:`ConsumerRebalanceListener`, :class:`ConsumerHealth` (what ``health()`` returns),
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
    "AsyncParallelConsumer",
    "ConsumerGroupMetadata",
    "ConsumerHealth",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "ConsumerRecords",
    "KafkaConsumer",
    "KafkaShareConsumer",
    "OffsetAndMetadata",
    "ParallelConsumer",
    "RebalanceReply",
    "ShareConsumerRecord",
    "ShareConsumerRecords",
    "TopicPartition",
    "__version__",
]

if TYPE_CHECKING:
    from kafka_actors.aio import AsyncKafkaConsumer
    from kafka_actors.aio_share import AsyncKafkaShareConsumer
    from kafka_actors.consumer import KafkaConsumer
    from kafka_actors.health import ConsumerHealth
    from kafka_actors.parallel.aio import AsyncParallelConsumer
    from kafka_actors.parallel.consumer import ParallelConsumer
    from kafka_actors.share_consumer import KafkaShareConsumer
    from kafka_actors.structs import (
        AcknowledgeType,
        ConsumerGroupMetadata,
        ConsumerRebalanceListener,
        ConsumerRecord,
        ConsumerRecords,
        OffsetAndMetadata,
        RebalanceReply,
        ShareConsumerRecord,
        ShareConsumerRecords,
        TopicPartition,
    )

_LAZY = {
    "AsyncKafkaConsumer": "kafka_actors.aio",
    "KafkaConsumer": "kafka_actors.consumer",
    "KafkaShareConsumer": "kafka_actors.share_consumer",
    "ParallelConsumer": "kafka_actors.parallel.consumer",
    "AsyncParallelConsumer": "kafka_actors.parallel.aio",
    "AsyncKafkaShareConsumer": "kafka_actors.aio_share",
    "ConsumerHealth": "kafka_actors.health",
    **dict.fromkeys(
        (
            "AcknowledgeType",
            "ConsumerGroupMetadata",
            "ConsumerRebalanceListener",
            "ConsumerRecord",
            "ConsumerRecords",
            "OffsetAndMetadata",
            "RebalanceReply",
            "ShareConsumerRecord",
            "ShareConsumerRecords",
            "TopicPartition",
        ),
        "kafka_actors.structs",
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kafka_actors' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
