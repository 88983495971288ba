"""Bounded decoding (issue 10, bug 2): no length or count from the network reaches kio's native
reader unless the frame can hold it. Cases that aborted the process before the fix run in a
child process, so the old behaviour shows as a failed test (a signal), not a dead pytest."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kio.serial import entity_reader

from kafka_actors.errors import InvalidFrameError, ProtocolError, TruncatedFrameError
from kafka_actors.protocol.group.classic.assignors import Assignment, encode_assignment
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.wire import bounds
from kafka_actors.protocol.wire.apis import CLIENT_VERSIONS, response_type
from kafka_actors.protocol.wire.framing import decode_response, encode_response

ROOT = Path(__file__).resolve().parents[2]

#: The frame of issue 10: Metadata v13 response header v1 (correlation id 5, no tagged fields),
#: throttle time 0, then a broker count of 2**35-1 as a 5-byte varint.
HUGE_BROKER_COUNT = struct.pack(">i", 5) + b"\x00" + struct.pack(">i", 0) + b"\xff\xff\xff\xff\x7f"


def run_child(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter importing this checkout's kafka_actors."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_issue_frame_raises_a_typed_error_in_a_child_process() -> None:
    """The 18-byte frame aborted the process (SIGABRT from a failed 275 GB allocation)."""
    child = run_child(
        f"""
        from kafka_actors.errors import TruncatedFrameError
        from kafka_actors.protocol.wire.apis import response_type
        from kafka_actors.protocol.wire.framing import decode_response
        try:
            decode_response({HUGE_BROKER_COUNT!r}, response_type(3, 13), correlation_id=5)
        except TruncatedFrameError as exc:
            print("typed:", exc)
        """
    )
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])
    assert "typed: MetadataResponse v13: brokers claims 34359738366 items" in child.stdout


def test_huge_counts_in_consumer_protocol_assignment_are_typed_errors_in_a_child() -> None:
    """SyncGroup's assignment bytes come from another member through the broker."""
    good = encode_assignment(Assignment(partitions=(TopicPartition("t", 0),)), version=0)
    # v0: int16 version, int32 topic count, int16 topic length "t", int32 partition count ...
    huge_topics = good[:2] + struct.pack(">i", 2**31 - 1) + good[6:]
    at = 2 + 4 + 2 + 1
    huge_partitions = good[:at] + struct.pack(">i", 2**31 - 1) + good[at + 4 :]
    child = run_child(
        f"""
        from kafka_actors.errors import ProtocolError
        from kafka_actors.protocol.group.classic.assignors import decode_assignment
        for data in ({huge_topics!r}, {huge_partitions!r}):
            try:
                decode_assignment(data)
            except ProtocolError as exc:
                print("typed:", type(exc).__name__, exc)
        """
    )
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])
    assert child.stdout.count("typed: TruncatedFrameError consumer protocol assignment v0") == 2


_LONG_FUZZ = "KAFKA_ACTORS_FUZZ_EXAMPLES" in os.environ


@pytest.mark.timeout(7200 if _LONG_FUZZ else 300)
def test_every_response_decoder_survives_mutations_in_a_child_process() -> None:
    """Show 3: hypothesis-generated valid responses of every API and version the consumer
    uses round-trip as before; their mutations (every length/count set to its maximum, bit
    flips, truncations, garbage) decode or raise ProtocolError subclasses only. A longer
    run: KAFKA_ACTORS_FUZZ_EXAMPLES=N (examples per response class; > 2 also inserts every
    pattern and flips more bits)."""
    examples = os.environ.get("KAFKA_ACTORS_FUZZ_EXAMPLES", "2")
    child = subprocess.run(
        [sys.executable, "-m", "tests.protocol.decoder_fuzz", examples],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=7000 if _LONG_FUZZ else 240,
        check=False,
    )
    assert child.returncode == 0, (child.returncode, child.stderr[-4000:])
    summary = json.loads(child.stdout.strip().splitlines()[-1])
    assert summary["failures"] == 0
    assert summary["classes"] == sum(r.max - r.min + 1 for r in CLIENT_VERSIONS.values())
    assert summary["cases"] > 50_000 and summary["rejected"] > 0 and summary["decoded"] > 0


