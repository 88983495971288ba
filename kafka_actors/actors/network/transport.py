"""One broker socket as the NetworkActor drives it (:class:`Transport`), and host name resolution.

Owns: a non-blocking socket, optionally under TLS
(:class:`~kafka_actors.protocol.connection.tls.TlsChannel`), and the bytes not written yet; the
resolver signature and the system resolver (``getaddrinfo``; called on the resolver threads, never
on the actor's). May touch: the socket it is given, ``socket`` name resolution.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from kafka_actors.errors import DisconnectedError, KafkaError

if TYPE_CHECKING:
    # (ssl is imported by the consumers that use it: security.protocol SSL or SASL_SSL)
    from kafka_actors.protocol.connection.tls import TlsChannel

__all__ = [
    "RECV_SIZE",
    "Resolver",
    "Transport",
    "canonical_name",
    "system_resolver",
]


RECV_SIZE: Final = 256 * 1024


#: ``resolver(host, port)``: getaddrinfo's list of (family, type, proto, canonname, sockaddr).
Resolver = Callable[[str, int], Sequence[tuple[Any, ...]]]


def system_resolver(host: str, port: int) -> Sequence[tuple[Any, ...]]:
    """``getaddrinfo`` for a TCP connection. An ASCII name (any address, most names) goes
    as bytes: given a str, ``getaddrinfo`` encodes it with the ``idna`` codec, whose first
    use imports ``unicodedata`` and ``stringprep`` (about 2.5 ms on the way to a first
    record); the bytes are what that codec makes of an ASCII name anyway."""
    name: str | bytes = host
    if host.isascii():
        name = host.encode("ascii")
    return socket.getaddrinfo(name, port, 0, socket.SOCK_STREAM, socket.IPPROTO_TCP)


def canonical_name(sockaddr: Any, fallback: str) -> str:
    """The canonical host name of an address (reverse lookup), ``fallback`` if none."""
    try:
        name = socket.getnameinfo(sockaddr, socket.NI_NAMEREQD)[0]
    except OSError:
        return fallback
    return name or fallback


class Transport:
    """One non-blocking socket, optionally under TLS; buffers what could not be written yet."""

    def __init__(self, sock: socket.socket, tls: TlsChannel | None) -> None:
        self.sock = sock
        self.tls = tls
        self.tcp_connected = False
        self.out = bytearray()
        self.registered_mask = 0

    @property
    def tls_done(self) -> bool:
        return self.tls is None or self.tls.handshake_complete

    def write(self, data: bytes) -> None:
        if not data:
            return
        if self.tls is not None:
            self.tls.write(data)
            self.out += self.tls.bytes_to_send()
        else:
            self.out += data

    def flush(self) -> None:
        """Write as much buffered output as the socket takes now."""
        if self.tls is not None and self.tls.wants_write:
            self.out += self.tls.bytes_to_send()
        while self.out:
            try:
                sent = self.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                raise DisconnectedError(f"Send failed: {exc}") from None
            del self.out[:sent]

    def receive(self) -> bytes | None:
        """Bytes from the socket (b"" if none now), or None at end of stream; under TLS
        the ciphertext goes into the channel and b"" is returned."""
        try:
            data = self.sock.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return b""
        except OSError as exc:
            raise DisconnectedError(f"Receive failed: {exc}") from None
        if not data:
            if self.tls is not None:
                self.tls.receive_eof()
            return None
        if self.tls is None:
            return data
        self.tls.receive(data)
        return b""

    def receive_into(self, buffer: memoryview) -> int | None:
        """Plaintext only: read into ``buffer``; the byte count (0 if none now), or None at
        end of stream."""
        try:
            n = self.sock.recv_into(buffer)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError as exc:
            raise DisconnectedError(f"Receive failed: {exc}") from None
        return n if n else None

    def close(self) -> None:
        if self.tls is not None:
            try:
                self.tls.close()
                self.out += self.tls.bytes_to_send()
                if self.out:
                    self.sock.send(self.out)
            except (OSError, KafkaError):
                pass
        try:
            self.sock.close()
        except OSError:
            pass
