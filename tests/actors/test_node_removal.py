"""Brokers left out of a newer Metadata response stop being connection candidates.

Java's ``Metadata`` builds the node set from the latest response only. The NetworkActor's
node registry does the same: a node an earlier response named and a newer one leaves out is
retired (requests for any node queued on it are routed again, requests for it fail at once
with a retriable error, a new request for it too), kept only until its in-flight requests are
answered or failed, then forgotten and its connection closed. Pure tests on an actor object
that is never started (no sockets: connections are driven to ready with a fake broker).
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_actors.actors.network import (
    ANY_NODE,
    NetworkActor,
    RequestFailed,
    Response,
    Send,
)
from kafka_actors.clock import ManualClock
from kafka_actors.errors import DisconnectedError
from kafka_actors.protocol import requests as rq
from kafka_actors.protocol.coordinator import coordinator_connection_id
from tests.actors.network_helpers import network_config
from tests.actors.test_connection import FakeBroker, connect_ready, metadata_response

Reply = Response | RequestFailed


@pytest.fixture
def net() -> Iterator[NetworkActor]:
    actor = NetworkActor(
        network_config("boot.invalid:9092"), clock=ManualClock(100.0), random=lambda: 0.5
    )
    try:
        yield actor
    finally:
        actor._shutdown_io(None)
        actor._inbox.close()


def brokers(*ids: int) -> Any:
    """A Metadata response naming the brokers ``ids`` (only ``brokers`` is read)."""
    return SimpleNamespace(
        brokers=[SimpleNamespace(node_id=i, host=f"broker-{i}.invalid", port=9092) for i in ids]
    )


def real_nodes(net: NetworkActor) -> set[int]:
    return {i for i in net._nodes if i >= 0}


def send(net: NetworkActor, replies: list[Reply], node: int = ANY_NODE) -> None:
    net._accept(Send(rq.metadata_request(12, topics=None), node=node, reply_to=replies.append))


def test_a_node_left_out_of_a_newer_response_is_forgotten(net: NetworkActor) -> None:
    net._learn(brokers(1, 2))
    assert real_nodes(net) == {1, 2}
    net._learn(brokers(2, 3))
    assert real_nodes(net) == {2, 3}
    assert [(e.node, e.kind) for e in net._events] == [(1, "removed")]
    # a request for it fails at once with a retriable error (it does not wait for node 1)
    replies: list[Reply] = []
    send(net, replies, node=1)
    [failed] = replies
    assert isinstance(failed, RequestFailed) and failed.node == 1
    assert isinstance(failed.error, DisconnectedError) and failed.error.retriable
    assert "not in the latest Metadata" in str(failed.error)


def test_an_empty_broker_list_changes_nothing(net: NetworkActor) -> None:
    net._learn(brokers(1, 2))
    net._learn(SimpleNamespace(brokers=[]))
    assert real_nodes(net) == {1, 2}


def test_a_node_named_again_is_used_again(net: NetworkActor) -> None:
    net._learn(brokers(1))
    net._learn(brokers(2))
    net._learn(brokers(1, 2))
    assert real_nodes(net) == {1, 2}
    replies: list[Reply] = []
    send(net, replies, node=1)
    assert replies == [] and net._nodes[1].conn.queued_count == 1


def test_nodes_told_with_update_nodes_are_not_metadata_nodes(net: NetworkActor) -> None:
    """A coordinator connection (its own node id, never in a Metadata response) stays."""
    from kafka_actors.config import BrokerAddress

    coordinator = coordinator_connection_id(1)
    net._set_address(coordinator, BrokerAddress("broker-1.invalid", 9092))
    net._learn(brokers(1))
    net._learn(brokers(2))
    assert real_nodes(net) == {2, coordinator}


def test_in_flight_requests_of_a_removed_node_are_still_answered(net: NetworkActor) -> None:
    net._learn(brokers(1, 2))
    clock = net._clock
    assert isinstance(clock, ManualClock)
    old, new = net._nodes[1], net._nodes[2]
    broker = FakeBroker()
    connect_ready(old.conn, clock, broker)
    in_flight: list[Reply] = []
    send(net, in_flight, node=1)
    out, _ = old.conn.flush(clock.monotonic())
    [(header, _body)] = broker.take(out)
    queued_for_1: list[Reply] = []
    queued_for_any: list[Reply] = []
    send(net, queued_for_1, node=1)
    send(net, queued_for_any)
    net._route(clock.monotonic())  # node 1 is the only ready node: both queue there
    assert old.conn.queued_count == 2
    connect_ready(new.conn, clock, FakeBroker())

    net._learn(brokers(2))
    # queued for node 1: failed (retriable); queued for any node: routed again
    [failed] = queued_for_1
    assert isinstance(failed, RequestFailed) and failed.error.retriable
    assert queued_for_any == [] and list(net._unassigned) != []
    net._route(clock.monotonic())
    assert new.conn.queued_count == 1 and old.conn.queued_count == 0
    # node 1 is kept for its in-flight request, but no longer a candidate
    assert 1 in net._nodes and old.retired
    _, events = old.conn.receive(broker.answer(metadata_response(), header.correlation_id), 0.0)
    net._handle(old, events)
    [answered] = in_flight
    assert isinstance(answered, Response) and answered.node == 1
    net._pump(clock.monotonic())
    assert 1 not in net._nodes


def test_a_removed_node_that_disconnects_fails_its_in_flight_retriably(
    net: NetworkActor,
) -> None:
    net._learn(brokers(1, 2))
    clock = net._clock
    assert isinstance(clock, ManualClock)
    old = net._nodes[1]
    broker = FakeBroker()
    connect_ready(old.conn, clock, broker)
    in_flight: list[Reply] = []
    send(net, in_flight, node=1)
    out, _ = old.conn.flush(clock.monotonic())
    assert len(broker.take(out)) == 1
    net._learn(brokers(2))
    assert 1 in net._nodes
    net._close_node(old, DisconnectedError("Connection closed by the broker"))
    [failed] = in_flight
    assert isinstance(failed, RequestFailed) and failed.error.retriable
    clock.advance(60.0)  # past any reconnect backoff: node 1 is still never connected again
    net._pump(clock.monotonic())
    assert 1 not in net._nodes
    assert [e.kind for e in net._events if e.node == 1].count("connect") == 0
