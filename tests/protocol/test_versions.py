"""API codec lookup and ApiVersions negotiation, including the v0-form UNSUPPORTED_VERSION."""

from __future__ import annotations

import datetime
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v0 import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v2 import ApiVersionsRequest as ApiVersionsRequestV2
from kio.schema.api_versions.v2 import ApiVersionsResponse as ApiVersionsResponseV2
from kio.schema.api_versions.v2.response import ApiVersion as ApiVersionV2
from kio.schema.api_versions.v4 import ApiVersionsRequest as ApiVersionsRequestV4
from kio.schema.api_versions.v4 import ApiVersionsResponse as ApiVersionsResponseV4
from kio.schema.api_versions.v4.response import ApiVersion as ApiVersionV4
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17 import FetchRequest as FetchRequestV17
from kio.schema.metadata.v12 import MetadataResponse as MetadataResponseV12
from kio.schema.types import BrokerId
from kio.static.primitive import i16, i32Timedelta

from kafka_actors.errors import (
    ClusterAuthorizationFailedError,
    KafkaError,
    ProtocolError,
    RebootstrapRequiredError,
    UnknownApiError,
    UnsupportedVersionError,
)
from kafka_actors.protocol.wire import apis
from kafka_actors.protocol.wire.apis import CLIENT_VERSIONS, ApiKey, VersionRange
from kafka_actors.protocol.wire.framing import decode_request, encode_request, encode_response
from kafka_actors.protocol.wire.schemas import ApiVersionsRequest as ApiVersionsRequestV5
from kafka_actors.protocol.wire.versions import (
    CLIENT_SOFTWARE_NAME,
    ApiVersionsHandshake,
    Done,
    NegotiatedVersions,
    Retry,
    api_versions_request,
)

ZERO = i32Timedelta.parse(datetime.timedelta(0))


# -- apis ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("api", list(ApiKey), ids=lambda a: a.name)
def test_every_supported_version_has_kio_codecs(api: ApiKey) -> None:
    supported = CLIENT_VERSIONS[api]
    for version in range(supported.min, supported.max + 1):
        request = apis.request_type(api, version)
        response = apis.response_type(api, version)
        assert int(request.__api_key__) == api and request.__version__ == version
        assert apis.response_type_for(request) is response


def test_versions_outside_the_range_are_refused() -> None:
    with pytest.raises(UnsupportedVersionError, match="Fetch v18"):
        apis.request_type(ApiKey.FETCH, 18)
    with pytest.raises(UnsupportedVersionError):
        apis.response_type(ApiKey.FETCH, 3)
    with pytest.raises(UnknownApiError):
        apis.request_type(0, 9)  # Produce: not a consumer API


def test_api_names() -> None:
    assert ApiKey.CONSUMER_GROUP_HEARTBEAT.api_name == "ConsumerGroupHeartbeat"
    assert apis.api_name(1) == "Fetch"
    assert apis.api_name(4000) == "Api4000"
    assert apis.response_type_for(FetchRequestV17) is apis.response_type(1, 17)


def test_version_range() -> None:
    assert VersionRange(1, 3).intersect(VersionRange(3, 9)) == VersionRange(3, 3)
    assert VersionRange(1, 3).intersect(VersionRange(4, 9)) is None
    assert 2 in VersionRange(1, 3) and 4 not in VersionRange(1, 3)
    with pytest.raises(ValueError):
        VersionRange(3, 1)


# -- NegotiatedVersions ----------------------------------------------------------------------------


def test_negotiated_versions_pick_highest_common() -> None:
    negotiated = NegotiatedVersions(
        broker={1: VersionRange(0, 16), 3: VersionRange(0, 20), 68: VersionRange(0, 0)}
    )
    assert negotiated.version_for(ApiKey.FETCH) == 16
    assert negotiated.version_for(ApiKey.METADATA) == CLIENT_VERSIONS[ApiKey.METADATA].max
    assert negotiated.version_for(ApiKey.CONSUMER_GROUP_HEARTBEAT) == 0
    assert not negotiated.supports(ApiKey.JOIN_GROUP)


def test_no_overlap_names_the_api_and_both_ranges() -> None:
    negotiated = NegotiatedVersions(broker={1: VersionRange(0, 3)})
    with pytest.raises(UnsupportedVersionError) as info:
        negotiated.version_for(ApiKey.FETCH)
    text = str(info.value)
    assert "Fetch" in text and "v4..v17" in text and "v0..v3" in text
    with pytest.raises(UnsupportedVersionError, match="broker supports none"):
        negotiated.version_for(ApiKey.CONSUMER_GROUP_HEARTBEAT)
    ok = NegotiatedVersions(broker={1: VersionRange(0, 12)})
    assert ok.version_for(ApiKey.FETCH, min_version=12) == 12
    with pytest.raises(UnsupportedVersionError, match="at least v13"):
        ok.version_for(ApiKey.FETCH, min_version=13)


