"""Group members for the interop tests: ours (a KafkaConsumer on a thread) and Java's
(Kafka's own ``VerifiableConsumer`` from the cluster's jars, reporting JSON events).

Owns: one consumer thread per :class:`OurMember`, one JVM per :class:`JavaMember` (started
through the testkit, so it is stopped by PID at exit even if a test forgets), a producer
thread writing records with unique values, and the parsing of ``kafka-consumer-groups``
output. Both member kinds record the same facts, so the tests compare them directly:
each record consumed (partition, offset, value, wall time in ms) and each commit (the
committed offsets, success, wall time in ms), plus the partitions currently owned.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka_actors import KafkaConsumer, TopicPartition
from kafka_actors.errors import KafkaError
from kafka_actors.protocol.messages import OffsetAndMetadata
from kafka_actors.structs import ConsumerRebalanceListener


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Consumed:
    member: str
    partition: int
    offset: int
    value: bytes
    at_ms: int


@dataclass(frozen=True, slots=True)
class Committed:
    member: str
    offsets: Mapping[int, int]  # partition -> next offset to read
    success: bool
    at_ms: int
    error: str = ""


@dataclass
class MemberLog:
    """What one member consumed and committed (appended from its own thread)."""

    name: str
    consumed: list[Consumed] = field(default_factory=list)
    commits: list[Committed] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_consumed(self, partition: int, offset: int, value: bytes, at_ms: int) -> None:
        with self.lock:
            self.consumed.append(Consumed(self.name, partition, offset, value, at_ms))

    def add_commit(
        self, offsets: Mapping[int, int], success: bool, at_ms: int, error: str = ""
    ) -> None:
        with self.lock:
            self.commits.append(Committed(self.name, dict(offsets), success, at_ms, error))

    def snapshot(self) -> tuple[list[Consumed], list[Committed]]:
        with self.lock:
            return list(self.consumed), list(self.commits)


class OurMember:
    """A kafka-actors consumer polling on its own thread: commits what each poll returned
    (commit_sync with explicit offsets; a failed commit is retried after the next poll), and
    what is still uncommitted in ``on_partitions_revoked``, as an application that wants no
    duplicates does."""

    def __init__(self, name: str, topic: str, config: Mapping[str, object]) -> None:
        """With ``enable.auto.commit`` true in ``config`` the member commits nothing itself
        (the consumer's auto-commit, commit before revocation and commit on close do)."""
        self.name = name
        self.auto_commit = bool(config.get("enable.auto.commit"))
        self.topic = topic
        self.log = MemberLog(name)
        self.consumer = KafkaConsumer(dict(config))
        self.errors: list[BaseException] = []
        self._pending: dict[TopicPartition, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    @property
    def client_id(self) -> str:
        return self.consumer.config.client_id

    def start(self) -> OurMember:
        self._thread.start()
        return self

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment() if tp.topic == self.topic}

    def stop(self, timeout: float = 60.0) -> None:
        """Stop polling and close (leaving the group; the listener commits what is pending)."""
        self._stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self.name} did not stop"

    def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        if not offsets or self.auto_commit:
            return
        at_ms = now_ms()
        try:
            self.consumer.commit_sync({tp: OffsetAndMetadata(o) for tp, o in offsets.items()})
        except KafkaError as exc:
            self.log.add_commit(
                {tp.partition: o for tp, o in offsets.items()}, False, at_ms, repr(exc)
            )
            return
        self.log.add_commit({tp.partition: o for tp, o in offsets.items()}, True, now_ms())
        for tp, offset in offsets.items():
            if self._pending.get(tp) == offset:
                del self._pending[tp]

    def _run(self) -> None:
        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
                member._commit({tp: o for tp, o in member._pending.items() if tp in revoked})
                for tp in revoked:
                    member._pending.pop(tp, None)

            def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
                for tp in lost:
                    member._pending.pop(tp, None)

        try:
            self.consumer.subscribe([self.topic], listener=Listener())
            while not self._stop.is_set():
                records = self.consumer.poll(0.2)
                at_ms = now_ms()
                batch: dict[TopicPartition, int] = {}
                for record in records:
                    self.log.add_consumed(
                        record.partition, record.offset, record.value or b"", at_ms
                    )
                    batch[TopicPartition(record.topic, record.partition)] = record.offset + 1
                self._pending.update(batch)
                # What failed before (a rebalance was in progress) is retried after this
                # poll, as Java's RebalanceInProgressException advises.
                self._commit(dict(self._pending))
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)
        finally:
            try:
                self.consumer.close(30.0)
            except BaseException as exc:
                self.errors.append(exc)


