"""The bridge's protocol errors, without a broker (simpleSystemBase)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.thespian import (
    Close,
    Closed,
    Commit,
    CommitFailed,
    Configure,
    Configured,
    KafkaBridge,
    Request,
    StreamError,
    Subscribe,
)


@pytest.fixture
def simple_system() -> Iterator[Any]:
    from thespian.actors import ActorSystem

    asys = ActorSystem("simpleSystemBase", transientUnique=True)
    try:
        yield asys
    finally:
        asys.shutdown()


def test_calls_before_configure_fail_with_typed_replies(simple_system: Any) -> None:
    bridge = simple_system.createActor(KafkaBridge)
    failed = simple_system.ask(bridge, Commit(1, {TopicPartition("t", 0): 1}), 10)
    assert isinstance(failed, CommitFailed) and failed.request_id == 1
    assert failed.error.type == "IllegalStateError"
    error = simple_system.ask(bridge, Subscribe(("t",), bridge), 10)
    assert isinstance(error, StreamError) and error.error.type == "IllegalStateError"
    assert isinstance(simple_system.ask(bridge, Close(), 10), Closed)


def test_request_from_a_stranger_and_second_configure_are_refused(simple_system: Any) -> None:
    bridge = simple_system.createActor(KafkaBridge)
    # An unreachable bootstrap server: creating the consumer does not connect.
    config = {"bootstrap.servers": "127.0.0.1:9", "group.id": "g"}
    assert isinstance(simple_system.ask(bridge, Configure(config), 10), Configured)
    again = simple_system.ask(bridge, Configure(config), 10)
    assert isinstance(again, StreamError) and "already" in again.error.message
    stranger = simple_system.ask(bridge, Request(10), 10)
    assert isinstance(stranger, StreamError)
    assert isinstance(simple_system.ask(bridge, Close(2.0), 30), Closed)
