"""CoordinatorManager: deterministic tests with fabricated FindCoordinator responses."""

from __future__ import annotations

import pytest

from kafka_actors.errors import (
    DisconnectedError,
    GroupAuthorizationFailedError,
    KafkaTimeoutError,
    UnsupportedVersionError,
)
from kafka_actors.protocol.group.coordinator import (
    CoordinatorChanged,
    CoordinatorConfig,
    CoordinatorErrorEvent,
    CoordinatorManager,
    coordinator_connection_id,
)
from kafka_actors.protocol.messages import ANY_NODE
from kafka_actors.protocol.wire.versions import NegotiatedVersions
from tests.managers.harness import (
    events_of,
    find_coordinator_response,
    only_request,
    seeded_random,
    versions,
)

GROUP = "group-a"
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
GROUP_AUTHORIZATION_FAILED = 30


def manager(version: int = 6, seed: int = 7) -> CoordinatorManager:
    return CoordinatorManager(
        CoordinatorConfig(group_id=GROUP, retry_backoff_ms=100, retry_backoff_max_ms=1_000),
        versions(find_coordinator=version),
        random=seeded_random(seed),
    )


def discover(m: CoordinatorManager, now: int, version: int = 6) -> CoordinatorChanged:
    request = only_request(m.poll(now))
    m.on_response(request.request_id, find_coordinator_response(version), now)
    (event,) = events_of(m.poll(now), CoordinatorChanged)
    assert isinstance(event, CoordinatorChanged)
    return event


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 5, 6])
def test_request_shape_and_discovery_per_version(version: int) -> None:
    m = manager(version)
    result = m.poll(0)
    request = only_request(result)
    assert request.node == ANY_NODE
    assert request.request.__version__ == version
    if version >= 4:
        assert request.request.coordinator_keys == (GROUP,)
        assert request.request.key_type == 0
    else:
        assert request.request.key == GROUP
        if version >= 1:
            assert request.request.key_type == 0
    m.on_response(request.request_id, find_coordinator_response(version), 3)
    (event,) = events_of(m.poll(3), CoordinatorChanged)
    assert event == CoordinatorChanged(2, "b2.local", 9093, reason="discovered")
    assert event.known and event.connection_id == coordinator_connection_id(2) == 2**31 - 3
    assert m.coordinator is not None and m.coordinator.node_id == 2
    # Known: nothing more to send, no timer needed.
    later = m.poll(60_000)
    assert later.requests == () and later.time_until_next_poll_ms is None


def test_never_two_find_coordinator_in_flight() -> None:
    m = manager()
    only_request(m.poll(0))
    assert m.poll(1).requests == ()
    assert m.poll(100_000).requests == ()
    assert m.request_in_flight


@pytest.mark.parametrize(
    "code", [COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS]
)
@pytest.mark.parametrize("version", [3, 6])
def test_retriable_errors_back_off_then_retry(code: int, version: int) -> None:
    m = manager(version)
    now = 0
    for attempt in range(5):
        request = only_request(m.poll(now))
        m.on_response(request.request_id, find_coordinator_response(version, error=code), now)
        result = m.poll(now)
        assert result.requests == ()
        assert result.events == ()  # retriable: nobody needs to hear about it
        wait = result.time_until_next_poll_ms
        assert wait is not None
        base = min(100 * 2**attempt, 1_000)
        assert min(0.8 * base, 1_000) <= wait <= min(1.2 * base, 1_000)
        assert m.poll(now + wait - 1).requests == ()
        now += wait
    assert discover(m, now, version).node_id == 2
    assert m.failed_attempts == 0


