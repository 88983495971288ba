"""Classic membership: join paths (follower, leader, MEMBER_ID_REQUIRED, eager prepare)."""

from __future__ import annotations

import pytest
from kio.schema.heartbeat.v4 import request as hb_req
from kio.schema.join_group.v9 import request as join_req
from kio.schema.sync_group.v5 import request as sync_req

from kafka_actors.errors import ConfigError
from kafka_actors.protocol.group.classic.assignors import (
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_subscription,
)
from kafka_actors.protocol.group.classic.membership import (
    JOIN_GROUP_TIMEOUT_LAPSE_MS,
    ClassicMembershipConfig,
    ClassicMemberState,
    NeedPartitionCounts,
)
from kafka_actors.protocol.group.consumer.membership import (
    AssignmentChanged,
    CommitBeforeRevocation,
    InvokeAssigned,
    InvokeLost,
    InvokeRevoked,
    MemberEpochChanged,
    PauseFetching,
)
from kafka_actors.protocol.messages import COORDINATOR_NODE

from .classic_harness import (
    MEMBER_ID_REQUIRED,
    REBALANCE_IN_PROGRESS,
    Driver,
    heartbeat_response,
    join_response,
    sync_response,
    tp,
    tps,
)


def test_no_join_before_subscription_poll_and_coordinator() -> None:
    d = Driver(coordinator=False)
    d.none()
    d.m.subscribe(["a"])
    d.none()  # no application poll yet
    d.m.on_poll(d.now)
    d.none()  # no coordinator yet
    d.m.on_coordinator_discovered(d.now)
    join = d.one(join_req.JoinGroupRequest)
    assert join.node == COORDINATOR_NODE
    assert d.state() is ClassicMemberState.PREPARING_REBALANCE


def test_join_group_request_fields() -> None:
    d = Driver(
        assignors=("cooperative-sticky", "range"),
        rack_id="rack-1",
        group_instance_id=None,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=60_000,
    )
    join = d.join_request("b", "a")
    payload = join.request
    assert payload.group_id == "group-1"
    assert payload.member_id == ""
    assert payload.protocol_type == "consumer"
    assert payload.session_timeout.total_seconds() == 10
    assert payload.rebalance_timeout.total_seconds() == 60
    assert [p.name for p in payload.protocols] == ["cooperative-sticky", "range"]
    sub = decode_subscription(payload.protocols[1].metadata)
    assert sub.topics == ("a", "b")
    assert sub.owned_partitions == ()
    assert sub.generation_id == -1
    assert sub.rack_id == "rack-1"
    # cooperative-sticky carries the generation in its user data
    assert decode_subscription(payload.protocols[0].metadata).user_data == b"\xff\xff\xff\xff"
    assert join.timeout_ms == 60_000 + JOIN_GROUP_TIMEOUT_LAPSE_MS


def test_follower_path() -> None:
    d = Driver()
    join = d.join_request("a")
    d.respond(join, join_response(generation=3, member_id="m-1", leader="m-0"))
    assert d.state() is ClassicMemberState.COMPLETING_REBALANCE
    assert d.m.generation_id == 3 and d.m.member_id == "m-1" and not d.m.is_leader
    sync = d.one(sync_req.SyncGroupRequest)
    p = sync.request
    assert (p.generation_id, p.member_id, p.assignments) == (3, "m-1", ())
    assert (p.protocol_type, p.protocol_name) == ("consumer", "range")
    d.respond(sync, sync_response([tp("a", 0), tp("a", 1)]))
    events = d.take()
    assert d.state() is ClassicMemberState.STABLE
    assert MemberEpochChanged("m-1", 3) in events
    assert AssignmentChanged(tps(("a", 0), ("a", 1))) in events
    assigned = [e for e in events if isinstance(e, InvokeAssigned)]
    assert len(assigned) == 1
    assert assigned[0].partitions == tps(("a", 0), ("a", 1))
    assert d.m.partitions_awaiting_callback == tps(("a", 0), ("a", 1))
    # the stable identity is published before the assignment callback
    assert events.index(MemberEpochChanged("m-1", 3)) < events.index(assigned[0])
    d.m.on_callback_completed(assigned[0].callback_id)
    assert d.m.partitions_awaiting_callback == frozenset()
    assert d.m.assignment == tps(("a", 0), ("a", 1))
    d.none()  # nothing more until the heartbeat is due


def test_leader_path_assigns_with_partition_counts() -> None:
    d = Driver(assignors=("range",))
    join = d.join_request("a")
    other = encode_subscription(Subscription(topics=("a", "b")))
    mine = join.request.protocols[0].metadata
    d.respond(
        join,
        join_response(
            generation=1,
            member_id="m-1",
            leader="m-1",
            members=[("m-1", None, mine), ("m-2", None, other)],
        ),
    )
    assert d.m.is_leader
    d.none()  # waits for the partition counts
    (need,) = d.of(NeedPartitionCounts)
    assert need.topics == frozenset({"a", "b"})
    d.m.on_partition_counts(need.request_id + 100, {"a": 4, "b": 2})  # not ours: ignored
    d.none()
    d.m.on_partition_counts(need.request_id, {"a": 4, "b": 2, "c": 9})
    sync = d.one(sync_req.SyncGroupRequest)
    assignments = {a.member_id: decode_assignment(a.assignment) for a in sync.request.assignments}
    assert set(assignments["m-1"].partitions) == {tp("a", 0), tp("a", 1)}
    assert set(assignments["m-2"].partitions) == {tp("a", 2), tp("a", 3), tp("b", 0), tp("b", 1)}
    d.respond(sync, sync_response(assignments["m-1"].partitions))
    d.complete_callbacks()
    assert d.state() is ClassicMemberState.STABLE
    assert d.m.assignment == tps(("a", 0), ("a", 1))


