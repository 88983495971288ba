"""What each manager actor does with every event its manager publishes: which actors get which
event, in which order, and what it completes or records on the way (no pykka, no broker).

The actors are built without starting them (``object.__new__``) around a recording context;
``route(event)`` is the method the actor loop calls for each published event. These
expectations were written against the isinstance routing and hold unchanged for the routing
table (:mod:`kafka_actors.actors.routing`).
"""

from __future__ import annotations

import concurrent.futures
import itertools
from types import SimpleNamespace
from typing import Any

import pykka
import pytest

from kafka_actors.actors.context import Routed
from kafka_actors.actors.events import (
    CommitDone,
    PartitionCounts,
    PositionsChangedEvent,
    RefreshMetadataEvent,
    TopicNames,
)
from kafka_actors.actors.managers import (
    CommitActor,
    CoordinatorActor,
    FetchActor,
    MembershipActor,
    MetadataActor,
    OffsetsActor,
)
from kafka_actors.actors.network import UpdateNodes
from kafka_actors.errors import KafkaError
from kafka_actors.log import get_logger
from kafka_actors.protocol.fetch.manager import MetadataRefreshNeeded
from kafka_actors.protocol.group import events as group_events
from kafka_actors.protocol.group.classic import membership as classic
from kafka_actors.protocol.group.coordinator import CoordinatorChanged, CoordinatorErrorEvent
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.metadata import (
    ClusterUpdated,
    MetadataErrorEvent,
    PatternSubscriptionMatched,
    TopicMetadataCompleted,
)
from kafka_actors.protocol.offsets.commit import (
    AutoCommitCompleted,
    CommitCompleted,
    CommitForRevocationDone,
    CommittedOffsetsFetched,
    PositionsInitialized,
)
from kafka_actors.protocol.offsets.list_offsets import (
    ListOffsetsCompleted,
    LookupKind,
    MetadataUpdateNeeded,
    PositionsValidated,
    ResetPositionsError,
)
from kafka_actors.testing import capture_logs

TP = TopicPartition("t", 0)
OFFSETS = {TP: OffsetAndMetadata(5)}


class _Subs:
    def __init__(self, sent: list[tuple[str, Any]]) -> None:
        self.sent = sent
        self.pattern_result: bool | Exception = True
        self.auto_assigned = True

    def subscribe_from_pattern(self, topics: frozenset[str]) -> bool:
        self.sent.append(("subscriptions.subscribe_from_pattern", topics))
        if isinstance(self.pattern_result, Exception):
            raise self.pattern_result
        return self.pattern_result

    def mark_pending_revocation(self, partitions: frozenset[TopicPartition]) -> None:
        self.sent.append(("subscriptions.mark_pending_revocation", partitions))

    def has_auto_assigned_partitions(self) -> bool:
        return self.auto_assigned

    def assigned_partitions(self) -> frozenset[TopicPartition]:
        return frozenset()

    def assign_from_subscribed_awaiting_callback(
        self, assignment: frozenset[TopicPartition], added: frozenset[TopicPartition]
    ) -> None:
        self.sent.append(("subscriptions.assign", assignment))


