"""Request builders: every consumer API at its min and max supported version encodes and
decodes back to the same request, and carries what the caller asked for."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kafka_actors.errors import InvalidMetadataError, UnsupportedVersionError
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.wire import apis
from kafka_actors.protocol.wire import requests as rq
from kafka_actors.protocol.wire.apis import CLIENT_VERSIONS, ApiKey
from kafka_actors.protocol.wire.framing import decode_request, encode_request

TOPIC_ID = uuid.UUID("8d3f7a0e-1c2b-4e5f-9a6b-7c8d9e0f1a2b")
TOPIC_IDS = {"orders": TOPIC_ID}
TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)


def round_trip(request: Any) -> Any:
    frame = encode_request(request, correlation_id=11, client_id="test")
    header, decoded = decode_request(frame[4:], apis.request_type)
    assert header.request_api_key == request.__api_key__
    assert header.request_api_version == request.__version__
    assert decoded == request
    return decoded


BUILDERS: dict[ApiKey, Callable[[int], Any]] = {
    ApiKey.METADATA: lambda v: rq.metadata_request(
        v, topics=["orders"], allow_auto_topic_creation=False
    ),
    ApiKey.FIND_COORDINATOR: lambda v: rq.find_coordinator_request(v, key="g1"),
    ApiKey.LIST_OFFSETS: lambda v: rq.list_offsets_request(
        v,
        timestamps={TP0: rq.EARLIEST_TIMESTAMP, TP1: rq.LATEST_TIMESTAMP},
        current_leader_epochs={TP0: 3},
    ),
    ApiKey.FETCH: lambda v: rq.fetch_request(
        v,
        partitions=[
            rq.FetchPartition("orders", 0, fetch_offset=42, partition_max_bytes=1 << 20),
            rq.FetchPartition("orders", 1, fetch_offset=7, partition_max_bytes=1 << 20),
        ],
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=50 << 20,
        isolation_level=rq.READ_COMMITTED,
        topic_ids=TOPIC_IDS,
    ),
    ApiKey.OFFSET_COMMIT: lambda v: rq.offset_commit_request(
        v,
        group_id="g1",
        offsets={TP0: OffsetAndMetadata(10, "meta", 2), TP1: OffsetAndMetadata(20)},
        generation_id_or_member_epoch=5,
        member_id="m1",
        topic_ids=TOPIC_IDS,
    ),
    ApiKey.OFFSET_FETCH: lambda v: rq.offset_fetch_request(
        v, group_id="g1", partitions=[TP0, TP1], topic_ids=TOPIC_IDS
    ),
    ApiKey.JOIN_GROUP: lambda v: rq.join_group_request(
        v,
        group_id="g1",
        session_timeout_ms=45_000,
        rebalance_timeout_ms=300_000,
        member_id="",
        protocols=[("range", b"\x00\x01"), ("roundrobin", b"\x00\x02")],
    ),
    ApiKey.SYNC_GROUP: lambda v: rq.sync_group_request(
        v,
        group_id="g1",
        generation_id=3,
        member_id="m1",
        assignments={"m1": b"a", "m2": b"b"},
        protocol_name="range",
    ),
    ApiKey.HEARTBEAT: lambda v: rq.heartbeat_request(
        v, group_id="g1", generation_id=3, member_id="m1"
    ),
    ApiKey.LEAVE_GROUP: lambda v: rq.leave_group_request(v, group_id="g1", member_id="m1"),
    ApiKey.SASL_HANDSHAKE: lambda v: rq.sasl_handshake_request(v, mechanism="PLAIN"),
    ApiKey.SASL_AUTHENTICATE: lambda v: rq.sasl_authenticate_request(v, auth_bytes=b"\0u\0p"),
    ApiKey.LIST_GROUPS: lambda v: rq.list_groups_request(v),
    ApiKey.DELETE_GROUPS: lambda v: rq.delete_groups_request(v, groups=["g1", "g2"]),
    ApiKey.OFFSET_DELETE: lambda v: rq.offset_delete_request(
        v, group_id="g1", partitions=[TopicPartition("a", 0), TopicPartition("a", 2)]
    ),
}

CASES = [
    (api, version)
    for api in BUILDERS
    for version in sorted({CLIENT_VERSIONS[api].min, CLIENT_VERSIONS[api].max})
]


@pytest.mark.parametrize(("api", "version"), CASES, ids=lambda x: str(x))
def test_builders_round_trip_at_min_and_max(api: ApiKey, version: int) -> None:
    request = BUILDERS[api](version)
    assert request.__api_key__ == api and request.__version__ == version
    round_trip(request)


@pytest.mark.parametrize("api", list(BUILDERS), ids=lambda a: a.name)
def test_builders_every_version(api: ApiKey) -> None:
    supported = CLIENT_VERSIONS[api]
    for version in range(supported.min, supported.max + 1):
        round_trip(BUILDERS[api](version))


def test_metadata_all_topics() -> None:
    assert rq.metadata_request(0, topics=None).topics == ()
    assert rq.metadata_request(1, topics=None).topics is None
    assert rq.metadata_request(13, topics=None, allow_auto_topic_creation=True).topics is None
    request = rq.metadata_request(12, topics=["a"])
    assert request.topics[0].name == "a" and request.topics[0].topic_id is None
    assert request.allow_auto_topic_creation is False
    with pytest.raises(UnsupportedVersionError):
        rq.metadata_request(0, topics=[])


def test_find_coordinator_key_placement() -> None:
    assert rq.find_coordinator_request(3, key="g").key == "g"
    assert rq.find_coordinator_request(6, key="g").coordinator_keys == ("g",)
    with pytest.raises(UnsupportedVersionError):
        rq.find_coordinator_request(0, key="t", key_type=rq.TRANSACTION_KEY_TYPE)


def test_fetch_topics_by_name_then_by_id() -> None:
    def build(version: int, **kwargs: Any) -> Any:
        return rq.fetch_request(
            version,
            partitions=[rq.FetchPartition("orders", 0, 5, 100, current_leader_epoch=4)],
            max_wait_ms=100,
            min_bytes=1,
            max_bytes=1000,
            topic_ids=TOPIC_IDS,
            **kwargs,
        )

    assert build(12).topics[0].topic == "orders"
    v13 = build(13)
    assert v13.topics[0].topic_id == TOPIC_ID
    assert v13.topics[0].partitions[0].current_leader_epoch == 4
    assert v13.max_wait.total_seconds() == 0.1
    session = build(
        17, session_id=77, session_epoch=3, forgotten=[rq.ForgottenTopic("orders", (2, 3))]
    )
    assert (session.session_id, session.session_epoch) == (77, 3)
    assert session.forgotten_topics_data[0].topic_id == TOPIC_ID
    assert session.forgotten_topics_data[0].partitions == (2, 3)
    round_trip(session)
    with pytest.raises(UnsupportedVersionError):
        build(6, session_id=1, session_epoch=0)
    with pytest.raises(InvalidMetadataError) as info:
        rq.fetch_request(
            13,
            partitions=[rq.FetchPartition("unknown", 0, 0, 1)],
            max_wait_ms=1,
            min_bytes=1,
            max_bytes=1,
            topic_ids=TOPIC_IDS,
        )
    assert info.value.topic == "unknown"


def test_offset_commit_fields() -> None:
    v9 = BUILDERS[ApiKey.OFFSET_COMMIT](9)
    topic = v9.topics[0]
    assert topic.name == "orders"
    partition = topic.partitions[0]
    assert (partition.committed_offset, partition.committed_metadata) == (10, "meta")
    assert partition.committed_leader_epoch == 2
    assert topic.partitions[1].committed_leader_epoch == -1
    assert BUILDERS[ApiKey.OFFSET_COMMIT](10).topics[0].topic_id == TOPIC_ID
    assert BUILDERS[ApiKey.OFFSET_COMMIT](2).retention_time == datetime.timedelta(milliseconds=-1)
    with pytest.raises(UnsupportedVersionError, match=r"group\.instance\.id"):
        rq.offset_commit_request(
            6, group_id="g", offsets={TP0: OffsetAndMetadata(1)}, group_instance_id="i"
        )


def test_offset_fetch_shapes() -> None:
    v7 = rq.offset_fetch_request(7, group_id="g", partitions=None, require_stable=True)
    assert v7.topics is None and v7.require_stable
    v9 = rq.offset_fetch_request(9, group_id="g", partitions=[TP0], member_id="m", member_epoch=4)
    assert v9.groups[0].member_epoch == 4
    assert v9.groups[0].topics[0].name == "orders"
    v10 = rq.offset_fetch_request(10, group_id="g", partitions=[TP0, TP1], topic_ids=TOPIC_IDS)
    assert v10.groups[0].topics[0].topic_id == TOPIC_ID
    assert v10.groups[0].topics[0].partition_indexes == (0, 1)
    with pytest.raises(UnsupportedVersionError):
        rq.offset_fetch_request(1, group_id="g", partitions=None)
    with pytest.raises(UnsupportedVersionError):
        rq.offset_fetch_request(6, group_id="g", partitions=[TP0], require_stable=True)


def test_group_requests_refuse_static_membership_on_old_versions() -> None:
    with pytest.raises(UnsupportedVersionError):
        rq.join_group_request(
            4,
            group_id="g",
            session_timeout_ms=1,
            rebalance_timeout_ms=1,
            member_id="",
            protocols=[],
            group_instance_id="i",
        )
    with pytest.raises(UnsupportedVersionError):
        rq.heartbeat_request(2, group_id="g", generation_id=1, member_id="m", group_instance_id="i")
    leave = rq.leave_group_request(5, group_id="g", member_id="m", reason="bye")
    assert leave.members[0].reason == "bye"
    assert rq.leave_group_request(0, group_id="g", member_id="m").member_id == "m"


def test_list_offsets_fields() -> None:
    v11 = BUILDERS[ApiKey.LIST_OFFSETS](11)
    assert v11.replica_id == -1
    parts = {p.partition_index: p for p in v11.topics[0].partitions}
    assert parts[0].timestamp == rq.EARLIEST_TIMESTAMP and parts[0].current_leader_epoch == 3
    assert parts[1].current_leader_epoch == -1
    with pytest.raises(UnsupportedVersionError):
        rq.list_offsets_request(1, timestamps={TP0: -1}, isolation_level=rq.READ_COMMITTED)
    with pytest.raises(UnsupportedVersionError):
        rq.list_offsets_request(6, timestamps={TP0: rq.MAX_TIMESTAMP})