# -- In-process unit tests (safe now: the walk refuses before kio allocates) ------------------


def metadata_v13_frame() -> bytes:
    cls = response_type(3, 13)
    module = sys.modules[cls.__module__]
    body = cls(
        throttle_time=__import__("datetime").timedelta(0),
        brokers=(module.MetadataResponseBroker(node_id=1, host="h", port=9092),),
        cluster_id=None,
        controller_id=1,
        topics=(),
        error_code=__import__("kio.schema.errors").schema.errors.ErrorCode.none,
    )
    return encode_response(body, correlation_id=5)[4:]


def test_walk_ends_where_kio_ends_and_decoding_is_unchanged() -> None:
    frame = metadata_v13_frame()
    cls = response_type(3, 13)
    assert bounds.check_entity(frame, 5, cls) == len(frame)
    expected, size = entity_reader(cls)(frame, 5)
    assert 5 + size == len(frame)
    assert decode_response(frame, cls, correlation_id=5) == expected


def test_the_careful_walk_is_generated_only_for_a_frame_that_fails_the_fast_one() -> None:
    """Issue 26: generating a walk costs about as much as the first decode, so a well-formed
    frame generates the fast walk alone; the careful one (naming the field) waits for a bad
    frame."""
    cls = response_type(3, 13)
    bounds._WALKS.pop(cls, None)
    bounds._CAREFUL.pop(cls, None)
    frame = metadata_v13_frame()
    assert bounds.check_entity(frame, 5, cls) == len(frame)
    assert cls in bounds._WALKS and cls not in bounds._CAREFUL
    with pytest.raises(TruncatedFrameError, match="brokers claims"):
        bounds.check_entity(frame[:12], 5, cls)
    assert cls in bounds._CAREFUL


@pytest.mark.parametrize(
    ("mutate", "error", "text"),
    [
        # broker count 2**31-1 as uvarint: 2**31-2 brokers of at least 11 bytes
        (lambda f: f[:9] + b"\xff\xff\xff\xff\x07" + f[10:], TruncatedFrameError, "brokers claims"),
        # a 5-byte varint with the continuation bit set in its 5th byte
        (lambda f: f[:9] + b"\xff\xff\xff\xff\xff" + f[10:], InvalidFrameError, "longer than 5"),
        # host length 2**32-1
        (
            lambda f: f[:14] + b"\xff\xff\xff\xff\x0f" + f[15:],
            TruncatedFrameError,
            "brokers[].host",
        ),
        # host null where the schema has none
        (lambda f: f[:14] + b"\x00" + f[15:], InvalidFrameError, "brokers[].host: null"),
        # an unknown tagged field (tag 9, size 0) in the broker
        (lambda f: f[:-10] + b"\x01\x09\x00" + f[-9:], InvalidFrameError, "unknown tag 9"),
        # cut inside the broker: its count is checked against what remains first
        (lambda f: f[:12], TruncatedFrameError, "brokers claims 1 items (at least 11 bytes)"),
    ],
)
def test_bad_lengths_name_api_version_and_field(mutate, error, text) -> None:  # type: ignore[no-untyped-def]
    frame = metadata_v13_frame()
    with pytest.raises(error) as caught:
        decode_response(mutate(frame), response_type(3, 13), correlation_id=5)
    assert "MetadataResponse v13" in str(caught.value)
    assert text in str(caught.value)


@pytest.mark.parametrize("count", [2**31 - 1, 2**20])
def test_legacy_array_count_larger_than_the_frame_is_refused(count: int) -> None:
    # Fetch v4 response: header v0 (4), throttle (4), responses count (int32)
    frame = struct.pack(">iii", 1, 0, count) + b"\x00" * 64
    with pytest.raises(TruncatedFrameError, match=r"FetchResponse v4: responses claims"):
        decode_response(frame, response_type(1, 4), correlation_id=1)


def test_negative_lengths_other_than_null_are_invalid() -> None:
    frame = struct.pack(">iii", 1, 0, -2)
    with pytest.raises(InvalidFrameError, match="negative array length -2"):
        decode_response(frame, response_type(1, 4))
    # topic name length -3 (legacy string)
    frame = struct.pack(">iiih", 1, 0, 1, -3) + b"\x00" * 16
    with pytest.raises(InvalidFrameError, match=r"responses\[\]\.topic: negative length -3"):
        decode_response(frame, response_type(1, 4))


