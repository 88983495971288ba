"""The NetworkActor against real brokers (Kafka 4.x, the librdkafka mock cluster): requests and
replies, node discovery, IPv6 and DNS bootstrap, severed connections, timeouts, fault injection
at the network level, idle wake-ups."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pykka
import pytest

from kafka_actors.actors.network import (
    BOOTSTRAP_NODE,
    GetNodeStates,
    RequestFailed,
    Response,
    bootstrap_node_id,
)
from kafka_actors.actors.network import (
    request as call,
)
from kafka_actors.errors import (
    DisconnectedError,
    KafkaError,
    KafkaTimeoutError,
    UnknownTopicOrPartitionError,
)
from kafka_actors.protocol.wire import requests as rq
from kafka_actors.protocol.wire.apis import ApiKey
from kafka_actors.protocol.wire.versions import api_versions_request
from kafka_actors.supervisors import FaultInjector
from tests.actors.network_helpers import (
    events,
    long_fetch,
    metadata,
    network_config,
    send,
    topic_leader,
)
from tests.actors.network_proxy import TcpProxy

StartNetwork = Callable[..., pykka.ActorRef[Any]]


# -- basic requests ----------------------------------------------------------------------------


@pytest.mark.broker
@pytest.mark.parametrize("fixture", ["kafka_broker", "kafka_broker_39"])
def test_api_versions_and_metadata(
    fixture: str, request: pytest.FixtureRequest, start_network: StartNetwork
) -> None:
    kafka_broker = request.getfixturevalue(fixture)
    ref = start_network(network_config(kafka_broker.bootstrap_servers))
    reply = call(ref, api_versions_request(3), timeout=30)
    versions = {
        int(k.api_key): (int(k.min_version), int(k.max_version)) for k in reply.response.api_keys
    }
    assert versions[ApiKey.FETCH][1] >= 17 and ApiKey.METADATA in versions
    assert reply.node == bootstrap_node_id(0)  # no real node known yet
    meta = metadata(ref)
    [broker] = meta.response.brokers
    # The actor learned the node from the Metadata response: a request to it now works.
    direct = metadata(ref, node=int(broker.node_id))
    assert direct.node == int(broker.node_id)
    assert direct.correlation_id >= 1  # ApiVersions handshake took id 0
    states: dict[int, tuple[str, str]] = ref.ask(GetNodeStates(), timeout=10)  # type: ignore[assignment]
    assert states[int(broker.node_id)][0] == "ready"
    # ANY_NODE prefers real (learned) nodes once one is ready.
    assert metadata(ref).node == int(broker.node_id)


@pytest.mark.mock
def test_metadata_through_mock_cluster(mock_cluster: Any, start_network: StartNetwork) -> None:
    ref = start_network(network_config(mock_cluster.bootstrap_servers))
    meta = metadata(ref, node=BOOTSTRAP_NODE)
    assert len(meta.response.brokers) == 3
    for broker in meta.response.brokers:
        assert metadata(ref, node=int(broker.node_id)).node == int(broker.node_id)


@pytest.mark.broker
def test_ipv6_loopback_bootstrap(kafka_broker: Any, start_network: StartNetwork) -> None:
    host, port = kafka_broker.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with TcpProxy("::1", (host, int(port))) as proxy:
        ref = start_network(network_config(proxy.address))
        meta = metadata(ref, node=BOOTSTRAP_NODE)
        assert meta.node == bootstrap_node_id(0) and meta.response.brokers
        assert proxy.accepted == 1


@pytest.mark.broker
def test_localhost_bootstrap(kafka_broker: Any, start_network: StartNetwork) -> None:
    port = kafka_broker.bootstrap_servers.split(",")[0].rsplit(":", 1)[1]
    ref = start_network(network_config(f"localhost:{port}"))
    assert metadata(ref, node=BOOTSTRAP_NODE).response.brokers


@pytest.mark.broker
def test_bootstrap_servers_tried_in_turn(kafka_broker: Any, start_network: StartNetwork) -> None:
    import socket

    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    dead_port = dead.getsockname()[1]
    try:
        config = network_config(
            f"127.0.0.1:{dead_port},{kafka_broker.bootstrap_servers}",
            **{"reconnect.backoff.ms": 50},
        )
        ref = start_network(config)
        reply = metadata(ref)
        assert reply.node == bootstrap_node_id(1)
        kinds = [(e.node, e.kind) for e in events(ref)]
        assert kinds[:2] == [
            (bootstrap_node_id(0), "connect"),
            (bootstrap_node_id(0), "connect_failed"),
        ]
        assert (bootstrap_node_id(1), "ready") in kinds
    finally:
        dead.close()


# -- lost connections and timeouts ---------------------------------------------------------------


@pytest.mark.broker
def test_fault_sever_fails_in_flight_fetch_then_reconnects(
    kafka_broker: Any, kafka_topic: Any, start_network: StartNetwork
) -> None:
    faults = FaultInjector()
    ref = start_network(network_config(kafka_broker.bootstrap_servers), faults=faults)
    topic = kafka_topic(kafka_broker)
    topic_id, leader = topic_leader(ref, topic)
    metadata(ref, node=leader)  # connection to the leader is ready
    pending = send(ref, long_fetch(topic, topic_id), node=leader, timeout_ms=30_000)
    time.sleep(0.3)  # the Fetch is parked in the broker's purgatory (max_wait 5 s)
    faults.sever(leader)
    ref.ask(GetNodeStates(), timeout=10)  # any message wakes the actor: the sever applies
    reply = pending.get(timeout=10)
    assert isinstance(reply, RequestFailed)
    assert isinstance(reply.error, DisconnectedError) and reply.error.retriable
    assert reply.error.node == leader and f"node {leader}" in str(reply.error)
    assert reply.api_key == ApiKey.FETCH
    again = metadata(ref, node=leader)
    assert again.node == leader
    kinds = [e.kind for e in events(ref, leader)]
    assert kinds == ["connect", "ready", "disconnected", "connect", "ready"]


@pytest.mark.broker
def test_socket_closed_under_in_flight_fetch(
    kafka_broker: Any, kafka_topic: Any, start_network: StartNetwork
) -> None:
    host, port = kafka_broker.bootstrap_servers.split(",")[0].rsplit(":", 1)
    topic = kafka_topic(kafka_broker)
    with TcpProxy("127.0.0.1", (host, int(port))) as proxy:
        ref = start_network(network_config(proxy.address, **{"reconnect.backoff.ms": 20}))
        topic_id, _leader = topic_leader(ref, topic)
        boot = bootstrap_node_id(0)
        metadata(ref, node=boot)
        pending = send(ref, long_fetch(topic, topic_id), node=boot, timeout_ms=30_000)
        time.sleep(0.3)
        proxy.cut()  # the broker side of the socket goes away with the Fetch in flight
        reply = pending.get(timeout=10)
        assert isinstance(reply, RequestFailed) and isinstance(reply.error, DisconnectedError)
        assert reply.error.retriable and reply.error.node == boot
        assert metadata(ref, node=boot).node == boot
        assert proxy.accepted == 2


@pytest.mark.broker
def test_request_timeout_fails_and_closes_the_connection(
    kafka_broker: Any, kafka_topic: Any, start_network: StartNetwork
) -> None:
    ref = start_network(network_config(kafka_broker.bootstrap_servers))
    topic = kafka_topic(kafka_broker)
    topic_id, leader = topic_leader(ref, topic)
    metadata(ref, node=leader)
    reply = send(ref, long_fetch(topic, topic_id), node=leader, timeout_ms=500).get(timeout=10)
    assert isinstance(reply, RequestFailed) and isinstance(reply.error, KafkaTimeoutError)
    assert reply.error.retriable and reply.error.node == leader
    assert [e.kind for e in events(ref, leader)][-1] == "disconnected"
    assert metadata(ref, node=leader).node == leader  # a new connection serves the next one


@pytest.mark.broker
def test_unknown_node_waits_for_metadata_or_deadline(
    kafka_broker: Any, start_network: StartNetwork
) -> None:
    ref = start_network(network_config(kafka_broker.bootstrap_servers))
    lost = send(ref, rq.metadata_request(12, topics=None), node=4242, timeout_ms=300)
    reply = lost.get(timeout=10)
    assert isinstance(reply, RequestFailed) and isinstance(reply.error, KafkaTimeoutError)
    assert "unknown" in str(reply.error)
    # A request for a node not yet known is sent once Metadata names the node.
    early = send(ref, rq.metadata_request(12, topics=None), node=1, timeout_ms=30_000)
    metadata(ref)
    answer = early.get(timeout=30)
    assert isinstance(answer, Response) and answer.node == 1


@pytest.mark.broker
def test_pipelined_requests_respect_in_flight_limit(
    kafka_broker: Any, start_network: StartNetwork
) -> None:
    config = network_config(
        kafka_broker.bootstrap_servers, **{"max.in.flight.requests.per.connection": 2}
    )
    ref = start_network(config)
    node = int(metadata(ref).response.brokers[0].node_id)
    futures = [
        send(ref, rq.metadata_request(12, topics=None), node=node, request_id=i) for i in range(50)
    ]
    replies = [f.get(timeout=30) for f in futures]
    assert [r.request_id for r in replies] == list(range(50))
    assert all(isinstance(r, Response) for r in replies)
    ids = [r.correlation_id for r in replies]
    assert ids == sorted(ids)


# -- fault injection of responses ------------------------------------------------------------------


@pytest.mark.broker
def test_injected_error_code_delay_and_drop(kafka_broker: Any, start_network: StartNetwork) -> None:
    faults = FaultInjector()
    ref = start_network(network_config(kafka_broker.bootstrap_servers), faults=faults)
    metadata(ref)
    # Metadata has no top-level error code: the caller gets the typed error.
    faults.error_response(api_key=ApiKey.METADATA, error_code=3, times=1)
    failed = send(ref, rq.metadata_request(12, topics=None)).get(timeout=10)
    assert isinstance(failed, RequestFailed)
    assert isinstance(failed.error, UnknownTopicOrPartitionError)
    # ApiVersions has one: the broker's real response with the code replaced.
    faults.error_response(api_key=ApiKey.API_VERSIONS, error_code=35, times=1)
    replaced = send(ref, api_versions_request(3)).get(timeout=10)
    assert isinstance(replaced, Response) and int(replaced.response.error_code) == 35
    assert replaced.response.api_keys  # the rest is the broker's answer
    faults.delay_response(api_key=ApiKey.METADATA, seconds=0.5, times=1)
    started = time.monotonic()
    delayed = send(ref, rq.metadata_request(12, topics=None)).get(timeout=10)
    assert isinstance(delayed, Response) and time.monotonic() - started >= 0.45
    faults.drop_response(api_key=ApiKey.METADATA, times=1)
    dropped = send(ref, rq.metadata_request(12, topics=None), timeout_ms=400).get(timeout=10)
    assert isinstance(dropped, RequestFailed) and isinstance(dropped.error, KafkaTimeoutError)
    assert isinstance(metadata(ref), Response)


@pytest.mark.broker
def test_stop_fails_pending_requests_and_never_hangs(
    kafka_broker: Any, kafka_topic: Any, start_network: StartNetwork
) -> None:
    from kafka_actors.errors import ConsumerClosedError

    ref = start_network(network_config(kafka_broker.bootstrap_servers))
    topic = kafka_topic(kafka_broker)
    topic_id, leader = topic_leader(ref, topic)
    pending = send(ref, long_fetch(topic, topic_id), node=leader, timeout_ms=30_000)
    queued = send(ref, rq.metadata_request(12, topics=None), node=999, timeout_ms=30_000)
    time.sleep(0.2)
    started = time.monotonic()
    ref.stop(block=True, timeout=10)
    assert time.monotonic() - started < 10
    for future in (pending, queued):
        reply = future.get(timeout=5)
        assert isinstance(reply, RequestFailed) and isinstance(reply.error, ConsumerClosedError)


@pytest.mark.broker
def test_idle_connected_actor_does_not_wake(kafka_broker: Any, start_network: StartNetwork) -> None:
    ref = start_network(network_config(kafka_broker.bootstrap_servers))
    node = int(metadata(ref).response.brokers[0].node_id)
    metadata(ref, node=node)
    inbox = ref.actor_inbox
    before = inbox.wakeups  # type: ignore[attr-defined]
    time.sleep(2.0)
    # Nothing pending: select() blocks without a timeout; no polling.
    assert inbox.wakeups - before == 0  # type: ignore[attr-defined]
    assert isinstance(metadata(ref, node=node), Response)


def _error_text(error: KafkaError) -> str:
    return f"{type(error).__name__}: {error}"


def test_connection_setup_timeout_against_a_silent_server(start_network: StartNetwork) -> None:
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes connects; nobody ever answers ApiVersions
    try:
        config = network_config(
            f"127.0.0.1:{silent.getsockname()[1]}",
            **{
                "socket.connection.setup.timeout.ms": 200,
                "socket.connection.setup.timeout.max.ms": 400,
                "reconnect.backoff.ms": 50,
            },
        )
        ref = start_network(config)
        reply = send(ref, rq.metadata_request(12, topics=None), timeout_ms=2_000).get(timeout=10)
        assert isinstance(reply, RequestFailed) and isinstance(reply.error, KafkaTimeoutError)
        assert reply.error.retriable
        failures = [e for e in events(ref) if e.kind == "connect_failed"]
        assert len(failures) >= 2
        assert all(e.error is not None and "setup" in e.error for e in failures)
        assert "no node became ready" in str(reply.error)
    finally:
        silent.close()


@pytest.mark.broker
def test_update_nodes_names_an_address(kafka_broker: Any, start_network: StartNetwork) -> None:
    from kafka_actors.actors.network import UpdateNodes

    ref = start_network(network_config(kafka_broker.bootstrap_servers))
    host, port = kafka_broker.bootstrap_servers.split(",")[0].rsplit(":", 1)
    early = send(ref, rq.metadata_request(12, topics=None), node=77, timeout_ms=30_000)
    ref.tell(UpdateNodes(((77, host, int(port)),)))
    reply = early.get(timeout=30)
    assert isinstance(reply, Response) and reply.node == 77
    states = ref.ask(GetNodeStates(), timeout=10)
    assert states[77] == ("ready", f"{host}:{port}")  # type: ignore[index]


def test_sends_racing_with_stop_all_get_an_answer(start_network: StartNetwork) -> None:
    import threading

    from kafka_actors.errors import ConsumerClosedError

    ref = start_network(network_config("127.0.0.1:9"))  # nothing is ever sent anywhere
    futures: list[pykka.Future[Any]] = []
    stop = threading.Event()

    def spam() -> None:
        while not stop.is_set():
            try:
                futures.append(
                    send(ref, rq.metadata_request(12, topics=None), node=999, timeout_ms=60_000)
                )
            except pykka.ActorDeadError:
                return

    spammer = threading.Thread(target=spam, daemon=True)
    spammer.start()
    while len(futures) < 200:
        pass
    ref.stop(block=True, timeout=15)
    stop.set()
    spammer.join(10)
    for future in futures:
        reply = future.get(timeout=5)
        assert isinstance(reply, RequestFailed) and isinstance(reply.error, ConsumerClosedError)
