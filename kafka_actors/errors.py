"""Typed errors of kafka-actors: one hierarchy for broker error codes and client-side failures.

This module owns every exception the library raises on purpose. It touches nothing else:
no I/O, no logging, no imports from the rest of the package (everything else imports it).

Shape::

    KafkaError                      .retriable, .code, .topic, .partition, .offset, .node
    ├── RetriableError              retrying the same operation later may succeed
    │   ├── InvalidMetadataError    ...after refreshing metadata (Java's InvalidMetadataException)
    │   ├── CoordinatorError        the group coordinator moved, is loading or is down
    │   ├── FetchSessionError       the fetch session (KIP-227) must be reset
    │   ├── KafkaTimeoutError       a deadline passed (client side, or REQUEST_TIMED_OUT)
    │   └── KafkaConnectionError    a connection failed or was lost (carries the node)
    │       └── DisconnectedError   (CorruptResponseError: an undecodable response, its API)
    └── FatalError                  retrying the same operation will not help
        ├── GroupError              group membership answers (the membership manager rejoins)
        ├── OffsetError             offsets out of range, too large, moved ...
        ├── AuthorizationError      ACLs deny the operation
        ├── AuthenticationError     SASL failed (SslAuthenticationError: TLS handshake failed)
        ├── ProtocolError           bad frames, undecodable responses
        ├── CorruptRecordError, UnsupportedRecordFormatError   record decoding
        ├── RecordDeserializationError   the user's key / value deserializer raised
        └── ConfigError, ConsumerClosedError, WakeupError, CommitFailedError, ...

Every error code Apache Kafka defines (as listed by ``kio.schema.errors.ErrorCode``) maps to one
class here whose ``code`` is that error code; ``retriable`` follows the Java client (subclasses of
``org.apache.kafka.common.errors.RetriableException`` are retriable). Use :func:`error_for_code`
to build an error from a response and :func:`raise_for_code` to raise it when the code is not 0.
Codes this module does not know map to :class:`UnknownErrorCodeError` (fatal, as Java treats
unknown codes as ``UnknownServerException``).

Context (``topic``, ``partition``, ``offset``, ``node``) is optional keyword-only, stored on the
instance and shown in ``str()``, so an error raised to the user names what it concerns.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Final, NoReturn

__all__ = [
    "NO_ERROR",
    "AuthenticationError",
    "AuthorizationError",
    "BootstrapResolutionError",
    "BrokersUnreachableError",
    "CallTimeout",
    "CommitFailedError",
    "ConfigError",
    "ConsumerClosedError",
    "CoordinatorError",
    "CorrelationIdMismatchError",
    "CorruptRecordError",
    "CorruptResponseError",
    "DecompressedBatchTooLargeError",
    "DeserializationOrigin",
    "DisconnectedError",
    "FatalConsumerError",
    "FatalError",
    "FetchSessionError",
    "FrameTooLargeError",
    "GroupError",
    "IllegalStateError",
    "InvalidArgumentError",
    "InvalidFrameError",
    "InvalidMetadataError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "LogTruncationError",
    "MissingDependencyError",
    "NoOffsetForPartitionError",
    "OAuthBearerTokenError",
    "OAuthTokenRetrievalError",
    "OAuthTokenUnavailableError",
    "OffsetError",
    "OffsetMapError",
    "PartitionStoppedError",
    "ProtocolError",
    "RecordDeserializationError",
    "RetriableError",
    "ScramIterationsError",
    "ShareGroupsNotSupportedError",
    "SslAuthenticationError",
    "TruncatedFrameError",
    "UnknownApiError",
    "UnknownErrorCodeError",
    "UnsupportedRecordFormatError",
    "WakeupError",
    "error_class_for_code",
    "error_for_code",
    "raise_for_code",
]

#: The error code of a response (or an entry of one) that carries no error.
NO_ERROR: Final = 0


class KafkaError(Exception):
    """Base of every error kafka-actors raises on purpose.

    ``retriable`` is a class attribute: True when the same operation may succeed if tried again
    (possibly after a metadata refresh, coordinator rediscovery or reconnect). ``code`` is the
    Kafka error code the error stands for, or None for client-side errors.
    """

    retriable: ClassVar[bool] = False
    code: int | None = None
    #: Short text used when no message is given (broker error classes set it).
    description: ClassVar[str] = ""

    def __init__(
        self,
        message: str | None = None,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        node: int | str | None = None,
    ) -> None:
        self.message = message if message is not None else self._default_message()
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.node = node
        super().__init__(self.message)

    def _default_message(self) -> str:
        if self.description:
            return self.description
        return type(self).__name__

    @property
    def context(self) -> dict[str, object]:
        """The context this error concerns, without the keys that are unset."""
        items = {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "node": self.node,
        }
        return {key: value for key, value in items.items() if value is not None}

    def _extra_state(self) -> dict[str, Any]:
        """Constructor keyword arguments beyond the common ones (for subclasses' pickling)."""
        return {}

    def __str__(self) -> str:
        parts = [self.message]
        if self.code is not None:
            parts.append(f"[error code {self.code}]")
        context = self.context
        if context:
            parts.append("(" + ", ".join(f"{k}={v}" for k, v in context.items()) + ")")
        return " ".join(parts)

    def __repr__(self) -> str:
        args = [repr(self.message)]
        args += [f"{k}={v!r}" for k, v in self.context.items()]
        args += [f"{k}={v!r}" for k, v in self._extra_state().items()]
        return f"{type(self).__name__}({', '.join(args)})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep keyword-only context across pickling (actors in other processes).
        kwargs = {**self.context, **self._extra_state()}
        return (_rebuild, (type(self), self.message, kwargs), self.__dict__)


def _rebuild(cls: type[KafkaError], message: str, kwargs: dict[str, Any]) -> KafkaError:
    return cls(message, **kwargs)


class RetriableError(KafkaError):
    """Trying the same operation again later may succeed."""

    retriable = True


class FatalError(KafkaError):
    """Trying the same operation again will not help without a change elsewhere."""

    retriable = False


# -- Families ------------------------------------------------------------------------------


class InvalidMetadataError(RetriableError):
    """The client's metadata is stale: refresh it, then retry (Java InvalidMetadataException)."""


class CoordinatorError(RetriableError):
    """The group coordinator cannot serve the request right now (moved, loading or down)."""


class FetchSessionError(RetriableError):
    """The incremental fetch session (KIP-227) is gone or out of step: start a full one."""


class KafkaTimeoutError(RetriableError):
    """A deadline passed before the operation completed."""


class KafkaConnectionError(RetriableError):
    """A connection to a broker could not be made or was lost; carries the node."""


class BrokersUnreachableError(KafkaError):
    """No known broker answered a Metadata request for
    ``metadata.recovery.rebootstrap.trigger.ms`` and ``metadata.recovery.strategy`` is
    ``none``, so the client will not go back to the bootstrap servers (KIP-899). Reported at
    the next poll; the client keeps trying the known brokers."""

    retriable = False


class DisconnectedError(KafkaConnectionError):
    """The connection closed while requests were in flight; they failed with this error."""


class CorruptResponseError(DisconnectedError):
    """A response from a broker could not be decoded (bad bytes, impossible sizes).

    The request it answered fails with this error and the connection it came on is closed
    (its other answers can no longer be trusted); retriable like any lost connection, so the
    request manager retries with its backoff on a new connection. ``api`` names the API of
    the request (e.g. ``"Metadata"``), ``node`` the broker; the decoding failure (a
    :class:`ProtocolError`) is chained as ``__cause__``.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        api: str | None = None,
        node: int | str | None = None,
    ) -> None:
        self.api = api
        super().__init__(message, node=node)

    def _extra_state(self) -> dict[str, Any]:
        return {"api": self.api}


class GroupError(FatalError):
    """A consumer-group membership answer (generation, member id, epoch, instance id ...).

    Not retriable as such: the membership manager reacts (rejoin, reset epoch, fail fatally).
    """


class OffsetError(FatalError):
    """An offset the request named is not acceptable to the broker."""


class AuthorizationError(FatalError):
    """The broker's ACLs deny the operation."""


class AuthenticationError(FatalError):
    """Authentication with the broker failed (SASL)."""


class ScramIterationsError(AuthenticationError):
    """The SCRAM server's iteration count is outside the range this client accepts (below
    Java's minimum of 4096, or above the client's maximum: a hostile server could make the
    client spin on PBKDF2)."""


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake failed: the broker's certificate did not verify (untrusted, expired,
    wrong host name) or the broker refused ours (Java SslAuthenticationException)."""


class OAuthBearerTokenError(AuthenticationError):
    """SASL/OAUTHBEARER: the access token is unusable (not a JWT, no ``exp`` or subject claim,
    expired), or the token provider failed or returned no valid token. Never quotes the token."""


class OAuthTokenRetrievalError(AuthenticationError):
    """SASL/OAUTHBEARER: the OIDC token endpoint could not be reached or refused the client
    credentials (``status`` is the HTTP status, None when no answer came). Never quotes the
    client secret."""

    def __init__(
        self,
        message: str | None = None,
        *,
        status: int | None = None,
        node: int | str | None = None,
    ) -> None:
        self.status = status
        super().__init__(message, node=node)

    def _extra_state(self) -> dict[str, Any]:
        return {"status": self.status}


class OAuthTokenUnavailableError(KafkaConnectionError):
    """SASL/OAUTHBEARER: no token yet (the first fetch is still under way); the connection
    attempt is retried after its backoff."""


# -- Broker error codes ----------------------------------------------------------------------
# One class per error code. Order follows the code numbers.


class UnknownServerError(FatalError):
    code = -1
    description = "The broker hit an unexpected error while handling the request"


class OffsetOutOfRangeError(OffsetError):
    code = 1
    description = "The offset is outside the range the broker holds for the partition"


class CorruptMessageError(RetriableError):
    code = 2
    description = "The broker found a message corrupt (CRC mismatch, bad size or null key)"


class UnknownTopicOrPartitionError(InvalidMetadataError):
    code = 3
    description = "The broker does not host this topic-partition"


class InvalidFetchSizeError(FatalError):
    code = 4
    description = "The fetch size is invalid"


class LeaderNotAvailableError(InvalidMetadataError):
    code = 5
    description = "The partition has no leader (an election is in progress)"


class NotLeaderOrFollowerError(InvalidMetadataError):
    code = 6
    description = "The broker is not the leader (or not a replica) of the partition"


class RequestTimedOutError(KafkaTimeoutError):
    code = 7
    description = "The broker timed out handling the request"


class BrokerNotAvailableError(FatalError):
    code = 8
    description = "The broker is not available"


class ReplicaNotAvailableError(InvalidMetadataError):
    code = 9
    description = "The replica is not available for the partition"


class MessageTooLargeError(FatalError):
    code = 10
    description = "A message is larger than the broker accepts"


class StaleControllerEpochError(FatalError):
    code = 11
    description = "The controller moved to another broker"


class OffsetMetadataTooLargeError(OffsetError):
    code = 12
    description = "The committed offset's metadata string is too large"


class NetworkError(KafkaConnectionError):
    code = 13
    description = "The broker disconnected before a response was received"


class CoordinatorLoadInProgressError(CoordinatorError):
    code = 14
    description = "The coordinator is still loading the group"


class CoordinatorNotAvailableError(CoordinatorError):
    code = 15
    description = "The coordinator is not available"


class NotCoordinatorError(CoordinatorError):
    code = 16
    description = "The broker is not the coordinator of this group"


class InvalidTopicError(FatalError):
    code = 17
    description = "The topic name is invalid or the topic is internal"


class RecordListTooLargeError(FatalError):
    code = 18
    description = "The record batch is larger than the broker's segment size"


class NotEnoughReplicasError(RetriableError):
    code = 19
    description = "Fewer in-sync replicas than required"


class NotEnoughReplicasAfterAppendError(RetriableError):
    code = 20
    description = "The write succeeded but fewer in-sync replicas than required hold it"


class InvalidRequiredAcksError(FatalError):
    code = 21
    description = "The requested acks value is invalid"


class IllegalGenerationError(GroupError):
    code = 22
    description = "The generation id is not the group's current generation"


class InconsistentGroupProtocolError(GroupError):
    code = 23
    description = "The member's protocol type or protocols do not match the group's"


class InvalidGroupIdError(GroupError):
    code = 24
    description = "The group id is invalid"


class UnknownMemberIdError(GroupError):
    code = 25
    description = "The coordinator does not know this member id"


class InvalidSessionTimeoutError(GroupError):
    code = 26
    description = "The session timeout is outside the broker's allowed range"


class RebalanceInProgressError(GroupError):
    code = 27
    description = "The group is rebalancing: rejoin"


class InvalidCommitOffsetSizeError(OffsetError):
    code = 28
    description = "The offset commit was rejected as too large"


class TopicAuthorizationFailedError(AuthorizationError):
    code = 29
    description = "Not authorized to access the topic"


class GroupAuthorizationFailedError(AuthorizationError):
    code = 30
    description = "Not authorized to access the group"


class ClusterAuthorizationFailedError(AuthorizationError):
    code = 31
    description = "Not authorized for the cluster operation"


class InvalidTimestampError(FatalError):
    code = 32
    description = "The timestamp is outside the accepted range"


class UnsupportedSaslMechanismError(AuthenticationError):
    code = 33
    description = "The broker does not support the requested SASL mechanism"


class IllegalSaslStateError(AuthenticationError):
    code = 34
    description = "The request is not valid in the current SASL state"


class UnsupportedVersionError(FatalError):
    code = 35
    description = "The API version is not supported"


class TopicAlreadyExistsError(FatalError):
    code = 36
    description = "The topic already exists"


class InvalidPartitionsError(FatalError):
    code = 37
    description = "The number of partitions is invalid"


class InvalidReplicationFactorError(FatalError):
    code = 38
    description = "The replication factor is invalid"


class InvalidReplicaAssignmentError(FatalError):
    code = 39
    description = "The replica assignment is invalid"


class InvalidConfigError(FatalError):
    code = 40
    description = "The broker rejected a configuration"


class NotControllerError(RetriableError):
    code = 41
    description = "The broker is not the active controller"


class InvalidRequestError(FatalError):
    code = 42
    description = "The request is malformed or invalid (see the broker log)"


class UnsupportedForMessageFormatError(FatalError):
    code = 43
    description = "The message format version on the broker does not support the request"


class PolicyViolationError(FatalError):
    code = 44
    description = "The request violates a configured policy"


class OutOfOrderSequenceNumberError(FatalError):
    code = 45
    description = "The broker received an out-of-order sequence number"


class DuplicateSequenceNumberError(FatalError):
    code = 46
    description = "The broker received a duplicate sequence number"


class InvalidProducerEpochError(FatalError):
    code = 47
    description = "The producer epoch is older than the current one"


class InvalidTxnStateError(FatalError):
    code = 48
    description = "The operation is not valid in the transaction's state"


class InvalidProducerIdMappingError(FatalError):
    code = 49
    description = "The producer id does not match the transactional id"


class InvalidTransactionTimeoutError(FatalError):
    code = 50
    description = "The transaction timeout exceeds the broker's maximum"


class ConcurrentTransactionsError(RetriableError):
    code = 51
    description = "Another transaction with this producer is still completing"


class TransactionCoordinatorFencedError(FatalError):
    code = 52
    description = "The transaction coordinator is no longer the current one"


class TransactionalIdAuthorizationFailedError(AuthorizationError):
    code = 53
    description = "Not authorized for the transactional id"


class SecurityDisabledError(FatalError):
    code = 54
    description = "Security features are disabled on the broker"


class OperationNotAttemptedError(FatalError):
    code = 55
    description = "The broker did not attempt the operation"


class KafkaStorageError(InvalidMetadataError):
    code = 56
    description = "The broker hit a disk error serving the partition"


class LogDirNotFoundError(FatalError):
    code = 57
    description = "The log directory does not exist"


class SaslAuthenticationFailedError(AuthenticationError):
    code = 58
    description = "SASL authentication failed"


class UnknownProducerIdError(FatalError):
    code = 59
    description = "The broker has no state for the producer id"


class ReassignmentInProgressError(FatalError):
    code = 60
    description = "A partition reassignment is in progress"


class DelegationTokenAuthDisabledError(FatalError):
    code = 61
    description = "Delegation token authentication is disabled"


class DelegationTokenNotFoundError(FatalError):
    code = 62
    description = "The delegation token was not found"


class DelegationTokenOwnerMismatchError(FatalError):
    code = 63
    description = "The principal is not the delegation token's owner or renewer"


class DelegationTokenRequestNotAllowedError(FatalError):
    code = 64
    description = "Delegation token requests are not allowed on this channel"


class DelegationTokenAuthorizationFailedError(AuthorizationError):
    code = 65
    description = "Not authorized for the delegation token operation"


class DelegationTokenExpiredError(FatalError):
    code = 66
    description = "The delegation token expired"


class InvalidPrincipalTypeError(FatalError):
    code = 67
    description = "The principal type is not supported"


class NonEmptyGroupError(GroupError):
    code = 68
    description = "The group is not empty"


class GroupIdNotFoundError(GroupError):
    code = 69
    description = "The group id does not exist"


class FetchSessionIdNotFoundError(FetchSessionError):
    code = 70
    description = "The fetch session id was not found"


class InvalidFetchSessionEpochError(FetchSessionError):
    code = 71
    description = "The fetch session epoch is invalid"


class ListenerNotFoundError(InvalidMetadataError):
    code = 72
    description = "The leader has no endpoint on the listener the request came in on"


class TopicDeletionDisabledError(FatalError):
    code = 73
    description = "Topic deletion is disabled"


class FencedLeaderEpochError(InvalidMetadataError):
    code = 74
    description = "The leader epoch in the request is older than the broker's"


class UnknownLeaderEpochError(InvalidMetadataError):
    code = 75
    description = "The leader epoch in the request is newer than the broker's"


class UnsupportedCompressionTypeError(FatalError):
    code = 76
    description = "The broker cannot serve this compression type to the requesting version"


class StaleBrokerEpochError(FatalError):
    code = 77
    description = "The broker epoch is stale"


class OffsetNotAvailableError(RetriableError):
    code = 78
    description = "The leader's high watermark has not caught up yet"


class MemberIdRequiredError(GroupError):
    code = 79
    description = "The group requires a member id: rejoin with the one given"


class PreferredLeaderNotAvailableError(InvalidMetadataError):
    code = 80
    description = "The preferred leader is not available"


class GroupMaxSizeReachedError(GroupError):
    code = 81
    description = "The group has reached its maximum size"


class FencedInstanceIdError(GroupError):
    code = 82
    description = "Another member with the same group.instance.id fenced this one"


class EligibleLeadersNotAvailableError(InvalidMetadataError):
    code = 83
    description = "No eligible leader is available for the partition"


class ElectionNotNeededError(InvalidMetadataError):
    code = 84
    description = "No leader election is needed for the partition"


class NoReassignmentInProgressError(FatalError):
    code = 85
    description = "No partition reassignment is in progress"


class GroupSubscribedToTopicError(GroupError):
    code = 86
    description = "The group is subscribed to the topic"


class InvalidRecordError(FatalError):
    code = 87
    description = "The broker rejected a record as invalid"


class UnstableOffsetCommitError(RetriableError):
    code = 88
    description = "Committed offsets are pending (an open transaction): retry later"


class ThrottlingQuotaExceededError(RetriableError):
    code = 89
    description = "A throttling quota was exceeded"


class ProducerFencedError(FatalError):
    code = 90
    description = "A newer producer with the same transactional id fenced this one"


class ResourceNotFoundError(FatalError):
    code = 91
    description = "The resource was not found"


class DuplicateResourceError(FatalError):
    code = 92
    description = "The resource is named more than once in the request"


class UnacceptableCredentialError(FatalError):
    code = 93
    description = "The credential does not meet the broker's requirements"


class InconsistentVoterSetError(FatalError):
    code = 94
    description = "The voter set is inconsistent"


class InvalidUpdateVersionError(FatalError):
    code = 95
    description = "The update version is invalid"


class FeatureUpdateFailedError(FatalError):
    code = 96
    description = "The feature update failed"


class PrincipalDeserializationFailureError(FatalError):
    code = 97
    description = "The forwarded principal could not be deserialized"


class SnapshotNotFoundError(FatalError):
    code = 98
    description = "The snapshot was not found"


class PositionOutOfRangeError(OffsetError):
    code = 99
    description = "The requested position is outside the log's range"


class UnknownTopicIdError(InvalidMetadataError):
    code = 100
    description = "The broker does not know the topic id"


class DuplicateBrokerRegistrationError(FatalError):
    code = 101
    description = "The broker registration is a duplicate"


class BrokerIdNotRegisteredError(FatalError):
    code = 102
    description = "The broker id is not registered"


class InconsistentTopicIdError(InvalidMetadataError):
    code = 103
    description = "The topic id does not match the one in the broker's log"


class InconsistentClusterIdError(FatalError):
    code = 104
    description = "The cluster id does not match"


class TransactionalIdNotFoundError(FatalError):
    code = 105
    description = "The transactional id was not found"


class FetchSessionTopicIdError(FetchSessionError):
    code = 106
    description = "The fetch session's topic ids are inconsistent"


class IneligibleReplicaError(FatalError):
    code = 107
    description = "The replica is not eligible to be leader"


class NewLeaderElectedError(FatalError):
    code = 108
    description = "A new leader was elected"


class OffsetMovedToTieredStorageError(OffsetError):
    code = 109
    description = "The offset has moved to tiered storage"


class FencedMemberEpochError(GroupError):
    code = 110
    description = "The member epoch is fenced: rejoin with epoch 0"


class UnreleasedInstanceIdError(GroupError):
    code = 111
    description = "The group.instance.id is still held by another member"


class UnsupportedAssignorError(GroupError):
    code = 112
    description = "The group does not support the requested server-side assignor"


class StaleMemberEpochError(GroupError):
    code = 113
    description = "The member epoch is stale"


class MismatchedEndpointTypeError(FatalError):
    code = 114
    description = "The request was sent to an endpoint of the wrong type"


class UnsupportedEndpointTypeError(FatalError):
    code = 115
    description = "The endpoint type is not supported"


class UnknownControllerIdError(FatalError):
    code = 116
    description = "The controller id is unknown"


class UnknownSubscriptionIdError(FatalError):
    code = 117
    description = "The client telemetry subscription id is unknown"


class TelemetryTooLargeError(FatalError):
    code = 118
    description = "The client telemetry payload is too large"


class InvalidRegistrationError(FatalError):
    code = 119
    description = "The controller rejected the registration"


class TransactionAbortableError(FatalError):
    code = 120
    description = "The transaction must be aborted"


class InvalidRecordStateError(FatalError):
    code = 121
    description = "The record is not in a state that allows the operation"


class ShareSessionNotFoundError(RetriableError):
    code = 122
    description = "The share session was not found"


class InvalidShareSessionEpochError(RetriableError):
    code = 123
    description = "The share session epoch is invalid"


class FencedStateEpochError(FatalError):
    code = 124
    description = "The share-group state epoch is fenced"


class InvalidVoterKeyError(FatalError):
    code = 125
    description = "The voter key does not match"


class DuplicateVoterError(FatalError):
    code = 126
    description = "The voter is already part of the set of voters"


class VoterNotFoundError(FatalError):
    code = 127
    description = "The voter is not part of the set of voters"


class InvalidRegularExpressionError(FatalError):
    code = 128
    description = "The subscription regular expression is invalid"


class RebootstrapRequiredError(FatalError):
    code = 129
    description = "The client must rebootstrap its metadata"


class StreamsInvalidTopologyError(FatalError):
    code = 130
    description = "The Streams topology is invalid"


class StreamsInvalidTopologyEpochError(FatalError):
    code = 131
    description = "The Streams topology epoch is invalid"


class StreamsTopologyFencedError(FatalError):
    code = 132
    description = "The Streams topology is fenced"


class ShareSessionLimitReachedError(RetriableError):
    code = 133
    description = "The broker's share session limit is reached"


class ShareGroupsNotSupportedError(UnsupportedVersionError):
    """The broker has no share groups (KIP-932): its ApiVersions lack ShareGroupHeartbeat,
    or it answers it with UNSUPPORTED_VERSION (its ``code`` stays 35; the code still maps to
    UnsupportedVersionError). The message says what to enable."""

    description = (
        "The broker does not support share groups (KIP-932): use Apache Kafka 4.2 or later "
        "with share groups enabled (the share.version feature at 1 or above, e.g. "
        "kafka-features.sh upgrade --feature share.version=1, and on 4.0/4.1 "
        "group.coordinator.rebalance.protocols including share)"
    )


class UnknownErrorCodeError(FatalError):
    """A response carried an error code this client does not know (treated as fatal, as Java
    treats unknown codes as UnknownServerException). The instance's ``code`` is that code."""

    def __init__(
        self,
        message: str | None = None,
        *,
        code: int,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        node: int | str | None = None,
    ) -> None:
        self.code = code
        super().__init__(
            message if message is not None else f"Unknown error code {code}",
            topic=topic,
            partition=partition,
            offset=offset,
            node=node,
        )

    def _extra_state(self) -> dict[str, Any]:
        return {"code": self.code}


