"""The NetworkActor: every broker connection of a consumer, and the request managers' supervisor.

Owns: the sockets (the only code in kafka-actors that touches them), one
:class:`~kafka_actors.protocol.connection.NodeConnection` per node (bootstrap servers as pseudo
nodes), the map node id → address learned from Metadata responses, the requests other actors
send (:class:`Send`) and their replies (:class:`Response` / :class:`RequestFailed`), fault
injection at the network level, and the supervision of its child actors. May touch: sockets,
``selectors``, ``ssl`` (through the TLS channel), the protocol package, the supervisors
package, structlog.

How it wakes up (no busy polling, no sleep loops)
-------------------------------------------------
The actor is an ordinary pykka ``ThreadingActor`` whose *mailbox* is a
:class:`SelectorInbox`: a ``queue.Queue`` that also owns a ``selectors`` selector and a
socketpair. ``put`` (what ``tell``/``ask`` call, on the sender's thread) enqueues the envelope,
then writes one byte to the socketpair unless a wake-up is already pending. ``get`` (what
pykka's actor loop calls, on the actor's thread) returns a queued envelope at once if there is
one; otherwise it blocks in ``selector.select(timeout)`` on the broker sockets *and* the
socketpair, with ``timeout`` the time to the actor's next deadline (a request timeout, a
connection setup timeout, the end of a reconnect backoff, a delayed response), or forever when
nothing is pending. Socket readiness and expired deadlines are handled right there, on the
actor thread, before ``get`` looks at the queue again. So pykka's own loop, ``ask``/``tell``,
``stop`` and the supervision machinery (``SupervisedActor`` overrides of the loop) stay
untouched, a single thread owns all state (no locks), and the thread sleeps in the kernel
whenever there is nothing to do. An exception in the I/O code is turned into a message that
raises it on pykka's normal path, so it fails the actor (and its supervisor sees it) instead
of killing the thread silently.

Node ids and addresses
----------------------
Bootstrap servers are pseudo nodes with ids ``-1001, -1002, ...`` (Java uses -1, -2, ...,
but here -1 and -2 are ANY_NODE and COORDINATOR_NODE). Real node ids and addresses are learned
from every Metadata response that passes through the actor (before the response is delivered,
so a manager may send to a node it has just learned of), or told with :class:`UpdateNodes`.
A ``Send`` may name a node id, ``ANY_NODE`` (the least loaded ready node, real nodes first;
if none is ready, a connection is started to the first node, then bootstrap server, not in
backoff: bootstrap servers are so tried in turn) or ``BOOTSTRAP_NODE`` (the same among the
bootstrap servers only); such a request queued on a connection that is lost goes back to be
routed again. Requests for a node whose address is not known yet, or that is connecting or
backing off, wait until it is ready or their deadline passes.

Replies
-------
``Send.reply_to`` is an ``ActorRef`` (told the reply), a pykka ``Future`` (set to the reply)
or a callable (called with the reply on the actor's thread; keep it short). The reply is a
:class:`Response` or a :class:`RequestFailed` carrying a typed KafkaError: retriable
DisconnectedError / KafkaTimeoutError for connection trouble, AuthenticationError (fatal) when
SASL fails, ConsumerClosedError at shutdown. Replies carry the request's ``trace_id``, and every
line the actor logs about a request is logged inside ``traced(trace_id)``.

Fault injection (``faults``: a FaultInjector or None; nothing is consulted when None): before
each I/O round ``faults.take_sever(node)`` for every connected node (the connection is closed as
if the broker had dropped it); for each decoded response ``faults.on_response(api_key, node)``:
Delay (delivered later), Drop (never delivered; the caller sees the request's timeout), or
ErrorCode: the broker's real response with its top-level ``error_code`` replaced when the
response type has one (ApiVersions, FindCoordinator v0-3, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, ConsumerGroupHeartbeat, Fetch v7+, OffsetFetch v2+ ...), so the manager exercises
its own error handling; for responses without one (Metadata, ListOffsets, OffsetCommit,
FindCoordinator v4+ ...) a RequestFailed carrying the typed error of that code. A sever
applies at the actor's next wake-up (any message or socket event).

Host names are resolved off the actor thread (``client.dns.lookup``): a connection attempt
to a node whose addresses are not known yet hands ``getaddrinfo`` (or the injected
``resolver``) to a small resolver thread pool and waits, in state connecting (its setup
timeout applies), for a :class:`_Resolved` message. ``use_all_dns_ips`` (the default):
successive attempts to a node try each address the name resolved to in turn, and the name is
resolved again once all were tried. ``resolve_canonical_bootstrap_servers_only``: a bootstrap
server's addresses are also reverse-resolved to their canonical host names, which TLS (and
SASL) then use as the server name, as Java does for Kerberos.

Idle connections: a ready connection with nothing queued or in flight for
``connections.max.idle.ms`` is closed (event ``idle_closed``, no backoff) and reopened by the
next request for its node. Sockets get ``send.buffer.bytes`` / ``receive.buffer.bytes``
(SO_SNDBUF / SO_RCVBUF; -1 keeps the OS default) before they connect.

Throttling (KIP-219): a response whose ``throttle_time_ms`` is positive, at a version where
the broker expects the client to throttle itself, holds every further request to that node
in its queue until the throttle ends (event ``throttled``, its ``backoff`` the throttle in s).

Re-bootstrap (KIP-899, KIP-1102): the bootstrap servers stay pseudo nodes, so a request for
any node falls back to them when no known broker can be connected to. With
``metadata.recovery.strategy=rebootstrap`` (the default), when no Metadata response came for
``metadata.recovery.rebootstrap.trigger.ms`` while requests wait, or a Metadata response carries
REBOOTSTRAP_REQUIRED, every known broker is forgotten (its connection closed, requests for
any node routed again, requests for that node failed with a retriable error) and the client
starts again from the bootstrap servers (event ``rebootstrap``). With ``none``, requests for
any node go only to known brokers once some are known, and when no Metadata response came for
the trigger time the waiting Metadata requests fail with :class:`BrokersUnreachableError`
(raised at the user's next poll; retried after).

Not done here (yet): moving a connected node to a new address.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import errno
import functools
import heapq
import itertools
import os
import queue
import random as _random
import selectors
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Protocol, cast

import pykka
from kio.schema.errors import ErrorCode as KioErrorCode

from kafka_actors.clock import Clock, Scheduler, SystemClock
from kafka_actors.config import BrokerAddress, ConsumerConfig
from kafka_actors.errors import (
    AuthenticationError,
    BrokersUnreachableError,
    ConsumerClosedError,
    DisconnectedError,
    FatalError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    RebootstrapRequiredError,
    error_for_code,
)
from kafka_actors.log import get_logger, traced
from kafka_actors.metrics import ConsumerMetrics
from kafka_actors.oauth import OAuthBearerTokenSource, token_source_from_config
from kafka_actors.protocol.apis import ApiKey, api_name
from kafka_actors.protocol.connection import (
    Broken,
    Completed,
    ConnectionSettings,
    ConnectionState,
    Event,
    Failed,
    MechanismFactory,
    NodeConnection,
    PendingRequest,
    Ready,
    Reauthenticated,
)
from kafka_actors.protocol.messages import ANY_NODE, COORDINATOR_NODE
from kafka_actors.protocol.sasl import SaslMechanism, mechanism_from_config
from kafka_actors.protocol.tls import TlsChannel, build_ssl_context
from kafka_actors.runtime import AlreadySet, envelope
from kafka_actors.supervisors import (
    ChildContext,
    ChildSpec,
    ChildTable,
    Delay,
    Drop,
    ErrorCode,
    FaultInjector,
    SupervisedActor,
    Supervision,
    SupervisorEscalation,
    SupervisorSpec,
)

__all__ = [
    "ANY_NODE",
    "BOOTSTRAP_NODE",
    "ConnectionEvent",
    "GetConnectionEvents",
    "GetNodeStates",
    "GetSocketBuffers",
    "NetworkActor",
    "RequestFailed",
    "Response",
    "SelectorInbox",
    "Send",
    "UpdateNodes",
    "bootstrap_node_id",
    "request",
]

#: ``Send.node`` for "any bootstrap server" (tried in turn).
BOOTSTRAP_NODE: Final = -3
_BOOTSTRAP_BASE: Final = -1000
_RECV_SIZE: Final = 256 * 1024

Reply = "Response | RequestFailed"


#: KIP-219: from which version of each response the broker no longer delays the response
#: itself but expects the client to hold back its next requests for ``throttle_time_ms``
#: (Java's ``AbstractResponse.shouldClientThrottle``); APIs not listed are newer than KIP-219
#: and always client-throttled.
_CLIENT_THROTTLES_FROM: Final[Mapping[int, int]] = {
    ApiKey.FETCH: 8,
    ApiKey.LIST_OFFSETS: 3,
    ApiKey.METADATA: 6,
    ApiKey.OFFSET_COMMIT: 4,
    ApiKey.OFFSET_FETCH: 4,
    ApiKey.FIND_COORDINATOR: 2,
    ApiKey.JOIN_GROUP: 3,
    ApiKey.HEARTBEAT: 2,
    ApiKey.LEAVE_GROUP: 2,
    ApiKey.SYNC_GROUP: 2,
    ApiKey.DESCRIBE_GROUPS: 2,
    16: 2,  # ListGroups
    ApiKey.API_VERSIONS: 2,
    23: 2,  # OffsetForLeaderEpoch
}


def bootstrap_node_id(index: int) -> int:
    """The pseudo node id of the ``index``-th bootstrap server (0-based): -1001, -1002, ..."""
    return _BOOTSTRAP_BASE - 1 - index


# -- messages ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``request`` (a kio request payload at the version the sender chose) to ``node``.

    ``node``: a node id, ANY_NODE, BOOTSTRAP_NODE or a bootstrap pseudo id. ``reply_to``: an
    ActorRef, a pykka Future or a callable, or None (fire and forget). ``timeout_ms`` bounds
    the whole request (queued and in flight) from the moment the actor accepts it; default
    request.timeout.ms. ``request_id`` is the sender's own handle, echoed in the reply.
    """

    request: Any
    node: int = ANY_NODE
    reply_to: Any = None
    trace_id: str | None = None
    timeout_ms: int | None = None
    request_id: int | None = None

    def __repr__(self) -> str:
        return (
            f"Send({type(self.request).__name__}, node={self.node}, "
            f"request_id={self.request_id}, trace_id={self.trace_id})"
        )


