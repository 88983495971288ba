"""ApiVersions negotiation: a small pure state machine the network actor drives per connection.

Owns: building ApiVersions requests, reading the broker's answer (including the v0-form
UNSUPPORTED_VERSION answer a broker gives to a too-new ApiVersions request), and picking the
highest version both sides support per API. May touch: wire, apis, errors, ``_version`` (the
client software version). Pure: no I/O.

Usage by a connection owner::

    handshake = ApiVersionsHandshake()
    request, version = handshake.initial_request()
    send(encode_request(request, correlation_id=cid, client_id=client_id))
    while True:
        step = handshake.handle_response_bytes(frame)   # frame: bytes after the size prefix
        if isinstance(step, Done):
            versions = step.versions                     # NegotiatedVersions
            break
        send(encode_request(step.request, ...))          # Retry: a lower ApiVersions version

A broker that does not support the ApiVersions version asked for answers with error code 35
(UNSUPPORTED_VERSION) in the v0 response form (header v0, ``error_code``, ``api_keys``) whatever
version was asked (KIP-511). The handshake then retries with the broker's highest ApiVersions
version from that list (or v0 if it lists none), strictly lower than the one that failed.

Also owns :class:`VersionsAsk`: the pacing of the one ApiVersions request a consumer's request
managers send (through the NetworkActor, as an ordinary request) to learn the versions they
build their requests with, shared by all of them and outliving their restarts.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kafka_actors._version import __version__
from kafka_actors.errors import (
    InvalidFrameError,
    TruncatedFrameError,
    UnsupportedVersionError,
    error_for_code,
)
from kafka_actors.protocol.request_state import ExponentialBackoff, RequestState
from kafka_actors.protocol.wire.apis import (
    CLIENT_VERSIONS,
    ApiKey,
    VersionRange,
    api_name,
    request_type,
    response_type,
)
from kafka_actors.protocol.wire.framing import decode_response, read_correlation_id

__all__ = [
    "ASK_VERSION",
    "CLIENT_SOFTWARE_NAME",
    "CLIENT_SOFTWARE_VERSION",
    "ApiVersionsHandshake",
    "AskNow",
    "Done",
    "NegotiatedVersions",
    "Retry",
    "VersionsAsk",
    "api_versions_request",
]

CLIENT_SOFTWARE_NAME: Final = "kafka-actors"
CLIENT_SOFTWARE_VERSION: Final = __version__

_ERROR_CODE_AT: Final = 4  # every ApiVersions response body starts with error_code (int16)


def api_versions_request(
    version: int,
    *,
    client_software_name: str = CLIENT_SOFTWARE_NAME,
    client_software_version: str = CLIENT_SOFTWARE_VERSION,
    expected: tuple[str, int] | None = None,
) -> Any:
    """An ApiVersions request at ``version`` (v3+ carry the client software name/version;
    v5+ the ``expected`` (cluster id, node id) when given, KIP-1242)."""
    cls: Any = request_type(ApiKey.API_VERSIONS, version)
    if version >= 5 and expected is not None:
        return cls(
            client_software_name=client_software_name,
            client_software_version=client_software_version,
            cluster_id=expected[0],
            node_id=expected[1],
        )
    if version >= 3:
        return cls(
            client_software_name=client_software_name,
            client_software_version=client_software_version,
        )
    return cls()


@dataclass(frozen=True, slots=True)
class NegotiatedVersions:
    """The broker's supported API ranges, intersected with the client's on demand.

    ``broker`` maps API key to the broker's range; ``client`` to the client's. ``version_for``
    returns the highest version in both.
    """

    broker: Mapping[int, VersionRange]
    client: Mapping[int, VersionRange] = field(default_factory=lambda: dict(CLIENT_VERSIONS))
    #: The ApiVersions version the broker answered.
    api_versions_version: int = 0

    @classmethod
    def from_api_keys(
        cls,
        api_keys: Iterable[Any],
        *,
        client: Mapping[int, VersionRange] | None = None,
        api_versions_version: int = 0,
    ) -> NegotiatedVersions:
        """Build from a response's ``api_keys`` entries (``api_key``, ``min_version``,
        ``max_version``); entries with an empty range are ignored."""
        broker: dict[int, VersionRange] = {}
        for entry in api_keys:
            low, high = int(entry.min_version), int(entry.max_version)
            if low <= high:
                broker[int(entry.api_key)] = VersionRange(low, high)
        return cls(
            broker=broker,
            client=dict(CLIENT_VERSIONS) if client is None else dict(client),
            api_versions_version=api_versions_version,
        )

    def range_for(self, api: int) -> VersionRange | None:
        """Versions both sides support for ``api``, or None."""
        ours, theirs = self.client.get(api), self.broker.get(api)
        if ours is None or theirs is None:
            return None
        return ours.intersect(theirs)

    def supports(self, api: int) -> bool:
        return self.range_for(api) is not None

    def version_for(self, api: int, *, min_version: int | None = None) -> int:
        """Highest version of ``api`` both sides support.

        ``min_version`` demands at least that version (a feature needing it). Raises
        UnsupportedVersionError naming the API and both ranges when there is no such version.
        """
        ours, theirs = self.client.get(api), self.broker.get(api)
        common = self.range_for(api)
        if common is not None and min_version is not None:
            common = common.intersect(VersionRange(min_version, max(min_version, common.max)))
        if common is None:
            need = f" (at least v{min_version})" if min_version is not None else ""
            raise UnsupportedVersionError(
                f"No common version for {api_name(api)}{need}: client supports "
                f"{ours if ours is not None else 'none'}, broker supports "
                f"{theirs if theirs is not None else 'none'}"
            )
        return common.max


@dataclass(frozen=True, slots=True)
class Done:
    """Negotiation finished."""

    versions: NegotiatedVersions


@dataclass(frozen=True, slots=True)
class Retry:
    """The broker refused the ApiVersions version: send ``request`` (at ``version``) instead."""

    request: Any
    version: int


class ApiVersionsHandshake:
    """Pure state machine for one connection's ApiVersions exchange (see module docstring)."""

    def __init__(
        self,
        *,
        client_software_name: str = CLIENT_SOFTWARE_NAME,
        client_software_version: str = CLIENT_SOFTWARE_VERSION,
        client_versions: Mapping[int, VersionRange] | None = None,
        max_version: int | None = None,
        expected: tuple[str, int] | None = None,
    ) -> None:
        #: (cluster id, node id) the connection means to reach, sent with v5+ (KIP-1242): a
        #: broker of another cluster (or another node) answers REBOOTSTRAP_REQUIRED.
        self._expected = expected
        self._name = client_software_name
        self._software_version = client_software_version
        self._client = dict(CLIENT_VERSIONS) if client_versions is None else dict(client_versions)
        ours = self._client[ApiKey.API_VERSIONS]
        self._version = ours.max if max_version is None else min(max_version, ours.max)
        if self._version < ours.min:
            raise UnsupportedVersionError(f"ApiVersions v{self._version} is below {ours}")
        self._done = False
        # One fallback per connection: the broker named the version it takes (or v0 when it
        # named none); a refusal of that one too ends the exchange (the connection is closed
        # and retried after its reconnect backoff), instead of one request per lower version.
        self._fell_back = False

    @property
    def version(self) -> int:
        """The ApiVersions version of the request currently outstanding."""
        return self._version

    @property
    def done(self) -> bool:
        return self._done

    def _request(self) -> Any:
        return api_versions_request(
            self._version,
            client_software_name=self._name,
            client_software_version=self._software_version,
            expected=self._expected,
        )

    def initial_request(self) -> tuple[Any, int]:
        """The first request to send and its version."""
        return self._request(), self._version

    def handle_response_bytes(
        self,
        frame: bytes | bytearray | memoryview,
        *,
        correlation_id: int | None = None,
    ) -> Done | Retry:
        """Feed the answer to the outstanding request (a frame without its size prefix).

        Returns Done with the negotiated versions, or Retry with a lower-version request.
        Raises the KafkaError of any other error code, UnsupportedVersionError when no lower
        version is left to try, and ProtocolError subclasses for undecodable frames.
        """
        if self._done:
            raise RuntimeError("ApiVersions handshake already finished")
        if len(frame) < _ERROR_CODE_AT + 2:
            raise TruncatedFrameError("ApiVersions response too short for its error code")
        read_correlation_id(frame)
        (error_code,) = struct.unpack_from(">h", frame, _ERROR_CODE_AT)
        if error_code == UnsupportedVersionError.code:
            return self._fallback(frame, correlation_id)
        response: Any = decode_response(
            frame,
            response_type(ApiKey.API_VERSIONS, self._version),
            correlation_id=correlation_id,
        )
        if int(response.error_code) != 0:
            raise error_for_code(int(response.error_code))
        self._done = True
        return Done(
            NegotiatedVersions.from_api_keys(
                response.api_keys, client=self._client, api_versions_version=self._version
            )
        )

    def _fallback(self, frame: bytes | bytearray | memoryview, correlation_id: int | None) -> Retry:
        try:
            response: Any = decode_response(
                frame,
                response_type(ApiKey.API_VERSIONS, 0),
                correlation_id=correlation_id,
            )
        except InvalidFrameError:
            # A v0 body that does not decode (some brokers send nothing after the error code):
            # fall back to v0, as Java does when the list names no ApiVersions range.
            response = None
        broker_max: int | None = None
        if response is not None:
            for entry in response.api_keys:
                if int(entry.api_key) == ApiKey.API_VERSIONS:
                    broker_max = int(entry.max_version)
        else:
            broker_max = _scan_varint_counted_api_keys(frame)
        failed = self._version
        candidate = 0 if broker_max is None else min(broker_max, failed - 1)
        ours = self._client[ApiKey.API_VERSIONS]
        if self._fell_back:
            raise UnsupportedVersionError(
                f"Broker refused ApiVersions v{failed}, the version it offered after refusing "
                "a higher one"
            )
        if candidate >= failed or candidate < ours.min or failed == ours.min:
            raise UnsupportedVersionError(
                f"Broker refused ApiVersions v{failed} and offers no lower version this client "
                f"supports (client {ours}, broker max "
                f"{'unknown' if broker_max is None else f'v{broker_max}'})"
            )
        self._version = candidate
        self._fell_back = True
        return Retry(self._request(), candidate)


