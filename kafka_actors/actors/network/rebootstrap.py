"""Metadata recovery's clock (KIP-899 / KIP-1102): since when a Metadata request waits.

Owns: :class:`MetadataRecovery`, the NetworkActor's record of since when a Metadata request
has waited for an answer, the ``metadata.recovery.*`` settings, and the decision that the
trigger time has passed. What is done then (forget every broker and start again from the
bootstrap servers, or fail the waiting Metadata requests) is the NetworkActor's. Pure: the
caller gives it the clock's readings. May touch: nothing.
"""

from __future__ import annotations

from typing import Final

__all__ = ["NO_RECOVERY", "REBOOTSTRAP", "MetadataRecovery"]

#: Keys of the recovery conditions in the NetworkActor's "unavailable" log (their log lines'
#: schedule): a rebootstrap, and "no recovery possible" (``metadata.recovery.strategy=none``).
REBOOTSTRAP: Final = "rebootstrap"
NO_RECOVERY: Final = "metadata_recovery_impossible"


class MetadataRecovery:
    """Since when a Metadata request waits for an answer, and whether that is too long.

    ``rebootstrap``: ``metadata.recovery.strategy=rebootstrap`` (else ``none``);
    ``trigger_s``: ``metadata.recovery.rebootstrap.trigger.ms`` in seconds (0: never).
    """

    __slots__ = ("_wanted_since", "rebootstrap", "trigger_s")

    def __init__(self, *, rebootstrap: bool, trigger_s: float) -> None:
        self.rebootstrap = rebootstrap
        self.trigger_s = trigger_s
        #: Monotonic seconds of the first unanswered Metadata request (None: answered).
        self._wanted_since: float | None = None

    @property
    def waiting(self) -> bool:
        """A Metadata request was accepted and no Metadata response has come since."""
        return self._wanted_since is not None

    def requested(self, now: float) -> None:
        """A Metadata request was accepted (KIP-1102 counts from the first unanswered one)."""
        if self._wanted_since is None:
            self._wanted_since = now

    def answered(self) -> None:
        """A Metadata response came."""
        self._wanted_since = None

    def restart(self, now: float) -> None:
        """The trigger counts again from ``now`` (after a rebootstrap or a report)."""
        if self._wanted_since is not None:
            self._wanted_since = now

    def deadline(self, brokers_known: bool) -> float | None:
        """When the trigger time passes (None: not starved: nothing waits, no trigger, or no
        broker learned yet, when there is nothing to go back from)."""
        if self._wanted_since is None or self.trigger_s <= 0 or not brokers_known:
            return None
        return self._wanted_since + self.trigger_s

    def overdue(self, now: float, brokers_known: bool) -> float | None:
        """Seconds a Metadata request has waited if that reached the trigger, else None."""
        deadline = self.deadline(brokers_known)
        if deadline is None or now < deadline:
            return None
        assert self._wanted_since is not None
        return now - self._wanted_since
