"""The facade: API calls in as application events, background events out to the user.

Owns:

* :class:`FacadeActor`: the actor the request managers send their background events to
  (rebalance callbacks needed, errors for the user); it queues them in the shared context and
  wakes the application threads. It holds no state of its own, so a restart loses nothing.
* :class:`Facade`: the application side, used by the consumer core
  (:mod:`kafka_actors.core`) and its front ends from any thread. It sends the events of API
  calls (each with a ``concurrent.futures.Future`` and a deadline), waits for a future (never
  past the deadline, interrupted by ``wakeup()`` and by a fatal supervision error), runs the
  rebalance listener on the polling thread, and raises each error at the call that caused it.
* :class:`RebalanceReply`: the deferred acknowledgement of a rebalance callback.

Rebalance callbacks as replies
------------------------------
The membership actor publishes ``InvokeRevoked`` / ``InvokeAssigned`` / ``InvokeLost``; the
facade runs the listener method on the thread that calls ``poll()`` (or ``unsubscribe()`` /
``close()``), as Java does. When the method returns, the callback is acknowledged and the
reconciliation continues (with ``rebalance.safe.commits``, a revocation's acknowledgement
further waits until the records handed out for the revoked partitions are committed: see
:mod:`kafka_actors.actors.safe_commits`). A listener may instead *defer* its acknowledgement:

* call ``consumer.defer_rebalance_ack()`` inside the callback: it returns the
  :class:`RebalanceReply` of the running callback; return at once, finish the work anywhere
  (another thread, an event loop), then call ``reply.ack()`` (or ``reply.ack(error)``);
* or return a ``concurrent.futures.Future`` from the callback: its completion acknowledges
  (its exception, if any, is the callback's error).

Reconciliation waits for the acknowledgement, bounded by the rebalance timeout
(``max.poll.interval.ms``): past it the callback counts as failed with KafkaTimeoutError. While
it waits, every API call from any thread works (it is just another message): committing from
another thread while a revocation is pending is the point of it (KIP-944). Records of
partitions being revoked are not returned by ``poll()`` meanwhile.

May touch: the shared context (SubscriptionState, background queue, signal), the actors by name
through the context, the user's listener and deserializers.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kafka_actors.actors.context import ConsumerContext, Routed
from kafka_actors.actors.events import CallbackCompletedEvent
from kafka_actors.errors import (
    BootstrapResolutionError,
    CallTimeout,
    ConsumerClosedError,
    FatalConsumerError,
    KafkaError,
    KafkaTimeoutError,
    WakeupError,
)
from kafka_actors.log import get_logger, traced
from kafka_actors.protocol.group import events as group_events
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.structs import ConsumerRebalanceListener, RebalanceReply
from kafka_actors.supervisors import (
    ChildContext,
    SupervisedActor,
    SupervisorFatalError,
)

__all__ = [
    "AsyncCommitDone",
    "Facade",
    "FacadeActor",
]


@dataclass(frozen=True, slots=True)
class AsyncCommitDone:
    """A commit_async completed: its callback runs on the next poll / commit_sync."""

    callback: Callable[[Mapping[TopicPartition, Any], BaseException | None], Any]
    future: concurrent.futures.Future[Any]
    offsets: Mapping[TopicPartition, Any] | None


class FacadeActor(SupervisedActor):
    """Receives background events and hands them to the application threads."""

    def __init__(self, ctx: ConsumerContext, *, context: ChildContext) -> None:
        super().__init__(context=context)
        self.ctx = ctx
        self.log = get_logger("facade", client_id=ctx.config.client_id)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Routed):
            with traced(message.trace_id):
                self.log.debug("background_event", kind=type(message.event).__name__)
                self.ctx.background.append(message.event)
                self.ctx.signal.notify()
            return None
        return super().on_receive(message)


_INT32_MAX = 2**31 - 1


def partition_names(partitions: Any) -> str:
    """``orders-0, orders-1`` (sorted), or ``none``."""
    names = sorted(str(tp) for tp in partitions)
    return ", ".join(names) if names else "none"


class Facade:
    """The application side (see the module docstring). Thread-safe."""

    def __init__(
        self,
        ctx: ConsumerContext,
        fatal: Callable[[], SupervisorFatalError | None],
    ) -> None:
        self.ctx = ctx
        self._fatal = fatal
        self.log = get_logger("facade", client_id=ctx.config.client_id)
        self.listener: ConsumerRebalanceListener | None = None
        self._wakeup = threading.Event()
        self._closed = False
        self._errors: list[BaseException] = []
        self._fatal_error: BaseException | None = None
        # The broker refused the consumer group protocol (KIP-848): the group membership is
        # over, the consumer is not (subscribe() and poll() while subscribed raise it again;
        # unsubscribe(), assign() and close() work), as against a broker without the API.
        self.group_protocol_error: KafkaError | None = None
        self._callback_lock = threading.RLock()
        self._current: threading.local = threading.local()
        self._deferred: dict[int, RebalanceReply] = {}

    # -- state -------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def mark_closed(self) -> None:
        self._closed = True
        self.ctx.signal.notify()

    def ensure_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError("This consumer has already been closed.")
        self.raise_if_fatal()

    @property
    def fatal_error(self) -> BaseException | None:
        """The error every call raises once the consumer failed for good (None before)."""
        return self._fatal_error

    def raise_if_fatal(self) -> None:
        if self._fatal_error is not None:
            raise self._fatal_error
        fatal = self._fatal()
        if fatal is not None:
            error = FatalConsumerError(f"The consumer failed and cannot continue: {fatal}")
            error.__cause__ = fatal
            self._fatal_error = error
            raise error

    # -- wakeup ------------------------------------------------------------------------------

    def wakeup(self) -> None:
        self._wakeup.set()
        self.ctx.signal.notify()

    def wakeup_pending(self) -> bool:
        """Whether ``wakeup()`` was called and no call raised WakeupError for it yet."""
        return self._wakeup.is_set()

    def check_wakeup(self) -> None:
        if self._wakeup.is_set():
            self._wakeup.clear()
            raise WakeupError("wakeup() was called")

    # -- sending and waiting -------------------------------------------------------------------

    @staticmethod
    def deadline(timeout: float | None, default_ms: int) -> float:
        seconds = default_ms / 1000.0 if timeout is None else max(0.0, float(timeout))
        return time.monotonic() + seconds

    # -- what a call waits for (CallTimeout descriptions) -------------------------------------

    def describe_coordinator(self) -> str:
        """``the group coordinator (node 1 at host:9092)`` or that it is not known yet."""
        connection = self.ctx.coordinator_id
        if connection is None:
            return "the group coordinator (not known yet: FindCoordinator pending)"
        node = _INT32_MAX - connection if connection > _INT32_MAX // 2 else connection
        return f"the group coordinator (node {node}{self._at(node)})"

    def describe_leaders(self, partitions: Any, api: str) -> str:
        """``ListOffsets to node 1`` (per leader), or which partitions have no known leader."""
        cluster = self.ctx.cluster
        by_node: dict[int, list[TopicPartition]] = {}
        unknown: list[TopicPartition] = []
        for tp in sorted(partitions, key=str):
            found = cluster.leader_for(tp) if cluster is not None else None
            if found is None or found[0] is None or found[0] < 0:
                unknown.append(tp)
            else:
                by_node.setdefault(found[0], []).append(tp)
        parts = []
        if len(by_node) == 1 and not unknown:
            (node,) = by_node
            return f"{api} to node {node}{self._at(node)}"
        for node, tps in sorted(by_node.items()):
            parts.append(f"{api} to node {node}{self._at(node)} for {partition_names(tps)}")
        if unknown:
            parts.append(f"no known leader for {partition_names(unknown)} (Metadata)")
        return "; ".join(parts) if parts else f"{api}"

    def describe_brokers(self) -> str:
        """The brokers Metadata named, or the bootstrap servers when none answered yet."""
        cluster = self.ctx.cluster
        nodes = [] if cluster is None else sorted(cluster.nodes.values(), key=lambda n: n.node_id)
        if nodes:
            return "brokers " + ", ".join(f"{n.node_id} at {n.host}:{n.port}" for n in nodes)
        servers = ", ".join(str(a) for a in self.ctx.config.bootstrap_servers)
        return f"bootstrap.servers {servers} (no broker answered yet)"

    def describe_position(self, tp: TopicPartition) -> str:
        """What the position of ``tp`` waits for: its committed offset, an offset reset, or
        the validation of its position after a leader change."""
        state = self.ctx.subscriptions.partition_state(tp)
        if state is not None and state.awaiting_reset:
            strategy = state.reset_strategy
            kind = f"{strategy.kind.value} " if strategy is not None else ""
            return f"the {kind}offset reset of {tp} ({self.describe_leaders([tp], 'ListOffsets')})"
        if state is not None and state.awaiting_validation:
            return (
                f"the validation of the position of {tp} after a leader change "
                f"({self.describe_leaders([tp], 'OffsetForLeaderEpoch')})"
            )
        if self.ctx.config.group_id is not None:
            return f"the committed offset of {tp} (OffsetFetch to {self.describe_coordinator()})"
        return f"the initial position of {tp} ({self.describe_leaders([tp], 'ListOffsets')})"

    # -- the CallTimeout of each blocking call -------------------------------------------------

    def _default_ms(self) -> int:
        return self.ctx.config.default_api_timeout_ms

    def commit_timeout(self, call: str, partitions: Any, timeout: float | None) -> CallTimeout:
        """commit_sync / commit (asyncio) / the commit on close; ``partitions`` None: all
        consumed positions."""
        names = "the consumed positions" if partitions is None else partition_names(partitions)
        label = "all consumed" if partitions is None else names
        return CallTimeout(
            f"{call}({label})",
            timeout,
            self._default_ms(),
            lambda: f"the OffsetCommit of {names} to {self.describe_coordinator()}",
        )

    def committed_timeout(self, partitions: Any, timeout: float | None) -> CallTimeout:
        names = partition_names(partitions)
        return CallTimeout(
            f"committed({names})",
            timeout,
            self._default_ms(),
            lambda: (
                f"the committed offsets of {names} (OffsetFetch to {self.describe_coordinator()})"
            ),
        )

    def position_timeout(self, tp: TopicPartition, timeout: float | None) -> CallTimeout:
        return CallTimeout(
            f"position({tp})", timeout, self._default_ms(), lambda: self.describe_position(tp)
        )

    def list_offsets_timeout(
        self, kind: str, partitions: Any, timeout: float | None
    ) -> CallTimeout:
        """``kind``: the call's name (beginning_offsets, end_offsets, offsets_for_times)."""
        names = partition_names(partitions)
        which = {"beginning_offsets": "beginning", "end_offsets": "end"}.get(kind, "timestamp")
        return CallTimeout(
            f"{kind}({names})",
            timeout,
            self._default_ms(),
            lambda: (
                f"the {which} offsets of {names} "
                f"({self.describe_leaders(partitions, 'ListOffsets')})"
            ),
        )

    def metadata_timeout(self, topics: Any, timeout: float | None) -> CallTimeout:
        if topics is None:
            call, what = "list_topics()", "all topics"
        else:
            listed = ", ".join(sorted(topics))
            call, what = f"partitions_for({listed})", f"topic {listed}"
        return CallTimeout(
            call,
            timeout,
            self._default_ms(),
            lambda: f"the metadata of {what} (Metadata to any of {self.describe_brokers()})",
        )

    def leave_timeout(self, timeout: float | None, default_ms: int) -> CallTimeout:
        api = "ConsumerGroupHeartbeat" if self.ctx.group_protocol == "consumer" else "LeaveGroup"
        return CallTimeout(
            "close()",
            timeout,
            default_ms,
            lambda: f"the group leave ({api} to {self.describe_coordinator()})",
            key="the default close timeout",
        )

    def _at(self, node: int) -> str:
        cluster = self.ctx.cluster
        found = cluster.node(node) if cluster is not None else None
        return f" at {found.host}:{found.port}" if found is not None else ""

    def deadline_ms(self, deadline: float) -> int:
        """A monotonic-seconds deadline on the actors' clock, in ms."""
        return self.ctx.now_ms() + max(0, int((deadline - time.monotonic()) * 1000))

    def tell(self, target: str, event: Any) -> bool:
        return self.ctx.tell(target, event)

    def wait(
        self,
        future: concurrent.futures.Future[Any],
        deadline: float,
        what: str,
        *,
        wakeable: bool = True,
    ) -> Any:
        def ready() -> bool:
            return (
                future.done()
                or (wakeable and self._wakeup.is_set())
                or self._fatal() is not None
                or self._closed
            )

        self.ctx.signal.wait_until(ready, deadline)
        if future.done():
            return future.result()
        self.raise_if_fatal()
        if wakeable:
            self.check_wakeup()
        if self._closed:
            raise ConsumerClosedError(f"{what}: the consumer was closed")
        raise KafkaTimeoutError(f"{what} timed out")

    # -- background events ---------------------------------------------------------------------

    def process_background(self, *, run_callbacks: bool = True) -> None:
        """Run what the background asked for (listener callbacks, async commit callbacks) and
        raise the first error it reported. Call on the polling thread."""
        queue = self.ctx.background
        while True:
            try:
                event = queue.popleft()
            except IndexError:
                break
            if isinstance(
                event,
                (group_events.InvokeRevoked, group_events.InvokeAssigned, group_events.InvokeLost),
            ):
                if run_callbacks:
                    self._invoke(event)
                else:
                    queue.appendleft(event)
                    break
            elif isinstance(event, AsyncCommitDone):
                self._run_commit_callback(event)
            elif isinstance(event, group_events.ErrorEvent):
                if event.consumer_protocol_unsupported:
                    self.group_protocol_error = event.error
                elif event.fatal:
                    self._fatal_error = event.error
                self._errors.append(event.error)
            elif hasattr(event, "error") and isinstance(event.error, BaseException):
                if isinstance(event.error, BootstrapResolutionError):
                    self._fatal_error = event.error  # KIP-909: raised by every later call
                self._errors.append(event.error)
            else:
                self.log.debug("background_event_ignored", kind=type(event).__name__)
        self.raise_pending_error()

    def raise_pending_error(self) -> None:
        if self._errors:
            error = self._errors.pop(0)
            raise error
        if self._fatal_error is not None:
            raise self._fatal_error

    def _run_commit_callback(self, event: AsyncCommitDone) -> None:
        future = event.future
        error = future.exception()
        offsets = future.result() if error is None else (event.offsets or {})
        try:
            event.callback(offsets, error)
        except Exception:
            self.log.exception("commit_callback_failed")

    # -- rebalance callbacks -------------------------------------------------------------------

    def current_reply(self) -> RebalanceReply | None:
        return getattr(self._current, "reply", None)

    def defer_current(self) -> RebalanceReply:
        reply = self.current_reply()
        if reply is None:
            from kafka_actors.errors import IllegalStateError

            raise IllegalStateError(
                "defer_rebalance_ack() is only valid inside a rebalance listener callback"
            )
        reply.deferred = True
        return reply

    def _invoke(self, event: Any) -> None:
        if isinstance(event, group_events.InvokeRevoked):
            method = "on_partitions_revoked"
        elif isinstance(event, group_events.InvokeAssigned):
            method = "on_partitions_assigned"
        else:
            method = "on_partitions_lost"
        reply = RebalanceReply(self, event, method)
        listener = self.listener
        error: BaseException | None = None
        result: Any = None
        partitions = set(event.partitions)
        self.log.info(
            "rebalance_callback", method=method, partitions=sorted(str(tp) for tp in partitions)
        )
        if listener is not None:
            previous = self.current_reply()
            self._current.reply = reply
            try:
                result = _listener_method(listener, method)(partitions)
            except WakeupError as exc:
                error = exc
            except Exception as exc:
                self.log.error("rebalance_listener_failed", method=method, error=repr(exc))
                error = exc
            finally:
                self._current.reply = previous
        if error is None and isinstance(result, concurrent.futures.Future):
            reply.deferred = True
            self._arm(reply)

            def done(f: concurrent.futures.Future[Any]) -> None:
                reply.ack(f.exception())

            result.add_done_callback(done)
            return
        if error is None and reply.deferred:
            self._arm(reply)
            return
        reply.ack(error)
        if error is not None:
            self._errors.append(error)

    def _arm(self, reply: RebalanceReply) -> None:
        timeout = self.ctx.config.max_poll_interval_ms / 1000.0

        def expire() -> None:
            reply.ack(
                KafkaTimeoutError(
                    f"{reply.method}({partition_names(reply.partitions)}) was not acknowledged "
                    f"within max.poll.interval.ms ({self.ctx.config.max_poll_interval_ms} ms)"
                )
            )

        reply._timer = self.ctx.scheduler.call_later(timeout, expire)
        with self._callback_lock:
            self._deferred[id(reply)] = reply

    def callback_done(self, reply: RebalanceReply, error: BaseException | None) -> None:
        with self._callback_lock:
            self._deferred.pop(id(reply), None)
        event = reply.event
        safe = self.ctx.safe_commits
        if safe is not None and isinstance(event, group_events.InvokeRevoked):
            # rebalance.safe.commits: acknowledge once the records handed out for the revoked
            # partitions are committed (or the maximum duration passed).
            safe.after_committed(event.partitions, lambda: self._acknowledge(reply, error))
            return
        if safe is not None and isinstance(event, group_events.InvokeLost):
            safe.forget(event.partitions)
        self._acknowledge(reply, error)

    def _acknowledge(self, reply: RebalanceReply, error: BaseException | None) -> None:
        event = reply.event
        if isinstance(event, group_events.InvokeAssigned) and error is None:
            self.ctx.subscriptions.enable_fetching_for_new_partitions(event.partitions)
        if error is not None and reply.deferred:
            self.log.error("rebalance_callback_failed", method=reply.method, error=repr(error))
        self.tell("membership", CallbackCompletedEvent(event.callback_id, error))
        self.tell("fetch", _poke())
        self.ctx.signal.notify()


def _listener_method(listener: Any, method: str) -> Callable[[set[TopicPartition]], Any]:
    """``listener.<method>``; for a listener object without ``on_partitions_lost`` (one not
    derived from :class:`ConsumerRebalanceListener`), its ``on_partitions_revoked``, as Java's
    default method; a listener without either method is not called."""
    fn = getattr(listener, method, None)
    if fn is None and method == "on_partitions_lost":
        fn = getattr(listener, "on_partitions_revoked", None)
    if fn is None:
        return _no_callback
    return cast(Callable[[set[TopicPartition]], Any], fn)


def _no_callback(_partitions: set[TopicPartition]) -> None:
    return None


def _poke() -> Any:
    from kafka_actors.actors.events import PositionsChangedEvent

    return PositionsChangedEvent()
