"""The pure per-node connection state machine, driven by hand with a manual clock.

A tiny fake broker side decodes the frames the connection writes and encodes answers with the
same kio codecs; nothing here touches a socket or the real clock.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.api_versions.v0 import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v4 import ApiVersionsResponse as ApiVersionsResponseV4
from kio.schema.api_versions.v4.response import ApiVersion as ApiVersionV4
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import MetadataResponse as MetadataResponseV12
from kio.schema.sasl_authenticate.v2 import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1 import SaslHandshakeResponse
from kio.schema.types import BrokerId
from kio.static.primitive import i16, i32Timedelta, i64Timedelta

from kafka_actors.actors.network.transport import RECV_SIZE
from kafka_actors.clock import ManualClock
from kafka_actors.errors import (
    AuthenticationError,
    CorrelationIdMismatchError,
    DisconnectedError,
    KafkaTimeoutError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
    UnsupportedVersionError,
)
from kafka_actors.protocol.connection.node import (
    FRAME_POOL_IDLE_S,
    Broken,
    Completed,
    ConnectionSettings,
    ConnectionState,
    Failed,
    NodeConnection,
    PendingRequest,
    Ready,
    Reauthenticated,
    exponential_backoff,
)
from kafka_actors.protocol.connection.sasl import PlainMechanism
from kafka_actors.protocol.wire import requests as rq
from kafka_actors.protocol.wire.apis import CLIENT_VERSIONS, ApiKey, request_type
from kafka_actors.protocol.wire.framing import (
    FRAME_POOL_BYTES,
    FrameDecoder,
    decode_request,
    encode_response,
)

ZERO32 = i32Timedelta.parse(datetime.timedelta(0))
ZERO64 = i64Timedelta.parse(datetime.timedelta(0))
NODE = 7


class FakeBroker:
    """Decodes what the connection wrote; answers with encoded frames."""

    def __init__(self) -> None:
        self.decoder = FrameDecoder()
        self.requests: list[tuple[Any, Any]] = []  # (header, body)

    def take(self, data: bytes) -> list[tuple[Any, Any]]:
        frames = self.decoder.feed(data)
        got = [decode_request(f, request_type) for f in frames]
        self.requests += got
        return got

    @staticmethod
    def answer(response: Any, correlation_id: int) -> bytes:
        return encode_response(response, correlation_id=correlation_id)


def api_versions_v4(*extra: tuple[int, int, int]) -> ApiVersionsResponseV4:
    keys = [(18, 0, 4), (3, 0, 13), (1, 4, 17), (17, 0, 1), (36, 0, 2), *extra]
    return ApiVersionsResponseV4(
        error_code=ErrorCode.none,
        api_keys=tuple(
            ApiVersionV4(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
            for k, lo, hi in keys
        ),
        throttle_time=ZERO32,
    )


def metadata_response() -> MetadataResponseV12:
    return MetadataResponseV12(
        throttle_time=ZERO32, brokers=(), cluster_id="c", controller_id=BrokerId(1), topics=()
    )


def settings(**kw: Any) -> ConnectionSettings:
    base: dict[str, Any] = {
        "client_id": "unit",
        "reconnect_backoff_ms": 100,
        "reconnect_backoff_max_ms": 1_600,
        "setup_timeout_ms": 1_000,
        "setup_timeout_max_ms": 4_000,
        "request_timeout_ms": 5_000,
        "max_in_flight": 5,
    }
    base.update(kw)
    return ConnectionSettings(**base)


def pending(clock: ManualClock, timeout: float = 5.0, token: Any = None) -> PendingRequest:
    return PendingRequest(
        rq.metadata_request(12, topics=None), token, clock.monotonic() + timeout, "t"
    )


def connect_ready(conn: NodeConnection, clock: ManualClock, broker: FakeBroker) -> None:
    conn.start_connect(clock.monotonic())
    assert conn.state.value == "connecting"
    out = conn.transport_ready(clock.monotonic())
    assert conn.state.value == "api_versions"
    [(header, body)] = broker.take(out)
    assert body.__api_key__ == ApiKey.API_VERSIONS
    assert body.__version__ == CLIENT_VERSIONS[ApiKey.API_VERSIONS].max  # v5 (KIP-1242)
    out, events = conn.receive(broker.answer(api_versions_v4(), header.correlation_id), 0.0)
    assert out == b""
    assert len(events) == 1 and isinstance(events[0], Ready)
    assert conn.state is ConnectionState.READY


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(100.0)


# -- backoff --------------------------------------------------------------------------------


@pytest.mark.parametrize("attempts", range(8))
@pytest.mark.parametrize("r", [0.0, 0.25, 0.5, 0.999999])
def test_backoff_bounds(attempts: int, r: float) -> None:
    value = exponential_backoff(100, 1_600, attempts, r)
    nominal = min(1_600, 100 * 2**attempts)
    assert nominal * 0.8 - 1e-9 <= value <= min(1_600, nominal * 1.2)


def test_backoff_without_room_is_flat() -> None:
    assert exponential_backoff(500, 500, 9, 0.9) == 500
    assert exponential_backoff(0, 1000, 3, 0.5) == 0


# -- connecting ------------------------------------------------------------------------------


def test_happy_path_and_request_response(clock: ManualClock) -> None:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5)
    assert conn.connect_delay(clock.monotonic()) == 0.0
    connect_ready(conn, clock, broker)
    assert conn.versions is not None and conn.versions.version_for(ApiKey.METADATA) == 12 + 1
    req = pending(clock, token="mine")
    conn.enqueue(req)
    out, failed = conn.flush(clock.monotonic())
    assert failed == []
    [(header, body)] = broker.take(out)
    assert header.client_id == "unit" and body.__api_key__ == ApiKey.METADATA
    assert conn.in_flight_count == 1
    _, events = conn.receive(broker.answer(metadata_response(), header.correlation_id), 0.0)
    [done] = events
    assert isinstance(done, Completed) and done.request is req
    assert isinstance(done.response, MetadataResponseV12)
    assert conn.in_flight_count == 0


def _ready_with_requests(
    clock: ManualClock, count: int
) -> tuple[FakeBroker, NodeConnection, list[tuple[Any, Any]]]:
    """A ready connection with ``count`` requests sent: the broker, the connection, and the
    requests as the broker read them (header, body)."""
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5)
    connect_ready(conn, clock, broker)
    for _ in range(count):
        conn.enqueue(pending(clock))
    out, _ = conn.flush(clock.monotonic())
    return broker, conn, broker.take(out)


def test_responses_may_arrive_split_anywhere(clock: ManualClock) -> None:
    broker, conn, got = _ready_with_requests(clock, 3)
    data = b"".join(broker.answer(metadata_response(), h.correlation_id) for h, _ in got)
    completed = []
    for i in range(len(data)):
        _, events = conn.receive(data[i : i + 1], 0.0)
        completed += events
    assert [type(e) for e in completed] == [Completed] * 3


def test_a_large_response_read_into_its_own_buffer(clock: ManualClock) -> None:
    """The network actor reads the rest of a large frame straight into the connection's
    buffer (read_buffer / buffer_updated): the same responses complete, in order, between
    frames read in chunks."""
    broker, conn, got = _ready_with_requests(clock, 3)
    big = MetadataResponseV12(
        throttle_time=ZERO32,
        brokers=(),
        cluster_id="c" * 300_000,
        controller_id=BrokerId(1),
        topics=(),
    )
    answers = [big, metadata_response(), big]
    data = b"".join(
        broker.answer(a, h.correlation_id) for a, (h, _) in zip(answers, got, strict=True)
    )
    completed: list[Any] = []
    pos = 0
    buffered_reads = 0
    while pos < len(data):
        into = conn.read_buffer(65_536)
        if into is None:
            _, events = conn.receive(data[pos : pos + 1000], 0.0)
            pos += 1000
        else:
            n = min(len(into), 70_000)
            into[:n] = data[pos : pos + n]
            into.release()
            pos += n
            buffered_reads += 1
            _, events = conn.buffer_updated(n, 0.0)
        completed += events
    assert buffered_reads >= 8  # both large frames went mostly into their own buffers
    assert [type(e) for e in completed] == [Completed] * 3
    assert [e.response.cluster_id for e in completed] == ["c" * 300_000, "c", "c" * 300_000]


def _deliver_into_buffers(conn: NodeConnection, data: bytes, now: float) -> list[Any]:
    """``data`` read as the network actor does: into the connection's buffer when offered."""
    events: list[Any] = []
    pos = 0
    while pos < len(data):
        into = conn.read_buffer(65_536)
        if into is None:
            _, more = conn.receive(data[pos : pos + 65_536], now)
            pos += 65_536
        else:
            n = min(len(into), len(data) - pos)
            into[:n] = data[pos : pos + n]
            into.release()
            pos += n
            _, more = conn.buffer_updated(n, now)
        events += more
    return events


