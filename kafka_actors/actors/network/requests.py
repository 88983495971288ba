"""The NetworkActor's requests: accepting, routing, deadlines, and answering them.

Owns (as :class:`NetworkRequests`, a part of the NetworkActor; see :mod:`.state`): a
:class:`~kafka_actors.actors.network.messages.Send` from acceptance to its reply: the
requests waiting for any node or for a node whose address is unknown, routing to the least
loaded ready node (or starting a connection), deadlines of requests not sent yet, the events
a connection reports (completed, failed, ready, broken, re-authenticated), KIP-219
throttling, fault injection on responses (delay, drop, error code), and the replies
(:class:`Response` / :class:`RequestFailed`, each logged inside its trace). May touch: the
reply targets (actor refs, futures, callables), the fault injector, the metrics.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, Final, cast

import pykka
from kio.schema.errors import ErrorCode as KioErrorCode

from kafka_actors.actors.network.messages import (
    BOOTSTRAP_NODE,
    ConnectionEvent,
    RequestFailed,
    Response,
    Send,
)
from kafka_actors.actors.network.state import Delayed, NetworkBase, Node
from kafka_actors.errors import (
    ConsumerClosedError,
    DisconnectedError,
    FatalError,
    KafkaError,
    KafkaTimeoutError,
    RebootstrapRequiredError,
    error_for_code,
)
from kafka_actors.log import traced
from kafka_actors.protocol.connection.node import (
    Broken,
    Completed,
    Event,
    Failed,
    PendingRequest,
    Ready,
    Reauthenticated,
)
from kafka_actors.protocol.messages import ANY_NODE, COORDINATOR_NODE
from kafka_actors.protocol.wire.apis import ApiKey, api_name
from kafka_actors.runtime import AlreadySet
from kafka_actors.supervisors import Delay, Drop, ErrorCode

__all__ = ["NetworkRequests"]


class NetworkRequests(NetworkBase):
    """The request part of the NetworkActor (module docstring)."""

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
        elif node in self._removed:
            self._fail(
                pending,
                DisconnectedError(f"Node {node} is not in the latest Metadata response", node=node),
                node,
            )
        elif node in self._nodes:
            self._nodes[node].conn.enqueue(pending)
        else:
            self._waiting.setdefault(node, deque()).append(pending)

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

    def _route(self, now: float) -> None:
        """Give ANY_NODE / BOOTSTRAP_NODE requests to a ready node, or start a connection."""
        if not self._unassigned:
            return
        real = [n for n in self._nodes.values() if n.node_id >= 0 and not n.retired]
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
            if not self._may_connect():
                continue
            for node in candidates:
                if node.conn.connect_delay(now) == 0.0:
                    self._connect(node, now)
                    connect_started = True
                    break
        self._unassigned = keep

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
                    authenticated=self._sasl is not None,
                )
                node.down_announced = False
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
                        Delayed(
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
            if self._unavailable:
                self._metadata_answered()
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
