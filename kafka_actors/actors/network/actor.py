"""The NetworkActor itself: its parts assembled, the pykka hooks, and the I/O round.

Owns: :class:`NetworkActor` (construction, ``on_start`` / ``on_receive`` / ``on_stop`` /
``on_failure``, the selector driver ``io_timeout`` / ``on_io``, the I/O round ``_pump``, the
next deadline, and the shutdown that fails whatever is still pending). Its other code is in
its parts: :mod:`.connections`, :mod:`.requests`, :mod:`.rebootstrap` (shared state and the
calls between them: :mod:`.state`). May touch: everything its parts may, the supervisors
package (it supervises the request managers).
"""

from __future__ import annotations

import heapq
import itertools
import random as _random
import selectors
import socket
from collections import deque
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, cast

import pykka

from kafka_actors.actors.network.connections import NetworkConnections
from kafka_actors.actors.network.inbox import SelectorInbox
from kafka_actors.actors.network.messages import (
    GetConnectionEvents,
    GetNodeStates,
    GetSocketBuffers,
    IoFailure,
    Resolved,
    Send,
    TokenChanged,
    UpdateNodes,
    bootstrap_node_id,
)
from kafka_actors.actors.network.rebootstrap import NetworkRebootstrap
from kafka_actors.actors.network.requests import NetworkRequests
from kafka_actors.actors.network.security import default_sasl, default_tls, oauthbearer_sasl
from kafka_actors.actors.network.status import ConnectionStates
from kafka_actors.actors.network.transport import Resolver, system_resolver
from kafka_actors.clock import Clock, Scheduler, SystemClock
from kafka_actors.config import BrokerAddress, ConsumerConfig
from kafka_actors.errors import ConsumerClosedError, DisconnectedError, KafkaError
from kafka_actors.log import get_logger, traced
from kafka_actors.metrics import ConsumerMetrics
from kafka_actors.protocol.condition_log import REPEAT_INTERVAL_MS, ConditionLog
from kafka_actors.protocol.connection.node import (
    ConnectionSettings,
    ConnectionState,
    Failed,
    MechanismFactory,
    PendingRequest,
)
from kafka_actors.protocol.connection.tls import TlsChannel
from kafka_actors.supervisors import (
    ChildContext,
    ChildSpec,
    ChildTable,
    FaultInjector,
    Supervision,
    SupervisorEscalation,
    SupervisorSpec,
)

__all__ = ["NetworkActor"]


class NetworkActor(NetworkRequests, NetworkRebootstrap, NetworkConnections):
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
    ) -> None:
        super().__init__(context=context, name=name, faults=faults)
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
        self._token_source = None
        if sasl is None and config.sasl_enabled:
            if config.sasl_mechanism == "OAUTHBEARER":
                # (imported here: the token fetcher and urllib are for OAUTHBEARER only)
                from kafka_actors.oauth import token_source_from_config

                self._token_source = token_source_from_config(
                    config, on_change=self._token_changed
                )
                sasl = oauthbearer_sasl(config, self._token_source)
            else:
                sasl = default_sasl(config)
        if tls is None and config.ssl_enabled:
            tls = default_tls(config)
        self._sasl = sasl
        self._tls = tls
        self._resolver = resolver or system_resolver
        self._canonical_bootstrap = (
            config.client_dns_lookup == "resolve_canonical_bootstrap_servers_only"
        )
        self._resolver_pool = None
        self._inbox = cast(SelectorInbox, self.actor_inbox)
        if metrics is not None:
            self._inbox.on_wait = metrics.io_waited
        self._nodes = {}
        self._bootstrap = []
        for index, address in enumerate(config.bootstrap_servers):
            node_id = bootstrap_node_id(index)
            self._bootstrap.append(node_id)
            self._nodes[node_id] = self._new_node(node_id, address)
        self._unassigned = deque()
        self._waiting = {}
        self._delayed = []
        self._dropped = []
        self._seq = itertools.count()
        self._events = deque(maxlen=event_log_size)
        self._closed = False
        self._unavailable = ConditionLog(max(REPEAT_INTERVAL_MS, config.reconnect_backoff_max_ms))
        self._removed = set()
        # Re-bootstrap (KIP-899 / KIP-1102): since when a Metadata request waits for an
        # answer (None: the last one was answered).
        self._rebootstrap = config.metadata_recovery_strategy == "rebootstrap"
        self._rebootstrap_trigger = config.metadata_recovery_rebootstrap_trigger_ms / 1000.0
        self._metadata_wanted_since = None
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

    def _token_changed(self) -> None:
        """The token source's worker fetched: wake this actor (any thread; never raises)."""
        try:
            self.actor_ref.tell(TokenChanged())
        except pykka.ActorDeadError:
            pass

    def _may_connect(self) -> bool:
        """False while the OAUTHBEARER token source has no first outcome: an attempt would
        fail with "no token yet" and back off; the source's wake-up starts it instead."""
        source = self._token_source
        return source is None or source.settled()

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
            idle = conn.idle_deadline()
            if idle is not None and now >= idle and node.transport is not None:
                if not node.transport.out:
                    self._close_idle(node, now)
                    continue
            self._update_interest(node)

    def _next_deadline(self) -> float | None:
        may_connect = self._may_connect()  # if not, a due connect waits for TokenChanged
        times = [
            t
            for n in self._nodes.values()
            if (t := n.conn.next_deadline(may_connect=may_connect)) is not None
        ]
        times.extend(t for n in self._nodes.values() if (t := n.conn.idle_deadline()) is not None)
        if self._delayed:
            times.append(self._delayed[0].due)
        for pending in self._dropped:
            times.append(pending.deadline)
        if self._unassigned:
            times.extend(p.deadline for p in self._unassigned)
            waits = [] if not may_connect else [
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
        if self.connection_states is not None:
            self.connection_states.clear()  # this actor's connections are gone
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
