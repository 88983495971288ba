"""A Kerberos KDC on loopback for SASL/GSSAPI tests (Apache Kerby's ``SimpleKdcServer``).

Owns: the Kerby jars resolved through Maven into ``<cache>/kerby-<version>/`` (as Kafka's own
jars, :mod:`kafka_actors.testing.jars`), a small Java main compiled once into that directory,
and one KDC process per :class:`TestKdc`: its realm, its principals, one keytab per principal
and the ``krb5.conf`` that both the broker's JVM and the MIT libraries under python-gssapi read.
May touch: the cache directory, the directory it is given, ``mvn``/``javac``/``java``, and a
loopback TCP port (the KDC listens on 127.0.0.1 only, TCP only). Test secrets only.

Kafka's own tests run Kerby's ``MiniKdc``; this is the same KDC behind a smaller main.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from kafka_actors.testing import jars as _jars
from kafka_actors.testing.broker import KafkaLaunchError, _java
from kafka_actors.testing.processes import pdeathsig_prefix, register, unregister

__all__ = [
    "KERBY_VERSION",
    "TestKdc",
    "broker_gssapi_args",
    "resolve_kerby",
]

KERBY_VERSION = "2.1.0"
MAIN_CLASS = "KafkaActorsKdc"
DEFAULT_REALM = "KAFKA-ACTORS.TEST"
#: The broker's service name (``sasl.kerberos.service.name``).
SERVICE_NAME = "kafka"

_SOURCE = """\
import java.io.File;
import java.net.ServerSocket;
import org.apache.kerby.kerberos.kerb.server.SimpleKdcServer;

