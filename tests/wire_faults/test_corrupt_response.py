"""Bug 1 of issue 10, on the pure connection state machine: an answer that cannot be decoded
fails the request it answers (typed, retriable, naming node and API) and breaks the connection;
an undecodable handshake answer breaks the connection with the same error and backs off.

Before the fix the request was taken out of the in-flight table before decoding, so the
Broken event left nothing to fail: the requester waited forever.
"""

from __future__ import annotations

import pickle
import struct

from kio.schema.errors import ErrorCode
from kio.schema.sasl_handshake.v1 import SaslHandshakeResponse

from kafka_actors.clock import ManualClock
from kafka_actors.errors import (
    CorruptResponseError,
    DisconnectedError,
    KafkaConnectionError,
    ProtocolError,
)
from kafka_actors.protocol.connection.node import Broken, ConnectionState, Failed, NodeConnection
from tests.actors.test_connection import (
    NODE,
    FakeBroker,
    _to_sasl_handshake,
    connect_ready,
    metadata_response,
    pending,
    plain,
    settings,
)


def _garbage_answer(correlation_id: int, body: bytes = b"\xde\xad\xbe\xef\x01") -> bytes:
    """A frame with the right correlation id and a body that decodes as nothing sensible."""
    payload = struct.pack(">i", correlation_id) + b"\x00" + body
    return struct.pack(">i", len(payload)) + payload


def _ready(clock: ManualClock) -> tuple[NodeConnection, FakeBroker]:
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5)
    connect_ready(conn, clock, broker)
    return conn, broker


def test_undecodable_answer_fails_its_request_typed_and_breaks() -> None:
    clock = ManualClock(100.0)
    conn, broker = _ready(clock)
    first, second = pending(clock, token="first"), pending(clock, token="second")
    conn.enqueue(first)
    conn.enqueue(second)
    [(h1, _), _] = broker.take(conn.flush(clock.monotonic())[0])
    _, events = conn.receive(_garbage_answer(h1.correlation_id), clock.monotonic())
    failed, broken = events
    assert isinstance(failed, Failed) and failed.request is first
    error = failed.error
    assert isinstance(error, CorruptResponseError)
    assert isinstance(error, DisconnectedError) and isinstance(error, KafkaConnectionError)
    assert error.retriable
    assert error.node == NODE and error.api == "Metadata"
    assert "Metadata v12" in str(error) and f"node {NODE}" in str(error)
    assert isinstance(error.__cause__, ProtocolError)
    assert isinstance(broken, Broken) and broken.error is error
    # The shell closes the socket: the request behind it fails as disconnected (retriable).
    lost = conn.connection_lost(broken.error, clock.monotonic())
    [other] = lost
    assert isinstance(other, Failed) and other.request is second
    assert isinstance(other.error, DisconnectedError) and other.error.retriable
    assert conn.state is ConnectionState.DISCONNECTED and conn.in_flight_count == 0
    assert conn.connect_delay(clock.monotonic()) > 0  # reconnect backoff


def test_truncated_answer_fails_its_request() -> None:
    clock = ManualClock(100.0)
    conn, broker = _ready(clock)
    conn.enqueue(pending(clock, token="m"))
    [(h, _)] = broker.take(conn.flush(clock.monotonic())[0])
    good = broker.answer(metadata_response(), h.correlation_id)
    payload = good[4:-3]
    _, events = conn.receive(struct.pack(">i", len(payload)) + payload, clock.monotonic())
    assert [type(e) for e in events] == [Failed, Broken]
    assert isinstance(events[0].error, CorruptResponseError)  # type: ignore[union-attr]


def test_good_answers_before_the_bad_one_complete() -> None:
    clock = ManualClock(100.0)
    conn, broker = _ready(clock)
    conn.enqueue(pending(clock, token="a"))
    conn.enqueue(pending(clock, token="b"))
    [(h1, _), (h2, _)] = broker.take(conn.flush(clock.monotonic())[0])
    data = broker.answer(metadata_response(), h1.correlation_id) + _garbage_answer(
        h2.correlation_id
    )
    _, events = conn.receive(data, clock.monotonic())
    assert [type(e).__name__ for e in events] == ["Completed", "Failed", "Broken"]


def test_corrupt_response_error_pickles_with_its_context() -> None:
    error = CorruptResponseError("bad", api="Fetch", node=3)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is CorruptResponseError
    assert again.api == "Fetch" and again.node == 3 and again.message == "bad"


def test_undecodable_api_versions_answer_breaks_with_backoff() -> None:
    clock = ManualClock(100.0)
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5)
    waiting = pending(clock, timeout=60.0, token="queued")
    conn.enqueue(waiting)
    delays = []
    for _attempt in range(3):
        conn.start_connect(clock.monotonic())
        [(h, _)] = broker.take(conn.transport_ready(clock.monotonic()))
        # ApiVersions v4 answer: header v0, error code 0, two api_keys announced, none there.
        payload = struct.pack(">ih", h.correlation_id, 0) + b"\x03\x00"
        _, events = conn.receive(struct.pack(">i", len(payload)) + payload, clock.monotonic())
        [broken] = events
        assert isinstance(broken, Broken) and isinstance(broken.error, CorruptResponseError)
        assert broken.error.api == "ApiVersions" and broken.error.node == NODE
        assert conn.connection_lost(broken.error, clock.monotonic()) == []  # queued stays
        delays.append(conn.connect_delay(clock.monotonic()))
        clock.advance(delays[-1])
    assert conn.queued_count == 1
    assert delays[0] > 0 and delays[1] > delays[0] and delays[2] > delays[1]


def test_undecodable_sasl_answer_breaks_typed() -> None:
    clock = ManualClock(100.0)
    broker = FakeBroker()
    conn = NodeConnection(NODE, settings(), random=lambda: 0.5, sasl=plain)
    h = _to_sasl_handshake(conn, clock, broker)
    ok = broker.answer(
        SaslHandshakeResponse(error_code=ErrorCode.none, mechanisms=("PLAIN",)), h.correlation_id
    )
    payload = ok[4:-2]  # the mechanisms array ends early
    _, events = conn.receive(struct.pack(">i", len(payload)) + payload, clock.monotonic())
    [broken] = events
    assert isinstance(broken, Broken) and isinstance(broken.error, CorruptResponseError)
    assert broken.error.api == "SaslHandshake"
    conn.connection_lost(broken.error, clock.monotonic())
    assert conn.state is ConnectionState.DISCONNECTED and not conn.auth_failed
