"""Java's share consumer (KIP-932) as a test peer: a small program on the testkit's jars.

Owns: the Java source below, its compiled class (cached beside the jars of the Kafka version,
``<cache>/kafka-<version>/share-harness/<source hash>/``, compiled with ``javac`` once, under
a file lock), and the JVMs :class:`JavaShareConsumer` starts (recorded by PID in
:mod:`kafka_actors.testing.processes`, stopped by PID). May touch: the cluster it is pointed
at (over the network only), ``javac``/``java`` from ``JAVA_HOME`` or ``PATH``.

The program is Java's ``KafkaShareConsumer`` (kafka-clients of the broker's version) in
explicit acknowledgement mode: it acknowledges every record it keeps with ``ACCEPT`` (or
``RELEASE``/``REJECT``, as asked; or runs in implicit mode), commits after each poll with
``commitSync`` and prints one line per event on stdout::

    SUBSCRIBED
    RECORD <topic> <partition> <offset> <delivery count>     acknowledged as asked
    RELEASED <topic> <partition> <offset> <delivery count>   past max_records: released
    COMMIT <topic> <partition> OK|<error class>               commitSync's per-partition result
    DONE <records kept>

It stops after ``max_records`` records, when its stdin is closed (:meth:`JavaShareConsumer.stop`),
or after ``idle_timeout`` seconds without a record; it closes the consumer (leaving the group)
before printing ``DONE``. Kafka's command-line share tools (``kafka-console-share-consumer``,
``kafka-share-consumer-perf-test``, ...) are in :data:`~kafka_actors.testing.broker.TOOL_ALIASES`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from kafka_actors.testing import jars as _jars
from kafka_actors.testing.broker import KafkaLaunchError, _java, _write_log_config
from kafka_actors.testing.processes import pdeathsig_prefix, register, terminate, unregister

__all__ = [
    "HARNESS_CLASS",
    "JavaShareConsumer",
    "JavaShareRecord",
    "compile_java_class",
    "compile_share_harness",
]

HARNESS_CLASS = "KafkaActorsShareHarness"
ACK_TYPES = ("accept", "release", "reject", "implicit", "hold")

_SOURCE = """\
import java.io.IOException;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/** kafka-actors testkit: Java's share consumer as a test peer (see java_share.py). */
public class KafkaActorsShareHarness {
    // args: bootstrap group topic maxRecords(-1: no limit) idleTimeoutMs
    //       accept|release|reject|implicit|hold pauseMsPerPoll [key=value ...]
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        String topic = args[2];
        long max = Long.parseLong(args[3]);
        long idleMs = Long.parseLong(args[4]);
        String ack = args[5];
        long pauseMs = Long.parseLong(args[6]);
        boolean explicit = !ack.equals("implicit");
        boolean hold = ack.equals("hold");
        AcknowledgeType type = explicit && !hold
            ? AcknowledgeType.valueOf(ack.toUpperCase()) : null;
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.put("share.acknowledgement.mode", explicit ? "explicit" : "implicit");
        for (int i = 7; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        AtomicBoolean stop = new AtomicBoolean(false);
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() != -1) { }
            } catch (IOException e) {
                // stdin gone: stop as well
            }
            stop.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();
        long kept = 0;
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            System.out.println("SUBSCRIBED");
            System.out.flush();
            long last = System.currentTimeMillis();
            while (!stop.get() && (max < 0 || kept < max)
                    && System.currentTimeMillis() - last < idleMs) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                last = System.currentTimeMillis();
                StringBuilder out = new StringBuilder();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    String where = r.topic() + " " + r.partition() + " " + r.offset() + " "
                        + r.deliveryCount().map(String::valueOf).orElse("-");
                    if (max >= 0 && kept >= max) {
                        if (explicit) {
                            consumer.acknowledge(r, AcknowledgeType.RELEASE);
                            out.append("RELEASED ").append(where).append('\\n');
                            continue;
                        }
                    }
                    if (explicit && !hold) {
                        consumer.acknowledge(r, type);
                    }
                    kept++;
                    out.append("RECORD ").append(where).append('\\n');
                }
                if (hold) {
                    // Acquired and never acknowledged: wait to be stopped or killed.
                    System.out.print(out);
                    System.out.println("HOLDING");
                    System.out.flush();
                    while (!stop.get()) {
                        Thread.sleep(50);
                    }
                    break;
                }
                Map<TopicIdPartition, Optional<KafkaException>> result = consumer.commitSync();
                for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : result.entrySet()) {
                    out.append("COMMIT ").append(e.getKey().topic()).append(' ')
                        .append(e.getKey().partition()).append(' ')
                        .append(e.getValue().map(x -> x.getClass().getSimpleName()).orElse("OK"))
                        .append('\\n');
                }
                System.out.print(out);
                System.out.flush();
                if (pauseMs > 0) {
                    Thread.sleep(pauseMs);
                }
            }
        }
        System.out.println("DONE " + kept);
        System.out.flush();
    }
}
"""


@dataclass(frozen=True)
class JavaShareRecord:
    """One record Java's share consumer got (``RECORD``) or released past its limit."""

    topic: str
    partition: int
    offset: int
    delivery_count: int | None
    kept: bool = True


