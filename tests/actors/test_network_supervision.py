"""The NetworkActor as supervisor of request-manager actors, and trace ids across actors.

A real child (``MetadataChild``) answers its callers by sending Metadata through its parent,
the NetworkActor. Fault injection crashes it: it is restarted with the configured backoff and
serves the next call; past the restart intensity the NetworkActor (the root here) gives up and
every caller gets a fatal error naming the cause, never a hang.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka
import pytest

from kafka_actors.actors.network import RequestFailed, Response, Send
from kafka_actors.errors import ConsumerClosedError
from kafka_actors.log import get_logger, new_trace_id, traced
from kafka_actors.protocol.wire import requests as rq
from kafka_actors.supervisors import (
    ChildContext,
    ChildRestartingError,
    ChildSpec,
    ChildStatus,
    ChildTable,
    FaultInjector,
    InjectedFault,
    SupervisedActor,
    SupervisorFatalError,
    SupervisorSpec,
)
from kafka_actors.supervisors.supervisor import TreeStatus
from tests.actors.network_helpers import network_config, send

StartNetwork = Callable[..., pykka.ActorRef[Any]]


@dataclass(frozen=True)
class GetMetadata:
    trace_id: str | None = None


class MetadataChild(SupervisedActor):
    """Answers GetMetadata with the broker's Metadata, fetched through its parent."""

    def __init__(self, *, context: ChildContext) -> None:
        super().__init__(context=context)
        assert context.parent is not None
        self.network = context.parent
        self.log = get_logger("metadata-child", child=context.name)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, GetMetadata):
            with traced(message.trace_id):
                self.log.info("child_requesting_metadata")
                future: pykka.Future[Any] = pykka.ThreadingFuture()
                self.network.tell(
                    Send(
                        rq.metadata_request(12, topics=None),
                        reply_to=future,
                        trace_id=message.trace_id,
                        timeout_ms=20_000,
                    )
                )
                reply = future.get(timeout=30)
                self.log.info("child_got_reply", reply_trace_id=reply.trace_id)
                if isinstance(reply, RequestFailed):
                    raise reply.error
                return reply
        return super().on_receive(message)


def start_with_child(
    start_network: StartNetwork,
    broker: Any,
    *,
    faults: FaultInjector | None = None,
    spec: SupervisorSpec | None = None,
    min_backoff: float = 0.3,
) -> tuple[pykka.ActorRef[Any], ChildTable]:
    table = ChildTable("network", TreeStatus())
    child = ChildSpec(
        "metadata",
        lambda ctx: MetadataChild.start(context=ctx),
        min_backoff=min_backoff,
        max_backoff=5.0,
        random_factor=0.2,
    )
    ref = start_network(
        network_config(broker.bootstrap_servers),
        children=[child],
        supervisor_spec=spec,
        faults=faults,
        table=table,
    )
    wait_running(table, "metadata")
    return ref, table


def wait_running(table: ChildTable, name: str, generation_above: int = 0) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            _ref, generation = table.current(name)
            if generation > generation_above:
                return generation
        except Exception:
            pass
        time.sleep(0.02)
    raise AssertionError(f"{name} not running (status {table.status(name)})")


def log_lines(stream: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]


@pytest.mark.broker
def test_child_serves_callers_through_the_network(
    kafka_broker: Any, start_network: StartNetwork
) -> None:
    _ref, table = start_with_child(start_network, kafka_broker)
    reply = table.ask("metadata", GetMetadata(), timeout=30)
    assert isinstance(reply, Response) and reply.response.brokers


@pytest.mark.broker
def test_crashed_child_restarts_with_backoff_and_serves_next(
    kafka_broker: Any, start_network: StartNetwork, captured_logs: Any
) -> None:
    faults = FaultInjector()
    _ref, table = start_with_child(start_network, kafka_broker, faults=faults, min_backoff=0.3)
    first = wait_running(table, "metadata")
    faults.crash("metadata", when=lambda m: isinstance(m, GetMetadata), times=1)
    crashed_at = time.monotonic()
    with pytest.raises((InjectedFault, ChildRestartingError)):
        table.ask("metadata", GetMetadata(), timeout=30)
    second = wait_running(table, "metadata", generation_above=first)
    restarted_after = time.monotonic() - crashed_at
    [restart] = [e for e in log_lines(captured_logs) if e.get("event") == "child_restarting"]
    # ChildSpec backoff: min_backoff * (1 + random * 0.2) for the first restart.
    assert 0.3 <= restart["delay"] <= 0.3 * 1.2 + 1e-6
    assert restarted_after >= restart["delay"]
    assert second == first + 1
    reply = table.ask("metadata", GetMetadata(), timeout=30)
    assert isinstance(reply, Response)


