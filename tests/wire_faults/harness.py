"""The parent side of the fault-injection harness: produce the data, run one case (a proxy
with one armed mutation, the consumer in a child process), judge the child's report.

Owns: the FaultProxy and the child process of each case; both are stopped (the child killed
by its PID) before :func:`run_case` returns, whatever happened. Test code only.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka_actors.protocol.wire.apis import ApiKey
from tests.wire_faults.proxy import FaultProxy

ROOT = Path(__file__).resolve().parents[2]

#: The APIs the consumer uses and the group protocol a case needs to see each of them.
APIS: dict[str, tuple[ApiKey, str]] = {
    "ApiVersions": (ApiKey.API_VERSIONS, "consumer"),
    "Metadata": (ApiKey.METADATA, "consumer"),
    "FindCoordinator": (ApiKey.FIND_COORDINATOR, "consumer"),
    "ConsumerGroupHeartbeat": (ApiKey.CONSUMER_GROUP_HEARTBEAT, "consumer"),
    "JoinGroup": (ApiKey.JOIN_GROUP, "classic"),
    "SyncGroup": (ApiKey.SYNC_GROUP, "classic"),
    "Heartbeat": (ApiKey.HEARTBEAT, "classic"),
    "LeaveGroup": (ApiKey.LEAVE_GROUP, "classic"),
    "OffsetFetch": (ApiKey.OFFSET_FETCH, "consumer"),
    "OffsetCommit": (ApiKey.OFFSET_COMMIT, "consumer"),
    "ListOffsets": (ApiKey.LIST_OFFSETS, "consumer"),
    "Fetch": (ApiKey.FETCH, "consumer"),
}

#: The handshake APIs of a SASL listener (tests with the secured broker only).
SASL_APIS: dict[str, tuple[ApiKey, str]] = {
    "SaslHandshake": (ApiKey.SASL_HANDSHAKE, "consumer"),
    "SaslAuthenticate": (ApiKey.SASL_AUTHENTICATE, "consumer"),
}

#: Mutations a random case may pick ("huge_first_count" is the issue's 18-byte reproducer).
RANDOM_MUTATIONS = (
    "bit_flip",
    "truncate",
    "huge",
    "huge_first_count",
    "frame_size",
    "correlation_id",
    "garbage",
    "silence",
    "close",
)

RSS_GROWTH_LIMIT_KB = 100 * 1024
REQUEST_TIMEOUT_MS = 4_000
JOIN_REBALANCE_TIMEOUT_MS = 8_000
SLACK_S = 5.0  # a call may return this much later than its timeout (a loaded 2-core machine)


@dataclass(frozen=True, slots=True)
class Case:
    api: str
    mutation: str
    count: int = 1
    seed: int = 0
    skip: int = 0

    @property
    def id(self) -> str:
        return f"{self.api}-{self.mutation}-x{self.count}-s{self.seed}"


@dataclass(slots=True)
class Dataset:
    """What was produced: ``records[i] = [partition, offset, key hex, value hex, headers]``."""

    bootstrap: str
    topic: str
    partitions: int
    records: list[list[Any]] = field(default_factory=list)


@dataclass(slots=True)
class Outcome:
    case: Case
    returncode: int | None
    report: dict[str, Any] | None
    applied: list[tuple[str, int, str]]
    answers: dict[int, int]
    stderr_tail: str
    elapsed_s: float
    killed: bool = False
    #: The mutated answers as sent: (API key, version, bytes with their size prefix).
    mutated: list[tuple[int, int, bytes]] = field(default_factory=list)
    #: Connections the client opened through the proxy.
    connections: int = 0

    @property
    def aborted(self) -> bool:
        return self.returncode is not None and self.returncode < 0 and not self.killed

    def describe(self) -> str:
        applied = "; ".join(f"{a} v{v}: {what}" for a, v, what in self.applied[:6]) or "nothing"
        return f"case {self.case.id} (mutated: {applied})"


def produce(bootstrap: str, topic: str, partitions: int, count: int) -> Dataset:
    """``count`` records over ``partitions``: keys (some None), values (one empty, one None),
    headers (none, one, several, a None value); returns them with their offsets."""
    from confluent_kafka import Producer

    data = Dataset(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    failures: list[str] = []

    def delivered(headers: list[tuple[str, bytes | None]], err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
            return
        value, key = msg.value(), msg.key()
        data.records.append(
            [
                msg.partition(),
                msg.offset(),
                None if key is None else key.hex(),
                None if value is None else value.hex(),
                [[k, None if v is None else v.hex()] for k, v in headers],
            ]
        )

    for i in range(count):
        key = None if i % 7 == 3 else f"key-{i}".encode()
        value: bytes | None = f"value-{i}-".encode() + bytes(range(i % 40))
        if i == 5:
            value = b""
        if i == 11:
            value = None
        headers = [
            (f"h{j}", None if (i + j) % 5 == 0 else f"v{i}.{j}".encode()) for j in range(i % 4)
        ]
        producer.produce(
            topic,
            value=value,
            key=key,
            partition=i % partitions,
            headers=headers,
            on_delivery=functools.partial(delivered, headers),
        )
    assert producer.flush(30) == 0 and not failures, failures
    data.records.sort(key=lambda r: (r[0], r[1]))
    return data


def save_frames(outcome: Outcome, directory: Path) -> Path:
    """Write the mutated answers of ``outcome`` to ``directory/<case id>.json`` (API key,
    version, hex) for replaying them through the decoder without a broker."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{outcome.case.id}.json"
    path.write_text(json.dumps([[a, v, f.hex()] for a, v, f in outcome.mutated]))
    return path


