"""Executor side of the Spark source: read exactly ``[start, end)`` of one partition.

Owns: :class:`BrokerChannel` (one blocking connection: TCP, TLS when the security protocol asks
for it, the ApiVersions handshake, SASL PLAIN/SCRAM, then one request at a time),
:class:`RangeReader` (metadata lookup of the partition's leader and topic id, a fetch loop that
follows leader changes, read_committed filtering through the aborted-transaction lists, data
loss handling), the source's Arrow schema and the conversion of decoded record columns to
``pyarrow.RecordBatch``. No group membership, no actors: an executor task is short and reads one
range, so a small blocking loop on one connection is all it needs.

May touch: sockets, the pure protocol package (wire, versions, requests, records, sasl, tls),
the config, errors, pyarrow (the batches are :mod:`kafka_actors.protocol.records.arrow`'s, as the
columnar poll's). Connections are pooled per Python worker process (Spark reuses
its Python workers), keyed by the connection settings, and closed at process exit.

The Arrow schema (Spark's Kafka source columns, in its order)::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp (Kafka's milliseconds, in UTC), timestampType int,
    headers array<struct<key string, value binary>>   (only with includeHeaders=true)
"""

from __future__ import annotations

import atexit
import random
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from kafka_actors.blocking_io import read_frame, write_frame
from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import (
    DisconnectedError,
    FatalError,
    InvalidMetadataError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    ProtocolError,
    error_for_code,
)
from kafka_actors.protocol.connection.sasl import SaslExchange, mechanism_from_config
from kafka_actors.protocol.connection.tls import build_ssl_context
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.records.arrow import arrow_schema, record_batch
from kafka_actors.protocol.records.decode import DecodedRecords, IsolationLevel, decode_records
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
from kafka_actors.retrying import PacedRetry

__all__ = [
    "ARROW_SCHEMA",
    "ARROW_SCHEMA_WITH_HEADERS",
    "SPARK_SCHEMA",
    "SPARK_SCHEMA_WITH_HEADERS",
    "BrokerChannel",
    "DataLossError",
    "RangeReader",
    "to_arrow",
]

SPARK_SCHEMA: Final = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
SPARK_SCHEMA_WITH_HEADERS: Final = (
    SPARK_SCHEMA + ", headers array<struct<key: string, value: binary>>"
)
#: The columnar poll's schema (:mod:`kafka_actors.protocol.records.arrow`): both read the same way.
ARROW_SCHEMA: Final = arrow_schema(False)
ARROW_SCHEMA_WITH_HEADERS: Final = arrow_schema(True)

_NONE: Final = 0
_OFFSET_OUT_OF_RANGE: Final = 1
#: Partition errors after which the leader is looked up again (Java's Fetcher list).
_REFRESH: Final = frozenset({3, 5, 6, 9, 74, 75, 100, 103})


class DataLossError(FatalError):
    """Records of the planned range are gone (retention, truncation) and failOnDataLoss=true."""


def to_arrow(
    decoded: DecodedRecords, include_headers: bool, stop: int | None = None
) -> pa.RecordBatch | None:
    """The records of ``decoded`` below ``stop`` as one batch of the source's schema: decoded
    with ``columnar=True``, the columnar poll's batches (Arrow buffers filled in C, no Python
    object per record, on the native record path)."""
    count = len(decoded)
    if stop is not None and count and decoded.offset_at(count - 1) >= stop:
        # offsets are increasing: cut at the first offset >= stop
        lo, hi = 0, count
        while lo < hi:
            mid = (lo + hi) // 2
            if decoded.offset_at(mid) < stop:
                lo = mid + 1
            else:
                hi = mid
        count = lo
    if count == 0:
        return None
    return record_batch(decoded, 0, count, include_headers)


# -- one connection ------------------------------------------------------------------------------


