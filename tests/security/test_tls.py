"""build_ssl_context and the sans-I/O TlsChannel against a local Python TLS server.

Certificates come from the testkit's ``make_certificates`` (a CA and a certificate for
127.0.0.1/localhost usable for server and client authentication). The server is a blocking
``ssl`` socket in a thread; the client side is a plain socket pumped through TlsChannel.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import (
    AuthenticationError,
    ConfigError,
    DisconnectedError,
    KafkaConnectionError,
    SslAuthenticationError,
)
from kafka_actors.protocol.connection.tls import TlsChannel, build_ssl_context
from kafka_actors.testing.security import TestCertificates, make_certificates

KEY_PASSWORD = "key-pass-SECRET-7"
TIMEOUT = 30.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    return make_certificates(tmp_path_factory.mktemp("tls-ca"))


@pytest.fixture(scope="module")
def other_certs(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    """A second, unrelated CA (and a certificate it signed)."""
    return make_certificates(tmp_path_factory.mktemp("tls-other-ca"))


@pytest.fixture(scope="module")
def encrypted_keystore(certs: TestCertificates, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The client key encrypted with KEY_PASSWORD (PKCS#8), followed by its certificate."""
    directory = tmp_path_factory.mktemp("tls-enc")
    key = directory / "client.enc.key"
    subprocess.run(
        ["openssl", "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", str(certs.broker_key),
         "-out", str(key), "-passout", f"pass:{KEY_PASSWORD}"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    keystore = directory / "client-keystore.pem"
    keystore.write_text(key.read_text() + certs.broker_cert.read_text())
    return keystore


def config(**settings: object) -> ConsumerConfig:
    return ConsumerConfig.from_dict(
        {"bootstrap.servers": "localhost:9093", "security.protocol": "SSL", **settings}
    )


# -- A blocking TLS echo server in a thread --------------------------------------------------------


@dataclass
class EchoServer:
    context: ssl.SSLContext
    listener: socket.socket = field(init=False)
    thread: threading.Thread = field(init=False)
    error: BaseException | None = None
    peer_cert: dict[str, object] | None = None
    saw_eof: bool = False
    close_after: int | None = None  # close the TLS session after echoing this many bytes

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(TIMEOUT)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        port: int = self.listener.getsockname()[1]
        return port

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
            conn.settimeout(TIMEOUT)
            with self.context.wrap_socket(conn, server_side=True) as tls:
                cert = tls.getpeercert()
                self.peer_cert = dict(cert) if cert else None
                echoed = 0
                while True:
                    data = tls.recv(65536)
                    if not data:
                        self.saw_eof = True
                        break
                    tls.sendall(data)
                    echoed += len(data)
                    if self.close_after is not None and echoed >= self.close_after:
                        tls.unwrap()
                        break
        except BaseException as error:  # reported to the test
            self.error = error
        finally:
            self.listener.close()

    def join(self) -> None:
        self.thread.join(TIMEOUT)
        assert not self.thread.is_alive()


def server_context(
    certs: TestCertificates,
    *,
    client_ca: Path | None = None,
    max_version: ssl.TLSVersion | None = None,
) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.broker_keystore)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cafile=client_ca)
    if max_version is not None:
        context.maximum_version = max_version
    return context


@pytest.fixture
def server_factory() -> Iterator[list[EchoServer]]:
    servers: list[EchoServer] = []
    yield servers
    for server in servers:
        server.thread.join(TIMEOUT)


def start(servers: list[EchoServer], context: ssl.SSLContext, **kwargs: object) -> EchoServer:
    server = EchoServer(context, **kwargs)  # type: ignore[arg-type]
    servers.append(server)
    return server


# -- The client-side socket pump (what the network actor does, blocking here) ---------------------


def connect(port: int, channel: TlsChannel) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    try:
        while True:
            try:
                done = channel.handshake()
            finally:
                pending = channel.bytes_to_send()  # also the alert after a failure
                if pending:
                    sock.sendall(pending)
            if done:
                return sock
            feed(sock, channel)
    except BaseException:
        sock.close()
        raise


def feed(sock: socket.socket, channel: TlsChannel) -> None:
    data = sock.recv(65536)
    if data:
        channel.receive(data)
    else:
        channel.receive_eof()


def await_refusal(sock: socket.socket, channel: TlsChannel) -> None:
    """Read until the channel raises (the broker's alert) or the connection ends."""
    while True:
        feed(sock, channel)
        assert channel.read() == b""