def consumer_config(bootstrap: str, protocol: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"wire-faults-{uuid.uuid4().hex[:12]}",
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.max.wait.ms": 100,
        "request.timeout.ms": REQUEST_TIMEOUT_MS,
        "default.api.timeout.ms": 8_000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "retry.backoff.ms": 50,
        "retry.backoff.max.ms": 500,
        "socket.connection.setup.timeout.ms": 3_000,
        "socket.connection.setup.timeout.max.ms": 5_000,
    }
    if protocol == "classic":
        # JoinGroup may be held by the broker up to the rebalance timeout (max.poll.interval.ms)
        # and so waits that long (+5 s) for an answer, as in Java: keep it short here.
        config.update(
            {
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 300,
                "max.poll.interval.ms": JOIN_REBALANCE_TIMEOUT_MS,
            }
        )
    return config


def run_case(
    data: Dataset,
    case: Case,
    *,
    deadline_s: float = 35.0,
    target: str | None = None,
    security: dict[str, Any] | None = None,
) -> Outcome:
    """Run ``case``: arm a proxy in front of the broker, run the consumer child through it,
    stop both (the child by PID, killed past its deadline) and collect what happened.
    ``target``: the listener the proxy forwards to (default: where the data was produced);
    ``security``: the consumer's security settings for that listener."""
    api, protocol = {**APIS, **SASL_APIS}[case.api]
    if case.mutation == "silence":
        # Each unanswered request waits for its timeout before it is retried.
        wait_ms = (
            JOIN_REBALANCE_TIMEOUT_MS + 5_000 if api == ApiKey.JOIN_GROUP else REQUEST_TIMEOUT_MS
        )
        deadline_s += case.count * wait_ms / 1000.0
    host, port = (target or data.bootstrap).rsplit(":", 1)
    started = time.monotonic()
    proxy = FaultProxy((host, int(port)))
    child: subprocess.Popen[str] | None = None
    killed = False
    stdout = stderr = ""
    try:
        proxy.arm(api, case.mutation, case.count, seed=case.seed, skip=case.skip)
        spec = {
            "config": {**consumer_config(proxy.address, protocol), **(security or {})},
            "topic": data.topic,
            "partitions": data.partitions,
            "expected": len(data.records),
            "deadline_s": deadline_s,
            "slack": SLACK_S,
            "close_timeout_s": 10.0,
            # Classic heartbeats start after the join: poll long enough to send a few.
            "min_run_s": 4.0 if api == ApiKey.HEARTBEAT else 0.0,
        }
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            child = subprocess.Popen(
                [sys.executable, "-m", "tests.wire_faults.child", json.dumps(spec)],
                cwd=ROOT,
                stdout=out,
                stderr=err,
                text=True,
                env={**os.environ, "PYTHONFAULTHANDLER": "1"},
            )
            # deadline, commit and committed (2 x api timeout), close, start-up: then it hangs.
            limit = deadline_s + 2 * 8.0 + 10.0 + 3 * 3.0 + 30.0
            try:
                child.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                killed = True
                os.kill(child.pid, signal.SIGKILL)
                child.wait(timeout=30)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
    finally:
        if child is not None and child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
        proxy.close()
    report = None
    for line in reversed(stdout.splitlines()):
        if line.startswith("REPORT "):
            report = json.loads(line[len("REPORT ") :])
            break
    return Outcome(
        case,
        None if child is None else child.returncode,
        report,
        list(proxy.applied),
        dict(proxy.answers),
        _fatal_stack(stderr) + stderr[-int(os.environ.get("WIRE_FAULTS_STDERR", "3000")) :],
        time.monotonic() - started,
        killed,
        list(proxy.mutated),
        proxy.accepted,
    )


