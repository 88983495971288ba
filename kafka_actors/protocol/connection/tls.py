"""TLS for broker connections: the client ``SSLContext`` from Java-named settings, and a
sans-I/O TLS channel over memory BIOs that the network actor pumps through its own socket.

Owns: :func:`build_ssl_context` (``ssl.truststore.*``, ``ssl.keystore.*``, ``ssl.key.password``,
``ssl.endpoint.identification.algorithm``, ``ssl.protocol``, ``ssl.enabled.protocols``,
``ssl.cipher.suites``, ``ssl.context``; PEM and PKCS12 stores; TLS 1.2 minimum) and
:class:`TlsChannel` (``ssl.SSLObject`` over two ``ssl.MemoryBIO``: ciphertext in, ciphertext
out, plaintext both ways). May touch: config, errors, and the files the configuration names
(read only), plus one private temporary file while loading a keystore given as PEM strings or
PKCS12 (mode 0600, removed at once).
No sockets, no threads, no clock.

Errors: a bad setting raises :class:`ConfigError` naming its key (never a password or key
material); a failed TLS handshake (untrusted certificate, host name mismatch, the broker
refusing our certificate or our protocol versions) raises :class:`SslAuthenticationError`
(non-retriable, as Java's SslAuthenticationException); the peer closing or a corrupt TLS
stream raises a retriable :class:`KafkaConnectionError` / :class:`DisconnectedError`.

Usage (the connection owner moves bytes between the socket and the channel)::

    channel = TlsChannel(build_ssl_context(config), server_hostname=host)
    while not channel.handshake():            # SslAuthenticationError on failure
        sock.sendall(channel.bytes_to_send())
        channel.receive(sock.recv(65536))     # or channel.receive_eof() on b""
    sock.sendall(channel.bytes_to_send())     # the handshake's last flight
    channel.write(frame); sock.sendall(channel.bytes_to_send())
    channel.receive(sock.recv(65536)); plaintext = channel.read()
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from typing import Final, cast

from kafka_actors.config import ConsumerConfig, Password
from kafka_actors.errors import (
    ConfigError,
    DisconnectedError,
    KafkaConnectionError,
    KafkaError,
    SslAuthenticationError,
)

__all__ = ["TlsChannel", "build_ssl_context"]

_READ_CHUNK: Final = 64 * 1024
#: Alert reasons (OpenSSL) that mean the peer refused our identity or parameters: after a
#: TLS 1.3 handshake the broker's verdict on our certificate arrives with the first read.
_AUTH_ALERT_WORDS: Final = (
    "CERTIFICATE",
    "UNKNOWN_CA",
    "HANDSHAKE_FAILURE",
    "ACCESS_DENIED",
    "PROTOCOL_VERSION",
    "INSUFFICIENT_SECURITY",
    "UNRECOGNIZED_NAME",
)


class _EncryptedKeyWithoutPassword(Exception):
    """Raised from the key password callback when no ssl.key.password is set."""


def _describe(error: BaseException) -> str:
    """An OpenSSL error's reason, never the data it was parsing."""
    if isinstance(error, ssl.SSLError):
        reason = error.reason or ""
        library = error.library or ""
        if reason or library:
            return f"{library}: {reason}".strip(": ").lower().replace("_", " ")
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return type(error).__name__


# -- SSLContext from the configuration --------------------------------------------------------


