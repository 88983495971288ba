"""Test harness for the pure CommitManager: a manual clock, a real SubscriptionState and
fabricated OffsetCommit / OffsetFetch responses (kio payloads)."""

from __future__ import annotations

import datetime
import random
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v9 import response as oc9
from kio.schema.offset_commit.v10 import response as oc10
from kio.schema.offset_fetch.v1 import response as of1
from kio.schema.offset_fetch.v7 import response as of7
from kio.schema.offset_fetch.v9 import response as of9
from kio.schema.offset_fetch.v10 import response as of10
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i32Timedelta, i64

from kafka_actors.protocol.messages import (
    OffsetAndMetadata,
    PollResult,
    TopicPartition,
    UnsentRequest,
)
from kafka_actors.protocol.offsets.commit import CommitManager
from kafka_actors.protocol.offsets.config import CommitConfig
from kafka_actors.protocol.subscription import (
    FetchPosition,
    OffsetResetStrategy,
    SubscriptionState,
)

GROUP = "group-1"
COORDINATOR = 3
MEMBER_ID = "member-0001"
TOPIC_IDS = {
    "a": uuid.UUID("0b1a5d6e-0000-4000-8000-00000000000a"),
    "b": uuid.UUID("0b1a5d6e-0000-4000-8000-00000000000b"),
}
NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def oam(offset: int, epoch: int | None = None, metadata: str = "") -> OffsetAndMetadata:
    return OffsetAndMetadata(offset, metadata, epoch)


def _code(code: int) -> ErrorCode:
    return ErrorCode(code)


def _by_topic(items: Iterable[tuple[TopicPartition, Any]]) -> dict[str, list[tuple[int, Any]]]:
    grouped: dict[str, list[tuple[int, Any]]] = {}
    for key, value in items:
        grouped.setdefault(key.topic, []).append((key.partition, value))
    return grouped


def commit_response(
    request: UnsentRequest, errors: Mapping[TopicPartition, int] | None = None
) -> Any:
    """An OffsetCommit response to ``request`` (v9 by name or v10 by id): every partition it
    carried, with the error code of ``errors`` (0 otherwise)."""
    errors = errors or {}
    body = request.request
    by_id = type(body).__version__ >= 10
    names = {v: k for k, v in TOPIC_IDS.items()}
    entries: list[Any] = []
    for topic in body.topics:
        name = names[topic.topic_id] if by_id else str(topic.name)
        parts = [
            (int(p.partition_index), errors.get(TopicPartition(name, int(p.partition_index)), 0))
            for p in topic.partitions
        ]
        if by_id:
            entries.append(
                oc10.OffsetCommitResponseTopic(
                    topic_id=topic.topic_id,
                    partitions=tuple(
                        oc10.OffsetCommitResponsePartition(
                            partition_index=i32(i), error_code=_code(c)
                        )
                        for i, c in parts
                    ),
                )
            )
        else:
            entries.append(
                oc9.OffsetCommitResponseTopic(
                    name=TopicName(name),
                    partitions=tuple(
                        oc9.OffsetCommitResponsePartition(
                            partition_index=i32(i), error_code=_code(c)
                        )
                        for i, c in parts
                    ),
                )
            )
    if by_id:
        return oc10.OffsetCommitResponse(throttle_time=NO_THROTTLE, topics=tuple(entries))
    return oc9.OffsetCommitResponse(throttle_time=NO_THROTTLE, topics=tuple(entries))


def fetch_response(
    committed: Mapping[TopicPartition, OffsetAndMetadata | None],
    *,
    version: int = 9,
    group_error: int = 0,
    partition_errors: Mapping[TopicPartition, int] | None = None,
    group_id: str = GROUP,
) -> Any:
    """An OffsetFetch response at ``version`` (1, 7, 9 or 10): -1 for None offsets."""
    partition_errors = partition_errors or {}
    keys = list(committed) + [k for k in partition_errors if k not in committed]
    grouped = _by_topic((k, committed.get(k)) for k in keys)

    def part(mod: Any, cls: str, index: int, topic: str, value: OffsetAndMetadata | None) -> Any:
        kwargs: dict[str, Any] = {
            "partition_index": i32(index),
            "committed_offset": i64(-1 if value is None else value.offset),
            "metadata": None if value is None else value.metadata,
            "error_code": _code(partition_errors.get(TopicPartition(topic, index), 0)),
        }
        if version >= 5:
            epoch = -1 if value is None or value.leader_epoch is None else value.leader_epoch
            kwargs["committed_leader_epoch"] = i32(epoch)
        return getattr(mod, cls)(**kwargs)

    if version == 1:
        return of1.OffsetFetchResponse(
            topics=tuple(
                of1.OffsetFetchResponseTopic(
                    name=TopicName(t),
                    partitions=tuple(
                        part(of1, "OffsetFetchResponsePartition", i, t, v) for i, v in ps
                    ),
                )
                for t, ps in grouped.items()
            )
        )
    if version == 7:
        return of7.OffsetFetchResponse(
            throttle_time=NO_THROTTLE,
            topics=tuple(
                of7.OffsetFetchResponseTopic(
                    name=TopicName(t),
                    partitions=tuple(
                        part(of7, "OffsetFetchResponsePartition", i, t, v) for i, v in ps
                    ),
                )
                for t, ps in grouped.items()
            ),
            error_code=_code(group_error),
        )
    mod: Any = of10 if version >= 10 else of9
    topics = []
    for t, ps in grouped.items():
        ref: dict[str, Any] = (
            {"topic_id": TOPIC_IDS[t]} if version >= 10 else {"name": TopicName(t)}
        )
        topics.append(
            mod.OffsetFetchResponseTopics(
                **ref,
                partitions=tuple(
                    part(mod, "OffsetFetchResponsePartitions", i, t, v) for i, v in ps
                ),
            )
        )
    return mod.OffsetFetchResponse(
        throttle_time=NO_THROTTLE,
        groups=(
            mod.OffsetFetchResponseGroup(
                group_id=GroupId(group_id), topics=tuple(topics), error_code=_code(group_error)
            ),
        ),
    )


