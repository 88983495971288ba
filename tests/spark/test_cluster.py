"""The kafka-actors source on a real Spark standalone cluster (not ``local[*]``): a master and
two workers started here from the installed pyspark as separate processes (1 core, 512m each,
loopback only), executors in their own JVMs with their own Python workers, the driver in its own
process (``cluster_driver.py``). One test (long):

1. the streaming query reads the topic into Parquet, is stopped midway and restarted from its
   checkpoint; at the stop, the group's committed offsets equal the last batch Spark
   committed (its checkpoint's commit and offset logs);
2. during the second run a worker is killed (the worker JVM, its executor JVM and its Python
   workers): Spark retries the lost tasks on the other executor and the query goes on;
3. the output holds every record exactly once, and the group's offsets are the topic's end.
   "The output" is what the file sink committed: the files its log (``_spark_metadata``) lists,
   which is what a Spark reader of the directory sees. The directory itself may hold more: a
   task of the killed executor can leave its file behind (written, never committed; the task
   ran again elsewhere). Reading every ``*.parquet`` counted such a file's records twice.

The short version (the suite) produces 20k records; ``KAFKA_ACTORS_SPARK_CLUSTER_RECORDS=200000``
runs the full one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_actors.testing.broker import free_ports
from tests.spark.helpers import describe_group, produce, unique

pytestmark = [
    pytest.mark.broker,
    pytest.mark.spark_cluster,
    pytest.mark.timeout(1200),
]

RECORDS = int(os.environ.get("KAFKA_ACTORS_SPARK_CLUSTER_RECORDS", "20000"))
PARTITIONS = 4
ROOT = Path(__file__).resolve().parents[2]


def _spark_home() -> Path:
    pyspark = pytest.importorskip("pyspark")
    return Path(pyspark.__file__).resolve().parent


class SparkStandalone:
    """A master and workers, each its own process group; stopped by PID."""

    def __init__(self, directory: Path, workers: int = 2) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.home = _spark_home()
        port, web, *worker_webs = free_ports(2 + workers)
        self.url = f"spark://127.0.0.1:{port}"
        self.env = {
            **os.environ,
            "SPARK_HOME": str(self.home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_LOG_DIR": str(directory / "logs"),
            "SPARK_WORKER_DIR": str(directory / "work"),
            "PYSPARK_PYTHON": sys.executable,
            "PYTHONPATH": str(ROOT),
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web)],
        )
        for index in range(workers):
            self._start(
                f"worker{index}",
                "org.apache.spark.deploy.worker.Worker",
                [
                    self.url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    "512m",
                    "--webui-port",
                    str(worker_webs[index]),
                    "--work-dir",
                    str(directory / f"work{index}"),
                ],
            )
        self._wait_registered(workers)

    def _start(self, name: str, main: str, args: list[str]) -> None:
        log = open(self.directory / f"{name}.log", "wb")
        self.procs[name] = subprocess.Popen(
            [str(self.home / "bin" / "spark-class"), main, *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    def _wait_registered(self, workers: int) -> None:
        deadline = time.monotonic() + 180
        log = self.directory / "master.log"
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited: {self.tail(name)}")
            text = log.read_text(errors="replace") if log.exists() else ""
            if text.count("Registering worker") >= workers:
                return
            time.sleep(0.5)
        raise RuntimeError(f"workers did not register: {self.tail('master')}")

    def tail(self, name: str, lines: int = 30) -> str:
        path = self.directory / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def kill(self, name: str) -> None:
        """SIGKILL a daemon's process group: the JVM, and for a worker its executor JVM and
        the executor's Python workers (started in the worker's session)."""
        proc = self.procs[name]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)

    def stop(self) -> None:
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(30)
                except (subprocess.TimeoutExpired, ProcessLookupError):
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait(30)
            else:
                # the group may outlive its leader (an executor of a stopped worker)
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture
def spark_standalone(tmp_path: Path) -> Iterator[SparkStandalone]:
    _spark_home()
    cluster = SparkStandalone(tmp_path / "spark")
    try:
        yield cluster
    finally:
        cluster.stop()


class Driver:
    """``cluster_driver.py`` in its own process (and process group), its lines collected."""

    def __init__(self, cluster: SparkStandalone, args: list[str], log: Path) -> None:
        self.lines: list[str] = []
        self.log = log
        stderr = open(log, "wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("cluster_driver.py")),
                "--master",
                cluster.url,
                *args,
            ],
            env=cluster.env,
            cwd=str(ROOT),
            stdout=subprocess.PIPE,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        stderr.close()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip())

    def batches_with_rows(self) -> int:
        return sum(
            1
            for line in list(self.lines)
            if line.startswith("progress ") and int(line.split()[2]) > 0
        )

    def finish(self, timeout: float) -> dict[str, Any]:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self._reader.join(10)
        done = [line[line.index("done ") :] for line in self.lines if "done " in line]
        tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])
        assert done, f"driver ended without a summary (rc {self.proc.returncode}):\n{tail}"
        result: dict[str, Any] = json.JSONDecoder().raw_decode(done[-1][5:])[0]
        assert self.proc.returncode == 0 and result["error"] is None, (result, tail)
        return result

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


def _log_tail(path: Path, lines: int = 60) -> str:
    text = path.read_text(errors="replace") if path.exists() else "(no log)"
    return f"--- {path.name} (last {lines} lines):\n" + "\n".join(text.splitlines()[-lines:])


def _sink_files(out: Path) -> list[str]:
    """The files the Parquet sink committed: every "add" (less "delete") of its log,
    ``_spark_metadata/<batch>`` and the compacted ``<batch>.compact`` files."""
    added: set[str] = set()
    deleted: set[str] = set()
    for entry in (out / "_spark_metadata").iterdir():
        if entry.name.startswith("."):
            continue  # Hadoop's .crc side files
        for line in entry.read_text().splitlines()[1:]:  # line 1: the log's version ("v1")
            record = json.loads(line)
            name = Path(record["path"].removeprefix("file://")).name
            (added if record["action"] == "add" else deleted).add(name)
    files = sorted(str(out / name) for name in added - deleted)
    assert files, f"the sink's log lists no file: {sorted(p.name for p in out.iterdir())}"
    return files


def _last_committed_batch(checkpoint: Path) -> dict[int, int]:
    """The end offsets (partition → offset) of the newest batch in the commit log."""
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    lines = (checkpoint / "offsets" / str(last)).read_text().splitlines()
    offsets = json.loads(lines[2])
    (topic_offsets,) = offsets.values()
    return {int(p): int(o) for p, o in topic_offsets.items()}


def test_exactly_once_on_a_standalone_cluster_with_restart_and_worker_loss(
    spark_standalone: SparkStandalone, kafka_broker: Any, tmp_path: Path
) -> None:
    cluster = spark_standalone
    bootstrap = kafka_broker.bootstrap_servers
    topic, group = unique("cluster"), unique("cluster-group")
    kafka_broker.create_topic(topic, partitions=PARTITIONS)
    produce(bootstrap, topic, RECORDS, partitions=PARTITIONS)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    per_trigger = max(1000, RECORDS // 10)
    common = [
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--group",
        group,
        "--out",
        str(out),
        "--checkpoint",
        str(checkpoint),
        "--max-per-trigger",
        str(per_trigger),
    ]

    first = Driver(cluster, [*common, "--until", str(3 * per_trigger)], tmp_path / "first.log")
    try:
        result = first.finish(600)
    finally:
        first.kill()
    assert 3 * per_trigger <= result["rows"] < RECORDS, result
    # stopped: the group holds exactly the last batch Spark committed
    committed = describe_group(kafka_broker, group)
    assert {p: current for p, (current, _, _) in committed.items()} == _last_committed_batch(
        checkpoint
    ), _log_tail(tmp_path / "first.log")

    second = Driver(cluster, common, tmp_path / "second.log")
    try:
        deadline = time.monotonic() + 600
        while second.batches_with_rows() < 2 and second.proc.poll() is None:
            assert time.monotonic() < deadline, "the second run made no progress"
            time.sleep(0.2)
        assert second.proc.poll() is None, "the second run ended before the worker was killed"
        cluster.kill("worker1")
        result = second.finish(900)
    finally:
        second.kill()
    second_log = tmp_path / "second.log"
    assert result["finished"], (result, _log_tail(second_log))
    # the driver saw the executor of the killed worker go, mid-query
    assert "Lost executor" in second_log.read_text(errors="replace"), _log_tail(second_log)

    import pyarrow.parquet as pq

    table = pq.read_table(_sink_files(out), columns=["partition", "offset", "value"])
    pairs = list(
        zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True)
    )
    assert len(pairs) == len(set(pairs)), "a record appears twice"
    values = sorted(int(v) for v in table.column("value").to_pylist())
    missing = sorted(set(range(RECORDS)) - set(values))
    assert values == list(range(RECORDS)), (
        f"{len(values)} values, {len(missing)} missing (first: {missing[:10]})"
    )
    final = describe_group(kafka_broker, group)
    ends = {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}
    assert {p: current for p, (current, _, _) in final.items()} == ends, _log_tail(second_log)
    assert _last_committed_batch(checkpoint) == ends