def test_frame_buffers_kept_beyond_the_default_bound_go_once_idle(clock: ManualClock) -> None:
    """A connection keeps a frame buffer larger than FRAME_POOL_BYTES (a consumer's is sized
    to fetch.max.bytes) while such frames keep coming, and lets it go FRAME_POOL_IDLE_S after
    the last one: a paused consumer does not hold a Fetch response's worth of memory."""
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(frame_pool_bytes=64 << 20), random=lambda: 0.5)
    connect_ready(conn, clock, broker)
    assert conn.frame_pool_deadline() is None
    big = MetadataResponseV12(
        throttle_time=ZERO32,
        brokers=(),
        cluster_id="c" * (20 << 20),
        controller_id=BrokerId(1),
        topics=(),
    )
    for at in (10.0, 12.0):  # the second large answer is received into the kept buffer
        conn.enqueue(pending(clock))
        out, _ = conn.flush(clock.monotonic())
        [(header, _)] = broker.take(out)
        events = _deliver_into_buffers(conn, broker.answer(big, header.correlation_id), at)
        assert [type(e) for e in events] == [Completed]
        del events
    pool = conn._decoder.pool
    assert (pool.made, pool.reused) == (1, 1) and pool.kept_bytes > FRAME_POOL_BYTES
    assert conn.frame_pool_deadline() == 12.0 + FRAME_POOL_IDLE_S
    conn.trim_frame_pool(12.0 + FRAME_POOL_IDLE_S)
    assert pool.kept_bytes == 0 and conn.frame_pool_deadline() is None


