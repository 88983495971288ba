"""The thin actor shell every request manager lives in (:class:`ManagerActor`).

Owns: the loop around a pure request manager (the contract of
:mod:`kafka_actors.protocol.messages`): feed it an input (an application event, an event routed
from another manager, a network ``Response`` / ``RequestFailed``), call ``poll(now_ms)``, send
the ``UnsentRequest``s it returns to the NetworkActor as ``Send`` (reply to this actor), route
the events it published, and ask the scheduler for the next poll (``tell_later``; no sleeps).
Every message is handled inside ``traced(trace_id)``.

Also owns the negotiation gate: a manager needs the negotiated API versions to build requests,
so until :attr:`ConsumerContext.versions` is known the shell stashes its other messages and
takes part in the consumer's one ApiVersions ask (:attr:`ConsumerContext.versions_ask`, an
ApiVersions request through the NetworkActor): one actor sends it, the others wait for its
outcome; its backoff is the consumer's, not an actor's, so a restart does not start it over.
The versions usually come sooner, from the ApiVersions handshake of the connection the ask
opens: the NetworkActor reports it (:func:`versions_learned`), which ends the wait of every
manager at once, one round trip before the ask's own answer (then ignored).

Restart: a new incarnation builds a fresh manager from the shared context (:meth:`build`), then
:meth:`rebuild` replays what it must know again (coordinator, cluster, member id ...).
Application events whose futures it holds are failed with a retriable
:class:`~kafka_actors.supervisors.ChildRestartingError` when it stops or crashes, so a caller
never waits in silence.

May touch: the NetworkActor (``Send``), the shared context, the scheduler.
"""

from __future__ import annotations

import concurrent.futures
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import pykka

from kafka_actors.actors.context import ConsumerContext, Routed, fail
from kafka_actors.actors.events import PollEvent
from kafka_actors.actors.network import RequestFailed, Response, Send
from kafka_actors.clock import Cancellable, tell_later
from kafka_actors.errors import (
    CoordinatorNotAvailableError,
    KafkaError,
    UnsupportedVersionError,
)
from kafka_actors.log import current_trace_id, get_logger, traced
from kafka_actors.protocol.messages import ANY_NODE, COORDINATOR_NODE, PollResult, UnsentRequest
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.protocol.wire.versions import AskNow, NegotiatedVersions, api_versions_request
from kafka_actors.supervisors import ChildContext, ChildRestartingError, SupervisedActor

__all__ = ["BackgroundError", "ManagerActor", "Tick", "versions_learned"]

_VERSIONS_REQUEST_ID = -7001
#: Requests whose round trip feeds a coordinator sensor (Java's heartbeat and commit sensors
#: record each response's request latency): API key -> sensor.
_HEARTBEAT_APIS = frozenset(
    {
        int(ApiKey.HEARTBEAT),
        int(ApiKey.CONSUMER_GROUP_HEARTBEAT),
        int(ApiKey.SHARE_GROUP_HEARTBEAT),
    }
)
_TIMED_APIS = _HEARTBEAT_APIS | {int(ApiKey.OFFSET_COMMIT)}


@dataclass(frozen=True, slots=True)
class BackgroundError:
    """An error for the user's next call (facade): raised once at poll()."""

    error: KafkaError


class Tick:
    """Timer → actor: time to poll the manager again (carries nothing)."""

    __slots__ = ()
    trace_id = None


def versions_learned(ctx: ConsumerContext, versions: NegotiatedVersions) -> None:
    """A connection's ApiVersions handshake told ``versions`` (the NetworkActor's
    ``on_versions``): the consumer's versions, unless known already; the managers waiting for
    them (and the one whose ask is under way) build now."""
    with ctx.lock:
        if ctx.versions is not None:
            return
        ctx.versions = versions
        waiters = ctx.versions_ask.learned()
    _tick(waiters)


def _tick(refs: Iterable[Any], but: Any = None) -> None:
    """A :class:`Tick` to each of ``refs`` (the actors waiting for the versions) but ``but``;
    an actor that stopped meanwhile is skipped."""
    for ref in refs:
        if ref != but:
            try:
                ref.tell(Tick())
            except pykka.ActorDeadError:
                pass


