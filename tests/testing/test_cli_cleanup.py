"""The testkit's CLI and its process hygiene: no JVM outlives the process that started it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from kafka_actors.testing.broker import pid_alive, sweep_stale_dirs

REPO = Path(__file__).resolve().parents[2]


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with open(task / "children") as fh:
            out += [int(x) for x in fh.read().split()]
    return out


def _java_children(pid: int) -> list[int]:
    pids = []
    for child in _children(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(arg.endswith(b"java") for arg in cmdline) and b"kafka.Kafka" in cmdline:
            pids.append(child)
    return pids


def _wait_gone(pids: list[int], timeout: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = pids
    while time.monotonic() < deadline:
        alive = [p for p in pids if pid_alive(p)]
        if not alive:
            return []
        time.sleep(0.2)
    return alive


def _spawn(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def _first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"no first line; exit={proc.returncode} stderr:\n{err[-3000:]}")
    return line


@pytest.mark.broker
def test_cli_broker_prints_bootstrap_first_and_cleans_up_on_sigterm() -> None:
    proc = _spawn(["-m", "kafka_actors.testing", "broker"])
    try:
        bootstrap = _first_line(proc)
        host, port = bootstrap.split(":")
        assert host == "127.0.0.1" and int(port) > 0
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
        assert len(md.brokers) == 1
        jvms = _java_children(proc.pid)
        assert len(jvms) == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0
        assert _wait_gone(jvms) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.mock
def test_cli_mock_prints_bootstrap_first_and_exits_on_sigterm() -> None:
    proc = _spawn(["-m", "kafka_actors.testing", "mock", "--brokers", "2"])
    try:
        bootstrap = _first_line(proc)
        assert len(bootstrap.split(",")) == 2
        md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3}).list_topics(timeout=30)
        assert len(md.brokers) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


_LEAKY_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from kafka_actors.testing.broker import KafkaCluster
    c = KafkaCluster(num_brokers=int(sys.argv[1]))
    c.start()  # never stopped by this script
    print(" ".join(str(n.pid) for n in c.nodes), c.directory, flush=True)
    time.sleep(600)
    """
)


@pytest.mark.broker
@pytest.mark.parametrize(
    ("sig", "env"),
    [
        # SIGTERM with the parent-death signal off: the launcher's signal handler stops them.
        (signal.SIGTERM, {"KAFKA_ACTORS_PDEATHSIG": "0"}),
        # SIGKILL: no Python code runs; the kernel's parent-death signal kills the JVMs.
        (signal.SIGKILL, {}),
    ],
    ids=["sigterm-handler", "sigkill-pdeathsig"],
)
def test_launcher_stops_its_jvms_when_its_process_is_killed(
    sig: signal.Signals,
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The launcher's cluster directory goes in a temp dir of this test's own (TMPDIR), and
    # this test's sweep looks there: another xdist worker starting a cluster meanwhile sweeps
    # only the shared temp dir. In CI one did, between the kill and the check below, and
    # removed the directory this test expects to find.
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    proc = _spawn(["-c", _LEAKY_SCRIPT, "1"], {**env, "TMPDIR": str(private)})
    directory = ""
    try:
        *words, directory = _first_line(proc).split()
        pids = [int(p) for p in words]
        assert Path(directory).parent == private
        assert pids and all(pid_alive(p) for p in pids)
        assert sorted(_java_children(proc.pid)) == sorted(pids)
        proc.send_signal(sig)
        proc.wait(120)
        assert _wait_gone(pids) == []
        if sig == signal.SIGTERM:
            # The handler also removed the cluster's temporary directory.
            assert not Path(directory).exists()
        else:
            # Nothing could run in the killed process: the next launcher sweeps its directory.
            assert Path(directory).exists()
            assert Path(directory) in sweep_stale_dirs()
            assert not Path(directory).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if directory:
            shutil.rmtree(directory, ignore_errors=True)