def compile_share_harness(jars: _jars.KafkaJars) -> Path:
    """The directory holding the compiled harness for ``jars`` (compiled once, cached)."""
    return compile_java_class(
        jars,
        HARNESS_CLASS,
        _SOURCE,
        "share-harness",
        hint="its KafkaShareConsumer needs 4.x",
    )


def compile_java_class(
    jars: _jars.KafkaJars, class_name: str, source_text: str, cache_name: str, *, hint: str = ""
) -> Path:
    """The directory holding ``class_name`` compiled from ``source_text`` against the
    broker's jars of ``jars``: ``<jars>/<cache_name>/<source hash>/``, compiled with
    ``javac`` once (under a file lock) and cached."""
    if shutil.which("javac") is None and not os.environ.get("JAVA_HOME"):
        raise KafkaLaunchError("javac is not on PATH (and JAVA_HOME is not set)")
    digest = hashlib.sha256(source_text.encode()).hexdigest()[:16]
    root = jars.directory / cache_name
    target = root / digest
    if (target / f"{class_name}.class").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / f"{class_name}.class").exists():
            return target
        scratch = Path(tempfile.mkdtemp(prefix="build-", dir=root))
        try:
            source = scratch / f"{class_name}.java"
            source.write_text(source_text)
            javac = str(Path(_java()).with_name("javac"))
            done = subprocess.run(
                [javac, "-cp", jars.broker_cp, "-d", str(scratch), str(source)],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if done.returncode != 0:
                raise KafkaLaunchError(
                    f"javac failed on {class_name} (Kafka {jars.version}"
                    f"{'; ' + hint if hint else ''}):\n{done.stderr[-3000:]}"
                )
            source.unlink()
            scratch.rename(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return target


class JavaShareConsumer:
    """Java's ``KafkaShareConsumer`` in a JVM of its own, subscribed to ``topic`` in share
    group ``group`` on ``cluster`` (a KafkaCluster/KafkaBroker: its jars and bootstrap).

    ``ack``: ``"accept"`` (default), ``"release"`` or ``"reject"`` for every record (explicit
    mode, ``commitSync`` after each poll), ``"implicit"``, or ``"hold"`` (explicit mode: the
    first batch is acquired and never acknowledged; the JVM then waits to be stopped or
    :meth:`kill`-ed). ``max_records``: stop after that
    many (records acquired beyond it are released); ``None``: until :meth:`stop`.
    ``pause``: seconds to sleep after each non-empty poll (a slow worker, so that others get
    work). ``config``: more consumer properties (e.g. ``{"max.poll.records": "10"}``).

    Use as a context manager, or :meth:`start` and :meth:`stop`. :attr:`records` fills as
    lines arrive (a reader thread); :meth:`wait_for` waits for a count.
    """

    def __init__(
        self,
        cluster: Any,
        topic: str,
        group: str,
        *,
        ack: str = "accept",
        max_records: int | None = None,
        idle_timeout: float = 120.0,
        pause: float = 0.0,
        config: Mapping[str, object] | None = None,
    ) -> None:
        if ack not in ACK_TYPES:
            raise ValueError(f"ack must be one of {ACK_TYPES}, got {ack!r}")
        self.cluster = cluster
        self.topic = topic
        self.group = group
        self.ack = ack
        self.max_records = max_records
        self.idle_timeout = idle_timeout
        self.pause = pause
        self.config = dict(config or {})
        #: Records kept (acknowledged as asked), in arrival order.
        self.records: list[JavaShareRecord] = []
        #: Records acquired past ``max_records`` and released.
        self.released: list[JavaShareRecord] = []
        #: ``(topic, partition, "OK" or the error's class name)`` per commitSync result.
        self.commits: list[tuple[str, int, str]] = []
        self.done: int | None = None
        #: In ``"hold"`` mode: the first batch is acquired and held (``HOLDING``).
        self.holding = False
        self.process: subprocess.Popen[bytes] | None = None
        self._stderr: list[str] = []
        self._cond = threading.Condition()
        self._subscribed = False
        self._threads: list[threading.Thread] = []

    def command(self) -> list[str]:
        jars: _jars.KafkaJars = self.cluster.jars
        classes = compile_share_harness(jars)
        log_flags = _write_log_config(jars.directory / "tool-logging", jars.major, "WARN", True)
        args = [
            self.cluster.bootstrap_servers,
            self.group,
            self.topic,
            str(-1 if self.max_records is None else self.max_records),
            str(int(self.idle_timeout * 1000)),
            self.ack,
            str(int(self.pause * 1000)),
            *(f"{k}={v}" for k, v in self.config.items()),
        ]
        cp = os.pathsep.join([str(classes), jars.broker_cp])
        return [_java(), "-Xmx256m", "-Xms64m", *log_flags, "-cp", cp, HARNESS_CLASS, *args]

    def start(self, wait_subscribed: float = 120.0) -> Self:
        """Start the JVM; wait until it has subscribed (``SUBSCRIBED``)."""
        cmd = [*pdeathsig_prefix(), *self.command()]
        proc: subprocess.Popen[bytes] = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        register(proc)
        self.process = proc
        assert proc.stdout is not None and proc.stderr is not None
        for target, stream in ((self._read_stdout, proc.stdout), (self._read_stderr, proc.stderr)):
            t = threading.Thread(target=target, args=(stream,), daemon=True)
            t.start()
            self._threads.append(t)
        deadline = time.monotonic() + wait_subscribed
        with self._cond:
            while not self._subscribed:
                if proc.poll() is not None or time.monotonic() > deadline:
                    break
                self._cond.wait(0.2)
        if not self._subscribed:
            self.stop(5.0)
            raise KafkaLaunchError(f"Java share consumer did not subscribe:\n{self.stderr_tail()}")
        return self

    def _read_stdout(self, stream: IO[bytes]) -> None:
        for raw in stream:
            parts = raw.decode(errors="replace").split()
            if not parts:
                continue
            with self._cond:
                kind = parts[0]
                if kind == "SUBSCRIBED":
                    self._subscribed = True
                elif kind in ("RECORD", "RELEASED") and len(parts) == 5:
                    record = JavaShareRecord(
                        parts[1],
                        int(parts[2]),
                        int(parts[3]),
                        None if parts[4] == "-" else int(parts[4]),
                        kind == "RECORD",
                    )
                    (self.records if record.kept else self.released).append(record)
                elif kind == "COMMIT" and len(parts) == 4:
                    self.commits.append((parts[1], int(parts[2]), parts[3]))
                elif kind == "HOLDING":
                    self.holding = True
                elif kind == "DONE" and len(parts) == 2:
                    self.done = int(parts[1])
                self._cond.notify_all()

    def _read_stderr(self, stream: IO[bytes]) -> None:
        for raw in stream:
            with self._cond:
                self._stderr.append(raw.decode(errors="replace"))
                del self._stderr[:-200]

    def stderr_tail(self) -> str:
        with self._cond:
            return "".join(self._stderr[-60:])

    def wait_for(self, n: int, timeout: float) -> bool:
        """Wait until at least ``n`` records were kept (or the JVM ended); whether they were."""
        return self._wait(lambda: len(self.records) >= n, timeout)

    def wait_holding(self, timeout: float) -> bool:
        """``"hold"`` mode: wait until the first batch is held; whether it is."""
        return self._wait(lambda: self.holding, timeout)

    def _wait(self, done: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not done():
                left = deadline - time.monotonic()
                if left <= 0 or (self.process is not None and self.process.poll() is not None):
                    break
                self._cond.wait(min(left, 0.2))
            return done()

    def stop(self, timeout: float = 60.0) -> int | None:
        """Close its stdin (it commits, closes the consumer and exits); SIGKILL after
        ``timeout``. Returns the exit code."""
        proc = self.process
        if proc is None:
            return None
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            terminate([proc], 5.0)
        unregister(proc)
        for t in self._threads:
            t.join(5.0)
        return proc.returncode

    def kill(self) -> None:
        """SIGKILL the JVM (records it holds stay acquired until their locks expire)."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
            unregister(proc)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