class _Ctx:
    """Records every tell (target, event), every wake-up of the polling thread and the
    facts the actors leave in the shared context."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []
        self.subscriptions = _Subs(self.sent)
        self.signal = SimpleNamespace(notify=lambda: self.sent.append(("poller", None)))
        self.cluster: Any = None
        self.coordinator_id: int | None = None
        self.member_id: str | None = None
        self.member_epoch: int | None = None
        self.group_metadata: Any = None
        self.safe_commits: Any = None
        self.group_protocol = "consumer"

    def tell(self, name: str, message: Any) -> bool:
        self.sent.append((name, message.event))
        return True


class _Network:
    def __init__(self, sent: list[tuple[str, Any]]) -> None:
        self.sent = sent

    def tell(self, message: Any) -> None:
        self.sent.append(("network", message))


def _actor(cls: type[Any], **fields: Any) -> tuple[Any, _Ctx]:
    ctx = _Ctx()
    actor = object.__new__(cls)
    actor.ctx = ctx
    actor.network = _Network(ctx.sent)
    actor.log = get_logger(cls.component)
    actor.manager = SimpleNamespace(last_committed={TP: OffsetAndMetadata(5)})
    actor.pending = set()
    for name, value in fields.items():
        setattr(actor, name, value)
    return actor, ctx


def _kinds(ctx: _Ctx) -> list[tuple[str, str]]:
    return [(target, type(event).__name__) for target, event in ctx.sent]


class _Cluster:
    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def topic_name(self, topic_id: str) -> str | None:
        return self.names.get(topic_id)


# -- metadata -------------------------------------------------------------------------------------


def _metadata(**fields: Any) -> tuple[Any, _Ctx]:
    defaults: dict[str, Any] = {
        "lookups": {},
        "count_requests": {},
        "names_wanted": frozenset(),
    }
    defaults.update(fields)
    return _actor(MetadataActor, **defaults)


def test_cluster_updated_answers_names_then_goes_to_four_actors_then_wakes_the_poller() -> None:
    actor, ctx = _metadata(names_wanted=frozenset({"id-1", "id-2"}))
    cluster = _Cluster({"id-1": "one"})
    actor.route(ClusterUpdated(cluster))  # type: ignore[arg-type]
    assert ctx.cluster is cluster
    assert _kinds(ctx) == [
        ("membership", "TopicNames"),
        ("membership", "ClusterUpdated"),
        ("commit", "ClusterUpdated"),
        ("fetch", "ClusterUpdated"),
        ("offsets", "ClusterUpdated"),
        ("poller", "NoneType"),
    ]
    assert ctx.sent[0][1].mapping == {"id-1": "one"}
    assert actor.names_wanted == frozenset({"id-2"})


@pytest.mark.parametrize(
    ("result", "expected"),
    [(True, ["membership"]), (False, []), (ValueError("unsubscribed"), [])],
)
def test_pattern_match_goes_to_membership_only_when_the_subscription_changed(
    result: bool | Exception, expected: list[str]
) -> None:
    actor, ctx = _metadata()
    ctx.subscriptions.pattern_result = result
    actor.route(PatternSubscriptionMatched("t.*", frozenset({"t1"})))
    assert [t for t, _ in ctx.sent] == ["subscriptions.subscribe_from_pattern", *expected]


def test_topic_metadata_answers_a_partition_count_request_or_the_caller() -> None:
    actor, ctx = _metadata(count_requests={7: 42})
    result: Any = {"a": ("p0", "p1"), "b": ()}
    actor.route(TopicMetadataCompleted(7, result=result))
    assert _kinds(ctx) == [("membership", "PartitionCounts")]
    counts = ctx.sent[0][1]
    assert (counts.request_id, counts.counts) == (42, {"a": 2})

    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    failing: concurrent.futures.Future[Any] = concurrent.futures.Future()
    actor, ctx = _metadata(lookups={1: future, 2: failing})
    actor.route(TopicMetadataCompleted(1, result=result))
    error = KafkaError("boom")
    actor.route(TopicMetadataCompleted(2, error=error))
    actor.route(TopicMetadataCompleted(3, result=result))  # nobody waits: nothing
    assert future.result(0) == result
    assert failing.exception(0) is error
    assert ctx.sent == []


def test_metadata_error_goes_to_the_facade() -> None:
    actor, ctx = _metadata()
    actor.route(MetadataErrorEvent(KafkaError("x")))
    assert _kinds(ctx) == [("facade", "MetadataErrorEvent")]


# -- coordinator ----------------------------------------------------------------------------------


def test_coordinator_found_is_told_to_the_network_then_membership_and_commit() -> None:
    actor, ctx = _actor(CoordinatorActor)
    event = CoordinatorChanged(3, "localhost", 9092, reason="discovered")
    actor.route(event)
    assert _kinds(ctx) == [
        ("network", "UpdateNodes"),
        ("membership", "CoordinatorChanged"),
        ("commit", "CoordinatorChanged"),
    ]
    assert ctx.sent[0][1] == UpdateNodes(((event.connection_id, "localhost", 9092),))
    assert ctx.coordinator_id == event.connection_id

    ctx.sent.clear()
    actor.route(CoordinatorChanged(None, reason="lost"))
    assert ctx.coordinator_id is None
    assert _kinds(ctx) == [("membership", "CoordinatorChanged"), ("commit", "CoordinatorChanged")]


class _DeadNetwork:
    """A NetworkActor that stopped (the consumer closing) or one that fails otherwise."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def tell(self, message: Any) -> None:
        raise self.error


