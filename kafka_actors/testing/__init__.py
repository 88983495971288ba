"""kafka_actors.testing: the testkit.

Owns nothing itself; it re-exports the public names of its modules: a real Apache Kafka
broker/cluster launcher (KRaft, Kafka's jars resolved by Maven), the embedded librdkafka mock
cluster, listener/security descriptions, and jar resolution. The pytest fixtures live in
:mod:`kafka_actors.testing.pytest_plugin` (auto-registered by the ``pytest11`` entry point).
Importing this package starts nothing and downloads nothing.

Usage::

    from kafka_actors.testing import KafkaBroker, KafkaCluster, ListenerSpec, MockCluster

    with KafkaBroker() as broker:                      # newest Kafka 4.x, one KRaft node
        broker.create_topic("t", partitions=3)
        broker.bootstrap_servers                       # "127.0.0.1:PORT"
        broker.run_tool("kafka-consumer-groups", ["--bootstrap-server",
                        broker.bootstrap_servers, "--list"])

    with KafkaCluster(num_brokers=3) as cluster:       # 3 brokers + 1 KRaft controller
        cluster.create_topic("r", partitions=3, replication_factor=3)
        cluster.kill_broker(1)                         # SIGKILL; cluster stays usable
        cluster.start_broker(1)                        # same id, ports and data

    sasl = ListenerSpec("SASL_SSL", "SASL_SSL", ("SCRAM-SHA-512",))
    with KafkaBroker(listeners=[sasl]) as b:           # users: DEFAULT_USERS
        conf = b.client_config("SASL_SSL")             # for confluent-kafka and ours, with CA

    with MockCluster(num_brokers=3) as mock:           # librdkafka's mock, in-process
        mock.create_topic("m", partitions=8)

    with KafkaBroker(broker_config=share_broker_config()) as b:   # share groups (KIP-932)
        set_share_group_config(b, "workers", record_lock_duration_ms=2000,
                               delivery_count_limit=3)        # + share.auto.offset.reset

Fault injection for a service's own tests (guide: ``docs/fault-injection.md``)::

    from kafka_actors.testing import FaultInjector

    faults = FaultInjector()                   # or the ``fault_injector`` pytest fixture
    consumer = KafkaConsumer(config, faults=faults)
    faults.error_response("ConsumerGroupHeartbeat", "FENCED_MEMBER_EPOCH")  # fence once
    faults.crash("fetch")                      # the fetch actor crashes and is restarted
    faults.delay_response("Fetch", seconds=2.0)

Our log lines in a test (the event dicts, as ``structlog.testing.capture_logs`` gives)::

    from kafka_actors.testing import capture_logs

    with capture_logs() as logs:
        consumer.poll(1.0)
    [e["event"] for e in logs if e["log_level"] == "warning"]

Command line: ``python -m kafka_actors.testing {fetch,broker,mock} --help``.
Environment: ``KAFKA_ACTORS_CACHE`` (jar cache root), ``KAFKA_ACTORS_MAVEN_REPO``,
``KAFKA_ACTORS_KAFKA_VERSION`` / ``KAFKA_ACTORS_KAFKA39_VERSION`` (fixture versions),
``KAFKA_ACTORS_KEEP_DIRS=1`` (keep broker directories and logs after stop),
``KAFKA_ACTORS_PDEATHSIG=0`` (do not tie JVM lifetime to this process's main thread).
"""

from kafka_actors.supervisors.faults import ACTOR_NAMES, FaultInjector
from kafka_actors.testing.broker import KafkaBroker, KafkaCluster, KafkaLaunchError, KafkaNode
from kafka_actors.testing.jars import (
    DEFAULT_KAFKA39_VERSION,
    DEFAULT_KAFKA_VERSION,
    JarResolutionError,
    KafkaJars,
)
from kafka_actors.testing.jars import resolve as resolve_jars
from kafka_actors.testing.logs import capture_logs
from kafka_actors.testing.mock import MockCluster, MockClusterError
from kafka_actors.testing.security import ListenerSpec, TestCertificates
from kafka_actors.testing.share import (
    ShareGroupConfigError,
    describe_share_group_config,
    set_share_group_config,
    share_broker_config,
)

__all__ = [
    "ACTOR_NAMES",
    "DEFAULT_KAFKA39_VERSION",
    "DEFAULT_KAFKA_VERSION",
    "FaultInjector",
    "JarResolutionError",
    "KafkaBroker",
    "KafkaCluster",
    "KafkaJars",
    "KafkaLaunchError",
    "KafkaNode",
    "ListenerSpec",
    "MockCluster",
    "MockClusterError",
    "ShareGroupConfigError",
    "TestCertificates",
    "capture_logs",
    "describe_share_group_config",
    "resolve_jars",
    "set_share_group_config",
    "share_broker_config",
]