@dataclass(frozen=True, slots=True)
class Response:
    """The broker's answer to a :class:`Send`."""

    request_id: int | None
    correlation_id: int
    node: int
    response: Any
    trace_id: str | None = None

    def __repr__(self) -> str:
        return (
            f"Response({type(self.response).__name__}, node={self.node}, "
            f"request_id={self.request_id}, correlation_id={self.correlation_id})"
        )


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """A :class:`Send` that got no answer: ``error`` says why (``error.retriable``)."""

    request_id: int | None
    node: int
    api_key: int
    error: KafkaError
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class UpdateNodes:
    """Tell the actor node addresses: ``(node_id, host, port)`` triples."""

    nodes: tuple[tuple[int, str, int], ...]


@dataclass(frozen=True, slots=True)
class _Resolved:
    """A resolver thread's answer for ``node`` (internal)."""

    node: int
    token: int
    addresses: tuple[tuple[Any, str], ...] = ()
    error: str | None = None


#: ``resolver(host, port)``: getaddrinfo's list of (family, type, proto, canonname, sockaddr).
Resolver = Callable[[str, int], Sequence[tuple[Any, ...]]]


def _system_resolver(host: str, port: int) -> Sequence[tuple[Any, ...]]:
    return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, socket.IPPROTO_TCP)


def _canonical_name(sockaddr: Any, fallback: str) -> str:
    """The canonical host name of an address (reverse lookup), ``fallback`` if none."""
    try:
        name = socket.getnameinfo(sockaddr, socket.NI_NAMEREQD)[0]
    except OSError:
        return fallback
    return name or fallback


@dataclass(frozen=True, slots=True)
class GetConnectionEvents:
    """Ask: the recorded connection events (tests, diagnostics), oldest first."""

    node: int | None = None