def test_coordinator_found_with_the_network_gone_is_logged_and_still_routed() -> None:
    actor, ctx = _actor(CoordinatorActor, network=_DeadNetwork(pykka.ActorDeadError("gone")))
    event = CoordinatorChanged(3, "localhost", 9092, reason="discovered")
    with capture_logs() as logs:
        actor.route(event)
    assert [(e["event"], e["log_level"]) for e in logs] == [("network_gone", "debug")]
    assert logs[0]["update"] == "coordinator_address"
    assert (logs[0]["node"], logs[0]["connection"]) == (3, event.connection_id)
    assert ctx.coordinator_id == event.connection_id
    assert _kinds(ctx) == [("membership", "CoordinatorChanged"), ("commit", "CoordinatorChanged")]


def test_coordinator_found_with_a_failing_network_is_not_swallowed() -> None:
    actor, ctx = _actor(CoordinatorActor, network=_DeadNetwork(RuntimeError("broken")))
    with pytest.raises(RuntimeError, match="broken"):
        actor.route(CoordinatorChanged(3, "localhost", 9092, reason="discovered"))
    assert ctx.sent == []


def test_coordinator_error_goes_to_the_facade() -> None:
    actor, ctx = _actor(CoordinatorActor)
    actor.route(CoordinatorErrorEvent(KafkaError("x")))
    assert _kinds(ctx) == [("facade", "CoordinatorErrorEvent")]


# -- membership -----------------------------------------------------------------------------------


def _membership() -> tuple[Any, _Ctx]:
    return _actor(MembershipActor, leaves=[])


def test_pause_fetching_marks_the_subscription_then_goes_to_fetch() -> None:
    actor, ctx = _membership()
    actor.route(group_events.PauseFetching(frozenset({TP})))
    assert _kinds(ctx) == [
        ("subscriptions.mark_pending_revocation", "frozenset"),
        ("fetch", "PauseFetching"),
    ]


def test_assignment_is_applied_then_goes_to_metadata_fetch_offsets_then_wakes_the_poller() -> None:
    actor, ctx = _membership()
    actor.route(group_events.AssignmentChanged(frozenset({TP})))
    assert [t for t, _ in ctx.sent] == [
        "subscriptions.assign",
        "metadata",
        "fetch",
        "offsets",
        "poller",
    ]


def test_member_epoch_is_remembered_then_goes_to_commit() -> None:
    actor, ctx = _membership()
    actor.route(group_events.MemberEpochChanged("m-1", 4))
    assert (ctx.member_id, ctx.member_epoch) == ("m-1", 4)
    assert _kinds(ctx) == [("commit", "MemberEpochChanged")]


@pytest.mark.parametrize(
    ("event", "target"),
    [
        (group_events.CommitBeforeRevocation(frozenset({TP}), 100, 1), "commit"),
        (group_events.InvokeRevoked(frozenset({TP}), 1), "facade"),
        (group_events.InvokeAssigned(frozenset({TP}), frozenset({TP}), 2), "facade"),
        (group_events.InvokeLost(frozenset({TP}), 3), "facade"),
        (group_events.NeedTopicNames(frozenset({"id"})), "metadata"),
        (classic.NeedPartitionCounts(frozenset({"t"}), 9), "metadata"),
        (group_events.CoordinatorUnknown("gone"), "coordinator"),
        (group_events.ErrorEvent(KafkaError("x"), fatal=True), "facade"),
    ],
)
def test_membership_forwards(event: Any, target: str) -> None:
    actor, ctx = _membership()
    actor.route(event)
    assert ctx.sent == [(target, event)]