# -- Client-side errors ------------------------------------------------------------------------


class ProtocolError(FatalError):
    """Bytes from the broker do not form a valid Kafka protocol frame or response.

    The connection that produced them cannot be trusted any more: close it. Requests in flight on
    it are then failed with :class:`DisconnectedError` (retriable).
    """


class InvalidFrameError(ProtocolError):
    """The frame is malformed (negative size, undecodable header or body)."""


class TruncatedFrameError(InvalidFrameError):
    """The frame ended before its header or body did."""


class FrameTooLargeError(ProtocolError):
    """The frame's size prefix exceeds the maximum frame size this client accepts."""

    def __init__(self, size: int, max_size: int, *, node: int | str | None = None) -> None:
        self.size = size
        self.max_size = max_size
        super().__init__(f"Frame of {size} bytes exceeds the maximum of {max_size}", node=node)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_frame_too_large, (self.size, self.max_size, self.node), self.__dict__)


def _rebuild_frame_too_large(size: int, max_size: int, node: int | str | None) -> KafkaError:
    return FrameTooLargeError(size, max_size, node=node)


class CorrelationIdMismatchError(ProtocolError):
    """A response's correlation id does not match any request in flight (or the expected one)."""

    def __init__(
        self,
        message: str | None = None,
        *,
        expected: int | None = None,
        received: int | None = None,
        node: int | str | None = None,
    ) -> None:
        self.expected = expected
        self.received = received
        if message is None:
            message = f"Correlation id mismatch: expected {expected}, received {received}"
        super().__init__(message, node=node)

    def _extra_state(self) -> dict[str, Any]:
        return {"expected": self.expected, "received": self.received}


