"""Request managers treat a CorruptResponseError (an undecodable answer, issue 10 bug 1) as the
retriable disconnect it is: retry after their backoff, no error event to the user.

The end-to-end cases of every API are in test_faults.py (short run); these pin the pure cores.
"""

from __future__ import annotations

from kafka_actors.errors import CorruptResponseError
from kafka_actors.protocol.group.coordinator import CoordinatorErrorEvent
from kafka_actors.protocol.metadata import MetadataErrorEvent
from tests.managers.harness import events_of, only_request
from tests.managers.test_coordinator import manager as coordinator_manager
from tests.managers.test_metadata import manager as metadata_manager


def _corrupt(api: str) -> CorruptResponseError:
    return CorruptResponseError(f"Cannot decode the {api} response", api=api, node=1)


def test_metadata_retries_a_corrupt_answer_with_backoff() -> None:
    m = metadata_manager(retry_backoff_ms=100, retry_backoff_max_ms=1_000)
    m.set_subscription(["orders"])
    now = 0
    waits = []
    for _ in range(6):
        request = only_request(m.poll(now))
        m.on_failure(request.request_id, _corrupt("Metadata"), now)
        result = m.poll(now)
        assert events_of(result, MetadataErrorEvent) == []
        wait = m.time_to_next_update(now)
        waits.append(wait)
        now += wait
    assert m.failed_attempts == 6
    assert waits[0] >= 80 and waits[-1] > waits[0]  # exponential, not a busy loop
    only_request(m.poll(now))  # and it asks again


def test_coordinator_lookup_retries_a_corrupt_answer_with_backoff() -> None:
    m = coordinator_manager()
    request = only_request(m.poll(0))
    m.on_failure(request.request_id, _corrupt("FindCoordinator"), 0)
    result = m.poll(0)
    assert result.requests == () and events_of(result, CoordinatorErrorEvent) == []
    assert m.failed_attempts == 1
    wait = result.time_until_next_poll_ms
    assert wait is not None and wait > 0
    only_request(m.poll(wait))
