"""Resolution of Apache Kafka's own jars through Maven into a per-user cache.

Owns: the cache directory ``${KAFKA_ACTORS_CACHE:-~/.cache/kafka-actors}/kafka-<version>/``,
the generated Maven pom in it, the inter-process lock that serialises resolution, and the
choice of logging backend per Kafka line (log4j2 for 4.x, reload4j for 3.x).
May touch: the cache directory, Maven's local repository inside it (``<cache>/m2``), and the
network through ``mvn`` only: Maven's configured repositories and mirrors (``settings.xml``)
decide where the jars come from, so resolution works behind a company mirror; no repository
address is written here. It never touches the project tree.

Layout of one resolved version::

    kafka-<version>/
      pom.xml          generated; the artifacts below plus the logging backend
      broker/          jars of org.apache.kafka:kafka_2.13 (the broker, kafka-storage, ...)
      tools/           jars of org.apache.kafka:kafka-tools (ConsumerGroupCommand, ...)
      resolved.json    written last: the stamp that makes resolution idempotent

The broker and the tools get separate class paths because a repository may publish the
``kafka-tools`` artifact of a release later than (or not at all beside) the broker; then the
newest published ``kafka-tools`` of the same major version not newer than the broker is used
(a Maven version range), recorded in
``resolved.json`` (tools talk to the broker over the network, so that skew is harmless), and
the broker's own runtime dependency on ``kafka-tools-api`` follows it when missing too.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DEFAULT_KAFKA_VERSION = "4.4.0"
DEFAULT_KAFKA39_VERSION = "3.9.2"
SCALA_BINARY = "2.13"

# Logging backends: Kafka 4.x logs through slf4j 1.7 into log4j2; Kafka 3.x into reload4j.
_LOG4J2_VERSION = "2.24.3"
_SLF4J_VERSION = "1.7.36"
_RELOAD4J_VERSION = "1.2.25"

_STAMP = "resolved.json"
_FORMAT = 1


class JarResolutionError(RuntimeError):
    """Kafka's jars could not be resolved (Maven missing, artifact absent, network down)."""


@dataclass(frozen=True)
class KafkaJars:
    """The resolved class paths of one Kafka version."""

    version: str
    directory: Path
    broker_classpath: tuple[Path, ...]
    tools_classpath: tuple[Path, ...]
    tools_version: str

    @property
    def major(self) -> int:
        return int(self.version.split(".", 1)[0])

    @property
    def broker_cp(self) -> str:
        return os.pathsep.join(str(p) for p in self.broker_classpath)

    @property
    def tools_cp(self) -> str:
        return os.pathsep.join(str(p) for p in self.tools_classpath)


