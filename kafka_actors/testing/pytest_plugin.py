"""pytest plugin of the testkit: Kafka fixtures, broker logs on failure, JVM leak check.

Owns: the session fixtures ``kafka_broker`` (newest Kafka 4.x, one KRaft node),
``kafka_broker_39`` (Kafka 3.9.x), ``kafka_cluster`` (3 brokers and a controller),
``kafka_broker_secured`` (4.x with SASL_PLAINTEXT, SSL and SASL_SSL listeners),
``mock_cluster`` (librdkafka mock, 3 brokers), ``share_broker`` (newest Kafka 4.x set up for
share-group tests, :func:`~kafka_actors.testing.share.share_broker_config`), the
``share_group`` factory (a unique share group id with its group configuration set), the
``kafka_topic`` factory, ``fault_injector``
(a fresh :class:`~kafka_actors.supervisors.FaultInjector` per test, see
``docs/fault-injection.md``), and the hooks that
restart brokers a test left stopped, attach broker log tails to failure reports and, at
session end, stop any JVM the tests started that is still alive (by PID).
May touch: the testkit's own modules (broker, mock, processes) only.

Registered through the ``pytest11`` entry point, so the fixtures are available wherever the
package is installed. Fixtures are lazy: a session that uses none starts no broker.
Versions: ``KAFKA_ACTORS_KAFKA_VERSION`` and ``KAFKA_ACTORS_KAFKA39_VERSION``.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Generator, Iterator
from typing import Any, Protocol

import pytest

from kafka_actors.supervisors.faults import FaultInjector
from kafka_actors.testing import jars as _jars
from kafka_actors.testing import processes as _processes
from kafka_actors.testing.broker import BROKER_JVM_OPTIONS_ENV, KafkaBroker, KafkaCluster
from kafka_actors.testing.mock import MockCluster
from kafka_actors.testing.security import ALL_SECURE_LISTENERS
from kafka_actors.testing.share import set_share_group_config, share_broker_config

_LOG_TAIL_LINES = 60
_CLUSTER_FIXTURES = (
    "kafka_broker",
    "kafka_broker_39",
    "kafka_cluster",
    "kafka_broker_secured",
    "share_broker",
)


class _TopicTarget(Protocol):
    def create_topic(
        self,
        name: str,
        partitions: int = ...,
        replication_factor: int = ...,
        config: Any = ...,
        timeout: float = ...,
    ) -> None: ...


def pytest_configure(config: pytest.Config) -> None:
    # Test brokers start with the C1 compiler only (see broker.BROKER_JVM_OPTIONS_ENV): a
    # third less CPU per start; set the variable (even empty) to choose otherwise.
    os.environ.setdefault(BROKER_JVM_OPTIONS_ENV, "-XX:TieredStopAtLevel=1")
    for line in (
        "broker: needs a real Apache Kafka broker started by the testkit",
        "cluster: needs a real 3-broker Apache Kafka cluster",
        "mock: uses the embedded librdkafka mock cluster",
    ):
        config.addinivalue_line("markers", line)


_MARK_OF_FIXTURE = {
    "kafka_broker": "broker",
    "kafka_broker_39": "broker",
    "kafka_broker_secured": "broker",
    "share_broker": "broker",
    "share_group": "broker",
    "kafka_cluster": "cluster",
    "mock_cluster": "mock",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that uses a testkit cluster fixture carries its marker (``broker``, ``cluster``
    (also ``broker``), ``mock``), so ``-m "not broker and not mock"`` selects what runs without
    one, whether or not the test module marked itself."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, mark in _MARK_OF_FIXTURE.items():
            if fixture in names:
                if item.get_closest_marker(mark) is None:
                    item.add_marker(mark)
                if mark == "cluster" and item.get_closest_marker("broker") is None:
                    item.add_marker("broker")


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """One combined broker+controller KRaft node of the newest Kafka 4.x (session)."""
    with KafkaBroker(kafka_version=_jars.default_version()) as b:
        yield b


@pytest.fixture(scope="session")
def kafka_broker_39() -> Iterator[KafkaBroker]:
    """One combined KRaft node of Kafka 3.9.x (session)."""
    with KafkaBroker(kafka_version=_jars.default_version_39()) as b:
        yield b


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[KafkaCluster]:
    """Three brokers beside one dedicated KRaft controller (session).

    A test may stop or kill brokers; any broker left stopped is restarted (and waited for)
    after that test, before the next one runs.
    """
    with KafkaCluster(num_brokers=3, kafka_version=_jars.default_version()) as c:
        yield c


@pytest.fixture(scope="session")
def kafka_broker_secured() -> Iterator[KafkaBroker]:
    """One Kafka 4.x node with the PLAINTEXT listener plus ``SASL_PLAINTEXT``, ``SSL`` and
    ``SASL_SSL`` listeners (SASL: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; users from
    ``DEFAULT_USERS``; a test CA at ``.ca_path``). ``.client_config(listener, mechanism=...)``
    gives librdkafka settings (session)."""
    with KafkaBroker(kafka_version=_jars.default_version(), listeners=ALL_SECURE_LISTENERS) as b:
        yield b


@pytest.fixture(scope="session")
def mock_cluster() -> Iterator[MockCluster]:
    """librdkafka's mock cluster with 3 brokers (session)."""
    with MockCluster(num_brokers=3) as m:
        yield m


