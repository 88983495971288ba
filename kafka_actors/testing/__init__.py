"""kafka_actors.testing: the testkit.

Owns nothing itself; it re-exports the public names of its modules: a real Apache Kafka
broker/cluster launcher (KRaft, jars from Maven Central), the embedded librdkafka mock
cluster, listener/security descriptions, and jar resolution. The pytest fixtures live in
:mod:`kafka_actors.testing.pytest_plugin` (auto-registered by the ``pytest11`` entry point).
Importing this package starts nothing and downloads nothing.
"""

from kafka_actors.testing.broker import KafkaBroker, KafkaCluster, KafkaLaunchError, KafkaNode
from kafka_actors.testing.jars import (
    DEFAULT_KAFKA39_VERSION,
    DEFAULT_KAFKA_VERSION,
    JarResolutionError,
    KafkaJars,
)
from kafka_actors.testing.jars import resolve as resolve_jars
from kafka_actors.testing.mock import MockCluster, MockClusterError
from kafka_actors.testing.security import ListenerSpec, TestCertificates

__all__ = [
    "DEFAULT_KAFKA39_VERSION",
    "DEFAULT_KAFKA_VERSION",
    "JarResolutionError",
    "KafkaBroker",
    "KafkaCluster",
    "KafkaJars",
    "KafkaLaunchError",
    "KafkaNode",
    "ListenerSpec",
    "MockCluster",
    "MockClusterError",
    "TestCertificates",
    "resolve_jars",
]
