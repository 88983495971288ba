"""``health()``'s derivation (issue 24), on a consumer context driven by hand with a manual
clock: the states a probe must tell apart (healthy, coordinator lost, broker down, poll
interval exceeded, fenced, closed, failed) and the values beside the verdict (member epoch or
generation, heartbeat and poll ages, positions and lag, connections)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from kafka_actors.actors.context import ConsumerContext
from kafka_actors.actors.network.status import ConnectionStates
from kafka_actors.clock import ManualClock
from kafka_actors.config import ConsumerConfig
from kafka_actors.core.health import current_lag, health_of, read_facts
from kafka_actors.errors import FatalConsumerError
from kafka_actors.health import BrokerConnection, ConsumerHealth, GroupStatus
from kafka_actors.protocol.group.coordinator import coordinator_connection_id
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.subscription import SubscriptionState
from kafka_actors.supervisors import ChildTable
from kafka_actors.supervisors.supervisor import TreeStatus

T0, T1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
MAX_POLL_MS = 10_000


def _context(clock: ManualClock, **config: Any) -> ConsumerContext:
    cfg = ConsumerConfig.from_dict(
        {
            "bootstrap.servers": "localhost:9092",
            "group.id": "g",
            "max.poll.interval.ms": MAX_POLL_MS,
            **config,
        }
    )
    return ConsumerContext(
        config=cfg,
        clock=clock,
        scheduler=clock.scheduler(),
        subscriptions=SubscriptionState(),
        random=random.Random(1).random,
        network_table=ChildTable("network", TreeStatus()),
        group_protocol=cfg.group_protocol,
    )


def _health(
    ctx: ConsumerContext,
    *,
    protocol: str | None = "consumer",
    closed: bool = False,
    error: BaseException | None = None,
) -> ConsumerHealth:
    return health_of(
        read_facts(
            ctx,
            group_protocol=protocol,
            closed=closed,
            error=error,
            max_poll_interval_ms=MAX_POLL_MS if protocol is not None else None,
        )
    )


def _stable_member(clock: ManualClock) -> ConsumerContext:
    """A KIP-848 member in its group, two partitions (one fetched), polled and heartbeating,
    its broker and coordinator connections up."""
    ctx = _context(clock)
    subs = ctx.subscriptions
    subs.subscribe(["orders"])
    subs.assign_from_subscribed([T0, T1])
    subs.seek(T0, 40)
    subs.update_high_watermark(T0, 100)
    ctx.publish_member("STABLE", "m-1", 7)
    ctx.coordinator_node = 1
    ctx.connection_states.record(1, "localhost:9092", "connect", None)
    ctx.connection_states.record(1, "localhost:9092", "ready", None)
    ctx.connection_states.record(coordinator_connection_id(1), "localhost:9092", "ready", None)
    with ctx.metrics.polling():
        clock.advance(0.2)
    ctx.metrics.heartbeat_response(3.0, ok=True)
    clock.advance(1.5)
    return ctx


def test_a_member_in_its_group_is_live_and_ready() -> None:
    clock = ManualClock(100.0)
    ctx = _stable_member(clock)
    health = _health(ctx)
    assert (health.live, health.ready, health.reasons) == (True, True, ())
    assert health.group_status is GroupStatus.IN_GROUP and health.in_group
    assert (health.member_state, health.member_id, health.member_epoch) == ("STABLE", "m-1", 7)
    assert health.generation is None
    assert health.coordinator_id == 1 and health.coordinator_known
    assert health.assignment == frozenset({T0, T1})
    assert health.last_heartbeat_age_ms == 1500
    assert health.last_poll_age_ms == 1500
    by_tp = {p.partition: p for p in health.partitions}
    assert (by_tp[T0].position, by_tp[T0].high_watermark, by_tp[T0].lag) == (40, 100, 60)
    assert (by_tp[T1].position, by_tp[T1].lag) == (None, None)  # no position yet
    assert health.total_lag == 60
    assert health.connections == (
        BrokerConnection(1, "localhost:9092", "up"),
        BrokerConnection(1, "localhost:9092", "up", kind="coordinator"),
    )
    assert health.connections_up == 2
    assert current_lag(ctx, T0) == 60 and current_lag(ctx, T1) is None


def test_a_poll_that_runs_counts_as_polling() -> None:
    clock = ManualClock()
    ctx = _stable_member(clock)
    with ctx.metrics.polling():
        clock.advance(60.0)  # a long poll (waiting for records) is no stuck loop
        ctx.metrics.heartbeat_response(3.0, ok=True)
        health = _health(ctx)
    assert health.last_poll_age_ms == 0 and health.ready


def test_coordinator_lost_makes_the_member_not_ready_but_live() -> None:
    clock = ManualClock()
    ctx = _stable_member(clock)
    ctx.coordinator_node = None
    health = _health(ctx)
    assert health.group_status is GroupStatus.COORDINATOR_UNKNOWN
    assert (health.live, health.ready) == (True, False)
    assert health.reasons == ("not in the group: coordinator unknown",)
    assert health.coordinator_id is None and not health.coordinator_known


def test_broker_down_is_not_ready_and_says_why() -> None:
    clock = ManualClock()
    ctx = _stable_member(clock)
    refused = "Cannot connect to localhost:9092: Connection refused"
    for node in (1, coordinator_connection_id(1)):
        ctx.connection_states.record(node, "localhost:9092", "disconnected", "lost")
        ctx.connection_states.record(node, "localhost:9092", "connect", None)
        failed = f"{refused} (node={node})"
        ctx.connection_states.record(node, "localhost:9092", "connect_failed", failed)
    ctx.coordinator_node = None
    health = _health(ctx)
    assert (health.live, health.ready) == (True, False)
    assert health.reasons == (
        "not in the group: coordinator unknown",
        f"no broker connection up ({refused})",
    )
    assert {c.state for c in health.connections} == {"down"}
    assert health.connections_up == 0


def test_the_poll_interval_runs_from_the_start_of_the_last_poll() -> None:
    """As the member's poll timer (Java's): ``max.poll.interval.ms`` after the last poll
    *started*. Judged from the poll's end, health() said live while the member had already
    left as STALE (a poll of 0.2 s: for 0.2 s the two disagreed; seen in a broker test)."""
    clock = ManualClock()
    ctx = _stable_member(clock)  # the poll took 0.2 s and ended 1.5 s ago
    clock.advance((MAX_POLL_MS - 1_600) / 1000)  # 9.9 s since its end, 10.1 s since its start
    health = _health(ctx)
    assert health.last_poll_age_ms == MAX_POLL_MS - 100
    assert health.group_status is GroupStatus.POLL_INTERVAL_EXCEEDED
    assert (health.live, health.ready) == (False, False)


def test_poll_interval_exceeded_is_not_live() -> None:
    clock = ManualClock()
    ctx = _stable_member(clock)
    clock.advance(MAX_POLL_MS / 1000)  # 1.5 s already since the poll
    health = _health(ctx)
    assert health.group_status is GroupStatus.POLL_INTERVAL_EXCEEDED
    assert (health.live, health.ready) == (False, False)
    assert health.reasons == (
        f"poll interval exceeded: no poll for 11700 ms (max.poll.interval.ms {MAX_POLL_MS})",
    )
    # The member left (STALE) and the application polls again: joining, live again.
    ctx.publish_member("STALE", "m-1", 0)
    with ctx.metrics.polling():
        health = _health(ctx)
        assert health.group_status is GroupStatus.POLL_INTERVAL_EXCEEDED  # until it rejoins
    ctx.publish_member("JOINING", "m-1", 0)
    health = _health(ctx)
    assert (health.live, health.group_status) == (True, GroupStatus.JOINING)


def test_fenced_member_is_live_not_ready() -> None:
    clock = ManualClock()
    ctx = _stable_member(clock)
    ctx.publish_member("FENCED", "m-1", 0)
    health = _health(ctx)
    assert health.group_status is GroupStatus.FENCED
    assert (health.live, health.ready) == (True, False)
    assert health.reasons == ("not in the group: fenced",)
    assert health.member_epoch == 0


@pytest.mark.parametrize(
    ("state", "subscribed", "status"),
    [
        ("JOINING", True, GroupStatus.JOINING),
        ("RECONCILING", True, GroupStatus.IN_GROUP),
        ("ACKNOWLEDGING", True, GroupStatus.IN_GROUP),
        ("PREPARE_LEAVING", False, GroupStatus.LEFT),
        ("LEAVING", False, GroupStatus.LEFT),
        ("UNSUBSCRIBED", False, GroupStatus.NOT_SUBSCRIBED),
        ("UNSUBSCRIBED", True, GroupStatus.JOINING),  # subscribed, the actor not told yet
        ("FATAL", True, GroupStatus.FAILED),
    ],
)
def test_member_states_map_to_a_group_status(
    state: str, subscribed: bool, status: GroupStatus
) -> None:
    clock = ManualClock()
    ctx = _stable_member(clock)
    if not subscribed:
        ctx.subscriptions.unsubscribe()
    ctx.publish_member(state, "m-1", 3)
    health = _health(ctx)
    assert health.group_status is status
    assert health.live is (status is not GroupStatus.FAILED)
    assert health.ready is (status is GroupStatus.IN_GROUP)


def test_classic_reports_the_generation() -> None:
    clock = ManualClock()
    ctx = _stable_member(clock)
    ctx.publish_member("STABLE", "m-1", 12)
    health = _health(ctx, protocol="classic")
    assert (health.generation, health.member_epoch) == (12, None)
    ctx.publish_member("COMPLETING_REBALANCE", "m-1", 12)
    assert _health(ctx, protocol="classic").group_status is GroupStatus.JOINING


def test_closed_and_failed_are_not_live() -> None:
    clock = ManualClock()
    ctx = _stable_member(clock)
    closed = _health(ctx, closed=True)
    assert (closed.live, closed.ready, closed.reasons) == (False, False, ("closed",))
    assert closed.group_status is GroupStatus.CLOSED
    error = FatalConsumerError("the supervision tree gave up: fetch")
    failed = _health(ctx, error=error)
    assert failed.group_status is GroupStatus.FAILED and not failed.live
    assert failed.error == repr(error)
    assert failed.reasons == (f"failed: {error!r}",)


def test_without_a_group_ready_means_assigned_polled_connected() -> None:
    clock = ManualClock()
    ctx = _context(clock, **{"group.id": None})
    ctx.connection_states.record(-1001, "localhost:9092", "ready", None)
    health = _health(ctx, protocol=None)
    assert health.group_status is GroupStatus.NO_GROUP
    assert (health.live, health.ready) == (True, False)
    assert health.reasons == ("no partitions assigned", "not polled yet")
    ctx.subscriptions.assign_from_user([T0])
    with ctx.metrics.polling():
        pass
    clock.advance(3600.0)  # no poll timer without a group
    health = _health(ctx, protocol=None)
    assert (health.live, health.ready, health.reasons) == (True, True, ())
    assert health.connections == (
        BrokerConnection(-1001, "localhost:9092", "up", kind="bootstrap"),
    )


def test_a_failed_heartbeat_does_not_count_as_a_good_one() -> None:
    clock = ManualClock()
    ctx = _stable_member(clock)
    ctx.metrics.heartbeat_response(2.0, ok=False)
    clock.advance(0.5)
    assert _health(ctx).last_heartbeat_age_ms == 2000


def test_no_good_heartbeat_for_a_session_timeout_is_not_ready() -> None:
    clock = ManualClock()
    ctx = _context(
        clock,
        **{
            "group.protocol": "classic",
            "session.timeout.ms": 6_000,
            "max.poll.interval.ms": 60_000,
        },
    )
    ctx.subscriptions.subscribe(["orders"])
    ctx.publish_member("STABLE", "m-1", 7)
    ctx.coordinator_node = 1
    ctx.connection_states.record(1, "localhost:9092", "ready", None)
    ctx.metrics.heartbeat_response(2.0, ok=True)
    clock.advance(6.0)
    with ctx.metrics.polling():
        assert _health(ctx, protocol="classic").ready  # 6 s: not more than the timeout
        clock.advance(0.5)
        health = _health(ctx, protocol="classic")
    assert (health.live, health.ready, health.in_group) == (True, False, True)
    assert health.reasons == ("no heartbeat answered for 6500 ms (session timeout 6000 ms)",)


def test_connection_states_follow_the_events() -> None:
    states = ConnectionStates()
    states.record(2, "b:9092", "connect", None)
    assert states.snapshot() == ((2, "b:9092", "connecting", None),)
    states.record(2, "b:9092", "throttled", None)  # changes nothing
    states.record(2, "b:9092", "ready", None)
    states.record(1, "a:9092", "idle_closed", None)
    assert states.snapshot() == ((1, "a:9092", "idle", None), (2, "b:9092", "up", None))
    states.record(2, "b:9092", "auth_failed", "bad password")
    assert states.snapshot()[1] == (2, "b:9092", "down", "bad password")
    states.record(2, "b:9092", "removed", None)
    assert states.snapshot() == ((1, "a:9092", "idle", None),)
