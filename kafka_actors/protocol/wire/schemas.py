"""Message schemas newer than the kio release this client is built on.

Owns: ApiVersions v5 (KIP-1242, Kafka 4.4): the request adds ``ClusterId`` (nullable string)
and ``NodeId`` (int32), the cluster and node the client means to reach, so that a broker
answering for another cluster (an address reused after a move) replies
REBOOTSTRAP_REQUIRED; the response is v4's. Declared as kio declares its generated classes
(field metadata read by kio's generic reader and writer), from Kafka's
``ApiVersionsRequest.json``; :func:`~kafka_actors.protocol.wire.apis.request_type` and
``response_type`` return them. May touch: kio's v4 classes (the shared nested entities).
"""

# No "from __future__ import annotations": kio reads the field types at run time.

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Final

from kio.schema.api_versions.v4.response import (
    ApiVersion,
    FinalizedFeatureKey,
    SupportedFeatureKey,
)
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta, i64

__all__ = ["EXTRA_REQUESTS", "EXTRA_RESPONSES", "ApiVersionsRequest", "ApiVersionsResponse"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsRequest:
    """ApiVersions v5: v4's fields, then the cluster and node the client means to reach
    (both, or neither: null and -1)."""

    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(5)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(18)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    client_software_name: str = field(metadata={"kafka_type": "string"})
    client_software_version: str = field(metadata={"kafka_type": "string"})
    cluster_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    node_id: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsResponse:
    """ApiVersions v5's response: the same fields as v4's."""

    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(5)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(18)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    api_keys: tuple[ApiVersion, ...]
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    supported_features: tuple[SupportedFeatureKey, ...] = field(
        metadata={"tag": 0}, default=()
    )
    finalized_features_epoch: i64 = field(
        metadata={"kafka_type": "int64", "tag": 1}, default=i64(-1)
    )
    finalized_features: tuple[FinalizedFeatureKey, ...] = field(
        metadata={"tag": 2}, default=()
    )
    zk_migration_ready: bool = field(
        metadata={"kafka_type": "bool", "tag": 3}, default=False
    )


#: (api key, version) -> class, for versions kio does not have.
EXTRA_REQUESTS: Final[Mapping[tuple[int, int], type]] = {(18, 5): ApiVersionsRequest}
EXTRA_RESPONSES: Final[Mapping[tuple[int, int], type]] = {(18, 5): ApiVersionsResponse}