class UnknownApiError(ProtocolError):
    """An API key or version this client has no codec for."""


class CorruptRecordError(FatalError):
    """A record batch failed its CRC or could not be decoded (client side).

    Fatal for the position concerned: the consumer cannot move past it on its own. Carries the
    topic, partition and offset (base offset of the batch) where decoding failed.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        node: int | str | None = None,
    ) -> None:
        super().__init__(
            message if message is not None else "Corrupt record batch",
            topic=topic,
            partition=partition,
            offset=offset,
            node=node,
        )


class DecompressedBatchTooLargeError(CorruptRecordError):
    """A compressed record batch expands past the decompression bound
    (``max.decompressed.batch.bytes``); decompression stopped at the bound. Carries the topic,
    partition and base offset of the batch."""


class UnsupportedRecordFormatError(FatalError):
    """The record batch uses a format this client cannot decode (message format v0/v1)."""


class DeserializationOrigin(enum.Enum):
    """Which part of a record a deserializer failed on (Java's DeserializationExceptionOrigin,
    KIP-1036)."""

    KEY = "key"
    VALUE = "value"


class RecordDeserializationError(FatalError):
    """The key or value deserializer raised for one record (Java RecordDeserializationException,
    KIP-334). The deserializer's exception is chained as ``__cause__``.

    Records before it are returned first; then every poll raises this error again (the
    deserializer is tried again each time) while the partition's position stays at ``offset``:
    nothing is skipped and commits of consumed offsets do not pass it. To go on without the
    record, seek past it: ``consumer.seek(TopicPartition(e.topic, e.partition), e.offset + 1)``.
    ``key`` and ``value`` are the record's raw bytes (for a dead-letter topic, say).
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        node: int | str | None = None,
        origin: DeserializationOrigin = DeserializationOrigin.VALUE,
        key: bytes | None = None,
        value: bytes | None = None,
    ) -> None:
        self.origin = DeserializationOrigin(origin)
        self.key = key
        self.value = value
        if message is None:
            message = (
                f"Error deserializing the {self.origin.value} of the record of {topic}-{partition}"
                f" at offset {offset}; seek past it to go on without it"
            )
        super().__init__(message, topic=topic, partition=partition, offset=offset, node=node)

    def _extra_state(self) -> dict[str, Any]:
        return {"origin": self.origin, "key": self.key, "value": self.value}


