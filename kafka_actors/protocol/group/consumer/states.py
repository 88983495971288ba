"""The states of a KIP-848 consumer group member: :class:`MemberState` and its transitions.

Owns: the states (Java's ``MemberState``), which state may follow which
(``previous_valid_states``, as Java), the groups of states the heartbeat asks about
(:data:`SKIP_HEARTBEAT_STATES`, :data:`NOT_IN_GROUP_STATES`, :data:`HEARTBEAT_NOW_STATES`) and
:class:`IllegalStateTransitionError`. The membership
manager (:mod:`kafka_actors.protocol.group.consumer.membership`) drives the transitions.

May touch: nothing; pure data.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

__all__ = [
    "HEARTBEAT_NOW_STATES",
    "NOT_IN_GROUP_STATES",
    "SKIP_HEARTBEAT_STATES",
    "IllegalStateTransitionError",
    "MemberState",
]


class IllegalStateTransitionError(RuntimeError):
    """A transition the member state machine does not allow: a bug (Java IllegalStateException)."""


class MemberState(enum.Enum):
    """The member's state in its consumer group (Java's ``MemberState``)."""

    UNSUBSCRIBED = "UNSUBSCRIBED"
    """Not in a group: never subscribed, or unsubscribed and left (the initial state)."""

    JOINING = "JOINING"
    """Subscribed and joining: heartbeats with member epoch 0 until the broker answers with an
    epoch and possibly an assignment."""

    RECONCILING = "RECONCILING"
    """A new target assignment is being applied: revoke, then assign, with the rebalance
    callbacks (and a commit first when auto-commit is on)."""

    ACKNOWLEDGING = "ACKNOWLEDGING"
    """The target assignment is reconciled: the next heartbeat (sent at once) reports it."""

    STABLE = "STABLE"
    """In the group with the assignment it reported; heartbeats at the broker's interval."""

    FENCED = "FENCED"
    """The broker fenced the member (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH): it releases its
    partitions with onPartitionsLost, then rejoins with epoch 0."""

    PREPARE_LEAVING = "PREPARE_LEAVING"
    """Leaving (unsubscribe or close): the assignment is released with onPartitionsRevoked
    (or onPartitionsLost) before the leave heartbeat."""

    LEAVING = "LEAVING"
    """The leave heartbeat (epoch -1, or -2 for a static member) is due or in flight."""

    FATAL = "FATAL"
    """An unrecoverable error (authorization, unsupported version, ...): no more heartbeats."""

    STALE = "STALE"
    """The poll timer (max.poll.interval.ms) expired: the member left and released its
    partitions; it rejoins on the application's next poll."""

    @property
    def previous_valid_states(self) -> frozenset[MemberState]:
        return _PREVIOUS_VALID_STATES[self]

    def can_transition_to(self, next_state: MemberState) -> bool:
        return next_state is self or self in next_state.previous_valid_states

    @property
    def can_handle_new_assignment(self) -> bool:
        """True in the states where a member intends to stay in the group and reconcile."""
        return self in _PREVIOUS_VALID_STATES[MemberState.RECONCILING]


_S = MemberState
_PREVIOUS_VALID_STATES: Final[Mapping[MemberState, frozenset[MemberState]]] = {
    _S.UNSUBSCRIBED: frozenset({_S.PREPARE_LEAVING, _S.LEAVING, _S.FENCED}),
    _S.JOINING: frozenset({_S.FENCED, _S.UNSUBSCRIBED, _S.STALE}),
    _S.RECONCILING: frozenset({_S.STABLE, _S.JOINING, _S.ACKNOWLEDGING, _S.RECONCILING}),
    _S.ACKNOWLEDGING: frozenset({_S.RECONCILING}),
    _S.STABLE: frozenset({_S.JOINING, _S.ACKNOWLEDGING, _S.RECONCILING}),
    _S.FENCED: frozenset(
        {_S.JOINING, _S.STABLE, _S.RECONCILING, _S.ACKNOWLEDGING, _S.PREPARE_LEAVING, _S.LEAVING}
    ),
    _S.PREPARE_LEAVING: frozenset(
        {_S.JOINING, _S.STABLE, _S.RECONCILING, _S.ACKNOWLEDGING, _S.UNSUBSCRIBED}
    ),
    _S.LEAVING: frozenset({_S.PREPARE_LEAVING}),
    _S.FATAL: frozenset(
        {
            _S.JOINING,
            _S.STABLE,
            _S.RECONCILING,
            _S.ACKNOWLEDGING,
            _S.PREPARE_LEAVING,
            _S.LEAVING,
            _S.UNSUBSCRIBED,
        }
    ),
    _S.STALE: frozenset({_S.LEAVING}),
}

# States in which no heartbeat is sent (Java shouldSkipHeartbeat).
SKIP_HEARTBEAT_STATES: Final = frozenset({_S.UNSUBSCRIBED, _S.FATAL, _S.STALE, _S.FENCED})
# States in which the member is not part of the group (Java isNotInGroup).
NOT_IN_GROUP_STATES: Final = SKIP_HEARTBEAT_STATES
# States that heartbeat without waiting for the interval (Java shouldHeartbeatNow).
HEARTBEAT_NOW_STATES: Final = frozenset({_S.JOINING, _S.ACKNOWLEDGING, _S.LEAVING})