def test_a_huge_size_prefix_gets_no_buffer_until_a_quarter_arrived(clock: ManualClock) -> None:
    """A broker's size prefix of 100 MiB followed by 300 KiB: the network actor is offered no
    buffer to read into (it would be 100 MiB, allocated on the prefix's word), it reads
    chunks; once a quarter of a large answer has arrived it is."""
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5)
    connect_ready(conn, clock, broker)
    conn.enqueue(pending(clock))
    out, _ = conn.flush(clock.monotonic())
    [(header, _)] = broker.take(out)
    declared = 100 * 1024 * 1024
    data = struct.pack(">ii", declared, header.correlation_id) + b"z" * (300 * 1024)
    for pos in range(0, len(data), 16_384):
        assert conn.read_buffer(RECV_SIZE) is None
        assert conn.receive(data[pos : pos + 16_384], 0.0) == (b"", [])
    assert conn.read_buffer(RECV_SIZE) is None
    # an answer of 1.2 MiB gets its buffer once 300 KiB of it arrived
    big = MetadataResponseV12(
        throttle_time=ZERO32,
        brokers=(),
        cluster_id="c" * 1_200_000,
        controller_id=BrokerId(1),
        topics=(),
    )
    fresh = NodeConnection(NODE, settings(), random=lambda: 0.5)
    broker = FakeBroker()
    connect_ready(fresh, clock, broker)
    fresh.enqueue(pending(clock))
    out, _ = fresh.flush(clock.monotonic())
    [(header, _)] = broker.take(out)
    answer = broker.answer(big, header.correlation_id)
    pos = 0
    while (into := fresh.read_buffer(RECV_SIZE)) is None:
        assert fresh.receive(answer[pos : pos + 65_536], 0.0) == (b"", [])
        pos += 65_536
    assert (len(answer) - 4) // 4 <= pos - 4 < (len(answer) - 4) // 4 + 65_536
    assert len(into) == len(answer) - pos
    into[:] = answer[pos:]
    into.release()
    _, events = fresh.buffer_updated(len(answer) - pos, 0.0)
    assert [type(e) for e in events] == [Completed]
    assert events[0].response.cluster_id == "c" * 1_200_000


