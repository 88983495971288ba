"""The consumer core under every front end (``KafkaConsumer``, ``AsyncKafkaConsumer``, the
Thespian bridge, the Spark coordinator).

* :mod:`kafka_actors.core.consumer_core`: :class:`ConsumerCore`, one consumer's lifetime
  (context, facade, supervision tree, rebalance-safe commits), the subscription state as the
  application changes it, and every request to the actors as a future that never blocks.
* :mod:`kafka_actors.core.handout`: :class:`HandOut`, the hand-out bookkeeping (collect,
  keep, rewind, deserialize, what was returned).
* :mod:`kafka_actors.core.poll`: :class:`~kafka_actors.core.poll.PollStep`, one poll's steps
  around its collect, for every front end (sync, asyncio, both share consumers).

A front end builds one :class:`ConsumerCore` and uses its public API only; it waits on the
futures (``KafkaConsumer``) or awaits them (``AsyncKafkaConsumer``).

May touch: what its modules touch.
"""

from kafka_actors.core.consumer_core import (
    DEFAULT_CLOSE_TIMEOUT_S,
    ConsumerCore,
    build_config,
    commit_offsets,
)
from kafka_actors.core.handout import HandOut
from kafka_actors.structs import ConsumerGroupMetadata

__all__ = [
    "DEFAULT_CLOSE_TIMEOUT_S",
    "ConsumerCore",
    "ConsumerGroupMetadata",
    "HandOut",
    "build_config",
    "commit_offsets",
]
