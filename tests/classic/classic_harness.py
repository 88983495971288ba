"""Test harness for the pure classic membership manager.

A manual clock, fabricated kio JoinGroup/SyncGroup/Heartbeat/LeaveGroup responses (newest
versions), a driver for one manager, and :class:`FakeCoordinator`: a tiny in-memory classic group
coordinator (the broker side of the protocol, simplified) that runs the group over several
managers, so the JoinGroup metadata the leader assigns from comes from the managers themselves.
"""

from __future__ import annotations

import datetime
import itertools
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4 import response as hb_resp
from kio.schema.join_group.v9 import request as join_req
from kio.schema.join_group.v9 import response as join_resp
from kio.schema.leave_group.v5 import request as leave_req
from kio.schema.leave_group.v5 import response as leave_resp
from kio.schema.sync_group.v5 import request as sync_req
from kio.schema.sync_group.v5 import response as sync_resp
from kio.static.primitive import i32, i32Timedelta

from kafka_actors.protocol.group.classic.assignors import (
    Assignment,
    encode_assignment,
    select_group_protocol,
)
from kafka_actors.protocol.group.classic.membership import (
    ClassicMembershipConfig,
    ClassicMembershipManager,
    ClassicMemberState,
    NeedPartitionCounts,
)
from kafka_actors.protocol.group.consumer.membership import (
    CommitBeforeRevocation,
    InvokeAssigned,
    InvokeLost,
    InvokeRevoked,
)
from kafka_actors.protocol.messages import PollResult, TopicPartition, UnsentRequest

NONE = 0
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
GROUP_AUTHORIZATION_FAILED = 30
UNSUPPORTED_VERSION = 35
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82

_ZERO = i32Timedelta.parse(datetime.timedelta(0))


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def tps(*items: tuple[str, int]) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(t, p) for t, p in items)


def _code(error: int) -> Any:
    return ErrorCode(error) if error in ErrorCode._value2member_map_ else error


def join_response(
    *,
    error: int = NONE,
    generation: int = 1,
    member_id: str = "m-1",
    leader: str = "m-0",
    protocol: str | None = "range",
    protocol_type: str | None = "consumer",
    members: Sequence[tuple[str, str | None, bytes]] = (),
    skip_assignment: bool = False,
) -> Any:
    return join_resp.JoinGroupResponse(
        throttle_time=_ZERO,
        error_code=_code(error),
        generation_id=i32(generation),
        protocol_type=protocol_type,
        protocol_name=protocol,
        leader=leader,
        skip_assignment=skip_assignment,
        member_id=member_id,
        members=tuple(
            join_resp.JoinGroupResponseMember(
                member_id=m, group_instance_id=instance, metadata=metadata
            )
            for m, instance, metadata in members
        ),
    )


def sync_response(
    partitions: Iterable[TopicPartition] = (),
    *,
    error: int = NONE,
    protocol: str | None = "range",
    protocol_type: str | None = "consumer",
    raw: bytes | None = None,
) -> Any:
    data = raw if raw is not None else encode_assignment(Assignment(tuple(sorted(partitions))))
    return sync_resp.SyncGroupResponse(
        throttle_time=_ZERO,
        error_code=_code(error),
        protocol_type=protocol_type,
        protocol_name=protocol,
        assignment=data if error == NONE else b"",
    )


def heartbeat_response(error: int = NONE) -> Any:
    return hb_resp.HeartbeatResponse(throttle_time=_ZERO, error_code=_code(error))


def leave_response(error: int = NONE, members: Sequence[str] = ()) -> Any:
    return leave_resp.LeaveGroupResponse(
        throttle_time=_ZERO,
        error_code=_code(error),
        members=tuple(
            leave_resp.MemberResponse(member_id=m, group_instance_id=None, error_code=ErrorCode(0))
            for m in members
        ),
    )


def make_config(**overrides: Any) -> ClassicMembershipConfig:
    values: dict[str, Any] = {
        "group_id": "group-1",
        "session_timeout_ms": 10_000,
        "heartbeat_interval_ms": 3_000,
        "rebalance_timeout_ms": 60_000,
        "assignors": ("range",),
        "auto_commit_enabled": False,
        "retry_backoff_ms": 100,
        "retry_backoff_max_ms": 1_000,
    }
    values.update(overrides)
    return ClassicMembershipConfig(**values)