def test_api_versions_v0_fallback(clock: ManualClock) -> None:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5)
    conn.start_connect(clock.monotonic())
    [(header, _)] = broker.take(conn.transport_ready(clock.monotonic()))
    refused = ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=(ApiVersionV0(api_key=i16(18), min_version=i16(0), max_version=i16(0)),),
    )
    out, events = conn.receive(broker.answer(refused, header.correlation_id), 0.0)
    assert events == []
    [(header2, body2)] = broker.take(out)
    assert body2.__api_key__ == ApiKey.API_VERSIONS and body2.__version__ == 0
    accepted = ApiVersionsResponseV0(
        error_code=ErrorCode.none,
        api_keys=(
            ApiVersionV0(api_key=i16(18), min_version=i16(0), max_version=i16(0)),
            ApiVersionV0(api_key=i16(3), min_version=i16(0), max_version=i16(5)),
        ),
    )
    _, events = conn.receive(broker.answer(accepted, header2.correlation_id), 0.0)
    assert isinstance(events[0], Ready)
    assert conn.versions is not None and conn.versions.version_for(ApiKey.METADATA) == 5
    # A request at a version the broker lacks fails typed instead of being sent.
    conn.enqueue(pending(clock))
    out, failed = conn.flush(clock.monotonic())
    assert out == b""
    [f] = failed
    assert isinstance(f, Failed) and isinstance(f.error, UnsupportedVersionError)
    assert f.error.node == NODE


def test_setup_timeout_breaks_and_grows(clock: ManualClock) -> None:
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5)
    conn.start_connect(clock.monotonic())
    assert conn.next_deadline() == pytest.approx(clock.monotonic() + 1.0)
    clock.advance(0.99)
    assert conn.check_timeouts(clock.monotonic()) == ([], None)
    clock.advance(0.02)
    events, broken = conn.check_timeouts(clock.monotonic())
    assert events == [] and isinstance(broken, KafkaTimeoutError)
    assert "setup" in str(broken) and broken.node == NODE and broken.retriable
    conn.connection_lost(broken, clock.monotonic())
    clock.advance(10)
    conn.start_connect(clock.monotonic())
    # One failure: socket.connection.setup.timeout.ms doubles (random 0.5: no jitter).
    assert conn.next_deadline() == pytest.approx(clock.monotonic() + 2.0)


# -- backoff across failures -----------------------------------------------------------------


def test_reconnect_backoff_grows_then_resets_on_ready(clock: ManualClock) -> None:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5)
    expected = [0.1, 0.2, 0.4, 0.8, 1.6, 1.6]
    for nominal in expected:
        conn.start_connect(clock.monotonic())
        conn.connection_lost(DisconnectedError("refused"), clock.monotonic())
        assert conn.state is ConnectionState.DISCONNECTED
        assert conn.last_backoff == pytest.approx(nominal)
        assert conn.connect_delay(clock.monotonic()) == pytest.approx(nominal)
        clock.advance(nominal - 0.001)
        assert conn.connect_delay(clock.monotonic()) > 0
        clock.advance(0.001)
        assert conn.connect_delay(clock.monotonic()) == 0.0
    connect_ready(conn, clock, broker)
    assert conn.failed_attempts == 0
    conn.connection_lost(DisconnectedError("gone"), clock.monotonic())
    assert conn.last_backoff == pytest.approx(0.1)


def constant(value: float) -> Callable[[], float]:
    return lambda: value


def test_jitter_bounds_with_extreme_random(clock: ManualClock) -> None:
    for r, factor in ((0.0, 0.8), (0.999999, 1.2)):
        conn = NodeConnection(NODE, settings(reconnect_backoff_max_ms=100_000), random=constant(r))
        for n in range(5):
            conn.start_connect(clock.monotonic())
            conn.connection_lost(DisconnectedError("x"), clock.monotonic())
            assert conn.last_backoff == pytest.approx(0.1 * 2**n * factor, rel=1e-5)
            clock.advance(100)


# -- requests, limits and timeouts ------------------------------------------------------------


