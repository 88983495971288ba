"""The NetworkActor: every broker connection of a consumer, and the request managers' supervisor.

Owns: the sockets (the only code in kafka-actors that touches them), one
:class:`~kafka_actors.protocol.connection.node.NodeConnection` per node (bootstrap servers as pseudo
nodes), the map node id → address learned from Metadata responses, the requests other actors
send (:class:`Send`) and their replies (:class:`Response` / :class:`RequestFailed`), fault
injection at the network level, and the supervision of its child actors. May touch: sockets,
``selectors``, ``ssl`` (through the TLS channel), the protocol package, the supervisors
package, structlog.

Where things are
----------------
One actor, one thread, one state. The actor owns the node registry and the life of each
request; the objects it composes own the rest of its state, a module each:

* :mod:`.actor`: :class:`NetworkActor`: construction, the pykka hooks, the nodes and what
  their connections do, routing and answering requests, metadata recovery, the I/O round,
  the deadlines, the shutdown.
* :mod:`.connections`: :class:`~.connections.Connector`: DNS, sockets, TLS, reading/writing,
  the selector registrations.
* :mod:`.unsent`: :class:`~.unsent.UnsentRequests`: the requests on no connection (for any
  node, for a node whose address is unknown, held back or dropped by fault injection).
* :mod:`.rebootstrap`: :class:`~.rebootstrap.MetadataRecovery`: since when a Metadata request
  waits (KIP-899 / KIP-1102).
* :mod:`.requests`: KIP-219 throttling versions, replies, error-code injection.
* :mod:`.nodes`: :class:`~.nodes.Node`, one node as the actor knows it.
* :mod:`.messages`: ``Send``, ``Response``, ``RequestFailed`` and the other messages;
  :func:`request`.
* :mod:`.inbox`: :class:`SelectorInbox`, the mailbox that also waits on the sockets.
* :mod:`.transport`: one socket (optionally TLS); name resolution.
* :mod:`.security`: the default SASL / TLS factories from the configuration.
* The per-node connection state machine is pure and lives in
  :mod:`kafka_actors.protocol.connection.node`; the pykka internals the mailbox relies on, in
  :mod:`kafka_actors.runtime`.

How it wakes up (no busy polling, no sleep loops)
-------------------------------------------------
The actor is an ordinary pykka ``ThreadingActor`` whose *mailbox* (given by the
``create_inbox`` hook of :class:`~kafka_actors.runtime.RuntimeActor`) is a
:class:`SelectorInbox`: a ``queue.Queue`` that also owns a ``selectors`` selector and a
socketpair. ``put`` (what ``tell``/``ask`` call, on the sender's thread) enqueues the envelope,
then writes one byte to the socketpair unless a wake-up is already pending. ``get`` (what
pykka's actor loop calls, on the actor's thread) returns a queued envelope at once if there is
one; otherwise it blocks in ``selector.select(timeout)`` on the broker sockets *and* the
socketpair, with ``timeout`` the time to the actor's next deadline (a request timeout, a
connection setup timeout, the end of a reconnect backoff, a delayed response), or forever when
nothing is pending. Socket readiness and expired deadlines are handled right there, on the
actor thread, before ``get`` looks at the queue again. So pykka's own loop, ``ask``/``tell``,
``stop`` and the supervision machinery (the runtime's hooks around the loop) stay
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
backing off, wait until it is ready or their deadline passes. As Java's ``Metadata``, the
latest Metadata response decides which brokers exist: a node an earlier response named and a
newer one leaves out (decommissioned, fenced, the old cluster after a move) is removed (event
``removed``): it is no candidate for any node, requests for any node queued on it are routed
again, requests for it fail at once with a retriable DisconnectedError, and its connection is
closed once its in-flight requests are answered or failed; a later response naming it brings
it back. Nodes only told with :class:`UpdateNodes` (coordinator connections) are not affected.

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

from kafka_actors.actors.network.actor import NetworkActor
from kafka_actors.actors.network.inbox import SelectorInbox
from kafka_actors.actors.network.messages import (
    BOOTSTRAP_NODE,
    ConnectionEvent,
    GetConnectionEvents,
    GetNodeStates,
    GetSocketBuffers,
    RequestFailed,
    Response,
    Send,
    UpdateNodes,
    bootstrap_node_id,
    request,
)
from kafka_actors.protocol.messages import ANY_NODE

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
