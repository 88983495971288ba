"""``python -m kafka_actors consume``: print records of topics, kcat style.

Owns: where consumption starts (:class:`StartSpec`, per partition), the loop that prints
records, commits (group mode), the progress line and the end-of-partitions exit. May touch:
the public consumer API only.

Two modes, as kcat's: with ``--group`` and no ``--partition`` the consumer subscribes (group
management; committed offsets are the start unless ``--offset`` says otherwise, and what is
printed is committed as it goes); otherwise it assigns the partitions (all of each topic, or
the ``--partition`` ones) and nothing is committed.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

from kafka_actors.cli.output import RecordFormatter

__all__ = [
    "ByteSink",
    "StartSpec",
    "check_partitions",
    "parse_offset_specs",
    "parse_stop_specs",
    "run_consume",
]

#: Group mode with --exit: the assignment must have stayed the same this long before the
#: end of the assigned partitions ends the run (a group hands partitions out in steps).
_SETTLE_S = 3.0
_SPEC = re.compile(r"^(beginning|end|stored|-?\d+|s?@\d+)$")
_END_SPEC = re.compile(r"^e@(\d+)$")


class ByteSink(Protocol):
    """Where records go: ``sys.stdout.buffer`` or any binary stream."""

    def write(self, data: bytes, /) -> object: ...

    def flush(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StartSpec:
    """Where a partition starts: ``beginning``, ``end``, ``stored`` (the group's committed
    offset), an ``offset`` (absolute, or ``relative`` records before the end), or the first
    record at or after ``timestamp`` ms (the end when there is none)."""

    kind: str  # beginning | end | stored | offset | relative | timestamp
    value: int = 0

    @classmethod
    def parse(cls, text: str) -> StartSpec:
        text = text.strip()
        if not _SPEC.match(text):
            raise ValueError(
                f"bad offset {text!r}: use beginning, end, stored, N, -N (N before the end), "
                f"@TIMESTAMP_MS or s@TIMESTAMP_MS (to start at), e@TIMESTAMP_MS (to stop at)"
            )
        if text in ("beginning", "end", "stored"):
            return cls(text)
        if "@" in text:
            return cls("timestamp", int(text.partition("@")[2]))
        number = int(text)
        return cls("relative", -number) if number < 0 else cls("offset", number)


def parse_offset_specs(values: Iterable[str]) -> tuple[StartSpec | None, dict[int, StartSpec]]:
    """``--offset`` values → (the spec for every partition, per-partition specs): ``SPEC`` or
    ``PARTITION=SPEC``. End specs (``e@TIMESTAMP_MS``) are left to :func:`parse_stop_specs`."""
    default: StartSpec | None = None
    per_partition: dict[int, StartSpec] = {}
    for value in values:
        partition, sep, spec = value.partition("=")
        if _END_SPEC.match((spec if sep else value).strip()):
            continue
        if sep:
            if not partition.strip().isdigit():
                raise ValueError(f"bad --offset {value!r}: PARTITION=SPEC needs a partition number")
            per_partition[int(partition)] = StartSpec.parse(spec)
        else:
            default = StartSpec.parse(value)
    return default, per_partition


def parse_stop_specs(values: Iterable[str]) -> tuple[int | None, dict[int, int]]:
    """The ``e@TIMESTAMP_MS`` values of ``--offset`` (kcat's end timestamp) → (the timestamp
    for every partition, per-partition timestamps)."""
    default: int | None = None
    per_partition: dict[int, int] = {}
    for value in values:
        partition, sep, spec = value.partition("=")
        match = _END_SPEC.match((spec if sep else value).strip())
        if match is None:
            continue
        if sep:
            if not partition.strip().isdigit():
                raise ValueError(f"bad --offset {value!r}: PARTITION=SPEC needs a partition number")
            per_partition[int(partition)] = int(match.group(1))
        else:
            default = int(match.group(1))
    return default, per_partition


class _Progress:
    """A progress line on stderr while records go to a non-terminal stdout."""

    def __init__(self, stream: TextIO, interval: float, enabled: bool) -> None:
        self._stream = stream
        self._interval = interval
        self._enabled = enabled
        self._tty = bool(getattr(stream, "isatty", lambda: False)())
        self._started = time.monotonic()
        self._last = self._started
        self._written = False

    def update(self, count: int, lag: int | None, force: bool = False) -> None:
        if not self._enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < self._interval:
            return
        self._last = now
        elapsed = max(now - self._started, 1e-9)
        text = f"% {count} records ({count / elapsed:.0f}/s)"
        if lag is not None:
            text += f", {lag} behind"
        if self._tty:
            self._stream.write("\r" + text + "\x1b[K")
        else:
            self._stream.write(text + "\n")
        self._stream.flush()
        self._written = True

    def done(self) -> None:
        if self._enabled and self._tty and self._written:
            self._stream.write("\n")
            self._stream.flush()


def _resolve(consumer: Any, specs: Mapping[Any, StartSpec], timeout: float) -> None:
    """Seek each partition of ``specs`` to where its spec says (``stored`` seeks nothing)."""
    begin = [tp for tp, s in specs.items() if s.kind == "beginning"]
    end = [tp for tp, s in specs.items() if s.kind == "end"]
    if begin:
        consumer.seek_to_beginning(begin)
    if end:
        consumer.seek_to_end(end)
    for tp, spec in specs.items():
        if spec.kind == "offset":
            consumer.seek(tp, spec.value)
    relative = {tp: s for tp, s in specs.items() if s.kind == "relative"}
    if relative:
        starts = consumer.beginning_offsets(list(relative), timeout=timeout)
        ends = consumer.end_offsets(list(relative), timeout=timeout)
        for tp, spec in relative.items():
            consumer.seek(tp, max(starts[tp], ends[tp] - spec.value))
    times = {tp: s.value for tp, s in specs.items() if s.kind == "timestamp"}
    if times:
        found = consumer.offsets_for_times(times, timeout=timeout)
        missing = [tp for tp, hit in found.items() if hit is None]
        for tp, hit in found.items():
            if hit is not None:
                consumer.seek(tp, hit.offset)
        if missing:
            consumer.seek_to_end(missing)


def run_consume(
    config: dict[str, object],
    *,
    topics: list[str],
    pattern: str | None,
    group: str | None,
    partitions: list[int] | None,
    default_spec: StartSpec | None,
    partition_specs: Mapping[int, StartSpec],
    stop_default: int | None = None,
    stop_specs: Mapping[int, int] | None = None,
    formatter: RecordFormatter,
    exit_at_end: bool,
    max_records: int | None,
    idle_timeout: float | None,
    commit: bool,
    progress: bool,
    progress_interval: float,
    out: ByteSink,
    err: TextIO,
    notes: bool = True,
) -> int:
    from kafka_actors import (
        ConsumerRebalanceListener,
        KafkaConsumer,
        OffsetAndMetadata,
        TopicPartition,
    )

    subscribe = group is not None and partitions is None
    if not subscribe and pattern is not None:
        raise ValueError("--pattern needs --group (and no --partition)")
    cfg = dict(config)
    if group is not None:
        cfg["group.id"] = group
    cfg.setdefault("enable.auto.commit", False)
    # A command line that reads never creates what it was asked to read (a typo would
    # otherwise become a topic): an unknown topic is an error.
    cfg["allow.auto.create.topics"] = False
    if default_spec is not None and default_spec.kind in ("beginning", "end"):
        cfg.setdefault(
            "auto.offset.reset", "earliest" if default_spec.kind == "beginning" else "latest"
        )
    timeout = 30.0
    printed = 0
    positions: dict[Any, Any] = {}
    end_offsets: dict[Any, int] = {}
    reported = _Progress(err, progress_interval, progress)

    def spec_for(tp: Any) -> StartSpec | None:
        return partition_specs.get(tp.partition, default_spec)

    stops = dict(stop_specs or {})
    stopping = stop_default is not None or bool(stops)

    def stop_for(tp: Any) -> int | None:
        return stops.get(tp.partition, stop_default)

    owned: set[Any] = set()  # the partitions read (assigned, or the group's assignment)
    stopped: set[Any] = set()  # those that reached their stop timestamp (paused)

    changed_at = time.monotonic()  # when the assignment last changed (group mode)
    with KafkaConsumer(cfg) as consumer:
        pending: list[Any] = []

        class Listener(ConsumerRebalanceListener):
            def on_partitions_assigned(self, assigned: set[Any]) -> None:
                pending.extend(assigned)

            def on_partitions_revoked(self, revoked: set[Any]) -> None:
                nonlocal changed_at
                changed_at = time.monotonic()
                owned.difference_update(revoked)
                stopped.difference_update(revoked)
                printed_up_to = {tp: om for tp, om in positions.items() if tp in revoked}
                if commit and printed_up_to:
                    consumer.commit_sync(printed_up_to)
                for tp in revoked:
                    positions.pop(tp, None)
                    end_offsets.pop(tp, None)

            def on_partitions_lost(self, lost: set[Any]) -> None:
                nonlocal changed_at
                changed_at = time.monotonic()
                owned.difference_update(lost)
                stopped.difference_update(lost)
                for tp in lost:
                    positions.pop(tp, None)
                    end_offsets.pop(tp, None)

        if subscribe:
            for topic in topics:
                check_partitions(consumer, topic, None)
            if pattern is not None:
                consumer.subscribe(pattern=pattern, listener=Listener())
            else:
                consumer.subscribe(list(topics), listener=Listener())
        else:
            wanted: list[Any] = []
            for topic in topics:
                for number in check_partitions(consumer, topic, partitions):
                    wanted.append(TopicPartition(topic, number))
            consumer.assign(wanted)
            owned.update(wanted)
            # Assigned mode: the group's committed offsets only with --offset stored.
            specs = {tp: spec_for(tp) or StartSpec("end") for tp in wanted}
            if group is None and any(s.kind == "stored" for s in specs.values()):
                raise ValueError("--offset stored needs --group")
            _resolve(consumer, {tp: s for tp, s in specs.items() if s.kind != "stored"}, timeout)
            if exit_at_end:
                end_offsets.update(consumer.end_offsets(wanted, timeout=timeout))

        idle_since = time.monotonic()
        while max_records is None or printed < max_records:
            batch: Iterable[Any] = consumer.poll(0.2)
            seeked: set[Any] = set()
            if pending:
                assigned = list(pending)
                pending.clear()
                owned.update(assigned)
                changed_at = time.monotonic()
                # Group mode: beginning/end act through auto.offset.reset (only where nothing
                # is committed); offsets and timestamps seek at every assignment.
                specs = {
                    tp: s
                    for tp in assigned
                    if (s := spec_for(tp)) is not None
                    and s.kind not in ("stored", "beginning", "end")
                }
                _resolve(consumer, specs, timeout)
                seeked = set(specs)
                if exit_at_end:
                    end_offsets.update(consumer.end_offsets(assigned, timeout=timeout))
            if seeked:
                # Records of a partition fetched before its seek are not where it starts.
                batch = [r for r in batch if TopicPartition(r.topic, r.partition) not in seeked]
            for record in batch:
                if max_records is not None and printed >= max_records:
                    break
                tp = TopicPartition(record.topic, record.partition)
                if tp in stopped:
                    continue
                stop = stop_for(tp) if stopping else None
                if stop is not None and record.timestamp >= stop:
                    # kcat's e@: the first record at or after the timestamp ends the
                    # partition (not printed; a group's committed offset stays before it).
                    stopped.add(tp)
                    consumer.pause([tp])
                    continue
                out.write(formatter.format(record))
                printed += 1
                positions[tp] = OffsetAndMetadata(record.offset + 1, "", record.leader_epoch)
            if batch:
                out.flush()
                idle_since = time.monotonic()
                if commit and subscribe and positions:
                    consumer.commit_async(dict(positions))
            reading = {tp: end for tp, end in end_offsets.items() if tp not in stopped}
            lag = _lag(consumer, reading) if end_offsets else None
            reported.update(printed, lag)
            settled = not subscribe or time.monotonic() - changed_at >= _SETTLE_S
            if stopping and owned and owned <= stopped and settled:
                break
            if exit_at_end and end_offsets and lag == 0 and not batch and settled:
                # Caught up with the ends seen before: look again (records may have come).
                fresh = consumer.end_offsets(list(end_offsets), timeout=timeout)
                end_offsets.update(fresh)
                reading = {tp: end for tp, end in end_offsets.items() if tp not in stopped}
                if _lag(consumer, reading) == 0:
                    break
            if idle_timeout is not None and time.monotonic() - idle_since >= idle_timeout:
                break
        if commit and subscribe and positions:
            consumer.commit_sync(dict(positions))
        reading = {tp: end for tp, end in end_offsets.items() if tp not in stopped}
        reported.update(printed, _lag(consumer, reading) if end_offsets else None, True)
    reported.done()
    if notes:
        print(f"% consumed {printed} records", file=err)
    return 0


def check_partitions(
    consumer: Any, topic: str, wanted: Sequence[int] | None, timeout: float = 30.0
) -> list[int]:
    """``wanted`` (every partition of ``topic`` when None), checked against the cluster's
    metadata: an unknown topic (or one without partitions) or partition is an
    UnknownTopicOrPartitionError naming it. The consumer must not create topics."""
    from kafka_actors.errors import UnknownTopicOrPartitionError

    try:
        infos = consumer.partitions_for(topic, timeout=timeout)
    except UnknownTopicOrPartitionError:
        infos = []
    if not infos:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist", topic=topic)
    numbers = sorted(p.partition for p in infos)
    for number in wanted if wanted is not None else numbers:
        if number not in numbers:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has no partition {number}", topic=topic, partition=number
            )
    return list(wanted) if wanted is not None else numbers


def _lag(consumer: Any, ends: Mapping[Any, int]) -> int | None:
    """Records between the positions and ``ends`` (None while a position is unknown)."""
    total = 0
    for tp, end in ends.items():
        try:
            position = consumer.position(tp, timeout=0.0)
        except Exception:
            return None
        total += max(0, end - position)
    return total


def stdout_is_terminal() -> bool:
    return bool(sys.stdout.isatty())
