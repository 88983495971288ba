"""Group coordinator discovery: the pure :class:`CoordinatorManager`.

Owns: the group's coordinator as last discovered (node id, host, port), the FindCoordinator
requests that discover it (never two in flight), their backoff, and rediscovery when another
manager reports the coordinator unknown (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a
disconnect). It follows the Java client's ``CoordinatorRequestManager`` (Kafka 4.x).

May touch: nothing outside itself. Pure: the time is a parameter (``now_ms``, monotonic
milliseconds), backoff jitter is injected. It builds requests with
:func:`kafka_actors.protocol.wire.requests.find_coordinator_request` and reads kio responses.

Driving it (the request-manager contract of :mod:`kafka_actors.protocol.messages`):

* inputs: :meth:`~CoordinatorManager.mark_coordinator_unknown` (from the membership and commit
  managers, or the network on a disconnect), :meth:`~CoordinatorManager.on_response` /
  :meth:`~CoordinatorManager.on_failure`;
* outputs: :meth:`~CoordinatorManager.poll` returns the FindCoordinator to send (to
  ``ANY_NODE``) while the coordinator is unknown and the backoff allows, and the events:
  :class:`CoordinatorChanged` (discovered: node id, host, port; or lost: all None) and
  :class:`CoordinatorErrorEvent` (GROUP_AUTHORIZATION_FAILED and other non-retriable errors,
  for the user's next call).

Choices, in one place:

* Versions: FindCoordinator v4+ send the group as a one-key batch (``coordinator_keys``) and
  read the ``coordinators`` entry whose key is the group id; v0..v3 send ``key``.
* The coordinator is published with its own host and port: the network layer connects to it
  even when Metadata has not (yet) listed that broker. Java opens a separate connection for the
  coordinator (node id ``2**31 - 1 - node_id``); :attr:`CoordinatorChanged.connection_id` offers
  the same id, the network layer may use it or the plain node id.
* Backoff (Java's ``RequestState``): after a response or failure the next FindCoordinator waits
  ``ExponentialBackoff(retry.backoff.ms, 2, retry.backoff.max.ms, jitter 0.2)`` by the number
  of failed attempts since the last success (after a success: about ``retry.backoff.ms``), so a
  coordinator reported unknown right after its discovery is rediscovered after that backoff.
* GROUP_AUTHORIZATION_FAILED and other non-retriable errors publish a
  :class:`CoordinatorErrorEvent` and the discovery keeps going with backoff (as Java: ACLs may
  change; every failed attempt publishes the error again).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kafka_actors.errors import (
    FatalConsumerError,
    GroupAuthorizationFailedError,
    KafkaError,
    error_for_code,
)
from kafka_actors.log import get_logger
from kafka_actors.protocol.condition_log import ConditionLog
from kafka_actors.protocol.messages import ANY_NODE, PollResult, UnsentRequest
from kafka_actors.protocol.request_state import Outbox, RequestState, retry_backoff
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.protocol.wire.requests import GROUP_KEY_TYPE, find_coordinator_request

if TYPE_CHECKING:
    from kafka_actors.config import ConsumerConfig
    from kafka_actors.protocol.wire.versions import NegotiatedVersions

__all__ = [
    "CoordinatorChanged",
    "CoordinatorConfig",
    "CoordinatorErrorEvent",
    "CoordinatorManager",
    "coordinator_connection_id",
]

_INT32_MAX: Final = 2**31 - 1


def coordinator_connection_id(node_id: int) -> int:
    """The connection id Java gives a coordinator (a separate connection from fetches)."""
    return _INT32_MAX - node_id


@dataclass(frozen=True, slots=True)
class CoordinatorChanged:
    """The coordinator was discovered (node id, host, port) or lost (all None)."""

    node_id: int | None
    host: str | None = None
    port: int | None = None
    reason: str = ""

    @property
    def known(self) -> bool:
        return self.node_id is not None

    @property
    def connection_id(self) -> int | None:
        return None if self.node_id is None else coordinator_connection_id(self.node_id)


@dataclass(frozen=True, slots=True)
class CoordinatorErrorEvent:
    """FindCoordinator failed in a way retrying alone will not fix (not authorized for the group,
    unsupported version ...): raise it at the user's next call."""

    error: KafkaError


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorConfig:
    group_id: str
    retry_backoff_ms: int = 100  # retry.backoff.ms
    retry_backoff_max_ms: int = 1_000  # retry.backoff.max.ms
    request_timeout_ms: int | None = None  # request.timeout.ms (None: the network's default)

    @classmethod
    def from_consumer_config(cls, config: ConsumerConfig) -> CoordinatorConfig:
        if config.group_id is None:
            raise ValueError("a coordinator needs group.id")
        return cls(
            group_id=config.group_id,
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
            request_timeout_ms=config.request_timeout_ms,
        )


@dataclass(frozen=True, slots=True)
class _Coordinator:
    node_id: int
    host: str
    port: int