class ManagerActor(SupervisedActor):
    """Base of the request-manager actors (see the module docstring).

    Subclasses set :attr:`component`, implement :meth:`build` (the pure manager),
    :meth:`handle` (their application events and routed events) and :meth:`route` (where the
    manager's events go), and may override :meth:`rebuild`.
    """

    component: ClassVar[str] = "manager"

    def __init__(self, ctx: ConsumerContext, *, context: ChildContext) -> None:
        super().__init__(context=context)
        assert context.parent is not None, "a manager actor is a child of the NetworkActor"
        self.ctx = ctx
        self.network: pykka.ActorRef[Any] = context.parent
        self.log = get_logger(
            self.component, client_id=ctx.config.client_id, group_id=ctx.config.group_id
        )
        self.manager: Any = None
        self.pending: set[concurrent.futures.Future[Any]] = set()
        self._stash: deque[Any] = deque()
        self._timer: Cancellable | None = None
        self._timer_due: float | None = None
        #: The token of the consumer's ApiVersions ask while this incarnation sends it.
        self._versions_token: int | None = None
        #: The wake-up while it waits for the ask (its backoff, or another actor's ask).
        self._versions_timer: Cancellable | None = None
        #: request id -> (API key, sent at ms) of the requests in _TIMED_APIS in flight.
        self._timed: dict[int, tuple[int, int]] = {}

    # -- subclass hooks ----------------------------------------------------------------------

    def build(self) -> Any:
        """The pure manager (called once versions are known)."""
        raise NotImplementedError

    def rebuild(self) -> None:
        """Feed a fresh manager what an earlier incarnation knew (shared context)."""

    def handle(self, message: Any, now_ms: int) -> Any:
        """An application event or a :class:`Routed` event; returns the ask reply."""
        self.log.warning("unhandled_message", message=type(message).__name__)
        return None

    def handle_unbuilt(self, message: Any, now_ms: int) -> bool:
        """An application event that arrives before the manager exists (no broker answered
        ApiVersions yet, so this incarnation has sent nothing): True when it is answered
        here, without a manager; False stashes it until the manager is built. A close step
        with nothing to undo (a leave for a member that never joined, closing sessions never
        opened) is answered at once, so ``close()`` without a cluster does not wait."""
        return False

    def unstash(self, kind: type) -> None:
        """Forget the stashed messages of ``kind`` (a leave answered before the manager
        existed makes the subscription changes stashed before it moot)."""
        self._stash = deque(m for m in self._stash if not isinstance(m, kind))

    def route(self, event: Any) -> None:
        """Where a published event goes (``self.ctx.tell(name, Routed(...))``)."""
        self.log.debug("event_not_routed", kind=type(event).__name__)

    def poll_manager(self, now_ms: int) -> PollResult:
        result: PollResult = self.manager.poll(now_ms)
        return result

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        self.manager.on_response(request_id, response, now_ms)

    def on_request_failed(self, request_id: int, error: KafkaError, now_ms: int) -> None:
        self.manager.on_failure(request_id, error, now_ms)

    def resolve_node(self, request: UnsentRequest) -> int | None:
        """The node id to send to; None fails the request as "coordinator not available"."""
        if request.node == COORDINATOR_NODE:
            return self.ctx.coordinator_id
        return request.node

    # -- helpers for subclasses --------------------------------------------------------------

    def emit(self, target: str, event: Any) -> None:
        self.ctx.tell(target, Routed(event, self.component, current_trace_id()))

    def hold(self, future: concurrent.futures.Future[Any]) -> None:
        """Keep ``future`` to fail it if this incarnation ends before completing it."""
        self.pending.add(future)
        future.add_done_callback(self.pending.discard)

    def poke(self) -> None:
        """Poll again soon (after the current message)."""
        self.actor_ref.tell(Tick())

    # -- pykka hooks -------------------------------------------------------------------------

    def on_start(self) -> None:
        self.log.info("manager_started", generation=self.generation)
        if self.ctx.versions is None:
            self._ask_versions()
        else:
            self._build()

    def _build(self) -> None:
        self._cancel_versions_timer()
        self.manager = self.build()
        self.rebuild()
        self._drive()
        while self._stash:
            self.actor_ref.tell(self._stash.popleft())

    def before_receive(self, message: Any) -> None:
        if type(message) is PollEvent and message.latch is not None:
            message.latch.pending = False  # before the clock is read for it (PollLatch)
        # Hold the caller's future before anything (an injected crash included) can end this
        # incarnation: the caller then gets a retriable error, never silence.
        future = getattr(message, "future", None)
        if isinstance(future, concurrent.futures.Future):
            self.hold(future)
        super().before_receive(message)

    def on_receive(self, message: Any) -> Any:
        with traced(getattr(message, "trace_id", None)):
            now = self.ctx.now_ms()
            if isinstance(message, Response) and message.request_id == _VERSIONS_REQUEST_ID:
                return self._versions_answered(message)
            if isinstance(message, RequestFailed) and message.request_id == _VERSIONS_REQUEST_ID:
                return self._versions_failed(message)
            if self.manager is None:
                if isinstance(message, Tick) and self.ctx.versions is not None:
                    self._build()
                elif isinstance(message, Tick):
                    self._ask_versions()
                elif not isinstance(message, (Response, RequestFailed)):
                    if not self.handle_unbuilt(message, now):
                        self._stash.append(message)
                return None
            result: Any = None
            if isinstance(message, Response):
                if message.request_id is not None:
                    if self._timed:
                        self._timed_response(message.request_id, now, message.response)
                    self.on_response(message.request_id, message.response, now)
            elif isinstance(message, RequestFailed):
                if message.request_id is not None:
                    self._timed.pop(message.request_id, None)
                    self.on_request_failed(message.request_id, message.error, now)
            elif isinstance(message, Tick):
                self._timer = None
                self._timer_due = None
            else:
                result = self.handle(message, now)
            self._drive()
            return result

    def on_stop(self) -> None:
        self._end(ChildRestartingError(f"actor {self.component!r} stopped", child=self.component))

    def on_failure(self, *exc_info: Any) -> None:
        cause = exc_info[1]
        self.log.error("manager_failed", error=repr(cause))
        self._end(
            ChildRestartingError(
                f"actor {self.component!r} failed ({cause!r}); it is restarting",
                child=self.component,
            )
        )

    def _end(self, error: BaseException) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._cancel_versions_timer()
        if self._versions_token is not None:
            # Its answer would reach no one: the ask goes to another actor (after a backoff).
            self._versions_outcome("release")
        for future in list(self.pending):
            fail(future, error)
        self.pending.clear()
        self.ctx.signal.notify()

    # -- the loop ----------------------------------------------------------------------------

    def _drive(self) -> None:
        now = self.ctx.now_ms()
        result = self.poll_manager(now)
        failed = False
        for request in result.requests:
            failed |= not self._send(request, now)
        for event in result.events:
            self.route(event)
        if failed:
            self.poke()
        else:
            self._schedule(result.time_until_next_poll_ms)

    def _send(self, request: UnsentRequest, now_ms: int) -> bool:
        node = self.resolve_node(request)
        if node is None:
            self.on_request_failed(
                request.request_id,
                CoordinatorNotAvailableError("The group coordinator is not known"),
                now_ms,
            )
            return False
        try:
            self.network.tell(
                Send(
                    request.request,
                    node=node,
                    reply_to=self.actor_ref,
                    trace_id=request.trace_id or current_trace_id(),
                    timeout_ms=request.timeout_ms,
                    request_id=request.request_id,
                )
            )
        except pykka.ActorDeadError:
            self.log.debug("network_gone")
            return True
        api = int(request.request.__api_key__)
        if api in _TIMED_APIS:
            self._timed[request.request_id] = (api, now_ms)
            if api in _HEARTBEAT_APIS:
                self.ctx.metrics.heartbeat_sent()
        return True

    def _timed_response(self, request_id: int, now_ms: int, response: Any = None) -> None:
        sent = self._timed.pop(request_id, None)
        if sent is None:
            return
        api, sent_ms = sent
        if api in _HEARTBEAT_APIS:
            ok = int(getattr(response, "error_code", 0) or 0) == 0
            self.ctx.metrics.heartbeat_response(now_ms - sent_ms, ok=ok)
        else:
            self.ctx.metrics.committed(now_ms - sent_ms)

    def _schedule(self, delay_ms: int | None) -> None:
        if delay_ms is None:
            return
        delay = max(0.0, delay_ms / 1000.0)
        due = self.ctx.clock.monotonic() + delay
        if self._timer is not None and self._timer_due is not None and self._timer_due <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        if delay == 0.0:
            self._timer, self._timer_due = None, None
            self.poke()
            return
        self._timer = tell_later(self.ctx.scheduler, delay, self.actor_ref, Tick())
        self._timer_due = due

    # -- ApiVersions, once per consumer --------------------------------------------------------

    def _ask_versions(self) -> None:
        """Send the consumer's ApiVersions ask if it is this actor's turn; else wait for the
        ask under way (its outcome wakes this actor) or for the backoff; build once the
        versions are known."""
        ctx = self.ctx
        with ctx.lock:
            known = ctx.versions is not None
            step = None if known else ctx.versions_ask.next(self.actor_ref, ctx.now_ms())
        if step is None:
            self._build()
            return
        if not isinstance(step, AskNow):
            self._wait_versions(step)
            return
        self._cancel_versions_timer()
        self._versions_token = step.token
        try:
            self.network.tell(
                Send(
                    api_versions_request(step.version),
                    node=ANY_NODE,
                    reply_to=self.actor_ref,
                    request_id=_VERSIONS_REQUEST_ID,
                    timeout_ms=ctx.config.request_timeout_ms,
                )
            )
        except pykka.ActorDeadError:
            self._versions_outcome("release")

    def _wait_versions(self, delay_ms: int) -> None:
        self._cancel_versions_timer()
        self._versions_timer = tell_later(
            self.ctx.scheduler, delay_ms / 1000.0, self.actor_ref, Tick()
        )

    def _cancel_versions_timer(self) -> None:
        if self._versions_timer is not None:
            self._versions_timer.cancel()
            self._versions_timer = None

    def _versions_outcome(self, kind: str, offered: int | None = None) -> None:
        """Record the outcome of this actor's ask (``answered``, ``refused``, ``failed``,
        ``release``) and wake the actors waiting for it."""
        ctx = self.ctx
        token, self._versions_token = self._versions_token, None
        with ctx.lock:
            ask = ctx.versions_ask
            now = ctx.now_ms()
            if kind == "answered":
                waiters = ask.answered(token)
            elif kind == "refused":
                waiters = ask.refused(token, now, offered)
            elif kind == "failed":
                waiters = ask.failed(token, now)
            else:
                waiters = ask.release(token, now)
        _tick(waiters, but=self.actor_ref)

    def _versions_answered(self, message: Response) -> None:
        if self.manager is not None:
            return
        response = message.response
        code = int(response.error_code)
        if code == UnsupportedVersionError.code:
            offered = next(
                (
                    int(entry.max_version)
                    for entry in getattr(response, "api_keys", ())
                    if int(entry.api_key) == ApiKey.API_VERSIONS
                ),
                None,
            )
            self._versions_outcome("refused", offered)
            self._ask_versions()
            return
        if code != 0:
            self.log.info("api_versions_failed", error_code=code)
            self._versions_outcome("failed")
            self._ask_versions()
            return
        with self.ctx.lock:
            if self.ctx.versions is None:
                self.ctx.versions = NegotiatedVersions.from_api_keys(
                    response.api_keys, api_versions_version=int(response.__version__)
                )
        self._versions_outcome("answered")
        self._build()

    def _versions_failed(self, message: RequestFailed) -> None:
        if self.manager is not None:
            return
        if isinstance(message.error, UnsupportedVersionError):
            self._versions_outcome("refused")
            self._ask_versions()
            return
        # Nothing reachable yet (retriable) or a fatal error (authentication): the next ask
        # waits the consumer's backoff (exponential); callers meanwhile see their own
        # deadlines. A fatal error also goes to the user's next poll, from the actor whose ask
        # failed (one ask per consumer: once per failure).
        self.log.info("api_versions_failed", error=str(message.error))
        if not message.error.retriable:
            self.emit("facade", BackgroundError(message.error))
        self._versions_outcome("failed")
        self._ask_versions()
