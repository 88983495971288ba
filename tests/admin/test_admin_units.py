"""kafka_actors.admin's pure parts: ListGroups / DeleteGroups requests and their decoding."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.delete_groups.v2.response import DeletableGroupResult, DeleteGroupsResponse
from kio.schema.list_groups.v5.response import ListedGroup, ListGroupsResponse
from kio.static.primitive import i16, i32Timedelta

from kafka_actors.admin import (
    GroupListing,
    decode_delete_groups,
    decode_list_groups,
    decode_offset_delete,
)
from kafka_actors.errors import (
    CoordinatorLoadInProgressError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    NonEmptyGroupError,
    UnsupportedVersionError,
)
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.wire import requests as rq

ZERO = i32Timedelta.parse(datetime.timedelta(0))


def test_list_groups_filters_need_their_versions() -> None:
    assert rq.list_groups_request(5, types=["consumer"]).types_filter == ("consumer",)
    assert rq.list_groups_request(4, states=["Empty"]).states_filter == ("Empty",)
    with pytest.raises(UnsupportedVersionError):
        rq.list_groups_request(4, types=["consumer"])
    with pytest.raises(UnsupportedVersionError):
        rq.list_groups_request(3, states=["Empty"])


def test_decode_list_groups() -> None:
    response = ListGroupsResponse(
        throttle_time=ZERO,
        error_code=i16(0),
        groups=(
            ListedGroup(
                group_id="a", protocol_type="consumer", group_state="Stable", group_type="consumer"
            ),
            ListedGroup(
                group_id="b", protocol_type="consumer", group_state="Empty", group_type="classic"
            ),
        ),
    )
    assert decode_list_groups(response) == [
        GroupListing("a", "consumer", "Stable", "consumer"),
        GroupListing("b", "consumer", "Empty", "classic"),
    ]
    failed = ListGroupsResponse(
        throttle_time=ZERO, error_code=i16(CoordinatorLoadInProgressError.code), groups=()
    )
    with pytest.raises(CoordinatorLoadInProgressError):
        decode_list_groups(failed)


def test_decode_delete_groups() -> None:
    response = DeleteGroupsResponse(
        throttle_time=ZERO,
        results=(
            DeletableGroupResult(group_id="gone", error_code=i16(0)),
            DeletableGroupResult(group_id="busy", error_code=i16(NonEmptyGroupError.code)),
            DeletableGroupResult(group_id="none", error_code=i16(GroupIdNotFoundError.code)),
        ),
    )
    outcome = decode_delete_groups(response)
    assert outcome["gone"] is None
    assert isinstance(outcome["busy"], NonEmptyGroupError)
    assert isinstance(outcome["none"], GroupIdNotFoundError)


def test_offset_delete_request_and_decoding() -> None:
    from kio.schema.offset_delete.v0.response import (
        OffsetDeleteResponse,
        OffsetDeleteResponsePartition,
        OffsetDeleteResponseTopic,
    )

    request = rq.offset_delete_request(
        0, group_id="g", partitions=[TopicPartition("a", 1), TopicPartition("a", 0)]
    )
    assert request.group_id == "g"
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in request.topics] == [
        ("a", [1, 0])
    ]
    response = OffsetDeleteResponse(
        error_code=i16(0),
        throttle_time=ZERO,
        topics=(
            OffsetDeleteResponseTopic(
                name="a",
                partitions=(
                    OffsetDeleteResponsePartition(partition_index=0, error_code=i16(0)),
                    OffsetDeleteResponsePartition(
                        partition_index=1, error_code=i16(GroupSubscribedToTopicError.code)
                    ),
                ),
            ),
        ),
    )
    outcome = decode_offset_delete(response)
    assert outcome[TopicPartition("a", 0)] is None
    assert isinstance(outcome[TopicPartition("a", 1)], GroupSubscribedToTopicError)
    failed = OffsetDeleteResponse(
        error_code=i16(GroupIdNotFoundError.code), throttle_time=ZERO, topics=()
    )
    with pytest.raises(GroupIdNotFoundError):
        decode_offset_delete(failed)


def test_reset_time_options_parse() -> None:
    from kafka_actors.cli import datetime_ms, duration_ms

    assert datetime_ms("1970-01-01T00:00:01.500") == 1500
    assert datetime_ms("1970-01-01T01:00:00+01:00") == 0
    assert duration_ms("PT1H30M") == 5_400_000
    assert duration_ms("P1DT0.5S") == 86_400_500
    with pytest.raises(ValueError):
        duration_ms("PT")
    with pytest.raises(ValueError):
        duration_ms("1h")


def test_share_group_offset_requests_and_decoding() -> None:
    """DescribeShareGroupOffsets asks for every partition (null topics) or the named ones;
    AlterShareGroupOffsets groups start offsets by topic; DeleteShareGroupOffsets' outcome is
    per topic, a group-level error raises; a share group's lag is the broker's when given."""
    from kio.schema.delete_share_group_offsets.v0.response import (
        DeleteShareGroupOffsetsResponse,
        DeleteShareGroupOffsetsResponseTopic,
    )

    from kafka_actors.admin import decode_delete_share_group_offsets
    from kafka_actors.cli.admin import PartitionLag

    every = rq.describe_share_group_offsets_request(1, group_id="g")
    assert every.groups[0].group_id == "g" and every.groups[0].topics is None
    some = rq.describe_share_group_offsets_request(
        1, group_id="g", partitions=[TopicPartition("t", 1), TopicPartition("t", 0)]
    )
    [topic] = some.groups[0].topics
    assert (topic.topic_name, sorted(topic.partitions)) == ("t", [0, 1])
    alter = rq.alter_share_group_offsets_request(
        0, group_id="g", start_offsets={TopicPartition("u", 0): 4, TopicPartition("t", 2): 7}
    )
    assert [(t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions])
            for t in alter.topics] == [("t", [(2, 7)]), ("u", [(0, 4)])]  # fmt: skip

    def response(code: int, **per_topic: int) -> DeleteShareGroupOffsetsResponse:
        return DeleteShareGroupOffsetsResponse(
            throttle_time=ZERO,
            error_code=i16(code),
            responses=tuple(
                DeleteShareGroupOffsetsResponseTopic(
                    topic_name=name, topic_id=None, error_code=i16(c)
                )
                for name, c in per_topic.items()
            ),
        )

    outcome = decode_delete_share_group_offsets(response(0, t=0, u=3))
    assert outcome["t"] is None
    assert type(outcome["u"]).__name__ == "UnknownTopicOrPartitionError"
    with pytest.raises(NonEmptyGroupError):
        decode_delete_share_group_offsets(response(NonEmptyGroupError.code))
    assert PartitionLag("t", 0, 3, 15, None, reported_lag=2).lag == 2
    assert PartitionLag("t", 0, 3, 15, None).lag == 12