class ConfigError(FatalError):
    """A configuration value is missing, unknown or invalid; carries the key name."""

    def __init__(self, message: str | None = None, *, key: str | None = None) -> None:
        self.key = key
        if message is None:
            message = f"Invalid configuration {key!r}" if key else "Invalid configuration"
        super().__init__(message)

    def _extra_state(self) -> dict[str, Any]:
        return {"key": self.key}

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text} (key={self.key})" if self.key else text


class BootstrapResolutionError(FatalError):
    """No name of ``bootstrap.servers`` resolved within ``bootstrap.resolve.timeout.ms``
    (KIP-909, Java's BootstrapResolutionException): the client failed for good; every later
    call raises it again. Close the client and build a new one once DNS or the setting is
    fixed."""


class FatalConsumerError(FatalError):
    """The consumer failed permanently (a supervisor gave up); the message names the cause."""


class ConsumerClosedError(FatalError):
    """The consumer is closed (or closing) and cannot serve the call."""


class IllegalStateError(FatalError):
    """A call that the client's current state does not allow (Java IllegalStateException):
    mixing subscription types, asking the position of an unassigned partition, ..."""


class InvalidArgumentError(FatalError, ValueError):
    """An argument of a call has a value the call does not take (Java
    IllegalArgumentException), such as an unknown ``membership`` of ``close()``; also a
    ``ValueError``."""


