"""One partition's completion window: which offsets from its lowest incomplete offset on are
completed, what to commit, and how large its offset map may grow.

Owns: :class:`CompletionWindow`. May touch: :mod:`.offset_map` only (pure, no clock).

The window is a ``bytearray`` with one byte per offset from the partition's lowest incomplete
offset (the *base*, what is committed) to the highest offset received (or, after an
assignment, to the highest offset the inherited map says is completed): 1 for completed, 0
for not. Offsets that are not records (transaction markers, compacted away) become 1 when a
later record shows they were skipped by the fetch (a *gap*): nothing will ever handle them.
The base moves up over completed offsets as they complete. ``transitions`` counts the changes
between 0 and 1 inside the window, kept up to date in O(1) per change, so the size of the
map can be bounded for back-pressure without encoding it (:meth:`size_bound`).
"""

from __future__ import annotations

from kafka_actors.parallel import offset_map
from kafka_actors.parallel.offset_map import OffsetMap

__all__ = ["CompletionWindow"]

_COMPACT_AT = 4096


class CompletionWindow:
    """Completion of one partition's offsets from ``base`` on (module doc).

    ``start``: the offset the partition is read from (its committed offset, or the reset
    position); ``inherited``: the map read from the committed metadata (its ``base`` must be
    ``start``), whose completed offsets are completed here without being handled."""

    __slots__ = ("_head", "_next", "_start", "_status", "transitions")

    def __init__(self, start: int, inherited: OffsetMap | None = None) -> None:
        self._start = start
        self._head = 0
        self._next = start
        self._status = bytearray(b"\x00")  # the base: incomplete until received and done
        self.transitions = 0
        if inherited is not None and inherited.ranges:
            if inherited.base != start:
                raise ValueError(f"map of offset {inherited.base} for a window at {start}")
            completed = inherited.completed()
            self._status += completed
            data = self._status
            self.transitions = sum(1 for i in range(len(data) - 1) if data[i] != data[i + 1])

    # -- reading ---------------------------------------------------------------------------

    @property
    def base(self) -> int:
        """The lowest offset not completed: what a commit of this partition carries."""
        return self._start + self._head

    @property
    def next_offset(self) -> int:
        """The offset after the highest one received."""
        return self._next

    @property
    def span(self) -> int:
        """Offsets in the window above the base."""
        return max(0, len(self._status) - self._head - 1)

    @property
    def uncommitted(self) -> int:
        """Offsets received or skipped since the base (what a fetch pause bounds)."""
        return max(0, self._next - self.base)

    def is_completed(self, offset: int) -> bool:
        if offset < self.base:
            return True
        i = offset - self._start
        return i < len(self._status) and self._status[i] == 1

    def encode(self) -> str:
        """The offset map of the completed offsets above the base (:func:`offset_map.encode`)."""
        head = self._head
        return offset_map.encode(self.base, memoryview(self._status)[head + 1 :])

    def size_bound(self, completions: int) -> int:
        """An upper bound of the map's length after ``completions`` more offsets of the
        window complete (each changes ``transitions`` by at most 2)."""
        return offset_map.encoded_size_bound(
            self.base, self.span, self.transitions + 2 * completions
        )

    # -- changes ---------------------------------------------------------------------------

    def receive(self, offset: int) -> bool:
        """A record at ``offset`` was fetched: True if it is work to do; False if it was
        received before (a fetch never hands a record twice, but be safe) or is already
        completed (below the base, or completed by the inherited map). Offsets between the
        previous record and this one are gaps: completed."""
        if offset < self._next:
            return False
        base = self.base
        if offset < base:
            self._next = offset + 1
            return False
        status = self._status
        if offset > self._next and self._next == base and self._head == len(status) - 1:
            # Nothing is pending and nothing is known above the base: the window moves to
            # the record (a large gap costs nothing).
            self._rebase(offset)
        else:
            for gap in range(max(self._next, base), offset):
                # A gap at the base may complete it and the inherited offsets after it:
                # the base then jumps past the next gaps (and maybe past this record).
                if gap >= self._start + self._head:
                    self._mark(gap)
        status = self._status
        self._next = offset + 1
        if offset < self.base:
            return False  # completed by the inherited map (the base passed it)
        i = offset - self._start
        if i >= len(status):
            self._append(0, i - len(status) + 1)
            return True
        return status[i] == 0

    def receive_run(self, first: int, count: int) -> bool:
        """The records at ``first`` .. ``first + count - 1`` (consecutive offsets, the usual
        fetch) were fetched: when they directly follow the last one received and the window
        knows nothing of them yet, they are all work: taken in one step, True. Otherwise
        False, and nothing changed: :meth:`receive` them one by one."""
        if count < 1 or first != self._next or first < self.base:
            return False
        status = self._status
        i = first - self._start
        if i == len(status):
            self._append(0, count)
        elif i == len(status) - 1 and status[i] == 0:
            self._append(0, count - 1)  # the base itself (after a restart of the window)
        else:
            return False
        self._next = first + count
        return True

    def complete(self, offset: int) -> None:
        """The record at ``offset`` completed (handled, dead-lettered or skipped by policy)."""
        i = offset - self._start
        head = self._head
        if i != head:
            if i > head:
                self._mark(offset)
            return
        # The base completes (the usual case: records complete about in offset order). The
        # completed run from it up to the next incomplete offset leaves the window; inside
        # the window that run was bounded by two transitions (0 -> 1 after the base, 1 -> 0
        # at its end) when it was longer than the base alone, and none otherwise.
        status = self._status
        end = status.find(0, head + 1)
        if end < 0:
            self._rebase(self._start + len(status))  # everything completed
            return
        status[head] = 1
        if end > head + 1:
            self.transitions -= 2
        self._head = end
        if end >= _COMPACT_AT and end * 2 >= len(status):
            del status[:end]
            self._start += end
            self._head = 0

    # -- internals -------------------------------------------------------------------------

    def _rebase(self, offset: int) -> None:
        self._start = offset
        self._head = 0
        self._status = bytearray(b"\x00")
        self.transitions = 0

    def _append(self, value: int, count: int) -> None:
        status = self._status
        if count <= 0:
            return
        if status[-1] != value:
            self.transitions += 1
        status.extend(bytes([value]) * count)

    def _mark(self, offset: int) -> None:
        status = self._status
        i = offset - self._start
        if i >= len(status):
            self._append(0, i - len(status))
            self._append(1, 1)
        elif status[i] == 0:
            # Each neighbour in the window (the left one only above the base) that is
            # incomplete makes one more transition once this offset completes; each completed
            # one, one fewer.
            change = 0
            if i > self._head:
                change += 1 if status[i - 1] == 0 else -1
            if i + 1 < len(status):
                change += 1 if status[i + 1] == 0 else -1
            status[i] = 1
            self.transitions += change
        else:
            return
        if i == self._head:
            self._advance()

    def _advance(self) -> None:
        status = self._status
        head = self._head
        end = status.find(b"\x00", head)
        if end < 0:
            # Everything completed: the window restarts empty after it.
            self._rebase(self._start + len(status))
            return
        # Completed offsets head..end-1 leave the window: one transition (1 -> 0 at end-1).
        if end > head:
            self.transitions -= 1
        self._head = end
        if end >= _COMPACT_AT and end * 2 >= len(status):
            del status[:end]
            self._start += end
            self._head = 0