class BrokerChannel:
    """One blocking connection to one broker (see module docstring); not thread-safe."""

    def __init__(self, host: str, port: int, config: ConsumerConfig) -> None:
        self.host = host
        self.port = port
        self._config = config
        self._timeout = config.request_timeout_ms / 1000.0
        self._ids = CorrelationIds()
        self._decoder = FrameDecoder(DEFAULT_MAX_FRAME_SIZE)
        self._sock: socket.socket | ssl.SSLSocket | None = None
        self.versions: NegotiatedVersions | None = None

    @property
    def node(self) -> str:
        return f"{self.host}:{self.port}"

    def connect(self) -> None:
        config = self._config
        timeout = config.socket_connection_setup_timeout_ms / 1000.0
        try:
            raw = socket.create_connection((self.host, self.port), timeout=timeout)
        except OSError as exc:
            raise KafkaConnectionError(f"Cannot connect: {exc}", node=self.node) from exc
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock: socket.socket | ssl.SSLSocket = raw
        protocol = config.security_protocol.upper()
        try:
            if protocol in ("SSL", "SASL_SSL"):
                context = build_ssl_context(config)
                sock = context.wrap_socket(raw, server_hostname=self.host)
            sock.settimeout(self._timeout)
            self._sock = sock
            self._decoder = FrameDecoder(DEFAULT_MAX_FRAME_SIZE)
            handshake = ApiVersionsHandshake()
            request, _version = handshake.initial_request()
            while True:
                correlation_id = self._write(request)
                step = handshake.handle_response_bytes(
                    self._read_frame(), correlation_id=correlation_id
                )
                if isinstance(step, Done):
                    self.versions = step.versions
                    break
                request = step.request
            if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
                exchange = SaslExchange(
                    mechanism_from_config(config), self.versions, node=self.node
                )
                while not exchange.done:
                    sasl_request = exchange.next_request()
                    if sasl_request is None:
                        raise ProtocolError("SASL exchange stalled", node=self.node)
                    exchange.on_response(self._exchange(sasl_request))
        except ssl.SSLError as exc:
            self.close()
            raise KafkaConnectionError(f"TLS failed: {exc}", node=self.node) from exc
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        sock, self._sock = self._sock, None
        self.versions = None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def version_for(self, api: int) -> int:
        if self.versions is None:
            raise DisconnectedError("Not connected", node=self.node)
        return self.versions.version_for(api)

    def send(self, request: Any) -> Any:
        """Send one request and return its decoded response (the connection is closed on any
        failure, so the next use reconnects)."""
        if self._sock is None:
            self.connect()
        try:
            return self._exchange(request)
        except BaseException:
            self.close()
            raise

    def _exchange(self, request: Any) -> Any:
        correlation_id = self._write(request)
        frame = self._read_frame()
        return decode_response(frame, response_type_for(request), correlation_id=correlation_id)

    def _write(self, request: Any) -> int:
        assert self._sock is not None
        correlation_id = self._ids.next()
        data = encode_request(
            request, correlation_id=correlation_id, client_id=self._config.client_id or None
        )
        write_frame(self._sock, data, self.node)
        return correlation_id

    def _read_frame(self) -> bytes:
        assert self._sock is not None
        return read_frame(self._sock, self._decoder, self.node)


# -- pooled connections and metadata, per worker process ----------------------------------------


@dataclass(frozen=True, slots=True)
class _Leader:
    host: str
    port: int
    epoch: int
    topic_id: str | None


class _Pool:
    """Connections and partition leaders of one set of connection settings."""

    def __init__(self, config: ConsumerConfig) -> None:
        self.config = config
        # re-entrant: a read abandoned by Spark mid-way (its generator not closed yet) must not
        # block the next read on the same worker thread; the channels are idle between yields
        self.lock = threading.RLock()
        self.channels: dict[tuple[str, int], BrokerChannel] = {}
        self.leaders: dict[tuple[str, int], _Leader] = {}

    def channel(self, host: str, port: int) -> BrokerChannel:
        key = (host, port)
        channel = self.channels.get(key)
        if channel is None:
            channel = self.channels[key] = BrokerChannel(host, port, self.config)
        return channel

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()
        self.channels.clear()


_pools: dict[tuple[tuple[str, str], ...], _Pool] = {}
_pools_lock = threading.Lock()


def _pool_for(settings: Mapping[str, str]) -> _Pool:
    key = tuple(sorted(settings.items()))
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = _Pool(ConsumerConfig.from_dict(dict(settings)))
        return pool


@atexit.register
def _close_pools() -> None:
    with _pools_lock:
        for pool in _pools.values():
            pool.close()
        _pools.clear()


# -- reading a range -----------------------------------------------------------------------------