class Driver:
    """Drives one manager with a manual ``now``; records requests and events."""

    def __init__(self, *, coordinator: bool = True, seed: int = 7, **config: Any) -> None:
        self.config = make_config(**config)
        self.rng = random.Random(seed)
        self.m = ClassicMembershipManager(self.config, random=self.rng.random)
        self.now = 0
        self.events: list[Any] = []
        self.last: PollResult | None = None
        self.unclaimed: list[UnsentRequest] = []  # requests polled but not taken by one()/none()
        self._handled: set[tuple[str, int]] = set()
        if coordinator:
            self.m.on_coordinator_discovered(self.now)

    def advance(self, delta_ms: int) -> None:
        self.now += delta_ms

    def state(self) -> ClassicMemberState:
        """The manager's state (a call, so type checkers do not narrow it across inputs)."""
        return self.m.state

    def poll(self) -> PollResult:
        result = self.m.poll(self.now)
        self.events.extend(result.events)
        self.unclaimed.extend(result.requests)
        self.last = result
        return result

    def requests(self) -> list[UnsentRequest]:
        """Poll; every request due (including ones polled earlier and not taken)."""
        self.poll()
        requests, self.unclaimed = self.unclaimed, []
        return requests

    def one(self, kind: type | None = None) -> UnsentRequest:
        """Poll; exactly one request must be due (of the given kio request class)."""
        requests = self.requests()
        assert len(requests) == 1, (requests, self.last)
        request = requests[0]
        if kind is not None:
            assert isinstance(request.request, kind), request.request
        return request

    def none(self) -> PollResult:
        result = self.poll()
        assert self.unclaimed == [], (self.unclaimed, result)
        return result

    def respond(self, request: UnsentRequest, response: Any) -> None:
        self.m.on_response(request.request_id, response, self.now)

    def fail(self, request: UnsentRequest, error: BaseException) -> None:
        self.m.on_failure(request.request_id, error, self.now)

    def of(self, cls: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]

    def take(self) -> list[Any]:
        self.poll()
        events, self.events = self.events, []
        return events

    def complete_callbacks(self, error: BaseException | None = None) -> list[Any]:
        """Complete every Invoke* and commit event until none is outstanding; return them."""
        handled: list[Any] = []
        while True:
            self.poll()
            pending: list[tuple[tuple[str, int], Any]] = []
            for e in self.events:
                if isinstance(e, CommitBeforeRevocation):
                    key = ("commit", e.commit_id)
                elif isinstance(e, (InvokeAssigned, InvokeLost, InvokeRevoked)):
                    key = ("callback", e.callback_id)
                else:
                    continue
                if key not in self._handled:
                    pending.append((key, e))
            if not pending:
                return handled
            for key, e in pending:
                self._handled.add(key)
                handled.append(e)
                if isinstance(e, CommitBeforeRevocation):
                    self.m.on_commit_done(e.commit_id)
                else:
                    self.m.on_callback_completed(e.callback_id, error)

    # -- scenarios ----------------------------------------------------------------------------

    def join_request(self, *topics: str) -> UnsentRequest:
        self.m.subscribe(topics or ("a",))
        self.m.on_poll(self.now)
        return self.one(join_req.JoinGroupRequest)

    def stable_follower(
        self,
        partitions: Iterable[TopicPartition],
        *,
        topics: Sequence[str] = ("a",),
        generation: int = 1,
        member_id: str = "m-1",
        protocol: str = "range",
    ) -> None:
        """Join as a follower and sync ``partitions``; callbacks done: STABLE."""
        join = self.join_request(*topics)
        self.respond(
            join,
            join_response(generation=generation, member_id=member_id, protocol=protocol),
        )
        sync = self.one(sync_req.SyncGroupRequest)
        self.respond(sync, sync_response(partitions, protocol=protocol))
        self.complete_callbacks()
        self.events.clear()


# -- a fake classic group coordinator ----------------------------------------------------------


@dataclass
class _GroupMember:
    member_id: str
    instance_id: str | None
    protocols: list[tuple[str, bytes]] = field(default_factory=list)
    assignment: bytes = b""


@dataclass
class _Held:
    """A request the coordinator holds until the group moves on."""

    client: str
    request: UnsentRequest