def test_leave_completed_completes_every_waiting_leave() -> None:
    actor, ctx = _membership()
    futures: list[concurrent.futures.Future[Any]] = [concurrent.futures.Future() for _ in range(2)]
    actor.leaves = list(futures)
    event = group_events.LeaveCompleted()
    actor.route(event)
    assert [f.result(0) for f in futures] == [event, event]
    assert actor.leaves == []
    assert ctx.sent == []


# -- commit ---------------------------------------------------------------------------------------


class _Safe:
    def __init__(self, sent: list[tuple[str, Any]]) -> None:
        self.sent = sent

    def committed(self, offsets: Any) -> None:
        self.sent.append(("safe_commits", offsets))


def _commit(**waiting: concurrent.futures.Future[Any]) -> tuple[Any, _Ctx]:
    actor, ctx = _actor(
        CommitActor, waiting={int(k[1:]): f for k, f in waiting.items()}, _keys=itertools.count(9)
    )
    ctx.safe_commits = _Safe(ctx.sent)
    return actor, ctx


def test_commit_completed_notes_the_safe_commit_and_completes_the_caller() -> None:
    ok: concurrent.futures.Future[Any] = concurrent.futures.Future()
    failed: concurrent.futures.Future[Any] = concurrent.futures.Future()
    actor, ctx = _commit(k1=ok, k2=failed)
    actor.route(CommitCompleted(1, OFFSETS, None))
    error = KafkaError("x")
    actor.route(CommitCompleted(2, OFFSETS, error))
    assert ok.result(0) == OFFSETS
    assert failed.exception(0) is error
    assert [t for t, _ in ctx.sent] == ["safe_commits"]  # only a successful commit counts


def test_committed_offsets_complete_the_caller() -> None:
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    actor, ctx = _commit(k1=future)
    actor.route(CommittedOffsetsFetched(1, OFFSETS, None))
    assert future.result(0) == OFFSETS
    assert ctx.sent == []


@pytest.mark.parametrize(
    ("seeked", "reset", "expected"),
    [
        ({}, frozenset(), ["poller"]),
        ({}, frozenset({TP}), ["offsets", "poller"]),
        (OFFSETS, frozenset(), ["offsets", "fetch", "poller"]),
    ],
)
def test_positions_initialized_go_to_offsets_and_fetch_before_the_caller(
    seeked: Any, reset: frozenset[TopicPartition], expected: list[str]
) -> None:
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    actor, ctx = _commit(k1=future)
    seen_when_sent: list[bool] = []

    def notify() -> None:
        ctx.sent.append(("poller", None))
        seen_when_sent.append(future.done())

    ctx.signal.notify = notify
    tell = ctx.tell

    def tell_checking(name: str, message: Any) -> bool:
        seen_when_sent.append(future.done())
        return tell(name, message)

    ctx.tell = tell_checking  # type: ignore[method-assign]
    event = PositionsInitialized(1, seeked, reset, None)
    actor.route(event)
    assert [t for t, _ in ctx.sent] == expected
    assert future.result(0) is event
    # the other actors hear of the positions before the caller is answered; the poller after
    assert seen_when_sent == [False] * (len(expected) - 1) + [True]


def test_commit_before_revocation_done_goes_to_membership_as_commit_done() -> None:
    actor, ctx = _commit()
    actor.route(CommitForRevocationDone(5, None))
    assert [(t, type(e).__name__) for t, e in ctx.sent] == [
        ("safe_commits", "dict"),
        ("membership", "CommitDone"),
    ]
    done = ctx.sent[1][1]
    assert (done.commit_id, done.error) == (5, None)


def test_auto_commit_completed_is_only_noted() -> None:
    actor, ctx = _commit()
    actor.route(AutoCommitCompleted(OFFSETS, None))
    actor.route(AutoCommitCompleted(OFFSETS, KafkaError("x")))
    assert [t for t, _ in ctx.sent] == ["safe_commits"]


def test_commit_coordinator_unknown_goes_to_the_coordinator() -> None:
    actor, ctx = _commit()
    event = group_events.CoordinatorUnknown("not coordinator")
    actor.route(event)
    assert ctx.sent == [("coordinator", event)]


