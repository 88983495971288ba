"""Brokers left out of a newer Metadata response stop being connection candidates.

Java's ``Metadata`` builds the node set from the latest response only. The NetworkActor's
node registry does the same: a node an earlier response named and a newer one leaves out is
retired (requests for any node queued on it are routed again, requests for it fail at once
with a retriable error, a new request for it too), kept only until its in-flight requests are
answered or failed, then forgotten and its connection closed. Pure tests on an actor object
that is never started (no sockets: connections are driven to ready with a fake broker).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_actors.actors.network import (
    ANY_NODE,
    GetNodeStates,
    NetworkActor,
    RequestFailed,
    Response,
    Send,
    bootstrap_node_id,
)
from kafka_actors.clock import ManualClock
from kafka_actors.errors import DisconnectedError, KafkaError
from kafka_actors.protocol.group.coordinator import coordinator_connection_id
from kafka_actors.protocol.wire import requests as rq
from kafka_actors.supervisors import FaultInjector
from kafka_actors.testing import KafkaBroker, KafkaCluster
from tests.actors.network_helpers import events, metadata, network_config, send
from tests.actors.network_proxy import TcpProxy
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


def queue(net: NetworkActor, replies: list[Reply], node: int = ANY_NODE) -> None:
    net._accept(Send(rq.metadata_request(12, topics=None), node=node, reply_to=replies.append))


def test_a_node_left_out_of_a_newer_response_is_forgotten(net: NetworkActor) -> None:
    net._learn(brokers(1, 2))
    assert real_nodes(net) == {1, 2}
    net._learn(brokers(2, 3))
    assert real_nodes(net) == {2, 3}
    assert [(e.node, e.kind) for e in net._events] == [(1, "removed")]
    # a request for it fails at once with a retriable error (it does not wait for node 1)
    replies: list[Reply] = []
    queue(net, replies, node=1)
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
    queue(net, replies, node=1)
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
    queue(net, in_flight, node=1)
    out, _ = old.conn.flush(clock.monotonic())
    [(header, _body)] = broker.take(out)
    queued_for_1: list[Reply] = []
    queued_for_any: list[Reply] = []
    queue(net, queued_for_1, node=1)
    queue(net, queued_for_any)
    net._route(clock.monotonic())  # node 1 is the only ready node: both queue there
    assert old.conn.queued_count == 2
    connect_ready(new.conn, clock, FakeBroker())

    net._learn(brokers(2))
    # queued for node 1: failed (retriable); queued for any node: routed again
    [failed] = queued_for_1
    assert isinstance(failed, RequestFailed) and failed.error.retriable
    assert queued_for_any == [] and list(net._unsent.any_pending()) != []
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
    queue(net, in_flight, node=1)
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


# -- against real brokers ----------------------------------------------------------------------


def _metadata_until(ref: Any, wanted: Callable[[Response], bool], timeout: float = 60) -> Response:
    """Metadata for any node, again (a request may meet a connection that just broke) until
    an answer satisfies ``wanted``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            reply = metadata(ref)
            if wanted(reply):
                return reply
        except KafkaError:
            pass
        assert time.monotonic() < deadline, "no wanted Metadata answer in time"
        time.sleep(0.2)


@pytest.mark.broker
def test_the_old_cluster_s_broker_is_never_tried_again_after_a_move(start_network: Any) -> None:
    """The bootstrap address (a TCP forwarder) moves to a new cluster whose only broker is
    node 7; the old cluster's node 1 stops for good. Once a Metadata answer from the new
    cluster came, node 1 is gone from the node registry and no connection to it is attempted
    any more, also while the connections to node 7 and to the bootstrap address keep breaking
    (before: node 1, first in the candidates and out of backoff, was tried at each such
    round, forever)."""
    with KafkaBroker() as old, TcpProxy("127.0.0.1", (old.node.host, old.node.port)) as proxy:
        faults = FaultInjector()
        config = network_config(
            proxy.address, **{"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200}
        )
        ref = start_network(config, faults=faults)
        assert [int(b.node_id) for b in metadata(ref).response.brokers] == [1]
        assert metadata(ref, node=1).node == 1  # a connection to node 1 itself
        with KafkaBroker(first_node_id=7) as new:
            proxy.target = (new.node.host, new.node.port)
            old.stop()
            _metadata_until(ref, lambda r: [int(b.node_id) for b in r.response.brokers] == [7])
            assert 1 not in ref.ask(GetNodeStates(), timeout=10)
            assert "removed" in [e.kind for e in events(ref, node=1)]
            attempts = [e.kind for e in events(ref, node=1)].count("connect")
            for _ in range(5):
                assert metadata(ref, node=7).node == 7
                # no ready node: the next request must connect somewhere
                faults.sever(7)
                faults.sever(bootstrap_node_id(0))
                time.sleep(0.3)  # past node 1's reconnect backoff (at most 0.2 s)
                _metadata_until(ref, lambda r: True)
            assert [e.kind for e in events(ref, node=1)].count("connect") == attempts
            assert 1 not in ref.ask(GetNodeStates(), timeout=10)
            # a request naming node 1 is answered at once, with a retriable error
            failed = send(ref, rq.metadata_request(12, topics=None), node=1).get(timeout=10)
            assert isinstance(failed, RequestFailed) and failed.error.retriable


@pytest.mark.broker
def test_a_broker_stopped_for_good_leaves_the_candidates(
    kafka_cluster: KafkaCluster, start_network: Any
) -> None:
    """A broker of a 3-broker cluster stops (controlled shutdown) and stays down: the 4.4
    controller fences it, and fenced brokers are left out of Metadata answers. Once an
    answer leaves it out, no connection to it is attempted any more, also when every other
    connection breaks at once (before: it was the one node out of backoff, so tried)."""
    faults = FaultInjector()
    config = network_config(
        kafka_cluster.bootstrap_servers.split(",")[0],
        **{"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200},
    )
    ref = start_network(config, faults=faults)
    live = [node.node_id for node in kafka_cluster.brokers]
    assert sorted(int(b.node_id) for b in metadata(ref).response.brokers) == sorted(live)
    gone = live.pop()
    assert metadata(ref, node=gone).node == gone
    kafka_cluster.stop_broker(len(live))
    _metadata_until(ref, lambda r: sorted(int(b.node_id) for b in r.response.brokers) == live)
    assert gone not in ref.ask(GetNodeStates(), timeout=10)
    attempts = [e.kind for e in events(ref, node=gone)].count("connect")
    for _ in range(5):
        for node in live:
            assert metadata(ref, node=node).node == node
        time.sleep(0.3)  # past the stopped broker's reconnect backoff (at most 0.2 s)
        for node in [*live, bootstrap_node_id(0)]:
            faults.sever(node)
        _metadata_until(ref, lambda r: True)
    assert [e.kind for e in events(ref, node=gone)].count("connect") == attempts