@pytest.fixture(scope="session")
def share_broker() -> Iterator[KafkaBroker]:
    """One KRaft node of the newest Kafka 4.x set up for share-group (KIP-932) tests
    (session): share groups are on (Kafka 4.x's default), groups may set a record lock down to
    1 s, the broker's default lock for groups is 10 s, members heartbeat every 500 ms. See
    :func:`~kafka_actors.testing.share.share_broker_config`; the other fixtures keep Kafka's
    defaults."""
    with KafkaBroker(
        kafka_version=_jars.default_version(), broker_config=share_broker_config()
    ) as b:
        yield b


@pytest.fixture
def share_group(request: pytest.FixtureRequest) -> Callable[..., str]:
    """Factory: ``share_group(cluster=None, *, record_lock_duration_ms=None,
    delivery_count_limit=None, auto_offset_reset="earliest", config=None)`` returns a share
    group id unique to this test, with that group configuration set on ``cluster`` (default:
    the ``share_broker`` fixture, started on first use) through IncrementalAlterConfigs."""
    base = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:100]

    def make(
        cluster: KafkaCluster | None = None,
        *,
        record_lock_duration_ms: int | None = None,
        delivery_count_limit: int | None = None,
        auto_offset_reset: str | None = "earliest",
        config: dict[str, object] | None = None,
    ) -> str:
        target = cluster if cluster is not None else request.getfixturevalue("share_broker")
        group = f"share-{base}-{uuid.uuid4().hex[:10]}"
        set_share_group_config(
            target,
            group,
            auto_offset_reset=auto_offset_reset,
            record_lock_duration_ms=record_lock_duration_ms,
            delivery_count_limit=delivery_count_limit,
            config=config,
        )
        return group

    return make


@pytest.fixture
def kafka_topic(request: pytest.FixtureRequest) -> Callable[..., str]:
    """Factory: ``kafka_topic(cluster, partitions=1, replication_factor=1, config=None)``
    creates a topic with a name unique to this test on ``cluster`` (a KafkaCluster or a
    MockCluster) and returns the name. Topics are left in place (the clusters are
    throw-away)."""
    base = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:120]

    def make(
        cluster: _TopicTarget,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: dict[str, str] | None = None,
        *,
        prefix: str | None = None,
    ) -> str:
        name = f"{prefix or base}-{uuid.uuid4().hex[:10]}"
        if isinstance(cluster, MockCluster):
            cluster.create_topic(name, partitions, replication_factor, config)
        else:
            cluster.create_topic(name, partitions, replication_factor or 1, config)
        return name

    return make


@pytest.fixture
def fault_injector() -> Iterator[FaultInjector]:
    """A fresh FaultInjector for this test: pass it as ``faults=`` to a consumer
    (``KafkaConsumer``, ``AsyncKafkaConsumer``, the Thespian bridge's ``Configure``) and add
    rules by Kafka's names while it runs, e.g.
    ``fault_injector.error_response("ConsumerGroupHeartbeat", "FENCED_MEMBER_EPOCH")``.
    Every rule is cleared after the test."""
    injector = FaultInjector()
    try:
        yield injector
    finally:
        injector.clear()


def _clusters_of(item: pytest.Item) -> list[tuple[str, KafkaCluster]]:
    funcargs: dict[str, Any] = getattr(item, "funcargs", {}) or {}
    found = [(k, v) for k, v in funcargs.items() if isinstance(v, KafkaCluster)]
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        for name, cluster in _clusters_of(item):
            try:
                text = cluster.logs_tail(_LOG_TAIL_LINES)
            except Exception as exc:  # a report must never fail
                text = f"(could not read logs: {exc!r})"
            report.sections.append((f"{name} logs (last {_LOG_TAIL_LINES} lines)", text))
    return report


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Restart any broker of a session cluster that this test left stopped."""
    for name, cluster in _clusters_of(item):
        if name in _CLUSTER_FIXTURES and cluster.nodes:
            cluster.ensure_running()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop, by PID, any JVM the tests started that is still alive; a leak fails the run."""
    leaked = _processes.kill_all(timeout=15.0)
    if leaked:
        msg = f"kafka-actors testkit: JVMs still alive at session end, killed: {leaked}"
        session.config.stash[_LEAKS] = msg
        if session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


_LEAKS = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    msg = config.stash.get(_LEAKS, None)
    if msg:
        terminalreporter.write_line(msg, red=True)