def echo(sock: socket.socket, channel: TlsChannel, payload: bytes) -> bytes:
    channel.write(payload)
    sock.sendall(channel.bytes_to_send())
    received = bytearray()
    while len(received) < len(payload):
        feed(sock, channel)
        received += channel.read()
    return bytes(received)


# -- Handshake and application data ------------------------------------------------------------


@pytest.mark.parametrize("hostname", ["localhost", "127.0.0.1"])
def test_handshake_and_echo(
    certs: TestCertificates, server_factory: list[EchoServer], hostname: str
) -> None:
    server = start(server_factory, server_context(certs))
    context = build_ssl_context(config(**{"ssl.truststore.location": str(certs.ca_cert)}))
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    channel = TlsChannel(context, hostname, node=1)
    assert not channel.handshake_complete
    sock = connect(server.port, channel)
    assert channel.handshake_complete and channel.handshake()
    assert channel.tls_version in ("TLSv1.2", "TLSv1.3") and channel.cipher
    peer = channel.peer_certificate()
    assert peer is not None and ("IP Address", "127.0.0.1") in peer["subjectAltName"]
    assert echo(sock, channel, b"hello kafka") == b"hello kafka"
    big = os.urandom(1_000_000)  # several TLS records each way
    assert echo(sock, channel, big) == big
    channel.close()
    sock.sendall(channel.bytes_to_send())  # close_notify
    sock.close()
    server.join()
    assert server.error is None and server.saw_eof
    assert "established" not in repr(channel) and "closed" in repr(channel)


def test_handshake_over_tls12(certs: TestCertificates, server_factory: list[EchoServer]) -> None:
    server = start(server_factory, server_context(certs, max_version=ssl.TLSVersion.TLSv1_2))
    channel = TlsChannel(
        build_ssl_context(config(**{"ssl.truststore.location": str(certs.ca_cert)})), "localhost"
    )
    sock = connect(server.port, channel)
    assert channel.tls_version == "TLSv1.2"
    assert echo(sock, channel, b"x" * 40_000) == b"x" * 40_000
    sock.close()
    server.join()


def test_truststore_as_pem_string(
    certs: TestCertificates, server_factory: list[EchoServer]
) -> None:
    server = start(server_factory, server_context(certs))
    context = build_ssl_context(
        config(**{"ssl.truststore.certificates": certs.ca_cert.read_text()})
    )
    channel = TlsChannel(context, "localhost")
    sock = connect(server.port, channel)
    assert echo(sock, channel, b"ping") == b"ping"
    sock.close()
    server.join()


def test_minimum_protocol_is_tls12(certs: TestCertificates) -> None:
    context = build_ssl_context(config(**{"ssl.truststore.location": str(certs.ca_cert)}))
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_write_before_handshake_is_refused(certs: TestCertificates) -> None:
    context = build_ssl_context(config(**{"ssl.truststore.location": str(certs.ca_cert)}))
    channel = TlsChannel(context, "localhost")
    assert channel.read() == b""
    with pytest.raises(KafkaConnectionError):
        channel.write(b"too early")
    assert not channel.handshake()  # needs the server's answer
    assert channel.wants_write and channel.bytes_to_send().startswith(b"\x16\x03")  # ClientHello


def test_eof_during_handshake_is_a_retriable_disconnect(certs: TestCertificates) -> None:
    context = build_ssl_context(config(**{"ssl.truststore.location": str(certs.ca_cert)}))
    channel = TlsChannel(context, "localhost", node=2)
    assert not channel.handshake()
    channel.bytes_to_send()
    channel.receive_eof()  # the broker closed before answering the ClientHello
    with pytest.raises(DisconnectedError) as info:
        channel.handshake()
    assert info.value.retriable and info.value.node == 2


def test_peer_close_notify_is_seen(
    certs: TestCertificates, server_factory: list[EchoServer]
) -> None:
    server = start(server_factory, server_context(certs), close_after=5)
    channel = TlsChannel(
        build_ssl_context(config(**{"ssl.truststore.location": str(certs.ca_cert)})), "localhost"
    )
    sock = connect(server.port, channel)
    assert echo(sock, channel, b"12345") == b"12345"
    while not channel.peer_closed:
        feed(sock, channel)
        assert channel.read() == b""
    channel.close()  # answer the broker's close_notify
    sock.sendall(channel.bytes_to_send())
    sock.close()
    server.join()
    assert server.error is None