def test_in_flight_limit_queues_the_rest(clock: ManualClock) -> None:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(max_in_flight=2), random=lambda: 0.5)
    connect_ready(conn, clock, broker)
    reqs = [pending(clock, token=i) for i in range(5)]
    for r in reqs:
        conn.enqueue(r)
    out, _ = conn.flush(clock.monotonic())
    sent = broker.take(out)
    assert len(sent) == 2 and conn.in_flight_count == 2 and conn.queued_count == 3
    assert conn.flush(clock.monotonic()) == (b"", [])
    _, events = conn.receive(broker.answer(metadata_response(), sent[0][0].correlation_id), 0)
    assert [e.request.token for e in events if isinstance(e, Completed)] == [0]
    out, _ = conn.flush(clock.monotonic())
    assert len(broker.take(out)) == 1 and conn.in_flight_count == 2


def test_requests_queue_while_not_ready(clock: ManualClock) -> None:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5)
    conn.enqueue(pending(clock))
    assert conn.flush(clock.monotonic()) == (b"", [])
    # Queued work makes the connection wake its owner when the backoff ends.
    assert conn.next_deadline() is not None
    connect_ready(conn, clock, broker)
    out, _ = conn.flush(clock.monotonic())
    assert len(broker.take(out)) == 1


def test_in_flight_timeout_fails_and_breaks_the_connection(clock: ManualClock) -> None:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5)
    connect_ready(conn, clock, broker)
    early = pending(clock, timeout=1.0, token="early")
    late = pending(clock, timeout=10.0, token="late")
    conn.enqueue(early)
    conn.enqueue(late)
    broker.take(conn.flush(clock.monotonic())[0])
    assert conn.next_deadline() == pytest.approx(clock.monotonic() + 1.0)
    clock.advance(1.0)
    events, broken = conn.check_timeouts(clock.monotonic())
    [failed] = events
    assert isinstance(failed, Failed) and failed.request is early
    assert isinstance(failed.error, KafkaTimeoutError) and failed.error.retriable
    assert isinstance(broken, KafkaTimeoutError)
    # The shell closes the connection: the request behind it fails as disconnected.
    lost = conn.connection_lost(broken, clock.monotonic())
    [behind] = lost
    assert isinstance(behind, Failed) and behind.request is late
    assert isinstance(behind.error, DisconnectedError) and behind.error.retriable
    assert behind.error.node == NODE and f"node {NODE}" in str(behind.error)


def test_queued_timeout_does_not_break(clock: ManualClock) -> None:
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5)
    conn.enqueue(pending(clock, timeout=2.0))
    conn.start_connect(clock.monotonic())
    conn.connection_lost(DisconnectedError("refused"), clock.monotonic())
    assert conn.queued_count == 1  # survives the disconnect
    clock.advance(2.0)
    events, broken = conn.check_timeouts(clock.monotonic())
    assert broken is None
    [failed] = events
    assert isinstance(failed, Failed) and isinstance(failed.error, KafkaTimeoutError)
    assert "refused" in str(failed.error)


def test_correlation_mismatch_breaks(clock: ManualClock) -> None:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5)
    connect_ready(conn, clock, broker)
    conn.enqueue(pending(clock))
    [(header, _)] = broker.take(conn.flush(clock.monotonic())[0])
    _, events = conn.receive(broker.answer(metadata_response(), header.correlation_id + 5), 0)
    [broken] = events
    assert isinstance(broken, Broken) and isinstance(broken.error, CorrelationIdMismatchError)


def test_close_fails_everything(clock: ManualClock) -> None:
    from kafka_actors.errors import ConsumerClosedError

    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(max_in_flight=1), random=lambda: 0.5)
    connect_ready(conn, clock, broker)
    conn.enqueue(pending(clock))
    conn.enqueue(pending(clock))
    conn.flush(clock.monotonic())
    events = conn.close(ConsumerClosedError("bye"))
    assert len(events) == 2 and all(isinstance(e, Failed) for e in events)
    assert conn.state is ConnectionState.CLOSED


# -- SASL -----------------------------------------------------------------------------------


def plain() -> PlainMechanism:
    return PlainMechanism("user", "pw")


def _to_sasl_handshake(conn: NodeConnection, clock: ManualClock, broker: FakeBroker) -> Any:
    conn.start_connect(clock.monotonic())
    [(header, _)] = broker.take(conn.transport_ready(clock.monotonic()))
    out, events = conn.receive(broker.answer(api_versions_v4(), header.correlation_id), 0)
    assert events == [] and conn.state is ConnectionState.AUTHENTICATING
    [(h, body)] = broker.take(out)
    assert body.__api_key__ == ApiKey.SASL_HANDSHAKE and body.mechanism == "PLAIN"
    return h


