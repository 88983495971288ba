"""Framing, headers, correlation ids, and garbage in → typed ProtocolErrors only."""

from __future__ import annotations

import itertools
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v0 import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3 import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3 import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.api_versions.v3.response import ApiVersion
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1 import MetadataRequest as MetadataRequestV1
from kio.schema.metadata.v12 import MetadataRequest as MetadataRequestV12
from kio.schema.metadata.v12 import MetadataResponse as MetadataResponseV12
from kio.schema.metadata.v12.request import MetadataRequestTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i16, i32Timedelta

from kafka_actors.errors import (
    CorrelationIdMismatchError,
    FrameTooLargeError,
    InvalidFrameError,
    ProtocolError,
    TruncatedFrameError,
    UnknownApiError,
)
from kafka_actors.protocol.wire import apis
from kafka_actors.protocol.wire.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    FRAME_POOL_BYTES,
    CorrelationIds,
    FrameDecoder,
    FramePool,
    decode_request,
    decode_response,
    decode_response_with_header,
    encode_request,
    encode_response,
    read_correlation_id,
)


def api_versions_v3_response() -> ApiVersionsResponseV3:
    return ApiVersionsResponseV3(
        error_code=ErrorCode.none,
        api_keys=(
            ApiVersion(api_key=i16(18), min_version=i16(0), max_version=i16(4)),
            ApiVersion(api_key=i16(3), min_version=i16(0), max_version=i16(13)),
        ),
        throttle_time=i32Timedelta.parse(__import__("datetime").timedelta(0)),
    )


def test_request_frame_layout_header_v1() -> None:
    request = MetadataRequestV1(topics=None)
    frame = encode_request(request, correlation_id=7, client_id="me")
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    body = frame[4:]
    # header v1: api key, api version, correlation id, client id (int16 length + bytes)
    assert struct.unpack_from(">hhih", body) == (3, 1, 7, 2)
    assert body[10:12] == b"me"
    # Metadata v1 with null topics: int32 -1
    assert body[12:] == b"\xff\xff\xff\xff"


def test_request_frame_layout_header_v2_keeps_legacy_client_id() -> None:
    request = ApiVersionsRequestV3(client_software_name="a", client_software_version="1")
    body = encode_request(request, correlation_id=1, client_id="x")[4:]
    # header v2: key, version, correlation id, legacy nullable string client id, tag buffer
    assert struct.unpack_from(">hhih", body) == (18, 3, 1, 1)
    assert body[10:11] == b"x"
    assert body[11] == 0  # empty tagged fields
    assert body[12:] == b"\x02a\x021\x00"


def test_null_client_id() -> None:
    body = encode_request(MetadataRequestV1(topics=None), correlation_id=1, client_id=None)[4:]
    assert struct.unpack_from(">h", body, 8) == (-1,)


