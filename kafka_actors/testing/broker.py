"""A real Apache Kafka cluster (KRaft) on loopback, launched from Kafka's jars (via Maven).

Owns: the KRaft nodes it starts (their JVMs are recorded by PID in
:mod:`kafka_actors.testing.processes`, which stops them, only by PID, on ``stop()``, context
exit, interpreter exit and SIGTERM/SIGHUP), their temporary directories (configuration, data,
one log file per node), and the loopback ports it picks. May touch: the jar cache through
:mod:`kafka_actors.testing.jars`, the cluster through confluent-kafka's AdminClient
(readiness, topics), and ``openssl`` for test certificates
(:mod:`kafka_actors.testing.security`).

Topology: one broker runs as a combined ``broker,controller`` KRaft node. N > 1 brokers run
beside one dedicated KRaft controller process, so any one broker may be stopped, SIGKILLed
and restarted while the metadata quorum (and so the cluster) stays available, and
replication-factor-3 topics keep a leader.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from kafka_actors.testing import jars as _jars
from kafka_actors.testing.processes import (
    DIR_PREFIX,
    OWNER_FILE,
    register,
    register_dir,
    sweep_stale_dirs,
    terminate,
    unregister,
    unregister_dir,
)
from kafka_actors.testing.processes import install_exit_handlers as _install_exit_handlers
from kafka_actors.testing.processes import kill_all as kill_all
from kafka_actors.testing.processes import live_pids as live_pids
from kafka_actors.testing.processes import pdeathsig_prefix as _pdeathsig_prefix
from kafka_actors.testing.processes import pid_alive as pid_alive
from kafka_actors.testing.processes import started_pids as started_pids
from kafka_actors.testing.security import (
    DEFAULT_CERTIFICATE_NAMES,
    SCRAM_MECHANISMS,
    ListenerSpec,
    TestCertificates,
    client_config,
    make_certificates,
)

HOST = "127.0.0.1"
INTERNAL_LISTENER = "PLAINTEXT"
CONTROLLER_LISTENER = "CONTROLLER"
DEFAULT_USERS: Mapping[str, str] = {"alice": "alice-secret", "bob": "bob-secret"}

BROKER_JVM = ("-Xmx512m", "-Xms128m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20")
# The dedicated controller and short-lived tools do little work: a small heap, the serial
# collector and the C1 compiler only, which start faster and leave the CPUs to the brokers.
LIGHT_JVM = ("-Xmx256m", "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
#: Extra JVM flags for every broker node, from the environment (space-separated), before a
#: cluster's own ``jvm_options``. The testkit's pytest plugin sets ``-XX:TieredStopAtLevel=1``
#: (C1 only): a broker then starts on ~4 CPU-seconds instead of ~6.4 (measured on 2 cores),
#: which counts when a test run starts a hundred of them; benchmarks, run outside pytest,
#: keep the full JIT.
BROKER_JVM_OPTIONS_ENV = "KAFKA_ACTORS_BROKER_JVM_OPTIONS"


class KafkaLaunchError(RuntimeError):
    """A Kafka node did not start, or did not become ready in time."""


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports that were free a moment ago (kernel-chosen)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1.0):
        return True
    return False


def _tail(path: Path, n: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 256 * 1024))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


_LOG4J2_XML = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <Console name="OUT" target="{target}">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="{level}"><AppenderRef ref="OUT"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="org.apache.kafka.common.config.AbstractConfig" level="WARN"/>
    <Logger name="org.apache.kafka.metadata.migration" level="WARN"/>
  </Loggers>
</Configuration>
"""

_LOG4J1_PROPS = """log4j.rootLogger={level}, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.Target={target_j1}
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.org.apache.kafka.common.config.AbstractConfig=WARN
"""


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that concurrent readers never see a partial file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _write_log_config(directory: Path, major: int, level: str, to_stderr: bool) -> list[str]:
    """Write a console logging configuration; return the JVM flags that select it."""
    directory.mkdir(parents=True, exist_ok=True)
    stream = "err" if to_stderr else "out"
    if major >= 4:
        path = directory / f"log4j2-{level.lower()}-{stream}.xml"
        target = "SYSTEM_ERR" if to_stderr else "SYSTEM_OUT"
        _write_atomically(path, _LOG4J2_XML.format(target=target, level=level))
        return [f"-Dlog4j2.configurationFile={path}"]
    path = directory / f"log4j-{level.lower()}-{stream}.properties"
    target_j1 = "System.err" if to_stderr else "System.out"
    _write_atomically(path, _LOG4J1_PROPS.format(target_j1=target_j1, level=level))
    return [f"-Dlog4j.configuration=file:{path}"]


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise KafkaLaunchError("java is not on PATH (and JAVA_HOME is not set)")
    return found


