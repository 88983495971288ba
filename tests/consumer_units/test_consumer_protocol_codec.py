"""The classic "consumer" embedded protocol: byte layout per Kafka's schema, versions, peers."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_actors.errors import ProtocolError
from kafka_actors.protocol.group.classic.assignors import (
    HIGHEST_SUPPORTED_VERSION,
    Assignment,
    CooperativeStickyAssignor,
    StickyAssignor,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from kafka_actors.protocol.group.classic.assignors import (
    decode_sticky_user_data as decode_sticky,
)
from kafka_actors.protocol.group.classic.assignors import (
    encode_sticky_user_data as encode_sticky,
)
from kafka_actors.protocol.messages import TopicPartition as TP

# -- hand-built encodings, field by field, from ConsumerProtocolSubscription.json /
#    ConsumerProtocolAssignment.json (non-flexible: int16 string lengths, int32 array counts,
#    int32 bytes length with -1 for null) -------------------------------------------------------


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def string(s: str) -> bytes:
    raw = s.encode()
    return i16(len(raw)) + raw


def nullable_string(s: str | None) -> bytes:
    return i16(-1) if s is None else string(s)


def nullable_bytes(b: bytes | None) -> bytes:
    return i32(-1) if b is None else i32(len(b)) + b


def topic_partitions(groups: list[tuple[str, list[int]]]) -> bytes:
    out = i32(len(groups))
    for topic, parts in groups:
        out += string(topic) + i32(len(parts)) + b"".join(i32(p) for p in parts)
    return out


def subscription_bytes(
    version: int,
    topics: list[str],
    user_data: bytes | None,
    owned: list[tuple[str, list[int]]],
    generation: int,
    rack: str | None,
) -> bytes:
    out = i16(version) + i32(len(topics)) + b"".join(string(t) for t in topics)
    out += nullable_bytes(user_data)
    if version >= 1:
        out += topic_partitions(owned)
    if version >= 2:
        out += i32(generation)
    if version >= 3:
        out += nullable_string(rack)
    return out


def assignment_bytes(
    version: int, groups: list[tuple[str, list[int]]], user_data: bytes | None
) -> bytes:
    return i16(version) + topic_partitions(groups) + nullable_bytes(user_data)


SUB = Subscription(
    topics=("orders", "payments"),
    user_data=b"\x00\x01",
    owned_partitions=(TP("orders", 2), TP("orders", 0), TP("payments", 5)),
    generation_id=7,
    rack_id="rack-a",
)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_bytes_match_kafka_schema(version: int) -> None:
    expected = subscription_bytes(
        version,
        ["orders", "payments"],
        b"\x00\x01",
        [("orders", [0, 2]), ("payments", [5])],  # sorted, as Java writes them
        7,
        "rack-a",
    )
    assert encode_subscription(SUB, version) == expected
    decoded = decode_subscription(expected)
    assert decoded.topics == SUB.topics
    assert decoded.user_data == SUB.user_data
    assert decoded.owned_partitions == (tuple(sorted(SUB.owned_partitions)) if version >= 1 else ())
    assert decoded.generation_id == (7 if version >= 2 else -1)
    assert decoded.rack_id == ("rack-a" if version >= 3 else None)


def test_default_version_is_javas_highest() -> None:
    assert HIGHEST_SUPPORTED_VERSION == 3
    assert encode_subscription(SUB)[:2] == b"\x00\x03"
    assert encode_assignment(Assignment())[:2] == b"\x00\x03"


def test_null_user_data_and_null_rack_are_encoded_as_null() -> None:
    sub = Subscription(topics=("t",))
    raw = encode_subscription(sub)
    assert raw == subscription_bytes(3, ["t"], None, [], -1, None)
    assert decode_subscription(raw) == sub
    # empty (not null) user data stays empty
    assert decode_subscription(encode_subscription(Subscription(("t",), b""))).user_data == b""


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_bytes_match_kafka_schema(version: int) -> None:
    a = Assignment(partitions=(TP("b", 1), TP("b", 0), TP("a", 3)), user_data=b"ud")
    expected = assignment_bytes(version, [("b", [1, 0]), ("a", [3])], b"ud")
    assert encode_assignment(a, version) == expected
    assert decode_assignment(expected) == a


def test_newer_versions_are_read_with_the_highest_known_schema() -> None:
    # A v4 written by a future Java member: v3 fields then a new one we do not know.
    future = subscription_bytes(3, ["t"], None, [("t", [0])], 9, "r")
    future = i16(4) + future[2:] + i32(12345) + string("new-field")
    sub = decode_subscription(future)
    assert sub == Subscription(("t",), None, (TP("t", 0),), 9, "r")
    future_assignment = i16(7) + assignment_bytes(3, [("t", [1])], None)[2:] + b"\xff" * 6
    assert decode_assignment(future_assignment) == Assignment((TP("t", 1),))


def test_trailing_bytes_after_a_known_version_are_ignored() -> None:
    raw = encode_subscription(SUB, 1) + b"junk"
    assert decode_subscription(raw).owned_partitions == tuple(sorted(SUB.owned_partitions))


@pytest.mark.parametrize(
    "raw",
    [b"", b"\x00", b"\xff\xff" + b"\x00" * 8, b"\x00\x01\x00\x00\x00\x02\x00\x01a"],
)
def test_malformed_subscription_raises_protocol_error(raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_subscription(raw)


def test_malformed_assignment_raises_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        decode_assignment(b"\x00\x00\x00\x00\x00\x05")
    with pytest.raises(ProtocolError):
        decode_assignment(b"\xff\xfe\x00\x00\x00\x00\xff\xff\xff\xff")


def test_empty_assignment_bytes_mean_no_partitions() -> None:
    assert decode_assignment(b"") == Assignment()


def test_encoding_an_unknown_version_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_subscription(SUB, 4)
    with pytest.raises(ValueError):
        encode_assignment(Assignment(), -1)


# -- property: round trip at every version ------------------------------------------------------

names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)


@st.composite
def subscriptions(draw: st.DrawFn) -> Subscription:
    topics = draw(st.lists(names, max_size=5, unique=True))
    owned_topics = draw(st.lists(names, max_size=4, unique=True))
    owned = tuple(
        TP(t, p)
        for t in owned_topics
        for p in draw(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=4, unique=True))
    )
    return Subscription(
        topics=tuple(topics),
        user_data=draw(st.none() | st.binary(max_size=16)),
        owned_partitions=owned,
        generation_id=draw(st.integers(-1, 2**31 - 1)),
        rack_id=draw(st.none() | names),
    )


@given(subscriptions(), st.integers(0, 3))
def test_subscription_round_trip(sub: Subscription, version: int) -> None:
    decoded = decode_subscription(encode_subscription(sub, version))
    expected = Subscription(
        topics=tuple(sorted(sub.topics)),
        user_data=sub.user_data,
        owned_partitions=tuple(sorted(sub.owned_partitions)) if version >= 1 else (),
        generation_id=sub.generation_id if version >= 2 else -1,
        rack_id=sub.rack_id if version >= 3 else None,
    )
    assert decoded == expected


@given(
    st.lists(st.tuples(names, st.integers(0, 2**31 - 1)), max_size=12, unique=True),
    st.none() | st.binary(max_size=16),
    st.integers(0, 3),
)
def test_assignment_round_trip(
    pairs: list[tuple[str, int]], user_data: bytes | None, version: int
) -> None:
    # grouped by topic, as every encoder groups them
    partitions = tuple(sorted(TP(t, p) for t, p in pairs))
    a = Assignment(partitions, user_data)
    assert decode_assignment(encode_assignment(a, version)) == a


# -- peers: kafka-python 3.x (generated from the same JSON schemas) and aiokafka (v0 Structs) ----
# Both are pinned in the bench extra (pyproject.toml; scripts/test.sh installs it): a missing
# or wrong version fails here, it is not skipped.


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_kafka_python_reads_ours_and_we_read_theirs(version: int) -> None:
    import kafka.protocol.consumer.metadata as kp

    theirs = kp.ConsumerProtocolSubscription.decode(encode_subscription(SUB, version))
    assert list(theirs.topics) == list(SUB.topics)
    assert theirs.user_data == SUB.user_data
    if version >= 1:
        owned = [(t.topic, list(t.partitions)) for t in theirs.owned_partitions]
        assert owned == [("orders", [0, 2]), ("payments", [5])]
    if version >= 2:
        assert theirs.generation_id == 7
    if version >= 3:
        assert theirs.rack_id == "rack-a"

    built = kp.ConsumerProtocolSubscription(
        version=version,
        topics=["x", "y"],
        user_data=b"u",
        owned_partitions=[
            kp.ConsumerProtocolSubscription.TopicPartition(topic="x", partitions=[3])
        ],
        generation_id=11,
        rack_id="r9",
    )
    ours = decode_subscription(built.encode())
    assert ours.topics == ("x", "y")
    assert ours.owned_partitions == ((TP("x", 3),) if version >= 1 else ())
    assert ours.generation_id == (11 if version >= 2 else -1)
    assert ours.rack_id == ("r9" if version >= 3 else None)

    a = Assignment((TP("x", 1), TP("x", 2), TP("y", 0)), b"z")
    their_a = kp.ConsumerProtocolAssignment.decode(encode_assignment(a, version))
    assert [(t.topic, list(t.partitions)) for t in their_a.assigned_partitions] == [
        ("x", [1, 2]),
        ("y", [0]),
    ]
    assert decode_assignment(their_a.encode(version=version)) == a


def test_aiokafka_v0_reader_reads_the_prefix_of_every_version() -> None:
    import aiokafka.coordinator.protocol as proto

    for version in range(4):
        meta = proto.ConsumerProtocolMemberMetadata.decode(encode_subscription(SUB, version))
        assert list(meta.subscription) == ["orders", "payments"]
        assert meta.user_data == b"\x00\x01"
    theirs = proto.ConsumerProtocolMemberMetadata(0, ["a", "b"], b"").encode()
    assert decode_subscription(theirs) == Subscription(("a", "b"), b"")
    their_assignment = proto.ConsumerProtocolMemberAssignment(0, [("a", [0, 1])], b"").encode()
    assert decode_assignment(their_assignment) == Assignment((TP("a", 0), TP("a", 1)), b"")


# -- assignor user data ---------------------------------------------------------------------------


def test_cooperative_sticky_user_data_is_the_generation_as_int32() -> None:
    assert CooperativeStickyAssignor().subscription_user_data(["t"], [], 42) == i32(42)


def test_sticky_user_data_layout_v1_and_v0() -> None:
    raw = encode_sticky([TP("t", 1), TP("t", 0), TP("u", 4)], 6)
    assert raw == topic_partitions([("t", [1, 0]), ("u", [4])]) + i32(6)
    assert decode_sticky(raw) == ((TP("t", 1), TP("t", 0), TP("u", 4)), 6)
    v0 = topic_partitions([("t", [2])])  # v0: no generation
    assert decode_sticky(v0) == ((TP("t", 2),), -1)
    with pytest.raises(ProtocolError):
        decode_sticky(b"\x00\x00\x00\x01\x00\x05ab")
    assert StickyAssignor().subscription_user_data(["t"], [TP("t", 0)], 3) == encode_sticky(
        [TP("t", 0)], 3
    )


@given(st.binary(max_size=64))
def test_fuzz_decoders_raise_only_protocol_errors(data: bytes) -> None:
    for decode in (decode_subscription, decode_assignment):
        try:
            decode(data)
        except ProtocolError:
            pass
    try:
        decode_sticky(data)
    except ProtocolError:
        pass


@given(st.binary(max_size=64))
def test_fuzz_prefixed_valid_versions(data: bytes) -> None:
    for version in range(5):
        for decode in (decode_subscription, decode_assignment):
            try:
                decode(struct.pack(">h", version) + data)
            except ProtocolError:
                pass