def build_ssl_context(config: ConsumerConfig) -> ssl.SSLContext:
    """The client TLS context Kafka's DefaultSslEngineFactory would build from ``config``.

    * ``ssl.context``: a user-built ``ssl.SSLContext``, used as is (no other trust, identity,
      protocol or cipher setting may be given with it).
    * trust: ``ssl.truststore.location`` (a PEM file of CA certificates, or with
      ``ssl.truststore.type=PKCS12`` a PKCS12 store opened with ``ssl.truststore.password``) or
      ``ssl.truststore.certificates`` (PEM text); neither: the system's default CAs.
    * identity: ``ssl.keystore.location`` (PEM file with the private key and certificate
      chain, or a PKCS12 store with ``ssl.keystore.password``) or ``ssl.keystore.key`` +
      ``ssl.keystore.certificate.chain`` (PEM text); ``ssl.key.password`` decrypts an
      encrypted PEM key.
    * ``ssl.endpoint.identification.algorithm``: ``https`` (default) checks the broker's host
      name; ``""`` does not, but the certificate chain is still verified.
    * ``ssl.protocol`` caps the version (TLSv1.2 → TLS 1.2 only, as Java's ``TLSv1.2``
      context), ``ssl.enabled.protocols`` (default TLSv1.2,TLSv1.3) chooses among them.
    * ``ssl.cipher.suites``: IANA names as Java takes them (OpenSSL names are accepted too);
      TLS 1.2 suites restrict TLS 1.2; a list without TLS 1.3 suites disables TLS 1.3, one
      with only TLS 1.3 suites disables TLS 1.2. Python's ssl module cannot restrict the
      TLS 1.3 suites themselves, so a list naming only some of them is refused.
    """
    if config.ssl_context is not None:
        _check_no_other_ssl_settings(config)
        return cast(ssl.SSLContext, config.ssl_context)
    for kind in ("truststore", "keystore"):
        if getattr(config, f"ssl_{kind}_type") == "PKCS12":
            if getattr(config, f"ssl_{kind}_location") is None:
                raise ConfigError(
                    f"ssl.{kind}.type=PKCS12 needs ssl.{kind}.location",
                    key=f"ssl.{kind}.location",
                )
        elif getattr(config, f"ssl_{kind}_password") is not None:
            if kind == "truststore":
                message = "SSL trust store password cannot be specified for PEM format"
            else:
                message = (
                    "SSL key store password cannot be specified with PEM format, only key "
                    "password may be specified (ssl.key.password)"
                )
            raise ConfigError(message, key=f"ssl.{kind}.password")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.verify_mode = ssl.CERT_REQUIRED
    context.check_hostname = config.ssl_check_hostname
    _set_protocols(context, config)
    _load_trust(context, config)
    _load_identity(context, config)
    return context


_OTHER_SSL_KEYS: Final = (
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.truststore.password",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.protocol",
    "ssl.enabled.protocols",
    "ssl.cipher.suites",
    "ssl.endpoint.identification.algorithm",
)


def _check_no_other_ssl_settings(config: ConsumerConfig) -> None:
    for key in _OTHER_SSL_KEYS:
        if key in config.explicit_keys:
            raise ConfigError(
                f"{key} cannot be set together with ssl.context (configure the SSLContext)",
                key=key,
            )


_VERSIONS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
#: TLS 1.3 suites (IANA names, the same in OpenSSL); OpenSSL enables the first three.
_TLS13_SUITES: Final = (
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_128_CCM_SHA256",
    "TLS_AES_128_CCM_8_SHA256",
)
_KEY_EXCHANGES: Final = {
    "ECDHE_ECDSA": "ECDHE-ECDSA-",
    "ECDHE_RSA": "ECDHE-RSA-",
    "DHE_RSA": "DHE-RSA-",
    "RSA": "",
}
_BULK: Final = {
    "AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "CHACHA20_POLY1305_SHA256": "CHACHA20-POLY1305",
    "AES_128_CBC_SHA256": "AES128-SHA256",
    "AES_256_CBC_SHA384": "AES256-SHA384",
    "AES_128_CBC_SHA": "AES128-SHA",
    "AES_256_CBC_SHA": "AES256-SHA",
}


