"""The pieces of ``group`` without a broker: the new request builders at every version, and
the rows of ``--describe`` (assigned or committed partitions, lag, owner)."""

from __future__ import annotations

import pytest

from kafka_actors.cli.admin import GroupDescription, MemberDescription, group_lag
from kafka_actors.cli.tables import format_table
from kafka_actors.errors import UnsupportedVersionError
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.wire import requests as rq
from kafka_actors.protocol.wire.apis import CLIENT_VERSIONS, ApiKey, request_type
from kafka_actors.protocol.wire.framing import decode_request, encode_request


@pytest.mark.parametrize(
    ("api", "build", "field"),
    [
        (ApiKey.DESCRIBE_GROUPS, lambda v: rq.describe_groups_request(v, groups=["g"]), "groups"),
        (
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            lambda v: rq.consumer_group_describe_request(v, group_ids=["g"]),
            "group_ids",
        ),
    ],
)
def test_describe_builders_encode_at_every_version(api: ApiKey, build: object, field: str) -> None:
    supported = CLIENT_VERSIONS[api]
    for version in range(supported.min, supported.max + 1):
        payload = build(version)  # type: ignore[operator]
        frame = encode_request(payload, correlation_id=7, client_id="t")
        _header, decoded = decode_request(frame[4:], request_type)
        assert getattr(decoded, field) == ("g",)


def test_authorized_operations_need_describe_groups_v3() -> None:
    with pytest.raises(UnsupportedVersionError):
        rq.describe_groups_request(2, groups=["g"], include_authorized_operations=True)


def test_rows_cover_assigned_and_committed_partitions() -> None:
    a, b, c = (TopicPartition("t", p) for p in range(3))
    member = MemberDescription("m-1", None, "client", "/127.0.0.1", (a, b))
    description = GroupDescription("g", "Stable", "consumer", "uniform", 3, (member,))
    rows = group_lag(description, {a: 4, c: 9}, {a: 10, b: 5, c: 8})
    assert [(r.partition, r.committed, r.log_end, r.lag, r.member) for r in rows] == [
        (0, 4, 10, 6, member),
        (1, None, 5, None, member),
        (2, 9, 8, 0, None),  # committed beyond a truncated log: no negative lag
    ]
    text = format_table(["A", "BB", "C"], [["x", None, "zzz"], ["longer", 1, ""]])
    assert text == "A      BB C\nx      -  zzz\nlonger 1\n"