def test_leader_rejoins_when_a_group_topic_changes_partition_count() -> None:
    d = Driver()
    join = d.join_request("a")
    mine = join.request.protocols[0].metadata
    d.respond(join, join_response(member_id="m-1", leader="m-1", members=[("m-1", None, mine)]))
    d.poll()
    (need,) = d.of(NeedPartitionCounts)
    d.m.on_partition_counts(need.request_id, {"a": 2})
    d.respond(d.one(), sync_response([tp("a", 0), tp("a", 1)]))
    d.complete_callbacks()
    d.m.on_partition_counts(None, {"a": 2, "z": 5})  # unrelated topic: nothing
    assert not d.m.rejoin_needed
    d.m.on_partition_counts(None, {"a": 3})
    assert d.m.rejoin_needed
    d.none()  # the rejoin waits for the application poll
    d.m.on_poll(d.now)
    d.complete_callbacks()
    d.one(join_req.JoinGroupRequest)


def test_member_id_required_retries_at_once_with_the_given_id() -> None:
    d = Driver()
    join = d.join_request("a")
    d.respond(join, join_response(error=MEMBER_ID_REQUIRED, member_id="given-1", generation=-1))
    assert d.m.member_id == "given-1"
    again = d.one(join_req.JoinGroupRequest)  # no backoff
    assert again.request.member_id == "given-1"


def test_eager_revokes_everything_and_waits_for_commit_and_callback_before_joining() -> None:
    d = Driver(auto_commit_enabled=True)
    d.stable_follower([tp("a", 0), tp("a", 1)])
    d.advance(3_000)
    hb = d.one(hb_req.HeartbeatRequest)
    d.respond(hb, heartbeat_response(REBALANCE_IN_PROGRESS))
    assert d.m.rejoin_needed and d.state() is ClassicMemberState.STABLE
    d.none()  # the rejoin starts from the application poll
    d.m.on_poll(d.now)
    result = d.none()
    owned = tps(("a", 0), ("a", 1))
    pause = [e for e in result.events if isinstance(e, PauseFetching)]
    commits = [e for e in result.events if isinstance(e, CommitBeforeRevocation)]
    assert pause == [PauseFetching(owned)]
    assert len(commits) == 1 and commits[0].partitions == owned
    assert commits[0].deadline_ms == d.now + 60_000
    assert not d.of(InvokeRevoked)  # commit first
    d.m.on_commit_done(commits[0].commit_id)
    result = d.none()  # JoinGroup waits for the callback
    (revoked,) = [e for e in result.events if isinstance(e, InvokeRevoked)]
    assert revoked.partitions == owned
    assert d.m.partitions_pending_revocation == owned
    d.advance(10)
    d.none()
    d.m.on_callback_completed(revoked.callback_id)
    join = d.one(join_req.JoinGroupRequest)
    assert d.m.assignment == frozenset()
    sub = decode_subscription(join.request.protocols[0].metadata)
    assert sub.owned_partitions == ()
    assert sub.generation_id == 1
    assert join.request.reason == "group is already rebalancing"


def test_eager_invokes_revoked_even_with_nothing_owned_after_first_generation() -> None:
    d = Driver()
    d.stable_follower([])
    d.m.subscribe(["a", "b"])  # subscription changed: rejoin
    d.m.on_poll(d.now)
    result = d.none()
    (revoked,) = [e for e in result.events if isinstance(e, InvokeRevoked)]
    assert revoked.partitions == frozenset()
    d.m.on_callback_completed(revoked.callback_id)
    join = d.one(join_req.JoinGroupRequest)
    assert decode_subscription(join.request.protocols[0].metadata).topics == ("a", "b")


def test_first_join_invokes_no_callback() -> None:
    d = Driver(auto_commit_enabled=True)
    d.join_request("a")
    assert not d.of(InvokeRevoked) and not d.of(InvokeLost)
    assert not d.of(CommitBeforeRevocation)


def test_config_validation_and_from_consumer_config() -> None:
    from kafka_actors.config import ConsumerConfig

    with pytest.raises(ConfigError):
        ClassicMembershipConfig(group_id="g", assignors=())
    with pytest.raises(ConfigError):
        ClassicMembershipConfig(group_id="g", assignors=("nope",))
    with pytest.raises(ConfigError):
        ClassicMembershipConfig(group_id="g", session_timeout_ms=3000, heartbeat_interval_ms=3000)
    config = ConsumerConfig.from_dict(
        {
            "bootstrap.servers": "localhost:9092",
            "group.id": "g",
            "group.instance.id": "i-1",
            "group.protocol": "classic",
            "partition.assignment.strategy": "cooperative-sticky",
            "max.poll.interval.ms": 1234,
        }
    )
    classic = ClassicMembershipConfig.from_consumer_config(config, join_group_version=7)
    assert classic.group_instance_id == "i-1"
    assert classic.assignors == ("cooperative-sticky",)
    assert classic.rebalance_timeout_ms == 1234
    assert classic.join_group_version == 7