class FakeCoordinator:
    """A simplified classic group coordinator for several managers (one group).

    States: Empty, PreparingRebalance (waits until every known member has rejoined),
    CompletingRebalance (waits for the leader's SyncGroup), Stable. Heartbeats answer
    REBALANCE_IN_PROGRESS while preparing a rebalance, ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID
    for stale members. New dynamic members get MEMBER_ID_REQUIRED first (JoinGroup v4+).
    """

    def __init__(self) -> None:
        self.state = "Empty"
        self.generation = 0
        self.members: dict[str, _GroupMember] = {}
        self.pending_ids: set[str] = set()
        self.leader: str | None = None
        self.protocol: str | None = None
        self.joins: dict[str, _Held] = {}
        self.syncs: dict[str, _Held] = {}
        self.outbox: list[tuple[str, UnsentRequest, Any]] = []
        self.log: list[str] = []
        self._ids = itertools.count(1)

    def _reply(self, held: _Held, response: Any) -> None:
        self.outbox.append((held.client, held.request, response))

    def handle(self, client: str, request: UnsentRequest) -> None:
        payload = request.request
        held = _Held(client, request)
        if isinstance(payload, join_req.JoinGroupRequest):
            self._join(held, payload)
        elif isinstance(payload, sync_req.SyncGroupRequest):
            self._sync(held, payload)
        elif isinstance(payload, leave_req.LeaveGroupRequest):
            for identity in payload.members:
                self.log.append(f"leave {identity.member_id}")
                self._remove(identity.member_id)
            self._reply(held, leave_response(members=[m.member_id for m in payload.members]))
        else:  # Heartbeat
            member_id = payload.member_id
            if member_id not in self.members:
                error = UNKNOWN_MEMBER_ID
            elif int(payload.generation_id) != self.generation:
                error = ILLEGAL_GENERATION
            elif self.state == "PreparingRebalance":
                error = REBALANCE_IN_PROGRESS
            else:
                error = NONE
            self._reply(held, heartbeat_response(error))

    def _join(self, held: _Held, payload: Any) -> None:
        member_id = payload.member_id
        instance = payload.group_instance_id
        if not member_id and instance is None:
            new_id = f"{held.client}-{next(self._ids)}"
            self.pending_ids.add(new_id)
            self.log.append(f"member-id-required {new_id}")
            self._reply(held, join_response(error=MEMBER_ID_REQUIRED, member_id=new_id, members=()))
            return
        if not member_id:  # static member joining without a member id
            existing = [m for m in self.members.values() if m.instance_id == instance]
            member_id = existing[0].member_id if existing else f"{held.client}-{next(self._ids)}"
            self.pending_ids.add(member_id)
        if member_id not in self.members and member_id not in self.pending_ids:
            self._reply(held, join_response(error=UNKNOWN_MEMBER_ID, member_id=member_id))
            return
        self.pending_ids.discard(member_id)
        member = self.members.setdefault(member_id, _GroupMember(member_id, instance))
        member.protocols = [(p.name, p.metadata) for p in payload.protocols]
        self.joins[member_id] = held
        self.log.append(f"join {member_id}")
        if self.state in ("Empty", "Stable", "CompletingRebalance"):
            self._prepare_rebalance()
        self._maybe_complete_join()

    def _prepare_rebalance(self) -> None:
        self.state = "PreparingRebalance"
        # Members waiting in SyncGroup learn of the new rebalance.
        for member_id, held in list(self.syncs.items()):
            self._reply(held, sync_response(error=REBALANCE_IN_PROGRESS))
            del self.syncs[member_id]

    def _maybe_complete_join(self) -> None:
        if self.state != "PreparingRebalance" or not self.members:
            return
        if set(self.joins) != set(self.members):
            return
        self.generation += 1
        self.protocol = select_group_protocol(
            {m: [name for name, _ in self.members[m].protocols] for m in self.members}
        )
        if self.leader not in self.members:
            self.leader = next(iter(self.joins))
        self.state = "CompletingRebalance"
        self.log.append(f"generation {self.generation} leader {self.leader}")
        for member_id, held in self.joins.items():
            members: list[tuple[str, str | None, bytes]] = []
            if member_id == self.leader:
                for m in self.members.values():
                    metadata = dict(m.protocols)[self.protocol]
                    members.append((m.member_id, m.instance_id, metadata))
            self._reply(
                held,
                join_response(
                    generation=self.generation,
                    member_id=member_id,
                    leader=self.leader or "",
                    protocol=self.protocol,
                    members=members,
                ),
            )
        self.joins.clear()

    def _sync(self, held: _Held, payload: Any) -> None:
        member_id = payload.member_id
        if member_id not in self.members:
            self._reply(held, sync_response(error=UNKNOWN_MEMBER_ID))
            return
        if int(payload.generation_id) != self.generation:
            self._reply(held, sync_response(error=ILLEGAL_GENERATION))
            return
        if self.state == "PreparingRebalance":
            self._reply(held, sync_response(error=REBALANCE_IN_PROGRESS))
            return
        if self.state == "Stable":
            self._reply(
                held, sync_response(raw=self.members[member_id].assignment, protocol=self.protocol)
            )
            return
        self.syncs[member_id] = held
        if member_id == self.leader:
            for a in payload.assignments:
                self.members[a.member_id].assignment = a.assignment
            self.state = "Stable"
            self.log.append(f"stable generation {self.generation}")
            for m, h in self.syncs.items():
                self._reply(
                    h, sync_response(raw=self.members[m].assignment, protocol=self.protocol)
                )
            self.syncs.clear()

    def _remove(self, member_id: str) -> None:
        self.members.pop(member_id, None)
        self.joins.pop(member_id, None)
        self.syncs.pop(member_id, None)
        if not self.members:
            self.state = "Empty"
        elif self.state in ("Stable", "CompletingRebalance"):
            self._prepare_rebalance()
        self._maybe_complete_join()