def test_sasl_success(clock: ManualClock) -> None:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5, sasl=plain)
    h = _to_sasl_handshake(conn, clock, broker)
    ok = SaslHandshakeResponse(error_code=ErrorCode.none, mechanisms=("PLAIN",))
    out, _ = conn.receive(broker.answer(ok, h.correlation_id), 0)
    [(h2, body)] = broker.take(out)
    assert body.__api_key__ == ApiKey.SASL_AUTHENTICATE and body.auth_bytes == b"\0user\0pw"
    answer = SaslAuthenticateResponse(
        error_code=ErrorCode.none, error_message=None, auth_bytes=b"", session_lifetime=ZERO64
    )
    _, events = conn.receive(broker.answer(answer, h2.correlation_id), 0)
    assert isinstance(events[0], Ready) and conn.state is ConnectionState.READY


def test_sasl_mechanism_refused(clock: ManualClock) -> None:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5, sasl=plain)
    h = _to_sasl_handshake(conn, clock, broker)
    no = SaslHandshakeResponse(
        error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=("SCRAM-SHA-512",)
    )
    _, events = conn.receive(broker.answer(no, h.correlation_id), 0)
    [broken] = events
    assert isinstance(broken, Broken) and isinstance(broken.error, UnsupportedSaslMechanismError)
    assert "SCRAM-SHA-512" in str(broken.error)


def test_sasl_failure_fails_queued_and_backs_off_exponentially(clock: ManualClock) -> None:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5, sasl=plain)
    backoffs = []
    for attempt in range(4):
        waiting = pending(clock, timeout=60.0, token=attempt)
        conn.enqueue(waiting)
        h = _to_sasl_handshake(conn, clock, broker)
        ok = SaslHandshakeResponse(error_code=ErrorCode.none, mechanisms=("PLAIN",))
        out, _ = conn.receive(broker.answer(ok, h.correlation_id), 0)
        [(h2, _)] = broker.take(out)
        bad = SaslAuthenticateResponse(
            error_code=ErrorCode.sasl_authentication_failed,
            error_message="Authentication failed: Invalid username or password",
            auth_bytes=b"",
            session_lifetime=ZERO64,
        )
        _, events = conn.receive(broker.answer(bad, h2.correlation_id), 0)
        [broken] = events
        assert isinstance(broken, Broken)
        assert isinstance(broken.error, SaslAuthenticationFailedError)
        assert isinstance(broken.error, AuthenticationError) and not broken.error.retriable
        failed = conn.connection_lost(broken.error, clock.monotonic())
        # The caller waiting on this node gets the typed, non-retriable error.
        assert [f.request.token for f in failed if isinstance(f, Failed)] == [attempt]
        assert all(isinstance(f, Failed) and f.error is broken.error for f in failed)
        backoffs.append(conn.last_backoff)
        clock.advance(conn.last_backoff)
    assert backoffs == pytest.approx([0.1, 0.2, 0.4, 0.8])


# -- re-authentication (KIP-368) --------------------------------------------------------------


def _sasl_ready(
    conn: NodeConnection, clock: ManualClock, broker: FakeBroker, lifetime_ms: int
) -> None:
    h = _to_sasl_handshake(conn, clock, broker)
    ok = SaslHandshakeResponse(error_code=ErrorCode.none, mechanisms=("PLAIN",))
    out, _ = conn.receive(broker.answer(ok, h.correlation_id), clock.monotonic())
    [(h2, _)] = broker.take(out)
    answer = SaslAuthenticateResponse(
        error_code=ErrorCode.none,
        error_message=None,
        auth_bytes=b"",
        session_lifetime=i64Timedelta.parse(datetime.timedelta(milliseconds=lifetime_ms)),
    )
    _, events = conn.receive(broker.answer(answer, h2.correlation_id), clock.monotonic())
    assert isinstance(events[0], Ready)


def _authenticate_answer(code: ErrorCode, lifetime_ms: int) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(
        error_code=code,
        error_message=None if code == ErrorCode.none else "Authentication failed",
        auth_bytes=b"",
        session_lifetime=i64Timedelta.parse(datetime.timedelta(milliseconds=lifetime_ms)),
    )


