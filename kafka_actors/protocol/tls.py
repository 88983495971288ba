"""TLS for broker connections: the client ``SSLContext`` from Java-named settings, and a
sans-I/O TLS channel over memory BIOs that the network actor pumps through its own socket.

Owns: :func:`build_ssl_context` (``ssl.truststore.*``, ``ssl.keystore.*``, ``ssl.key.password``,
``ssl.endpoint.identification.algorithm``; PEM only; TLS 1.2 minimum) and :class:`TlsChannel`
(``ssl.SSLObject`` over two ``ssl.MemoryBIO``: ciphertext in, ciphertext out, plaintext both
ways). May touch: config, errors, and the files the configuration names (read only), plus one
private temporary file while loading a keystore given as PEM strings (removed at once).
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
from typing import Final

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

    * trust: ``ssl.truststore.location`` (a PEM file of CA certificates) or
      ``ssl.truststore.certificates`` (PEM text); neither: the system's default CAs.
    * identity: ``ssl.keystore.location`` (PEM file with the private key and certificate
      chain) or ``ssl.keystore.key`` + ``ssl.keystore.certificate.chain`` (PEM text);
      ``ssl.key.password`` decrypts an encrypted key.
    * ``ssl.endpoint.identification.algorithm``: ``https`` (default) checks the broker's host
      name; ``""`` does not, but the certificate chain is still verified.
    * TLS 1.2 and 1.3 only (Java: ``ssl.enabled.protocols=TLSv1.2,TLSv1.3``).
    """
    if config.ssl_truststore_password is not None:
        raise ConfigError(
            "SSL trust store password cannot be specified for PEM format",
            key="ssl.truststore.password",
        )
    if config.ssl_keystore_password is not None:
        raise ConfigError(
            "SSL key store password cannot be specified with PEM format, only key password "
            "may be specified (ssl.key.password)",
            key="ssl.keystore.password",
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = ssl.CERT_REQUIRED
    context.check_hostname = config.ssl_check_hostname
    _load_trust(context, config)
    _load_identity(context, config)
    return context


def _load_trust(context: ssl.SSLContext, config: ConsumerConfig) -> None:
    location, certificates = config.ssl_truststore_location, config.ssl_truststore_certificates
    if location is not None:
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
    if location is not None:
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