class OffsetMapError(FatalError):
    """A commit's metadata carries a parallel consumer's offset map
    (:mod:`kafka_actors.parallel.offset_map`) that cannot be read: truncated, corrupt, of an
    unknown version, for another offset than the one committed, or wider than the bounds a
    decoder accepts. The parallel consumer ignores such a map (it handles the records again:
    at least once) and logs this error; it never allocates from a length it was not able to
    bound. Carries the topic, partition and committed offset when known."""


class PartitionStoppedError(FatalError):
    """A parallel consumer stopped a partition: one of its records failed ``max_attempts``
    times and there is no dead-letter topic, under the ``on_failure="stop"`` policy. The
    partition starts no more records and its committed offset stays before the record
    (``health()`` lists it); the handler's last exception is chained as ``__cause__``."""


class MissingDependencyError(FatalError):
    """A call needs an optional package that is not installed (``pyarrow`` for the columnar
    poll: the ``spark`` or ``arrow`` extra); the message names the package."""


class WakeupError(KafkaError):
    """A blocking call was interrupted by ``wakeup()`` (Java WakeupException)."""


class CommitFailedError(FatalError):
    """The offset commit cannot complete: the member is no longer part of the group, or its
    generation / member epoch moved on (Java CommitFailedException)."""


class NoOffsetForPartitionError(FatalError):
    """No committed offset and no reset policy (auto.offset.reset=none) for these partitions."""

    def __init__(
        self,
        message: str | None = None,
        *,
        partitions: Iterable[tuple[str, int]] = (),
    ) -> None:
        self.partitions = tuple(partitions)
        if message is None:
            listed = ", ".join(f"{t}-{p}" for t, p in self.partitions)
            message = f"Undefined offset with no reset policy for partitions: {listed}"
        first = self.partitions[0] if len(self.partitions) == 1 else (None, None)
        super().__init__(message, topic=first[0], partition=first[1])

    def _extra_state(self) -> dict[str, Any]:
        return {"partitions": self.partitions}

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_no_offset, (self.message, self.partitions), self.__dict__)


