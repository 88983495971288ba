"""The NetworkActor's sockets: name resolution, connecting, TLS, reading and writing.

Owns: :class:`Connector`, the socket side of every node's connection: host names resolved on a
small resolver thread pool (never on the actor thread), socket options, the non-blocking TCP
connect, the TLS handshake, reading (the bytes go to the node's connection state machine,
whose events go back to the NetworkActor through one callback) and writing, the selector
registrations, and closing a socket. Which node to connect, what a failure means and what is
failed or routed again are the NetworkActor's. May touch: sockets, ``selectors``, ``ssl``
(through the TLS channel), the inbox's selector, the metrics.
"""

from __future__ import annotations

import concurrent.futures
import errno
import itertools
import os
import selectors
import socket
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import pykka

from kafka_actors.actors.network.messages import Resolved
from kafka_actors.actors.network.nodes import Node
from kafka_actors.actors.network.transport import (
    RECV_SIZE,
    Resolver,
    Transport,
    canonical_name,
)
from kafka_actors.errors import DisconnectedError, KafkaConnectionError, KafkaError
from kafka_actors.metrics import ConsumerMetrics
from kafka_actors.protocol.connection.node import ConnectionSettings, Event

if TYPE_CHECKING:
    from kafka_actors.protocol.connection.tls import TlsChannel  # imported only for TLS

__all__ = ["Connector"]