# -- offsets --------------------------------------------------------------------------------------


def test_list_offsets_complete_the_caller() -> None:
    times: concurrent.futures.Future[Any] = concurrent.futures.Future()
    ends: concurrent.futures.Future[Any] = concurrent.futures.Future()
    actor, ctx = _actor(
        OffsetsActor, lookups={1: (LookupKind.TIMES, times), 2: (LookupKind.END, ends)}
    )
    actor.route(ListOffsetsCompleted(1, LookupKind.TIMES, result={TP: None}))
    actor.route(ListOffsetsCompleted(2, LookupKind.END, result={TP: None}))
    actor.route(ListOffsetsCompleted(3, LookupKind.END, result={TP: None}))  # nobody waits
    assert times.result(0) == {TP: None}
    assert ends.result(0) == {TP: None}
    assert ctx.sent == []


def test_offsets_forwards() -> None:
    actor, ctx = _actor(OffsetsActor, lookups={})
    needed = MetadataUpdateNeeded("leaders", frozenset({"t"}))
    error = ResetPositionsError(KafkaError("x"))
    actor.route(needed)
    actor.route(error)
    actor.route(PositionsValidated((TP,)))
    assert ctx.sent[:2] == [("metadata", needed), ("facade", error)]
    assert _kinds(ctx)[2:] == [("fetch", "PositionsChangedEvent"), ("poller", "NoneType")]
    assert ctx.sent[2][1] == PositionsChangedEvent()


# -- fetch ----------------------------------------------------------------------------------------


def test_fetch_refresh_needed_goes_to_metadata_as_a_refresh() -> None:
    actor, ctx = _actor(FetchActor)
    actor.route(MetadataRefreshNeeded("no known leader", (TP,)))
    assert ctx.sent == [("metadata", RefreshMetadataEvent("no known leader"))]


# -- the receiving end: what each actor does with an event routed to it ---------------------------