class Group:
    """Several managers (by name) wired to one :class:`FakeCoordinator`.

    ``run`` polls every manager, hands requests to the coordinator, delivers its responses,
    answers NeedPartitionCounts from ``partitions``, and completes callbacks and commits (unless
    ``auto_callbacks`` is off), until nothing moves.
    """

    def __init__(
        self,
        names: Sequence[str],
        partitions: Mapping[str, int],
        *,
        topics: Sequence[str] = ("a",),
        auto_callbacks: bool = True,
        **config: Any,
    ) -> None:
        self.coordinator = FakeCoordinator()
        self.partitions = dict(partitions)
        self.now = 0
        self.auto_callbacks = auto_callbacks
        self.managers: dict[str, ClassicMembershipManager] = {}
        self.events: dict[str, list[Any]] = {}
        self.topics = tuple(topics)
        for index, name in enumerate(names):
            self.add(name, seed=index, **config)

    def add(self, name: str, *, seed: int = 0, **config: Any) -> ClassicMembershipManager:
        manager = ClassicMembershipManager(make_config(**config), random=random.Random(seed).random)
        manager.on_coordinator_discovered(self.now)
        manager.subscribe(self.topics)
        self.managers[name] = manager
        self.events[name] = []
        return manager

    def poll_app(self, *names: str) -> None:
        for name in names or tuple(self.managers):
            self.managers[name].on_poll(self.now)

    def run(
        self, *, max_rounds: int = 200, on_event: Callable[[str, Any], None] | None = None
    ) -> None:
        for _ in range(max_rounds):
            moved = False
            for name, manager in self.managers.items():
                result = manager.poll(self.now)
                self.events[name].extend(result.events)
                for event in result.events:
                    moved = True
                    if on_event is not None:
                        on_event(name, event)
                    if isinstance(event, NeedPartitionCounts):
                        manager.on_partition_counts(event.request_id, self.partitions)
                    elif self.auto_callbacks and isinstance(event, CommitBeforeRevocation):
                        manager.on_commit_done(event.commit_id)
                    elif self.auto_callbacks and isinstance(
                        event, (InvokeAssigned, InvokeRevoked, InvokeLost)
                    ):
                        manager.on_callback_completed(event.callback_id)
                for request in result.requests:
                    moved = True
                    self.coordinator.handle(name, request)
            outbox, self.coordinator.outbox = self.coordinator.outbox, []
            for client, request, response in outbox:
                moved = True
                self.managers[client].on_response(request.request_id, response, self.now)
            if not moved:
                return
        raise AssertionError("the group did not settle")

    def tick(self, delta_ms: int) -> None:
        """Advance time (the application polls every manager) and run."""
        self.now += delta_ms
        self.poll_app()
        self.run()

    def of(self, name: str, cls: type) -> list[Any]:
        return [e for e in self.events[name] if isinstance(e, cls)]

    def clear(self) -> None:
        for events in self.events.values():
            events.clear()