def _rebuild_no_offset(message: str, partitions: tuple[tuple[str, int], ...]) -> KafkaError:
    return NoOffsetForPartitionError(message, partitions=partitions)


class LogTruncationError(OffsetOutOfRangeError):
    """The log of these partitions was truncated below the consumer's fetch position (an
    unclean leader election, KIP-320), and no reset policy is set (auto.offset.reset=none), as
    Java's ``LogTruncationException``. ``fetch_offsets`` maps each (topic, partition) to the
    position that was validated; ``divergent_offsets`` to the first offset where the logs
    diverge (the end offset of the position's leader epoch on the new leader), with that
    epoch. Seek (for example to the divergent offset) to go on."""

    def __init__(
        self,
        message: str | None = None,
        *,
        fetch_offsets: Mapping[tuple[str, int], int] | None = None,
        divergent_offsets: Mapping[tuple[str, int], tuple[int, int | None]] | None = None,
    ) -> None:
        self.fetch_offsets = dict(fetch_offsets or {})
        self.divergent_offsets = dict(divergent_offsets or {})
        self.partitions = tuple(sorted(self.fetch_offsets))
        if message is None:
            listed = ", ".join(
                f"{t}-{p} (fetch offset {self.fetch_offsets[(t, p)]}, divergent offset "
                f"{_divergent(self.divergent_offsets, (t, p))})"
                for t, p in self.partitions
            )
            message = f"Truncation detected for partitions: {listed}"
        if len(self.partitions) == 1:
            ((topic, partition),) = self.partitions
            super().__init__(
                message,
                topic=topic,
                partition=partition,
                offset=self.fetch_offsets[(topic, partition)],
            )
        else:
            super().__init__(message)

    def _extra_state(self) -> dict[str, Any]:
        return {"fetch_offsets": self.fetch_offsets, "divergent_offsets": self.divergent_offsets}

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_log_truncation,
            (self.message, self.fetch_offsets, self.divergent_offsets),
            self.__dict__,
        )