#: The ApiVersions version a consumer's request managers ask at first (:class:`VersionsAsk`):
#: the one every connection's handshake starts with, so the ask reuses the codecs the
#: handshake already built (another version costs its kio schema and codecs at start-up, for
#: an answer the handshake usually gave first: issue 26). A broker refusing it names the
#: version it takes, and the first refusal falls back at once.
ASK_VERSION: Final = CLIENT_VERSIONS[ApiKey.API_VERSIONS].max


@dataclass(frozen=True, slots=True)
class AskNow:
    """:meth:`VersionsAsk.next`: send the ask now, at ``version``; report its outcome with
    ``token``."""

    token: int
    version: int


class VersionsAsk:
    """The one ApiVersions ask of a consumer's request managers (pure; the owner serializes
    the calls, e.g. under a lock, since the managers run on threads of their own).

    Every manager actor needs the negotiated versions before it builds a request. They learn
    them from one ApiVersions request for the whole consumer, not one each, paced by one
    :class:`~kafka_actors.protocol.request_state.RequestState` that lives here, outside any
    actor, so a restarted actor does not start the backoff over (issue 22: six actors, each
    stepping v3 -> v2 -> v1 -> v0 at once after a refusal and backing off on its own schedule,
    sent 50 ApiVersions in 3 s to a broker refusing them).

    * :meth:`next` hands the ask to one caller at a time (:class:`AskNow`); any other caller
      waits: it is returned, to be woken, by the outcome of the ask under way, and is told how
      long to wait at most (the backoff, or the deadline of the ask under way).
    * a refusal (UNSUPPORTED_VERSION) lowers the version: to the ApiVersions version the broker
      offered when that is lower, else one step. The first refusal's lower version may go at
      once (the one fallback Java sends on the same connection); every other refusal, and
      every failure, waits the backoff: retry.backoff.ms doubling to retry.backoff.max.ms,
      jitter 0.2. Nothing is sent again right after a failure, whoever sends it.
    * an ask whose asker went away without an outcome (:meth:`release`), or that passed its
      deadline, counts as a failed attempt.
    * :meth:`answered` ends it: the versions are known.
    * :meth:`learned` ends it too, when the versions became known without it (a connection's
      own ApiVersions handshake): its asker and waiters are woken, its answer awaited by no one.
    """

    def __init__(
        self, backoff: ExponentialBackoff, *, timeout_ms: int, version: int = ASK_VERSION
    ) -> None:
        self._state = RequestState(backoff)
        self._timeout_ms = timeout_ms
        #: The version the next ask goes at.
        self.version = version
        #: The versions are known: nothing more to ask.
        self.done = False
        self._tokens = 0
        self._in_flight: int | None = None
        self._deadline_ms = 0
        self._fell_back = False
        self._waiters: list[Any] = []
        #: Who sends the ask under way (woken by :meth:`learned`).
        self._asker: Any = None

    @property
    def attempts(self) -> int:
        """Failed attempts so far (the backoff's exponent)."""
        return self._state.attempts

    @property
    def in_flight(self) -> bool:
        return self._in_flight is not None

    def next(self, waiter: Any, now_ms: int) -> AskNow | int | None:
        """:class:`AskNow` when the caller is to send the ask now; else the milliseconds to
        wait at most before calling again (``waiter`` is returned by the outcome of the ask
        under way, or when the backoff may end sooner); None once the versions are known."""
        if self.done:
            return None
        if self._in_flight is not None and now_ms >= self._deadline_ms:
            self._in_flight = None  # its asker never reported: a failed attempt
            self._state.on_failed_attempt(self._deadline_ms)
        if self._in_flight is None:
            remaining = self._state.remaining_backoff_ms(now_ms)
            if remaining == 0:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                self._tokens += 1
                self._in_flight = self._tokens
                self._asker = waiter
                self._deadline_ms = now_ms + self._timeout_ms
                return AskNow(self._tokens, self.version)
        else:
            remaining = self._deadline_ms - now_ms
        if waiter not in self._waiters:
            self._waiters.append(waiter)
        return max(1, remaining)

    def _end(self, token: int | None) -> list[Any] | None:
        """The ask ``token`` ended: the waiters to wake, or None for a stale token."""
        if self.done or token is None or token != self._in_flight:
            return None
        self._in_flight = None
        waiters, self._waiters = self._waiters, []
        return waiters

    def answered(self, token: int | None) -> list[Any]:
        """The versions are known (from any ask, even a stale one): the waiters to wake."""
        if self.done:
            return []
        self.done = True
        self._in_flight = None
        waiters, self._waiters = self._waiters, []
        return waiters

    def learned(self) -> list[Any]:
        """The versions are known without an answer to the ask (a connection's ApiVersions
        handshake told them): the waiters and the asker of the ask under way, to wake (its
        answer, when it comes, changes nothing)."""
        if self.done:
            return []
        asker = self._asker if self._in_flight is not None else None
        waiters = self.answered(None)
        return waiters if asker is None or asker in waiters else [*waiters, asker]

    def refused(self, token: int | None, now_ms: int, offered: int | None = None) -> list[Any]:
        """The broker refused the version (UNSUPPORTED_VERSION), naming the highest ApiVersions
        version it takes (``offered``) or not: the waiters to wake."""
        waiters = self._end(token)
        if waiters is None:
            return []
        failed = self.version
        lower = failed - 1 if offered is None or offered >= failed else offered
        self.version = max(0, lower)
        if self.version < failed and not self._fell_back:
            self._fell_back = True  # the one fallback that goes at once
        else:
            self._state.on_failed_attempt(now_ms)
        return waiters

    def failed(self, token: int | None, now_ms: int) -> list[Any]:
        """The ask failed otherwise (nothing reachable, a timeout, a fatal error, an error
        code): the waiters to wake; the next ask waits the backoff."""
        waiters = self._end(token)
        if waiters is None:
            return []
        self._state.on_failed_attempt(now_ms)
        return waiters

    def release(self, token: int | None, now_ms: int) -> list[Any]:
        """The asker went away before the outcome (its actor stopped or crashed): a failed
        attempt, so that a crash loop does not become a request loop."""
        return self.failed(token, now_ms)


def _scan_varint_counted_api_keys(frame: bytes | bytearray | memoryview) -> int | None:
    """ApiVersions' max version from an UNSUPPORTED_VERSION answer whose ``api_keys`` count is
    a varint instead of v0's int32.

    librdkafka's mock cluster (a test peer; confluent-kafka 2.16) answers that way: error code,
    one varint count byte, then (api_key, min, max) int16 triples. The count is read both as a
    plain and as a compact (N+1) count; the ApiVersions entry is used only when the triples fit
    the frame. Returns None when nothing sensible is found (the caller falls back to v0).
    """
    data = bytes(frame)
    position = _ERROR_CODE_AT + 2
    count = 0
    shift = 0
    for _ in range(5):
        if position >= len(data):
            return None
        byte = data[position]
        position += 1
        count |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    else:
        return None
    for entries in (count, count - 1):
        if entries < 1 or position + 6 * entries > len(data):
            continue
        for index in range(entries):
            api_key, _low, high = struct.unpack_from(">hhh", data, position + 6 * index)
            if api_key == ApiKey.API_VERSIONS and high >= 0:
                return int(high)
    return None