@dataclass(frozen=True, slots=True)
class GetNodeStates:
    """Ask: ``{node_id: (state, address)}`` of every node the actor knows."""


@dataclass(frozen=True, slots=True)
class GetSocketBuffers:
    """Ask: ``(SO_SNDBUF, SO_RCVBUF)`` of ``node``'s socket as the kernel reports them
    (``getsockopt``; Linux reports twice the size set), or None without a socket."""

    node: int


@dataclass(frozen=True, slots=True)
class ConnectionEvent:
    """One step of a node's connection life, with the actor clock's time (monotonic s).

    ``kind``: ``connect`` (an attempt starts), ``ready``, ``connect_failed`` (before ready),
    ``auth_failed``, ``disconnected`` (after ready), ``idle_closed`` (connections.max.idle.ms),
    ``throttled`` (KIP-219), ``reauthenticated`` (KIP-368, in place). ``backoff`` is the
    reconnect backoff chosen after a failure, or the throttle time (seconds).
    """

    node: int
    kind: str
    at: float
    error: str | None = None
    backoff: float | None = None


@dataclass(frozen=True, slots=True)
class _IoFailure:
    error: BaseException


# -- helpers for callers ------------------------------------------------------------------------


def request(
    network: pykka.ActorRef[Any],
    payload: Any,
    *,
    node: int = ANY_NODE,
    timeout: float = 30.0,
    trace_id: str | None = None,
) -> Response:
    """Blocking convenience for code outside the actor system: send and wait for the answer.

    Raises the reply's KafkaError, or KafkaTimeoutError if nothing came within ``timeout`` s.
    """
    future: pykka.Future[Any] = pykka.ThreadingFuture()
    network.tell(
        Send(payload, node=node, reply_to=future, trace_id=trace_id, timeout_ms=int(timeout * 1000))
    )
    try:
        reply = future.get(timeout=timeout + 5.0)
    except pykka.Timeout:
        raise KafkaTimeoutError(f"No reply from the NetworkActor within {timeout} s") from None
    if isinstance(reply, RequestFailed):
        raise reply.error
    return cast(Response, reply)


# -- the mailbox ----------------------------------------------------------------------------------


class _Driver(Protocol):
    def io_timeout(self) -> float | None: ...

    def on_io(self, events: list[tuple[selectors.SelectorKey, int]]) -> None: ...


_WAKE: Final = object()