@pytest.mark.broker
def test_restart_intensity_exceeded_is_fatal_never_a_hang(
    kafka_broker: Any, start_network: StartNetwork
) -> None:
    faults = FaultInjector()
    ref, table = start_with_child(
        start_network,
        kafka_broker,
        faults=faults,
        spec=SupervisorSpec(max_restarts=1, period=60.0),
        min_backoff=0.05,
    )
    # A caller waiting on the network (a node that does not exist) when the tree gives up.
    waiting = send(ref, rq.metadata_request(12, topics=None), node=4242, timeout_ms=120_000)
    faults.crash("metadata", when=lambda m: isinstance(m, GetMetadata), times=None)
    generation = wait_running(table, "metadata")
    with pytest.raises((InjectedFault, ChildRestartingError)):
        table.ask("metadata", GetMetadata(), timeout=30)
    wait_running(table, "metadata", generation_above=generation)
    with pytest.raises((InjectedFault, ChildRestartingError, SupervisorFatalError)):
        table.ask("metadata", GetMetadata(), timeout=30)
    deadline = time.monotonic() + 30
    while table.tree.fatal_error is None and time.monotonic() < deadline:
        time.sleep(0.02)
    fatal = table.tree.fatal_error
    assert isinstance(fatal, SupervisorFatalError)
    assert "metadata" in str(fatal) and "InjectedFault" in str(fatal)
    with pytest.raises(SupervisorFatalError) as raised:
        table.ask("metadata", GetMetadata(), timeout=30)
    assert "metadata" in str(raised.value)
    reply = waiting.get(timeout=30)
    assert isinstance(reply, RequestFailed) and isinstance(reply.error, ConsumerClosedError)
    assert "metadata" in str(reply.error)  # names the cause
    ref.actor_stopped.wait(30)
    assert not ref.is_alive()
    assert table.status("metadata") in (ChildStatus.STOPPED, None, ChildStatus.STOPPING)


@pytest.mark.broker
def test_one_trace_id_on_caller_child_network_and_reply(
    kafka_broker: Any, start_network: StartNetwork, captured_logs: Any
) -> None:
    _ref, table = start_with_child(start_network, kafka_broker)
    trace_id = new_trace_id()
    caller = get_logger("test-caller")
    with traced(trace_id):
        caller.info("caller_asks_metadata")
        reply = table.ask("metadata", GetMetadata(trace_id=trace_id), timeout=30)
    assert isinstance(reply, Response) and reply.trace_id == trace_id
    traced_events = {e["event"] for e in log_lines(captured_logs) if e.get("trace_id") == trace_id}
    assert {
        "caller_asks_metadata",  # the caller's
        "child_requesting_metadata",  # the request manager's
        "request_accepted",  # the NetworkActor's
        "response_received",  # the NetworkActor's, while delivering the reply
        "child_got_reply",  # the reply's handling
    } <= traced_events
    network_lines = [
        e
        for e in log_lines(captured_logs)
        if e.get("event") in ("request_accepted", "response_received")
    ]
    assert all(e.get("trace_id") == trace_id for e in network_lines)
    [got] = [e for e in log_lines(captured_logs) if e.get("event") == "child_got_reply"]
    assert got["reply_trace_id"] == trace_id


class Recorder(SupervisedActor):
    """A child that records its stop in a shared list."""

    def __init__(self, *, context: ChildContext, stopped: list[str]) -> None:
        super().__init__(context=context)
        self.stopped = stopped

    def on_stop(self) -> None:
        self.stopped.append(self.supervised_name)


@pytest.mark.broker
def test_stop_stops_children_in_reverse_order(
    kafka_broker: Any, start_network: StartNetwork
) -> None:
    stopped: list[str] = []
    names = ["metadata", "coordinator", "fetch"]
    table = ChildTable("network", TreeStatus())
    children = [
        ChildSpec(name, lambda ctx: Recorder.start(context=ctx, stopped=stopped)) for name in names
    ]
    ref = start_network(
        network_config(kafka_broker.bootstrap_servers), children=children, table=table
    )
    for name in names:
        wait_running(table, name)
    ref.stop(block=True, timeout=30)
    assert stopped == list(reversed(names))