class CoordinatorManager:
    """Finds and keeps the group coordinator (see the module docstring)."""

    def __init__(
        self,
        config: CoordinatorConfig,
        versions: NegotiatedVersions,
        *,
        random: Callable[[], float],
        client_id: str | None = None,
    ) -> None:
        self._config = config
        self._versions = versions
        self._log = get_logger("coordinator", client_id=client_id, group_id=config.group_id)
        self._outbox = Outbox()
        self._coordinator: _Coordinator | None = None
        self._in_flight: tuple[int, int] | None = None  # (request id, version)
        # RequestState: last response/failure time and the backoff that follows it.
        self._request_state = RequestState(retry_backoff(config, random))
        self._time_marked_unknown_ms: int | None = None
        self._last_error: KafkaError | None = None
        self._failures: ConditionLog[str] = ConditionLog()  # find_coordinator_failed lines

    # -- Observability ------------------------------------------------------------------------

    @property
    def coordinator(self) -> CoordinatorChanged | None:
        """The coordinator as known now (None when unknown)."""
        c = self._coordinator
        return None if c is None else CoordinatorChanged(c.node_id, c.host, c.port)

    @property
    def request_in_flight(self) -> bool:
        return self._in_flight is not None

    @property
    def failed_attempts(self) -> int:
        return self._request_state.attempts

    @property
    def last_error(self) -> KafkaError | None:
        """The last non-retriable FindCoordinator error (cleared by a discovery)."""
        return self._last_error

    def time_marked_unknown_ms(self) -> int | None:
        return self._time_marked_unknown_ms

    # -- Inputs --------------------------------------------------------------------------------

    def set_versions(self, versions: NegotiatedVersions) -> None:
        self._versions = versions

    def mark_coordinator_unknown(self, reason: str, now_ms: int) -> None:
        """The coordinator moved or went away: publish it as lost and rediscover it after the
        backoff. Ignored when it is already unknown."""
        if self._coordinator is None:
            return
        self._log.info("coordinator_unknown", reason=reason, node_id=self._coordinator.node_id)
        self._coordinator = None
        self._time_marked_unknown_ms = now_ms
        self._outbox.publish(CoordinatorChanged(None, reason=reason))

    # -- Request-manager contract -------------------------------------------------------------

    def poll(self, now_ms: int) -> PollResult:
        requests: tuple[UnsentRequest, ...] = ()
        if self._coordinator is None and self._in_flight is None:
            if self._request_state.can_send_request(now_ms):
                try:
                    requests = (self._send(),)
                except KafkaError as exc:  # no common FindCoordinator version
                    self._on_error(exc, now_ms)
        events = self._outbox.drain()
        next_poll: int | None = None
        if self._coordinator is None and self._in_flight is None:
            next_poll = self._request_state.remaining_backoff_ms(now_ms)
        return PollResult(requests=requests, time_until_next_poll_ms=next_poll, events=events)

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        if self._in_flight is None or self._in_flight[0] != request_id:
            return
        _, version = self._in_flight
        self._in_flight = None
        if version >= 4:
            entry = next(
                (c for c in response.coordinators if str(c.key) == self._config.group_id), None
            )
            if entry is None:
                self._on_error(
                    FatalConsumerError(
                        f"FindCoordinator response names no coordinator for group "
                        f"{self._config.group_id!r}"
                    ),
                    now_ms,
                )
                return
        else:
            entry = response
        code = int(entry.error_code)
        if code != 0:
            message = getattr(entry, "error_message", None)
            if code == GroupAuthorizationFailedError.code:
                error: KafkaError = GroupAuthorizationFailedError(
                    f"Not authorized to access group {self._config.group_id!r}"
                    + (f": {message}" if message else "")
                )
            else:
                error = error_for_code(code, message)
            self._on_error(error, now_ms)
            return
        self._on_success(int(entry.node_id), str(entry.host), int(entry.port), now_ms)

    def on_failure(self, request_id: int, error: BaseException, now_ms: int) -> None:
        if self._in_flight is None or self._in_flight[0] != request_id:
            return
        self._in_flight = None
        typed = (
            error
            if isinstance(error, KafkaError)
            else FatalConsumerError(f"FindCoordinator failed: {error!r}")
        )
        self._on_error(typed, now_ms)

    # -- Internals -----------------------------------------------------------------------------

    def _send(self) -> UnsentRequest:
        version = self._versions.version_for(ApiKey.FIND_COORDINATOR)
        request = find_coordinator_request(
            version, key=self._config.group_id, key_type=GROUP_KEY_TYPE
        )
        request_id = self._outbox.new_id()
        self._in_flight = (request_id, version)
        self._log.debug("find_coordinator", version=version)
        return UnsentRequest(
            node=ANY_NODE,
            request=request,
            request_id=request_id,
            timeout_ms=self._config.request_timeout_ms,
        )

    def _on_success(self, node_id: int, host: str, port: int, now_ms: int) -> None:
        self._request_state.on_successful_attempt(now_ms)
        self._last_error = None
        self._time_marked_unknown_ms = None
        self._coordinator = _Coordinator(node_id, host, port)
        self._log.info("coordinator_discovered", node_id=node_id, host=host, port=port)
        if (cleared := self._failures.cleared("find", now_ms)) is not None:
            self._log.info("find_coordinator_recovered", **cleared.fields())
        self._outbox.publish(CoordinatorChanged(node_id, host, port, reason="discovered"))

    def _on_error(self, error: KafkaError, now_ms: int) -> None:
        backoff_ms = self._request_state.on_failed_attempt(now_ms)
        if error.retriable:
            self._log.debug(
                "find_coordinator_retriable_error", error=repr(error), backoff_ms=backoff_ms
            )
            return
        if (report := self._failures.occurred("find", now_ms)) is not None:
            self._log.warning(
                "find_coordinator_failed",
                error=repr(error),
                backoff_ms=backoff_ms,
                **report.fields(),
            )
        self._last_error = error
        self._outbox.publish(CoordinatorErrorEvent(error))
