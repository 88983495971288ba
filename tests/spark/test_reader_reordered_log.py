"""Issue 10, bug 5: the range reader "returned, for the right offset, the value of a later
offset" (``b'none-116'*3`` at offset 5 in ``test_exact_ranges_every_codec_with_headers``).

The reader was right: the log held record 116 at offset 5. The test's producer was not
idempotent and kept many requests in flight; when the first Produce requests to a new topic are
answered NOT_LEADER_OR_FOLLOWER and retried, the batches behind them are appended first.
Three failed requests of 37 records each put record 3*37+5 = 116 at offset 5. A broker
publishes a new topic's leader in its metadata cache before its replica manager has made the
partition (BrokerMetadataPublisher sets the image, then applies the topic delta); on a loaded
machine that took 400 ms for one partition, and librdkafka logged "MessageSet with 37
message(s) (MsgId 0) encountered error: Broker: Not leader for partition" right after the
testkit's create_topic had seen the leader. Shown here deterministically on librdkafka's mock
cluster (failed Produce requests injected, responses delayed so that every batch is in
flight); the reader's loop is also shown to keep no view of a receive buffer that is reused
(the aliasing first suspected).

No JVM: the mock cluster runs in this process.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from kio.schema.errors import ErrorCode

import kafka_actors.spark.reader as reader_module
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records import decode as records
from kafka_actors.protocol.records.build import RecordSpec, build_batch
from kafka_actors.protocol.wire.framing import FrameDecoder, decode_response, encode_response
from kafka_actors.spark.reader import RangeReader
from kafka_actors.testing.mock import MockCluster
from tests.fetch.fetch_harness import Part, fetch_response
from tests.spark.test_reader_broker import _produce

_PRODUCE = 0  # Kafka's API key of Produce
_FAILED_REQUESTS = 3


@pytest.fixture
def flaky_leader() -> Iterator[MockCluster]:
    """One mock broker whose first three Produce requests fail with NOT_LEADER_OR_FOLLOWER and
    whose responses take 300 ms (until the test resets it), so that a producer has all its
    batches in flight by then."""
    with MockCluster(num_brokers=1) as mock:
        mock.create_topic("t", partitions=1, replication_factor=1)
        mock.set_broker_rtt(1, 300)
        mock.push_request_errors(
            _PRODUCE, [ErrorCode.not_leader_or_follower.value] * _FAILED_REQUESTS
        )
        yield mock


def _produce_plain(bootstrap: str, count: int) -> None:
    """The broker test's producer before the fix (not idempotent, requests in flight without
    limit: librdkafka's default, 37 records a batch), with batches cut by count alone (a long
    linger; flush sends the last one at once), so that the numbers are those of the failure."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": "none",
            "linger.ms": 1000,
            "batch.num.messages": 37,
        }
    )
    for i in range(count):
        producer.produce(
            "t",
            key=f"k{i}".encode(),
            value=f"none-{i}".encode() * 3,
            partition=0,
            headers=[("n", str(i).encode()), ("codec", b"none")],
            timestamp=1_700_000_000_000 + i,
        )
    assert producer.flush(30) == 0