class SelectorInbox(queue.Queue[Any]):
    """A pykka inbox whose blocking ``get`` waits on sockets and deadlines too (module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self.selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        self._signaled = False
        self.driver: _Driver | None = None
        #: Told the nanoseconds each select waited (io-wait-ratio), when set.
        self.on_wait: Callable[[int], None] | None = None
        #: Times ``select`` returned (idle-CPU and wake-up accounting in tests/benchmarks).
        self.wakeups = 0

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        if not self._signaled:
            self._signaled = True
            try:
                self._wake_w.send(b"\0")
            except OSError:  # full (a wake-up is pending anyway) or closed at shutdown
                pass

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        driver = self.driver
        if not block or timeout is not None or driver is None:
            return super().get(block, timeout)
        while True:
            try:
                return super().get(False)
            except queue.Empty:
                pass
            driver = self.driver
            if driver is None:
                return super().get()
            try:
                on_wait = self.on_wait
                if on_wait is None:
                    ready = self.selector.select(driver.io_timeout())
                else:
                    started = time.monotonic_ns()
                    ready = self.selector.select(driver.io_timeout())
                    on_wait(time.monotonic_ns() - started)
                self.wakeups += 1
                io: list[tuple[selectors.SelectorKey, int]] = []
                woken = False
                for key, mask in ready:
                    if key.data is _WAKE:
                        # Drain first, then clear: a put in between finds the flag still set
                        # and sends nothing, but its envelope is already queued and the loop
                        # reads the queue again before it next blocks. (Clearing first would
                        # let a put's byte be drained while the flag stays set: a lost wake-up.)
                        self._drain()
                        self._signaled = False
                        woken = True
                    else:
                        io.append((key, mask))
                if io or not woken:  # sockets ready or a deadline passed (a mailbox-only
                    driver.on_io(io)  # wake-up is followed by handling the message anyway)
            except Exception as exc:
                self.driver = None
                return envelope(_IoFailure(exc))

    def _drain(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def close(self) -> None:
        self.driver = None
        try:
            self.selector.close()
        finally:
            self._wake_r.close()
            self._wake_w.close()


# -- the transport --------------------------------------------------------------------------------


class _Transport:
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
            data = self.sock.recv(_RECV_SIZE)
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


@dataclass(eq=False)
class _Node:
    node_id: int
    address: BrokerAddress
    conn: NodeConnection
    log: Any
    transport: _Transport | None = None
    address_index: int = 0
    #: The addresses the name resolved to, as (getaddrinfo entry, host name for TLS); None:
    #: to be resolved (first attempt, all tried, or the address changed).
    addresses: list[tuple[Any, str]] | None = None
    #: The token of the resolution this node waits for (0: none).
    resolving: int = 0
    down_announced: bool = False
    #: When the last ``node_unavailable`` warning was logged (monotonic s; None: never).
    warned_at: float | None = None


@dataclass(order=True)
class _Delayed:
    due: float
    seq: int
    node: int = dataclasses.field(compare=False)
    event: Completed = dataclasses.field(compare=False)


# -- the actor ------------------------------------------------------------------------------------


class NetworkActor(SupervisedActor):
    """Owns the connections; supervises ``children`` (see the module docstring).

    ``sasl``: a factory of SASL mechanisms (``kafka_actors.protocol.sasl``), one per
    connection attempt (None: no SASL); ``tls``: a factory ``(server_hostname, node) ->
    TlsChannel`` (None: no TLS). By default both are built from ``config`` (security.protocol,
    sasl.*, ssl.*): a bad setting raises ConfigError when the actor is created.
    """

    def __init__(
        self,
        config: ConsumerConfig,
        *,
        children: Sequence[ChildSpec] = (),
        supervisor_spec: SupervisorSpec | None = None,
        context: ChildContext | None = None,
        name: str = "network",
        faults: FaultInjector | None = None,
        clock: Clock | None = None,
        scheduler: Scheduler | None = None,
        random: Callable[[], float] | None = None,
        table: ChildTable | None = None,
        sasl: MechanismFactory | None = None,
        tls: Callable[[str, int], TlsChannel] | None = None,
        event_log_size: int = 10_000,
        metrics: ConsumerMetrics | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        super().__init__(context=context, name=name, faults=faults)
        #: Java's consumer-metrics (connections, requests, select waits); None: not kept.
        self.metrics = metrics
        self.config = config
        self.settings = ConnectionSettings.from_config(config)
        self._clock: Clock = clock or SystemClock()
        self._random = random or _random.Random().random
        self._log = get_logger("network", client_id=config.client_id)
        #: SASL/OAUTHBEARER: the token source this actor owns (its worker thread fetches and
        #: refreshes tokens; started in on_start, stopped in on_stop).
        self._token_source: OAuthBearerTokenSource | None = None
        if sasl is None and config.sasl_enabled:
            if config.sasl_mechanism == "OAUTHBEARER":
                self._token_source = token_source_from_config(config)
                sasl = _oauthbearer_sasl(config, self._token_source)
            else:
                sasl = _default_sasl(config)
        if tls is None and config.ssl_enabled:
            tls = _default_tls(config)
        self._sasl = sasl
        self._tls = tls
        self._resolver: Resolver = resolver or _system_resolver
        self._canonical_bootstrap = (
            config.client_dns_lookup == "resolve_canonical_bootstrap_servers_only"
        )
        self._resolver_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._inbox = cast(SelectorInbox, self.actor_inbox)
        if metrics is not None:
            self._inbox.on_wait = metrics.io_waited
        self._nodes: dict[int, _Node] = {}
        self._bootstrap: list[int] = []
        for index, address in enumerate(config.bootstrap_servers):
            node_id = bootstrap_node_id(index)
            self._bootstrap.append(node_id)
            self._nodes[node_id] = self._new_node(node_id, address)
        self._unassigned: deque[PendingRequest] = deque()
        self._waiting: dict[int, deque[PendingRequest]] = {}
        self._delayed: list[_Delayed] = []
        self._dropped: list[PendingRequest] = []
        self._seq = itertools.count()
        self._events: deque[ConnectionEvent] = deque(maxlen=event_log_size)
        self._closed = False
        self._all_down_warned_at: float | None = None
        # Re-bootstrap (KIP-899 / KIP-1102): since when a Metadata request waits for an
        # answer (None: the last one was answered).
        self._rebootstrap = config.metadata_recovery_strategy == "rebootstrap"
        self._rebootstrap_trigger = config.metadata_recovery_rebootstrap_trigger_ms / 1000.0
        self._metadata_wanted_since: float | None = None
        self.supervision = Supervision(
            self,
            supervisor_spec or SupervisorSpec(),
            children,
            scheduler=scheduler,
            clock=clock,
            random=random,
            table=table,
        )

    @classmethod
    def create_inbox(cls) -> Any:
        return SelectorInbox()

    # -- pykka hooks -------------------------------------------------------------------------

    def on_start(self) -> None:
        self._inbox.driver = self
        self._log.info(
            "network_started",
            bootstrap=[str(a) for a in self.config.bootstrap_servers],
            security_protocol=self.config.security_protocol,
        )
        if self._token_source is not None:
            self._token_source.start()
        try:
            self.supervision.start()
        except Exception as exc:
            if self._token_source is not None:
                self._token_source.close()
            self._shutdown_io(exc)
            self.supervision.owner_failed(exc)
            raise

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Send):
            with traced(message.trace_id):
                self._accept(message)
                self._pump(self._clock.monotonic())
            return None
        if isinstance(message, _IoFailure):
            raise message.error
        if isinstance(message, _Resolved):
            self._on_resolved(message)
            self._pump(self._clock.monotonic())
            return None
        # Every message is a wake-up: what became due (a sever, a deadline) happens first.
        self._pump(self._clock.monotonic())
        if self.supervision.handle(message):
            return None
        if isinstance(message, UpdateNodes):
            for node_id, host, port in message.nodes:
                self._set_address(node_id, BrokerAddress(host, port))
            self._pump(self._clock.monotonic())
            return None
        if isinstance(message, GetConnectionEvents):
            return tuple(e for e in self._events if message.node is None or e.node == message.node)
        if isinstance(message, GetNodeStates):
            return {n.node_id: (n.conn.state.value, str(n.address)) for n in self._nodes.values()}
        if isinstance(message, GetSocketBuffers):
            node = self._nodes.get(message.node)
            if node is None or node.transport is None:
                return None
            sock = node.transport.sock
            return (
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
            )
        return super().on_receive(message)

    def on_stop(self) -> None:
        if self._token_source is not None:
            self._token_source.close()
        self._shutdown_io(self.supervision.tree.fatal_error)
        self.supervision.stop_children_now()

    def on_undelivered(self, message: Any) -> None:
        # Sends that raced with the stop (told after the last message was handled): their
        # callers wait on reply_to, not on the envelope, so answer them here.
        if isinstance(message, Send):
            error = ConsumerClosedError("The NetworkActor stopped before sending the request")
            pending = PendingRequest(message.request, message, 0.0, message.trace_id)
            self._fail(pending, error, message.node)

    def on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._log.error("network_failed", error=repr(exception_value))
        self._shutdown_io(exception_value)
        if isinstance(exception_value, SupervisorEscalation):
            self.supervision.stop_children_now()
        else:
            self.supervision.owner_failed(exception_value)

    # -- selector driver (runs inside SelectorInbox.get, on the actor thread) -----------------

    def io_timeout(self) -> float | None:
        deadline = self._next_deadline()
        if deadline is None:
            return None
        return max(0.0, deadline - self._clock.monotonic())

    def on_io(self, events: list[tuple[selectors.SelectorKey, int]]) -> None:
        for key, mask in events:
            node = self._nodes.get(cast(int, key.data))
            if node is None or node.transport is None or node.transport.sock is not key.fileobj:
                continue
            try:
                self._socket_ready(node, mask)
            except KafkaError as exc:
                self._close_node(node, exc)
        self._pump(self._clock.monotonic())

    # -- accepting requests ------------------------------------------------------------------

    def _accept(self, send: Send) -> None:
        now = self._clock.monotonic()
        timeout_ms = (
            send.timeout_ms if send.timeout_ms is not None else (self.settings.request_timeout_ms)
        )
        pending = PendingRequest(send.request, send, now + timeout_ms / 1000.0, send.trace_id)
        if self._closed:
            self._fail(pending, ConsumerClosedError("The NetworkActor is closed"), send.node)
            return
        if not hasattr(send.request, "__api_key__"):
            self._fail(pending, FatalError(f"Not a Kafka request: {send.request!r}"), send.node)
            return
        node = send.node
        if pending.api_key == ApiKey.METADATA and self._metadata_wanted_since is None:
            self._metadata_wanted_since = now
        self._log.debug(
            "request_accepted",
            api=_api_label(pending.api_key),
            version=int(send.request.__version__),
            node=node,
            request_id=send.request_id,
        )
        if node in (ANY_NODE, BOOTSTRAP_NODE):
            self._unassigned.append(pending)
        elif node == COORDINATOR_NODE:
            self._fail(
                pending,
                FatalError("COORDINATOR_NODE must be resolved to a node id by the sender"),
                node,
            )
        elif node in self._nodes:
            self._nodes[node].conn.enqueue(pending)
        else:
            self._waiting.setdefault(node, deque()).append(pending)

    # -- the I/O round -----------------------------------------------------------------------

    def _pump(self, now: float) -> None:
        """Everything that may be due: severs, timeouts, delayed answers, routing, connects,
        writes; then the selector registrations."""
        if self._closed:
            return
        faults = self.faults
        if faults is not None:
            for node in list(self._nodes.values()):
                if node.transport is not None and faults.take_sever(node.node_id):
                    self._close_node(
                        node, DisconnectedError("Connection severed by fault injection")
                    )
        self._expire(now)
        self._maybe_recover_metadata(now)
        while self._delayed and self._delayed[0].due <= now:
            item = heapq.heappop(self._delayed)
            self._deliver_response(item.node, item.event)
        self._route(now)
        for node in list(self._nodes.values()):
            conn = node.conn
            if conn.queued_count and conn.connect_delay(now) == 0.0:
                self._connect(node, now)
            if conn.ready and (conn.queued_count or conn.reauth_due(now)):
                before = conn.in_flight_count
                out, failed = conn.flush(now)
                if self.metrics is not None and conn.in_flight_count > before:
                    self.metrics.requests_sent(conn.in_flight_count - before)
                self._handle(node, failed)
                if out and node.transport is not None:
                    node.transport.write(out)
            transport = node.transport
            if transport is not None and transport.out and transport.tcp_connected:
                try:
                    transport.flush()
                except KafkaError as exc:
                    self._close_node(node, exc)
            idle = conn.idle_deadline()
            if idle is not None and now >= idle and node.transport is not None:
                if not node.transport.out:
                    self._close_idle(node, now)
                    continue
            self._update_interest(node)

    def _drop_transport(self, node: _Node) -> None:
        """Detach ``node``'s transport (if any) from the selector and close its socket."""
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

    def _close_idle(self, node: _Node, now: float) -> None:
        """connections.max.idle.ms passed with nothing queued or in flight: close the
        connection; the next request for the node opens a new one (no backoff)."""
        self._drop_transport(node)
        idle_ms = round((now - node.conn.last_used) * 1000)
        node.conn.close_idle()
        self._record(node, "idle_closed")
        node.log.debug("node_idle_closed", idle_ms=idle_ms)

    def _expire(self, now: float) -> None:
        for node in list(self._nodes.values()):
            events, broken = node.conn.check_timeouts(now)
            self._handle(node, events)
            if broken is not None:
                self._close_node(node, broken)
        for kind, waiting in [(ANY_NODE, self._unassigned), *self._waiting.items()]:
            if waiting and any(p.deadline <= now for p in waiting):
                keep = deque(p for p in waiting if p.deadline > now)
                for pending in waiting:
                    if pending.deadline <= now:
                        self._fail(pending, self._unsent_timeout(pending, kind), kind)
                waiting.clear()
                waiting.extend(keep)
        if self._dropped:
            for pending in [p for p in self._dropped if p.deadline <= now]:
                self._dropped.remove(pending)
                self._fail(
                    pending,
                    KafkaTimeoutError(
                        f"No response to {type(pending.request).__name__} before its deadline "
                        "(response dropped by fault injection)"
                    ),
                    cast(Send, pending.token).node,
                )

    def _unsent_timeout(self, pending: PendingRequest, node: int) -> KafkaTimeoutError:
        if node == ANY_NODE:
            errors = [n.conn.last_error for n in self._nodes.values() if n.conn.last_error]
            why = f"; last error: {errors[-1].message}" if errors else ""
            return KafkaTimeoutError(
                f"{type(pending.request).__name__} timed out: no node became ready{why}"
            )
        return KafkaTimeoutError(
            f"{type(pending.request).__name__} to node {node} timed out: the node's address is "
            "unknown (not in any Metadata response yet)",
            node=node,
        )

    def _next_deadline(self) -> float | None:
        times = [t for n in self._nodes.values() if (t := n.conn.next_deadline()) is not None]
        times.extend(t for n in self._nodes.values() if (t := n.conn.idle_deadline()) is not None)
        if self._delayed:
            times.append(self._delayed[0].due)
        for pending in self._dropped:
            times.append(pending.deadline)
        if self._unassigned:
            times.extend(p.deadline for p in self._unassigned)
            waits = [
                n.conn.backoff_until
                for n in self._nodes.values()
                if n.conn.state is ConnectionState.DISCONNECTED
            ]
            if waits:
                times.append(min(waits))
        for waiting in self._waiting.values():
            times.extend(p.deadline for p in waiting)
        if self._metadata_starved():
            assert self._metadata_wanted_since is not None
            times.append(self._metadata_wanted_since + self._rebootstrap_trigger)
        return min(times) if times else None

    def _route(self, now: float) -> None:
        """Give ANY_NODE / BOOTSTRAP_NODE requests to a ready node, or start a connection."""
        if not self._unassigned:
            return
        real = [n for n in self._nodes.values() if n.node_id >= 0]
        boot = [self._nodes[i] for i in self._bootstrap]
        keep: deque[PendingRequest] = deque()
        connect_started = False
        for pending in self._unassigned:
            kind = cast(Send, pending.token).node
            if kind == BOOTSTRAP_NODE:
                candidates = boot
            elif real and not self._rebootstrap:
                candidates = real  # metadata.recovery.strategy=none: never back to bootstrap
            else:
                candidates = real + boot
            ready = [n for n in candidates if n.conn.ready]
            if kind == ANY_NODE and any(n.node_id >= 0 for n in ready):
                ready = [n for n in ready if n.node_id >= 0]
            if ready:
                min(ready, key=lambda n: n.conn.load).conn.enqueue(pending)
                continue
            keep.append(pending)
            if connect_started or any(n.conn.connected and not n.conn.ready for n in candidates):
                continue
            for node in candidates:
                if node.conn.connect_delay(now) == 0.0:
                    self._connect(node, now)
                    connect_started = True
                    break
        self._unassigned = keep

    # -- connections -------------------------------------------------------------------------

    def _new_node(self, node_id: int, address: BrokerAddress) -> _Node:
        conn = NodeConnection(node_id, self.settings, random=self._random, sasl=self._sasl)
        log = self._log.bind(node=node_id, address=str(address))
        return _Node(node_id, address, conn, log)

    def _set_address(self, node_id: int, address: BrokerAddress) -> None:
        node = self._nodes.get(node_id)
        if node is None:
            node = self._nodes[node_id] = self._new_node(node_id, address)
            node.log.debug("node_learned")
            for pending in self._waiting.pop(node_id, ()):
                node.conn.enqueue(pending)
        elif node.address != address:
            node.log.info("node_address_changed", new_address=str(address))
            node.address = address
            node.addresses = None  # resolve the new name at the next attempt
            node.address_index = 0
            node.log = self._log.bind(node=node_id, address=str(address))

    def _record(self, node: _Node, kind: str, error: KafkaError | None = None) -> None:
        self._events.append(
            ConnectionEvent(
                node.node_id,
                kind,
                self._clock.monotonic(),
                None if error is None else str(error),
                node.conn.last_backoff
                if kind in ("connect_failed", "auth_failed", "disconnected")
                else None,
            )
        )

    def _connect(self, node: _Node, now: float) -> None:
        conn = node.conn
        conn.start_connect(now)
        self._record(node, "connect")
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

    def _start_resolve(self, node: _Node) -> None:
        """Resolve the node's host name on a resolver thread (never on this one)."""
        node.resolving = token = next(self._seq) + 1
        host, port = node.address.host, node.address.port
        canonical = self._canonical_bootstrap and node.node_id < 0
        resolver, ref = self._resolver, self.actor_ref

        def resolve() -> None:
            try:
                infos = resolver(host, port)
                entries = tuple(
                    (info, _canonical_name(info[4], host) if canonical else host) for info in infos
                )
                answer = _Resolved(node.node_id, token, entries)
            except OSError as exc:
                answer = _Resolved(node.node_id, token, error=str(exc))
            except Exception as exc:  # a user resolver's bug: a failed attempt, not a hang
                answer = _Resolved(node.node_id, token, error=repr(exc))
            try:
                ref.tell(answer)
            except pykka.ActorDeadError:
                pass

        if self._resolver_pool is None:
            self._resolver_pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=2, thread_name_prefix="kafka-actors-dns"
            )
        self._resolver_pool.submit(resolve)

    def _on_resolved(self, answer: _Resolved) -> None:
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

    def _open_socket(self, node: _Node) -> None:
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
        node.transport = _Transport(sock, tls)
        if self.metrics is not None:
            self.metrics.connection_opened()
        self._update_interest(node)

    def _transport_closed(self) -> None:
        if self.metrics is not None:
            self.metrics.connection_closed()

    def _socket_ready(self, node: _Node, mask: int) -> None:
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

    def _received(self, node: _Node, transport: _Transport, data: bytes, now: float) -> None:
        node.conn.touch(now)
        out, events = node.conn.receive(data, now)
        transport.write(out)
        self._handle(node, events)

    def _tls_handshake(self, node: _Node, transport: _Transport, now: float) -> None:
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

    def _update_interest(self, node: _Node) -> None:
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

    def _close_node(self, node: _Node, error: KafkaError) -> None:
        """Close ``node``'s transport because of ``error`` and fail what must fail."""
        if error.node is None:
            error.node = node.node_id
        self._drop_transport(node)
        conn = node.conn
        was = conn.state
        events = conn.connection_lost(error, self._clock.monotonic())
        # Requests for "any node" queued here may go to another node now.
        for pending in conn.take_queued():
            if cast(Send, pending.token).node in (ANY_NODE, BOOTSTRAP_NODE):
                self._unassigned.append(pending)
            else:
                conn.enqueue(pending)
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
            self._record(node, "auth_failed", error)
            first = not node.down_announced
            log = node.log.warning if first else node.log.debug
            log("node_authentication_failed", error=str(error), backoff_ms=backoff_ms)
            node.down_announced = True
            # node_authentication_failed was the warning the first time.
            self._warn_unavailable(node, "authentication failed", error, announced=not first)
        elif was is ConnectionState.READY:
            self._record(node, "disconnected", error)
            node.log.info("node_disconnected", error=str(error), backoff_ms=backoff_ms)
            node.down_announced = True
            if node.node_id < 0 and not any(n >= 0 for n in self._nodes):
                # Java's "Bootstrap broker host:port disconnected": no broker learned yet.
                self._warn_unavailable(node, "bootstrap broker disconnected", error)
        else:
            self._record(node, "connect_failed", error)
            log = node.log.info if not node.down_announced else node.log.debug
            log("node_connect_failed", error=str(error), backoff_ms=backoff_ms)
            node.down_announced = True
            self._warn_unavailable(node, "connection could not be established", error)
        self._handle(node, events)

    def _warn_unavailable(
        self, node: _Node, reason: str, error: KafkaError, *, announced: bool = True
    ) -> None:
        """A WARNING a user sees with default logging, at most once per node per
        ``reconnect.backoff.max.ms`` (Java's NetworkClient warns at each failed attempt, which
        its reconnect backoff spaces out); and one when every known node is down."""
        now = self._clock.monotonic()
        period = self.settings.reconnect_backoff_max_ms / 1000.0
        if node.warned_at is None or now - node.warned_at >= period:
            node.warned_at = now
            if announced:
                node.log.warning(
                    "node_unavailable",
                    reason=reason,
                    error=str(error),
                    bootstrap=node.node_id < 0,
                    failed_attempts=node.conn.failed_attempts,
                    backoff_ms=round(node.conn.last_backoff * 1000),
                )
        if not all(
            n.conn.state is ConnectionState.DISCONNECTED and n.conn.last_error is not None
            for n in self._nodes.values()
        ):
            return
        if self._all_down_warned_at is None or now - self._all_down_warned_at >= period:
            self._all_down_warned_at = now
            self._log.warning(
                "all_brokers_unavailable",
                addresses=sorted({str(n.address) for n in self._nodes.values()}),
                last_error=str(error),
            )

    # -- events and replies --------------------------------------------------------------------

    def _handle(self, node: _Node, events: Iterable[Event]) -> None:
        for event in events:
            if isinstance(event, Completed):
                self._completed(node, event)
            elif isinstance(event, Failed):
                self._fail(event.request, event.error, node.node_id)
            elif isinstance(event, Ready):
                node.conn.touch(self._clock.monotonic())
                self._record(node, "ready")
                node.log.info(
                    "node_ready",
                    api_versions_version=event.versions.api_versions_version,
                    authenticated=self._sasl is not None,
                )
                node.down_announced = False
            elif isinstance(event, Broken):
                self._close_node(node, event.error)
            elif isinstance(event, Reauthenticated):
                self._record(node, "reauthenticated")
                node.log.debug(
                    "node_reauthenticated", session_lifetime_ms=event.session_lifetime_ms
                )

    def _completed(self, node: _Node, event: Completed) -> None:
        pending = event.request
        api = pending.api_key
        if self.metrics is not None and event.sent_at is not None:
            self.metrics.response_received((self._clock.monotonic() - event.sent_at) * 1000.0)
        if api == ApiKey.METADATA:
            self._learn(event.response)
        throttle = getattr(event.response, "throttle_time", None)
        if throttle is not None:
            throttle_ms = round(throttle.total_seconds() * 1000)
            version = int(pending.request.__version__)
            if throttle_ms > 0 and version >= _CLIENT_THROTTLES_FROM.get(api, 0):
                now = self._clock.monotonic()
                node.conn.throttle(now, throttle_ms)
                self._events.append(
                    ConnectionEvent(node.node_id, "throttled", now, None, throttle_ms / 1000.0)
                )
                node.log.debug("node_throttled", api=_api_label(api), throttle_time_ms=throttle_ms)
        faults = self.faults
        if faults is not None:
            fault = faults.on_response(api, node.node_id)
            if fault is not None:
                with traced(pending.trace_id):
                    node.log.info("fault_injected", api=api_name(api), fault=repr(fault))
                if isinstance(fault, Delay):
                    heapq.heappush(
                        self._delayed,
                        _Delayed(
                            self._clock.monotonic() + fault.seconds,
                            next(self._seq),
                            node.node_id,
                            event,
                        ),
                    )
                    return
                if isinstance(fault, Drop):
                    self._dropped.append(pending)
                    return
                if isinstance(fault, ErrorCode):
                    replaced = _with_error_code(event.response, fault.code)
                    if replaced is not None:
                        event = Completed(pending, event.correlation_id, replaced)
                    else:
                        self._fail(
                            pending,
                            error_for_code(
                                fault.code,
                                f"{error_for_code(fault.code).message} (injected)",
                                node=node.node_id,
                            ),
                            node.node_id,
                        )
                        return
        self._deliver_response(node.node_id, event)

    def _deliver_response(self, node_id: int, event: Completed) -> None:
        pending = event.request
        send = cast(Send, pending.token)
        if pending.api_key == ApiKey.METADATA:
            code = int(getattr(event.response, "error_code", 0) or 0)
            if code == RebootstrapRequiredError.code:
                self._fail(
                    pending,
                    DisconnectedError("The broker answered REBOOTSTRAP_REQUIRED", node=node_id),
                    node_id,
                )
                self._do_rebootstrap(self._clock.monotonic(), "REBOOTSTRAP_REQUIRED")
                return
            self._metadata_wanted_since = None
        with traced(pending.trace_id):
            self._log.debug(
                "response_received",
                node=node_id,
                api=_api_label(pending.api_key),
                correlation_id=event.correlation_id,
                request_id=send.request_id,
            )
            _reply(
                send.reply_to,
                Response(
                    send.request_id, event.correlation_id, node_id, event.response, pending.trace_id
                ),
                self._log,
            )

    def _fail(self, pending: PendingRequest, error: KafkaError, node: int) -> None:
        send = cast(Send, pending.token)
        api = pending.api_key if hasattr(pending.request, "__api_key__") else -1
        with traced(pending.trace_id):
            self._log.debug(
                "request_failed",
                node=node,
                api=_api_label(api),
                error=str(error),
                retriable=error.retriable,
                request_id=send.request_id,
            )
            _reply(
                send.reply_to,
                RequestFailed(send.request_id, node, api, error, pending.trace_id),
                self._log,
            )

    # -- re-bootstrap (KIP-899 / KIP-1102) ------------------------------------------------------

    def _metadata_starved(self) -> bool:
        """Brokers are known and a Metadata request waits for an answer (KIP-1102 counts the
        trigger time from the first unanswered attempt)."""
        return (
            self._metadata_wanted_since is not None
            and self._rebootstrap_trigger > 0
            and any(n >= 0 for n in self._nodes)
        )

    def _maybe_recover_metadata(self, now: float) -> None:
        since = self._metadata_wanted_since
        if since is None or not self._metadata_starved() or now - since < self._rebootstrap_trigger:
            return
        waited_ms = round((now - since) * 1000)
        if self._rebootstrap:
            self._do_rebootstrap(now, f"no Metadata response for {waited_ms} ms")
            return
        self._metadata_wanted_since = now  # reported once per trigger period
        error = BrokersUnreachableError(
            f"No Metadata response from any known broker for {waited_ms} ms "
            "(metadata.recovery.rebootstrap.trigger.ms) and metadata.recovery.strategy=none: "
            "the client does not go back to the bootstrap servers; known brokers: "
            + ", ".join(sorted(str(n.address) for n in self._nodes.values() if n.node_id >= 0))
        )
        self._log.warning("metadata_recovery_impossible", error=str(error))
        keep: deque[PendingRequest] = deque()
        for pending in self._unassigned:
            if pending.api_key == ApiKey.METADATA:
                self._fail(pending, error, ANY_NODE)
            else:
                keep.append(pending)
        self._unassigned = keep

    def _do_rebootstrap(self, now: float, reason: str) -> None:
        """Forget every known broker and start again from the bootstrap servers."""
        if self._metadata_wanted_since is not None:
            self._metadata_wanted_since = now  # the next trigger counts from here
        forgotten = [n for n in self._nodes.values() if n.node_id >= 0]
        self._log.warning(
            "rebootstrap",
            reason=reason,
            forgotten=sorted(f"{n.node_id}@{n.address}" for n in forgotten),
            bootstrap=[str(a) for a in self.config.bootstrap_servers],
        )
        self._events.append(ConnectionEvent(BOOTSTRAP_NODE, "rebootstrap", now, reason, None))
        for node in forgotten:
            error = DisconnectedError(f"Rebootstrapping ({reason})", node=node.node_id)
            transport, node.transport = node.transport, None
            if transport is not None:
                if transport.registered_mask:
                    try:
                        self._inbox.selector.unregister(transport.sock)
                    except (KeyError, ValueError):
                        pass
                transport.close()
            for pending in node.conn.take_queued():
                if cast(Send, pending.token).node in (ANY_NODE, BOOTSTRAP_NODE):
                    self._unassigned.append(pending)
                else:
                    self._fail(pending, error, node.node_id)
            for event in node.conn.close(error):
                if isinstance(event, Failed):
                    self._fail(event.request, event.error, node.node_id)
            del self._nodes[node.node_id]

    def _learn(self, response: Any) -> None:
        brokers = getattr(response, "brokers", None)
        if not brokers:
            return
        for broker in brokers:
            address = BrokerAddress(str(broker.host), int(broker.port))
            self._set_address(int(broker.node_id), address)

    # -- shutdown --------------------------------------------------------------------------------

    def _shutdown_io(self, cause: BaseException | None) -> None:
        if self._closed:
            return
        self._closed = True
        self._inbox.driver = None
        if self._resolver_pool is not None:
            self._resolver_pool.shutdown(wait=False, cancel_futures=True)
        error = ConsumerClosedError(
            "The NetworkActor stopped" + (f" because of: {cause}" if cause else "")
        )
        for node in self._nodes.values():
            for event in node.conn.close(error):
                if isinstance(event, Failed):
                    self._fail(event.request, event.error, node.node_id)
            if node.transport is not None:
                node.transport.close()
                node.transport = None
                self._transport_closed()
        for pending in list(self._unassigned):
            self._fail(pending, error, cast(Send, pending.token).node)
        self._unassigned.clear()
        for node_id, waiting in self._waiting.items():
            for pending in waiting:
                self._fail(pending, error, node_id)
        self._waiting.clear()
        for pending in self._dropped:
            self._fail(pending, error, cast(Send, pending.token).node)
        self._dropped.clear()
        for item in self._delayed:
            self._fail(item.event.request, error, item.node)
        self._delayed.clear()
        self._inbox.close()
        self._log.info("network_stopped")