def test_request_round_trip_through_decode_request() -> None:
    request = MetadataRequestV12(
        topics=(MetadataRequestTopic(topic_id=None, name=TopicName("orders")),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    frame = encode_request(request, correlation_id=99, client_id="c")
    header, decoded = decode_request(frame[4:], apis.request_type)
    assert header.correlation_id == 99 and header.client_id == "c"
    assert decoded == request


def test_decode_request_unknown_api() -> None:
    frame = struct.pack(">hhi", 999, 0, 1) + b"\x00\x00"
    with pytest.raises(UnknownApiError):
        decode_request(frame, apis.request_type)


def test_api_versions_response_uses_header_v0_even_when_flexible() -> None:
    response = api_versions_v3_response()
    frame = encode_response(response, correlation_id=5)[4:]
    # header v0 has no tag buffer: the error code follows the correlation id directly
    assert frame[:4] == struct.pack(">i", 5)
    assert frame[4:6] == b"\x00\x00"
    header, decoded = decode_response_with_header(frame, ApiVersionsResponseV3, strict=True)
    assert header.correlation_id == 5
    assert decoded == response


def test_flexible_response_uses_header_v1() -> None:
    response = MetadataResponseV12(
        throttle_time=i32Timedelta.parse(__import__("datetime").timedelta(0)),
        brokers=(),
        cluster_id="c",
        controller_id=BrokerId(1),
        topics=(),
    )
    frame = encode_response(response, correlation_id=6)[4:]
    assert frame[4] == 0  # header v1 tag buffer
    assert decode_response(frame, MetadataResponseV12, correlation_id=6, strict=True) == response


def test_correlation_id_checks() -> None:
    frame = encode_response(api_versions_v3_response(), correlation_id=5)[4:]
    assert read_correlation_id(frame) == 5
    with pytest.raises(CorrelationIdMismatchError) as info:
        decode_response(frame, ApiVersionsResponseV3, correlation_id=4)
    assert (info.value.expected, info.value.received) == (4, 5)
    with pytest.raises(TruncatedFrameError):
        read_correlation_id(b"\x00\x01")


def test_trailing_bytes_rejected_only_when_strict() -> None:
    frame = encode_response(api_versions_v3_response(), correlation_id=5)[4:] + b"\x00"
    decode_response(frame, ApiVersionsResponseV3)
    with pytest.raises(InvalidFrameError):
        decode_response(frame, ApiVersionsResponseV3, strict=True)


def test_correlation_ids_wrap() -> None:
    ids = CorrelationIds(start=2**31 - 2)
    assert [ids.next() for _ in range(3)] == [2**31 - 2, 2**31 - 1, 0]
    assert ids.peek() == 1
    with pytest.raises(ValueError):
        CorrelationIds(start=-1)


def test_encode_error_is_protocol_error() -> None:
    bad: Any = MetadataRequestV1(topics=None)
    with pytest.raises(ProtocolError):
        encode_request(bad, correlation_id=2**40, client_id="x")


# -- FrameDecoder ------------------------------------------------------------------------------


def frames_of(*payloads: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


def test_frame_decoder_byte_by_byte() -> None:
    stream = frames_of(b"abc", b"", b"x" * 1000)
    decoder = FrameDecoder()
    out: list[bytes] = []
    for index in range(len(stream)):
        out += decoder.feed(stream[index : index + 1])
    assert out == [b"abc", b"", b"x" * 1000]
    assert decoder.buffered == 0
    assert decoder.bytes_needed == 4


def test_frame_decoder_many_frames_at_once_and_partial_tail() -> None:
    stream = frames_of(b"one", b"two", b"three")
    decoder = FrameDecoder()
    assert decoder.feed(stream[:-2]) == [b"one", b"two"]
    assert decoder.bytes_needed == 2
    assert decoder.feed(memoryview(stream[-2:])) == [b"three"]


def test_frame_decoder_rejects_oversized_frame_on_its_prefix() -> None:
    decoder = FrameDecoder(max_frame_size=10)
    assert decoder.feed(frames_of(b"0123456789")) == [b"0123456789"]
    with pytest.raises(FrameTooLargeError) as info:
        decoder.feed(struct.pack(">i", 11))
    assert (info.value.size, info.value.max_size) == (11, 10)
    with pytest.raises(FrameTooLargeError):  # stays failed
        decoder.feed(b"")


def test_frame_decoder_rejects_negative_size() -> None:
    decoder = FrameDecoder()
    with pytest.raises(InvalidFrameError):
        decoder.feed(b"\xff\xff\xff\xfe")
    with pytest.raises(InvalidFrameError):
        decoder.feed(b"")


@given(
    payloads=st.lists(st.binary(max_size=300), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=10),
)
def test_frame_decoder_any_chunking(payloads: list[bytes], cuts: list[int]) -> None:
    stream = frames_of(*payloads)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    decoder = FrameDecoder()
    out: list[bytes] = []
    for start, end in itertools.pairwise(points):
        out += decoder.feed(stream[start:end])
    assert out == payloads


@given(
    payloads=st.lists(st.binary(max_size=300), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=10),
)
def test_frame_decoder_counts_what_it_holds(payloads: list[bytes], cuts: list[int]) -> None:
    stream = frames_of(*payloads)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    decoder = FrameDecoder()
    out: list[bytes] = []
    for start, end in itertools.pairwise(points):
        out += decoder.feed(stream[start:end])
        held = end - sum(4 + len(f) for f in out)
        assert decoder.buffered == held
        if end < len(stream):
            assert 0 < decoder.bytes_needed <= len(stream) - end


def test_frame_decoder_copies_from_a_reused_buffer() -> None:
    stream = frames_of(b"a" * 10, b"b" * 10)
    decoder = FrameDecoder()
    buffer = bytearray(stream[:20])  # the first frame and 6 bytes of the second
    assert decoder.feed(buffer) == [b"a" * 10]
    buffer[:] = b"\0" * len(buffer)  # the caller reads into the same buffer again
    assert decoder.feed(bytearray(stream[20:])) == [b"b" * 10]


def test_frame_decoder_large_frame_in_many_reads() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    stream = frames_of(payload, b"tail")
    decoder = FrameDecoder()
    out: list[bytes] = []
    for start in range(0, len(stream), 65_536):
        out += decoder.feed(stream[start : start + 65_536])
    assert out == [payload, b"tail"]
    assert decoder.buffered == 0


def read_with_buffers(
    decoder: FrameDecoder,
    stream: bytes,
    cuts: list[int],
    min_size: int,
    feed_anyway: list[bool] | None = None,
) -> list[bytes]:
    """Read ``stream`` as the network actor does: into the decoder's own buffer when it
    offers one (``read_buffer``), else a chunk fed; ``cuts``: how much each read returns;
    ``feed_anyway``: reads fed as a chunk although a buffer was offered. After every read,
    the decoder holds at most four times what it has received of the frame, plus what else
    the chunk that frame began in held (at most the largest read since the last frame)."""
    out: list[bytes] = []
    pos = 0
    reads = iter(cuts)
    feeds = iter(feed_anyway or ())
    largest = 0
    while pos < len(stream):
        size = max(1, next(reads, len(stream)))
        largest = max(largest, size)
        done = len(out)
        into = decoder.read_buffer(min_size)
        assert decoder.retained <= 4 * decoder.buffered + largest  # before any byte is read
        if into is not None and next(feeds, False):
            into.release()
            into = None
        if into is None:
            out += decoder.feed(stream[pos : pos + size])
            pos += size
        else:
            n = min(size, len(into), len(stream) - pos)
            into[:n] = stream[pos : pos + n]
            into.release()
            pos += n
            for frame in decoder.buffer_updated(n):
                assert isinstance(frame, memoryview) and frame.readonly
                out.append(bytes(frame))
        if len(out) > done:
            largest = size  # the next frame began in this read, if anywhere yet
        assert decoder.retained <= 4 * decoder.buffered + largest
    return out


@given(
    # frames of 64 bytes or more, and short reads, often: those get a buffer of their own
    payloads=st.lists(st.binary(max_size=300) | st.binary(min_size=64, max_size=300), max_size=8),
    cuts=st.lists(
        st.integers(min_value=1, max_value=8) | st.integers(min_value=1, max_value=400),
        max_size=30,
    ),
    min_size=st.integers(min_value=0, max_value=320),
    feed_anyway=st.lists(st.booleans(), max_size=30),
)
def test_frame_decoder_reads_into_its_own_buffer_any_chunking(
    payloads: list[bytes], cuts: list[int], min_size: int, feed_anyway: list[bool]
) -> None:
    decoder = FrameDecoder()
    stream = frames_of(*payloads)
    assert read_with_buffers(decoder, stream, cuts, min_size, feed_anyway) == payloads
    assert decoder.buffered == 0
    assert decoder.bytes_needed == 4
    assert decoder.retained == 0


@given(
    declared=st.one_of(
        st.integers(min_value=1, max_value=4096),
        st.integers(min_value=1, max_value=DEFAULT_MAX_FRAME_SIZE),
    ),
    arriving=st.integers(min_value=0, max_value=20_000),
    cuts=st.lists(st.integers(min_value=1, max_value=3000), max_size=40),
    min_sizes=st.lists(st.integers(min_value=0, max_value=512), max_size=40),
)
@settings(deadline=None)
def test_frame_decoder_holds_at_most_four_times_what_arrived(
    declared: int, arriving: int, cuts: list[int], min_sizes: list[int]
) -> None:
    """A size prefix is only the broker's word: whatever it declares (up to 128 MiB) and
    however the bytes after it arrive, offering a buffer never holds more than four times
    the bytes received (what a hostile broker sends is all it can make us hold, times 4)."""
    body = bytes(itertools.islice(itertools.cycle(range(251)), min(arriving, declared)))
    stream = struct.pack(">i", declared) + body
    decoder = FrameDecoder()
    frames: list[bytes] = []
    pos = 0
    reads = iter(cuts)
    sizes = iter(min_sizes)
    while pos < len(stream):
        size = next(reads, 1000)
        into = decoder.read_buffer(next(sizes, 0))
        assert decoder.retained <= 4 * pos + 64  # before any byte is read into it
        if into is None:
            frames += decoder.feed(stream[pos : pos + size])
            pos = min(pos + size, len(stream))
        else:
            n = min(size, len(into), len(stream) - pos)
            into[:n] = stream[pos : pos + n]
            into.release()
            pos += n
            frames += [bytes(f) for f in decoder.buffer_updated(n)]
        assert decoder.retained <= 4 * pos + 64
    assert frames == ([body] if len(body) == declared else [])


def test_frame_decoder_offers_a_buffer_only_for_the_rest_of_a_large_frame() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    quarter = len(payload) // 4
    stream = frames_of(payload, b"tail")
    decoder = FrameDecoder()
    assert decoder.read_buffer(1) is None  # no size prefix yet: read a chunk
    assert decoder.feed(stream[:1000]) == []
    assert decoder.read_buffer(1) is None  # the prefix alone decides no allocation
    assert decoder.feed(stream[1000 : 4 + quarter - 1]) == []
    assert decoder.read_buffer(1) is None  # not a quarter of it yet
    assert decoder.retained == 4 + quarter - 1  # the chunks fed, nothing more
    assert decoder.feed(stream[4 + quarter - 1 : 4 + quarter]) == []
    assert decoder.read_buffer(len(payload)) is None  # less than that is missing
    assert decoder.read_buffer(quarter + 1) is None  # less than that has arrived
    into = decoder.read_buffer(65_536)
    assert into is not None and len(into) == len(payload) - quarter and not into.readonly
    assert decoder.retained == len(payload)  # the chunks were copied into it and let go
    into[:1000] = stream[4 + quarter : 4 + quarter + 1000]
    assert decoder.buffer_updated(1000) == []
    have = quarter + 1000
    assert decoder.buffered == 4 + have and decoder.bytes_needed == len(payload) - have
    # the view is offered until the frame is complete, even for less than min_size
    into = decoder.read_buffer(len(payload))
    assert into is not None and len(into) == len(payload) - have
    into[:] = stream[4 + have : 4 + len(payload)]
    [frame] = decoder.buffer_updated(len(into))
    assert frame == payload and frame.readonly
    assert decoder.read_buffer(1) is None  # the next frame starts with a chunk again
    assert decoder.feed(stream[4 + len(payload) :]) == [b"tail"]


def _receive(decoder: FrameDecoder, payload: bytes, chunk: int = 65_536) -> tuple[memoryview, int]:
    """``payload``'s frame through the network actor's path: chunks fed until the decoder
    offers its buffer, then read into it. The frame, and the bytes fed before the buffer."""
    stream = frames_of(payload)
    pos = 0
    fed = 0
    while True:
        into = decoder.read_buffer(chunk)
        if into is None:
            assert decoder.feed(stream[pos : pos + chunk]) == []
            pos += chunk
            fed = pos
            continue
        n = min(chunk, len(into))
        into[:n] = stream[pos : pos + n]
        into.release()
        pos += n
        done = decoder.buffer_updated(n)
        if done:
            [frame] = done
            assert pos == len(stream)
            return frame, fed


def test_frame_decoder_reuses_a_frame_buffer_once_nothing_refers_to_it() -> None:
    first, second, third = (bytes([n]) * (1 << 20) for n in (1, 2, 3))
    decoder = FrameDecoder()
    pool = decoder.pool
    frame1, fed1 = _receive(decoder, first)
    assert frame1 == first and pool.made == 1 and pool.reused == 0
    assert fed1 >= len(first) // 4  # a new buffer waits for a quarter of the frame
    frame2, _ = _receive(decoder, second)  # frame1 is still held: a second buffer
    assert frame2 == second and pool.made == 2 and pool.reused == 0
    part = frame2[10:20]  # a view of a view holds the buffer too
    del frame2
    frame1.release()
    del frame1
    frame3, fed3 = _receive(decoder, third)
    assert pool.made == 2 and pool.reused == 1  # frame1's buffer, not frame2's
    assert fed3 == 65_536  # a kept buffer is taken once the first chunk came
    assert frame3 == third and bytes(part) == b"\x02" * 10
    assert frame3.readonly and len(frame3) == len(third)


def test_frame_decoder_a_smaller_frame_is_a_view_of_a_larger_kept_buffer() -> None:
    decoder = FrameDecoder()
    big, _ = _receive(decoder, b"b" * (1 << 20))
    del big
    small = bytes(range(256)) * 1024  # 256 KiB, then the next frame right behind it
    stream = frames_of(small, b"after")
    assert decoder.feed(stream[:70_000]) == []
    into = decoder.read_buffer(65_536)
    assert into is not None and len(into) == len(small) - (70_000 - 4)
    into[:] = stream[70_000 : 4 + len(small)]
    [frame] = decoder.buffer_updated(len(into))
    assert decoder.pool.reused == 1 and frame == small and len(frame) == len(small)
    with pytest.raises(ValueError):
        decoder.buffer_updated(1)  # no room was offered past the frame's end
    assert decoder.feed(stream[4 + len(small) :]) == [b"after"]
    del frame
    # a frame under a quarter of every free kept buffer does not hold one: made anew, once a
    # quarter of it came (the 1 MiB buffer stays free for a frame its size)
    tiny, fed = _receive(decoder, b"t" * (200 * 1024))
    assert tiny == b"t" * (200 * 1024) and decoder.pool.reused == 1
    assert fed >= 50 * 1024 and decoder.pool.made == 2


def test_frame_decoder_a_kept_buffer_counts_as_no_new_memory() -> None:
    """What ``retained`` bounds (four times what arrived) is memory a frame makes; a kept
    buffer taken at the first chunk was made for an earlier frame."""
    decoder = FrameDecoder()
    first, _ = _receive(decoder, b"a" * (1 << 20))
    del first
    stream = frames_of(b"b" * (1 << 20))
    assert decoder.feed(stream[:65_536]) == []
    into = decoder.read_buffer(65_536)
    assert into is not None and decoder.pool.reused == 1
    assert decoder.retained == 0


def test_frame_pool_is_bounded_in_buffers_and_bytes() -> None:
    pool = FramePool(max_buffers=2, max_bytes=3 << 20)
    held = [pool.make(1 << 20), pool.make(1 << 20)]
    assert pool.kept_bytes == 2 << 20
    held.append(pool.make(1 << 20))  # both kept ones in use: this one is not kept
    assert pool.kept_bytes == 2 << 20 and pool.take(1) is None
    held.clear()
    assert pool.make(4 << 20) is not None and pool.kept_bytes == 2 << 20  # over max_bytes
    pool.make(2 << 20)  # free kept ones make room, smallest first, as many as needed: one
    assert pool.kept_bytes == 3 << 20
    taken = pool.take(2 << 20)
    assert taken is not None and len(taken) == 2 << 20
    assert pool.take(2 << 20) is None  # taken and held: not handed out twice


def test_frame_pool_trim_lets_the_largest_free_buffers_go_first() -> None:
    pool = FramePool(max_buffers=4, max_bytes=16 << 20)
    small, middle, large = pool.make(1 << 20), pool.make(4 << 20), pool.make(8 << 20)
    del small, middle
    pool.trim(10 << 20)  # the 4 MiB one (the largest free) goes; the 8 MiB one is in use
    assert pool.kept_bytes == (1 << 20) + (8 << 20)
    assert pool.take(4 << 20) is None
    pool.trim(6 << 20)  # the one in use counts: every free one goes, and it stays
    assert pool.kept_bytes == 8 << 20 and pool.take(1 << 20) is None
    del large
    pool.trim(6 << 20)
    assert pool.kept_bytes == 0 and pool.take(1) is None


def test_frame_decoder_a_huge_size_prefix_allocates_nothing() -> None:
    """128 MiB declared, 300 KiB sent: no buffer is offered at the network actor's
    threshold, and the decoder holds only the chunks that arrived."""
    decoder = FrameDecoder()
    assert decoder.feed(struct.pack(">i", DEFAULT_MAX_FRAME_SIZE)) == []
    received = 4
    for _ in range(300):
        assert decoder.read_buffer(256 * 1024) is None
        assert decoder.read_buffer(0) is None
        assert decoder.feed(b"z" * 1024) == []
        received += 1024
        assert decoder.retained <= received
    assert decoder.bytes_needed == DEFAULT_MAX_FRAME_SIZE - 300 * 1024


def test_frame_decoder_feed_continues_a_frame_in_its_buffer() -> None:
    payload = b"x" * 1000
    stream = frames_of(payload, b"next")
    decoder = FrameDecoder()
    assert decoder.feed(stream[:10]) == []
    assert decoder.read_buffer(100) is None  # 6 of 1000 bytes arrived
    assert decoder.feed(stream[10:300]) == []
    into = decoder.read_buffer(100)
    assert into is not None
    into[:90] = stream[300:390]
    into.release()
    assert decoder.buffer_updated(90) == []
    assert decoder.feed(stream[390:]) == [payload, b"next"]  # feed's frames stay bytes


def test_frame_decoder_buffer_updated_needs_a_buffer_of_that_room() -> None:
    decoder = FrameDecoder()
    with pytest.raises(ValueError):
        decoder.buffer_updated(1)
    decoder.feed(struct.pack(">i", 10) + b"abc")
    into = decoder.read_buffer(1)
    assert into is not None and len(into) == 7
    with pytest.raises(ValueError):
        decoder.buffer_updated(8)


# -- Garbage in, typed errors out -----------------------------------------------------------------

RESPONSE_TYPES = [
    apis.response_type(api, version)
    for api, supported in apis.CLIENT_VERSIONS.items()
    for version in sorted({supported.min, supported.max, (supported.min + supported.max) // 2})
]


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=200), index=st.integers(min_value=0))
def test_random_bytes_raise_only_protocol_errors(data: bytes, index: int) -> None:
    response_type = RESPONSE_TYPES[index % len(RESPONSE_TYPES)]
    try:
        decode_response(data, response_type, strict=True)
    except ProtocolError:
        pass


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=200))
def test_random_request_bytes_raise_only_protocol_errors(data: bytes) -> None:
    try:
        decode_request(data, apis.request_type)
    except ProtocolError:
        pass
    except Exception as exc:  # UnsupportedVersionError etc. from the version lookup
        from kafka_actors.errors import KafkaError

        assert isinstance(exc, KafkaError), repr(exc)


def _valid_frames() -> list[tuple[bytes, type[Any]]]:
    frames: list[tuple[bytes, type[Any]]] = []
    response = api_versions_v3_response()
    frames.append((encode_response(response, correlation_id=1)[4:], ApiVersionsResponseV3))
    v0 = ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=(
            __import__("kio.schema.api_versions.v0.response", fromlist=["ApiVersion"]).ApiVersion(
                api_key=i16(18), min_version=i16(0), max_version=i16(2)
            ),
        ),
    )
    frames.append((encode_response(v0, correlation_id=2)[4:], ApiVersionsResponseV0))
    return frames