class JavaMember:
    """Kafka's ``VerifiableConsumer`` (Java) in the group: commits synchronously after each
    poll, reports every record (``--verbose``), commit and rebalance as a JSON line."""

    def __init__(
        self,
        cluster: Any,
        name: str,
        topic: str,
        group: str,
        workdir: Path,
        *,
        group_protocol: str,
        assignment_strategy: str | None = None,
        remote_assignor: str | None = None,
        auto_commit: bool = False,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.topic = topic
        self.client_id = name
        self.log = MemberLog(name)
        self.events: list[dict[str, Any]] = []
        self._owned: set[int] = set()
        self._lock = threading.Lock()
        props = {"client.id": name, "fetch.max.wait.ms": "100", **(extra or {})}
        workdir.mkdir(parents=True, exist_ok=True)
        config_path = workdir / f"{name}.properties"
        config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        args = [
            "--bootstrap-server", cluster.bootstrap_servers,
            "--topic", topic,
            "--group-id", group,
            "--group-protocol", group_protocol,
            "--reset-policy", "earliest",
            "--verbose",
            # 3.x tools know only the older (4.x: deprecated) name of the option
            "--command-config" if int(cluster.jars.tools_version.split(".")[0]) >= 4
            else "--consumer.config",
            str(config_path),
        ]  # fmt: skip
        if assignment_strategy is not None:
            args += ["--assignment-strategy", assignment_strategy]
        if remote_assignor is not None:
            args += ["--group-remote-assignor", remote_assignor]
        if auto_commit:
            args.append("--enable-autocommit")
        self._stderr_path = workdir / f"{name}.stderr"
        self._stderr = open(self._stderr_path, "wb")  # closed in stop()
        self.process: subprocess.Popen[bytes] = cluster.popen_tool(
            "kafka-verifiable-consumer", args, stdout=subprocess.PIPE, stderr=self._stderr
        )
        self._reader = threading.Thread(target=self._read, name=f"java-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            self._on_event(event)

    def _on_event(self, event: dict[str, Any]) -> None:
        name = event.get("name")
        at_ms = int(event.get("timestamp", now_ms()))
        with self._lock:
            self.events.append(event)
            parts = {
                p["partition"] for p in event.get("partitions", ()) if p.get("topic") == self.topic
            }
            if name == "partitions_assigned":
                self._owned |= parts
            elif name in ("partitions_revoked", "partitions_lost"):
                self._owned -= parts
        if name == "record_data":
            value = event.get("value")
            self.log.add_consumed(
                int(event["partition"]), int(event["offset"]), (value or "").encode(), at_ms
            )
        elif name == "offsets_committed":
            offsets = {
                int(o["partition"]): int(o["offset"])
                for o in event.get("offsets") or ()
                if o.get("topic") == self.topic
            }
            self.log.add_commit(offsets, bool(event.get("success")), at_ms, event.get("error", ""))

    def owned(self) -> set[int]:
        with self._lock:
            return set(self._owned)

    def has_event(self, name: str) -> bool:
        with self._lock:
            return any(e.get("name") == name for e in self.events)

    def stderr_tail(self, n: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self._stderr_path.read_text(errors="replace").splitlines()[-n:])
        return ""

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM: the tool's shutdown hook wakes the consumer up and closes it, which leaves
        the group; it prints ``shutdown_complete``."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
            raise AssertionError(f"{self.name} did not stop on SIGTERM") from None
        finally:
            self._reader.join(10)
            self._stderr.close()


class Producer:
    """Writes records with unique values ``id-<n>`` (keys spread over partitions) on a thread
    until stopped; ``produced`` is every value the broker acknowledged."""

    def __init__(self, bootstrap: str, topic: str, *, per_second: int = 400) -> None:
        from confluent_kafka import Producer as CkProducer

        self.topic = topic
        self.produced: set[bytes] = set()
        self.errors: list[str] = []
        self._next = 0
        self._per_tick = max(1, per_second // 10)
        self._producer = CkProducer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3, "acks": "all"}
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def produce(self, count: int, *, partition: int | None = None) -> None:
        """Produce ``count`` records now (from the calling thread, while the producer thread
        is not running) and flush them."""
        for _ in range(count):
            self._send_one(partition)
        assert self._producer.flush(30) == 0

    def _send_one(self, partition: int | None = None) -> None:
        n = self._next
        self._next += 1
        value = f"id-{n}".encode()

        def done(err: Any, _msg: Any) -> None:
            if err is None:
                self.produced.add(value)
            else:
                self.errors.append(str(err))

        extra: dict[str, Any] = {} if partition is None else {"partition": partition}
        self._producer.produce(
            self.topic, value=value, key=f"k{n}".encode(), on_delivery=done, **extra
        )

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            for _ in range(self._per_tick):
                self._send_one()
            self._producer.poll(0)

    def start(self) -> Producer:
        self._thread.start()
        return self

    def halt(self) -> None:
        """Stop the producer thread (no checks: for clean-up)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self._producer.flush(30) == 0
        assert not self.errors, self.errors


def wait_until(
    condition: Callable[[], bool], timeout: float, what: Callable[[], str] | str
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout}s: {what() if callable(what) else what}"
            )
        time.sleep(0.2)


def parse_table(text: str) -> list[dict[str, str]]:
    """Rows of a ``kafka-consumer-groups`` table (header line with upper-case names)."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in text.splitlines():
        cells = line.split()
        if not cells:
            header = None
            continue
        if cells[0] == "GROUP":
            header = cells
            continue
        if header is not None:
            # The last column (an assignment) may be empty: pad.
            cells += ["-"] * (len(header) - len(cells))
            rows.append(dict(zip(header, cells, strict=False)))
    return rows


def parse_assignment(cell: str, topic: str) -> set[int]:
    """An assignment cell of ``kafka-consumer-groups --members --verbose`` → partitions of
    ``topic``: ``t:0,1`` (4.x; ``;`` between topics), ``t(0,1)`` or, for a single-topic
    group, ``(0,1)`` (3.9); ``-`` → empty."""
    if cell in ("-", ""):
        return set()
    out: set[int] = set()
    for part in cell.replace("),", ");").split(";"):
        if part.endswith(")") and "(" in part:
            name, _, numbers = part[:-1].rpartition("(")
            name = name or topic
        else:
            name, _, numbers = part.rpartition(":")
        if name == topic and numbers:
            out |= {int(n) for n in numbers.split(",")}
    return out


def cross_member_duplicates_after_commit(logs: Iterable[MemberLog]) -> list[str]:
    """Records consumed by two members where the first had already committed past them
    (successfully) before the second consumed them: what commits must prevent."""
    logs = list(logs)
    first_seen: dict[tuple[str, bytes], Consumed] = {}
    by_value: dict[bytes, list[Consumed]] = {}
    for log in logs:
        consumed, _ = log.snapshot()
        for c in consumed:
            key = (c.member, c.value)
            if key not in first_seen or c.at_ms < first_seen[key].at_ms:
                first_seen[key] = c
    for c in first_seen.values():
        by_value.setdefault(c.value, []).append(c)
    commits = {log.name: log.snapshot()[1] for log in logs}
    problems: list[str] = []
    for value, seen in by_value.items():
        if len(seen) < 2:
            continue
        seen.sort(key=lambda c: c.at_ms)
        first = seen[0]
        for later in seen[1:]:
            covering = [
                k
                for k in commits[first.member]
                if k.success
                and k.offsets.get(first.partition, -1) > first.offset
                and k.at_ms < later.at_ms
            ]
            if covering:
                problems.append(
                    f"{value!r} (partition {first.partition} offset {first.offset}) consumed by "
                    f"{first.member} at {first.at_ms}, committed past by it at "
                    f"{covering[0].at_ms}, consumed again by {later.member} at {later.at_ms}"
                )
    return problems