def _consume(bootstrap: str, start: int, end: int) -> dict[int, tuple[Any, Any, Any]]:
    """Offsets ``[start, end)`` of t-0 as librdkafka's consumer reads them: key, value, headers."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        consumer.assign([CTopicPartition("t", 0, start)])
        out: dict[int, tuple[Any, Any, Any]] = {}
        deadline = time.monotonic() + 30
        while len(out) < end - start and time.monotonic() < deadline:
            for msg in consumer.consume(500, 1.0):
                if msg.error() is None and start <= msg.offset() < end:
                    headers = [{"key": k, "value": v} for k, v in msg.headers() or []]
                    out[msg.offset()] = (msg.key(), msg.value(), headers)
        return out
    finally:
        consumer.close()


def _read_rows(bootstrap: str, start: int, end: int) -> dict[int, tuple[Any, Any, Any]]:
    reader = RangeReader(
        {"bootstrap.servers": bootstrap, "max.partition.fetch.bytes": "2048"},
        include_headers=True,
    )
    table = pa.Table.from_batches(list(reader.read("t", 0, start, end)))
    rows = zip(
        table.column("offset").to_pylist(),
        table.column("key").to_pylist(),
        table.column("value").to_pylist(),
        table.column("headers").to_pylist(),
        strict=True,
    )
    return {offset: (key, value, headers) for offset, key, value, headers in rows}


def test_retried_produce_requests_reorder_a_plain_producers_log(
    flaky_leader: MockCluster,
) -> None:
    bootstrap = flaky_leader.bootstrap_servers
    flaky_leader.set_broker_rtt(1, 1000)  # all 14 batches are sent before the first answer
    _produce_plain(bootstrap, 500)
    flaky_leader.set_broker_rtt(1, 0)
    logged = _consume(bootstrap, 5, 433)
    rows = _read_rows(bootstrap, 5, 433)
    # the failure of issue 10, with the same numbers: record 116 at offset 5
    assert logged[5][1] == b"none-116" * 3
    # the reader returns for every offset what the log holds there, as librdkafka reads it
    assert rows == logged


def test_broker_tests_producer_keeps_produce_order_through_retries(
    flaky_leader: MockCluster,
) -> None:
    bootstrap = flaky_leader.bootstrap_servers
    _produce(bootstrap, "t", "none", 500)  # asserts each record landed at its produce index
    flaky_leader.set_broker_rtt(1, 0)
    rows = _read_rows(bootstrap, 5, 433)
    assert sorted(rows) == list(range(5, 433))
    for offset, (key, value, headers) in rows.items():
        assert (key, value) == (f"k{offset}".encode(), f"none-{offset}".encode() * 3)
        assert headers[0] == {"key": "n", "value": str(offset).encode()}


def _batch(base: int, count: int) -> bytes:
    """Records ``base .. base+count-1`` with key, value and header naming their offset."""
    return build_batch(
        [
            RecordSpec(
                key=f"k{base + i:06d}".encode(),
                value=f"v{base + i:06d}".encode(),
                headers=(("n", f"{base + i:06d}".encode()),),
            )
            for i in range(count)
        ],
        base_offset=base,
    )


def _decoder(kind: str, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """``decode_records`` of the native record path (skips when not built) or of a fresh copy
    of the module forced to pure Python."""
    if kind == "native":
        if records.IMPLEMENTATION != "native":
            pytest.skip(f"no native record path: {records.NATIVE_UNAVAILABLE_REASON}")
        native: Callable[..., Any] = records.decode_records
        return native
    monkeypatch.setenv(records.PURE_ENV, "1")
    spec = importlib.util.spec_from_file_location("records_pure_for_reader", records.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it runs
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    assert module.IMPLEMENTATION == "python"
    pure: Callable[..., Any] = module.decode_records
    return pure


@pytest.mark.parametrize("decoder", ["python", "native"])
def test_batches_keep_their_values_when_the_receive_buffer_is_reused(
    monkeypatch: pytest.MonkeyPatch, decoder: str
) -> None:
    """The reader's own loop (fetch -> Fetch decoding -> record decoding -> Arrow) over
    responses that arrive in one receive buffer overwritten by each next response (as a
    ``recv_into`` loop would do): every batch keeps the values of its own offsets. Any buffer
    reused across fetches that a batch still points into fails it (checked: a conversion
    buffer shared by the batches made it read ``v000333`` at offset 5)."""
    monkeypatch.setattr(reader_module, "decode_records", _decoder(decoder, monkeypatch))
    per_fetch = 37
    frames = []
    for n, base in enumerate(range(0, 10 * per_fetch, per_fetch)):
        records = _batch(base, per_fetch)
        response = fetch_response(12, {TopicPartition("t", 0): Part(records, high_watermark=999)})
        frames.append(encode_response(response, correlation_id=n))
    assert len({len(f) for f in frames}) == 1  # same layout: a stale view would read new bytes
    received = bytearray(len(frames[0]))
    decoder = FrameDecoder()
    response_type = type(fetch_response(12, {}))
    fetched: list[int] = []

    def fetch(_self: Any, _channel: Any, _leader: Any, _topic: str, _p: int, offset: int) -> Any:
        received[:] = frames[offset // per_fetch]  # overwrite the one receive buffer
        (frame,) = decoder.feed(memoryview(received))
        response = decode_response(frame, response_type)
        fetched.append(offset)
        return response.responses[0].partitions[0]

    class Connected:
        connected = True

    leader = reader_module._Leader("127.0.0.1", 9092, 0, None)
    monkeypatch.setattr(RangeReader, "_fetch", fetch)
    monkeypatch.setattr(RangeReader, "_leader", lambda *_: leader)
    reader = RangeReader({"bootstrap.servers": "127.0.0.1:9092"}, include_headers=True)
    monkeypatch.setattr(reader._pool, "channel", lambda *_: Connected())
    batches = list(reader.read("t", 0, 5, 10 * per_fetch - 3))
    assert len(fetched) == 10
    table = pa.Table.from_batches(batches)
    offsets = table.column("offset").to_pylist()
    assert offsets == list(range(5, 10 * per_fetch - 3))
    assert table.column("value").to_pylist() == [f"v{o:06d}".encode() for o in offsets]
    assert table.column("key").to_pylist() == [f"k{o:06d}".encode() for o in offsets]
    headers = table.column("headers").to_pylist()
    assert [h[0]["value"] for h in headers] == [f"{o:06d}".encode() for o in offsets]
