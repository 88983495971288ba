"""A small blocking Kafka client on one socket, built only on the pure protocol layer.

Owns: one plaintext TCP connection to one broker, its ApiVersions handshake (with the v0-form
fallback) and strictly sequential request/response exchanges. May touch: a socket, the
protocol package (wire, versions, apis, requests), errors.

For tests (fetching raw record bytes from a real broker, probing what a broker answers) and as
the baseline of benchmarks. Not thread-safe and not part of the consumer: the consumer's
connections belong to the NetworkActor.

Example::

    with BlockingKafkaConnection("127.0.0.1", 9092, client_id="probe") as conn:
        metadata = conn.request(ApiKey.METADATA, topics=None)
        fetch_v = conn.versions.version_for(ApiKey.FETCH)
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from kafka_actors.blocking_io import read_frame, write_frame
from kafka_actors.errors import (
    CorrelationIdMismatchError,
    DisconnectedError,
    KafkaConnectionError,
    KafkaTimeoutError,
)
from kafka_actors.protocol.wire import requests as rq
from kafka_actors.protocol.wire.apis import ApiKey, response_type_for
from kafka_actors.protocol.wire.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    CorrelationIds,
    FrameDecoder,
    decode_response,
    encode_request,
)
from kafka_actors.protocol.wire.versions import ApiVersionsHandshake, Done, NegotiatedVersions

__all__ = ["BUILDERS", "BlockingKafkaConnection", "parse_bootstrap"]

#: The request builder used by :meth:`BlockingKafkaConnection.request` per API.
BUILDERS: dict[int, Callable[..., Any]] = {
    ApiKey.METADATA: rq.metadata_request,
    ApiKey.FIND_COORDINATOR: rq.find_coordinator_request,
    ApiKey.LIST_OFFSETS: rq.list_offsets_request,
    ApiKey.FETCH: rq.fetch_request,
    ApiKey.OFFSET_COMMIT: rq.offset_commit_request,
    ApiKey.OFFSET_FETCH: rq.offset_fetch_request,
    ApiKey.JOIN_GROUP: rq.join_group_request,
    ApiKey.SYNC_GROUP: rq.sync_group_request,
    ApiKey.HEARTBEAT: rq.heartbeat_request,
    ApiKey.LEAVE_GROUP: rq.leave_group_request,
    ApiKey.CONSUMER_GROUP_DESCRIBE: rq.consumer_group_describe_request,
    ApiKey.DESCRIBE_GROUPS: rq.describe_groups_request,
    ApiKey.SASL_HANDSHAKE: rq.sasl_handshake_request,
    ApiKey.SASL_AUTHENTICATE: rq.sasl_authenticate_request,
}


def parse_bootstrap(bootstrap_servers: str) -> list[tuple[str, int]]:
    """``"host:port,host2:port2"`` → [(host, port), ...] (IPv6 hosts in brackets)."""
    result: list[tuple[str, int]] = []
    for item in bootstrap_servers.split(","):
        item = item.strip()
        if not item:
            continue
        host, _, port = item.rpartition(":")
        result.append((host.strip("[]"), int(port)))
    return result


class BlockingKafkaConnection:
    """One blocking connection: connect, negotiate versions, then ``send`` requests in turn.

    ``timeout`` (seconds) bounds connecting and each exchange; exceeding it raises
    KafkaTimeoutError and closes the connection. A closed peer raises DisconnectedError,
    connection failures KafkaConnectionError; undecodable answers raise ProtocolError
    subclasses. ``api_versions_max`` starts the handshake at a lower ApiVersions version.
    """

    def __init__(
        self,
        host: str,
        port: int,
        client_id: str | None = "kafka-actors-testing",
        *,
        timeout: float = 30.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        api_versions_max: int | None = None,
        connect: bool = True,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout = timeout
        self._max_frame_size = max_frame_size
        self._api_versions_max = api_versions_max
        self._sock: socket.socket | None = None
        self._decoder = FrameDecoder(max_frame_size)
        self._ids = CorrelationIds()
        self._versions: NegotiatedVersions | None = None
        #: ApiVersions versions sent during the handshake, in order (shows the fallback path).
        self.api_versions_attempts: list[int] = []
        if connect:
            self.connect()

    @classmethod
    def bootstrap(cls, bootstrap_servers: str, **kwargs: Any) -> BlockingKafkaConnection:
        """Connect to the first reachable address of a bootstrap list."""
        last: Exception | None = None
        for host, port in parse_bootstrap(bootstrap_servers):
            try:
                return cls(host, port, **kwargs)
            except KafkaConnectionError as exc:
                last = exc
        raise KafkaConnectionError(f"No bootstrap server reachable in {bootstrap_servers!r}") from (
            last
        )

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def node(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._sock is not None

    @property
    def versions(self) -> NegotiatedVersions:
        if self._versions is None:
            raise DisconnectedError("Not connected", node=self.node)
        return self._versions

    def connect(self) -> NegotiatedVersions:
        """Open the socket and run the ApiVersions handshake."""
        self.close()
        try:
            self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except TimeoutError as exc:
            raise KafkaTimeoutError("Timed out connecting", node=self.node) from exc
        except OSError as exc:
            raise KafkaConnectionError(f"Cannot connect: {exc}", node=self.node) from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._decoder = FrameDecoder(self._max_frame_size)
        self.api_versions_attempts = []
        try:
            handshake = ApiVersionsHandshake(max_version=self._api_versions_max)
            request, version = handshake.initial_request()
            while True:
                self.api_versions_attempts.append(version)
                correlation_id = self._write(request)
                step = handshake.handle_response_bytes(
                    self._read_frame(), correlation_id=correlation_id
                )
                if isinstance(step, Done):
                    self._versions = step.versions
                    return step.versions
                request, version = step.request, step.version
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        sock, self._sock = self._sock, None
        self._versions = None
        if sock is not None:
            try:
                sock.close()
            except OSError:  # pragma: no cover - close on a dead socket
                pass

    def __enter__(self) -> BlockingKafkaConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- exchanges ----------------------------------------------------------------------------

    def version_for(self, api: int) -> int:
        """Highest version of ``api`` both this client and the broker support."""
        return self.versions.version_for(api)

    def send(self, request: Any) -> Any:
        """Send a kio request (its class fixes the version) and return the decoded response."""
        return decode_response(self.send_raw(request), response_type_for(request))

    def send_raw(self, request: Any) -> bytes:
        """Send a kio request and return its response frame undecoded (after the size prefix);
        the correlation id is checked."""
        if self._sock is None:
            raise DisconnectedError("Not connected", node=self.node)
        try:
            correlation_id = self._write(request)
            frame = self._read_frame()
        except BaseException:
            self.close()
            raise
        received = int.from_bytes(frame[:4], "big", signed=True)
        if received != correlation_id:
            self.close()
            raise CorrelationIdMismatchError(
                expected=correlation_id, received=received, node=self.node
            )
        return frame

    def request(self, api: ApiKey, *, version: int | None = None, **fields: Any) -> Any:
        """Build a request with the builder of ``api`` from ``kafka_actors.protocol.wire.requests``
        at ``version`` (default: the negotiated one), send it and return the response."""
        chosen = self.version_for(api) if version is None else version
        return self.send(BUILDERS[api](chosen, **fields))

    # -- socket I/O ---------------------------------------------------------------------------

    def _write(self, request: Any) -> int:
        assert self._sock is not None
        correlation_id = self._ids.next()
        data = encode_request(request, correlation_id=correlation_id, client_id=self.client_id)
        write_frame(self._sock, data, self.node)
        return correlation_id

    def _read_frame(self) -> bytes:
        assert self._sock is not None
        return read_frame(self._sock, self._decoder, self.node)