@given(cut=st.integers(min_value=0, max_value=200), which=st.integers(0, 1))
def test_truncations_raise_truncated_frame(cut: int, which: int) -> None:
    frame, response_type = _valid_frames()[which]
    if cut >= len(frame):
        decode_response(frame, response_type, strict=True)
        return
    with pytest.raises(ProtocolError):
        decode_response(frame[:cut], response_type, strict=True)


@given(
    position=st.integers(min_value=0, max_value=200),
    value=st.integers(0, 255),
    which=st.integers(0, 1),
)
def test_corrupted_bytes_never_leak_other_exceptions(position: int, value: int, which: int) -> None:
    frame, response_type = _valid_frames()[which]
    data = bytearray(frame)
    data[position % len(data)] = value
    try:
        decode_response(bytes(data), response_type, strict=True)
    except ProtocolError:
        pass


def test_unknown_error_code_in_body_is_protocol_error() -> None:
    frame = struct.pack(">ihi", 1, 200, 0)  # error code 200 is not one kio knows
    with pytest.raises(InvalidFrameError):
        decode_response(frame, ApiVersionsResponseV0)


def test_a_consumers_connection_keeps_two_whole_fetch_responses_of_its_fetch_max_bytes() -> None:
    """Fetch responses as large as fetch.max.bytes (every response at 512 partitions) are
    received into kept buffers, also while the previous one's records (views of its frame)
    are still held: the pool a consumer's connection gets keeps two, where the default 16 MiB
    pool made a new buffer for each (issue 26)."""
    from kafka_actors.config import ConsumerConfig
    from kafka_actors.protocol.connection.node import (
        FETCH_RESPONSE_MARGIN,
        ConnectionSettings,
        NodeConnection,
        frame_pool_bytes,
    )

    fetch_max = 20 << 20
    config = ConsumerConfig.from_dict({"bootstrap.servers": "h:1", "fetch.max.bytes": fetch_max})
    settings = ConnectionSettings.from_config(config)
    assert settings.frame_pool_bytes == 2 * (fetch_max + FETCH_RESPONSE_MARGIN)
    default = ConsumerConfig.from_dict({"bootstrap.servers": "h:1"})
    assert ConnectionSettings.from_config(default).frame_pool_bytes == 2 * ((50 << 20) + (1 << 20))
    assert frame_pool_bytes(1024) == FRAME_POOL_BYTES  # never less than the default
    pool = NodeConnection(1, settings, random=lambda: 0.5)._decoder.pool
    assert pool.max_bytes == settings.frame_pool_bytes

    response = b"r" * fetch_max  # a response of exactly fetch.max.bytes
    for decoder, made in ((FrameDecoder(pool=pool), 2), (FrameDecoder(), 4)):
        # each response's frame held (its records not polled yet) while the next arrives
        held, _ = _receive(decoder, response, chunk=1 << 20)
        for _ in range(3):
            frame, _ = _receive(decoder, response, chunk=1 << 20)
            assert frame == response
            held = frame
        del held, frame
        assert (decoder.pool.made, decoder.pool.reused) == (made, 4 - made)