def test_reauthenticates_in_place_and_holds_requests_meanwhile(clock: ManualClock) -> None:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5, sasl=plain)
    _sasl_ready(conn, clock, broker, lifetime_ms=10_000)
    # 85 % + 10 % x 0.5 of the 10 s session.
    assert conn.reauth_at == pytest.approx(clock.monotonic() + 9.0)
    assert conn.next_deadline() == pytest.approx(clock.monotonic() + 9.0)
    clock.advance(5)
    first = pending(clock, timeout=60, token="first")
    conn.enqueue(first)
    out, _ = conn.flush(clock.monotonic())
    [(h1, _)] = broker.take(out)
    clock.advance(5)  # re-authentication due while "first" is in flight
    second = pending(clock, timeout=60, token="second")
    conn.enqueue(second)
    assert conn.flush(clock.monotonic()) == (b"", [])  # held, and nothing starts yet
    assert not conn.reauth_due(clock.monotonic())
    _, events = conn.receive(broker.answer(metadata_response(), h1.correlation_id), 0)
    assert [type(e) for e in events] == [Completed]
    assert conn.reauth_due(clock.monotonic())
    out, events = conn.flush(clock.monotonic())
    [(h, body)] = broker.take(out)
    assert body.__api_key__ == ApiKey.SASL_HANDSHAKE and events == []
    assert conn.queued_count == 1 and conn.reauthenticating and conn.ready
    assert conn.flush(clock.monotonic()) == (b"", [])  # still held
    ok = SaslHandshakeResponse(error_code=ErrorCode.none, mechanisms=("PLAIN",))
    out, _ = conn.receive(broker.answer(ok, h.correlation_id), clock.monotonic())
    [(h2, body)] = broker.take(out)
    assert body.__api_key__ == ApiKey.SASL_AUTHENTICATE and body.auth_bytes == b"\0user\0pw"
    done = _authenticate_answer(ErrorCode.none, 10_000)
    _, events = conn.receive(broker.answer(done, h2.correlation_id), clock.monotonic())
    assert events == [Reauthenticated(10_000)]
    assert conn.reauth_count == 1 and not conn.reauthenticating
    assert conn.reauth_at == pytest.approx(clock.monotonic() + 9.0)
    out, _ = conn.flush(clock.monotonic())
    [(h3, body)] = broker.take(out)
    assert body.__api_key__ == ApiKey.METADATA
    _, events = conn.receive(broker.answer(metadata_response(), h3.correlation_id), 0)
    assert isinstance(events[0], Completed) and events[0].request is second


def test_refused_reauthentication_breaks_the_connection(clock: ManualClock) -> None:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.0, sasl=plain)
    _sasl_ready(conn, clock, broker, lifetime_ms=1_000)
    clock.advance(1)
    out, _ = conn.flush(clock.monotonic())
    [(h, _)] = broker.take(out)
    ok = SaslHandshakeResponse(error_code=ErrorCode.none, mechanisms=("PLAIN",))
    out, _ = conn.receive(broker.answer(ok, h.correlation_id), clock.monotonic())
    [(h2, _)] = broker.take(out)
    bad = _authenticate_answer(ErrorCode.sasl_authentication_failed, 0)
    _, events = conn.receive(broker.answer(bad, h2.correlation_id), clock.monotonic())
    [broken] = events
    assert isinstance(broken, Broken) and isinstance(broken.error, SaslAuthenticationFailedError)


def test_unanswered_reauthentication_times_out(clock: ManualClock) -> None:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.0, sasl=plain)
    _sasl_ready(conn, clock, broker, lifetime_ms=1_000)
    clock.advance(1)
    broker.take(conn.flush(clock.monotonic())[0])
    assert conn.next_deadline() == pytest.approx(clock.monotonic() + 5.0)
    clock.advance(5)
    _, broken = conn.check_timeouts(clock.monotonic())
    assert isinstance(broken, KafkaTimeoutError) and "Re-authentication" in str(broken)


def test_no_session_lifetime_no_reauthentication(clock: ManualClock) -> None:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5, sasl=plain)
    _sasl_ready(conn, clock, broker, lifetime_ms=0)
    assert conn.reauth_at is None and conn.next_deadline() is None