def cache_root() -> Path:
    """The cache root: ``$KAFKA_ACTORS_CACHE`` or ``~/.cache/kafka-actors``."""
    env = os.environ.get("KAFKA_ACTORS_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kafka-actors"


def maven_repo() -> Path:
    """Maven's local repository: ``$KAFKA_ACTORS_MAVEN_REPO`` or ``<cache root>/m2``."""
    env = os.environ.get("KAFKA_ACTORS_MAVEN_REPO")
    return Path(env).expanduser() if env else cache_root() / "m2"


def default_version() -> str:
    return os.environ.get("KAFKA_ACTORS_KAFKA_VERSION", DEFAULT_KAFKA_VERSION)


def default_version_39() -> str:
    return os.environ.get("KAFKA_ACTORS_KAFKA39_VERSION", DEFAULT_KAFKA39_VERSION)


_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")


def _check_version(version: str) -> None:
    if not _VERSION_RE.match(version):
        raise JarResolutionError(f"not a Kafka release version: {version!r}")
    if int(version.split(".", 1)[0]) < 3:
        raise JarResolutionError(f"Kafka {version}: only 3.x (KRaft) and newer are supported")


# A download that fails part way (a repository or proxy answering an error for one artifact
# among a hundred) is retried before the resolution is reported as failed.
MVN_ATTEMPTS = 3
MVN_RETRY_BACKOFF_S = 5.0


def _mvn() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarResolutionError("Maven (mvn) is not on PATH; it resolves Kafka's jars")
    return mvn


def _artifact_exists(artifact: str, version: str, m2: Path) -> bool:
    """Whether org.apache.kafka:``artifact``:``version`` resolves (its pom) through Maven's
    configured repositories."""
    cmd = [
        _mvn(),
        "-B",
        "-q",
        f"-Dmaven.repo.local={m2}",
        "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:get",
        f"-Dartifact=org.apache.kafka:{artifact}:{version}:pom",
        "-Dtransitive=false",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    return proc.returncode == 0


def _dep(group: str, artifact: str, version: str, exclusions: tuple[str, ...] = ()) -> str:
    excl = ""
    if exclusions:
        inner = "".join(
            f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>"
            for g, a in (e.split(":") for e in exclusions)
        )
        excl = f"<exclusions>{inner}</exclusions>"
    return (
        f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
        f"<version>{version}</version>{excl}</dependency>"
    )


def _logging_deps(major: int) -> list[str]:
    if major >= 4:
        return [
            _dep("org.apache.logging.log4j", "log4j-api", _LOG4J2_VERSION),
            _dep("org.apache.logging.log4j", "log4j-core", _LOG4J2_VERSION),
            _dep("org.apache.logging.log4j", "log4j-slf4j-impl", _LOG4J2_VERSION),
            _dep("org.slf4j", "slf4j-api", _SLF4J_VERSION),
        ]
    return [
        _dep("org.slf4j", "slf4j-api", _SLF4J_VERSION),
        _dep("org.slf4j", "slf4j-reload4j", _SLF4J_VERSION),
        _dep("ch.qos.reload4j", "reload4j", _RELOAD4J_VERSION),
    ]


# Logging bindings pulled in transitively by some releases, replaced by ours above.
_LOG_EXCLUSIONS = ("org.slf4j:slf4j-log4j12", "log4j:log4j")

# kafka-tools depends on Kafka Connect's runtime for one tool (connect-plugin-path), and through
# it on some forty jars of Jetty and Jersey that none of the testkit's tools loads. Leaving them
# out keeps a fresh resolution from depending on them: kafka-tools 4.4.0 names a Jetty release
# (jetty-ee10-servlets 12.0.39) whose jar the repository did not serve, and every fresh fetch
# failed on it.
_TOOLS_EXCLUSIONS = (*_LOG_EXCLUSIONS, "org.apache.kafka:connect-runtime")


def _pom(name: str, deps: list[str]) -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        f"  <groupId>kafka-actors.testkit</groupId><artifactId>{name}</artifactId>"
        "<version>0</version><packaging>pom</packaging>\n"
        f"  <dependencies>\n    {chr(10).join('    ' + d for d in deps).strip()}\n"
        "  </dependencies>\n"
        "</project>\n"
    )


def _run_mvn(pom: Path, out_dir: Path, m2: Path) -> None:
    mvn = _mvn()
    tmp_out = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp_out, ignore_errors=True)
    cmd = [
        mvn,
        "-B",
        "-q",
        "-f",
        str(pom),
        f"-Dmaven.repo.local={m2}",
        "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies",
        f"-DoutputDirectory={tmp_out}",
        "-DincludeScope=runtime",
    ]
    for attempt in range(1, MVN_ATTEMPTS + 1):
        # A retry passes -U: Maven otherwise remembers a failed download in the local repository
        # and refuses to try that artifact again until its update interval has passed.
        retry = ["-U"] if attempt > 1 else []
        proc = subprocess.run(
            [cmd[0], *retry, *cmd[1:]], capture_output=True, text=True, timeout=1800, check=False
        )
        if proc.returncode == 0:
            break
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        if attempt == MVN_ATTEMPTS:
            raise JarResolutionError(
                f"mvn failed for {pom} (exit {proc.returncode}, {attempt} attempts):\n{tail}"
            )
        shutil.rmtree(tmp_out, ignore_errors=True)
        time.sleep(MVN_RETRY_BACKOFF_S * attempt)
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp_out.rename(out_dir)


