"""Listener descriptions and test credentials for the testkit's Kafka clusters.

Owns: :class:`ListenerSpec` (an extra broker listener: name, security protocol, SASL
mechanisms), the test CA and broker certificate generated with the ``openssl`` CLI into a
cluster's own directory, and the librdkafka client configuration matching a listener.
May touch: the directory it is given, and the ``openssl`` executable. Test secrets only:
nothing here is fit for production use.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: OAUTHBEARER listeners validate JWTs: the test supplies the JWKS URL, expected audience and
#: issuer (broker_config) and allows the URL in the JVM (jvm_options); not in the default set.
#: GSSAPI listeners take their JAAS login (keytab, principal) and the JVM's krb5.conf from the
#: test (kafka_actors.testing.kerberos.broker_gssapi_args); not in the default set either.
LISTENER_SASL_MECHANISMS = (*SASL_MECHANISMS, "OAUTHBEARER", "GSSAPI")
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class ListenerSpec:
    """An extra client listener of every broker.

    ``name`` is the Kafka listener name (upper case, e.g. ``"SASL_PLAIN"``);
    ``security_protocol`` one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL;
    ``sasl_mechanisms`` the mechanisms enabled on it (SASL protocols only).
    """

    name: str
    security_protocol: str
    sasl_mechanisms: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name.upper() != self.name:
            raise ValueError(f"listener name must be an upper-case identifier: {self.name!r}")
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"unknown security protocol {self.security_protocol!r}")
        sasl = self.security_protocol.startswith("SASL_")
        if sasl and not self.sasl_mechanisms:
            raise ValueError(f"{self.name}: a SASL listener needs sasl_mechanisms")
        if not sasl and self.sasl_mechanisms:
            raise ValueError(f"{self.name}: sasl_mechanisms need a SASL security protocol")
        for m in self.sasl_mechanisms:
            if m not in LISTENER_SASL_MECHANISMS:
                raise ValueError(f"unsupported SASL mechanism {m!r}")

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")


@dataclass(frozen=True)
class TestCertificates:
    """PEM files of a throw-away CA and one broker certificate (CN/SAN 127.0.0.1, localhost)."""

    __test__ = False  # not a pytest test class

    directory: Path
    ca_cert: Path
    ca_key: Path
    broker_cert: Path
    broker_key: Path
    broker_keystore: Path  # unencrypted PKCS#8 key followed by the certificate chain


# Every security protocol and SASL mechanism the testkit supports, one listener each.
ALL_SECURE_LISTENERS: tuple[ListenerSpec, ...] = (
    ListenerSpec("SASL_PLAINTEXT", "SASL_PLAINTEXT", SASL_MECHANISMS),
    ListenerSpec("SSL", "SSL"),
    ListenerSpec("SASL_SSL", "SASL_SSL", SASL_MECHANISMS),
)


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise RuntimeError("the openssl executable is needed to make test certificates")
    proc = subprocess.run(
        [exe, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {proc.stderr[-2000:]}")


DEFAULT_CERTIFICATE_NAMES: tuple[str, ...] = ("IP:127.0.0.1", "DNS:localhost")


def make_certificates(
    directory: Path, days: int = 30, names: Sequence[str] = DEFAULT_CERTIFICATE_NAMES
) -> TestCertificates:
    """Generate a CA and a broker certificate signed by it into ``directory``; ``names`` are
    the certificate's subject alternative names (``IP:...`` / ``DNS:...``; the first is also
    its CN)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = directory / "ca.key", directory / "ca.pem"
    key, csr, cert = directory / "broker.key", directory / "broker.csr", directory / "broker.pem"
    ext = directory / "broker.ext"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
        "-out", str(ca_cert), "-days", str(days), "-subj", "/CN=kafka-actors test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
        "-subj", f"/CN={names[0].partition(':')[2]}",
        cwd=directory,
    )  # fmt: skip
    ext.write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        f"subjectAltName={','.join(names)}\n"
    )
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key),
        "-CAcreateserial", "-out", str(cert), "-days", str(days), "-extfile", str(ext),
        cwd=directory,
    )  # fmt: skip
    pkcs8 = directory / "broker.pkcs8.key"
    _openssl("pkcs8", "-topk8", "-nocrypt", "-in", str(key), "-out", str(pkcs8), cwd=directory)
    keystore = directory / "broker-keystore.pem"
    keystore.write_text(pkcs8.read_text() + cert.read_text() + ca_cert.read_text())
    return TestCertificates(directory, ca_cert, ca_key, cert, pkcs8, keystore)


def client_config(
    spec: ListenerSpec,
    bootstrap: str,
    *,
    user: str,
    password: str,
    mechanism: str | None = None,
    ca_path: Path | None = None,
) -> dict[str, str]:
    """Settings for a client of listener ``spec`` that both confluent-kafka (librdkafka) and
    kafka-actors' consumers accept (``sasl.username``/``sasl.password``, ``ssl.ca.location``)."""
    conf = {"bootstrap.servers": bootstrap, "security.protocol": spec.security_protocol}
    if spec.uses_sasl:
        mech = mechanism or spec.sasl_mechanisms[0]
        if mech not in spec.sasl_mechanisms:
            raise ValueError(f"{mech} is not enabled on listener {spec.name}")
        conf.update({"sasl.mechanism": mech, "sasl.username": user, "sasl.password": password})
    if spec.uses_ssl:
        if ca_path is None:
            raise ValueError("an SSL listener needs the CA path")
        conf["ssl.ca.location"] = str(ca_path)
    return conf
