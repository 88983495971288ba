"""Test harness for the pure KIP-848 membership manager: a manual clock and fabricated responses."""

from __future__ import annotations

import datetime
import random
from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.consumer_group_heartbeat.v1 import response as hb_resp
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta

from kafka_actors.protocol.group.consumer.config import MembershipConfig
from kafka_actors.protocol.group.consumer.membership import ConsumerMembershipManager
from kafka_actors.protocol.messages import PollResult, TopicPartition, UnsentRequest

MEMBER_ID = "member-uuid-0001"
TOPIC_IDS = {
    "a": "0b1a5d6e-0000-4000-8000-00000000000a",
    "b": "0b1a5d6e-0000-4000-8000-00000000000b",
    "c": "0b1a5d6e-0000-4000-8000-00000000000c",
}
NAMES_BY_ID = {topic_id: name for name, topic_id in TOPIC_IDS.items()}


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def tps(*items: tuple[str, int]) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(t, p) for t, p in items)


def ms(delta: datetime.timedelta) -> int:
    return delta // datetime.timedelta(milliseconds=1)


def make_response(
    *,
    error: int = 0,
    message: str | None = None,
    epoch: int = 1,
    interval_ms: int = 5_000,
    assignment: Mapping[str, Iterable[int]] | None = None,
    member_id: str | None = None,
) -> Any:
    """A ConsumerGroupHeartbeat v1 response; ``assignment`` maps topic *names* to partitions."""
    kio_assignment = None
    if assignment is not None:
        import uuid

        kio_assignment = hb_resp.Assignment(
            topic_partitions=tuple(
                hb_resp.TopicPartitions(
                    topic_id=uuid.UUID(TOPIC_IDS[name]),
                    partitions=tuple(i32(p) for p in parts),
                )
                for name, parts in assignment.items()
            )
        )
    return hb_resp.ConsumerGroupHeartbeatResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=ErrorCode(error) if error in ErrorCode._value2member_map_ else error,  # type: ignore[arg-type]
        error_message=message,
        member_id=member_id,
        member_epoch=i32(epoch),
        heartbeat_interval=i32Timedelta.parse(datetime.timedelta(milliseconds=interval_ms)),
        assignment=kio_assignment,
    )


class Harness:
    """Drives one manager with a manual ``now`` and records every request and event."""

    def __init__(
        self,
        *,
        auto_commit: bool = False,
        instance_id: str | None = None,
        version: int = 1,
        rebalance_timeout_ms: int = 300_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        server_assignor: str | None = "uniform",
        rack_id: str | None = None,
        seed: int = 7,
        coordinator: bool = True,
    ) -> None:
        self.config = MembershipConfig(
            group_id="group-1",
            group_instance_id=instance_id,
            rack_id=rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms,
            server_assignor=server_assignor,
            auto_commit_enabled=auto_commit,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            heartbeat_api_version=version,
        )
        self.rng = random.Random(seed)
        self.m = ConsumerMembershipManager(
            self.config, random=self.rng.random, member_id_factory=lambda: MEMBER_ID
        )
        self.now = 0
        self.events: list[Any] = []
        self.requests: list[UnsentRequest] = []
        self.last: PollResult | None = None
        if coordinator:
            self.m.on_coordinator_discovered(self.now)

    # -- driving ---------------------------------------------------------------------------

    def advance(self, delta_ms: int) -> None:
        self.now += delta_ms

    def poll(self) -> PollResult:
        result = self.m.poll(self.now)
        self.events.extend(result.events)
        self.requests.extend(result.requests)
        self.last = result
        return result

    def heartbeat(self) -> UnsentRequest:
        """Poll and return the one heartbeat that must be sent now."""
        result = self.poll()
        assert len(result.requests) == 1, result
        return result.requests[0]

    def no_heartbeat(self) -> PollResult:
        result = self.poll()
        assert result.requests == (), result
        return result

    def respond(self, request: UnsentRequest, **kwargs: Any) -> None:
        self.m.on_response(request.request_id, make_response(**kwargs), self.now)

    def fail(self, request: UnsentRequest, error: BaseException) -> None:
        self.m.on_failure(request.request_id, error, self.now)

    def names(self, *topics: str) -> None:
        self.m.on_topic_names({TOPIC_IDS[t]: t for t in topics})

    def take_events(self) -> list[Any]:
        """Poll, then return (and forget) every event recorded so far."""
        self.poll()
        events, self.events = self.events, []
        return events

    def of(self, cls: type, events: list[Any] | None = None) -> list[Any]:
        return [e for e in (self.events if events is None else events) if isinstance(e, cls)]

    # -- scenarios -------------------------------------------------------------------------

    def join(self, *topics: str) -> UnsentRequest:
        self.m.subscribe(topics or ("a", "b"))
        self.m.on_poll(self.now)
        return self.heartbeat()

    def complete_all_callbacks(self, error: BaseException | None = None) -> None:
        """Complete every Invoke* event (and commit) published until none is outstanding."""
        from kafka_actors.protocol.group.consumer.membership import (
            CommitBeforeRevocation,
            InvokeAssigned,
            InvokeLost,
            InvokeRevoked,
        )

        done: set[int] = set()
        while True:
            self.poll()
            pending = [
                e
                for e in self.events
                if isinstance(e, (InvokeAssigned, InvokeLost, InvokeRevoked))
                and e.callback_id not in done
            ]
            commits = [
                e
                for e in self.events
                if isinstance(e, CommitBeforeRevocation) and -e.commit_id not in done
            ]
            if not pending and not commits:
                return
            for c in commits:
                done.add(-c.commit_id)
                self.m.on_commit_done(c.commit_id)
            for e in pending:
                done.add(e.callback_id)
                self.m.on_callback_completed(e.callback_id, error)

    def stable_with(self, assignment: Mapping[str, Iterable[int]], epoch: int = 1) -> None:
        """Join, receive ``assignment``, run callbacks, send the ack: the member is STABLE."""
        request = self.join(*sorted(assignment) or ("a",))
        self.names(*TOPIC_IDS)
        self.respond(request, epoch=epoch, assignment=assignment)
        self.m.on_poll(self.now)
        self.complete_all_callbacks()
        self.respond(self.ack(), epoch=epoch)
        self.events.clear()

    def ack(self) -> UnsentRequest:
        """The acknowledging heartbeat: sent now, or already sent by an earlier poll."""
        from kafka_actors.protocol.group.consumer.membership import MemberState

        if self.m.state is MemberState.ACKNOWLEDGING:
            return self.heartbeat()
        assert self.m.request_in_flight
        return self.requests[-1]
