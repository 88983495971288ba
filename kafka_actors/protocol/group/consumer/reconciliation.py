"""Reconciling a KIP-848 member's target assignment: :class:`AssignmentReconciler`.

Owns: the target and current assignments by topic id (:class:`LocalAssignment`), the topic
names known for those ids, the request for missing names, and the reconciliation in progress
(:class:`Reconciliation`: the resolved target, what it assigns and revokes, the commit it waits
for). It follows the reconciliation of Java's ``ConsumerMembershipManager``
(``maybeReconcile``, ``revokeAndAssign``). It changes no state of the member: each step returns
the state transition the member should make (a :class:`~kafka_actors.protocol.group.consumer.states.
MemberState`, or a :class:`ReconcileStep`), and the member
(:class:`~kafka_actors.protocol.group.consumer.membership.ConsumerMembershipManager`) applies it,
pauses fetching, commits, and runs the rebalance callbacks.

May touch: nothing outside itself; pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kafka_actors.protocol.group.consumer.states import MemberState
from kafka_actors.protocol.messages import TopicPartition

__all__ = [
    "NONE_ASSIGNMENT",
    "AssignmentReconciler",
    "LocalAssignment",
    "ReconcileStep",
    "Reconciliation",
]


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


@dataclass(slots=True)
class Reconciliation:
    """One reconciliation in progress: revoke ``revoked``, then assign ``assigned``."""

    resolved: LocalAssignment
    assigned: frozenset[TopicPartition]
    revoked: frozenset[TopicPartition]
    rejoined: bool = False
    commit_id: int | None = None


@dataclass(frozen=True, slots=True)
class ReconcileStep:
    """What :meth:`AssignmentReconciler.maybe_reconcile` decided, for the member to apply in
    this order: ask for the names of ``missing_topic_ids``, make ``transition``, then run
    ``started`` (pause the revoked partitions, commit first or revoke then assign)."""

    missing_topic_ids: frozenset[str] | None = None
    transition: MemberState | None = None
    started: Reconciliation | None = None
    unresolved_topic_ids: frozenset[str] = frozenset()


class AssignmentReconciler:
    """The target and current assignments and the reconciliation between them (see the module
    docstring). ``log`` is the member's logger (rebound when the member id changes)."""

    def __init__(self, log: Any) -> None:
        self.log = log
        self._current_assignment = NONE_ASSIGNMENT
        self._target_assignment = NONE_ASSIGNMENT
        self._topic_names: dict[str, str] = {}
        self._names_requested: frozenset[str] | None = None
        self._reconciliation: Reconciliation | None = None
        self._retry_reconcile_on_app_poll = False

    @property
    def current_assignment(self) -> LocalAssignment:
        """The last reconciled assignment by topic id (what the heartbeat reports as owned)."""
        return self._current_assignment

    @property
    def target_assignment(self) -> LocalAssignment:
        return self._target_assignment

    @property
    def reconciliation_in_progress(self) -> bool:
        return self._reconciliation is not None

    def target_assignment_reconciled(self) -> bool:
        return self._current_assignment == self._target_assignment

    def on_topic_names(self, mapping: Mapping[str, str]) -> None:
        """Topic id -> name, as the metadata manager knows them (ids never change names)."""
        self._topic_names.update(mapping)
        self._names_requested = None

    def on_assignment_received(
        self, partitions: frozenset[tuple[str, int]], state: MemberState
    ) -> MemberState | None:
        """A heartbeat brought a target assignment: the transition it calls for, if any."""
        updated = self._target_assignment.update_with(partitions)
        if updated is not None:
            self.log.debug(
                "target_assignment_updated",
                local_epoch=updated.local_epoch,
                partitions=len(partitions),
            )
            self._target_assignment = updated
        if not self.target_assignment_reconciled():
            return MemberState.RECONCILING
        if state in (MemberState.RECONCILING, MemberState.JOINING):
            return MemberState.STABLE
        return None

    def maybe_reconcile(
        self,
        state: MemberState,
        owned: frozenset[TopicPartition],
        *,
        can_commit: bool,
        auto_commit: bool,
    ) -> ReconcileStep | None:
        """Start reconciling the target assignment with ``owned`` when the member may."""
        if state is not MemberState.RECONCILING:
            return None
        if self.target_assignment_reconciled() or self._reconciliation is not None:
            return None
        if self._retry_reconcile_on_app_poll and not can_commit:
            return None
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
        need: frozenset[str] | None = None
        if unresolved:
            missing = frozenset(unresolved)
            if self._names_requested != missing:
                self._names_requested = missing
                need = missing
        resolved = LocalAssignment(target.local_epoch, frozenset(resolved_ids))
        current = self._current_assignment
        if not current.is_none and resolved.partitions == current.partitions:
            # Only unresolved topics differ. A new target whose resolvable part is what we own:
            # acknowledge it (Java bumps the local epoch). Already acknowledged at this local
            # epoch: wait for the names (Java would acknowledge again after every response).
            if resolved.local_epoch != current.local_epoch:
                self._current_assignment = resolved
                return ReconcileStep(need, transition=MemberState.ACKNOWLEDGING)
            return ReconcileStep(need)
        if auto_commit and not can_commit:
            return ReconcileStep(need)
        self._retry_reconcile_on_app_poll = False
        assigned = frozenset(resolved_names)
        rec = Reconciliation(resolved=resolved, assigned=assigned, revoked=owned - assigned)
        self._reconciliation = rec
        return ReconcileStep(need, started=rec, unresolved_topic_ids=frozenset(unresolved))

    def take_commit(self, commit_id: int) -> Reconciliation | None:
        """The reconciliation that waited for commit ``commit_id``, now done waiting."""
        rec = self._reconciliation
        if rec is None or rec.commit_id != commit_id:
            return None
        rec.commit_id = None
        return rec

    def abort_if_interrupted(self, rec: Reconciliation, state: MemberState) -> bool:
        """True (and ``rec`` dropped) when the member rejoined or left RECONCILING meanwhile."""
        if state is MemberState.RECONCILING and not rec.rejoined:
            return False
        self.log.info(
            "reconciliation_interrupted",
            reason="member rejoined" if rec.rejoined else f"member is {state.value}",
        )
        if self._reconciliation is rec:
            self._reconciliation = None
        return True

    def failed(self, rec: Reconciliation) -> None:
        """A callback of ``rec`` failed: stay RECONCILING without acknowledging; retry on the
        next application poll. If the broker's rebalance timeout passes first, it fences the
        member."""
        if self._reconciliation is rec:
            self._reconciliation = None
        self._retry_reconcile_on_app_poll = True

    def complete(self, rec: Reconciliation, state: MemberState) -> MemberState | None:
        """``rec``'s onPartitionsAssigned completed: ACKNOWLEDGING, unless interrupted."""
        if self.abort_if_interrupted(rec, state):
            return None
        self._current_assignment = rec.resolved
        self._reconciliation = None
        return MemberState.ACKNOWLEDGING

    def on_joining(self) -> None:
        """The member (re)joins: an interrupted reconciliation stops, the target is forgotten."""
        if self._reconciliation is not None:
            self._reconciliation.rejoined = True
        self._target_assignment = NONE_ASSIGNMENT
        self._names_requested = None
        self._retry_reconcile_on_app_poll = False

    def reset_current_assignment(self) -> None:
        """The member leaves: it reports no assignment any more."""
        self._current_assignment = NONE_ASSIGNMENT

    def clear(self) -> None:
        """The member released its assignment: no current or target assignment."""
        self._current_assignment = NONE_ASSIGNMENT
        self._target_assignment = NONE_ASSIGNMENT
        self._names_requested = None