def test_records_are_skipped_as_one_blob() -> None:
    cls = response_type(1, 4)
    # one topic "t" with one partition whose records claim more bytes than remain
    head = struct.pack(">iii", 1, 0, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1)
    partition = struct.pack(">ihqqi", 0, 0, 10, 10, 0)
    frame = head + partition + struct.pack(">i", 1000) + b"\x00" * 10
    with pytest.raises(TruncatedFrameError, match=r"partitions\[\]\.records needs 1000 bytes"):
        decode_response(frame, cls)
    ok = head + partition + struct.pack(">i", 10) + b"\x07" * 10
    response = decode_response(ok, cls)
    assert response.responses[0].partitions[0].records == b"\x07" * 10


def test_every_struct_the_consumer_reads_has_a_positive_minimum_size() -> None:
    """A count check is only a bound if each item takes at least one byte."""
    for api, versions in CLIENT_VERSIONS.items():
        for version in range(versions.min, versions.max + 1):
            assert bounds.min_encoded_size(response_type(int(api), version)) >= 1


def test_plan_source_is_readable_python() -> None:
    source = bounds.plan_source(response_type(3, 13))
    assert source.startswith("def walk_MetadataResponse(")
    assert "brokers claims" not in source  # messages are built only on failure
    compile(source, "<plan>", "exec")


def test_request_frames_are_bounded_too() -> None:
    from kafka_actors.protocol.wire.apis import request_type
    from kafka_actors.protocol.wire.framing import decode_request, encode_request

    request_cls = request_type(3, 12)
    module = sys.modules[request_cls.__module__]
    request = request_cls(
        topics=(module.MetadataRequestTopic(topic_id=None, name="t"),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    frame = encode_request(request, correlation_id=3, client_id="me")[4:]
    _header, body = decode_request(frame, request_type)
    assert body == request
    # the topics count follows the header (api key, version, correlation id, client id, tags)
    at = 2 + 2 + 4 + 2 + 2 + 1
    bad = frame[:at] + b"\xff\xff\xff\xff\x7f" + frame[at + 1 :]
    with pytest.raises(TruncatedFrameError, match="MetadataRequest v12: topics claims"):
        decode_request(bad, request_type)


def test_subscription_round_trip_unchanged() -> None:
    from kafka_actors.protocol.group.classic.assignors import (
        Subscription,
        decode_subscription,
        encode_subscription,
    )

    subscription = Subscription(topics=("a", "b"), user_data=b"x")
    assert decode_subscription(encode_subscription(subscription)).topics == ("a", "b")
    assert issubclass(TruncatedFrameError, ProtocolError)


def test_api_versions_handshake_with_huge_counts_is_typed_in_a_child_process() -> None:
    """The first response on every connection goes through the same bound (versions.py)."""
    child = run_child(
        """
        import struct
        from kafka_actors.errors import KafkaError, TruncatedFrameError
        from kafka_actors.protocol.wire.versions import ApiVersionsHandshake

        handshake = ApiVersionsHandshake()
        request, version = handshake.initial_request()
        assert version >= 3, version  # flexible: a compact (varint) api_keys count
        huge = struct.pack(">ih", 9, 0) + b"\\xff\\xff\\xff\\xff\\x7f"
        try:
            handshake.handle_response_bytes(huge, correlation_id=9)
        except TruncatedFrameError as exc:
            print("typed:", exc)
        # UNSUPPORTED_VERSION (35): the v0 fallback reads an int32 count of 2**31-1
        refused = struct.pack(">ihi", 9, 35, 2**31 - 1) + b"\\x00" * 12
        try:
            print("fallback:", type(ApiVersionsHandshake().handle_response_bytes(refused)).__name__)
        except KafkaError as exc:
            print("fallback typed:", type(exc).__name__)
        """
    )
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])
    assert "typed: ApiVersionsResponse v" in child.stdout
    assert "api_keys claims 34359738366 items" in child.stdout
    assert "fallback" in child.stdout
