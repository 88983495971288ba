"""The NetworkActor: one actor, one thread, one state, every broker connection.

Owns: :class:`NetworkActor`: construction and the pykka hooks; the node registry (a
:class:`~kafka_actors.actors.network.nodes.Node` per node, learned from Metadata responses,
retired when a newer one leaves it out) and what a node's connection does (connect, ready,
lost, idle, "unavailable" warnings, the connection event log); a ``Send`` from acceptance to
its reply (routing to the least loaded ready node, deadlines, throttling, fault injection on
responses); metadata recovery (rebootstrap); the I/O round ``_pump``, the next deadline, and
the shutdown that fails whatever is still pending. It composes the objects that own the rest
of its state: :class:`~.connections.Connector` (sockets, DNS, TLS, the selector),
:class:`~.unsent.UnsentRequests` (requests on no connection),
:class:`~.rebootstrap.MetadataRecovery` (since when a Metadata request waits) and its
:class:`~kafka_actors.supervisors.Supervision`. May touch: sockets (through the connector), the
protocol package, the supervisors package (it supervises the request managers), the reply
targets, the metrics.
"""

from __future__ import annotations

import random as _random
import selectors
import socket
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

import pykka

from kafka_actors.actors.network.bootstrap import BootstrapResolution
from kafka_actors.actors.network.connections import Connector
from kafka_actors.actors.network.inbox import SelectorInbox
from kafka_actors.actors.network.messages import (
    BOOTSTRAP_NODE,
    ConnectionEvent,
    GetConnectionEvents,
    GetNodeStates,
    GetSocketBuffers,
    IoFailure,
    RequestFailed,
    Resolved,
    Response,
    Send,
    TokenChanged,
    UpdateNodes,
    bootstrap_node_id,
)
from kafka_actors.actors.network.nodes import ALL_DOWN, Node
from kafka_actors.actors.network.rebootstrap import NO_RECOVERY, REBOOTSTRAP, MetadataRecovery
from kafka_actors.actors.network.requests import (
    CLIENT_THROTTLES_FROM,
    api_label,
    reply,
    with_error_code,
)
from kafka_actors.actors.network.status import ConnectionStates
from kafka_actors.actors.network.transport import Resolver, system_resolver
from kafka_actors.actors.network.unsent import UnsentRequests
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
from kafka_actors.protocol.condition_log import REPEAT_INTERVAL_MS, ConditionLog
from kafka_actors.protocol.connection.node import (
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
from kafka_actors.protocol.wire.apis import ApiKey, api_name
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

if TYPE_CHECKING:
    from kafka_actors.kerberos import KerberosLogin  # imported only for GSSAPI
    from kafka_actors.oauth import OAuthBearerTokenSource  # imported only for OAUTHBEARER
    from kafka_actors.protocol.connection.sasl import SaslMechanism  # imported only for SASL
    from kafka_actors.protocol.connection.tls import TlsChannel  # imported only for TLS
    from kafka_actors.protocol.wire.versions import NegotiatedVersions

__all__ = ["NetworkActor"]


class NetworkActor(SupervisedActor):
    """Owns the connections; supervises ``children`` (see :mod:`kafka_actors.actors.network`).

    ``sasl``: a factory of SASL mechanisms (``kafka_actors.protocol.connection.sasl``), one per
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
        connection_states: ConnectionStates | None = None,
        on_versions: Callable[[NegotiatedVersions], None] | None = None,
    ) -> None:
        super().__init__(context=context, name=name, faults=faults)
        #: Told the versions of each connection's ApiVersions handshake (the consumer's
        #: managers need not wait for their own ask: the first connection already knows them).
        self._on_versions = on_versions
        #: Java's consumer-metrics (connections, requests, select waits); None: not kept.
        self.metrics = metrics
        #: Each node's connection state for ``health()``; None: not kept.
        self.connection_states = connection_states
        self.config = config
        self.settings = ConnectionSettings.from_config(config)
        self._clock = clock or SystemClock()
        self._random = random or _random.Random().random
        self._log = get_logger("network", client_id=config.client_id)
        #: SASL/OAUTHBEARER: the token source this actor owns (its worker thread fetches and
        #: refreshes tokens; started in on_start, stopped in on_stop).
        self._token_source: OAuthBearerTokenSource | None = None
        #: SASL/GSSAPI: mechanisms for one broker host (Kerberos names the service by the host
        #: as connected), from the login made here (kafka_actors.kerberos, Java's KerberosLogin).
        self._sasl_for_host: Callable[[str], SaslMechanism] | None = None
        self._kerberos: KerberosLogin | None = None
        if sasl is None and config.sasl_enabled:
            # (imported here, as TLS below: SASL and ssl are for the consumers that use them)
            from kafka_actors.actors.network.security import default_sasl, oauthbearer_sasl

            if config.sasl_mechanism == "GSSAPI":
                # (imported here: the gssapi binding is an optional extra, for GSSAPI only)
                from kafka_actors.kerberos import KerberosLogin

                self._kerberos = KerberosLogin(
                    config,
                    on_change=self._token_changed,
                    hosts=tuple(dict.fromkeys(a.host for a in config.bootstrap_servers)),
                )
                self._sasl_for_host = self._kerberos.mechanism
            elif config.sasl_mechanism == "OAUTHBEARER":
                # (imported here: the token fetcher and urllib are for OAUTHBEARER only)
                from kafka_actors.oauth import token_source_from_config

                self._token_source = token_source_from_config(
                    config, on_change=self._token_changed
                )
                sasl = oauthbearer_sasl(config, self._token_source)
            else:
                sasl = default_sasl(config)
        if tls is None and config.ssl_enabled:
            from kafka_actors.actors.network.security import default_tls

            tls = default_tls(config)
        self._sasl = sasl
        self._inbox = cast(SelectorInbox, self.actor_inbox)
        if metrics is not None:
            self._inbox.on_wait = metrics.io_waited
        self._connector = Connector(
            self.settings,
            self._inbox.selector,
            resolver=resolver or system_resolver,
            canonical_bootstrap=(
                config.client_dns_lookup == "resolve_canonical_bootstrap_servers_only"
            ),
            tls=tls,
            metrics=metrics,
            tell=self._tell_self,
            on_events=self._handle,
        )
        #: Every node: real ones (learned from Metadata) and the bootstrap pseudo nodes.
        self._nodes: dict[int, Node] = {}
        self._bootstrap: list[int] = []
        for index, address in enumerate(config.bootstrap_servers):
            node_id = bootstrap_node_id(index)
            self._bootstrap.append(node_id)
            self._nodes[node_id] = self._new_node(node_id, address)
        #: Node ids a newer Metadata response left out (until one names them again): a request
        #: for one of them fails at once with a retriable error instead of waiting for it.
        self._removed: set[int] = set()
        self._unsent = UnsentRequests()
        self._events: deque[ConnectionEvent] = deque(maxlen=event_log_size)
        self._closed = False
        #: The "node unavailable" conditions (key: node id; ``ALL_DOWN``: every node down; the
        #: metadata recovery ones), for the schedule of their log lines.
        self._unavailable: ConditionLog[int | str] = ConditionLog(
            max(REPEAT_INTERVAL_MS, config.reconnect_backoff_max_ms)
        )
        #: KIP-1242: connections to nodes the metadata named send the expected cluster and
        #: node id (ApiVersions v5); only when rebootstrapping is possible, as Java.
        self._cluster_check = (
            config.metadata_cluster_check_enable
            and config.metadata_recovery_strategy == "rebootstrap"
        )
        # KIP-909: with a positive bootstrap.resolve.timeout.ms, a bootstrap name must resolve
        # within it (with 0 the consumer checked them when it was built).
        self._bootstrap_resolution = BootstrapResolution(
            config.bootstrap_resolve_timeout_ms / 1000.0, self._clock.monotonic()
        )
        # Re-bootstrap (KIP-899 / KIP-1102).
        self._recovery = MetadataRecovery(
            rebootstrap=config.metadata_recovery_strategy == "rebootstrap",
            trigger_s=config.metadata_recovery_rebootstrap_trigger_ms / 1000.0,
        )
        self.supervision = Supervision(
            self,
            supervisor_spec or SupervisorSpec(),
            children,
            scheduler=scheduler,
            clock=clock,
            random=random,
            table=table,
        )

    # -- runtime and pykka hooks ---------------------------------------------------------------

    @classmethod
    def create_inbox(cls) -> Any:
        return SelectorInbox()

    def on_start(self) -> None:
        self._inbox.driver = self
        self._log.info(
            "network_started",
            bootstrap=[str(a) for a in self.config.bootstrap_servers],
            security_protocol=self.config.security_protocol,
        )
        if self._token_source is not None:
            self._token_source.start()
        if self._kerberos is not None:
            self._kerberos.start()
        try:
            self.supervision.start()
        except Exception as exc:
            if self._token_source is not None:
                self._token_source.close()
            if self._kerberos is not None:
                self._kerberos.close()
            self._shutdown_io(exc)
            self.supervision.owner_failed(exc)
            raise

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Send):
            with traced(message.trace_id):
                self._accept(message)
                self._pump(self._clock.monotonic())
            return None
        if isinstance(message, IoFailure):
            raise message.error
        if isinstance(message, Resolved):
            self._on_resolved(message)
            self._pump(self._clock.monotonic())
            return None
        # Every message is a wake-up: what became due (a sever, a deadline) happens first.
        self._pump(self._clock.monotonic())
        if isinstance(message, TokenChanged):
            return None  # the pump above started the connections that waited for it
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

    def _tell_self(self, message: Resolved) -> None:
        """A resolver thread's answer (any thread; raises ActorDeadError once stopped)."""
        self.actor_ref.tell(message)

    def _token_changed(self) -> None:
        """The token source's worker fetched: wake this actor (any thread; never raises)."""
        try:
            self.actor_ref.tell(TokenChanged())
        except pykka.ActorDeadError:
            pass

    def _may_connect(self) -> bool:
        """False while the OAUTHBEARER token source has no first outcome: an attempt would
        fail with "no token yet" and back off; the source's wake-up starts it instead. False
        too while the Kerberos login's warm-up (its tickets from the KDC) is under way: the
        connections then find them cached instead of asking the KDC on this thread."""
        source = self._token_source
        kerberos = self._kerberos
        return (source is None or source.settled()) and (kerberos is None or kerberos.settled())

    def on_stop(self) -> None:
        if self._token_source is not None:
            self._token_source.close()
        if self._kerberos is not None:
            self._kerberos.close()
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
                self._connector.socket_ready(node, mask, self._clock.monotonic())
            except KafkaError as exc:
                self._close_node(node, exc)
        self._pump(self._clock.monotonic())

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
        self._check_bootstrap_resolution(now)
        for item in self._unsent.take_due(now):
            self._deliver_response(item.node, item.event)
        self._route(now)
        may_connect = self._may_connect()
        for node in list(self._nodes.values()):
            if node.retired and self._forget_retired(node):
                continue
            conn = node.conn
            if conn.queued_count and conn.connect_delay(now) == 0.0 and may_connect:
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
            trim = conn.frame_pool_deadline()
            if trim is not None and now >= trim:
                conn.trim_frame_pool(now)
            idle = conn.idle_deadline()
            if idle is not None and now >= idle and node.transport is not None:
                if not node.transport.out:
                    self._close_idle(node, now)
                    continue
            self._connector.update_interest(node)

    def _next_deadline(self) -> float | None:
        may_connect = self._may_connect()  # if not, a due connect waits for TokenChanged
        times = [
            t
            for n in self._nodes.values()
            if (t := n.conn.next_deadline(may_connect=may_connect)) is not None
        ]
        times.extend(t for n in self._nodes.values() if (t := n.conn.idle_deadline()) is not None)
        times.extend(
            t for n in self._nodes.values() if (t := n.conn.frame_pool_deadline()) is not None
        )
        times.extend(self._unsent.deadlines())
        if self._unsent.has_any():
            waits = [] if not may_connect else [
                n.conn.backoff_until
                for n in self._nodes.values()
                if n.conn.state is ConnectionState.DISCONNECTED
            ]
            if waits:
                times.append(min(waits))
        recovery = self._recovery.deadline(self._brokers_known())
        if recovery is not None:
            times.append(recovery)
        resolution = self._bootstrap_resolution.deadline()
        if resolution is not None:
            times.append(resolution)
        return min(times) if times else None

    # -- nodes and their connections ---------------------------------------------------------

    def _node_sasl(self, node_id: int) -> MechanismFactory | None:
        for_host = self._sasl_for_host
        if for_host is None:
            return self._sasl

        def make() -> SaslMechanism:
            # The node's address as it is when the connection attempt authenticates.
            return for_host(self._nodes[node_id].address.host)

        return make

    def _new_node(self, node_id: int, address: BrokerAddress) -> Node:
        conn = NodeConnection(
            node_id, self.settings, random=self._random, sasl=self._node_sasl(node_id)
        )
        log = self._log.bind(node=node_id, address=str(address))
        return Node(node_id, address, conn, log)

    def _set_address(self, node_id: int, address: BrokerAddress) -> None:
        self._removed.discard(node_id)
        node = self._nodes.get(node_id)
        if node is None:
            node = self._nodes[node_id] = self._new_node(node_id, address)
            node.log.debug("node_learned")
            for pending in self._unsent.take_waiting(node_id):
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
        if self._connector.needs_resolving(node):
            self._connector.resolve(node)  # the connection goes on in _on_resolved
            return
        error = self._connector.open_socket(node)
        if error is not None:
            self._close_node(node, error)

    def _on_resolved(self, answer: Resolved) -> None:
        node = self._nodes.get(answer.node)
        if (
            node is None
            or node.resolving != answer.token
            or node.conn.state is not ConnectionState.CONNECTING
            or node.transport is not None
        ):
            return  # an older attempt's answer (it timed out, or the node was forgotten)
        if node.node_id < 0 and self._bootstrap_resolution.watching:
            if answer.error is None and answer.addresses:
                self._bootstrap_resolution.resolved()
            else:
                self._bootstrap_resolution.failed(f"{node.address}: {answer.error or 'no address'}")
        error = self._connector.resolved(node, answer)
        if error is not None:
            self._close_node(node, error)

    def _close_idle(self, node: Node, now: float) -> None:
        """connections.max.idle.ms passed with nothing queued or in flight: close the
        connection; the next request for the node opens a new one (no backoff)."""
        self._connector.drop_transport(node)
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
                self._unsent.add_any(pending)
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
            self._connector.drop_transport(node)
            node.conn.close(DisconnectedError(f"Node {node.node_id} removed", node=node.node_id))
            del self._nodes[node.node_id]
            self._unavailable.forget(node.node_id)
            node.log.debug("node_forgotten")
        return True

    def _close_node(self, node: Node, error: KafkaError) -> None:
        """Close ``node``'s transport because of ``error`` and fail what must fail."""
        if error.node is None:
            error.node = node.node_id
        self._connector.drop_transport(node)
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
                self._unsent.add_any(pending)
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
            for pending in self._unsent.take_any():
                if cast(Send, pending.token).node == ANY_NODE or node.node_id < 0:
                    self._fail(pending, error, node.node_id)
                else:
                    self._unsent.add_any(pending)
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
        if isinstance(error, RebootstrapRequiredError) and self._recovery.rebootstrap:
            # KIP-1242: the address answers for another cluster or node than the metadata said
            # (ApiVersions v5): what is known of the cluster is stale, start again.
            expected = conn.expected_cluster
            self._do_rebootstrap(
                lost_at,
                f"node {node.node_id} ({node.address}) answered REBOOTSTRAP_REQUIRED"
                + (f": it is not node {expected[1]} of cluster {expected[0]}" if expected else ""),
            )

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

    # -- requests: from acceptance to the reply ---------------------------------------------

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
        if pending.api_key == ApiKey.METADATA:
            self._recovery.requested(now)
        self._log.debug(
            "request_accepted",
            api=api_label(pending.api_key),
            version=int(send.request.__version__),
            node=node,
            request_id=send.request_id,
        )
        if node in (ANY_NODE, BOOTSTRAP_NODE):
            self._unsent.add_any(pending)
        elif node == COORDINATOR_NODE:
            self._fail(
                pending,
                FatalError("COORDINATOR_NODE must be resolved to a node id by the sender"),
                node,
            )
        elif node in self._removed:
            self._fail(
                pending,
                DisconnectedError(f"Node {node} is not in the latest Metadata response", node=node),
                node,
            )
        elif node in self._nodes:
            self._nodes[node].conn.enqueue(pending)
        else:
            self._unsent.wait_for(node, pending)

    def _expire(self, now: float) -> None:
        for node in list(self._nodes.values()):
            events, broken = node.conn.check_timeouts(now)
            self._handle(node, events)
            if broken is not None:
                self._close_node(node, broken)
        unsent, dropped = self._unsent.expire(now)
        for pending, kind in unsent:
            self._fail(pending, self._unsent_timeout(pending, kind), kind)
        for pending in dropped:
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

    def _route(self, now: float) -> None:
        """Give ANY_NODE / BOOTSTRAP_NODE requests to a ready node, or start a connection."""
        if not self._unsent.has_any():
            return
        real = [n for n in self._nodes.values() if n.node_id >= 0 and not n.retired]
        boot = [self._nodes[i] for i in self._bootstrap]
        keep: deque[PendingRequest] = deque()
        connect_started = False
        for pending in self._unsent.take_any():
            kind = cast(Send, pending.token).node
            if kind == BOOTSTRAP_NODE:
                candidates = boot
            elif real and not self._recovery.rebootstrap:
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
            if not self._may_connect():
                continue
            for node in candidates:
                if node.conn.connect_delay(now) == 0.0:
                    self._connect(node, now)
                    connect_started = True
                    break
        for pending in keep:
            self._unsent.add_any(pending)

    def _handle(self, node: Node, events: Iterable[Event]) -> None:
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
                    authenticated=self._sasl is not None or self._sasl_for_host is not None,
                )
                node.down_announced = False
                if self._on_versions is not None:
                    self._on_versions(event.versions)
                self._node_available(node)
            elif isinstance(event, Broken):
                self._close_node(node, event.error)
            elif isinstance(event, Reauthenticated):
                self._record(node, "reauthenticated")
                node.log.debug(
                    "node_reauthenticated", session_lifetime_ms=event.session_lifetime_ms
                )

    def _completed(self, node: Node, event: Completed) -> None:
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
            if throttle_ms > 0 and version >= CLIENT_THROTTLES_FROM.get(api, 0):
                now = self._clock.monotonic()
                node.conn.throttle(now, throttle_ms)
                self._events.append(
                    ConnectionEvent(node.node_id, "throttled", now, None, throttle_ms / 1000.0)
                )
                node.log.debug("node_throttled", api=api_label(api), throttle_time_ms=throttle_ms)
        faults = self.faults
        if faults is not None:
            fault = faults.on_response(api, node.node_id)
            if fault is not None:
                with traced(pending.trace_id):
                    node.log.info("fault_injected", api=api_name(api), fault=repr(fault))
                if isinstance(fault, Delay):
                    self._unsent.delay(
                        self._clock.monotonic() + fault.seconds, node.node_id, event
                    )
                    return
                if isinstance(fault, Drop):
                    self._unsent.drop(pending)
                    return
                if isinstance(fault, ErrorCode):
                    replaced = with_error_code(event.response, fault.code)
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
            self._recovery.answered()
            if self._unavailable:
                self._metadata_answered()
        with traced(pending.trace_id):
            self._log.debug(
                "response_received",
                node=node_id,
                api=api_label(pending.api_key),
                correlation_id=event.correlation_id,
                request_id=send.request_id,
            )
            reply(
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
                api=api_label(api),
                error=str(error),
                retriable=error.retriable,
                request_id=send.request_id,
            )
            reply(
                send.reply_to,
                RequestFailed(send.request_id, node, api, error, pending.trace_id),
                self._log,
            )

    # -- metadata: the brokers it names, and recovery (KIP-899 / KIP-1102) -----------------

    def _learn(self, response: Any) -> None:
        """The brokers of a Metadata response are the cluster's nodes (Java's ``Metadata``
        builds its node set from the latest response only): learn them, and retire the nodes
        an earlier response named that this one leaves out (a decommissioned or fenced broker,
        the old cluster after a move). An empty broker list changes nothing."""
        brokers = getattr(response, "brokers", None)
        if not brokers:
            return
        named: set[int] = set()
        cluster_id = getattr(response, "cluster_id", None)
        for broker in brokers:
            node_id = int(broker.node_id)
            named.add(node_id)
            self._set_address(node_id, BrokerAddress(str(broker.host), int(broker.port)))
            node = self._nodes[node_id]
            node.in_metadata = True
            if self._cluster_check and cluster_id:
                # KIP-1242: the next connection to it says which cluster and node it expects.
                node.conn.expected_cluster = (str(cluster_id), node_id)
        for node in [n for n in self._nodes.values() if n.in_metadata and n.node_id not in named]:
            self._retire(node)

    def _brokers_known(self) -> bool:
        """A Metadata response named a broker (else there is nothing to recover from)."""
        return any(n >= 0 for n in self._nodes)

    def _metadata_answered(self) -> None:
        """A Metadata response came: the recovery conditions (if reported) have ended."""
        now_ms = round(self._clock.monotonic() * 1000)
        for key in (REBOOTSTRAP, NO_RECOVERY):
            if (cleared := self._unavailable.cleared(key, now_ms)) is not None:
                self._log.info("metadata_recovered", after=key, **cleared.fields())

    def _check_bootstrap_resolution(self, now: float) -> None:
        """KIP-909: no bootstrap name resolved within ``bootstrap.resolve.timeout.ms``: the
        client fails for good; every request waiting for any node, and every later one, fails
        with the BootstrapResolutionError (the consumer raises it from every call)."""
        resolution = self._bootstrap_resolution
        error = resolution.expired(now, self.config.bootstrap_servers)
        if error is not None:
            self._log.error("bootstrap_resolution_failed", error=str(error))
            for node in [n for n in self._nodes.values() if n.node_id < 0]:
                for pending in node.conn.take_queued():
                    self._fail(pending, error, node.node_id)
        if resolution.failure is not None and self._unsent.has_any():
            for pending in self._unsent.take_any():
                self._fail(pending, resolution.failure, ANY_NODE)

    def _maybe_recover_metadata(self, now: float) -> None:
        """No Metadata response for ``metadata.recovery.rebootstrap.trigger.ms`` while one is
        wanted: rebootstrap, or (strategy ``none``) fail the waiting Metadata requests."""
        waited = self._recovery.overdue(now, self._brokers_known())
        if waited is None:
            return
        waited_ms = round(waited * 1000)
        if self._recovery.rebootstrap:
            self._do_rebootstrap(now, f"no Metadata response for {waited_ms} ms")
            return
        self._recovery.restart(now)  # reported once per trigger period
        error = BrokersUnreachableError(
            f"No Metadata response from any known broker for {waited_ms} ms "
            "(metadata.recovery.rebootstrap.trigger.ms) and metadata.recovery.strategy=none: "
            "the client does not go back to the bootstrap servers; known brokers: "
            + ", ".join(sorted(str(n.address) for n in self._nodes.values() if n.node_id >= 0))
        )
        if (report := self._unavailable.occurred(NO_RECOVERY, round(now * 1000))) is not None:
            self._log.warning("metadata_recovery_impossible", error=str(error), **report.fields())
        for pending in self._unsent.take_any():
            if pending.api_key == ApiKey.METADATA:
                self._fail(pending, error, ANY_NODE)
            else:
                self._unsent.add_any(pending)

    def _do_rebootstrap(self, now: float, reason: str) -> None:
        """Forget every known broker and start again from the bootstrap servers."""
        self._recovery.restart(now)  # the next trigger counts from here
        forgotten = [n for n in self._nodes.values() if n.node_id >= 0]
        if (report := self._unavailable.occurred(REBOOTSTRAP, round(now * 1000))) is not None:
            self._log.warning(
                "rebootstrap",
                reason=reason,
                forgotten=sorted(f"{n.node_id}@{n.address}" for n in forgotten),
                bootstrap=[str(a) for a in self.config.bootstrap_servers],
                **report.fields(),
            )
        self._events.append(ConnectionEvent(BOOTSTRAP_NODE, "rebootstrap", now, reason, None))
        for node in forgotten:
            error = DisconnectedError(f"Rebootstrapping ({reason})", node=node.node_id)
            self._connector.drop_transport(node)
            for pending in node.conn.take_queued():
                if cast(Send, pending.token).node in (ANY_NODE, BOOTSTRAP_NODE):
                    self._unsent.add_any(pending)
                else:
                    self._fail(pending, error, node.node_id)
            for event in node.conn.close(error):
                if isinstance(event, Failed):
                    self._fail(event.request, event.error, node.node_id)
            del self._nodes[node.node_id]

    # -- shutdown --------------------------------------------------------------------------------

    def _shutdown_io(self, cause: BaseException | None) -> None:
        if self._closed:
            return
        self._closed = True
        self._inbox.driver = None
        self._connector.close()
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
                self._connector.transport_closed()
        if self.connection_states is not None:
            self.connection_states.clear()  # this actor's connections are gone
        for pending, node_id in self._unsent.take_all():
            target = cast(Send, pending.token).node if node_id is None else node_id
            self._fail(pending, error, target)
        self._inbox.close()
        self._log.info("network_stopped")
