"""Reconciling a KIP-848 member's target assignment: :class:`AssignmentReconciler`.

Owns: the target and current assignments by topic id (:class:`LocalAssignment`), resolving
topic ids to names, the reconciliation itself (revoke, then assign, with the commit before a
revocation when auto-commit is on) and the rebalance callbacks it needs (one outstanding, the
rest in order), including the release of the assignment on leave, fence, stale or fatal. It
follows Java's ``ConsumerMembershipManager`` reconciliation (``maybeReconcile``,
``revokeAndAssign``); the heartbeat, the states and their transitions stay in
:class:`~kafka_actors.protocol.membership.ConsumerMembershipManager`, which derives from it
(the choices are in :mod:`kafka_actors.protocol.membership`).

May touch: nothing outside itself; pure.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kafka_actors.protocol.group_events import (
    CommitBeforeRevocation,
    NeedTopicNames,
    RebalanceCallback,
)
from kafka_actors.protocol.group_member import GroupMemberBase
from kafka_actors.protocol.member_state import MemberState
from kafka_actors.protocol.messages import (
    TopicPartition,
)

if TYPE_CHECKING:
    from kafka_actors.protocol.membership import MembershipConfig


@dataclass(frozen=True, slots=True)
class LocalAssignment:
    """An assignment as topic ids and partitions, with a local epoch bumped on every change.

    Two assignments with the same partitions but different local epochs differ (Java's
    ``LocalAssignment``): a re-sent owned-partitions list is forced by bumping the epoch.
    """

    local_epoch: int
    partitions: frozenset[tuple[str, int]]  # (topic id, partition)

    @property
    def is_none(self) -> bool:
        return self.local_epoch == -1

    def update_with(self, partitions: frozenset[tuple[str, int]]) -> LocalAssignment | None:
        """The next target assignment, or None when ``partitions`` are the current ones."""
        if not self.is_none and partitions == self.partitions:
            return None
        return LocalAssignment(self.local_epoch + 1, partitions)

    def by_topic(self) -> dict[str, tuple[int, ...]]:
        grouped: dict[str, list[int]] = {}
        for topic_id, partition in self.partitions:
            grouped.setdefault(topic_id, []).append(partition)
        return {topic_id: tuple(sorted(parts)) for topic_id, parts in sorted(grouped.items())}


NONE_ASSIGNMENT: Final = LocalAssignment(-1, frozenset())


class _CallbackPurpose(enum.Enum):
    RECONCILE_REVOKE = "reconcile-revoke"
    RECONCILE_ASSIGN = "reconcile-assign"
    RELEASE_ON_LEAVE = "release-on-leave"
    LOST_ON_FENCE = "lost-on-fence"
    LOST_ON_STALE = "lost-on-stale"
    LOST_ON_FATAL = "lost-on-fatal"


_RELEASE_PURPOSES: Final = frozenset(
    {
        _CallbackPurpose.RELEASE_ON_LEAVE,
        _CallbackPurpose.LOST_ON_FENCE,
        _CallbackPurpose.LOST_ON_STALE,
        _CallbackPurpose.LOST_ON_FATAL,
    }
)


@dataclass(slots=True)
class _Reconciliation:
    resolved: LocalAssignment
    assigned: frozenset[TopicPartition]
    revoked: frozenset[TopicPartition]
    rejoined: bool = False
    commit_id: int | None = None


@dataclass(slots=True)
class _PendingCallback:
    callback_id: int
    method: RebalanceCallback
    partitions: frozenset[TopicPartition]
    purpose: _CallbackPurpose
    reconciliation: _Reconciliation | None = None
    assignment: frozenset[TopicPartition] = frozenset()


class AssignmentReconciler(GroupMemberBase):
    """The reconciliation half of the KIP-848 member (see the module docstring).

    :class:`~kafka_actors.protocol.membership.ConsumerMembershipManager` owns the state below
    (initialized in its ``__init__``) and the state transitions this half asks for.
    """

    _config: MembershipConfig
    _log: Any
    _state: MemberState
    _member_id: str
    _member_epoch: int
    _current_assignment: LocalAssignment
    _target_assignment: LocalAssignment
    _topic_names: dict[str, str]
    _names_requested: frozenset[str] | None
    _reconciliation: _Reconciliation | None
    _retry_reconcile_on_app_poll: bool
    _callback_outstanding: _PendingCallback | None
    _callback_queue: deque[_PendingCallback]
    _stale_released: bool
    # State transitions, defined by the manager.
    _transition_to: Callable[[MemberState], None]
    _transition_to_joining: Callable[[], None]
    _transition_to_sending_leave_group: Callable[..., None]
    _maybe_rejoin_stale_member: Callable[[], None]

    def _target_assignment_reconciled(self) -> bool:
        return self._current_assignment == self._target_assignment

    def _process_assignment_received(self, partitions: frozenset[tuple[str, int]]) -> None:
        updated = self._target_assignment.update_with(partitions)
        if updated is not None:
            self._log.debug(
                "target_assignment_updated",
                local_epoch=updated.local_epoch,
                partitions=len(partitions),
            )
            self._target_assignment = updated
        if not self._target_assignment_reconciled():
            self._transition_to(MemberState.RECONCILING)
        elif self._state in (MemberState.RECONCILING, MemberState.JOINING):
            self._transition_to(MemberState.STABLE)

    def _maybe_reconcile(self, now_ms: int, *, can_commit: bool) -> None:
        if self._state is not MemberState.RECONCILING:
            return
        if self._target_assignment_reconciled() or self._reconciliation is not None:
            return
        if self._retry_reconcile_on_app_poll and not can_commit:
            return
        target = self._target_assignment
        resolved_ids: set[tuple[str, int]] = set()
        resolved_names: set[TopicPartition] = set()
        unresolved: set[str] = set()
        for topic_id, partition in target.partitions:
            name = self._topic_names.get(topic_id)
            if name is None:
                unresolved.add(topic_id)
            else:
                resolved_ids.add((topic_id, partition))
                resolved_names.add(TopicPartition(name, partition))
        if unresolved:
            missing = frozenset(unresolved)
            if self._names_requested != missing:
                self._names_requested = missing
                self._events.append(NeedTopicNames(missing))
        resolved = LocalAssignment(target.local_epoch, frozenset(resolved_ids))
        current = self._current_assignment
        if not current.is_none and resolved.partitions == current.partitions:
            # Only unresolved topics differ. A new target whose resolvable part is what we own:
            # acknowledge it (Java bumps the local epoch). Already acknowledged at this local
            # epoch: wait for the names (Java would acknowledge again after every response).
            if resolved.local_epoch != current.local_epoch:
                self._current_assignment = resolved
                self._transition_to(MemberState.ACKNOWLEDGING)
            return
        if self._config.auto_commit_enabled and not can_commit:
            return
        self._retry_reconcile_on_app_poll = False
        assigned = frozenset(resolved_names)
        owned = self._assignment
        revoked = owned - assigned
        self._log.info(
            "reconciling",
            local_epoch=resolved.local_epoch,
            assigned=sorted(str(tp) for tp in assigned),
            owned=sorted(str(tp) for tp in owned),
            added=sorted(str(tp) for tp in assigned - owned),
            revoked=sorted(str(tp) for tp in revoked),
            unresolved_topic_ids=sorted(unresolved),
        )
        rec = _Reconciliation(resolved=resolved, assigned=assigned, revoked=revoked)
        self._reconciliation = rec
        self._pause_fetching(revoked)
        if self._config.auto_commit_enabled:
            rec.commit_id = self._new_id()
            self._events.append(
                CommitBeforeRevocation(
                    revoked, now_ms + self._config.rebalance_timeout_ms, rec.commit_id
                )
            )
            return
        self._revoke_then_assign(rec)

    def _revoke_then_assign(self, rec: _Reconciliation) -> None:
        revoked = rec.revoked & self._assignment  # only what is still owned
        if revoked:
            self._pause_fetching(revoked)
            self._request_callback(
                RebalanceCallback.ON_PARTITIONS_REVOKED,
                revoked,
                _CallbackPurpose.RECONCILE_REVOKE,
                reconciliation=rec,
            )
        else:
            self._assign(rec)

    def _assign(self, rec: _Reconciliation) -> None:
        added = rec.assigned - self._assignment
        self._set_assignment(rec.assigned)
        self._awaiting_callback = self._awaiting_callback | added
        self._request_callback(
            RebalanceCallback.ON_PARTITIONS_ASSIGNED,
            added,
            _CallbackPurpose.RECONCILE_ASSIGN,
            reconciliation=rec,
            assignment=rec.assigned,
            always=True,
        )

    def _maybe_abort_reconciliation(self, rec: _Reconciliation) -> bool:
        if self._state is MemberState.RECONCILING and not rec.rejoined:
            return False
        self._log.info(
            "reconciliation_interrupted",
            reason="member rejoined" if rec.rejoined else f"member is {self._state.value}",
        )
        if self._reconciliation is rec:
            self._reconciliation = None
        return True

    def _reconciliation_failed(self, rec: _Reconciliation) -> None:
        # Stay RECONCILING without acknowledging; retry on the next application poll. If the
        # broker's rebalance timeout passes first, it fences the member.
        if self._reconciliation is rec:
            self._reconciliation = None
        self._retry_reconcile_on_app_poll = True

    def _clear_assignment(self) -> None:
        self._set_assignment(frozenset())
        self._current_assignment = NONE_ASSIGNMENT
        self._target_assignment = NONE_ASSIGNMENT
        self._names_requested = None

    def _request_callback(
        self,
        method: RebalanceCallback,
        partitions: frozenset[TopicPartition],
        purpose: _CallbackPurpose,
        *,
        reconciliation: _Reconciliation | None = None,
        assignment: frozenset[TopicPartition] = frozenset(),
        always: bool = False,
    ) -> None:
        callback = _PendingCallback(
            self._new_id(), method, partitions, purpose, reconciliation, assignment
        )
        if not partitions and not always:
            # Nothing to release: Java does not invoke the listener; continue at once.
            self._run_callback_continuation(callback, None)
            return
        if self._callback_outstanding is None and not self._callback_queue:
            self._emit_callback(callback)
        else:
            self._callback_queue.append(callback)

    def _release_pending(self) -> bool:
        """True while an onPartitionsRevoked/Lost releasing the whole assignment is pending."""
        pending = list(self._callback_queue)
        if self._callback_outstanding is not None:
            pending.append(self._callback_outstanding)
        return any(callback.purpose in _RELEASE_PURPOSES for callback in pending)

    def _emit_callback(self, callback: _PendingCallback) -> None:
        self._callback_outstanding = callback
        self._publish_callback(
            callback.method, callback.partitions, callback.callback_id, callback.assignment
        )

    def _run_callback_continuation(
        self, callback: _PendingCallback, error: BaseException | None
    ) -> None:
        purpose = callback.purpose
        rec = callback.reconciliation
        if purpose is _CallbackPurpose.RECONCILE_REVOKE:
            assert rec is not None
            if error is not None:
                self._reconciliation_failed(rec)
            elif not self._maybe_abort_reconciliation(rec):
                self._assign(rec)
        elif purpose is _CallbackPurpose.RECONCILE_ASSIGN:
            assert rec is not None
            if error is not None:
                # Added partitions stay non-fetchable until a later reconciliation succeeds.
                self._reconciliation_failed(rec)
                return
            self._awaiting_callback = self._awaiting_callback - rec.assigned
            if not self._maybe_abort_reconciliation(rec):
                self._current_assignment = rec.resolved
                self._reconciliation = None
                self._transition_to(MemberState.ACKNOWLEDGING)
        elif purpose is _CallbackPurpose.RELEASE_ON_LEAVE:
            self._on_release_on_leave_done(error)
        elif purpose is _CallbackPurpose.LOST_ON_FENCE:
            self._clear_assignment()
            if self._state is MemberState.FENCED:
                self._transition_to_joining()
        elif purpose is _CallbackPurpose.LOST_ON_STALE:
            self._clear_assignment()
            self._stale_released = True
            self._maybe_rejoin_stale_member()
        else:  # LOST_ON_FATAL
            self._clear_assignment()

    def _on_release_on_leave_done(self, error: BaseException | None) -> None:
        self._clear_assignment()
        if self._state is MemberState.PREPARE_LEAVING:
            self._transition_to_sending_leave_group(due_to_expired_poll_timer=False)