class Connector:
    """The socket side of the NetworkActor's connections (module docstring).

    ``tell``: delivers a :class:`Resolved` answer to the actor (any thread); ``on_events``:
    what a node's connection state machine reported while reading (the actor acts on it).
    """

    def __init__(
        self,
        settings: ConnectionSettings,
        selector: selectors.BaseSelector,
        *,
        resolver: Resolver,
        canonical_bootstrap: bool,
        tls: Callable[[str, int], TlsChannel] | None,
        metrics: ConsumerMetrics | None,
        tell: Callable[[Resolved], None],
        on_events: Callable[[Node, Iterable[Event]], None],
    ) -> None:
        self._settings = settings
        self._selector = selector
        self._resolver = resolver
        self._canonical_bootstrap = canonical_bootstrap
        self._tls = tls
        self._metrics = metrics
        self._tell = tell
        self._on_events = on_events
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._tokens = itertools.count(1)

    def needs_resolving(self, node: Node) -> bool:
        """No resolved address left to try: the next attempt resolves the name first."""
        return node.addresses is None or node.address_index >= len(node.addresses)

    def resolve(self, node: Node) -> None:
        """Resolve the node's host name on a resolver thread; the answer comes as a
        :class:`Resolved` message (see :meth:`resolved`)."""
        node.resolving = token = next(self._tokens)
        host, port = node.address.host, node.address.port
        canonical = self._canonical_bootstrap and node.node_id < 0
        resolver, tell = self._resolver, self._tell

        def resolve() -> None:
            try:
                infos = resolver(host, port)
                entries = tuple(
                    (info, canonical_name(info[4], host) if canonical else host) for info in infos
                )
                answer = Resolved(node.node_id, token, entries)
            except OSError as exc:
                answer = Resolved(node.node_id, token, error=str(exc))
            except Exception as exc:  # a user resolver's bug: a failed attempt, not a hang
                answer = Resolved(node.node_id, token, error=repr(exc))
            try:
                tell(answer)
            except pykka.ActorDeadError:
                pass

        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=2, thread_name_prefix="kafka-actors-dns"
            )
        self._pool.submit(resolve)

    def resolved(self, node: Node, answer: Resolved) -> KafkaError | None:
        """Use the addresses of ``answer`` (the current attempt's) and open a socket to the
        first; the error that ends the attempt, if any."""
        node.resolving = 0
        host = node.address.host
        if answer.error is not None or not answer.addresses:
            why = f": {answer.error}" if answer.error else ""
            return KafkaConnectionError(f"Cannot resolve {host!r}{why}")
        node.addresses = list(answer.addresses)
        node.address_index = 0
        node.log.debug(
            "node_resolved", addresses=[str(info[4][0]) for info, _name in node.addresses]
        )
        return self.open_socket(node)

    def open_socket(self, node: Node) -> KafkaError | None:
        """Start a non-blocking connect to the node's next resolved address; the error that
        ends the attempt, if any."""
        assert node.addresses is not None
        info, server_name = node.addresses[node.address_index]
        node.address_index += 1
        family, kind, proto, _name, sockaddr = info
        try:
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            return KafkaConnectionError(f"Cannot create a socket: {exc}")
        sock.setblocking(False)
        settings = self._settings
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # send.buffer.bytes / receive.buffer.bytes (-1: the OS default), before connect
            # so the TCP window scale is negotiated for them (as Java's Selector does).
            if settings.send_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, settings.send_buffer_bytes)
            if settings.receive_buffer_bytes > 0:
                sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_RCVBUF, settings.receive_buffer_bytes
                )
            code = sock.connect_ex(sockaddr)
        except OSError as exc:
            code = exc.errno or errno.EIO
        if code not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
            sock.close()
            return KafkaConnectionError(f"Cannot connect to {node.address}: {_strerror(code)}")
        try:
            tls = self._tls(server_name, node.node_id) if self._tls is not None else None
        except KafkaError as exc:
            sock.close()
            return exc
        node.transport = Transport(sock, tls)
        if self._metrics is not None:
            self._metrics.connection_opened()
        self.update_interest(node)
        return None

    def socket_ready(self, node: Node, mask: int, now: float) -> None:
        """The selector says the node's socket is ready for ``mask``: finish the connect,
        the TLS handshake, read, write. Raises KafkaError when the connection is lost."""
        transport = node.transport
        assert transport is not None
        if not transport.tcp_connected:
            if not mask & selectors.EVENT_WRITE:
                return
            code = transport.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code != 0:
                raise KafkaConnectionError(f"Cannot connect to {node.address}: {_strerror(code)}")
            transport.tcp_connected = True
            if transport.tls is None:
                transport.write(node.conn.transport_ready(now))
            else:
                self._tls_handshake(node, transport, now)
        elif mask & selectors.EVENT_READ:
            tls = transport.tls
            data: bytes | None
            into = node.conn.read_buffer(RECV_SIZE) if tls is None else None
            if into is not None:
                # The rest of a large frame (a Fetch response), a quarter of it received:
                # read into its own buffer.
                with into:
                    n = transport.receive_into(into)
                if n:
                    node.conn.touch(now)
                    self._answered(node, transport, *node.conn.buffer_updated(n, now))
                data = None if n is None else b""  # None: end of stream, raised below
            else:
                data = transport.receive()
            if tls is not None:
                if not tls.handshake_complete:
                    if data is None:
                        raise DisconnectedError("Connection closed during the TLS handshake")
                    self._tls_handshake(node, transport, now)
                    data = b""
                else:
                    plain = tls.read()
                    if plain:
                        self._received(node, transport, plain, now)
                    if data is None or tls.peer_closed:
                        data = None
            if data is None:
                raise DisconnectedError("Connection closed by the broker")
            if data:
                self._received(node, transport, data, now)
        if node.transport is transport and transport.out:
            transport.flush()

    def _received(self, node: Node, transport: Transport, data: bytes, now: float) -> None:
        node.conn.touch(now)
        self._answered(node, transport, *node.conn.receive(data, now))

    def _answered(
        self, node: Node, transport: Transport, out: bytes, events: list[Event]
    ) -> None:
        transport.write(out)
        self._on_events(node, events)

    def _tls_handshake(self, node: Node, transport: Transport, now: float) -> None:
        tls = transport.tls
        assert tls is not None
        try:
            done = tls.handshake()
        finally:
            transport.out += tls.bytes_to_send()  # also the alert telling the broker why
        if done:
            node.log.debug("tls_established", version=tls.tls_version, cipher=tls.cipher)
            transport.write(node.conn.transport_ready(now))
            leftover = tls.read()
            if leftover:
                self._received(node, transport, leftover, now)

    def update_interest(self, node: Node) -> None:
        """Register the node's socket for what it waits for (connect, read, write)."""
        transport = node.transport
        if transport is None:
            return
        mask = selectors.EVENT_READ
        if not transport.tcp_connected or transport.out:
            mask |= selectors.EVENT_WRITE
        if not transport.tcp_connected:
            mask = selectors.EVENT_WRITE
        if mask == transport.registered_mask:
            return
        if transport.registered_mask:
            self._selector.modify(transport.sock, mask, node.node_id)
        else:
            self._selector.register(transport.sock, mask, node.node_id)
        transport.registered_mask = mask

    def drop_transport(self, node: Node) -> None:
        """Detach ``node``'s transport (if any) from the selector and close its socket (the
        idle close, the error close and the rebootstrap)."""
        transport, node.transport = node.transport, None
        if transport is None:
            return
        if transport.registered_mask:
            try:
                self._selector.unregister(transport.sock)
            except (KeyError, ValueError):
                pass
        transport.close()
        self.transport_closed()

    def transport_closed(self) -> None:
        """Count a closed connection (the shutdown closes sockets without unregistering)."""
        if self._metrics is not None:
            self._metrics.connection_closed()

    def close(self) -> None:
        """Stop the resolver threads (answers still coming are dropped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _strerror(code: int) -> str:
    """An errno as ``"Connection refused (ECONNREFUSED)"``."""
    return f"{os.strerror(code)} ({errno.errorcode.get(code, code)})"
