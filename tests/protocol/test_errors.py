"""Error hierarchy: every Kafka error code maps to its own class with Java's retriability."""

from __future__ import annotations

import pickle

import pytest
from kio.schema.errors import ErrorCode

from kafka_actors import errors
from kafka_actors.errors import (
    CorruptRecordError,
    FatalError,
    KafkaError,
    RetriableError,
    error_class_for_code,
    error_for_code,
    raise_for_code,
)

ALL_CODES = [code for code in ErrorCode if code != ErrorCode.none]


@pytest.mark.parametrize("code", ALL_CODES, ids=lambda c: c.name)
def test_every_kio_error_code_has_its_own_class(code: ErrorCode) -> None:
    cls = error_class_for_code(int(code))
    assert cls is not None, f"no class for {code.name}"
    assert cls.code == int(code)
    error = error_for_code(int(code), topic="t", partition=3, offset=7, node=1)
    assert type(error) is cls
    assert error.code == int(code)
    assert error.retriable is code.retriable, code.name
    assert isinstance(error, RetriableError if code.retriable else FatalError)
    text = str(error)
    assert f"error code {int(code)}" in text
    assert "topic=t" in text and "partition=3" in text and "offset=7" in text
    assert "node=1" in text


def test_class_names_follow_kafka_names() -> None:
    for code in ALL_CODES:
        cls = error_class_for_code(int(code))
        assert cls is not None
        assert cls.__name__.endswith("Error")
        assert getattr(errors, cls.__name__) is cls


def test_families() -> None:
    assert isinstance(error_for_code(6), errors.InvalidMetadataError)
    assert isinstance(error_for_code(3), errors.InvalidMetadataError)
    assert isinstance(error_for_code(74), errors.InvalidMetadataError)
    for code in (14, 15, 16):
        assert isinstance(error_for_code(code), errors.CoordinatorError)
    for code in (22, 25, 27, 110, 111, 82):
        assert isinstance(error_for_code(code), errors.GroupError)
        assert not error_for_code(code).retriable
    assert isinstance(error_for_code(30), errors.AuthorizationError)
    assert isinstance(error_for_code(58), errors.AuthenticationError)
    assert isinstance(error_for_code(7), errors.KafkaTimeoutError)
    assert isinstance(error_for_code(70), errors.FetchSessionError)
    assert isinstance(error_for_code(1), errors.OffsetError)


def test_unknown_code_is_fatal_and_keeps_its_code() -> None:
    error = error_for_code(4242, topic="x")
    assert isinstance(error, errors.UnknownErrorCodeError)
    assert error.code == 4242
    assert not error.retriable
    assert "4242" in str(error)


def test_raise_for_code() -> None:
    raise_for_code(0)
    with pytest.raises(errors.NotCoordinatorError) as info:
        raise_for_code(16, "moved", node=3)
    assert info.value.node == 3
    assert info.value.message == "moved"
    with pytest.raises(ValueError):
        error_for_code(0)


def test_client_side_errors() -> None:
    corrupt = CorruptRecordError(topic="t", partition=0, offset=12)
    assert not corrupt.retriable and corrupt.code is None
    assert "offset=12" in str(corrupt)
    assert errors.KafkaTimeoutError().retriable
    assert errors.DisconnectedError(node=2).retriable
    assert errors.DisconnectedError(node=2).node == 2
    assert not errors.AuthenticationError().retriable
    assert not errors.ProtocolError().retriable
    config = errors.ConfigError("bad value", key="fetch.max.bytes")
    assert config.key == "fetch.max.bytes" and "fetch.max.bytes" in str(config)
    too_large = errors.FrameTooLargeError(10, 5)
    assert isinstance(too_large, errors.ProtocolError)
    assert (too_large.size, too_large.max_size) == (10, 5)
    no_offset = errors.NoOffsetForPartitionError(partitions=[("a", 1), ("b", 2)])
    assert no_offset.partitions == (("a", 1), ("b", 2)) and "a-1" in str(no_offset)
    assert issubclass(errors.TruncatedFrameError, errors.InvalidFrameError)
    assert issubclass(errors.CorrelationIdMismatchError, errors.ProtocolError)


@pytest.mark.parametrize(
    "error",
    [
        error_for_code(6, topic="t", partition=1, node=2),
        error_for_code(999, node=5),
        CorruptRecordError(topic="t", partition=0, offset=3),
        errors.ConfigError(key="group.id"),
        errors.FrameTooLargeError(100, 10, node=1),
        errors.CorrelationIdMismatchError(expected=1, received=2),
        errors.NoOffsetForPartitionError(partitions=[("a", 0)]),
        errors.UnsupportedVersionError("Fetch: client v4..v17, broker v0..v3"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_pickle_with_their_context(error: KafkaError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert copy.context == error.context
    assert copy.code == error.code