# Kafka command-line tools by their script names: candidate main classes, newest first.
TOOL_ALIASES: Mapping[str, tuple[str, ...]] = {
    "kafka-consumer-groups": ("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",),
    "kafka-console-consumer": (
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "kafka.tools.ConsoleConsumer",
    ),
    "kafka-console-producer": (
        "org.apache.kafka.tools.ConsoleProducer",
        "kafka.tools.ConsoleProducer",
    ),
    "kafka-verifiable-consumer": ("org.apache.kafka.tools.VerifiableConsumer",),
    "kafka-verifiable-producer": ("org.apache.kafka.tools.VerifiableProducer",),
    "kafka-topics": ("org.apache.kafka.tools.TopicCommand", "kafka.admin.TopicCommand"),
    # 3.x only: the 4.x jars on Maven Central carry no ConfigCommand (use the AdminClient).
    "kafka-configs": ("org.apache.kafka.tools.ConfigCommand", "kafka.admin.ConfigCommand"),
    "kafka-get-offsets": ("org.apache.kafka.tools.GetOffsetShell",),
    "kafka-transactions": ("org.apache.kafka.tools.TransactionsCommand",),
    "kafka-metadata-quorum": ("org.apache.kafka.tools.MetadataQuorumCommand",),
    "kafka-producer-perf-test": ("org.apache.kafka.tools.ProducerPerformance",),
    "kafka-consumer-perf-test": ("org.apache.kafka.tools.ConsumerPerformance",),
    "kafka-features": ("org.apache.kafka.tools.FeatureCommand",),
    # Client-metrics subscriptions (KIP-714), 3.7+.
    "kafka-client-metrics": ("org.apache.kafka.tools.ClientMetricsCommand",),
    # Share groups (KIP-932), 4.x tools.
    "kafka-console-share-consumer": ("org.apache.kafka.tools.consumer.ConsoleShareConsumer",),
    "kafka-share-consumer-perf-test": ("org.apache.kafka.tools.ShareConsumerPerformance",),
    "kafka-verifiable-share-consumer": ("org.apache.kafka.tools.VerifiableShareConsumer",),
    "kafka-share-groups": ("org.apache.kafka.tools.consumer.group.ShareGroupCommand",),
    "kafka-storage": ("kafka.tools.StorageTool",),
}


_classes_lock = threading.Lock()
_classes_cache: dict[Path, tuple[frozenset[str], frozenset[str]]] = {}


def _classes_of(jars: _jars.KafkaJars) -> tuple[frozenset[str], frozenset[str]]:
    """Top-level class names in the tools and the broker class paths (cached)."""
    with _classes_lock:
        found = _classes_cache.get(jars.directory)
    if found is None:
        found = (
            frozenset(_jar_classes(jars.tools_classpath)),
            frozenset(_jar_classes(jars.broker_classpath)),
        )
        with _classes_lock:
            _classes_cache[jars.directory] = found
    return found


def _jar_classes(paths: Sequence[Path]) -> set[str]:
    names: set[str] = set()
    for p in paths:
        with zipfile.ZipFile(p) as zf:
            for n in zf.namelist():
                if n.endswith(".class") and "$" not in n:
                    names.add(n[:-6].replace("/", "."))
    return names


# --------------------------------------------------------------------------------------
# Nodes
# --------------------------------------------------------------------------------------


@dataclass
class KafkaNode:
    """One KRaft node (a broker, a controller, or both) of a :class:`KafkaCluster`."""

    node_id: int
    roles: tuple[str, ...]
    host: str
    ports: dict[str, int]
    controller_port: int | None
    directory: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def port(self) -> int:
        """The port of the internal PLAINTEXT listener (brokers) or the controller port."""
        if INTERNAL_LISTENER in self.ports:
            return self.ports[INTERNAL_LISTENER]
        assert self.controller_port is not None
        return self.controller_port

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    def logs_tail(self, n: int = 50) -> str:
        return _tail(self.log_path, n)


# --------------------------------------------------------------------------------------
# The cluster
# --------------------------------------------------------------------------------------


