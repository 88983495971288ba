"""The NetworkActor's messages and the blocking helper for code outside the actor system.

Owns: :class:`Send` and its replies (:class:`Response`, :class:`RequestFailed`), the asks for
diagnostics (:class:`GetConnectionEvents`, :class:`GetNodeStates`, :class:`GetSocketBuffers`)
and the event they answer with (:class:`ConnectionEvent`), :class:`UpdateNodes`, the bootstrap
pseudo node ids, the actor's internal messages (:class:`Resolved`, :class:`IoFailure`) and
:func:`request`. May touch: pykka refs and futures (``request`` only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, cast

import pykka

from kafka_actors.errors import KafkaError, KafkaTimeoutError
from kafka_actors.protocol.messages import ANY_NODE

__all__ = [
    "BOOTSTRAP_NODE",
    "ConnectionEvent",
    "GetConnectionEvents",
    "GetNodeStates",
    "GetSocketBuffers",
    "IoFailure",
    "RequestFailed",
    "Resolved",
    "Response",
    "Send",
    "UpdateNodes",
    "bootstrap_node_id",
    "request",
]


#: ``Send.node`` for "any bootstrap server" (tried in turn).
BOOTSTRAP_NODE: Final = -3


_BOOTSTRAP_BASE: Final = -1000


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
class Resolved:
    """A resolver thread's answer for ``node`` (internal)."""

    node: int
    token: int
    addresses: tuple[tuple[Any, str], ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class TokenChanged:
    """The OAUTHBEARER token source fetched (a token or an error): connections waiting for
    its first outcome may start (internal; told by the source's worker thread)."""


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
    ``throttled`` (KIP-219), ``reauthenticated`` (KIP-368, in place), ``removed`` (a newer
    Metadata response left the node out). ``backoff`` is the
    reconnect backoff chosen after a failure, or the throttle time (seconds).
    """

    node: int
    kind: str
    at: float
    error: str | None = None
    backoff: float | None = None


@dataclass(frozen=True, slots=True)
class IoFailure:
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
