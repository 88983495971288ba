"""The Kafka APIs the consumer speaks, their kio codecs and the versions this client supports.

Owns: the ``ApiKey`` enum, the client-side supported version range per API, and the lookup of
kio request/response classes by (API, version). May touch: kio's schema index, errors.
Pure: no I/O.

Supported ranges are what kio 0.6 can encode and decode, capped where a newer version only adds
broker-internal fields (Fetch v18 adds a follower's high watermark): negotiation with a broker
(see ``versions``) then picks the highest version both sides support.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Final, cast

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.static.protocol import RequestPayload, ResponsePayload

from kafka_actors.errors import UnknownApiError, UnsupportedVersionError

__all__ = [
    "CLIENT_VERSIONS",
    "ApiKey",
    "VersionRange",
    "api_name",
    "request_type",
    "response_type",
    "response_type_for",
    "supported_versions",
]


class ApiKey(enum.IntEnum):
    """API keys of the requests the consumer sends (Kafka's ``ApiKeys``)."""

    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    DELETE_GROUPS = 42
    OFFSET_DELETE = 47
    OFFSET_FOR_LEADER_EPOCH = 23
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    SASL_AUTHENTICATE = 36
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92

    @property
    def api_name(self) -> str:
        """Kafka's name of the API, e.g. ``ConsumerGroupHeartbeat``."""
        return "".join(part.capitalize() for part in self.name.split("_"))


@dataclass(frozen=True, slots=True)
class VersionRange:
    """An inclusive range of API versions."""

    min: int
    max: int

    def __post_init__(self) -> None:
        if self.min > self.max:
            raise ValueError(f"empty version range {self.min}..{self.max}")

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.min <= version <= self.max

    def intersect(self, other: VersionRange) -> VersionRange | None:
        low, high = max(self.min, other.min), min(self.max, other.max)
        return VersionRange(low, high) if low <= high else None

    def __str__(self) -> str:
        return f"v{self.min}..v{self.max}"


#: Versions this client can encode and decode, per API.
CLIENT_VERSIONS: Final[Mapping[int, VersionRange]] = MappingProxyType(
    {
        ApiKey.FETCH: VersionRange(4, 17),
        ApiKey.LIST_OFFSETS: VersionRange(1, 11),
        ApiKey.METADATA: VersionRange(0, 13),
        ApiKey.OFFSET_COMMIT: VersionRange(2, 10),
        ApiKey.OFFSET_FETCH: VersionRange(1, 10),
        ApiKey.FIND_COORDINATOR: VersionRange(0, 6),
        ApiKey.JOIN_GROUP: VersionRange(0, 9),
        ApiKey.HEARTBEAT: VersionRange(0, 4),
        ApiKey.LEAVE_GROUP: VersionRange(0, 5),
        ApiKey.SYNC_GROUP: VersionRange(0, 5),
        ApiKey.DESCRIBE_GROUPS: VersionRange(0, 6),
        # v4+: the states filter; v5+: the types filter and each group's type (KIP-848).
        ApiKey.LIST_GROUPS: VersionRange(0, 5),
        ApiKey.DELETE_GROUPS: VersionRange(0, 2),
        ApiKey.OFFSET_DELETE: VersionRange(0, 0),
        # v3+: the consumer's replica id (-1); v2 has none (Java's consumer needs v3 too).
        ApiKey.OFFSET_FOR_LEADER_EPOCH: VersionRange(3, 4),
        ApiKey.SASL_HANDSHAKE: VersionRange(0, 1),
        # v5 (Kafka 4.4, KIP-1242): the expected cluster and node id; kio stops at v4, v5 is
        # declared in wire/schemas.py.
        ApiKey.API_VERSIONS: VersionRange(0, 5),
        ApiKey.SASL_AUTHENTICATE: VersionRange(0, 2),
        ApiKey.CONSUMER_GROUP_HEARTBEAT: VersionRange(0, 1),
        ApiKey.CONSUMER_GROUP_DESCRIBE: VersionRange(0, 1),
        # Client telemetry (KIP-714, Kafka 3.7+).
        ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: VersionRange(0, 0),
        ApiKey.PUSH_TELEMETRY: VersionRange(0, 0),
        # Share groups (KIP-932): v1 is the first production version (Kafka 4.1+; v0 was the
        # early-access one); ShareFetch / ShareAcknowledge v2 add RENEW and the acquire mode.
        ApiKey.SHARE_GROUP_HEARTBEAT: VersionRange(1, 1),
        ApiKey.SHARE_GROUP_DESCRIBE: VersionRange(1, 1),
        ApiKey.SHARE_FETCH: VersionRange(1, 2),
        ApiKey.SHARE_ACKNOWLEDGE: VersionRange(1, 2),
        # Share-group offsets, for the admin (Kafka 4.1+; DescribeShareGroupOffsets v1 adds
        # the share-partition lag, KIP-1226).
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: VersionRange(0, 1),
        ApiKey.ALTER_SHARE_GROUP_OFFSETS: VersionRange(0, 0),
        ApiKey.DELETE_SHARE_GROUP_OFFSETS: VersionRange(0, 0),
    }
)


def api_name(api: int) -> str:
    """Kafka's name for an API key, or ``Api<key>`` for keys outside :class:`ApiKey`."""
    try:
        return ApiKey(api).api_name
    except ValueError:
        return f"Api{api}"


def supported_versions(api: int) -> VersionRange:
    """The client's supported version range for ``api``; UnknownApiError if it has none."""
    try:
        return CLIENT_VERSIONS[ApiKey(api)]
    except (ValueError, KeyError):
        raise UnknownApiError(f"API key {api} is not one this client uses") from None


def _check(api: int, version: int) -> None:
    supported = supported_versions(api)
    if version not in supported:
        raise UnsupportedVersionError(
            f"{api_name(api)} v{version} is outside the client's supported range {supported}"
        )


#: (api key, version) pairs kio has no codec for: declared in :mod:`.schemas` (loaded on use).
_NEWER_THAN_KIO: Final = frozenset({(18, 5)})


@cache
def request_type(api: int, version: int) -> type[RequestPayload]:
    """The kio request class for ``api`` at ``version``.

    Raises UnknownApiError for an API this client does not use and UnsupportedVersionError for
    a version outside the client's range.
    """
    _check(api, version)
    if (int(api), version) in _NEWER_THAN_KIO:
        from kafka_actors.protocol.wire.schemas import EXTRA_REQUESTS

        return cast(type[RequestPayload], EXTRA_REQUESTS[int(api), version])
    try:
        return load_request_schema(int(api), version)
    except KioIndexError as exc:  # pragma: no cover - CLIENT_VERSIONS is tested against kio
        raise UnknownApiError(f"kio has no request codec for {api_name(api)} v{version}") from exc


@cache
def response_type(api: int, version: int) -> type[ResponsePayload]:
    """The kio response class for ``api`` at ``version`` (see :func:`request_type`)."""
    _check(api, version)
    if (int(api), version) in _NEWER_THAN_KIO:
        from kafka_actors.protocol.wire.schemas import EXTRA_RESPONSES

        return cast(type[ResponsePayload], EXTRA_RESPONSES[int(api), version])
    try:
        return load_response_schema(int(api), version)
    except KioIndexError as exc:  # pragma: no cover - CLIENT_VERSIONS is tested against kio
        raise UnknownApiError(f"kio has no response codec for {api_name(api)} v{version}") from exc


def response_type_for(request: RequestPayload | type[RequestPayload]) -> type[ResponsePayload]:
    """The kio response class answering ``request`` (same API key and version)."""
    return response_type(int(request.__api_key__), int(request.__version__))
