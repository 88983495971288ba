"""When a repeating failure deserves a log line: visible, but not noisy.

Owns: :class:`ConditionLog`, the schedule of the lines about failing conditions (a broker that
cannot be reached, a coordinator that cannot be found, a topic that does not exist ...), keyed
by condition. It logs nothing itself and reads no clock: the caller passes ``now_ms`` and logs
what the returned :class:`Report` / :class:`Cleared` describe, with whatever logger it uses, so
the schedule is independent of the logging backend. May touch: nothing else.

The schedule, for each key:

* the first occurrence of a condition is reported (the caller logs a WARNING);
* while it lasts, further occurrences are counted, and reported at most once per
  ``interval_ms`` with the count of occurrences since the previous line (``interval_ms=None``:
  never again, e.g. a missing topic, which Java warns about once);
* when it clears, :meth:`ConditionLog.cleared` reports it once (the caller logs INFO: the end of
  a problem is not a problem; a condition that lasts repeats each interval, so a reader at
  WARNING level sees it end when the repeats stop), and the next occurrence starts it again.

The default interval, :data:`REPEAT_INTERVAL_MS`, is librdkafka's: it suppresses identical
broker errors for 30 s and then logs them with the number suppressed.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

__all__ = ["REPEAT_INTERVAL_MS", "Cleared", "ConditionLog", "Report"]

#: How often a lasting condition is reported again (ms), unless a caller states another.
REPEAT_INTERVAL_MS: Final = 30_000

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Report:
    """A line to log about an occurrence: the first one, or a repeat after the interval."""

    #: True for the line that starts the condition.
    first: bool
    #: Occurrences since the previous line, this one included (1 for the first line).
    occurrences: int
    #: How long the condition has lasted (ms; 0 for the first line).
    failing_for_ms: int

    def fields(self) -> dict[str, Any]:
        """The key/value pairs a repeat line carries (none for the first line)."""
        if self.first:
            return {}
        return {"occurrences": self.occurrences, "failing_for_ms": self.failing_for_ms}


@dataclass(frozen=True, slots=True)
class Cleared:
    """A condition that was reported has ended."""

    #: Every occurrence while it lasted.
    occurrences: int
    #: How long it lasted (ms).
    failing_for_ms: int

    def fields(self) -> dict[str, Any]:
        return {"occurrences": self.occurrences, "failing_for_ms": self.failing_for_ms}


@dataclass(slots=True)
class _Condition:
    started_ms: int
    last_line_ms: int
    since_line: int = 0
    total: int = 1


class ConditionLog(Generic[K]):
    """Per-key schedule of the lines about a repeating failure (module docstring)."""

    __slots__ = ("_active", "_interval_ms")

    def __init__(self, interval_ms: int | None = REPEAT_INTERVAL_MS) -> None:
        if interval_ms is not None and interval_ms < 0:
            raise ValueError(f"interval_ms must be >= 0 or None, not {interval_ms}")
        self._interval_ms = interval_ms
        self._active: dict[K, _Condition] = {}

    def occurred(self, key: K, now_ms: int) -> Report | None:
        """The condition ``key`` happened (again); a :class:`Report` when a line is due."""
        condition = self._active.get(key)
        if condition is None:
            self._active[key] = _Condition(started_ms=now_ms, last_line_ms=now_ms)
            return Report(first=True, occurrences=1, failing_for_ms=0)
        condition.total += 1
        condition.since_line += 1
        interval = self._interval_ms
        if interval is None or now_ms - condition.last_line_ms < interval:
            return None
        report = Report(
            first=False,
            occurrences=condition.since_line,
            failing_for_ms=max(0, now_ms - condition.started_ms),
        )
        condition.last_line_ms = now_ms
        condition.since_line = 0
        return report

    def cleared(self, key: K, now_ms: int) -> Cleared | None:
        """The condition ``key`` no longer holds; a :class:`Cleared` if it was active."""
        condition = self._active.pop(key, None)
        if condition is None:
            return None
        return Cleared(condition.total, max(0, now_ms - condition.started_ms))

    def cleared_all(self, now_ms: int) -> list[tuple[K, Cleared]]:
        """Every active condition ended (e.g. a success answers them all), oldest first."""
        return [(key, cleared) for key in self.keys() if (cleared := self.cleared(key, now_ms))]

    def __bool__(self) -> bool:
        """True while some condition holds (a cheap test before a per-item :meth:`cleared`)."""
        return bool(self._active)

    def active(self, key: K) -> bool:
        return key in self._active

    def keys(self) -> list[K]:
        """The conditions that currently hold."""
        return list(self._active)

    def forget(self, key: K) -> None:
        """Drop ``key`` without a report (e.g. the topic is no longer wanted)."""
        self._active.pop(key, None)