# -- Handshake -------------------------------------------------------------------------------------


def frame(response: object, correlation_id: int = 1) -> bytes:
    return encode_response(response, correlation_id=correlation_id)[4:]  # type: ignore[arg-type]


def test_initial_request_is_newest_with_software_name() -> None:
    handshake = ApiVersionsHandshake()
    request, version = handshake.initial_request()
    assert version == CLIENT_VERSIONS[ApiKey.API_VERSIONS].max == 5
    assert isinstance(request, ApiVersionsRequestV5)
    assert request.client_software_name == CLIENT_SOFTWARE_NAME
    assert request.cluster_id is None and request.node_id == -1  # nothing expected: no check
    encoded = encode_request(request, correlation_id=3, client_id="c")
    header, decoded = decode_request(encoded[4:], apis.request_type)
    assert decoded == request and header.request_api_version == 5


def test_v5_request_names_the_expected_cluster_and_node() -> None:
    # KIP-1242: the bytes after the software version are the compact nullable ClusterId and
    # the int32 NodeId (then the empty tagged fields), as Kafka's ApiVersionsRequest.json says.
    request, _ = ApiVersionsHandshake(expected=("cluster-A", 7)).initial_request()
    encoded = encode_request(request, correlation_id=3, client_id="c")
    assert encoded.endswith(b"\x0acluster-A" + struct.pack(">i", 7) + b"\x00")
    _header, decoded = decode_request(encoded[4:], apis.request_type)
    assert (decoded.cluster_id, decoded.node_id) == ("cluster-A", 7)
    nothing, _ = ApiVersionsHandshake().initial_request()
    plain = encode_request(nothing, correlation_id=3, client_id="c")
    assert plain.endswith(b"\x00" + struct.pack(">i", -1) + b"\x00")


def test_rebootstrap_required_answer_raises_its_error() -> None:
    handshake = ApiVersionsHandshake(expected=("cluster-A", 7))
    response = ApiVersionsResponseV4(
        error_code=ErrorCode(RebootstrapRequiredError.code), api_keys=(), throttle_time=ZERO
    )
    with pytest.raises(RebootstrapRequiredError):
        handshake.handle_response_bytes(frame(response))


def test_a_broker_before_kafka_4_4_refuses_v5_and_gets_v4_without_the_check() -> None:
    handshake = ApiVersionsHandshake(expected=("cluster-A", 7))
    refused = ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=(ApiVersionV0(api_key=i16(18), min_version=i16(0), max_version=i16(4)),),
    )
    step = handshake.handle_response_bytes(frame(refused))
    assert isinstance(step, Retry) and step.version == 4
    assert isinstance(step.request, ApiVersionsRequestV4)


def test_software_version_is_a_valid_kafka_software_version() -> None:
    import re

    request = api_versions_request(3)
    assert re.fullmatch(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?", request.client_software_name)
    assert re.fullmatch(
        r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?", request.client_software_version
    )
    assert isinstance(api_versions_request(2), ApiVersionsRequestV2)


def test_handshake_success_at_first_try() -> None:
    handshake = ApiVersionsHandshake()
    response = ApiVersionsResponseV4(
        error_code=ErrorCode.none,
        api_keys=(
            ApiVersionV4(api_key=i16(18), min_version=i16(0), max_version=i16(4)),
            ApiVersionV4(api_key=i16(1), min_version=i16(4), max_version=i16(18)),
            ApiVersionV4(api_key=i16(3), min_version=i16(0), max_version=i16(13)),
        ),
        throttle_time=ZERO,
    )
    step = handshake.handle_response_bytes(frame(response, 9), correlation_id=9)
    assert isinstance(step, Done)
    assert step.versions.api_versions_version == 5  # the version asked (v5's body is v4's)
    assert step.versions.version_for(ApiKey.FETCH) == 17
    assert step.versions.version_for(ApiKey.METADATA) == 13
    assert handshake.done
    with pytest.raises(RuntimeError):
        handshake.handle_response_bytes(frame(response))


def test_v0_form_unsupported_version_retries_with_brokers_max() -> None:
    handshake = ApiVersionsHandshake()
    refused = ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=(ApiVersionV0(api_key=i16(18), min_version=i16(0), max_version=i16(2)),),
    )
    step = handshake.handle_response_bytes(frame(refused))
    assert isinstance(step, Retry)
    assert step.version == 2 and handshake.version == 2
    assert isinstance(step.request, ApiVersionsRequestV2)
    accepted = ApiVersionsResponseV2(
        error_code=ErrorCode.none,
        api_keys=(
            ApiVersionV2(api_key=i16(18), min_version=i16(0), max_version=i16(2)),
            ApiVersionV2(api_key=i16(3), min_version=i16(0), max_version=i16(9)),
        ),
        throttle_time=ZERO,
    )
    done = handshake.handle_response_bytes(frame(accepted))
    assert isinstance(done, Done)
    assert done.versions.api_versions_version == 2
    assert done.versions.version_for(ApiKey.METADATA) == 9


