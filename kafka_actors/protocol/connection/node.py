"""The per-node connection state machine the NetworkActor drives (pure, sans-I/O).

Owns: one broker connection's life as Kafka's ``ClusterConnectionStates`` and
``NetworkClient`` see it (disconnected → connecting → ApiVersions → SASL → ready, back to
disconnected with reconnect backoff), its correlation ids, the requests queued for it and those
in flight with their deadlines, and the bytes it wants written. May touch: the protocol package
(wire framing, ApiVersions negotiation, the SASL exchange), errors. No sockets, no threads, no
clock: every method that depends on time takes ``now`` (monotonic seconds).

It lives with the protocol code because it is pure: the NetworkActor
(:mod:`kafka_actors.actors.network`) is the shell that owns the socket. How the shell uses it::

    conn = NodeConnection(node_id, settings, random=rng.random, sasl=mechanism_factory)
    conn.connect_delay(now)              # seconds until a new connection may start
    conn.start_connect(now)              # the shell opens a socket (and TLS) ...
    out = conn.transport_ready(now)      # ... and once the transport is up: ApiVersions bytes
    out, events = conn.receive(data, now)  # bytes from the socket; Ready/Completed/Failed/Broken
    conn.enqueue(pending)                # a request for this node
    out, failed = conn.flush(now)        # encode what the in-flight limit allows
    events, broken = conn.check_timeouts(now)
    events = conn.connection_lost(error, now)   # the shell closed the socket
    conn.next_deadline()                 # when the shell must wake up for this node

``Broken(error)`` (from ``receive``) or a non-None ``broken`` (from ``check_timeouts``) means
the shell must close the socket and call :meth:`NodeConnection.connection_lost`.

Semantics, following the Java client:

* reconnect backoff: ``reconnect.backoff.ms · 2ⁿ`` capped at ``reconnect.backoff.max.ms``,
  times a random factor in [0.8, 1.2) (the cap applies after the jitter, as Java's
  ``ExponentialBackoff``); ``n`` counts failures since the last successful connection and is
  reset when the connection becomes ready. A failed SASL authentication never reaches ready,
  so repeated authentication failures back off exponentially too (KAFKA-15165).
* connection setup timeout: ``socket.connection.setup.timeout.ms`` growing the same way up to
  ``socket.connection.setup.timeout.max.ms``; it covers the TCP connect, TLS, ApiVersions and
  SASL, i.e. everything until ready.
* each request has a deadline fixed when the NetworkActor accepts it (``timeout_ms`` of the
  ``Send``, default ``request.timeout.ms``). A queued request past it fails with
  KafkaTimeoutError; an in-flight request past it fails with KafkaTimeoutError and the
  connection is closed (Java's ``NetworkClient`` closes a connection with a timed-out request,
  since the answers of the requests behind it can no longer be trusted).
* at most ``max.in.flight.requests.per.connection`` requests are in flight; the rest queue.
* idleness (``connections.max.idle.ms``): :meth:`NodeConnection.idle_deadline` is when a
  ready connection with nothing queued or in flight since its last use counts as idle; the
  shell then closes it and calls :meth:`NodeConnection.close_idle` (disconnected, no backoff,
  not a failure: the next request reconnects at once).
* throttling (KIP-219): after :meth:`NodeConnection.throttle` (a response's
  ``throttle_time_ms``), ``flush`` sends nothing until the throttle ends; requests stay queued
  and ``next_deadline`` wakes the shell when it ends.
* a response that cannot be decoded fails the request it answers with a retriable
  CorruptResponseError naming the node and the API (the decoding error chained), and the
  connection breaks: the stream cannot be trusted any more, so the other requests in flight
  fail as disconnected. An undecodable ApiVersions or SASL answer breaks the connection with
  the same error (reconnect backoff as for any failed attempt).
* re-authentication (KIP-368): a SaslAuthenticate v1+ answer with a ``session_lifetime_ms``
  schedules a re-authentication at 85-95 % of it (random, as Java's
  ``SaslClientAuthenticator``). When it is due, :meth:`NodeConnection.flush` holds new
  requests; once nothing is in flight it sends SaslHandshake then SaslAuthenticate rounds of a
  fresh mechanism (for OAUTHBEARER: the current token) on the same connection, without
  ApiVersions; then ``Reauthenticated`` and the held requests go out. A refused
  re-authentication breaks the connection with the AuthenticationError; no answer within
  request.timeout.ms breaks it with KafkaTimeoutError.
* a lost connection fails every in-flight request with a retriable DisconnectedError naming
  the node; queued requests stay queued (until the node is ready or their deadline), except
  after an authentication failure, when every queued request fails with that (non-retriable)
  AuthenticationError.
"""