def _reply(target: Any, reply: Response | RequestFailed, log: Any) -> None:
    if target is None:
        return
    try:
        if isinstance(target, pykka.ActorRef):
            target.tell(reply)
        elif isinstance(target, pykka.Future):
            target.set(reply)
        else:
            target(reply)
    except pykka.ActorDeadError:
        log.debug("reply_target_dead", reply=type(reply).__name__)
    except AlreadySet:
        log.debug("reply_future_already_set", reply=type(reply).__name__)
    except Exception:
        log.exception("reply_failed", reply=type(reply).__name__)


@functools.cache
def _api_label(api: int) -> str:
    return api_name(api)


def _with_error_code(response: Any, code: int) -> Any | None:
    """``response`` with its top-level ``error_code`` set to ``code``; None if it has none."""
    if not dataclasses.is_dataclass(response) or not any(
        f.name == "error_code" for f in dataclasses.fields(response)
    ):
        return None
    try:
        value = KioErrorCode(code)
    except ValueError:
        return None
    return dataclasses.replace(cast(Any, response), error_code=value)


def _strerror(code: int) -> str:
    return f"{os.strerror(code)} ({errno.errorcode.get(code, code)})"


def _default_sasl(config: ConsumerConfig) -> MechanismFactory:
    mechanism_from_config(config)  # a bad setting fails now, naming its key

    def make() -> SaslMechanism:
        return mechanism_from_config(config)

    return make


def _oauthbearer_sasl(config: ConsumerConfig, source: OAuthBearerTokenSource) -> MechanismFactory:
    """SASL/OAUTHBEARER with the source's current token: a connection attempt made before
    the first token arrived fails with a retriable error and is retried after its backoff."""

    def make() -> SaslMechanism:
        return mechanism_from_config(config, token_source=source)

    return make


def _default_tls(config: ConsumerConfig) -> Callable[[str, int], TlsChannel]:
    context = build_ssl_context(config)

    def make(host: str, node: int) -> TlsChannel:
        return TlsChannel(context, host, node=node)

    return make


def nodes_from(pairs: Mapping[int, tuple[str, int]]) -> UpdateNodes:
    """An :class:`UpdateNodes` from ``{node_id: (host, port)}``."""
    return UpdateNodes(tuple((k, h, p) for k, (h, p) in pairs.items()))