// args: workDir realm principal... ; prints "KDC READY <port>" once every keytab is written,
// then serves until stdin closes or the process is killed.
public final class KafkaActorsKdc {
    public static void main(String[] args) throws Exception {
        File dir = new File(args[0]);
        String realm = args[1];
        int port;
        try (ServerSocket probe = new ServerSocket(0, 1,
                java.net.InetAddress.getByName("127.0.0.1"))) {
            port = probe.getLocalPort();
        }
        SimpleKdcServer kdc = new SimpleKdcServer();
        kdc.setWorkDir(dir);
        kdc.setKdcHost("127.0.0.1");
        kdc.setKdcRealm(realm);
        kdc.setAllowUdp(false);
        kdc.setAllowTcp(true);
        kdc.setKdcTcpPort(port);
        kdc.init();
        kdc.start();
        for (int i = 2; i < args.length; i++) {
            String principal = args[i];
            kdc.createPrincipal(principal, java.util.UUID.randomUUID().toString());
            String file = principal.replace('/', '_') + ".keytab";
            kdc.getKadmin().exportKeytab(new File(dir, file), principal + "@" + realm);
        }
        System.out.println("KDC READY " + port);
        System.out.flush();
        while (System.in.read() >= 0) { }
        kdc.stop();
        System.exit(0);
    }
}
"""


@dataclass(frozen=True)
class KerbyJars:
    directory: Path
    classpath: tuple[Path, ...]

    @property
    def cp(self) -> str:
        return os.pathsep.join(str(p) for p in self.classpath)


def resolve_kerby(version: str = KERBY_VERSION) -> KerbyJars:
    """Kerby's ``kerb-simplekdc`` and its runtime dependencies (resolved once, cached) plus
    the compiled main (its class directory is the classpath's first entry)."""
    root = _jars.cache_root()
    directory = root / f"kerby-{version}"
    stamp = directory / "resolved.json"
    digest = hashlib.sha256(_SOURCE.encode()).hexdigest()[:16]
    classes = directory / f"main-{digest}"

    def load() -> KerbyJars | None:
        try:
            names = json.loads(stamp.read_text())["jars"]
        except (OSError, ValueError, KeyError):
            return None
        paths = tuple(directory / "jars" / n for n in names)
        if not all(p.is_file() for p in paths) or not (classes / f"{MAIN_CLASS}.class").exists():
            return None
        return KerbyJars(directory, (classes, *paths))

    found = load()
    if found is not None:
        return found
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        found = load()
        if found is not None:
            return found
        if not stamp.exists():
            pom = directory / "pom.xml"
            pom.write_text(
                _jars._pom("kerby", [_jars._dep("org.apache.kerby", "kerb-simplekdc", version)])
            )
            _jars._run_mvn(pom, directory / "jars", _jars.maven_repo())
            names = sorted(p.name for p in (directory / "jars").glob("*.jar"))
            stamp.write_text(json.dumps({"version": version, "jars": names}))
        names = json.loads(stamp.read_text())["jars"]
        cp = os.pathsep.join(str(directory / "jars" / n) for n in names)
        scratch = Path(tempfile.mkdtemp(prefix="build-", dir=directory))
        try:
            source = scratch / f"{MAIN_CLASS}.java"
            source.write_text(_SOURCE)
            javac = str(Path(_java()).with_name("javac"))
            if not Path(javac).exists():
                javac = shutil.which("javac") or javac
            done = subprocess.run(
                [javac, "-cp", cp, "-d", str(scratch), str(source)],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if done.returncode != 0:
                raise KafkaLaunchError(f"javac failed on the KDC main:\n{done.stderr[-3000:]}")
            source.unlink()
            shutil.rmtree(classes, ignore_errors=True)
            scratch.rename(classes)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    found = load()
    if found is None:
        raise KafkaLaunchError(f"Kerby {version}: resolution left no usable stamp")
    return found


def _krb5_conf(realm: str, port: int) -> str:
    # TCP only (udp_preference_limit = 1) on a fixed loopback address; no DNS and no reverse
    # lookups, so the service principal is exactly service/<host as connected>.
    return (
        "[libdefaults]\n"
        f"  default_realm = {realm}\n"
        "  udp_preference_limit = 1\n"
        "  dns_lookup_kdc = false\n"
        "  dns_lookup_realm = false\n"
        "  dns_canonicalize_hostname = false\n"
        "  rdns = false\n"
        "  ignore_acceptor_hostname = false\n"
        "  forwardable = false\n"
        "  ticket_lifetime = 24h\n"
        "[realms]\n"
        f"  {realm} = {{\n"
        f"    kdc = 127.0.0.1:{port}\n"
        "  }\n"
        "[domain_realm]\n"
        f"  localhost = {realm}\n"
        f"  127.0.0.1 = {realm}\n"
    )


class TestKdc:
    """A Kerby KDC on 127.0.0.1 (TCP) with ``principals`` (names without the realm, e.g.
    ``kafka/127.0.0.1`` and ``client``), each with a random key exported to its own keytab.

    Use as a context manager, or :meth:`start` and :meth:`stop` (the process is stopped by its
    PID, also when :meth:`start` fails part way).
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        directory: Path,
        principals: tuple[str, ...],
        *,
        realm: str = DEFAULT_REALM,
        start_timeout: float = 120.0,
    ) -> None:
        self.directory = Path(directory)
        self.principals = principals
        self.realm = realm
        self.start_timeout = start_timeout
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._lines: list[str] = []

    @property
    def krb5_conf(self) -> Path:
        # Not krb5.conf: Kerby writes (and removes) a file of that name in its work directory.
        return self.directory / "kafka-actors-krb5.conf"

    def keytab(self, principal: str) -> Path:
        """The keytab file of ``principal`` (as given to the constructor)."""
        return self.directory / (principal.replace("/", "_") + ".keytab")

    def principal(self, name: str) -> str:
        """``name@REALM``."""
        return f"{name}@{self.realm}"

    def start(self) -> TestKdc:
        kerby = resolve_kerby()
        self.directory.mkdir(parents=True, exist_ok=True)
        cmd = [
            *pdeathsig_prefix(),
            _java(),
            "-Xmx96m",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-cp",
            kerby.cp,
            MAIN_CLASS,
            str(self.directory),
            self.realm,
            *self.principals,
        ]
        proc: subprocess.Popen[bytes] = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=self.directory,
            start_new_session=True,
        )
        self.process = proc
        register(proc)
        ready = threading.Event()

        def read() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip()
                self._lines.append(line)
                if line.startswith("KDC READY "):
                    self.port = int(line.split()[2])
                    ready.set()
            ready.set()

        threading.Thread(target=read, name="kdc-output", daemon=True).start()
        try:
            deadline = time.monotonic() + self.start_timeout
            while not ready.wait(0.2):
                if time.monotonic() > deadline:
                    raise KafkaLaunchError("the KDC did not start in time:\n" + self.output())
            if self.port == 0:
                raise KafkaLaunchError(f"the KDC exited with {proc.poll()}:\n{self.output()}")
            self.krb5_conf.write_text(_krb5_conf(self.realm, self.port))
        except BaseException:
            self.stop()
            raise
        return self

    def output(self) -> str:
        return "\n".join(self._lines[-60:])

    def stop(self) -> None:
        proc = self.process
        if proc is None:
            return
        self.process = None
        try:
            if proc.poll() is None:
                try:
                    assert proc.stdin is not None
                    proc.stdin.close()  # the main stops the KDC when stdin closes
                    proc.wait(timeout=10)
                except (OSError, subprocess.TimeoutExpired):
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
        finally:
            unregister(proc)

    def __enter__(self) -> TestKdc:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def broker_gssapi_args(kdc: TestKdc, listener: str, service_principal: str) -> dict[str, object]:
    """``broker_config`` and ``jvm_options`` for a broker whose listener ``listener`` (a
    SASL listener with GSSAPI enabled) accepts Kerberos as ``service_principal`` (e.g.
    ``kafka/127.0.0.1``) from ``kdc``."""
    prefix = f"listener.name.{listener.lower()}.gssapi."
    jaas = (
        "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
        f'keyTab="{kdc.keytab(service_principal)}" '
        f'principal="{kdc.principal(service_principal)}";'
    )
    return {
        "broker_config": {
            prefix + "sasl.jaas.config": jaas,
            "sasl.kerberos.service.name": SERVICE_NAME,
        },
        "jvm_options": (
            f"-Djava.security.krb5.conf={kdc.krb5_conf}",
            "-Dsun.security.krb5.disableReferrals=true",
        ),
    }