def openssl_cipher_name(name: str) -> str | None:
    """The OpenSSL name of a TLS 1.2 suite's IANA name (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``
    → ``ECDHE-RSA-AES128-GCM-SHA256``); None for a name this table does not know."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return None
    exchange, _, bulk = name[4:].partition("_WITH_")
    prefix, suffix = _KEY_EXCHANGES.get(exchange), _BULK.get(bulk)
    if prefix is None or suffix is None:
        return None
    if prefix == "" and suffix == "CHACHA20-POLY1305":
        return None
    return prefix + suffix


def _set_protocols(context: ssl.SSLContext, config: ConsumerConfig) -> None:
    enabled = sorted({_VERSIONS[p] for p in config.ssl_enabled_protocols})
    ceiling = ssl.TLSVersion.TLSv1_2 if config.ssl_protocol == "TLSv1.2" else None
    suites = config.ssl_cipher_suites
    if suites:
        tls12: list[str] = []
        tls13: list[str] = []
        for suite in suites:
            if suite in _TLS13_SUITES:
                tls13.append(suite)
                continue
            openssl_name = openssl_cipher_name(suite) or suite
            try:
                ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).set_ciphers(openssl_name)
            except ssl.SSLError:
                raise ConfigError(
                    f"Unknown or unavailable cipher suite {suite!r} in ssl.cipher.suites",
                    key="ssl.cipher.suites",
                ) from None
            tls12.append(openssl_name)
        defaults = set(_TLS13_SUITES[:3])
        if tls13 and not defaults <= set(tls13):
            raise ConfigError(
                "ssl.cipher.suites names only some TLS 1.3 suites; Python's ssl module cannot "
                f"restrict TLS 1.3 suites (list all of {', '.join(sorted(defaults))} or none)",
                key="ssl.cipher.suites",
            )
        if tls12:
            context.set_ciphers(":".join(tls12))
        else:
            enabled = [v for v in enabled if v is not ssl.TLSVersion.TLSv1_2]
        if not tls13:
            enabled = [v for v in enabled if v is not ssl.TLSVersion.TLSv1_3]
    if ceiling is not None:
        enabled = [v for v in enabled if v <= ceiling]
    if not enabled:
        raise ConfigError(
            "No TLS protocol version is left: ssl.protocol, ssl.enabled.protocols and "
            "ssl.cipher.suites exclude each other",
            key="ssl.enabled.protocols",
        )
    context.minimum_version = min(enabled)
    context.maximum_version = max(enabled)


def _load_trust(context: ssl.SSLContext, config: ConsumerConfig) -> None:
    location, certificates = config.ssl_truststore_location, config.ssl_truststore_certificates
    if location is not None and config.ssl_truststore_type == "PKCS12":
        _, _, certs = _read_pkcs12(location, config.ssl_truststore_password, "truststore")
        if not certs:
            raise ConfigError(
                f"The PKCS12 trust store {location!r} holds no certificates",
                key="ssl.truststore.location",
            )
        context.load_verify_locations(cadata="".join(certs))
    elif location is not None:
        key = "ssl.truststore.location"
        try:
            context.load_verify_locations(cafile=location)
        except (OSError, ValueError) as error:  # ssl.SSLError is an OSError
            raise ConfigError(
                f"Failed to load SSL trust store {location!r} ({key}): no valid PEM "
                f"certificates could be read ({_describe(error)})",
                key=key,
            ) from None
    elif certificates is not None:
        key = "ssl.truststore.certificates"
        try:
            context.load_verify_locations(cadata=certificates.value())
        except (OSError, ValueError) as error:
            raise ConfigError(
                f"Invalid {key}: no valid PEM certificates could be read ({_describe(error)})",
                key=key,
            ) from None
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)


def _load_identity(context: ssl.SSLContext, config: ConsumerConfig) -> None:
    location = config.ssl_keystore_location
    chain, private_key = config.ssl_keystore_certificate_chain, config.ssl_keystore_key
    key_password = config.ssl_key_password
    if location is not None and config.ssl_keystore_type == "PKCS12":
        key_pem, cert_pem, extra = _read_pkcs12(location, config.ssl_keystore_password, "keystore")
        if key_pem is None or cert_pem is None:
            raise ConfigError(
                f"The PKCS12 key store {location!r} holds no private key with its certificate",
                key="ssl.keystore.location",
            )
        _load_pem_strings(context, Password(cert_pem + "".join(extra)), Password(key_pem), None)
    elif location is not None:
        _load_cert_chain(context, location, key_password, key="ssl.keystore.location")
    elif chain is not None and private_key is not None:
        _load_pem_strings(context, chain, private_key, key_password)


def _load_pem_strings(
    context: ssl.SSLContext, chain: Password, private_key: Password, key_password: Password | None
) -> None:
    # ssl loads a certificate chain only from a file: write key + chain to a private temporary
    # file (mode 0600, in the user's temporary directory), load it, remove it at once.
    for text, key in (
        (private_key.value(), "ssl.keystore.key"),
        (chain.value(), "ssl.keystore.certificate.chain"),
    ):
        if "-----BEGIN" not in text:
            raise ConfigError(f"Invalid {key}: not PEM text", key=key)
    fd, path = tempfile.mkstemp(prefix="kafka-actors-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(private_key.value().strip() + "\n" + chain.value().strip() + "\n")
        _load_cert_chain(context, path, key_password, key="ssl.keystore.key")
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _read_pkcs12(
    location: str, password: Password | None, kind: str
) -> tuple[str | None, str | None, list[str]]:
    """A PKCS12 store's private key, certificate and other certificates as PEM text (the key
    unencrypted, in memory only). Needs the ``cryptography`` package."""
    key = f"ssl.{kind}.location"
    try:
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            NoEncryption,
            PrivateFormat,
            pkcs12,
        )
    except ImportError:
        raise ConfigError(
            f"ssl.{kind}.type=PKCS12 needs the cryptography package (the 'tls' extra)",
            key=f"ssl.{kind}.type",
        ) from None
    try:
        with open(location, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise ConfigError(f"SSL {kind} file {location!r} ({key}) not found", key=key) from None
    except OSError as error:
        raise ConfigError(
            f"Failed to read SSL {kind} ({key}): {_describe(error)}", key=key
        ) from None
    secret = password.value().encode("utf-8") if password is not None else None
    try:
        store = pkcs12.load_pkcs12(data, secret)
    except ValueError:
        raise ConfigError(
            f"Failed to open the PKCS12 {kind} {location!r}: wrong ssl.{kind}.password or "
            "not a PKCS12 file",
            key=f"ssl.{kind}.password",
        ) from None
    key_pem = cert_pem = None
    if store.key is not None:
        key_pem = store.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode(
            "ascii"
        )
    if store.cert is not None:
        cert_pem = store.cert.certificate.public_bytes(Encoding.PEM).decode("ascii")
    extra = [
        c.certificate.public_bytes(Encoding.PEM).decode("ascii") for c in store.additional_certs
    ]
    if store.key is None and cert_pem is not None:
        extra.insert(0, cert_pem)  # a trust store's single certificate
        cert_pem = None
    return key_pem, cert_pem, extra


def _has_encrypted_key(path: str) -> bool:
    """Whether the PEM file holds an encrypted private key (PKCS#8 or traditional form)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return False
    return "BEGIN ENCRYPTED PRIVATE KEY" in text or "Proc-Type: 4,ENCRYPTED" in text


def _load_cert_chain(
    context: ssl.SSLContext, path: str, key_password: Password | None, *, key: str
) -> None:
    def password() -> bytes:
        if key_password is None:
            # Without a callback OpenSSL would prompt on the terminal for the passphrase.
            raise _EncryptedKeyWithoutPassword
        return key_password.value().encode("utf-8")

    try:
        context.load_cert_chain(path, password=password)
    except _EncryptedKeyWithoutPassword:
        raise ConfigError(
            f"The private key in {key} is encrypted: set ssl.key.password", key="ssl.key.password"
        ) from None
    except FileNotFoundError:
        raise ConfigError(f"SSL key store file {path!r} ({key}) not found", key=key) from None
    except ssl.SSLError as error:
        reason = error.reason or ""
        if key_password is not None and "MISMATCH" not in reason and _has_encrypted_key(path):
            raise ConfigError(
                f"Failed to load the private key of {key}: wrong ssl.key.password "
                f"or corrupt key ({_describe(error)})",
                key="ssl.key.password",
            ) from None
        raise ConfigError(
            f"Failed to load SSL key store ({key}): it needs a PEM private key and its "
            f"certificate chain ({_describe(error)})",
            key=key,
        ) from None
    except OSError as error:
        raise ConfigError(
            f"Failed to read SSL key store ({key}): {_describe(error)}", key=key
        ) from None


# -- The sans-I/O channel ------------------------------------------------------------------------


class TlsChannel:
    """Client side of one TLS connection over memory BIOs: no socket inside.

    The owner feeds ciphertext from the socket with :meth:`receive` (and :meth:`receive_eof`
    when the socket reads EOF), sends what :meth:`bytes_to_send` returns, calls
    :meth:`handshake` until it returns True, then encrypts with :meth:`write` and decrypts with
    :meth:`read`. ``server_hostname`` is sent as SNI (unless it is an IP address) and checked
    against the certificate when the context checks host names. ``node`` is the error context.
    """

    def __init__(
        self,
        context: ssl.SSLContext,
        server_hostname: str,
        *,
        node: int | str | None = None,
    ) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(
            self._incoming, self._outgoing, server_side=False, server_hostname=server_hostname
        )
        self.server_hostname = server_hostname
        self.node: int | str | None = node
        self._handshake_complete = False
        self._closed = False
        self._pending_error: KafkaError | None = None
        self._app_data_seen = False
        #: True once the peer sent close_notify (or the socket reached EOF).
        self.peer_closed = False

    def __repr__(self) -> str:
        state = "established" if self._handshake_complete else "handshaking"
        if self._closed:
            state = "closed"
        return f"TlsChannel(server_hostname={self.server_hostname!r}, state={state})"

    # ---------------------------------------------------------------- bytes in / out

    def bytes_to_send(self) -> bytes:
        """All ciphertext waiting for the socket (empty when there is none)."""
        return self._outgoing.read()

    @property
    def wants_write(self) -> bool:
        """True when :meth:`bytes_to_send` would return something."""
        return self._outgoing.pending > 0

    def receive(self, data: bytes | bytearray | memoryview) -> None:
        """Ciphertext read from the socket (use :meth:`receive_eof` for EOF)."""
        if data:
            self._incoming.write(data)

    def receive_eof(self) -> None:
        """The socket reached EOF: no more ciphertext will come."""
        self._incoming.write_eof()

    # ---------------------------------------------------------------- handshake

    @property
    def handshake_complete(self) -> bool:
        return self._handshake_complete

    def handshake(self) -> bool:
        """Advance the handshake: True once complete, False while it needs more bytes.

        After each call, send :meth:`bytes_to_send` (also after it returns True, and also when
        it raises: the alert tells the broker why). Raises :class:`SslAuthenticationError`
        when the certificates do not verify or the peer refuses us, and
        :class:`DisconnectedError` when the peer closes during the handshake.
        """
        if self._handshake_complete:
            return True
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            return False
        except ssl.SSLCertVerificationError as error:
            raise SslAuthenticationError(
                f"SSL handshake with {self.server_hostname} failed: "
                f"{error.verify_message or _describe(error)}",
                node=self.node,
            ) from None
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
            raise DisconnectedError(
                f"Connection to {self.server_hostname} closed during the SSL handshake",
                node=self.node,
            ) from None
        except ssl.SSLError as error:
            raise SslAuthenticationError(
                f"SSL handshake with {self.server_hostname} failed: {_describe(error)}",
                node=self.node,
            ) from None
        self._handshake_complete = True
        return True

    @property
    def tls_version(self) -> str | None:
        return self._ssl.version()

    @property
    def cipher(self) -> str | None:
        found = self._ssl.cipher()
        return found[0] if found else None

    def peer_certificate(self) -> dict[str, object] | None:
        """The broker's verified certificate (``ssl.SSLObject.getpeercert`` form)."""
        cert = self._ssl.getpeercert()
        return dict(cert) if cert else None

    # ---------------------------------------------------------------- application data

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt ``data``; the ciphertext is then in :meth:`bytes_to_send`."""
        if not self._handshake_complete:
            raise KafkaConnectionError(
                "TLS application data written before the handshake completed", node=self.node
            )
        if self._closed:
            raise DisconnectedError(f"TLS channel to {self.server_hostname} closed", node=self.node)
        view = memoryview(data)
        while view:
            try:
                written = self._ssl.write(view)
            except ssl.SSLError as error:
                raise self._stream_error(error) from None
            view = view[written:]

    def read(self) -> bytes:
        """All plaintext the received ciphertext decrypts to (empty when none is complete).

        Sets :attr:`peer_closed` when the broker closed the TLS session. Raises
        :class:`SslAuthenticationError` when the broker refuses our certificate after a TLS
        1.3 handshake, :class:`KafkaConnectionError` on a corrupt stream or an unclean EOF.
        """
        if not self._handshake_complete:
            return b""
        if self._pending_error is not None:
            raise self._pending_error
        chunks: list[bytes] = []
        while not self.peer_closed:
            try:
                chunk = self._ssl.read(_READ_CHUNK)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.peer_closed = True
                break
            except ssl.SSLError as error:
                failure = self._stream_error(error)
                if chunks:
                    # Hand over what decrypted cleanly; the error is raised by the next call.
                    self._pending_error = failure
                    break
                raise failure from None
            if not chunk:
                self.peer_closed = True
                break
            self._app_data_seen = True
            chunks.append(chunk)
        return b"".join(chunks)

    @property
    def post_handshake(self) -> bool:
        """TLS 1.3 after our side of the handshake, before any application data arrived.

        The broker checks our certificate after our Finished message, so its refusal arrives
        in this phase (Java's ``POST_HANDSHAKE`` state): a TLS error now is an authentication
        failure. A connection reset in this phase most likely is one too; the owner may use
        this flag to report it so (Java reports a plain disconnect).
        """
        return (
            self._handshake_complete and not self._app_data_seen and self.tls_version == "TLSv1.3"
        )

    def _stream_error(self, error: ssl.SSLError) -> KafkaError:
        reason = error.reason or ""
        if isinstance(error, ssl.SSLEOFError):
            self.peer_closed = True
            return DisconnectedError(
                f"Connection to {self.server_hostname} closed without TLS close_notify",
                node=self.node,
            )
        if self.post_handshake:
            return SslAuthenticationError(
                f"Failed to process post-handshake messages from {self.server_hostname}: "
                f"{_describe(error)}",
                node=self.node,
            )
        if "ALERT" in reason and any(word in reason for word in _AUTH_ALERT_WORDS):
            return SslAuthenticationError(
                f"SSL connection to {self.server_hostname} refused: {_describe(error)}",
                node=self.node,
            )
        return KafkaConnectionError(
            f"TLS stream error on the connection to {self.server_hostname}: {_describe(error)}",
            node=self.node,
        )

    # ---------------------------------------------------------------- closing

    def close(self) -> None:
        """Start the TLS shutdown: queue close_notify in :meth:`bytes_to_send` (best effort).

        The owner may flush those bytes, then closes the socket; it need not wait for the
        broker's close_notify.
        """
        if self._closed:
            return
        self._closed = True
        if not self._handshake_complete:
            return
        with contextlib.suppress(ssl.SSLError, ValueError):
            self._ssl.unwrap()

    @property
    def closed(self) -> bool:
        return self._closed