def test_unclean_eof_is_a_disconnect(
    certs: TestCertificates, server_factory: list[EchoServer]
) -> None:
    server = start(server_factory, server_context(certs))
    channel = TlsChannel(
        build_ssl_context(config(**{"ssl.truststore.location": str(certs.ca_cert)})), "localhost"
    )
    sock = connect(server.port, channel)
    channel.receive_eof()  # as if the socket read EOF without close_notify
    with pytest.raises(DisconnectedError) as info:
        channel.read()
    assert info.value.retriable
    sock.close()
    server.join()


def test_non_blocking_selector_pump(
    certs: TestCertificates, server_factory: list[EchoServer]
) -> None:
    """The network actor's way: a non-blocking socket, a selector, partial sends kept."""
    server = start(server_factory, server_context(certs))
    channel = TlsChannel(
        build_ssl_context(config(**{"ssl.truststore.location": str(certs.ca_cert)})), "localhost"
    )
    sock = socket.socket()
    sock.setblocking(False)
    assert sock.connect_ex(("127.0.0.1", server.port)) in (0, errno.EINPROGRESS)
    payload = os.urandom(3_000_000)
    outgoing = bytearray()
    received = bytearray()
    sent_payload = False
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
        deadline = time.monotonic() + TIMEOUT
        while len(received) < len(payload):
            assert time.monotonic() < deadline, "pump stalled"
            if channel.handshake() and not sent_payload:
                channel.write(payload)
                sent_payload = True
            outgoing += channel.bytes_to_send()
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if outgoing else 0)
            selector.modify(sock, events)
            for _key, ready in selector.select(timeout=1.0):
                if ready & selectors.EVENT_WRITE and outgoing:
                    try:
                        sent = sock.send(outgoing)
                    except BlockingIOError:
                        sent = 0
                    del outgoing[:sent]
                if ready & selectors.EVENT_READ:
                    try:
                        data = sock.recv(65536)
                    except BlockingIOError:
                        continue
                    if data:
                        channel.receive(data)
                    else:
                        channel.receive_eof()
                    received += channel.read()
    assert bytes(received) == payload
    sock.close()
    server.join()


# -- Verification failures ---------------------------------------------------------------------


def test_wrong_ca_is_an_ssl_authentication_error(
    certs: TestCertificates, other_certs: TestCertificates, server_factory: list[EchoServer]
) -> None:
    server = start(server_factory, server_context(certs))
    context = build_ssl_context(config(**{"ssl.truststore.location": str(other_certs.ca_cert)}))
    channel = TlsChannel(context, "localhost", node=7)
    with pytest.raises(SslAuthenticationError) as info:
        connect(server.port, channel)
    error = info.value
    assert isinstance(error, AuthenticationError) and not error.retriable
    assert "certificate verify failed" in str(error) or "self-signed" in str(error)
    assert error.node == 7
    server.join()
    assert isinstance(server.error, ssl.SSLError)  # the server got our alert


def test_system_trust_does_not_trust_the_test_ca(
    certs: TestCertificates, server_factory: list[EchoServer]
) -> None:
    server = start(server_factory, server_context(certs))
    channel = TlsChannel(build_ssl_context(config()), "localhost")
    with pytest.raises(SslAuthenticationError):
        connect(server.port, channel)
    server.join()


def test_wrong_hostname_fails_with_verification_on(
    certs: TestCertificates, server_factory: list[EchoServer]
) -> None:
    server = start(server_factory, server_context(certs))
    context = build_ssl_context(config(**{"ssl.truststore.location": str(certs.ca_cert)}))
    channel = TlsChannel(context, "broker.example.com")
    with pytest.raises(SslAuthenticationError, match=r"(?i)hostname|match"):
        connect(server.port, channel)
    server.join()


def test_wrong_hostname_works_with_verification_off(
    certs: TestCertificates, server_factory: list[EchoServer]
) -> None:
    server = start(server_factory, server_context(certs))
    context = build_ssl_context(
        config(
            **{
                "ssl.truststore.location": str(certs.ca_cert),
                "ssl.endpoint.identification.algorithm": "",
            }
        )
    )
    assert not context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    channel = TlsChannel(context, "broker.example.com")
    sock = connect(server.port, channel)
    assert echo(sock, channel, b"no hostname check") == b"no hostname check"
    sock.close()
    server.join()