class KafkaCluster:
    """A KRaft Apache Kafka cluster of ``num_brokers`` brokers on loopback.

    ``broker_config`` entries override the defaults (fast-test settings listed in
    :meth:`_base_config`). ``listeners`` adds client listeners beside the internal
    ``PLAINTEXT`` one, e.g. ``ListenerSpec("SASL", "SASL_PLAINTEXT", ("PLAIN",))``; SASL
    users (PLAIN and SCRAM) come from ``users``. ``jvm_options`` are appended to each
    node's JVM flags (after the small default heap, so ``-Xmx2g`` wins); ``classpath``
    entries follow the Kafka jars on each node's classpath (a plugin a test compiled). Use
    as a context manager, or call :meth:`start` and :meth:`stop`.

    ``first_node_id`` numbers the brokers: ``node.id`` ``first_node_id`` to
    ``first_node_id + num_brokers - 1`` (default 1, so 1..N). Every place a node id appears
    follows it: each node's ``server.properties``, ``controller.quorum.voters`` (a single
    broker is its own voter), the storage format (which reads that configuration), the node
    directories and :attr:`KafkaNode.node_id`. The dedicated controller of a multi-broker
    cluster is node ``1000``, or ``first_node_id + num_brokers`` when the brokers' range
    covers 1000. Two clusters with different ``first_node_id`` stand for "a new cluster with
    different brokers" (e.g. a consumer re-bootstrapping onto it must not wait for old ids).

    Why one class of ~710 lines: it is the testkit's one handle on a set of JVM processes (plan,
    configure, format, spawn, wait, stop/kill/restart by PID, topics and Kafka's tools against
    them); every part reads the same node table, and tests reach all of it through this handle.
    """

    def __init__(
        self,
        num_brokers: int = 1,
        kafka_version: str | None = None,
        broker_config: Mapping[str, Any] | None = None,
        listeners: Sequence[ListenerSpec] = (),
        users: Mapping[str, str] = DEFAULT_USERS,
        *,
        start_timeout: float = 180.0,
        keep_dir: bool | None = None,
        jvm_options: Sequence[str] = (),
        certificate_names: Sequence[str] = DEFAULT_CERTIFICATE_NAMES,
        first_node_id: int = 1,
        classpath: Sequence[str] = (),
    ) -> None:
        if num_brokers < 1:
            raise ValueError("num_brokers must be >= 1")
        if first_node_id < 0:
            raise ValueError(f"first_node_id must be >= 0 (Kafka's node.id), got {first_node_id}")
        names = [spec.name for spec in listeners]
        if len(set(names)) != len(names) or {INTERNAL_LISTENER, CONTROLLER_LISTENER} & set(names):
            raise ValueError(f"listener names must be unique and not reserved: {names}")
        self.num_brokers = num_brokers
        #: ``node.id`` of the first broker; broker ``i`` is ``first_node_id + i``.
        self.first_node_id = first_node_id
        self.kafka_version = kafka_version or _jars.default_version()
        self.broker_config = dict(broker_config or {})
        self.listeners = tuple(listeners)
        self.users = dict(users)
        self.start_timeout = start_timeout
        self.jvm_options = tuple(jvm_options)
        #: Directories or jars added to the brokers' classpath (a plugin class a test
        #: compiled, e.g. a client-telemetry receiver in ``metric.reporters``).
        self.classpath = tuple(str(entry) for entry in classpath)
        #: Subject alternative names of the SSL listeners' certificate (``DNS:...``/``IP:...``).
        self.certificate_names = tuple(certificate_names)
        self.keep_dir = (
            bool(os.environ.get("KAFKA_ACTORS_KEEP_DIRS")) if keep_dir is None else keep_dir
        )
        self.cluster_id = ""
        self.directory: Path | None = None
        self.certificates: TestCertificates | None = None
        self._jars: _jars.KafkaJars | None = None
        self._nodes: list[KafkaNode] = []
        self._controller: KafkaNode | None = None
        self._lock = threading.RLock()

    # ----- properties ---------------------------------------------------------------

    @property
    def jars(self) -> _jars.KafkaJars:
        if self._jars is None:
            self._jars = _jars.resolve(self.kafka_version)
        return self._jars

    @property
    def brokers(self) -> list[KafkaNode]:
        """The broker nodes, in node-id order (index ``i`` is used by the *_broker calls)."""
        return [n for n in self._nodes if n.is_broker]

    @property
    def nodes(self) -> list[KafkaNode]:
        """Every node, brokers and the dedicated controller (if any)."""
        return list(self._nodes)

    @property
    def controller(self) -> KafkaNode:
        assert self._controller is not None, "cluster not started"
        return self._controller

    @property
    def bootstrap_servers(self) -> str:
        return self.listener_bootstrap(INTERNAL_LISTENER)

    def listener_bootstrap(self, name: str) -> str:
        """``host:port,...`` of listener ``name`` over every broker."""
        if not self._nodes:
            raise KafkaLaunchError("cluster not started")
        return ",".join(f"{n.host}:{n.ports[name]}" for n in self.brokers)

    def listener(self, name: str) -> ListenerSpec:
        for spec in self.listeners:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def ca_path(self) -> Path:
        """PEM file of the test CA that signed the brokers' certificates (SSL listeners)."""
        if self.certificates is None:
            raise KafkaLaunchError("this cluster has no SSL listener")
        return self.certificates.ca_cert

    def client_config(
        self,
        listener: str = INTERNAL_LISTENER,
        *,
        user: str | None = None,
        mechanism: str | None = None,
    ) -> dict[str, str]:
        """A client config reaching this cluster on ``listener``, accepted by confluent-kafka
        (librdkafka) and by kafka-actors' consumers alike."""
        if listener == INTERNAL_LISTENER:
            return {"bootstrap.servers": self.bootstrap_servers}
        spec = self.listener(listener)
        name = user or next(iter(self.users))
        return client_config(
            spec,
            self.listener_bootstrap(listener),
            user=name,
            password=self.users[name],
            mechanism=mechanism,
            ca_path=self.certificates.ca_cert if self.certificates else None,
        )

    def admin_config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap_servers}

    # ----- lifecycle ----------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """Format storage, start every node and wait until all brokers are registered."""
        with self._lock:
            if self._nodes:
                return self
            _install_exit_handlers()
            jars = self.jars
            sweep_stale_dirs()
            self.directory = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{jars.version}-"))
            (self.directory / OWNER_FILE).write_text(str(os.getpid()))
            if not self.keep_dir:
                register_dir(self.directory)
            self.cluster_id = _random_cluster_id()
            if any(s.uses_ssl for s in self.listeners):
                self.certificates = make_certificates(
                    self.directory / "tls", names=self.certificate_names
                )
            attempts = 3
            for attempt in range(1, attempts + 1):
                self._plan_nodes()
                try:
                    for node in self._nodes:
                        self._write_config(node)
                    self._format_all(self._nodes)
                    # The dedicated controller first: brokers register with it.
                    for node in sorted(self._nodes, key=lambda n: n.is_broker):
                        self._spawn(node)
                    self._wait_ready(self.start_timeout)
                    return self
                except KafkaLaunchError as exc:
                    bind_race = any(
                        "Address already in use" in n.logs_tail(400) for n in self._nodes
                    )
                    self._kill_nodes()
                    if not bind_race or attempt == attempts:
                        self._cleanup_dir()
                        self._nodes = []
                        raise exc
                    # Another process took one of our ports between picking and binding.
                    for node in self._nodes:
                        shutil.rmtree(node.directory, ignore_errors=True)
                except BaseException:
                    # Anything else (a timeout, Ctrl-C): leave no JVM and no directory.
                    self._kill_nodes()
                    self._cleanup_dir()
                    self._nodes = []
                    raise
            raise AssertionError("unreachable")

    def stop(self, timeout: float = 30.0) -> None:
        """Stop brokers gracefully (SIGTERM), then the controller; SIGKILL after timeout."""
        with self._lock:
            if not self._nodes:
                return
            brokers = [n.process for n in self.brokers if n.process is not None]
            terminate(brokers, timeout)
            others = [n.process for n in self._nodes if not n.is_broker and n.process is not None]
            terminate(others, timeout)
            self._cleanup_dir()
            self._nodes = []
            self._controller = None

    def _kill_nodes(self) -> None:
        procs = [n.process for n in self._nodes if n.process is not None]
        for p in procs:
            if p.poll() is None:
                p.kill()
        terminate(procs, 5.0)

    def _cleanup_dir(self) -> None:
        if self.directory is not None and not self.keep_dir:
            shutil.rmtree(self.directory, ignore_errors=True)
            unregister_dir(self.directory)

    # ----- single broker control ----------------------------------------------------

    def stop_broker(self, i: int, timeout: float = 30.0) -> None:
        """Stop broker ``i`` gracefully (controlled shutdown), SIGKILL after timeout."""
        node = self.brokers[i]
        if node.process is not None:
            terminate([node.process], timeout)

    def kill_broker(self, i: int) -> None:
        """SIGKILL broker ``i``."""
        node = self.brokers[i]
        if node.process is not None and node.process.poll() is None:
            node.process.kill()
            node.process.wait()
            unregister(node.process)

    def start_broker(self, i: int, timeout: float | None = None) -> None:
        """Start broker ``i`` again (same id, ports and data) and wait until registered."""
        node = self.brokers[i]
        if node.running:
            return
        self._spawn(node)
        self._wait_ready(timeout or self.start_timeout, [node])

    def restart_broker(self, i: int, *, kill: bool = False, timeout: float | None = None) -> None:
        if kill:
            self.kill_broker(i)
        else:
            self.stop_broker(i)
        self.start_broker(i, timeout)

    def ensure_running(self, timeout: float | None = None) -> None:
        """Restart every node (controller first) that is not running; wait until ready."""
        stopped = sorted((n for n in self._nodes if not n.running), key=lambda n: n.is_broker)
        for node in stopped:
            self._spawn(node)
        if stopped:
            self._wait_ready(timeout or self.start_timeout, stopped)

    def logs_tail(self, n: int = 50) -> str:
        """The last ``n`` lines of every node's log, each under a header."""
        parts = []
        for node in self._nodes:
            parts.append(
                f"----- node {node.node_id} ({','.join(node.roles)}) pid={node.pid} "
                f"running={node.running} {node.log_path} -----\n{node.logs_tail(n)}"
            )
        return "\n".join(parts)

    # ----- topics -------------------------------------------------------------------

    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.admin_config())

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> None:
        """Create a topic and wait until every partition has a leader and a full ISR.

        A retriable failure (a transport error: a broker just started may close a connection
        it accepted; a timeout) is retried with exponential backoff and jitter until
        ``timeout``; TOPIC_ALREADY_EXISTS after such a retry means the earlier attempt
        created it. Any other error raises at once."""
        import random

        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.cimpl import NewTopic

        from kafka_actors.protocol.request_state import ExponentialBackoff

        admin = self._admin()
        topic = NewTopic(
            name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            config=dict(config or {}),
        )
        backoff = ExponentialBackoff(100, 2.0, 2_000, 0.2, random.random)
        deadline = time.monotonic() + timeout
        attempts = 0
        while True:
            left = max(1.0, deadline - time.monotonic())
            futures = admin.create_topics([topic], operation_timeout=left, request_timeout=left)
            try:
                futures[name].result(left)
                break
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if not isinstance(error, KafkaError):
                    raise
                if attempts and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    break  # an earlier attempt created it before its answer was lost
                transient = error.retriable() or error.code() in (
                    KafkaError._TRANSPORT,
                    KafkaError._TIMED_OUT,
                )
                pause = backoff.backoff(attempts) / 1000.0
                if not transient or time.monotonic() + pause >= deadline:
                    raise
                attempts += 1
                time.sleep(pause)
        self.wait_for_topic(name, partitions, replication_factor, timeout=timeout, admin=admin)

    def wait_for_topic(
        self,
        name: str,
        partitions: int | None = None,
        isr: int | None = None,
        *,
        timeout: float = 60.0,
        admin: Any = None,
    ) -> None:
        """Wait until ``name`` has ``partitions`` partitions, each with a leader and
        (if given) at least ``isr`` in-sync replicas, as the brokers' metadata says.

        With several brokers, each running broker is then asked on its own (a fresh client
        bootstrapped from it alone), so that no broker's metadata cache still lacks the
        topic when this returns. Last, every partition's leader must answer ListOffsets, so
        that a Produce sent next is not refused while the leader is still being made."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        clients = [admin or self._admin()]
        if len(self.brokers) > 1:
            clients += [
                AdminClient({"bootstrap.servers": f"{n.host}:{n.port}", "log_level": 0})
                for n in self.brokers
                if n.running
            ]
        last = "no metadata"
        for client in clients:
            while True:
                ok, last = _topic_ready(client, name, partitions, isr)
                if ok:
                    break
                if time.monotonic() > deadline:
                    raise KafkaLaunchError(f"topic {name} not ready after {timeout}s: {last}")
                time.sleep(0.2)
        # A broker shows a new partition's leader in its metadata before its replica manager
        # has made the partition (it publishes the metadata image first, then applies the
        # topic delta; 400 ms on a loaded machine): a Produce sent in between fails with
        # NOT_LEADER_OR_FOLLOWER, and a plain producer's retry lands its batch after later
        # ones (issue 10, bug 5). ListOffsets passes the same leader check: wait for it.
        while True:
            ok, last = _leaders_serve(clients[0], name)
            if ok:
                return
            if time.monotonic() > deadline:
                raise KafkaLaunchError(f"topic {name} leaders not serving after {timeout}s: {last}")
            time.sleep(0.05)

    def delete_topic(self, name: str, timeout: float = 60.0) -> None:
        admin = self._admin()
        futures = admin.delete_topics([name], operation_timeout=timeout, request_timeout=timeout)
        futures[name].result(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if name not in admin.list_topics(timeout=5).topics:
                return
            time.sleep(0.2)
        raise KafkaLaunchError(f"topic {name} still listed {timeout}s after deletion")

    # ----- tools --------------------------------------------------------------------

    def tool_command(
        self, tool: str, args: Sequence[str] = (), *, short_lived: bool = True
    ) -> list[str]:
        """The command line running Kafka tool ``tool`` (alias or main class) with the
        cluster's jars; the tools' own logging goes to stderr at WARN. ``short_lived``
        tools start faster (C1 compiler only); long-running ones get the full JIT."""
        jars = self.jars
        tools_classes, broker_classes = _classes_of(jars)
        candidates = TOOL_ALIASES.get(tool, (tool,))
        main = next((c for c in candidates if c in tools_classes), None)
        if main is not None:
            cp, major = jars.tools_cp, int(jars.tools_version.split(".")[0])
        else:
            main = next((c for c in candidates if c in broker_classes), None)
            if main is None:
                raise KafkaLaunchError(
                    f"Kafka {jars.version} has no main class for {tool!r} (tried {candidates})"
                )
            cp, major = jars.broker_cp, jars.major
        log_dir = jars.directory / "tool-logging"
        log_flags = _write_log_config(log_dir, major, "WARN", to_stderr=True)
        jvm = LIGHT_JVM if short_lived else ("-Xmx256m", "-Xms64m")
        return [_java(), *jvm, *log_flags, "-cp", cp, main, *args]

    def run_tool(
        self,
        tool: str,
        args: Sequence[str] = (),
        *,
        timeout: float = 120.0,
        check: bool = False,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a Kafka command-line tool (``"kafka-consumer-groups"`` or a main class)."""
        return subprocess.run(
            self.tool_command(tool, args),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
            input=input,
        )

    def popen_tool(
        self, tool: str, args: Sequence[str] = (), **kwargs: Any
    ) -> subprocess.Popen[bytes]:
        """Start a long-running Kafka tool (e.g. a verifiable consumer); it is recorded in
        the PID registry like the brokers, so it is stopped at exit if the caller forgets."""
        cmd = [*_pdeathsig_prefix(), *self.tool_command(tool, args, short_lived=False)]
        proc: subprocess.Popen[bytes] = subprocess.Popen(cmd, **kwargs)
        register(proc)
        return proc

    # ----- internals ----------------------------------------------------------------

    def _plan_nodes(self) -> None:
        assert self.directory is not None
        n = self.num_brokers
        per_broker = 1 + len(self.listeners)
        combined = n == 1
        ports = free_ports(n * per_broker + 1)
        it = iter(ports)
        nodes: list[KafkaNode] = []
        for i in range(n):
            node_id = self.first_node_id + i
            node_ports = {INTERNAL_LISTENER: next(it)}
            for spec in self.listeners:
                node_ports[spec.name] = next(it)
            roles = ("broker", "controller") if combined else ("broker",)
            nodes.append(
                KafkaNode(
                    node_id=node_id,
                    roles=roles,
                    host=HOST,
                    ports=node_ports,
                    controller_port=next(it) if combined else None,
                    directory=self.directory / f"node-{node_id}",
                )
            )
        if combined:
            self._controller = nodes[0]
        else:
            ctrl_id = 1000
            if self.first_node_id <= ctrl_id < self.first_node_id + n:
                ctrl_id = self.first_node_id + n  # above every broker's id
            ctrl = KafkaNode(
                node_id=ctrl_id,
                roles=("controller",),
                host=HOST,
                ports={},
                controller_port=next(it),
                directory=self.directory / f"node-{ctrl_id}",
            )
            nodes.insert(0, ctrl)
            self._controller = ctrl
        self._nodes = nodes

    def _base_config(self) -> dict[str, Any]:
        n = self.num_brokers
        rf = min(n, 3)
        return {
            # Internal topics sized for the cluster; small partition counts start fast.
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": 10,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min(rf, 2),
            "transaction.state.log.num.partitions": 10,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min(rf, 2),
            "default.replication.factor": 1,
            "num.partitions": 1,
            "auto.create.topics.enable": "true",
            "delete.topic.enable": "true",
            # Groups: no initial delay; KIP-848 consumer protocol on; small timeouts allowed.
            "group.initial.rebalance.delay.ms": 0,
            "group.min.session.timeout.ms": 500,
            "group.consumer.min.session.timeout.ms": 1000,
            "group.consumer.min.heartbeat.interval.ms": 100,
            # KIP-848 members heartbeat every second (Kafka's default: 5 s): a rebalance step
            # (a revocation seen, then the new assignment) takes a heartbeat or two, so tests
            # of groups settle in seconds. A test about the interval sets its group's
            # consumer.heartbeat.interval.ms or passes broker_config.
            "group.consumer.heartbeat.interval.ms": 1000,
            # A killed broker is fenced (and leaves the ISRs) a few seconds later.
            "broker.heartbeat.interval.ms": 1000,
            "broker.session.timeout.ms": 6000,
            # A small machine shared with other brokers.
            "num.network.threads": 2,
            "num.io.threads": 4,
            "num.recovery.threads.per.data.dir": 1,
            "background.threads": 4,
            "log.cleaner.dedupe.buffer.size": 16 * 1024 * 1024,
            "log.cleaner.threads": 1,
        }

    def _write_config(self, node: KafkaNode) -> None:
        node.directory.mkdir(parents=True, exist_ok=True)
        node.data_dir.mkdir(exist_ok=True)
        ctrl = self.controller
        assert ctrl.controller_port is not None
        props: dict[str, Any] = {
            "process.roles": ",".join(node.roles),
            "node.id": node.node_id,
            "controller.quorum.voters": f"{ctrl.node_id}@{HOST}:{ctrl.controller_port}",
            "controller.listener.names": CONTROLLER_LISTENER,
            "log.dirs": str(node.data_dir),
        }
        listeners: list[str] = []
        advertised: list[str] = []
        protocol_map = [f"{CONTROLLER_LISTENER}:PLAINTEXT", f"{INTERNAL_LISTENER}:PLAINTEXT"]
        if node.is_broker:
            for name, port in node.ports.items():
                listeners.append(f"{name}://{HOST}:{port}")
                advertised.append(f"{name}://{HOST}:{port}")
            props["inter.broker.listener.name"] = INTERNAL_LISTENER
            props["advertised.listeners"] = ",".join(advertised)
        if "controller" in node.roles:
            listeners.append(f"{CONTROLLER_LISTENER}://{HOST}:{node.controller_port}")
        props["listeners"] = ",".join(listeners)
        mechanisms: list[str] = []
        for spec in self.listeners:
            protocol_map.append(f"{spec.name}:{spec.security_protocol}")
            if node.is_broker:
                props.update(self._listener_props(spec))
            for m in spec.sasl_mechanisms:
                if m not in mechanisms:
                    mechanisms.append(m)
        props["listener.security.protocol.map"] = ",".join(protocol_map)
        if mechanisms:
            props["sasl.enabled.mechanisms"] = ",".join(mechanisms)
        props.update(self._base_config())
        if self.jars.major < 4:
            # 3.x: the KIP-848 consumer protocol is opt-in (4.x enables it by default, and
            # setting this there would disable the streams protocol).
            props["group.coordinator.rebalance.protocols"] = "classic,consumer"
        props.update(self.broker_config)
        lines = [f"{k}={_prop_value(v)}" for k, v in props.items()]
        node.config_path.write_text("\n".join(lines) + "\n")

    def _listener_props(self, spec: ListenerSpec) -> dict[str, str]:
        prefix = f"listener.name.{spec.name.lower()}."
        props: dict[str, str] = {}
        for mech in spec.sasl_mechanisms:
            m = mech.lower()
            if mech == "PLAIN":
                users = " ".join(f'user_{u}="{p}"' for u, p in self.users.items())
                props[prefix + f"{m}.sasl.jaas.config"] = (
                    f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
                )
            elif mech in SCRAM_MECHANISMS:
                props[prefix + f"{m}.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
            elif mech == "OAUTHBEARER":
                # KIP-768 JWT validation: the JWKS URL, expected audience/issuer come from
                # broker_config (sasl.oauthbearer.*), and the JVM must allow the URL with
                # -Dorg.apache.kafka.sasl.oauthbearer.allowed.urls (jvm_options).
                props[prefix + f"{m}.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;"
                )
                props[prefix + f"{m}.sasl.server.callback.handler.class"] = (
                    "org.apache.kafka.common.security.oauthbearer."
                    "OAuthBearerValidatorCallbackHandler"
                )
            elif mech == "GSSAPI":
                # The login (Krb5LoginModule with a keytab) and -Djava.security.krb5.conf come
                # from broker_config and jvm_options (kafka_actors.testing.kerberos).
                pass
            else:
                raise ValueError(f"unsupported SASL mechanism {mech}")
        if spec.sasl_mechanisms:
            props[prefix + "sasl.enabled.mechanisms"] = ",".join(spec.sasl_mechanisms)
        if spec.uses_ssl:
            certs = self.certificates
            assert certs is not None
            props[prefix + "ssl.keystore.type"] = "PEM"
            props[prefix + "ssl.keystore.location"] = str(certs.broker_keystore)
            props[prefix + "ssl.truststore.type"] = "PEM"
            props[prefix + "ssl.truststore.location"] = str(certs.ca_cert)
            props[prefix + "ssl.client.auth"] = "none"
        return props

    def _format_all(self, nodes: Sequence[KafkaNode]) -> None:
        """Format every node's storage (``kafka-storage format``), all at once."""
        jars = self.jars
        scram = [m for s in self.listeners for m in s.sasl_mechanisms if m in SCRAM_MECHANISMS]
        running: list[tuple[KafkaNode, subprocess.Popen[str]]] = []
        for node in nodes:
            log_flags = _write_log_config(node.directory, jars.major, "WARN", to_stderr=True)
            cmd = [
                *_pdeathsig_prefix(),
                _java(),
                *LIGHT_JVM,
                *log_flags,
                "-cp",
                jars.broker_cp,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                self.cluster_id,
                "-c",
                str(node.config_path),
            ]
            # SCRAM credentials live in the metadata log: bootstrap records written here.
            for mech in dict.fromkeys(scram):
                for user, password in self.users.items():
                    cmd += ["--add-scram", f"{mech}=[name={user},password={password}]"]
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            running.append((node, proc))
        failures = []
        for node, proc in running:
            try:
                out, err = proc.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            if proc.returncode != 0:
                failures.append(
                    f"formatting node {node.node_id} failed (exit {proc.returncode}):\n"
                    f"{out[-3000:]}\n{err[-3000:]}"
                )
        if failures:
            raise KafkaLaunchError("\n".join(failures))

    def _spawn(self, node: KafkaNode) -> None:
        jars = self.jars
        log_flags = _write_log_config(node.directory, jars.major, "INFO", to_stderr=False)
        flags = BROKER_JVM if node.is_broker else LIGHT_JVM
        extra = os.environ.get(BROKER_JVM_OPTIONS_ENV, "").split() if node.is_broker else []
        cmd = [
            *_pdeathsig_prefix(),
            _java(),
            *flags,
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={node.directory}",
            *log_flags,
            *extra,
            *self.jvm_options,
            "-cp",
            os.pathsep.join((jars.broker_cp, *self.classpath)),
            "kafka.Kafka",
            str(node.config_path),
        ]
        with open(node.log_path, "ab") as log:
            log.write(f"===== starting node {node.node_id}: {' '.join(cmd)}\n".encode())
            log.flush()
            proc: subprocess.Popen[bytes] = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=node.directory,
                start_new_session=True,
            )
        node.process = proc
        register(proc)

    def _wait_ready(self, timeout: float, nodes: Sequence[KafkaNode] | None = None) -> None:
        """Wait until ``nodes`` (default: all) are up: each node's port accepts, and every
        running broker answers a Metadata request itself listing every running broker (so all
        are registered and unfenced, and each broker's metadata has caught up with the ones
        that started: a broker that came back is not in the others' answers at once)."""
        from confluent_kafka.admin import AdminClient

        waiting = list(nodes) if nodes is not None else list(self._nodes)
        deadline = time.monotonic() + timeout

        def check_alive() -> None:
            for n in waiting:
                if n.process is None or n.process.poll() is not None:
                    code = n.process.returncode if n.process is not None else None
                    raise KafkaLaunchError(
                        f"Kafka node {n.node_id} exited with {code}:\n{n.logs_tail(60)}"
                    )

        for n in waiting:
            while not _port_open(n.port):
                check_alive()
                if time.monotonic() > deadline:
                    raise KafkaLaunchError(
                        f"node {n.node_id} port {n.port} not open after {timeout}s:\n"
                        f"{n.logs_tail(60)}"
                    )
                time.sleep(0.1)
        want = {n.node_id for n in self.brokers if n.running}
        seen: set[int] = set()
        for n in self.brokers:
            if not n.running:
                continue
            # Bootstrapping from this node alone: the first answer comes from it.
            admin = AdminClient(
                {
                    "bootstrap.servers": f"{n.host}:{n.port}",
                    "socket.connection.setup.timeout.ms": 5000,
                    "log_level": 0,
                }
            )
            while True:
                check_alive()
                with contextlib.suppress(Exception):
                    seen = set(admin.list_topics(timeout=5).brokers)
                    if seen >= want:
                        break
                if time.monotonic() > deadline:
                    raise KafkaLaunchError(
                        f"broker {n.node_id} sees brokers {sorted(seen)}, want {sorted(want)} "
                        f"after {timeout}s:\n{self.logs_tail(40)}"
                    )
                time.sleep(0.2)


