"""The pure protocol layer against real brokers (Kafka 4.x, Kafka 3.9) and librdkafka's mock
cluster, through the blocking test client: ApiVersions (with the v0-form fallback), Metadata at
every common version, FindCoordinator, ListOffsets and Fetch of raw record bytes."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kafka_actors.errors import (
    InvalidMetadataError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.wire import requests as rq
from kafka_actors.protocol.wire.apis import CLIENT_VERSIONS, ApiKey, response_type_for
from kafka_actors.protocol.wire.framing import decode_response
from kafka_actors.testing.client import BlockingKafkaConnection

pytestmark = pytest.mark.timeout(600)

CLUSTERS = [
    pytest.param("kafka_broker", marks=pytest.mark.broker, id="kafka4"),
    pytest.param("kafka_broker_39", marks=pytest.mark.broker, id="kafka39"),
    pytest.param("mock_cluster", marks=pytest.mark.mock, id="mock"),
]


@pytest.fixture(params=CLUSTERS)
def cluster(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


@pytest.fixture
def conn(cluster: Any) -> Iterator[BlockingKafkaConnection]:
    with BlockingKafkaConnection.bootstrap(
        cluster.bootstrap_servers, client_id="protocol-tests"
    ) as connection:
        yield connection


def is_mock(cluster: Any) -> bool:
    return type(cluster).__name__ == "MockCluster"


def produce(bootstrap_servers: str, topic: str, partition: int, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            "compression.type": "none",
            "linger.ms": 5,
            "enable.idempotence": False,
        }
    )
    for index in range(count):
        producer.produce(topic, value=b"value-%d" % index, key=b"k%d" % index, partition=partition)
    assert producer.flush(60) == 0


def topic_ids(conn: BlockingKafkaConnection, topic: str) -> dict[str, uuid.UUID]:
    version = conn.version_for(ApiKey.METADATA)
    response = conn.request(ApiKey.METADATA, version=version, topics=[topic])
    assert version >= 10, "topic ids need Metadata v10+"
    return {t.name: t.topic_id for t in response.topics}


def test_api_versions_handshake(cluster: Any, conn: BlockingKafkaConnection) -> None:
    attempts = conn.api_versions_attempts
    assert attempts[0] == CLIENT_VERSIONS[ApiKey.API_VERSIONS].max
    assert attempts == sorted(attempts, reverse=True) and len(set(attempts)) == len(attempts)
    versions = conn.versions
    assert versions.api_versions_version == attempts[-1]
    broker_api_versions = versions.broker[ApiKey.API_VERSIONS]
    assert versions.version_for(ApiKey.API_VERSIONS) == min(
        broker_api_versions.max, CLIENT_VERSIONS[ApiKey.API_VERSIONS].max
    )
    if is_mock(cluster):
        # The mock refuses v3+ (in v0 form) and answers v2.
        assert attempts == [CLIENT_VERSIONS[ApiKey.API_VERSIONS].max, 2]
    for api in (ApiKey.METADATA, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.FIND_COORDINATOR):
        assert versions.supports(api)
    assert versions.supports(ApiKey.CONSUMER_GROUP_HEARTBEAT)


@pytest.mark.parametrize("start", [0, 2, 3])
def test_api_versions_at_lower_versions(cluster: Any, start: int) -> None:
    with BlockingKafkaConnection.bootstrap(
        cluster.bootstrap_servers, api_versions_max=start
    ) as connection:
        assert connection.api_versions_attempts[0] == start
        assert connection.versions.supports(ApiKey.FETCH)
        response = connection.request(ApiKey.METADATA, topics=None)
        assert response.brokers


def test_metadata_at_every_common_version(
    cluster: Any, conn: BlockingKafkaConnection, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(cluster, partitions=3)
    common = conn.versions.range_for(ApiKey.METADATA)
    assert common is not None
    for version in range(common.min, common.max + 1):
        request = rq.metadata_request(version, topics=[topic])
        # Real brokers' answers must decode exactly (no bytes left over); the mock adds one.
        response: Any = decode_response(
            conn.send_raw(request), response_type_for(request), strict=not is_mock(cluster)
        )
        assert response.brokers, version
        (found,) = [t for t in response.topics if t.name == topic]
        assert int(found.error_code) == 0, version
        assert sorted(p.partition_index for p in found.partitions) == [0, 1, 2]
        if version >= 10:
            assert found.topic_id is not None and found.topic_id.int != 0
        every = conn.request(ApiKey.METADATA, version=version, topics=None)
        assert topic in {t.name for t in every.topics}, version


def test_metadata_unknown_topic_maps_to_typed_error(conn: BlockingKafkaConnection) -> None:
    name = f"missing-{uuid.uuid4().hex[:8]}"
    response = conn.request(ApiKey.METADATA, topics=[name], allow_auto_topic_creation=False)
    (found,) = response.topics
    error = error_for_code(int(found.error_code), topic=name)
    assert isinstance(error, UnknownTopicOrPartitionError)
    assert isinstance(error, InvalidMetadataError) and error.retriable
    assert f"topic={name}" in str(error)


def test_find_coordinator(conn: BlockingKafkaConnection) -> None:
    metadata = conn.request(ApiKey.METADATA, topics=None)
    node_ids = {b.node_id for b in metadata.brokers}
    common = conn.versions.range_for(ApiKey.FIND_COORDINATOR)
    assert common is not None
    for version in sorted({common.min, common.max}):
        group = f"group-{uuid.uuid4().hex[:8]}"
        response = conn.request(ApiKey.FIND_COORDINATOR, version=version, key=group)
        if version >= 4:
            (coordinator,) = response.coordinators
            assert coordinator.key == group
        else:
            coordinator = response
        # A fresh group's coordinator may still be loading: retriable by type.
        if int(coordinator.error_code) != 0:
            assert error_for_code(int(coordinator.error_code)).retriable
            continue
        assert coordinator.node_id in node_ids
        assert coordinator.port > 0


def test_list_offsets_and_fetch_raw_records(
    cluster: Any, conn: BlockingKafkaConnection, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(cluster, partitions=2)
    produce(cluster.bootstrap_servers, topic, 0, 25)
    # Talk to the partition leader.
    metadata = conn.request(ApiKey.METADATA, topics=[topic])
    (found,) = metadata.topics
    leaders = {p.partition_index: p.leader_id for p in found.partitions}
    leader_id = leaders[0]
    broker = next(b for b in metadata.brokers if b.node_id == leader_id)
    ids = {found.name: found.topic_id}
    tp0 = TopicPartition(topic, 0)
    with BlockingKafkaConnection(broker.host, broker.port, client_id="fetch-test") as leader:
        list_range = leader.versions.range_for(ApiKey.LIST_OFFSETS)
        assert list_range is not None
        for version in sorted({list_range.min, list_range.max}):
            offsets = {}
            for name, timestamp in (
                ("earliest", rq.EARLIEST_TIMESTAMP),
                ("latest", rq.LATEST_TIMESTAMP),
            ):
                listed = leader.request(
                    ApiKey.LIST_OFFSETS, version=version, timestamps={tp0: timestamp}
                )
                (partition,) = listed.topics[0].partitions
                assert int(partition.error_code) == 0
                offsets[name] = partition.offset
            assert offsets == {"earliest": 0, "latest": 25}, version

        fetch_range = leader.versions.range_for(ApiKey.FETCH)
        assert fetch_range is not None
        versions = {fetch_range.min, fetch_range.max}
        if fetch_range.min <= 12 < fetch_range.max:
            versions.add(12)  # the last version naming topics
        for version in sorted(versions):
            fetch = rq.fetch_request(
                version,
                partitions=[
                    rq.FetchPartition(topic, 0, fetch_offset=0, partition_max_bytes=1 << 20),
                    rq.FetchPartition(topic, 1, fetch_offset=0, partition_max_bytes=1 << 20),
                ],
                max_wait_ms=100,
                min_bytes=1,
                max_bytes=4 << 20,
                topic_ids=ids,
            )
            response: Any = decode_response(
                leader.send_raw(fetch), response_type_for(fetch), strict=not is_mock(cluster)
            )
            assert int(getattr(response, "error_code", 0)) == 0
            (topic_response,) = response.responses
            if version >= 13:
                assert topic_response.topic_id == ids[topic]
            else:
                assert topic_response.topic == topic
            parts = {p.partition_index: p for p in topic_response.partitions}
            assert int(parts[0].error_code) == 0
            assert parts[0].high_watermark == 25
            if leaders[1] == leader_id:
                assert int(parts[1].error_code) == 0
                assert parts[1].high_watermark == 0
            else:  # partition 1 lives elsewhere: the answer maps to a typed, retriable error
                error = error_for_code(int(parts[1].error_code), topic=topic, partition=1)
                assert isinstance(error, NotLeaderOrFollowerError) and error.retriable
            assert not parts[1].records
            records = parts[0].records
            assert isinstance(records, bytes) and len(records) > 61
            base_offset, batch_length = struct.unpack_from(">qi", records, 0)
            assert base_offset == 0 and batch_length > 0
            assert records[16] == 2  # record batch magic v2
            assert b"value-0" in records and b"value-24" in records


def test_too_new_api_versions_gets_the_v0_form_answer(cluster: Any) -> None:
    """Ask ApiVersions v99: the broker answers UNSUPPORTED_VERSION in v0 form; the handshake
    turns that answer into a retry at the broker's highest ApiVersions version we support."""
    import socket

    from kio.schema.api_versions.v0 import ApiVersionsResponse as ApiVersionsResponseV0

    from kafka_actors.protocol.wire.framing import FrameDecoder, decode_response
    from kafka_actors.protocol.wire.versions import ApiVersionsHandshake, Retry
    from kafka_actors.testing.client import parse_bootstrap

    host, port = parse_bootstrap(cluster.bootstrap_servers)[0]
    client_id = b"probe"
    header = struct.pack(">hhih", 18, 99, 1234, len(client_id)) + client_id + b"\x00"
    body = b"\x02a\x021\x00"  # v3-shaped body: compact strings "a", "1", no tags
    payload = header + body
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        decoder = FrameDecoder()
        frames: list[bytes] = []
        while not frames:
            chunk = sock.recv(65536)
            assert chunk, "broker closed the connection"
            frames = decoder.feed(chunk)
    (frame,) = frames
    assert struct.unpack_from(">ih", frame) == (1234, 35)
    expected = 2  # the mock names no ApiVersions range it takes: v2 is its highest
    if not is_mock(cluster):
        refused = decode_response(frame, ApiVersionsResponseV0, correlation_id=1234)
        entry = next(e for e in refused.api_keys if int(e.api_key) == ApiKey.API_VERSIONS)
        assert entry.max_version >= 3
        # below the refused first attempt (our highest), at most what the broker takes
        expected = min(int(entry.max_version), CLIENT_VERSIONS[ApiKey.API_VERSIONS].max - 1)
    handshake = ApiVersionsHandshake()
    step = handshake.handle_response_bytes(frame, correlation_id=1234)
    assert isinstance(step, Retry)
    assert step.version == expected