def test_verification_off_still_verifies_the_chain(
    certs: TestCertificates, other_certs: TestCertificates, server_factory: list[EchoServer]
) -> None:
    server = start(server_factory, server_context(certs))
    context = build_ssl_context(
        config(
            **{
                "ssl.truststore.location": str(other_certs.ca_cert),
                "ssl.endpoint.identification.algorithm": "",
            }
        )
    )
    with pytest.raises(SslAuthenticationError):
        connect(server.port, TlsChannel(context, "broker.example.com"))
    server.join()


# -- Mutual TLS --------------------------------------------------------------------------------


@pytest.mark.parametrize("max_version", [None, ssl.TLSVersion.TLSv1_2])
def test_mutual_tls_with_keystore_file(
    certs: TestCertificates, server_factory: list[EchoServer], max_version: ssl.TLSVersion | None
) -> None:
    server = start(
        server_factory, server_context(certs, client_ca=certs.ca_cert, max_version=max_version)
    )
    context = build_ssl_context(
        config(
            **{
                "ssl.truststore.location": str(certs.ca_cert),
                "ssl.keystore.location": str(certs.broker_keystore),
            }
        )
    )
    channel = TlsChannel(context, "localhost")
    sock = connect(server.port, channel)
    assert echo(sock, channel, b"mutual") == b"mutual"
    sock.close()
    server.join()
    assert server.error is None
    assert server.peer_cert is not None
    assert ("IP Address", "127.0.0.1") in server.peer_cert["subjectAltName"]  # type: ignore[operator]


