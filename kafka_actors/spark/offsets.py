"""Spark offsets for the kafka-actors source, and the driver's offset planner (pure).

Owns: the JSON form of the source's offsets (Spark's Kafka form ``{"topic": {"0": 42}}``),
the fair split of a per-trigger limit across partitions, the split of offset ranges into input
partitions (``minPartitions``), and :class:`OffsetPlanner`, the state machine that decides the
end offsets of each micro-batch from what this group member owns. May touch: nothing but its
arguments (no consumer, no sockets, no clock, no Spark).

How the planner reads Spark's offsets
-------------------------------------
A batch's end offsets name exactly the partitions the member plans for; a batch reads, per
partition, ``[start[p], end[p])``. A partition absent from ``start`` reads nothing in that
batch: its value in ``end`` only *establishes* where reading starts (this is how a newly
assigned partition enters, at the group's committed offset). Partitions this member does not
own (any more) are carried unchanged, so the checkpoint keeps knowing where the query stands.
A partition absent from ``end`` reads nothing and leaves: that happens only when the group's
committed offset moved past this query's checkpoint while the partition was elsewhere; it
comes back in the next batch at the group's offset, so the batch's offsets always describe
exactly what was read.

Ownership of a partition moves through ACQUIRING (assigned; its start not decided yet),
ACTIVE (planned from ``start``), REVOKING (revoked by the group: frozen, no new data planned,
waiting until the offsets already planned for it are committed to Kafka) and then it is gone.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kafka_actors.protocol.messages import TopicPartition

__all__ = [
    "Bound",
    "OffsetPlanner",
    "OffsetRange",
    "Ownership",
    "fair_split",
    "group_lag",
    "offsets_from_json",
    "offsets_to_json",
    "parse_starting_offsets",
    "split_ranges",
]

#: ``startingOffsets`` JSON values, as in Spark's Kafka source.
EARLIEST = -2
LATEST = -1

Offsets = dict[TopicPartition, int]


def offsets_from_json(value: Mapping[str, Any] | str | None) -> Offsets:
    """Spark's Kafka offset form (a dict or its JSON text) → ``{TopicPartition: offset}``.

    Partition keys are strings in JSON (``{"orders": {"0": 42}}``); ints are accepted too.
    Raises ValueError naming the bad entry.
    """
    if value is None:
        return {}
    data = json.loads(value) if isinstance(value, str) else value
    if not isinstance(data, Mapping):
        raise ValueError(f"Offsets must be a JSON object of topics, got {data!r}")
    out: Offsets = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, Mapping):
            raise ValueError(f"Offsets of topic {topic!r} must be an object, got {partitions!r}")
        for key, offset in partitions.items():
            try:
                number = int(key)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"Bad partition {key!r} of topic {topic!r}") from exc
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise ValueError(f"Bad offset {offset!r} for {topic}-{number}")
            out[TopicPartition(str(topic), number)] = offset
    return out


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{TopicPartition: offset}`` → Spark's form, topics and partitions in order."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets, key=lambda t: (t.topic, t.partition)):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def parse_starting_offsets(value: str | None) -> str | Offsets:
    """``earliest`` / ``latest`` (default ``latest``) or a JSON object of offsets, where -2 means
    earliest and -1 latest (as Spark's Kafka source reads ``startingOffsets``)."""
    if value is None:
        return "latest"
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        offsets = offsets_from_json(text)
    except (ValueError, json.JSONDecodeError) as exc:
        raise ValueError(
            f"startingOffsets must be 'earliest', 'latest' or a JSON object: {exc}"
        ) from exc
    for tp, offset in offsets.items():
        if offset < EARLIEST:
            raise ValueError(f"startingOffsets: bad offset {offset} for {tp}")
    return offsets


@dataclass(frozen=True, slots=True)
class Bound:
    """Where a read starts or ends, as Spark's Kafka options say it: ``earliest``, ``latest``,
    ``offsets`` (per partition, -2 earliest, -1 latest), ``timestamp`` (one timestamp in ms
    for every partition) or ``timestamps`` (per partition): the earliest offset whose record
    timestamp is at or after it (ListOffsets by timestamp)."""

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp: int | None = None


def group_lag(source_progress: Any, *, after_batch: bool = False) -> int | None:
    """The group's lag as the source's member saw it, from one entry of a query progress's
    ``sources`` (a ``SourceProgress`` of a listener event, or its dict in ``lastProgress``).

    ``latestOffset`` is what the member reported (``reportLatestOffset``: the end offsets it
    looked up for its partitions while planning the batch), ``startOffset`` what it had
    committed to the group then (it commits the start of each batch it plans), ``endOffset``
    what it commits next. Returns the sum over the member's partitions of ``latest - start``
    (the group's lag while the batch ran), or of ``latest - end`` with ``after_batch`` (once the
    batch is committed); None when the progress has no latest offsets (no batch planned yet) or
    no start (Spark reports none for a query's first batch, which starts where the group's
    committed offsets or ``startingOffsets`` say).
    Spark's Python data sources cannot report custom metrics (no ``ReportsSourceMetrics``), so
    the lag is carried by these offsets, with no second consumer asking the group."""

    def field_of(name: str) -> Offsets:
        value = (
            source_progress.get(name)
            if isinstance(source_progress, Mapping)
            else getattr(source_progress, name, None)
        )
        # a query's first batch has no start: Spark reports null ("None" through py4j)
        if value in (None, "", "null", "None"):
            return {}
        return offsets_from_json(value)

    latest = field_of("latestOffset")
    base = field_of("endOffset" if after_batch else "startOffset")
    if not latest or not base:
        return None
    return sum(max(0, end - base[tp]) for tp, end in latest.items() if tp in base)


def fair_split(available: Mapping[Hashable, int], limit: int) -> dict[Hashable, int]:
    """Split ``limit`` across keys, each getting at most what it has available: max-min fair
    (water filling), so a partition with little data leaves its share to the others. Leftover
    units (when the limit does not divide evenly) go to the keys in sorted order; the result is
    deterministic. Keys with nothing available get 0."""
    if limit < 0:
        raise ValueError(f"limit must not be negative: {limit}")
    grant: dict[Hashable, int] = {key: 0 for key in available}
    wanting = sorted(
        (key for key, count in available.items() if count > 0), key=lambda k: (available[k], str(k))
    )
    remaining = limit
    while wanting and remaining > 0:
        share = remaining // len(wanting)
        if share == 0:
            for key in sorted(wanting, key=str)[:remaining]:
                grant[key] += 1
            break
        smallest = available[wanting[0]] - grant[wanting[0]]
        step = min(share, smallest)
        for key in wanting:
            grant[key] += step
        remaining -= step * len(wanting)
        wanting = [key for key in wanting if grant[key] < available[key]]
    return grant


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records ``[start, end)`` of one partition, read by one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def split_ranges(
    ranges: Iterable[OffsetRange],
    min_partitions: int | None,
    max_records: int | None = None,
) -> list[OffsetRange]:
    """Split ranges so that none holds more than ``max_records`` (``maxRecordsPerPartition``)
    and there are at least ``min_partitions`` (when given and larger than the number of ranges),
    cutting each range into pieces proportional to its share of the total, as Spark's Kafka
    source does; empty ranges are dropped."""
    ranges = [r for r in ranges if r.size > 0]
    if max_records:
        ranges = [piece for r in ranges for piece in _cut(r, math.ceil(r.size / max_records))]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        out.extend(_cut(r, max(1, min(r.size, math.ceil(r.size * min_partitions / total)))))
    return out


def _cut(r: OffsetRange, pieces: int) -> list[OffsetRange]:
    """``r`` in ``pieces`` ranges of sizes differing by at most one."""
    if pieces <= 1:
        return [r]
    step, extra = divmod(r.size, pieces)
    out: list[OffsetRange] = []
    start = r.start
    for index in range(pieces):
        end = start + step + (1 if index < extra else 0)
        out.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return out


class Ownership(enum.Enum):
    ACQUIRING = "acquiring"
    ACTIVE = "active"
    REVOKING = "revoking"


@dataclass(slots=True)
class _Owned:
    status: Ownership = Ownership.ACQUIRING
    #: The group's committed offset when the partition was acquired (None: no commit).
    committed: int | None = None
    #: Where to start when the group has no committed offset (``startingOffsets``).
    initial: int | None = None
    resolved: bool = False
    #: The largest end offset planned for the partition (what a revocation waits for).
    fence: int | None = None


@dataclass(slots=True)
class _Revocation:
    partitions: frozenset[TopicPartition]
    token: object


@dataclass
class OffsetPlanner:
    """Decides each micro-batch's end offsets from the partitions this member owns.

    Inputs: assignment changes from the group (:meth:`assigned`, :meth:`revoking`,
    :meth:`lost`), the resolved start of acquired partitions (:meth:`resolved`), what Kafka
    holds as committed (:meth:`kafka_committed`), and Spark's calls (:meth:`latest`,
    :meth:`ranges`). Outputs: end offsets, offsets to commit (:meth:`to_commit`), and the
    revocations that may now be acknowledged (returned by :meth:`kafka_committed` and
    :meth:`revoking`).
    """

    owned: dict[TopicPartition, _Owned] = field(default_factory=dict)
    committed_in_kafka: dict[TopicPartition, int] = field(default_factory=dict)
    _revocations: list[_Revocation] = field(default_factory=list)

    # -- group membership ----------------------------------------------------------------------

    def assigned(self, partitions: Iterable[TopicPartition]) -> None:
        """Newly assigned partitions: ACQUIRING until :meth:`resolved`."""
        for tp in partitions:
            state = self.owned.get(tp)
            if state is None or state.status is Ownership.REVOKING:
                self.owned[tp] = _Owned()

    def unresolved(self) -> frozenset[TopicPartition]:
        """Acquired partitions whose committed offset and initial position are not known."""
        return frozenset(tp for tp, s in self.owned.items() if not s.resolved)

    def resolved(self, tp: TopicPartition, committed: int | None, initial: int) -> None:
        state = self.owned.get(tp)
        if state is None or state.resolved:
            return
        state.committed = committed
        state.initial = initial
        state.resolved = True
        if committed is not None:
            known = self.committed_in_kafka.get(tp)
            self.committed_in_kafka[tp] = committed if known is None else max(known, committed)

    def revoking(self, partitions: Iterable[TopicPartition], token: object) -> list[object]:
        """The group revokes ``partitions``: no new data is planned for them; ``token`` (the
        acknowledgement) is returned by :meth:`kafka_committed` once every offset already
        planned for them is committed to Kafka. Returns the tokens that are complete now."""
        wanted = frozenset(partitions)
        for tp in wanted:
            state = self.owned.get(tp)
            if state is not None:
                state.status = Ownership.REVOKING
        self._revocations.append(_Revocation(wanted, token))
        return self._complete_revocations()

    def lost(self, partitions: Iterable[TopicPartition]) -> None:
        """Partitions gone without a chance to commit (the member was fenced)."""
        for tp in partitions:
            self.owned.pop(tp, None)
            self.committed_in_kafka.pop(tp, None)

    def forget_unowned(self, assignment: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Drop partitions the consumer no longer has (except those being revoked, which
        leave through their revocation)."""
        current = frozenset(assignment)
        gone = [
            tp
            for tp, state in self.owned.items()
            if tp not in current and state.status is not Ownership.REVOKING
        ]
        for tp in gone:
            self.owned.pop(tp, None)
            self.committed_in_kafka.pop(tp, None)
        return gone

    def abandon(self, token: object) -> frozenset[TopicPartition]:
        """A revocation acknowledged without us (its deadline passed): its partitions are gone;
        batches already planned for them may be read again by their next owner."""
        gone: set[TopicPartition] = set()
        keep: list[_Revocation] = []
        for revocation in self._revocations:
            if revocation.token is token:
                for tp in revocation.partitions:
                    state = self.owned.get(tp)
                    if state is not None and state.status is Ownership.REVOKING:
                        del self.owned[tp]
                        self.committed_in_kafka.pop(tp, None)
                        gone.add(tp)
            else:
                keep.append(revocation)
        self._revocations = keep
        return frozenset(gone)

    def revocation_tokens(self) -> list[object]:
        return [r.token for r in self._revocations]

    def pending_revocation(self) -> frozenset[TopicPartition]:
        return frozenset(tp for r in self._revocations for tp in r.partitions)

    def kafka_committed(self, offsets: Mapping[TopicPartition, int]) -> list[object]:
        """``offsets`` are now committed in Kafka; returns revocation tokens now complete."""
        for tp, offset in offsets.items():
            known = self.committed_in_kafka.get(tp)
            self.committed_in_kafka[tp] = offset if known is None else max(known, offset)
        return self._complete_revocations()

    def _complete_revocations(self) -> list[object]:
        done: list[object] = []
        keep: list[_Revocation] = []
        for revocation in self._revocations:
            if all(self._fenced(tp) for tp in revocation.partitions):
                done.append(revocation.token)
                for tp in revocation.partitions:
                    state = self.owned.get(tp)
                    if state is not None and state.status is Ownership.REVOKING:
                        del self.owned[tp]
                        self.committed_in_kafka.pop(tp, None)
            else:
                keep.append(revocation)
        self._revocations = keep
        return done

    def _fenced(self, tp: TopicPartition) -> bool:
        state = self.owned.get(tp)
        if state is None or state.status is not Ownership.REVOKING or state.fence is None:
            return True
        return self.committed_in_kafka.get(tp, -1) >= state.fence

    def release_all(self) -> list[object]:
        """Stopping: every pending revocation is acknowledged as it is (what Spark committed
        is already in Kafka; batches not committed by Spark are not)."""
        tokens = [r.token for r in self._revocations]
        self._revocations = []
        return tokens

    # -- Spark -----------------------------------------------------------------------------

    def to_commit(self, start: Mapping[TopicPartition, int]) -> Offsets:
        """Offsets of ``start`` (the end of batches Spark has committed) to commit to Kafka:
        owned partitions only, and never backwards."""
        out: Offsets = {}
        for tp, offset in start.items():
            if tp in self.owned and offset > self.committed_in_kafka.get(tp, -1):
                out[tp] = offset
        return out

    def latest(
        self,
        start: Mapping[TopicPartition, int],
        available: Mapping[TopicPartition, int],
        limit: int | None = None,
        target: Mapping[TopicPartition, int] | None = None,
    ) -> Offsets:
        """End offsets of the next batch after ``start``.

        ``available``: end offsets (high watermark or last stable offset) of owned partitions;
        ``limit``: most records in the batch, split fairly; ``target``: the availableNow bound
        (partitions missing from it get no new data).
        """
        end: Offsets = {}
        wanting: dict[Hashable, int] = {}
        for tp, begin_offset in start.items():
            if tp not in self.owned:
                # not ours (never, or not any more): carried as it is, so the checkpoint keeps
                # knowing where this query stands if the partition comes back
                end[tp] = begin_offset
        for tp, state in self.owned.items():
            begin = start.get(tp)
            if state.status is Ownership.REVOKING:
                if begin is not None:
                    end[tp] = begin
                continue
            if not state.resolved:
                if begin is not None:
                    end[tp] = begin  # keep its place until its start is known
                continue
            if state.status is Ownership.ACQUIRING:
                if begin is None:
                    position = state.committed if state.committed is not None else state.initial
                    assert position is not None
                    end[tp] = position
                    state.status = Ownership.ACTIVE
                    continue
                if state.committed is not None and state.committed > begin:
                    # The group read past this query's checkpoint while the partition was
                    # elsewhere: leave for one batch, come back at the group's offset.
                    continue
                state.status = Ownership.ACTIVE
            if begin is None:
                # Owned but not in Spark's offsets (never planned yet): establish it where the
                # group stands.
                position = self.committed_in_kafka.get(tp, state.initial)
                end[tp] = position if position is not None else 0
                continue
            top = available.get(tp, begin)
            if target is not None:
                top = min(top, target.get(tp, begin))
            end[tp] = begin
            if top > begin:
                wanting[tp] = top - begin
        if limit is None:
            grant: Mapping[Hashable, int] = wanting
        else:
            grant = fair_split(wanting, limit)
        for key, count in grant.items():
            assert isinstance(key, TopicPartition)
            end[key] += count
        for tp, offset in end.items():
            owned = self.owned.get(tp)
            if owned is not None:
                owned.fence = offset if owned.fence is None else max(owned.fence, offset)
        return end

    @staticmethod
    def ranges(
        start: Mapping[TopicPartition, int],
        end: Mapping[TopicPartition, int],
        floor: Mapping[TopicPartition, int] | None = None,
    ) -> list[OffsetRange]:
        """Offset ranges of the batch ``(start, end]``: partitions in both, ``start < end``;
        ``floor`` raises a range's start (records the group already consumed elsewhere)."""
        out: list[OffsetRange] = []
        for tp in sorted(end, key=lambda t: (t.topic, t.partition)):
            if tp not in start:
                continue
            begin = start[tp]
            if floor is not None and tp in floor:
                begin = max(begin, floor[tp])
            if end[tp] > begin:
                out.append(OffsetRange(tp.topic, tp.partition, begin, end[tp]))
        return out
