"""The NetworkActor's connections: nodes, addresses, DNS, sockets, TLS, and closing them.

Owns (as :class:`NetworkConnections`, a part of the NetworkActor; see :mod:`.state`): the node
registry (a :class:`~kafka_actors.protocol.connection.node.NodeConnection` per node, its address
and the addresses its name resolved to), connection attempts (host names resolved on a small
resolver thread pool, never on the actor thread), socket options, the TCP connect and the TLS
handshake, reading and writing, the selector registrations, idle closes, closing a node after
an error (its in-flight requests fail, requests for any node go back to be routed), the
connection event log and the "node unavailable" warnings. May touch: sockets, ``selectors``,
``ssl`` (through the TLS channel), the inbox's selector, the metrics.
"""

from __future__ import annotations

import concurrent.futures
import errno
import os
import selectors
import socket
from collections import deque
from typing import cast

import pykka

from kafka_actors.actors.network.messages import BOOTSTRAP_NODE, ConnectionEvent, Resolved, Send
from kafka_actors.actors.network.state import ALL_DOWN, NetworkBase, Node
from kafka_actors.actors.network.transport import Transport, canonical_name
from kafka_actors.config import BrokerAddress
from kafka_actors.errors import (
    AuthenticationError,
    DisconnectedError,
    KafkaConnectionError,
    KafkaError,
)
from kafka_actors.protocol.connection.node import ConnectionState, NodeConnection
from kafka_actors.protocol.messages import ANY_NODE

__all__ = ["NetworkConnections"]