def test_mutual_tls_with_pem_strings_leaves_no_temporary_file(
    certs: TestCertificates,
    server_factory: list[EchoServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    server = start(server_factory, server_context(certs, client_ca=certs.ca_cert))
    context = build_ssl_context(
        config(
            **{
                "ssl.truststore.certificates": certs.ca_cert.read_text(),
                "ssl.keystore.key": certs.broker_key.read_text(),
                "ssl.keystore.certificate.chain": certs.broker_cert.read_text()
                + certs.ca_cert.read_text(),
            }
        )
    )
    assert list(tmp_path.iterdir()) == []
    channel = TlsChannel(context, "localhost")
    sock = connect(server.port, channel)
    assert echo(sock, channel, b"from strings") == b"from strings"
    sock.close()
    server.join()
    assert server.error is None and server.peer_cert is not None


def test_mutual_tls_with_encrypted_key(
    certs: TestCertificates, server_factory: list[EchoServer], encrypted_keystore: Path
) -> None:
    server = start(server_factory, server_context(certs, client_ca=certs.ca_cert))
    context = build_ssl_context(
        config(
            **{
                "ssl.truststore.location": str(certs.ca_cert),
                "ssl.keystore.location": str(encrypted_keystore),
                "ssl.key.password": KEY_PASSWORD,
            }
        )
    )
    channel = TlsChannel(context, "localhost")
    sock = connect(server.port, channel)
    assert echo(sock, channel, b"encrypted key") == b"encrypted key"
    sock.close()
    server.join()
    assert server.error is None and server.peer_cert is not None


@pytest.mark.parametrize("max_version", [None, ssl.TLSVersion.TLSv1_2])
def test_mutual_tls_without_client_certificate_is_refused(
    certs: TestCertificates, server_factory: list[EchoServer], max_version: ssl.TLSVersion | None
) -> None:
    server = start(
        server_factory, server_context(certs, client_ca=certs.ca_cert, max_version=max_version)
    )
    context = build_ssl_context(config(**{"ssl.truststore.location": str(certs.ca_cert)}))
    channel = TlsChannel(context, "localhost")
    # TLS 1.2 fails in the handshake; TLS 1.3 completes the client side and the broker's
    # refusal arrives with the first read.
    with pytest.raises(SslAuthenticationError) as info:
        sock = connect(server.port, channel)
        try:
            await_refusal(sock, channel)
        finally:
            sock.close()
    assert not info.value.retriable
    server.join()
    assert isinstance(server.error, ssl.SSLError)


def test_mutual_tls_with_certificate_of_another_ca_is_refused(
    certs: TestCertificates, other_certs: TestCertificates, server_factory: list[EchoServer]
) -> None:
    server = start(server_factory, server_context(certs, client_ca=certs.ca_cert))
    context = build_ssl_context(
        config(
            **{
                "ssl.truststore.location": str(certs.ca_cert),
                "ssl.keystore.location": str(other_certs.broker_keystore),
            }
        )
    )
    channel = TlsChannel(context, "localhost")
    with pytest.raises(SslAuthenticationError):
        sock = connect(server.port, channel)
        try:
            await_refusal(sock, channel)
        finally:
            sock.close()
    server.join()
    assert isinstance(server.error, ssl.SSLError)


# -- Configuration errors ----------------------------------------------------------------------


def test_missing_truststore_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        build_ssl_context(config(**{"ssl.truststore.location": str(tmp_path / "nope.pem")}))
    assert info.value.key == "ssl.truststore.location"


@pytest.mark.parametrize("content", ["", "not a certificate\n"])
def test_truststore_file_without_certificates(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.pem"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        build_ssl_context(config(**{"ssl.truststore.location": str(path)}))
    assert info.value.key == "ssl.truststore.location"


@pytest.mark.parametrize("content", ["garbage", "-----BEGIN CERTIFICATE-----\nAAAA\n"])
def test_truststore_string_without_certificates(content: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_ssl_context(config(**{"ssl.truststore.certificates": content}))
    assert info.value.key == "ssl.truststore.certificates"
    assert content not in str(info.value)


def test_missing_keystore_file(certs: TestCertificates, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        build_ssl_context(config(**{"ssl.keystore.location": str(tmp_path / "none.pem")}))
    assert info.value.key == "ssl.keystore.location"


def test_keystore_without_certificate(certs: TestCertificates) -> None:
    with pytest.raises(ConfigError) as info:
        build_ssl_context(config(**{"ssl.keystore.location": str(certs.broker_key)}))
    assert info.value.key == "ssl.keystore.location"


def test_keystore_key_not_matching_certificate(
    certs: TestCertificates, other_certs: TestCertificates
) -> None:
    with pytest.raises(ConfigError) as info:
        build_ssl_context(
            config(
                **{
                    "ssl.keystore.key": other_certs.broker_key.read_text(),
                    "ssl.keystore.certificate.chain": certs.broker_cert.read_text(),
                }
            )
        )
    assert info.value.key == "ssl.keystore.key"
    assert "mismatch" in str(info.value)


def test_keystore_strings_that_are_not_pem() -> None:
    with pytest.raises(ConfigError) as info:
        build_ssl_context(
            config(**{"ssl.keystore.key": "secret-ish", "ssl.keystore.certificate.chain": "x"})
        )
    assert info.value.key in ("ssl.keystore.key", "ssl.keystore.certificate.chain")
    assert "secret-ish" not in str(info.value)


def test_wrong_key_password(encrypted_keystore: Path) -> None:
    with pytest.raises(ConfigError) as info:
        build_ssl_context(
            config(
                **{
                    "ssl.keystore.location": str(encrypted_keystore),
                    "ssl.key.password": "not-the-password",
                }
            )
        )
    assert info.value.key == "ssl.key.password"
    assert "not-the-password" not in str(info.value) and "not-the-password" not in repr(info.value)


def test_encrypted_key_without_password_does_not_prompt(encrypted_keystore: Path) -> None:
    with pytest.raises(ConfigError) as info:
        build_ssl_context(config(**{"ssl.keystore.location": str(encrypted_keystore)}))
    assert info.value.key == "ssl.key.password"


def test_pem_store_passwords_are_refused_as_java_does(certs: TestCertificates) -> None:
    with pytest.raises(ConfigError) as info:
        build_ssl_context(
            config(
                **{
                    "ssl.truststore.location": str(certs.ca_cert),
                    "ssl.truststore.password": "x-SECRET",
                }
            )
        )
    assert info.value.key == "ssl.truststore.password" and "x-SECRET" not in str(info.value)
    with pytest.raises(ConfigError) as info:
        build_ssl_context(
            config(
                **{
                    "ssl.keystore.location": str(certs.broker_keystore),
                    "ssl.keystore.password": "y-SECRET",
                }
            )
        )
    assert info.value.key == "ssl.keystore.password" and "y-SECRET" not in str(info.value)


def test_key_material_never_in_errors(certs: TestCertificates) -> None:
    key_text = certs.broker_key.read_text()
    body = key_text.splitlines()[1]
    with pytest.raises(ConfigError) as info:
        build_ssl_context(
            config(**{"ssl.keystore.key": key_text, "ssl.keystore.certificate.chain": key_text})
        )
    assert body not in str(info.value) and body not in repr(info.value)