class RangeReader:
    """Reads ``[start, end)`` of one partition as Arrow batches (see module docstring).

    ``settings``: the ``kafka.``-prefixed options without their prefix (bootstrap.servers,
    security, isolation.level, fetch sizes, request.timeout.ms ...). ``poll_timeout_ms``: how
    long the read may go without progress before failing (Spark's kafkaConsumer.pollTimeoutMs).
    """

    def __init__(
        self,
        settings: Mapping[str, str],
        *,
        include_headers: bool = False,
        fail_on_data_loss: bool = True,
        poll_timeout_ms: int = 120_000,
    ) -> None:
        self._pool = _pool_for(settings)
        self._config = self._pool.config
        self._include_headers = include_headers
        self._fail_on_data_loss = fail_on_data_loss
        self._poll_timeout_s = poll_timeout_ms / 1000.0
        self._read_committed = self._config.isolation_level == "read_committed"
        self._random = random.Random()
        #: Backoff between attempts without progress (retry.backoff.ms doubling to
        #: retry.backoff.max.ms, jitter 0.2), reset by progress.
        self._retry = PacedRetry(self._config, random=self._random.random)
        #: Records skipped because they were gone (failOnDataLoss=false), for tests and logs.
        self.skipped = 0

    def read(self, topic: str, partition: int, start: int, end: int) -> Iterator[pa.RecordBatch]:
        """Yield the records of offsets ``[start, end)`` (fewer when read_committed filters
        aborted records or compaction removed some)."""
        with self._pool.lock:
            yield from self._read(topic, partition, start, end)

    def _read(self, topic: str, partition: int, start: int, end: int) -> Iterator[pa.RecordBatch]:
        config = self._config
        offset = start
        deadline = time.monotonic() + self._poll_timeout_s
        isolation = (
            IsolationLevel.READ_COMMITTED
            if self._read_committed
            else (IsolationLevel.READ_UNCOMMITTED)
        )
        while offset < end:
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(
                    f"No progress reading [{offset}, {end}) within {self._poll_timeout_s:.0f}s",
                    topic=topic,
                    partition=partition,
                    offset=offset,
                )
            try:
                leader = self._leader(topic, partition)
                channel = self._pool.channel(leader.host, leader.port)
                if not channel.connected:
                    channel.connect()
                part = self._fetch(channel, leader, topic, partition, offset)
            except (KafkaConnectionError, KafkaTimeoutError, InvalidMetadataError):
                self._forget(topic, partition)
                self._backoff()
                continue
            code = int(part.error_code)
            if code == _OFFSET_OUT_OF_RANGE:
                offset = self._out_of_range(topic, partition, offset, end)
                continue
            if code in _REFRESH:
                self._forget(topic, partition)
                self._backoff()
                continue
            if code != _NONE:
                raise error_for_code(code, topic=topic, partition=partition, offset=offset)
            records = part.records
            decoded = decode_records(
                bytes(records) if records else b"",
                topic,
                partition,
                fetch_offset=offset,
                check_crcs=config.check_crcs,
                isolation_level=isolation,
                aborted_transactions=part.aborted_transactions,
                max_decompressed_size=config.max_decompressed_batch_bytes,
                columnar=True,
            )
            batch = to_arrow(decoded, self._include_headers, stop=end)
            if batch is not None:
                yield batch
            if decoded.next_fetch_offset > offset:
                offset = decoded.next_fetch_offset
                self._retry.succeeded()
                deadline = time.monotonic() + self._poll_timeout_s
                continue
            # No complete batch at this offset: the range reaches past what the broker serves.
            high = int(part.high_watermark)
            if 0 <= high <= offset and offset < end:
                # the log ends before the planned end: records were truncated
                self._lost(topic, partition, offset, end, f"the log ends at {high}")
                return
            # read_committed behind an open transaction, or a follower catching up: wait
            self._backoff()

    def _fetch(
        self, channel: BrokerChannel, leader: _Leader, topic: str, partition: int, offset: int
    ) -> Any:
        config = self._config
        version = channel.version_for(ApiKey.FETCH)
        if version >= 13 and leader.topic_id is None:
            raise InvalidMetadataError("No topic id known", topic=topic)
        request = rq.fetch_request(
            version,
            partitions=[
                rq.FetchPartition(
                    topic,
                    partition,
                    offset,
                    max(config.max_partition_fetch_bytes, 1),
                    current_leader_epoch=leader.epoch,
                )
            ],
            max_wait_ms=config.fetch_max_wait_ms,
            min_bytes=1,
            max_bytes=config.fetch_max_bytes,
            isolation_level=rq.READ_COMMITTED if self._read_committed else rq.READ_UNCOMMITTED,
            topic_ids={topic: leader.topic_id} if version >= 13 and leader.topic_id else None,
            rack_id=config.client_rack,
        )
        response = channel.send(request)
        top = int(getattr(response, "error_code", 0))
        if top != _NONE:
            raise error_for_code(top, node=channel.node)
        for entry in response.responses:
            for part in entry.partitions:
                if int(part.partition_index) == partition:
                    return part
        raise InvalidMetadataError("Partition missing from the fetch response", topic=topic)

    def _out_of_range(self, topic: str, partition: int, offset: int, end: int) -> int:
        earliest = self._list_offset(topic, partition, rq.EARLIEST_TIMESTAMP)
        latest = self._list_offset(topic, partition, rq.LATEST_TIMESTAMP)
        if offset < earliest:
            self._lost(topic, partition, offset, min(end, earliest), "retention removed them")
            return earliest
        if offset >= latest:
            self._lost(topic, partition, offset, end, f"the log ends at {latest}")
            return end
        return offset

    def _lost(self, topic: str, partition: int, start: int, end: int, why: str) -> None:
        message = (
            f"Records [{start}, {end}) of {topic}-{partition} are gone ({why}); set "
            "failOnDataLoss=false to skip them"
        )
        if self._fail_on_data_loss:
            raise DataLossError(message, topic=topic, partition=partition, offset=start)
        self.skipped += max(0, end - start)

    def _list_offset(self, topic: str, partition: int, timestamp: int) -> int:
        leader = self._leader(topic, partition)
        channel = self._pool.channel(leader.host, leader.port)
        if not channel.connected:
            channel.connect()
        version = channel.version_for(ApiKey.LIST_OFFSETS)
        committed = self._read_committed and version >= 2
        response = channel.send(
            rq.list_offsets_request(
                version,
                timestamps={TopicPartition(topic, partition): timestamp},
                isolation_level=rq.READ_COMMITTED if committed else rq.READ_UNCOMMITTED,
            )
        )
        for entry in response.topics:
            for part in entry.partitions:
                if int(part.partition_index) == partition:
                    code = int(part.error_code)
                    if code != _NONE:
                        raise error_for_code(code, topic=topic, partition=partition)
                    return int(part.offset)
        raise InvalidMetadataError("Partition missing from ListOffsets", topic=topic)

    # -- metadata ------------------------------------------------------------------------------

    def _leader(self, topic: str, partition: int) -> _Leader:
        known = self._pool.leaders.get((topic, partition))
        if known is not None:
            return known
        self._refresh(topic)
        known = self._pool.leaders.get((topic, partition))
        if known is None:
            raise InvalidMetadataError(
                "No leader known for the partition", topic=topic, partition=partition
            )
        return known

    def _forget(self, topic: str, partition: int) -> None:
        self._pool.leaders.pop((topic, partition), None)

    def _refresh(self, topic: str) -> None:
        last: KafkaError | None = None
        for address in self._config.bootstrap_servers:
            channel = self._pool.channel(address.host, address.port)
            try:
                if not channel.connected:
                    channel.connect()
                version = channel.version_for(ApiKey.METADATA)
                response = channel.send(rq.metadata_request(version, topics=[topic]))
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                last = exc
                continue
            brokers = {int(b.node_id): (str(b.host), int(b.port)) for b in response.brokers}
            for entry in response.topics:
                if str(entry.name) != topic:
                    continue
                code = int(entry.error_code)
                if code != _NONE:
                    raise error_for_code(code, topic=topic)
                topic_id = getattr(entry, "topic_id", None)
                for part in entry.partitions:
                    leader = int(part.leader_id)
                    if leader < 0 or leader not in brokers:
                        continue
                    host, port = brokers[leader]
                    self._pool.leaders[(topic, int(part.partition_index))] = _Leader(
                        host,
                        port,
                        int(getattr(part, "leader_epoch", -1)),
                        str(topic_id) if topic_id is not None else None,
                    )
            return
        raise KafkaConnectionError(f"No bootstrap server answered: {last}")

    def _backoff(self) -> None:
        """Wait after an attempt without progress (the request state's backoff)."""
        time.sleep(self._retry.failed())