def _copied_version(directory: Path, artifact: str) -> str:
    """The version of ``artifact`` whose jar Maven copied into ``directory``."""
    found = [
        m.group(1)
        for p in directory.glob(f"{artifact}-*.jar")
        if (m := re.fullmatch(rf"{re.escape(artifact)}-(\d+\.\d+\.\d+)\.jar", p.name))
    ]
    if len(found) != 1:
        raise JarResolutionError(f"expected one {artifact} jar in {directory}, found {found}")
    return found[0]


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _load(directory: Path, version: str) -> KafkaJars | None:
    stamp = directory / _STAMP
    try:
        data = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return None
    if data.get("format") != _FORMAT or data.get("version") != version:
        return None
    broker = tuple(directory / "broker" / n for n in data["broker"])
    tools = tuple(directory / "tools" / n for n in data["tools"])
    if not all(p.is_file() for p in broker + tools):
        return None
    return KafkaJars(version, directory, broker, tools, data["tools_version"])


def resolve(version: str | None = None) -> KafkaJars:
    """Resolve (download once, then reuse) the jars of Kafka ``version``.

    Idempotent and safe under concurrent calls from several processes: resolution runs
    under an exclusive file lock on the cache root, and a version counts as resolved only
    once its stamp file is written.
    """
    version = version or default_version()
    _check_version(version)
    root = cache_root()
    directory = root / f"kafka-{version}"
    found = _load(directory, version)
    if found is not None:
        return found
    with _locked(root):
        found = _load(directory, version)
        if found is not None:
            return found
        major = int(version.split(".", 1)[0])
        directory.mkdir(parents=True, exist_ok=True)
        m2 = maven_repo()
        # The tools first: the newest kafka-tools of this major version not newer than the
        # broker (a version range Maven resolves from its repositories' metadata).
        tools_pom = directory / "tools-pom.xml"
        tools_pom.write_text(
            _pom(
                "tools",
                [
                    _dep(
                        "org.apache.kafka",
                        "kafka-tools",
                        f"[{major}.0.0,{version}]",
                        _TOOLS_EXCLUSIONS,
                    ),
                    *_logging_deps(major),
                ],
            )
        )
        _run_mvn(tools_pom, directory / "tools", m2)
        tools_version = _copied_version(directory / "tools", "kafka-tools")
        broker_pom = directory / "broker-pom.xml"
        broker_excl: tuple[str, ...] = _LOG_EXCLUSIONS
        extra: list[str] = []
        if tools_version != version and not _artifact_exists("kafka-tools-api", version, m2):
            # The broker's runtime dependency on kafka-tools-api (a few plug-in interfaces)
            # follows kafka-tools when the repositories lack this release of it.
            broker_excl = (*broker_excl, "org.apache.kafka:kafka-tools-api")
            extra.append(_dep("org.apache.kafka", "kafka-tools-api", tools_version))
        broker_pom.write_text(
            _pom(
                "broker",
                [
                    _dep("org.apache.kafka", f"kafka_{SCALA_BINARY}", version, broker_excl),
                    _dep("org.apache.kafka", "kafka-clients", version),
                    *extra,
                    *_logging_deps(major),
                ],
            )
        )
        _run_mvn(broker_pom, directory / "broker", m2)
        data = {
            "format": _FORMAT,
            "version": version,
            "tools_version": tools_version,
            "broker": sorted(p.name for p in (directory / "broker").glob("*.jar")),
            "tools": sorted(p.name for p in (directory / "tools").glob("*.jar")),
        }
        tmp = directory / (_STAMP + ".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.rename(directory / _STAMP)
    found = _load(directory, version)
    if found is None:
        raise JarResolutionError(f"resolution of Kafka {version} left no usable stamp")
    return found