class KafkaBroker(KafkaCluster):
    """A single combined broker+controller KRaft node: ``KafkaCluster(num_brokers=1)``."""

    def __init__(
        self,
        kafka_version: str | None = None,
        broker_config: Mapping[str, Any] | None = None,
        listeners: Sequence[ListenerSpec] = (),
        users: Mapping[str, str] = DEFAULT_USERS,
        **kwargs: Any,
    ) -> None:
        super().__init__(1, kafka_version, broker_config, listeners, users, **kwargs)

    @property
    def node(self) -> KafkaNode:
        return self.brokers[0]


def _topic_ready(
    admin: Any, name: str, partitions: int | None, isr: int | None
) -> tuple[bool, str]:
    """Whether ``admin``'s Metadata answer shows ``name`` ready; else what it shows."""
    try:
        t = admin.list_topics(topic=name, timeout=5).topics.get(name)
    except Exception as exc:
        return False, repr(exc)
    if t is None:
        return False, "topic absent"
    if t.error is not None:
        return False, str(t.error)
    parts = t.partitions
    ok = bool(parts) and (partitions is None or len(parts) == partitions)
    ok = ok and all(p.leader >= 0 and (isr is None or len(p.isrs) >= isr) for p in parts.values())
    return ok, str({p.id: (p.leader, p.isrs) for p in parts.values()})