def request_offsets(request: UnsentRequest) -> dict[TopicPartition, OffsetAndMetadata]:
    """The offsets an OffsetCommit request carries (v9 by name)."""
    names = {v: k for k, v in TOPIC_IDS.items()}
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    for topic in request.request.topics:
        name = str(topic.name) if hasattr(topic, "name") else names[topic.topic_id]
        for p in topic.partitions:
            epoch = int(p.committed_leader_epoch)
            out[TopicPartition(name, int(p.partition_index))] = OffsetAndMetadata(
                int(p.committed_offset), p.committed_metadata or "", None if epoch < 0 else epoch
            )
    return out


def fetch_partitions(request: UnsentRequest) -> set[TopicPartition]:
    body = request.request
    topics = body.groups[0].topics if hasattr(body, "groups") else body.topics
    names = {v: k for k, v in TOPIC_IDS.items()}
    out: set[TopicPartition] = set()
    for topic in topics:
        name = str(topic.name) if hasattr(topic, "name") else names[topic.topic_id]
        out.update(TopicPartition(name, int(i)) for i in topic.partition_indexes)
    return out


class Harness:
    """One CommitManager with a manual ``now``; records every request and event."""

    def __init__(
        self,
        *,
        auto_commit: bool = False,
        interval_ms: int = 5_000,
        protocol: str = "consumer",
        commit_version: int = 9,
        fetch_version: int = 9,
        seed: int = 11,
        coordinator: int | None = COORDINATOR,
        reset: str = "earliest",
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
    ) -> None:
        self.config = CommitConfig(
            group_id=GROUP,
            group_protocol=protocol,
            auto_commit_enabled=auto_commit,
            auto_commit_interval_ms=interval_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            offset_commit_version=commit_version,
            offset_fetch_version=fetch_version,
        )
        self.subs = SubscriptionState(OffsetResetStrategy.of(reset))
        self.rng = random.Random(seed)
        self.m = CommitManager(self.config, self.subs, random=self.rng.random, client_id="c-1")
        self.now = 1_000
        self.events: list[Any] = []
        self.last: PollResult | None = None
        if coordinator is not None:
            self.m.on_coordinator_changed(coordinator)

    # -- subscription setup --------------------------------------------------------------------

    def own(self, positions: Mapping[TopicPartition, int | tuple[int, int]]) -> None:
        """Assign these partitions (user assignment) at these positions (offset or
        (offset, epoch))."""
        self.subs.assign_from_user(positions)
        for key, value in positions.items():
            offset, epoch = value if isinstance(value, tuple) else (value, None)
            self.subs.seek(key, FetchPosition(offset, epoch))

    # -- driving -------------------------------------------------------------------------------

    def advance(self, delta_ms: int) -> None:
        self.now += delta_ms

    def poll(self) -> PollResult:
        result = self.m.poll(self.now)
        self.events.extend(result.events)
        self.last = result
        return result

    def send(self) -> UnsentRequest:
        """Poll; exactly one request must go out now."""
        result = self.poll()
        assert len(result.requests) == 1, result
        return result.requests[0]

    def nothing_sent(self) -> PollResult:
        result = self.poll()
        assert result.requests == (), result
        return result

    def ok(
        self, request: UnsentRequest, errors: Mapping[TopicPartition, int] | None = None
    ) -> None:
        self.m.on_response(request.request_id, commit_response(request, errors), self.now)

    def answer(self, request: UnsentRequest, response: Any) -> None:
        self.m.on_response(request.request_id, response, self.now)

    def fail(self, request: UnsentRequest, error: BaseException) -> None:
        self.m.on_failure(request.request_id, error, self.now)

    def take(self, cls: type | None = None) -> list[Any]:
        """Poll, then return (and forget) the events recorded so far (of ``cls`` only)."""
        self.poll()
        events, self.events = self.events, []
        return [e for e in events if cls is None or isinstance(e, cls)]
