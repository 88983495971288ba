"""Jar resolution: layout of the cache, logging backends, idempotence, concurrent fetches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_actors.testing import jars

REPO = Path(__file__).resolve().parents[2]


def _names(paths: tuple[Path, ...]) -> set[str]:
    return {p.name for p in paths}


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def test_kafka_4_layout_and_log4j2_backend() -> None:
    found = jars.resolve(jars.default_version())
    v = found.version
    assert found.directory == jars.cache_root() / f"kafka-{v}"
    broker = _names(found.broker_classpath)
    assert {f"kafka_2.13-{v}.jar", f"kafka-clients-{v}.jar", f"kafka-server-{v}.jar"} <= broker
    assert any(n.startswith("log4j-core-2.") for n in broker)
    assert any(n.startswith("log4j-slf4j-impl-2.") for n in broker)
    assert not any(n.startswith(("slf4j-log4j12", "slf4j-reload4j", "reload4j")) for n in broker)
    tools = _names(found.tools_classpath)
    assert f"kafka-tools-{found.tools_version}.jar" in tools
    assert _vkey(found.tools_version) <= _vkey(v)
    assert found.tools_version.split(".")[0] == v.split(".")[0]
    assert all(p.is_file() for p in found.broker_classpath + found.tools_classpath)


def test_kafka_39_layout_and_reload4j_backend() -> None:
    found = jars.resolve(jars.default_version_39())
    assert found.version.startswith("3.9.")
    broker = _names(found.broker_classpath)
    assert f"kafka_2.13-{found.version}.jar" in broker
    assert any(n.startswith("reload4j-") for n in broker)
    assert any(n.startswith("slf4j-reload4j-") for n in broker)
    assert not any(n.startswith(("log4j-core", "slf4j-log4j12", "log4j-1.2")) for n in broker)
    assert found.tools_version == found.version


@pytest.mark.parametrize("bad", ["4.4", "latest", "2.8.0", "4.4.0; rm -rf /"])
def test_rejects_non_release_versions(bad: str) -> None:
    with pytest.raises(jars.JarResolutionError):
        jars.resolve(bad)


def test_concurrent_fetches_into_a_fresh_cache_then_no_maven_needed(tmp_path: Path) -> None:
    version = jars.default_version()
    jars.resolve(version)  # make sure the shared Maven repository holds the artifacts
    env = {
        **os.environ,
        "KAFKA_ACTORS_CACHE": str(tmp_path / "cache"),
        "KAFKA_ACTORS_MAVEN_REPO": str(jars.maven_repo()),
    }
    cmd = [sys.executable, "-m", "kafka_actors.testing", "fetch", "--kafka-version", version]
    procs = [
        subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err.decode()[-2000:]
    expected = str(tmp_path / "cache" / f"kafka-{version}")
    assert {out.decode().strip() for out, _ in outs} == {expected}
    assert (Path(expected) / "resolved.json").is_file()
    assert not list(Path(expected).glob("*.partial"))
    # kafka-tools without Kafka Connect's runtime and the Jetty/Jersey jars it drags in.
    tools = {p.name for p in (Path(expected) / "tools").glob("*.jar")}
    assert any(n.startswith("kafka-tools-") for n in tools)
    assert not [n for n in tools if n.startswith(("connect-runtime", "jetty-", "jersey-"))]

    # Resolved once: later calls need neither Maven nor the network's help to succeed.
    no_mvn = {**env, "PATH": os.path.dirname(sys.executable)}
    proc = subprocess.run(cmd, env=no_mvn, cwd=REPO, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert proc.stdout.decode().strip() == expected


def test_missing_maven_is_a_typed_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_ACTORS_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(jars.JarResolutionError, match="mvn"):
        jars.resolve(jars.default_version())


def _fake_mvn(tmp_path: Path, fail_times: int) -> Path:
    """An ``mvn`` on PATH that fails its first ``fail_times`` runs, then copies one jar into
    the ``-DoutputDirectory``; each run's arguments are logged one line per run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "mvn"
    script.write_text(
        f"""#!{sys.executable}
import pathlib, sys
log = pathlib.Path({str(tmp_path / "calls")!r})
runs = len(log.read_text().splitlines()) if log.exists() else 0
with log.open("a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
if runs < {fail_times}:
    print("[ERROR] Could not find artifact org.example:flaky:jar:1.0 in central")
    sys.exit(1)
out = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("-DoutputDirectory="))
pathlib.Path(out).mkdir(parents=True, exist_ok=True)
(pathlib.Path(out) / "flaky-1.0.jar").write_bytes(b"jar")
"""
    )
    script.chmod(0o755)
    return bin_dir


def test_a_failed_download_is_retried_with_forced_update(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(_fake_mvn(tmp_path, fail_times=1)))
    monkeypatch.setattr(jars, "MVN_RETRY_BACKOFF_S", 0.0)
    out = tmp_path / "out"
    jars._run_mvn(tmp_path / "pom.xml", out, tmp_path / "m2")
    assert (out / "flaky-1.0.jar").is_file()
    assert not out.with_name("out.partial").exists()
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 2
    assert "-U" not in calls[0].split() and "-U" in calls[1].split()


def test_a_download_failing_every_attempt_is_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(_fake_mvn(tmp_path, fail_times=99)))
    monkeypatch.setattr(jars, "MVN_RETRY_BACKOFF_S", 0.0)
    with pytest.raises(jars.JarResolutionError, match=r"(?s)3 attempts.*flaky"):
        jars._run_mvn(tmp_path / "pom.xml", tmp_path / "out", tmp_path / "m2")
    assert len((tmp_path / "calls").read_text().splitlines()) == jars.MVN_ATTEMPTS