def test_group_authorization_failed_is_a_fatal_error_event() -> None:
    m = manager()
    request = only_request(m.poll(0))
    m.on_response(
        request.request_id, find_coordinator_response(6, error=GROUP_AUTHORIZATION_FAILED), 0
    )
    result = m.poll(0)
    (event,) = events_of(result, CoordinatorErrorEvent)
    assert isinstance(event.error, GroupAuthorizationFailedError)
    assert GROUP in str(event.error)
    assert m.last_error is event.error
    # Discovery goes on after the backoff (ACLs may change), as Java.
    wait = result.time_until_next_poll_ms
    assert wait is not None and 80 <= wait <= 120
    assert discover(m, wait).node_id == 2
    assert m.last_error is None


def test_mark_unknown_publishes_loss_and_rediscovers_after_backoff() -> None:
    m = manager()
    assert discover(m, 1_000).node_id == 2
    m.mark_coordinator_unknown("NOT_COORDINATOR from heartbeat", 1_010)
    result = m.poll(1_010)
    (lost,) = events_of(result, CoordinatorChanged)
    assert lost.node_id is None and not lost.known and "NOT_COORDINATOR" in lost.reason
    assert m.coordinator is None
    assert m.time_marked_unknown_ms() == 1_010
    # Rediscovery waits retry.backoff.ms (with jitter) after the last response.
    assert result.requests == ()
    wait = result.time_until_next_poll_ms
    assert wait is not None and 1_000 + 80 <= 1_010 + wait <= 1_000 + 120
    request = only_request(m.poll(1_010 + wait))
    m.on_response(
        request.request_id, find_coordinator_response(6, node_id=1, host="b1", port=1), 1_200
    )
    (found,) = events_of(m.poll(1_200), CoordinatorChanged)
    assert (found.node_id, found.host, found.port) == (1, "b1", 1)


def test_mark_unknown_when_unknown_or_in_flight_does_not_double_send() -> None:
    m = manager()
    only_request(m.poll(0))
    m.mark_coordinator_unknown("disconnect", 5)  # unknown already: ignored
    result = m.poll(5)
    assert result.requests == () and result.events == ()


def test_connection_failure_retries_with_backoff() -> None:
    m = manager()
    request = only_request(m.poll(0))
    m.on_failure(request.request_id, DisconnectedError("closed", node=1), 0)
    result = m.poll(0)
    assert result.requests == () and result.events == ()
    assert result.time_until_next_poll_ms is not None
    request = only_request(m.poll(result.time_until_next_poll_ms))
    m.on_failure(request.request_id, KafkaTimeoutError("request timed out"), 500)
    assert m.failed_attempts == 2
    assert 160 <= (m.poll(500).time_until_next_poll_ms or 0) <= 240


def test_non_retriable_failure_is_reported() -> None:
    m = manager()
    request = only_request(m.poll(0))
    m.on_failure(request.request_id, UnsupportedVersionError("FindCoordinator"), 0)
    (event,) = events_of(m.poll(0), CoordinatorErrorEvent)
    assert isinstance(event.error, UnsupportedVersionError)


def test_v4_response_without_our_key_is_an_error() -> None:
    m = manager(4)
    request = only_request(m.poll(0))
    m.on_response(request.request_id, find_coordinator_response(4, key="other-group"), 0)
    result = m.poll(0)
    assert len(events_of(result, CoordinatorErrorEvent)) == 1
    assert m.coordinator is None


def test_unknown_request_id_is_ignored() -> None:
    m = manager()
    request = only_request(m.poll(0))
    m.on_response(request.request_id + 1, find_coordinator_response(6), 0)
    assert m.coordinator is None and m.request_in_flight


def test_no_common_version_is_reported_not_raised() -> None:
    m = CoordinatorManager(
        CoordinatorConfig(group_id=GROUP),
        NegotiatedVersions(broker={}),
        random=seeded_random(),
    )
    result = m.poll(0)
    assert result.requests == ()
    (event,) = events_of(result, CoordinatorErrorEvent)
    assert isinstance(event.error, UnsupportedVersionError)
    assert result.time_until_next_poll_ms is not None and result.time_until_next_poll_ms > 0