from __future__ import annotations

import enum
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kafka_actors.errors import (
    AuthenticationError,
    CorrelationIdMismatchError,
    CorruptResponseError,
    DisconnectedError,
    IllegalSaslStateError,
    KafkaError,
    KafkaTimeoutError,
    ProtocolError,
    UnsupportedVersionError,
)
from kafka_actors.protocol.wire.apis import ApiKey, api_name, response_type_for
from kafka_actors.protocol.wire.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    FRAME_POOL_BYTES,
    CorrelationIds,
    FrameDecoder,
    FramePool,
    decode_response,
    encode_request,
    read_correlation_id,
)
from kafka_actors.protocol.wire.versions import ApiVersionsHandshake, Done, NegotiatedVersions

if TYPE_CHECKING:
    # (SASL is imported by the connections that authenticate: a mechanism factory is given)
    from kafka_actors.protocol.connection.sasl import SaslExchange, SaslMechanism

__all__ = [
    "FETCH_RESPONSE_MARGIN",
    "FRAME_POOL_IDLE_S",
    "Broken",
    "Completed",
    "ConnectionSettings",
    "ConnectionState",
    "Event",
    "Failed",
    "InFlight",
    "MechanismFactory",
    "NodeConnection",
    "PendingRequest",
    "Ready",
    "Reauthenticated",
    "exponential_backoff",
    "frame_pool_bytes",
]

JITTER: Final = 0.2


class ConnectionState(enum.Enum):
    DISCONNECTED = "disconnected"  # no socket; may connect once the backoff has passed
    CONNECTING = "connecting"  # TCP connect (and TLS handshake) under way
    API_VERSIONS = "api_versions"  # ApiVersions exchange
    AUTHENTICATING = "authenticating"  # SaslHandshake / SaslAuthenticate rounds
    READY = "ready"
    CLOSED = "closed"  # the owner shut down; terminal


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """The configuration a connection needs (Java names in the comments)."""

    client_id: str | None = None  # client.id
    reconnect_backoff_ms: int = 50  # reconnect.backoff.ms
    reconnect_backoff_max_ms: int = 1_000  # reconnect.backoff.max.ms
    setup_timeout_ms: int = 10_000  # socket.connection.setup.timeout.ms
    setup_timeout_max_ms: int = 30_000  # socket.connection.setup.timeout.max.ms
    request_timeout_ms: int = 30_000  # request.timeout.ms
    max_in_flight: int = 100  # max.in.flight.requests.per.connection
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    max_idle_ms: int = 540_000  # connections.max.idle.ms (< 0: never closed for idleness)
    send_buffer_bytes: int = 131_072  # send.buffer.bytes (-1: the OS default)
    receive_buffer_bytes: int = -1  # receive.buffer.bytes (-1: the OS default)
    #: Bytes of frame buffers the connection keeps for later frames (:class:`FramePool`): two
    #: of a consumer's fetch.max.bytes and a margin (:func:`frame_pool_bytes`), so a full
    #: Fetch response is received into kept memory, not fresh pages, at any partition count.
    frame_pool_bytes: int = FRAME_POOL_BYTES

    @classmethod
    def from_config(cls, config: Any) -> ConnectionSettings:
        """From a :class:`kafka_actors.config.ConsumerConfig`."""
        return cls(
            client_id=config.client_id or None,
            reconnect_backoff_ms=config.reconnect_backoff_ms,
            reconnect_backoff_max_ms=config.reconnect_backoff_max_ms,
            setup_timeout_ms=config.socket_connection_setup_timeout_ms,
            setup_timeout_max_ms=config.socket_connection_setup_timeout_max_ms,
            request_timeout_ms=config.request_timeout_ms,
            max_in_flight=config.max_in_flight_requests_per_connection,
            max_idle_ms=config.connections_max_idle_ms,
            send_buffer_bytes=config.send_buffer_bytes,
            receive_buffer_bytes=config.receive_buffer_bytes,
            frame_pool_bytes=frame_pool_bytes(config.fetch_max_bytes),
        )


#: Seconds without a frame received into a kept buffer after which a connection lets go of
#: the kept buffers beyond :data:`FRAME_POOL_BYTES` (a paused consumer's connection does not
#: hold a Fetch response's worth of memory it no longer uses).
FRAME_POOL_IDLE_S: Final = 1.0

#: What a Fetch response brings beyond fetch.max.bytes of record batches: its header and
#: each partition's fields (about 60 bytes each; a megabyte is some 17,000 partitions).
FETCH_RESPONSE_MARGIN: Final = 1024 * 1024


