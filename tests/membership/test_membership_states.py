"""MemberState transitions: the table (Java's MemberState) and its enforcement."""

from __future__ import annotations

import uuid

import pytest
from membership_harness import MEMBER_ID, Harness

from kafka_actors.protocol.group.consumer.membership import (
    ConsumerMembershipManager,
    IllegalStateTransitionError,
    MembershipConfig,
    MemberState,
)

S = MemberState

# Java's MemberState: for each state, the states it may be entered from.
JAVA_TABLE = {
    S.STABLE: {S.JOINING, S.ACKNOWLEDGING, S.RECONCILING},
    S.RECONCILING: {S.STABLE, S.JOINING, S.ACKNOWLEDGING, S.RECONCILING},
    S.ACKNOWLEDGING: {S.RECONCILING},
    S.FATAL: {
        S.JOINING,
        S.STABLE,
        S.RECONCILING,
        S.ACKNOWLEDGING,
        S.PREPARE_LEAVING,
        S.LEAVING,
        S.UNSUBSCRIBED,
    },
    S.FENCED: {S.JOINING, S.STABLE, S.RECONCILING, S.ACKNOWLEDGING, S.PREPARE_LEAVING, S.LEAVING},
    S.JOINING: {S.FENCED, S.UNSUBSCRIBED, S.STALE},
    S.PREPARE_LEAVING: {S.JOINING, S.STABLE, S.RECONCILING, S.ACKNOWLEDGING, S.UNSUBSCRIBED},
    S.LEAVING: {S.PREPARE_LEAVING},
    S.UNSUBSCRIBED: {S.PREPARE_LEAVING, S.LEAVING, S.FENCED},
    S.STALE: {S.LEAVING},
}


@pytest.mark.parametrize("source", list(S))
@pytest.mark.parametrize("target", list(S))
def test_transition_table_matches_java(source: MemberState, target: MemberState) -> None:
    expected = source is target or source in JAVA_TABLE[target]
    assert source.can_transition_to(target) is expected


def _manager_in(state: MemberState) -> ConsumerMembershipManager:
    manager = Harness().m
    manager._state = state  # test-only: place the machine in a state
    return manager


@pytest.mark.parametrize(
    ("source", "target"),
    [(s, t) for s in S for t in S if s is not t and s not in JAVA_TABLE[t]],
)
def test_illegal_transition_raises_and_keeps_state(
    source: MemberState, target: MemberState
) -> None:
    manager = _manager_in(source)
    with pytest.raises(IllegalStateTransitionError, match=f"from {source.value} to {target.value}"):
        manager._transition_to(target)
    assert manager.state is source


def test_legal_transition_changes_state() -> None:
    manager = _manager_in(S.RECONCILING)
    manager._transition_to(S.ACKNOWLEDGING)
    assert manager.state is S.ACKNOWLEDGING


def test_can_handle_new_assignment_states() -> None:
    handling = {s for s in S if s.can_handle_new_assignment}
    assert handling == {S.STABLE, S.JOINING, S.ACKNOWLEDGING, S.RECONCILING}


def test_initial_state_and_identity() -> None:
    h = Harness(instance_id="instance-1")
    assert h.m.state is S.UNSUBSCRIBED
    assert h.m.member_id == MEMBER_ID
    assert h.m.member_epoch == 0
    assert h.m.group_instance_id == "instance-1"
    assert h.m.assignment == frozenset()


def test_default_member_id_is_a_client_generated_uuid() -> None:
    first = ConsumerMembershipManager(MembershipConfig(group_id="g"), random=lambda: 0.5)
    second = ConsumerMembershipManager(MembershipConfig(group_id="g"), random=lambda: 0.5)
    assert str(uuid.UUID(first.member_id)) == first.member_id
    assert first.member_id != second.member_id


def test_unsupported_heartbeat_version_rejected() -> None:
    with pytest.raises(ValueError, match="version 2"):
        ConsumerMembershipManager(
            MembershipConfig(group_id="g", heartbeat_api_version=2), random=lambda: 0.5
        )


def test_subscribe_validates() -> None:
    m = Harness().m
    with pytest.raises(ValueError):
        m.subscribe(())
    with pytest.raises(ValueError):
        m.subscribe(("a",), regex="a.*")
    with pytest.raises(ValueError):
        m.subscribe(regex="")


def test_config_from_consumer_config() -> None:
    from kafka_actors.config import ConsumerConfig
    from kafka_actors.errors import ConfigError

    consumer = ConsumerConfig.from_dict(
        {
            "bootstrap.servers": "localhost:9092",
            "group.id": "orders",
            "group.instance.id": "host-1",
            "client.rack": "eu-1a",
            "max.poll.interval.ms": 45_000,
            "group.remote.assignor": "range",
            "enable.auto.commit": False,
            "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 800,
        }
    )
    config = MembershipConfig.from_consumer_config(consumer, heartbeat_api_version=0)
    assert config == MembershipConfig(
        group_id="orders",
        group_instance_id="host-1",
        rack_id="eu-1a",
        rebalance_timeout_ms=45_000,
        server_assignor="range",
        auto_commit_enabled=False,
        retry_backoff_ms=50,
        retry_backoff_max_ms=800,
        heartbeat_api_version=0,
    )
    no_group = ConsumerConfig.from_dict({"bootstrap.servers": "localhost:9092"})
    with pytest.raises(ConfigError):
        MembershipConfig.from_consumer_config(no_group)