class NetworkConnections(NetworkBase):
    """The connection part of the NetworkActor (module docstring)."""

    def _new_node(self, node_id: int, address: BrokerAddress) -> Node:
        conn = NodeConnection(node_id, self.settings, random=self._random, sasl=self._sasl)
        log = self._log.bind(node=node_id, address=str(address))
        return Node(node_id, address, conn, log)

    def _set_address(self, node_id: int, address: BrokerAddress) -> None:
        self._removed.discard(node_id)
        node = self._nodes.get(node_id)
        if node is None:
            node = self._nodes[node_id] = self._new_node(node_id, address)
            node.log.debug("node_learned")
            for pending in self._waiting.pop(node_id, ()):
                node.conn.enqueue(pending)
        if node.retired:  # named again before its last requests were answered
            node.retired = False
            node.log.info("node_restored")
        if node.address != address:
            node.log.info("node_address_changed", new_address=str(address))
            node.address = address
            node.addresses = None  # resolve the new name at the next attempt
            node.address_index = 0
            node.log = self._log.bind(node=node_id, address=str(address))

    def _record(
        self, node: Node, kind: str, error: KafkaError | None = None, at: float | None = None
    ) -> None:
        """Record a connection event; ``at`` is the clock reading the state change used (a
        failure's backoff runs from it), else now."""
        self._events.append(
            ConnectionEvent(
                node.node_id,
                kind,
                self._clock.monotonic() if at is None else at,
                None if error is None else str(error),
                node.conn.last_backoff
                if kind in ("connect_failed", "auth_failed", "disconnected")
                else None,
            )
        )
        states = self.connection_states
        if states is not None:
            states.record(
                node.node_id, str(node.address), kind, None if error is None else str(error)
            )

    def _connect(self, node: Node, now: float) -> None:
        conn = node.conn
        conn.start_connect(now)
        self._record(node, "connect", at=now)
        log = (
            node.log.info
            if not node.down_announced and conn.failed_attempts == 0
            else (node.log.debug)
        )
        log("node_connecting", attempt=conn.failed_attempts + 1)
        if node.addresses is None or node.address_index >= len(node.addresses):
            self._start_resolve(node)  # the connection goes on in _on_resolved
            return
        self._open_socket(node)

    def _start_resolve(self, node: Node) -> None:
        """Resolve the node's host name on a resolver thread (never on this one)."""
        node.resolving = token = next(self._seq) + 1
        host, port = node.address.host, node.address.port
        canonical = self._canonical_bootstrap and node.node_id < 0
        resolver, ref = self._resolver, self.actor_ref

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
                ref.tell(answer)
            except pykka.ActorDeadError:
                pass

        if self._resolver_pool is None:
            self._resolver_pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=2, thread_name_prefix="kafka-actors-dns"
            )
        self._resolver_pool.submit(resolve)

    def _on_resolved(self, answer: Resolved) -> None:
        node = self._nodes.get(answer.node)
        if (
            node is None
            or node.resolving != answer.token
            or node.conn.state is not ConnectionState.CONNECTING
            or node.transport is not None
        ):
            return  # an older attempt's answer (it timed out, or the node was forgotten)
        node.resolving = 0
        host = node.address.host
        if answer.error is not None or not answer.addresses:
            why = f": {answer.error}" if answer.error else ""
            self._close_node(node, KafkaConnectionError(f"Cannot resolve {host!r}{why}"))
            return
        node.addresses = list(answer.addresses)
        node.address_index = 0
        node.log.debug(
            "node_resolved", addresses=[str(info[4][0]) for info, _name in node.addresses]
        )
        self._open_socket(node)

    def _open_socket(self, node: Node) -> None:
        assert node.addresses is not None
        info, server_name = node.addresses[node.address_index]
        node.address_index += 1
        family, kind, proto, _name, sockaddr = info
        host = server_name
        try:
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            self._close_node(node, KafkaConnectionError(f"Cannot create a socket: {exc}"))
            return
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # send.buffer.bytes / receive.buffer.bytes (-1: the OS default), before connect
            # so the TCP window scale is negotiated for them (as Java's Selector does).
            if self.settings.send_buffer_bytes > 0:
                sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_SNDBUF, self.settings.send_buffer_bytes
                )
            if self.settings.receive_buffer_bytes > 0:
                sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_RCVBUF, self.settings.receive_buffer_bytes
                )
            code = sock.connect_ex(sockaddr)
        except OSError as exc:
            code = exc.errno or errno.EIO
        if code not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
            sock.close()
            self._close_node(
                node, KafkaConnectionError(f"Cannot connect to {node.address}: {_strerror(code)}")
            )
            return
        try:
            tls = self._tls(host, node.node_id) if self._tls is not None else None
        except KafkaError as exc:
            sock.close()
            self._close_node(node, exc)
            return
        node.transport = Transport(sock, tls)
        if self.metrics is not None:
            self.metrics.connection_opened()
        self._update_interest(node)

    def _transport_closed(self) -> None:
        if self.metrics is not None:
            self.metrics.connection_closed()

    def _socket_ready(self, node: Node, mask: int) -> None:
        transport = node.transport
        assert transport is not None
        now = self._clock.monotonic()
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
            data = transport.receive()
            tls = transport.tls
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
        out, events = node.conn.receive(data, now)
        transport.write(out)
        self._handle(node, events)

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

    def _update_interest(self, node: Node) -> None:
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
        selector = self._inbox.selector
        if transport.registered_mask:
            selector.modify(transport.sock, mask, node.node_id)
        else:
            selector.register(transport.sock, mask, node.node_id)
        transport.registered_mask = mask

    def _drop_transport(self, node: Node) -> None:
        """Detach ``node``'s transport (if any) from the selector and close its socket (the
        idle close, the error close and the rebootstrap)."""
        transport, node.transport = node.transport, None
        if transport is None:
            return
        if transport.registered_mask:
            try:
                self._inbox.selector.unregister(transport.sock)
            except (KeyError, ValueError):
                pass
        transport.close()
        self._transport_closed()

    def _close_idle(self, node: Node, now: float) -> None:
        """connections.max.idle.ms passed with nothing queued or in flight: close the
        connection; the next request for the node opens a new one (no backoff)."""
        self._drop_transport(node)
        idle_ms = round((now - node.conn.last_used) * 1000)
        node.conn.close_idle()
        self._record(node, "idle_closed")
        node.log.debug("node_idle_closed", idle_ms=idle_ms)

    def _retire(self, node: Node) -> None:
        """A newer Metadata response left ``node`` out (Java: a node not in the latest
        metadata is no connection candidate): requests for any node queued on it are routed
        again, requests for it fail with a retriable error, and it is forgotten (its
        connection closed) once its in-flight requests are answered or failed."""
        node.in_metadata = False
        self._removed.add(node.node_id)
        if node.retired:
            return
        node.retired = True
        error = DisconnectedError(
            f"Node {node.node_id} is not in the latest Metadata response", node=node.node_id
        )
        for pending in node.conn.take_queued():
            if cast(Send, pending.token).node in (ANY_NODE, BOOTSTRAP_NODE):
                self._unassigned.append(pending)
            else:
                self._fail(pending, error, node.node_id)
        self._record(node, "removed")
        node.log.info("node_removed", in_flight=node.conn.in_flight_count)
        self._forget_retired(node)

    def _forget_retired(self, node: Node) -> bool:
        """Forget a retired node with nothing in flight (True if it is gone)."""
        if not node.retired or node.conn.in_flight_count or node.conn.queued_count:
            return False
        if self._nodes.get(node.node_id) is node:
            self._drop_transport(node)
            node.conn.close(DisconnectedError(f"Node {node.node_id} removed", node=node.node_id))
            del self._nodes[node.node_id]
            self._unavailable.forget(node.node_id)
            node.log.debug("node_forgotten")
        return True

    def _close_node(self, node: Node, error: KafkaError) -> None:
        """Close ``node``'s transport because of ``error`` and fail what must fail."""
        if error.node is None:
            error.node = node.node_id
        self._drop_transport(node)
        conn = node.conn
        was = conn.state
        # One reading of the clock: the backoff runs from it, and the recorded event says so.
        lost_at = self._clock.monotonic()
        events = conn.connection_lost(error, lost_at)
        # Requests for "any node" queued here may go to another node now. A request for this
        # node fails at once with a retriable error, as Java's NetworkClientDelegate fails an
        # unsent request whose node's connection failed (checkDisconnects): its manager retries
        # it through its request state, or gives it up (a leave whose coordinator cannot be
        # reached ends, so close() does not wait for request.timeout.ms).
        for pending in conn.take_queued():
            if cast(Send, pending.token).node in (ANY_NODE, BOOTSTRAP_NODE):
                self._unassigned.append(pending)
            else:
                unreachable = KafkaConnectionError(
                    f"Node {node.node_id} ({node.address}) is unreachable: {error.message}",
                    node=node.node_id,
                )
                self._fail(pending, unreachable, node.node_id)
        backoff_ms = round(conn.last_backoff * 1000)
        if isinstance(error, AuthenticationError):
            # Callers waiting for any node were waiting on this attempt: they get the typed
            # error too, rather than a timeout (Java fails such requests with it).
            waiting, self._unassigned = self._unassigned, deque()
            for pending in waiting:
                if cast(Send, pending.token).node == ANY_NODE or node.node_id < 0:
                    self._fail(pending, error, node.node_id)
                else:
                    self._unassigned.append(pending)
            self._record(node, "auth_failed", error, lost_at)
            first = not node.down_announced
            log = node.log.warning if first else node.log.debug
            log("node_authentication_failed", error=str(error), backoff_ms=backoff_ms)
            node.down_announced = True
            self._warn_unavailable(node, "authentication failed", error)
        elif was is ConnectionState.READY:
            self._record(node, "disconnected", error, lost_at)
            node.log.info("node_disconnected", error=str(error), backoff_ms=backoff_ms)
            node.down_announced = True
            if node.node_id < 0 and not any(n >= 0 for n in self._nodes):
                # Java's "Bootstrap broker host:port disconnected": no broker learned yet.
                self._warn_unavailable(node, "bootstrap broker disconnected", error)
        else:
            self._record(node, "connect_failed", error, lost_at)
            log = node.log.info if not node.down_announced else node.log.debug
            log("node_connect_failed", error=str(error), backoff_ms=backoff_ms)
            node.down_announced = True
            self._warn_unavailable(node, "connection could not be established", error)
        self._handle(node, events)

    def _warn_unavailable(self, node: Node, reason: str, error: KafkaError) -> None:
        """A WARNING a user sees with default logging when a node becomes unavailable, again
        at most once per ``max(30 s, reconnect.backoff.max.ms)`` while it stays so, with the
        number of failed attempts since the last line (Java's NetworkClient warns at each
        failed attempt; librdkafka suppresses identical errors for 30 s); the same for "every
        known node is down". :meth:`_node_available` logs the end of both."""
        now_ms = round(self._clock.monotonic() * 1000)
        report = self._unavailable.occurred(node.node_id, now_ms)
        if report is not None:
            node.log.warning(
                "node_unavailable",
                reason=reason,
                error=str(error),
                bootstrap=node.node_id < 0,
                failed_attempts=node.conn.failed_attempts,
                backoff_ms=round(node.conn.last_backoff * 1000),
                **report.fields(),
            )
        if not all(
            n.conn.state is ConnectionState.DISCONNECTED and n.conn.last_error is not None
            for n in self._nodes.values()
        ):
            return
        report = self._unavailable.occurred(ALL_DOWN, now_ms)
        if report is not None:
            self._log.warning(
                "all_brokers_unavailable",
                addresses=sorted({str(n.address) for n in self._nodes.values()}),
                last_error=str(error),
                **report.fields(),
            )

    def _node_available(self, node: Node) -> None:
        """``node`` is ready: the end of its "unavailable" condition and of "all down"."""
        now_ms = round(self._clock.monotonic() * 1000)
        cleared = self._unavailable.cleared(node.node_id, now_ms)
        if cleared is not None:
            node.log.info("node_available_again", **cleared.fields())
        cleared = self._unavailable.cleared(ALL_DOWN, now_ms)
        if cleared is not None:
            self._log.info("broker_available_again", **cleared.fields())


def _strerror(code: int) -> str:
    return f"{os.strerror(code)} ({errno.errorcode.get(code, code)})"