def _divergent(
    divergent: Mapping[tuple[str, int], tuple[int, int | None]], tp: tuple[str, int]
) -> str:
    found = divergent.get(tp)
    return "unknown" if found is None else f"{found[0]} (leader epoch {found[1]})"


def _rebuild_log_truncation(
    message: str,
    fetch_offsets: Mapping[tuple[str, int], int],
    divergent_offsets: Mapping[tuple[str, int], tuple[int, int | None]],
) -> KafkaError:
    return LogTruncationError(
        message, fetch_offsets=fetch_offsets, divergent_offsets=divergent_offsets
    )


# -- Code → class ------------------------------------------------------------------------------


def _collect_code_classes() -> dict[int, type[KafkaError]]:
    found: dict[int, type[KafkaError]] = {}
    pending: list[type[KafkaError]] = [KafkaError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        code = cls.__dict__.get("code")
        if isinstance(code, int):
            if code in found and found[code] is not cls:
                raise AssertionError(f"error code {code} mapped twice")
            found[code] = cls
    return found


_CODE_CLASSES: Mapping[int, type[KafkaError]] = _collect_code_classes()


def error_class_for_code(code: int) -> type[KafkaError] | None:
    """The class standing for a Kafka error code, or None when this client does not know it."""
    return _CODE_CLASSES.get(int(code))


def error_for_code(
    code: int,
    message: str | None = None,
    *,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
    node: int | str | None = None,
) -> KafkaError:
    """Build the error for a non-zero Kafka error code, with the context it concerns.

    ``message`` (for instance a response's ``error_message``) replaces the default text.
    Raises ValueError for code 0 (NONE): that is not an error.
    """
    code = int(code)
    if code == 0:
        raise ValueError("error code 0 (NONE) is not an error")
    cls = _CODE_CLASSES.get(code)
    if cls is None:
        return UnknownErrorCodeError(
            message, code=code, topic=topic, partition=partition, offset=offset, node=node
        )
    return cls(message, topic=topic, partition=partition, offset=offset, node=node)


def raise_for_code(
    code: int,
    message: str | None = None,
    *,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
    node: int | str | None = None,
) -> None:
    """Raise the error for ``code`` with its context; do nothing when ``code`` is 0."""
    if int(code) != 0:
        _raise(
            error_for_code(
                code, message, topic=topic, partition=partition, offset=offset, node=node
            )
        )


def _raise(error: KafkaError) -> NoReturn:
    raise error


class CallTimeout:
    """Names what a blocking call waited for in its KafkaTimeoutError (issue 10).

    Used as ``with CallTimeout(...):`` around the call's wait: a KafkaTimeoutError escaping
    (the facade's own at the deadline, or the request manager's) is raised again as::

        position(orders-0) timed out after 60000 ms (default.api.timeout.ms) waiting for
        the offset reset of orders-0 (ListOffsets to node 1): <the manager's detail>

    ``waiting_for`` is called only then, so it describes the state at the timeout (which
    coordinator, which leader). The new error keeps the cause's topic/partition/node and
    chains it as ``__cause__``.
    """

    __slots__ = ("call", "source", "timeout_ms", "waiting_for")

    def __init__(
        self,
        call: str,
        timeout: float | None,
        default_ms: int,
        waiting_for: Callable[[], str],
        *,
        key: str = "default.api.timeout.ms",
    ) -> None:
        self.call = call
        if timeout is None:
            self.timeout_ms, self.source = int(default_ms), key
        else:
            self.timeout_ms, self.source = round(max(0.0, float(timeout)) * 1000), "timeout"
        self.waiting_for = waiting_for

    def error(self, cause: KafkaTimeoutError | None = None) -> KafkaTimeoutError:
        try:
            what = self.waiting_for()
        except Exception as exc:  # a description must never hide the timeout
            what = f"an answer (state unavailable: {exc!r})"
        message = (
            f"{self.call} timed out after {self.timeout_ms} ms ({self.source}) waiting for {what}"
        )
        if cause is not None and cause.message and not cause.message.endswith(" timed out"):
            message += f": {cause.message}"
        error = KafkaTimeoutError(
            message,
            topic=None if cause is None else cause.topic,
            partition=None if cause is None else cause.partition,
            node=None if cause is None else cause.node,
        )
        error.__cause__ = cause
        error._named_call = True  # type: ignore[attr-defined]
        return error

    def __enter__(self) -> CallTimeout:
        return self

    def __exit__(self, _type: Any, exc: BaseException | None, _tb: Any) -> None:
        if isinstance(exc, KafkaTimeoutError) and not getattr(exc, "_named_call", False):
            raise self.error(exc) from exc