def frame_pool_bytes(fetch_max_bytes: int) -> int:
    """The frame buffers a consumer's connection keeps: two whole Fetch responses of
    ``fetch_max_bytes`` (50 MiB by default; at 512 partitions every response is that large,
    and a fresh buffer each time cost about 8 % of the CPU per record), never less than
    :data:`FRAME_POOL_BYTES`. Two, because a response's records are views of its frame
    (:mod:`kafka_actors.protocol.wire.fetch_response`) until they are polled, while the next
    response is already arriving. A response larger than fetch.max.bytes (its first batch
    larger) gets a buffer of its own, freed with it."""
    return max(FRAME_POOL_BYTES, 2 * (fetch_max_bytes + FETCH_RESPONSE_MARGIN))


def exponential_backoff(
    initial_ms: float,
    max_ms: float,
    attempts: int,
    random_value: float,
    *,
    multiplier: float = 2.0,
    jitter: float = JITTER,
) -> float:
    """Java's ``ExponentialBackoff.backoff(attempts)`` in milliseconds.

    ``initial · multiplierⁿ`` (n = attempts, not beyond the exponent that reaches ``max``),
    times a factor uniform in [1 - jitter, 1 + jitter) drawn from ``random_value`` ∈ [0, 1),
    capped at ``max_ms``.
    """
    if initial_ms <= 0:
        return 0.0
    if max_ms <= initial_ms:
        return float(max_ms)
    term = initial_ms * multiplier ** min(attempts, 64)
    factor = 1.0 + jitter * (2.0 * random_value - 1.0)
    return float(min(term * factor, max_ms))


#: Makes the SASL mechanism (kafka_actors.protocol.connection.sasl) for one connection attempt.
MechanismFactory = Callable[[], "SaslMechanism"]


@dataclass(eq=False, slots=True)
class PendingRequest:
    """A request accepted by the NetworkActor: ``token`` is the shell's own handle."""

    request: Any
    token: Any
    deadline: float
    trace_id: str | None = None

    @property
    def api_key(self) -> int:
        return int(self.request.__api_key__)


@dataclass(eq=False, slots=True)
class InFlight:
    pending: PendingRequest
    correlation_id: int
    sent_at: float


# -- events ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ready:
    """The connection finished its handshakes."""

    versions: NegotiatedVersions


@dataclass(frozen=True, slots=True)
class Completed:
    request: PendingRequest
    correlation_id: int
    response: Any
    #: When the request was written (the connection's clock), for request-latency.
    sent_at: float | None = None


@dataclass(frozen=True, slots=True)
class Failed:
    request: PendingRequest
    error: KafkaError


@dataclass(frozen=True, slots=True)
class Reauthenticated:
    """KIP-368: the ready connection re-authenticated in place (``session_lifetime_ms`` is the
    broker's new limit, 0 for none)."""

    session_lifetime_ms: int


@dataclass(frozen=True, slots=True)
class Broken:
    """The connection can no longer be used: close it and call ``connection_lost``."""

    error: KafkaError


Event = Ready | Completed | Failed | Broken | Reauthenticated


@dataclass(slots=True)
class _Setup:
    """What a connection under construction is waiting for."""

    handshake: ApiVersionsHandshake | None = None
    correlation_id: int | None = None
    expecting: int | None = None  # API key of the handshake request outstanding
    request: Any = None  # the handshake request outstanding
    sasl: SaslExchange | None = None
    sasl_request: Any = None


