"""Acknowledgements of a share consumer (KIP-932): :class:`AcknowledgeType` and
:class:`Acknowledgements`.

Owns: the acknowledge types (Kafka's ``AcknowledgeType``: ACCEPT 1, RELEASE 2, REJECT 3, RENEW
4 (KIP-1222), and the wire-only GAP 0 for an acquired offset without a record), the
acknowledgements pending for one partition kept as offset ranges (never one entry per offset
of a range read from the network), and their encoding as Kafka's ``AcknowledgementBatches``
(first offset, last offset, types): one batch per maximal run of consecutive offsets with
one type, runs in offset order, holes between them left out.

May touch: nothing; pure data.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterable, Iterator

__all__ = ["GAP", "AckBatch", "AcknowledgeType", "Acknowledgements"]

#: The wire's acknowledge type 0: no record at these acquired offsets (a compacted hole, a
#: control record, an aborted transaction's records).
GAP = 0

#: (first offset, last offset, acknowledge types) as ShareFetch / ShareAcknowledge carry it.
AckBatch = tuple[int, int, tuple[int, ...]]


class AcknowledgeType(enum.IntEnum):
    """How a consumer settles a record it was delivered (Java's ``AcknowledgeType``)."""

    #: Processed: the record is done (archived).
    ACCEPT = 1
    #: Not processed: deliver it again (its delivery count grows).
    RELEASE = 2
    #: Unprocessable: never deliver it again (archived).
    REJECT = 3
    #: Still being processed: extend the acquisition lock (KIP-1222, ShareFetch /
    #: ShareAcknowledge v2); the record stays acquired and needs another acknowledgement.
    RENEW = 4


class Acknowledgements:
    """The acknowledgements of one partition not sent yet: disjoint ``[first, last]`` ranges
    with one type each, sorted, adjacent ranges of one type merged."""

    __slots__ = ("_firsts", "_ranges")

    def __init__(self) -> None:
        self._ranges: list[tuple[int, int, int]] = []
        self._firsts: list[int] = []

    def __len__(self) -> int:
        """The number of offsets acknowledged."""
        return sum(last - first + 1 for first, last, _ in self._ranges)

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        return iter(list(self._ranges))

    def add(self, offset: int, kind: int) -> None:
        """Acknowledge one offset (a later acknowledgement of the same offset replaces the
        earlier one)."""
        self.add_range(offset, offset, kind)

    def add_range(self, first: int, last: int, kind: int) -> None:
        """Acknowledge ``first..last`` (inclusive) with ``kind``."""
        if first > last:
            raise ValueError(f"empty acknowledgement range {first}..{last}")
        if not 0 <= int(kind) <= 4:
            raise ValueError(f"unknown acknowledge type {kind}")
        kind = int(kind)
        ranges = self._ranges
        if not ranges or first > ranges[-1][1]:
            # The common case, offsets acknowledged in order: extend or append, no search.
            if ranges and ranges[-1][2] == kind and ranges[-1][1] == first - 1:
                ranges[-1] = (ranges[-1][0], last, kind)
            else:
                ranges.append((first, last, kind))
                self._firsts.append(first)
            return
        kept: list[tuple[int, int, int]] = []
        start = bisect.bisect_left(self._firsts, first)
        # The range before may overlap or touch.
        if start > 0 and self._ranges[start - 1][1] >= first - 1:
            start -= 1
        end = start
        while end < len(self._ranges) and self._ranges[end][0] <= last + 1:
            end += 1
        new_first, new_last = first, last
        for a, b, t in self._ranges[start:end]:
            if t == kind:
                new_first, new_last = min(new_first, a), max(new_last, b)
                continue
            if a < first:
                kept.append((a, min(b, first - 1), t))
            if b > last:
                kept.append((max(a, last + 1), b, t))
        kept.append((new_first, new_last, kind))
        kept.sort()
        self._ranges[start:end] = kept
        self._firsts = [r[0] for r in self._ranges]

    def merge(self, other: Acknowledgements) -> None:
        for first, last, kind in other:
            self.add_range(first, last, kind)

    def offsets(self) -> set[int]:
        """Every offset acknowledged (for the commit callback: call only on acknowledgements
        of records handed out, whose number is bounded by what was delivered)."""
        out: set[int] = set()
        for first, last, _ in self._ranges:
            out.update(range(first, last + 1))
        return out

    def record_offsets(self) -> set[int]:
        """The offsets acknowledged with a type other than GAP (records the application
        settled)."""
        out: set[int] = set()
        for first, last, kind in self._ranges:
            if kind != GAP:
                out.update(range(first, last + 1))
        return out

    def has_type(self, kind: int) -> bool:
        return any(t == kind for _, _, t in self._ranges)

    def batches(self) -> list[AckBatch]:
        """Kafka's AcknowledgementBatches: one per maximal run of one type."""
        return [(first, last, (kind,)) for first, last, kind in self._ranges]

    @classmethod
    def of(cls, items: Iterable[tuple[int, int]]) -> Acknowledgements:
        """From (offset, type) pairs."""
        acks = cls()
        for offset, kind in items:
            acks.add(offset, kind)
        return acks