def test_v0_form_without_api_versions_entry_falls_back_to_v0() -> None:
    handshake = ApiVersionsHandshake()
    refused = ApiVersionsResponseV0(error_code=ErrorCode.unsupported_version, api_keys=())
    step = handshake.handle_response_bytes(frame(refused))
    assert isinstance(step, Retry) and step.version == 0


def test_v0_form_body_missing_falls_back_to_v0() -> None:
    handshake = ApiVersionsHandshake()
    step = handshake.handle_response_bytes(struct.pack(">ih", 1, 35))
    assert isinstance(step, Retry) and step.version == 0


def test_mock_cluster_varint_count_form() -> None:
    # Bytes librdkafka's mock cluster sends for a refused ApiVersions v3/v4 request.
    data = bytes.fromhex("0000000100230100120000000200000000")
    step = ApiVersionsHandshake().handle_response_bytes(data)
    assert isinstance(step, Retry) and step.version == 2


def test_broker_max_not_lower_still_makes_progress() -> None:
    handshake = ApiVersionsHandshake(max_version=3)
    refused = ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=(ApiVersionV0(api_key=i16(18), min_version=i16(0), max_version=i16(3)),),
    )
    step = handshake.handle_response_bytes(frame(refused))
    assert isinstance(step, Retry) and step.version == 2


def test_refusal_of_v0_is_final() -> None:
    handshake = ApiVersionsHandshake(max_version=0)
    refused = ApiVersionsResponseV0(error_code=ErrorCode.unsupported_version, api_keys=())
    with pytest.raises(UnsupportedVersionError, match="ApiVersions v0"):
        handshake.handle_response_bytes(frame(refused))


def test_other_error_codes_raise_their_error() -> None:
    handshake = ApiVersionsHandshake()
    response = ApiVersionsResponseV4(
        error_code=ErrorCode.cluster_authorization_failed, api_keys=(), throttle_time=ZERO
    )
    with pytest.raises(ClusterAuthorizationFailedError):
        handshake.handle_response_bytes(frame(response))


def test_garbage_answers_raise_protocol_errors() -> None:
    with pytest.raises(ProtocolError):
        ApiVersionsHandshake().handle_response_bytes(b"\x00\x00\x00\x01\x00")
    wrong = MetadataResponseV12(
        throttle_time=ZERO, brokers=(), cluster_id=None, controller_id=BrokerId(1), topics=()
    )
    with pytest.raises(ProtocolError):
        ApiVersionsHandshake().handle_response_bytes(frame(wrong)[:7])


@settings(max_examples=300)
@given(data=st.binary(max_size=120), start=st.integers(min_value=0, max_value=4))
def test_handshake_on_garbage_raises_only_kafka_errors(data: bytes, start: int) -> None:
    handshake = ApiVersionsHandshake(max_version=start)
    try:
        step = handshake.handle_response_bytes(data)
    except KafkaError:
        return
    if isinstance(step, Retry):
        assert step.version < start
    else:
        assert isinstance(step, Done)


def test_a_refusal_of_the_brokers_own_fallback_version_ends_the_exchange() -> None:
    # One fallback per connection (issue 20): a broker that refuses v2 after naming v2 as its
    # maximum is not asked v1 and v0 on the same connection: the attempt fails, and the next
    # one waits for the reconnect backoff.
    handshake = ApiVersionsHandshake()
    refused = ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=(ApiVersionV0(api_key=i16(18), min_version=i16(0), max_version=i16(2)),),
    )
    step = handshake.handle_response_bytes(frame(refused))
    assert isinstance(step, Retry) and step.version == 2
    with pytest.raises(UnsupportedVersionError, match="ApiVersions v2"):
        handshake.handle_response_bytes(frame(refused))