class _Recorder:
    """A manager that records the calls an actor makes on it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.cluster = _Cluster({"id-1": "one"})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def record(*args: Any, **kwargs: Any) -> int:
            self.calls.append((name, args + tuple(sorted(kwargs.items()))))
            return 77

        return record


class _ClassicRecorder(classic.ClassicMembershipManager):
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def on_partition_counts(self, request_id: int | None, counts: Any) -> None:
        self.calls.append(("on_partition_counts", (request_id, dict(counts))))

    def subscribe(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("subscribe", args))


def _receiving(cls: type[Any], manager: Any = None, **fields: Any) -> tuple[Any, Any, _Ctx]:
    actor, ctx = _actor(cls, **fields)
    actor.manager = _Recorder() if manager is None else manager
    ctx.config = SimpleNamespace(default_api_timeout_ms=1000)  # type: ignore[attr-defined]
    return actor, actor.manager, ctx


def _deliver(actor: Any, event: Any, now_ms: int = 50) -> Any:
    return actor.handle(Routed(event, "test"), now_ms)


def test_metadata_receives() -> None:
    actor, manager, ctx = _receiving(
        MetadataActor, lookups={}, count_requests={}, names_wanted=frozenset()
    )
    _deliver(actor, group_events.NeedTopicNames(frozenset({"id-1"})))
    assert manager.calls == []  # known: answered at once
    assert ctx.sent[0][0] == "membership"
    assert ctx.sent[0][1].mapping == {"id-1": "one"}
    _deliver(actor, group_events.NeedTopicNames(frozenset({"id-9"})))
    _deliver(actor, classic.NeedPartitionCounts(frozenset({"t"}), 5))
    _deliver(actor, group_events.AssignmentChanged(frozenset({TP})))
    _deliver(actor, RefreshMetadataEvent("fetch said so"))
    _deliver(actor, MetadataUpdateNeeded("leaders", frozenset({"u"})))
    _deliver(actor, MetadataUpdateNeeded("stale"))
    assert manager.calls == [
        ("resolve_topic_ids", (frozenset({"id-9"}),)),  # an all-topics request names it
        ("fetch_topic_metadata", (frozenset({"t"}), 1050, 50)),
        ("set_assigned_topics", ({"t"},)),
        ("request_update", ("fetch said so",)),
        ("fetch_topic_metadata", (frozenset({"u"}), 1050, 50)),
        ("request_update", ("stale",)),
    ]
    assert actor.count_requests == {77: 5}
    assert actor.names_wanted == frozenset({"id-9"})


def test_coordinator_receives() -> None:
    actor, manager, _ = _receiving(CoordinatorActor)
    _deliver(actor, group_events.CoordinatorUnknown("not coordinator"))
    assert manager.calls == [("mark_coordinator_unknown", ("not coordinator", 50))]


def test_membership_receives() -> None:
    actor, manager, ctx = _receiving(MembershipActor, leaves=[])
    _deliver(actor, CoordinatorChanged(1, "h", 1))
    _deliver(actor, CoordinatorChanged(None))
    _deliver(actor, TopicNames({"id-1": "one"}))
    _deliver(actor, ClusterUpdated(_Cluster({})))  # type: ignore[arg-type]
    _deliver(actor, PatternSubscriptionMatched("t.*", frozenset({"t1"})))
    _deliver(actor, CommitDone(3, None))
    assert manager.calls == [
        ("on_coordinator_discovered", (50,)),
        ("on_coordinator_unknown", (50,)),
        ("on_topic_names", ({"id-1": "one"},)),
        ("on_commit_done", (3, None)),
    ]
    classic_manager = _ClassicRecorder()
    actor, _, ctx = _receiving(MembershipActor, classic_manager, leaves=[])
    ctx.group_protocol = "classic"
    cluster = SimpleNamespace(topics={"t": SimpleNamespace(partitions=(1, 2))})
    _deliver(actor, ClusterUpdated(cluster))  # type: ignore[arg-type]
    _deliver(actor, PartitionCounts(4, {"t": 3}))
    _deliver(actor, PatternSubscriptionMatched("t.*", frozenset({"t1"})))
    assert classic_manager.calls == [
        ("on_partition_counts", (None, {"t": 2})),
        ("on_partition_counts", (4, {"t": 3})),
        ("subscribe", (frozenset({"t1"}),)),
    ]
    assert ctx.sent == []


def test_commit_receives() -> None:
    actor, manager, ctx = _receiving(CommitActor, waiting={}, _keys=itertools.count(1))
    ctx.coordinator_id = 2147483646
    epoch = group_events.MemberEpochChanged("m", 2)
    before = group_events.CommitBeforeRevocation(frozenset({TP}), 100, 1)
    cluster = SimpleNamespace(topic_ids=lambda: {"t": "id-1"})
    _deliver(actor, CoordinatorChanged(1, "h", 1))
    _deliver(actor, CoordinatorChanged(None))
    _deliver(actor, epoch)
    _deliver(actor, before)
    _deliver(actor, ClusterUpdated(cluster))  # type: ignore[arg-type]
    assert manager.calls == [
        ("on_coordinator_changed", (2147483646,)),
        ("on_coordinator_changed", (None,)),
        ("on_member_epoch_changed", (epoch,)),
        ("on_commit_before_revocation", (before,)),
        ("on_topic_ids", ({"t": "id-1"},)),
    ]


@pytest.mark.parametrize("cls", [OffsetsActor, FetchActor])
def test_offsets_and_fetch_receive_the_cluster_and_poll_on_the_rest(cls: type[Any]) -> None:
    actor, manager, ctx = _receiving(cls, lookups={})
    cluster: Any = _Cluster({})
    _deliver(actor, ClusterUpdated(cluster))
    _deliver(actor, group_events.AssignmentChanged(frozenset({TP})))
    _deliver(actor, PositionsInitialized(1, OFFSETS, frozenset(), None))
    if cls is FetchActor:
        _deliver(actor, group_events.PauseFetching(frozenset({TP})))
        _deliver(actor, PositionsChangedEvent())
    assert manager.calls == [("on_cluster_updated", (cluster,))]
    assert ctx.sent == []