def _fatal_stack(stderr: str) -> str:
    """The faulthandler's stack of the thread that died (empty when there is none)."""
    fatal = stderr.find("Fatal Python error")
    if fatal < 0:
        return ""
    title = stderr[fatal : stderr.find("\n", fatal)]
    start = stderr.find("Current thread", fatal)
    if start < 0:
        return title + "\n"
    end = stderr.find("\n\n", start)
    return f"{title}\n{stderr[start : end if end > 0 else start + 3000]}\n...\n"


def problems(outcome: Outcome, data: Dataset) -> list[str]:
    """Everything wrong with ``outcome`` (empty when the case passed)."""
    found: list[str] = []
    if outcome.killed:
        found.append("the child did not finish: killed past its deadline (a hang)")
    elif outcome.returncode is not None and outcome.returncode < 0:
        name = signal.Signals(-outcome.returncode).name
        found.append(f"the child died of {name}")
    elif outcome.returncode != 0:
        found.append(f"the child exited with {outcome.returncode}")
    report = outcome.report
    if report is None:
        found.append("no report from the child")
        return found
    for error in report["errors"]:
        if not error["module"].startswith("kafka_actors"):
            found.append(
                f"untyped error from {error['call']}: {error['module']}.{error['type']}: "
                f"{error['message']}\n{error['traceback']}"
            )
    for late in report["late"]:
        found.append(f"{late['call']} took {late['took']} s (timeout {late['timeout']} s)")
    growth = report["rss_peak_kb"] - report["rss_start_kb"]
    if growth > RSS_GROWTH_LIMIT_KB:
        found.append(f"RSS grew by {growth // 1024} MB")
    got = report["records"]
    expected = data.records
    # Partitions interleave freely; within a partition the order is the log's.
    if sorted(got, key=lambda r: int(r[0])) != expected:
        want = {(r[0], r[1]) for r in expected}
        seen: dict[tuple[int, int], int] = {}
        for r in got:
            seen[(r[0], r[1])] = seen.get((r[0], r[1]), 0) + 1
        missing = sorted(want - set(seen))
        twice = sorted(k for k, n in seen.items() if n > 1)
        extra = sorted(set(seen) - want)
        by_key = {(r[0], r[1]): r for r in expected}
        changed = [r for r in got if (r[0], r[1]) in by_key and by_key[(r[0], r[1])] != r]
        order = [
            p
            for p in range(data.partitions)
            if [r[1] for r in got if r[0] == p] != sorted(r[1] for r in got if r[0] == p)
        ]
        found.append(
            f"records differ: {len(got)} of {len(expected)} arrived; missing {missing[:10]}, "
            f"twice {twice[:10]}, unexpected {extra[:10]}, changed {changed[:3]}, "
            f"out of order in partitions {order}"
        )
    ends: dict[int, int] = {}
    for r in expected:
        ends[r[0]] = max(ends.get(r[0], 0), r[1] + 1)
    if len(got) == len(expected) and {int(p): o for p, o in report["committed"].items()} != ends:
        found.append(f"committed {report['committed']}, expected {ends}")
    return found


def recovery_only(found: list[str]) -> bool:
    """Only recovery failed (records, commit): nothing crashed, hung, leaked or ran late."""
    return bool(found) and all(f.startswith(("records differ", "committed")) for f in found)


_DECODE = """
import json, sys
from kafka_actors.protocol.wire.apis import response_type
from kafka_actors.protocol.wire.framing import decode_response
for api, version, frame in json.loads(sys.stdin.read()):
    try:
        decode_response(bytes.fromhex(frame)[4:], response_type(api, version))
        print("decoded", flush=True)
    except Exception:
        print("failed", flush=True)
"""


def decodes_as_valid(outcome: Outcome) -> bool:
    """Some mutated answer of ``outcome`` still decodes: a flipped bit that makes another valid
    answer (a different heartbeat interval, topic id, record byte, error code). Kafka responses
    carry no checksum, so the client cannot tell it from the broker's word (records do have a
    CRC: a flipped record byte is a CorruptRecordError, which stays until the user seeks, as
    in Java). Decoded in a child process: a frame may abort kio's reader (bug 2)."""
    frames = [[a, v, f.hex()] for a, v, f in outcome.mutated if len(f) > 4]
    if not frames:
        return False
    child = subprocess.run(
        [sys.executable, "-c", _DECODE],
        input=json.dumps(frames),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    return "decoded" in child.stdout.split()


def aborts_in_native_reader(outcome: Outcome) -> bool:
    """The child died of SIGABRT while decoding a response (``protocol/wire.py`` on the dying
    thread's stack): kio's native reader allocating a size read from the frame, bug 2 of
    issue 10, fixed by bounded decoding on wip/wire. Random garbage hits it too."""
    stack = _fatal_stack(outcome.stderr_tail)
    return outcome.returncode == -signal.SIGABRT and "protocol/wire.py" in stack