class NodeConnection:
    """One node's connection state (see the module docstring)."""

    def __init__(
        self,
        node_id: int,
        settings: ConnectionSettings,
        *,
        random: Callable[[], float],
        sasl: MechanismFactory | None = None,
        api_versions_max: int | None = None,
    ) -> None:
        self.node_id = node_id
        self.settings = settings
        self._random = random
        self._sasl = sasl
        self._api_versions_max = api_versions_max
        #: (cluster id, node id) this connection means to reach, sent with ApiVersions v5+
        #: (KIP-1242, ``metadata.cluster.check.enable``); None: not known (a bootstrap
        #: server) or not checked. Set by the shell; used from the next attempt on.
        self.expected_cluster: tuple[str, int] | None = None
        self.state = ConnectionState.DISCONNECTED
        self.versions: NegotiatedVersions | None = None
        #: Connection failures since the last time the connection became ready.
        self.failed_attempts = 0
        #: Earliest time a new connection may start (monotonic seconds).
        self.backoff_until = 0.0
        #: The backoff chosen after the last failure (seconds), for logs and tests.
        self.last_backoff = 0.0
        self.setup_deadline: float | None = None
        self.last_error: KafkaError | None = None
        self.auth_failed = False
        self._queued: deque[PendingRequest] = deque()
        self._in_flight: OrderedDict[int, InFlight] = OrderedDict()
        self._ids = CorrelationIds()
        self._decoder = self._new_decoder()
        self._large_frame_at = 0.0  # the last frame received into a buffer of its own
        self._setup = _Setup()
        #: Last time bytes went out or came in on the ready connection (connections.max.idle.ms).
        self.last_used = 0.0
        #: No request may be sent before this time: the broker throttled us (KIP-219).
        self.throttled_until = 0.0
        #: KIP-368: when the ready connection re-authenticates (monotonic s), None for never.
        self.reauth_at: float | None = None
        #: Completed re-authentications on this node (all connections), for tests and metrics.
        self.reauth_count = 0
        self._reauth: SaslExchange | None = None
        self._reauth_request: Any = None
        self._reauth_correlation_id: int | None = None
        self._reauth_deadline = 0.0
        self._reauth_delay_ms: int | None = None

    # -- idleness and throttling -------------------------------------------------------------

    def touch(self, now: float) -> None:
        """The connection was used (a request written, a response read)."""
        self.last_used = now

    def idle_deadline(self) -> float | None:
        """When the ready connection counts as idle (nothing queued or in flight since
        ``last_used`` for connections.max.idle.ms); None if it cannot become idle now."""
        if (
            self.state is not ConnectionState.READY
            or self.load
            or self._reauth is not None
            or self.settings.max_idle_ms < 0
        ):
            return None
        return self.last_used + self.settings.max_idle_ms / 1000.0

    def close_idle(self) -> None:
        """The shell closed the idle transport: disconnected, with no backoff and no failure
        (the next request reconnects at once, as Java's idle expiry)."""
        if self.idle_deadline() is None:
            raise RuntimeError(f"node {self.node_id}: idle close while {self.state.value}")
        self.state = ConnectionState.DISCONNECTED
        self.backoff_until = 0.0
        self.versions = None
        self._setup = _Setup()

    def throttle(self, now: float, throttle_time_ms: int) -> None:
        """The broker asked for no request before ``now + throttle_time_ms`` (KIP-219)."""
        self.throttled_until = max(self.throttled_until, now + throttle_time_ms / 1000.0)

    # -- introspection ----------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self.state is ConnectionState.READY

    @property
    def connected(self) -> bool:
        """A transport exists (connecting, handshaking or ready)."""
        return self.state in (
            ConnectionState.CONNECTING,
            ConnectionState.API_VERSIONS,
            ConnectionState.AUTHENTICATING,
            ConnectionState.READY,
        )

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    @property
    def queued_count(self) -> int:
        return len(self._queued)

    @property
    def load(self) -> int:
        """Requests queued or in flight (for least-loaded node choice)."""
        return len(self._in_flight) + len(self._queued)

    def connect_delay(self, now: float) -> float:
        """Seconds until a new connection may start: 0 now, inf while one exists."""
        if self.state is not ConnectionState.DISCONNECTED:
            return float("inf")
        return max(0.0, self.backoff_until - now)

    def next_deadline(self, *, may_connect: bool = True) -> float | None:
        """The earliest time something of this connection expires or becomes possible
        (``may_connect`` False: a connection attempt is not among those things)."""
        times: list[float] = []
        if self.setup_deadline is not None and self.state not in (
            ConnectionState.READY,
            ConnectionState.DISCONNECTED,
            ConnectionState.CLOSED,
        ):
            times.append(self.setup_deadline)
        if self._in_flight:
            times.append(min(f.pending.deadline for f in self._in_flight.values()))
        if self.state is ConnectionState.READY and self.reauth_at is not None:
            if self._reauth is not None:
                times.append(self._reauth_deadline)
            elif not self._in_flight:  # in flight: their answers wake the shell
                times.append(self.reauth_at)
        if self._queued:
            times.append(min(p.deadline for p in self._queued))
            if self.state is ConnectionState.DISCONNECTED and may_connect:
                times.append(self.backoff_until)
            elif self.state is ConnectionState.READY and self.throttled_until:
                times.append(self.throttled_until)
        return min(times) if times else None

    # -- lifecycle --------------------------------------------------------------------------

    def start_connect(self, now: float) -> None:
        if self.state is not ConnectionState.DISCONNECTED:
            raise RuntimeError(f"node {self.node_id}: connect while {self.state.value}")
        self.state = ConnectionState.CONNECTING
        timeout_ms = exponential_backoff(
            self.settings.setup_timeout_ms,
            self.settings.setup_timeout_max_ms,
            self.failed_attempts,
            self._random(),
        )
        self.setup_deadline = now + timeout_ms / 1000.0
        self._decoder = self._new_decoder()
        self._setup = _Setup()
        self._end_reauth()
        self.versions = None

    def transport_ready(self, now: float) -> bytes:
        """The transport is up (TCP connected, TLS done): the ApiVersions request to write."""
        if self.state is not ConnectionState.CONNECTING:
            raise RuntimeError(f"node {self.node_id}: transport ready while {self.state.value}")
        self.state = ConnectionState.API_VERSIONS
        handshake = ApiVersionsHandshake(
            max_version=self._api_versions_max, expected=self.expected_cluster
        )
        self._setup.handshake = handshake
        request, _version = handshake.initial_request()
        return self._encode_setup(request)

    def connection_lost(self, error: KafkaError, now: float) -> list[Event]:
        """The shell closed the transport because of ``error``: fail what must fail, back off."""
        if self.state in (ConnectionState.DISCONNECTED, ConnectionState.CLOSED):
            return []
        auth = isinstance(error, AuthenticationError)
        self.auth_failed = auth
        self.last_error = error
        events: list[Event] = []
        for flight in self._in_flight.values():
            events.append(Failed(flight.pending, self._disconnected_error(flight, error)))
        self._in_flight.clear()
        if auth:
            events.extend(Failed(p, error) for p in self._queued)
            self._queued.clear()
        backoff_ms = exponential_backoff(
            self.settings.reconnect_backoff_ms,
            self.settings.reconnect_backoff_max_ms,
            self.failed_attempts,
            self._random(),
        )
        self.failed_attempts += 1
        self.last_backoff = backoff_ms / 1000.0
        self.backoff_until = now + self.last_backoff
        self.state = ConnectionState.DISCONNECTED
        self.setup_deadline = None
        self.versions = None
        self._setup = _Setup()
        self._end_reauth()
        return events

    def _disconnected_error(self, flight: InFlight, cause: KafkaError) -> KafkaError:
        return DisconnectedError(
            f"Connection to node {self.node_id} lost with "
            f"{type(flight.pending.request).__name__} (correlation id {flight.correlation_id}) "
            f"in flight: {cause.message}",
            node=self.node_id,
        )

    def close(self, error: KafkaError) -> list[Event]:
        """Owner shutdown: fail everything with ``error``; the connection is terminal."""
        events: list[Event] = [Failed(f.pending, error) for f in self._in_flight.values()]
        events.extend(Failed(p, error) for p in self._queued)
        self._in_flight.clear()
        self._queued.clear()
        self.state = ConnectionState.CLOSED
        return events

    # -- requests ---------------------------------------------------------------------------

    def enqueue(self, pending: PendingRequest) -> None:
        if self.state is ConnectionState.CLOSED:
            raise RuntimeError(f"node {self.node_id}: connection closed")
        self._queued.append(pending)

    def take_queued(self) -> list[PendingRequest]:
        """Remove and return the queued (not yet sent) requests."""
        taken = list(self._queued)
        self._queued.clear()
        return taken

    def flush(self, now: float) -> tuple[bytes, list[Event]]:
        """Encode queued requests while ready and under the in-flight limit.

        Returns the bytes to write and Failed events for requests that could not be encoded
        (a version the broker does not support, a field out of range).
        """
        if self.state is not ConnectionState.READY:
            return b"", []
        if self.reauth_at is not None and (self._reauth is not None or now >= self.reauth_at):
            # KIP-368 as Java's client: new requests wait while the session is re-established;
            # it starts once nothing is in flight.
            return self._begin_reauth(now)
        if not self._queued:
            return b"", []
        if self.throttled_until:
            if now < self.throttled_until:  # KIP-219: queued until the throttle ends
                return b"", []
            self.throttled_until = 0.0
        chunks: list[bytes] = []
        events: list[Event] = []
        limit = max(1, self.settings.max_in_flight)
        while self._queued and len(self._in_flight) < limit:
            pending = self._queued.popleft()
            error = self._check_version(pending)
            if error is not None:
                events.append(Failed(pending, error))
                continue
            correlation_id = self._ids.next()
            try:
                data = encode_request(
                    pending.request,
                    correlation_id=correlation_id,
                    client_id=self.settings.client_id,
                )
            except ProtocolError as exc:
                events.append(Failed(pending, exc))
                continue
            self._in_flight[correlation_id] = InFlight(pending, correlation_id, now)
            chunks.append(data)
        if chunks:
            self.last_used = now
        return b"".join(chunks), events

    def _check_version(self, pending: PendingRequest) -> KafkaError | None:
        versions = self.versions
        if versions is None:
            return None
        api, version = pending.api_key, int(pending.request.__version__)
        common = versions.range_for(api)
        if common is None or version not in common:
            return UnsupportedVersionError(
                f"Node {self.node_id} does not support {type(pending.request).__name__} "
                f"v{version} (common range: {common if common is not None else 'none'})",
                node=self.node_id,
            )
        return None

    def check_timeouts(self, now: float) -> tuple[list[Event], KafkaError | None]:
        """Fail expired requests; the error to close the connection with, if it must close."""
        events: list[Event] = []
        broken: KafkaError | None = None
        if self._queued and any(p.deadline <= now for p in self._queued):
            keep: deque[PendingRequest] = deque()
            for pending in self._queued:
                if pending.deadline <= now:
                    events.append(Failed(pending, self._queued_timeout(pending)))
                else:
                    keep.append(pending)
            self._queued = keep
        if self._reauth is not None and now >= self._reauth_deadline:
            broken = KafkaTimeoutError(
                f"Re-authentication (KIP-368) with node {self.node_id} timed out "
                "(request.timeout.ms); closing the connection",
                node=self.node_id,
            )
        expired = [f for f in self._in_flight.values() if f.pending.deadline <= now]
        for flight in expired:
            del self._in_flight[flight.correlation_id]
            waited_ms = round((now - flight.sent_at) * 1000)
            error = KafkaTimeoutError(
                f"{type(flight.pending.request).__name__} (correlation id "
                f"{flight.correlation_id}) to node {self.node_id} timed out after {waited_ms} ms "
                "in flight; closing the connection",
                node=self.node_id,
            )
            events.append(Failed(flight.pending, error))
            broken = broken or error
        if (
            broken is None
            and self.setup_deadline is not None
            and self.state
            in (
                ConnectionState.CONNECTING,
                ConnectionState.API_VERSIONS,
                ConnectionState.AUTHENTICATING,
            )
            and now >= self.setup_deadline
        ):
            broken = KafkaTimeoutError(
                f"Connection setup to node {self.node_id} timed out while "
                f"{self.state.value.replace('_', ' ')} "
                "(socket.connection.setup.timeout.ms)",
                node=self.node_id,
            )
        return events, broken

    def _queued_timeout(self, pending: PendingRequest) -> KafkaTimeoutError:
        if self.state is ConnectionState.READY and self.throttled_until:
            why = "while the broker throttles this client (throttle_time_ms, KIP-219)"
        elif self.state is ConnectionState.READY:
            why = "waiting for an in-flight slot"
        elif self.auth_failed:
            why = "while authentication to the node fails"
        elif self.state is ConnectionState.DISCONNECTED and self.last_error is not None:
            why = f"while the node is unreachable ({self.last_error.message})"
        else:
            why = f"while the connection is {self.state.value.replace('_', ' ')}"
        return KafkaTimeoutError(
            f"{type(pending.request).__name__} to node {self.node_id} timed out before it was "
            f"sent, {why}",
            node=self.node_id,
        )

    # -- incoming bytes ---------------------------------------------------------------------

    def receive(self, data: bytes, now: float) -> tuple[bytes, list[Event]]:
        """Bytes read from the transport: bytes to write back and what happened."""
        try:
            frames: Sequence[bytes | memoryview] = self._decoder.feed(data)
        except ProtocolError as exc:
            return b"", [Broken(self._tag(exc))]
        return self._frames(frames, now)

    def read_buffer(self, min_size: int) -> memoryview | None:
        """Where to read the rest of a large frame straight into (``recv_into``), when at
        least ``min_size`` of its bytes are missing and a quarter of it (at least
        ``min_size``) has arrived: see ``FrameDecoder.read_buffer``; then
        :meth:`buffer_updated`. None: read a chunk and :meth:`receive` it."""
        try:
            return self._decoder.read_buffer(min_size)
        except ProtocolError:
            return None  # the decoder failed: receive() reports it

    def buffer_updated(self, nbytes: int, now: float) -> tuple[bytes, list[Event]]:
        """``nbytes`` were read into :meth:`read_buffer`'s view: as :meth:`receive`."""
        frames = self._decoder.buffer_updated(nbytes)
        if frames:
            self._large_frame_at = now  # a frame in a buffer of its own: kept, or made
        return self._frames(frames, now)

    def frame_pool_deadline(self) -> float | None:
        """When the frame buffers kept beyond :data:`FRAME_POOL_BYTES` are let go
        (:meth:`trim_frame_pool`): :data:`FRAME_POOL_IDLE_S` after the last frame received
        into a buffer of its own; None while no more than that is kept."""
        if self._decoder.pool.kept_bytes <= FRAME_POOL_BYTES:
            return None
        return self._large_frame_at + FRAME_POOL_IDLE_S

    def trim_frame_pool(self, now: float) -> None:
        """Let go of the free kept buffers beyond :data:`FRAME_POOL_BYTES`; one still in use
        (its records not polled yet) is looked at again :data:`FRAME_POOL_IDLE_S` later."""
        self._decoder.pool.trim(FRAME_POOL_BYTES)
        self._large_frame_at = now

    def _frames(
        self, frames: Sequence[bytes | memoryview], now: float
    ) -> tuple[bytes, list[Event]]:
        out: list[bytes] = []
        events: list[Event] = []
        for frame in frames:
            try:
                if self.state is ConnectionState.READY and self._reauth is not None:
                    data_out, more = self._reauth_answer(frame, now)
                    out.append(data_out)
                    events.extend(more)
                elif self.state is ConnectionState.READY:
                    events.extend(self._response(frame))
                    if isinstance(events[-1], Broken):
                        break
                elif self.state in (ConnectionState.API_VERSIONS, ConnectionState.AUTHENTICATING):
                    data_out, more = self._setup_frame(frame, now)
                    out.append(data_out)
                    events.extend(more)
                else:
                    raise ProtocolError(f"Unexpected frame while {self.state.value}")
            except KafkaError as exc:
                events.append(Broken(self._tag(exc)))
                break
        return b"".join(out), events

    def _new_decoder(self) -> FrameDecoder:
        """A connection's framing, with its own kept buffers (``frame_pool_bytes``)."""
        settings = self.settings
        return FrameDecoder(settings.max_frame_size, FramePool(max_bytes=settings.frame_pool_bytes))

    def _tag(self, error: KafkaError) -> KafkaError:
        if error.node is None:
            error.node = self.node_id
        return error

    def _response(self, frame: bytes | memoryview) -> list[Event]:
        """The answer to the oldest request in flight: Completed, or, when its bytes cannot be
        decoded, Failed with a CorruptResponseError for that request and Broken (the stream
        cannot be trusted any more). A frame matching no request raises (Broken; the requests
        in flight then fail as disconnected)."""
        correlation_id = read_correlation_id(frame)
        if not self._in_flight:
            raise ProtocolError(f"Response with correlation id {correlation_id} but none pending")
        expected, flight = next(iter(self._in_flight.items()))
        if correlation_id != expected:
            raise CorrelationIdMismatchError(expected=expected, received=correlation_id)
        del self._in_flight[expected]
        try:
            response = decode_response(
                frame,
                response_type_for(flight.pending.request),
                correlation_id=expected,
                record_views=True,  # a Fetch's records: views of the kept frame buffer
            )
        except ProtocolError as exc:
            error = self._corrupt(flight.pending.request, expected, exc)
            return [Failed(flight.pending, error), Broken(error)]
        return [Completed(flight.pending, expected, response, flight.sent_at)]

    def _corrupt(
        self, request: Any, correlation_id: int | None, cause: ProtocolError
    ) -> CorruptResponseError:
        """The typed, retriable error for an undecodable answer to ``request``."""
        api = api_name(int(request.__api_key__))
        error = CorruptResponseError(
            f"Cannot decode the {api} v{int(request.__version__)} response from node "
            f"{self.node_id} (correlation id {correlation_id}): {cause.message}; "
            "closing the connection",
            api=api,
            node=self.node_id,
        )
        error.__cause__ = cause
        return error

    # -- handshakes ------------------------------------------------------------------------

    def _encode_setup(self, request: Any) -> bytes:
        correlation_id = self._ids.next()
        self._setup.correlation_id = correlation_id
        self._setup.expecting = int(request.__api_key__)
        self._setup.request = request
        return encode_request(
            request, correlation_id=correlation_id, client_id=self.settings.client_id
        )

    def _setup_frame(self, frame: bytes | memoryview, now: float) -> tuple[bytes, list[Event]]:
        """A handshake answer. One that cannot be decoded raises CorruptResponseError naming
        the API (the shell closes the connection and backs off before the next attempt)."""
        try:
            out, events = self._setup_step(frame)
            self._schedule_reauth(now)
            return out, events
        except CorrelationIdMismatchError:
            raise
        except ProtocolError as exc:
            if self._setup.request is None:
                raise
            raise self._corrupt(self._setup.request, self._setup.correlation_id, exc) from exc

    def _setup_step(self, frame: bytes | memoryview) -> tuple[bytes, list[Event]]:
        setup = self._setup
        expecting = setup.expecting
        if expecting == ApiKey.API_VERSIONS:
            assert setup.handshake is not None
            step = setup.handshake.handle_response_bytes(frame, correlation_id=setup.correlation_id)
            if not isinstance(step, Done):
                return self._encode_setup(step.request), []
            self.versions = step.versions
            if self._sasl is None:
                return b"", [self._became_ready()]
            return self._start_sasl(step.versions), []
        if expecting in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            return self._sasl_answer(frame)
        raise ProtocolError(f"Unexpected frame while {self.state.value}")

    def _became_ready(self) -> Ready:
        assert self.versions is not None
        exchange = self._setup.sasl
        if exchange is not None and exchange.done:
            self._reauth_delay_ms = exchange.reauthentication_delay_ms(self._random())
        self.state = ConnectionState.READY
        self.failed_attempts = 0
        self.auth_failed = False
        self.last_error = None
        self.setup_deadline = None
        self._setup = _Setup()
        return Ready(self.versions)

    def _start_sasl(self, versions: NegotiatedVersions) -> bytes:
        assert self._sasl is not None
        from kafka_actors.protocol.connection.sasl import SaslExchange

        self.state = ConnectionState.AUTHENTICATING
        exchange = SaslExchange(self._sasl(), versions, node=self.node_id)
        self._setup.sasl = exchange
        return self._sasl_next(exchange)

    def _sasl_next(self, exchange: SaslExchange) -> bytes:
        request = exchange.next_request()
        if request is None:  # pragma: no cover - the exchange always has one to send here
            raise IllegalSaslStateError("SASL exchange stalled", node=self.node_id)
        self._setup.sasl_request = request
        return self._encode_setup(request)

    def _sasl_answer(self, frame: bytes | memoryview) -> tuple[bytes, list[Event]]:
        setup = self._setup
        exchange = setup.sasl
        assert exchange is not None
        response = decode_response(
            frame, response_type_for(setup.sasl_request), correlation_id=setup.correlation_id
        )
        exchange.on_response(response)  # AuthenticationError subclasses on refusal
        if exchange.done:
            return b"", [self._became_ready()]
        return self._sasl_next(exchange), []

    # -- re-authentication (KIP-368) ----------------------------------------------------------

    @property
    def reauthenticating(self) -> bool:
        return self._reauth is not None

    def reauth_due(self, now: float) -> bool:
        """The shell must call :meth:`flush` now (a re-authentication is due or under way)."""
        return (
            self.state is ConnectionState.READY
            and self.reauth_at is not None
            and self._reauth is None
            and now >= self.reauth_at
            and not self._in_flight
        )

    def _schedule_reauth(self, now: float) -> None:
        delay = self._reauth_delay_ms
        self._reauth_delay_ms = None
        if delay is not None and self.state is ConnectionState.READY:
            self.reauth_at = now + delay / 1000.0

    def _end_reauth(self) -> None:
        self.reauth_at = None
        self._reauth = None
        self._reauth_request = None
        self._reauth_correlation_id = None
        self._reauth_delay_ms = None

    def _begin_reauth(self, now: float) -> tuple[bytes, list[Event]]:
        """SaslHandshake of a fresh exchange once nothing is in flight (Java's
        ``KafkaChannel.maybeBeginClientReauthentication``); nothing while waiting."""
        if self._reauth is not None or self._in_flight:
            return b"", []
        assert self._sasl is not None and self.versions is not None
        from kafka_actors.protocol.connection.sasl import SaslExchange

        try:
            exchange = SaslExchange(self._sasl(), self.versions, node=self.node_id)
        except KafkaError as exc:  # e.g. no valid OAUTHBEARER token: the session cannot go on
            return b"", [Broken(self._tag(exc))]
        self._reauth = exchange
        self._reauth_deadline = now + self.settings.request_timeout_ms / 1000.0
        self.last_used = now
        return self._reauth_send(exchange), []

    def _reauth_send(self, exchange: SaslExchange) -> bytes:
        request = exchange.next_request()
        if request is None:  # pragma: no cover - the exchange always has one to send here
            raise IllegalSaslStateError("SASL re-authentication stalled", node=self.node_id)
        correlation_id = self._ids.next()
        self._reauth_request = request
        self._reauth_correlation_id = correlation_id
        return encode_request(
            request, correlation_id=correlation_id, client_id=self.settings.client_id
        )

    def _reauth_answer(self, frame: bytes | memoryview, now: float) -> tuple[bytes, list[Event]]:
        exchange = self._reauth
        assert exchange is not None
        try:
            response = decode_response(
                frame,
                response_type_for(self._reauth_request),
                correlation_id=self._reauth_correlation_id,
            )
        except CorrelationIdMismatchError:
            raise
        except ProtocolError as exc:
            raise self._corrupt(self._reauth_request, self._reauth_correlation_id, exc) from exc
        exchange.on_response(response)  # AuthenticationError subclasses: Broken
        if not exchange.done:
            return self._reauth_send(exchange), []
        self.reauth_count += 1
        delay = exchange.reauthentication_delay_ms(self._random())
        self._end_reauth()
        if delay is not None:
            self.reauth_at = now + delay / 1000.0
        self.last_used = now
        return b"", [Reauthenticated(exchange.session_lifetime_ms)]