def _leaders_serve(admin: Any, name: str) -> tuple[bool, str]:
    """Whether every partition's leader answers ListOffsets for ``name``; else the errors."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    latest: Any = OffsetSpec.latest  # untyped in confluent-kafka
    try:
        topic = admin.list_topics(topic=name, timeout=5).topics[name]
        request = {TopicPartition(name, p): latest() for p in topic.partitions}
        futures = admin.list_offsets(request, request_timeout=5)
    except Exception as exc:
        return False, repr(exc)
    errors: dict[int, str] = {}
    for tp, future in futures.items():
        try:
            future.result(10)
        except Exception as exc:
            errors[tp.partition] = repr(exc)
    return not errors, str(errors)


def _prop_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v).replace("\\", "\\\\").replace("\n", "\\n")


def _random_cluster_id() -> str:
    """A cluster id as Kafka's ``Uuid.randomUuid().toString()`` makes: URL-safe base64 of
    16 random bytes, never starting with ``-`` (the storage tool would read an option)."""
    import base64

    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@contextlib.contextmanager
def running_cluster(**kwargs: Any) -> Iterator[KafkaCluster]:
    """``with running_cluster(num_brokers=3) as c:`` — start, yield, stop."""
    cluster = KafkaCluster(**kwargs)
    with cluster:
        yield cluster
