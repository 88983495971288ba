"""The consumer's subscription state: what it subscribed to, what it owns, where it stands.

Owns: :class:`SubscriptionState` — the subscription type (topics, pattern, user assignment), the
subscribed topics / pattern, the assigned partitions in assignment order, and per assigned
partition a :class:`TopicPartitionState`: fetch state (initializing, fetching, awaiting reset,
awaiting validation), position (:class:`FetchPosition`: offset, the leader epoch of the record
before it, the current leader), the consumed position (see below), paused, pending revocation
(cooperative / KIP-848), pending the onPartitionsAssigned callback (KIP-848), the reset strategy
awaited, retry backoff of resets and validations, high watermark, last stable offset, log start
offset, preferred read replica with its expiry (KIP-392), and "end of partition" tracking. An
``assignment_id`` grows on every assignment change so data fetched for an older assignment can
be recognised.

Position and consumed position: the fetch manager moves the *position* when it hands records
to a front end (:meth:`SubscriptionState.advance_position`); the front end moves the
*consumed* position when it returns them to the application
(:meth:`SubscriptionState.advance_consumed`); a seek, reset or validation sets both. "All
consumed" commits (:meth:`SubscriptionState.all_consumed`: auto-commit, the commit before a
revocation, ``commit_sync()`` without offsets) use the consumed position, so that they never
cover records collected but not (or never, when their partition is being revoked) returned to
the application: Java commits what poll() returned, never more.

Modelled on the Java client's ``SubscriptionState`` (facts only). It is the one mutable object
shared by reference between the facade and the fetch, commit, offsets and membership actors:
one lock guards it and every public method is atomic. Values handed out are immutable snapshots.
Time is always a parameter (``now_ms``); nothing here reads a clock, does I/O or logs.

May touch: :mod:`kafka_actors.errors`, :mod:`kafka_actors.protocol.messages` and the
``IsolationLevel`` of :mod:`kafka_actors.protocol.records.decode` (re-exported here) only.
"""

from __future__ import annotations

import enum
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, overload

from kafka_actors.errors import IllegalStateError
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.records.decode import IsolationLevel

if TYPE_CHECKING:
    from _collections_abc import dict_items, dict_values

__all__ = [
    "FetchPosition",
    "FetchState",
    "IsolationLevel",
    "LeaderAndEpoch",
    "OffsetResetStrategy",
    "ResetKind",
    "SubscriptionState",
    "SubscriptionType",
    "TopicPartitionState",
    "ValidationOutcome",
]


class SubscriptionType(enum.Enum):
    NONE = "NONE"
    AUTO_TOPICS = "AUTO_TOPICS"
    AUTO_PATTERN = "AUTO_PATTERN"
    USER_ASSIGNED = "USER_ASSIGNED"


class ResetKind(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    NONE = "none"
    BY_DURATION = "by_duration"


@dataclass(frozen=True, slots=True)
class OffsetResetStrategy:
    """``auto.offset.reset`` (KIP-1106 adds ``by_duration:<ISO-8601 duration>``)."""

    kind: ResetKind
    duration: timedelta | None = None

    @classmethod
    def of(cls, name: str, duration: timedelta | None = None) -> OffsetResetStrategy:
        """From the values :class:`kafka_actors.config.ConsumerConfig` holds."""
        kind = ResetKind(name.lower())
        if kind is ResetKind.BY_DURATION and duration is None:
            raise ValueError("by_duration needs a duration")
        return cls(kind, duration if kind is ResetKind.BY_DURATION else None)

    def timestamp_ms(self, now_epoch_ms: int) -> int:
        """The ListOffsets timestamp this strategy asks for: -2 earliest, -1 latest, or the
        wall-clock time ``duration`` ago for by_duration. NONE has no timestamp."""
        if self.kind is ResetKind.EARLIEST:
            return -2
        if self.kind is ResetKind.LATEST:
            return -1
        if self.kind is ResetKind.BY_DURATION:
            assert self.duration is not None
            return now_epoch_ms - int(self.duration.total_seconds() * 1000)
        raise IllegalStateError("auto.offset.reset=none has no reset timestamp")


EARLIEST = OffsetResetStrategy(ResetKind.EARLIEST)
LATEST = OffsetResetStrategy(ResetKind.LATEST)
NO_RESET = OffsetResetStrategy(ResetKind.NONE)


@dataclass(frozen=True, slots=True)
class LeaderAndEpoch:
    """The leader of a partition as the client's metadata knows it (None: unknown)."""

    leader: int | None = None
    epoch: int | None = None


NO_LEADER = LeaderAndEpoch()


@dataclass(frozen=True, slots=True)
class FetchPosition:
    """Where the next fetch of a partition starts.

    ``offset_epoch`` is the leader epoch of the record before ``offset`` (from the last record
    consumed, or the committed offset's epoch), used for commits and truncation detection;
    ``current_leader`` is the leader (and its epoch) the position is fetched from, its epoch
    is sent as the Fetch's ``current_leader_epoch``.
    """

    offset: int
    offset_epoch: int | None = None
    current_leader: LeaderAndEpoch = NO_LEADER


class ValidationOutcome(enum.Enum):
    """What :meth:`SubscriptionState.maybe_complete_validation` did."""

    IGNORED = "IGNORED"  # no longer awaiting validation at that position
    VALID = "VALID"  # the position is on the leader's log: fetch from it
    MOVED_TO_DIVERGENT = "MOVED_TO_DIVERGENT"  # truncated; moved to the divergent offset
    TRUNCATED = "TRUNCATED"  # truncated, no reset policy: the user must be told
    RESET = "RESET"  # the leader knows no such epoch: reset by auto.offset.reset
    NO_OFFSET = "NO_OFFSET"  # ... and there is no reset policy


class FetchState(enum.Enum):
    INITIALIZING = "INITIALIZING"
    FETCHING = "FETCHING"
    AWAIT_RESET = "AWAIT_RESET"
    AWAIT_VALIDATION = "AWAIT_VALIDATION"

    @property
    def has_position(self) -> bool:
        return self in (FetchState.FETCHING, FetchState.AWAIT_VALIDATION)

    @property
    def has_valid_position(self) -> bool:
        return self is FetchState.FETCHING


@dataclass(frozen=True, slots=True)
class TopicPartitionState:
    """An immutable snapshot of one assigned partition's state."""

    fetch_state: FetchState = FetchState.INITIALIZING
    position: FetchPosition | None = None
    #: Where the application stands: records before it were returned to it (or skipped by a
    #: seek or reset); never past ``position``. What "all consumed" commits commit.
    consumed: FetchPosition | None = None
    high_watermark: int | None = None
    last_stable_offset: int | None = None
    log_start_offset: int | None = None
    paused: bool = False
    pending_revocation: bool = False
    pending_on_assigned_callback: bool = False
    reset_strategy: OffsetResetStrategy | None = None
    next_retry_time_ms: int | None = None
    preferred_read_replica: int | None = None
    preferred_read_replica_expire_ms: int | None = None
    end_of_partition_reported: bool = False

    @property
    def has_position(self) -> bool:
        return self.fetch_state.has_position

    @property
    def has_valid_position(self) -> bool:
        return self.fetch_state.has_valid_position

    @property
    def awaiting_reset(self) -> bool:
        return self.fetch_state is FetchState.AWAIT_RESET

    @property
    def awaiting_validation(self) -> bool:
        return self.fetch_state is FetchState.AWAIT_VALIDATION

    @property
    def is_fetchable(self) -> bool:
        return (
            self.has_valid_position
            and not self.paused
            and not self.pending_revocation
            and not self.pending_on_assigned_callback
        )

    def awaiting_retry_backoff(self, now_ms: int) -> bool:
        return self.next_retry_time_ms is not None and now_ms < self.next_retry_time_ms

    def end_offset(self, isolation: IsolationLevel) -> int | None:
        if isolation is IsolationLevel.READ_COMMITTED:
            return self.last_stable_offset
        return self.high_watermark


_NOT_FETCHING = (FetchState.INITIALIZING, FetchState.AWAIT_RESET, FetchState.AWAIT_VALIDATION)


class PartitionStates(dict[TopicPartition, TopicPartitionState]):
    """The assigned partitions' states in assignment order (a dict), which also keeps what
    lets the per-poll checks cost O(partitions that need something) instead of O(assigned):

    - ``not_fetching``: per :class:`FetchState` other than FETCHING, the partitions in it;
    - ``usability_changes``: grows at every write that may make buffered fetched data unusable
      (a partition added or removed, a new fetch state, position, revocation or callback
      flag), except :meth:`set_advanced` (the fetch buffer moving a position along its own
      data), :meth:`set_consumed` (the consumed position only) and :meth:`move_to_end`
      (order only);
    - ``moved``: consumed positions moved by :meth:`move_consumed` (a front end returning one
      record at a time: ``async for``) and not yet written into their states. Making a new
      state per record cost more than the rest of returning it; a read of a state
      (:meth:`get`, ``[]``, :meth:`items`, :meth:`values`) first writes them in, so every state
      read has its consumed position; any write of a state drops its pending move (the write
      was made from a read, or replaces the state). Only :meth:`unread_get` skips them, for
      what the consumed position does not decide.

    Mutated only through item assignment, ``del``, :meth:`pop`, :meth:`set_advanced`,
    :meth:`set_consumed`, :meth:`move_consumed` and :meth:`move_to_end` (the other dict
    mutators raise)."""

    __slots__ = ("moved", "not_fetching", "usability_changes")

    def __init__(self, items: Iterable[tuple[TopicPartition, TopicPartitionState]] = ()) -> None:
        self.moved: dict[TopicPartition, FetchPosition] = {}
        super().__init__(items)
        self.not_fetching: dict[FetchState, set[TopicPartition]] = {
            state: set() for state in _NOT_FETCHING
        }
        self.usability_changes = 0
        for tp, state in self.items():
            if state.fetch_state is not FetchState.FETCHING:
                self.not_fetching[state.fetch_state].add(tp)

    def _index(
        self, tp: TopicPartition, old: TopicPartitionState | None, new: TopicPartitionState | None
    ) -> None:
        old_fs = None if old is None else old.fetch_state
        new_fs = None if new is None else new.fetch_state
        if old_fs is not new_fs:
            if old_fs is not None and old_fs is not FetchState.FETCHING:
                self.not_fetching[old_fs].discard(tp)
            if new_fs is not None and new_fs is not FetchState.FETCHING:
                self.not_fetching[new_fs].add(tp)
        if (
            old is None
            or new is None
            or old_fs is not new_fs
            or old.position != new.position
            or old.pending_revocation != new.pending_revocation
            or old.pending_on_assigned_callback != new.pending_on_assigned_callback
        ):
            self.usability_changes += 1

    def _write_moved(self) -> None:
        """Write the pending consumed positions into their states (class doc)."""
        moved = self.moved
        for tp, consumed in moved.items():
            state = super().get(tp)
            if state is not None:
                super().__setitem__(tp, replace(state, consumed=consumed))
        moved.clear()

    @overload  # type: ignore[override]
    def get(self, tp: TopicPartition, default: None = None) -> TopicPartitionState | None: ...

    @overload
    def get(self, tp: TopicPartition, default: TopicPartitionState) -> TopicPartitionState: ...

    def get(
        self, tp: TopicPartition, default: TopicPartitionState | None = None
    ) -> TopicPartitionState | None:
        if self.moved:
            self._write_moved()
        return super().get(tp, default)

    def __getitem__(self, tp: TopicPartition) -> TopicPartitionState:
        if self.moved:
            self._write_moved()
        return super().__getitem__(tp)

    def items(self) -> dict_items[TopicPartition, TopicPartitionState]:
        if self.moved:
            self._write_moved()
        return super().items()

    def values(self) -> dict_values[TopicPartition, TopicPartitionState]:
        if self.moved:
            self._write_moved()
        return super().values()

    def unread_get(self, tp: TopicPartition) -> TopicPartitionState | None:
        """``tp``'s state without its pending consumed position (class doc): for a check
        the consumed position plays no part in."""
        return super().get(tp)

    def __setitem__(self, tp: TopicPartition, state: TopicPartitionState) -> None:
        self.moved.pop(tp, None)
        self._index(tp, super().get(tp), state)
        super().__setitem__(tp, state)

    def __delitem__(self, tp: TopicPartition) -> None:
        self.moved.pop(tp, None)
        self._index(tp, super().__getitem__(tp), None)
        super().__delitem__(tp)

    def pop(self, tp: TopicPartition, *default: Any) -> Any:
        self.moved.pop(tp, None)
        if tp in self:
            self._index(tp, super().__getitem__(tp), None)
        return super().pop(tp, *default)

    def set_advanced(self, tp: TopicPartition, state: TopicPartitionState) -> None:
        """``state`` for ``tp`` with only its position moved by the fetch buffer along the
        data it holds (no usability change)."""
        self.moved.pop(tp, None)
        super().__setitem__(tp, state)

    def set_consumed(self, tp: TopicPartition, state: TopicPartitionState) -> None:
        """``state`` for ``tp`` with only its consumed position changed (nothing indexed
        depends on it)."""
        self.moved.pop(tp, None)
        super().__setitem__(tp, state)

    def move_consumed(self, tp: TopicPartition, consumed: FetchPosition) -> None:
        """``tp``'s consumed position moves to ``consumed``, written into its state at the next
        read (class doc)."""
        self.moved[tp] = consumed

    def move_to_end(self, tp: TopicPartition) -> None:
        """``tp`` last in assignment order (state unchanged)."""
        state = super().pop(tp, None)
        if state is not None:
            super().__setitem__(tp, state)

    def _no(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("PartitionStates is mutated by item assignment, del and pop only")

    clear = update = setdefault = popitem = __ior__ = _no


class SubscriptionState:
    """The shared, thread-safe subscription and per-partition fetch state (see module doc).

    ``default_reset_strategy`` is ``auto.offset.reset``; partitions whose committed offset turns
    out to be missing are reset with it (:meth:`reset_initializing_positions`).

    Why one class of ~780 lines: it is the one object the actors and the front ends share, and
    its lock is what makes a hand-out check and a revocation atomic with respect to each other
    (as Java's ``SubscriptionState``, also one class). It is many short methods, each one hold
    of that lock; splitting it would split the lock's scope or pass it around.
    """

    def __init__(self, default_reset_strategy: OffsetResetStrategy = LATEST) -> None:
        self._lock = threading.RLock()
        self._default_reset_strategy = default_reset_strategy
        self._type = SubscriptionType.NONE
        self._subscription: frozenset[str] = frozenset()
        self._pattern: re.Pattern[str] | None = None
        #: The group's coordinator evaluates the pattern (KIP-848: RE2J, on the broker): an
        #: assigned topic is of the subscription whether or not Python's ``re`` matches it.
        self._broker_pattern = False
        #: The subscribed regex as given (None: none), also when ``re`` cannot read it.
        self._regex: str | None = None
        # Assignment in assignment order (dicts keep insertion order).
        self._assignment = PartitionStates()
        self._assignment_id = 0

    # -- subscription ----------------------------------------------------------------------

    @property
    def default_reset_strategy(self) -> OffsetResetStrategy:
        return self._default_reset_strategy

    @property
    def subscription_type(self) -> SubscriptionType:
        with self._lock:
            return self._type

    @property
    def assignment_id(self) -> int:
        """Grows by one on every change of the assigned partitions."""
        with self._lock:
            return self._assignment_id

    def _set_type(self, wanted: SubscriptionType) -> None:
        if self._type is SubscriptionType.NONE:
            self._type = wanted
        elif self._type is not wanted:
            raise IllegalStateError(
                "Subscription to topics, partitions and pattern are mutually exclusive "
                f"(current: {self._type.value}, requested: {wanted.value})"
            )

    def subscribe(self, topics: Iterable[str]) -> bool:
        """Subscribe to topic names (AUTO_TOPICS); True when the subscription changed."""
        wanted = frozenset(topics)
        for topic in wanted:
            if not topic or not topic.strip():
                raise ValueError("Topic names in a subscription must be non-empty")
        with self._lock:
            self._set_type(SubscriptionType.AUTO_TOPICS)
            self._pattern = None
            self._broker_pattern = False
            self._regex = None
            return self._change_subscription(wanted)

    def subscribe_pattern(
        self, pattern: str | re.Pattern[str], *, broker_evaluated: bool = False
    ) -> None:
        """Subscribe to every topic matching a regular expression (AUTO_PATTERN). The topics
        matching it are set by the metadata layer with :meth:`subscribe_from_pattern`.

        ``broker_evaluated``: the group's coordinator decides which topics match (the
        consumer group protocol evaluates the regex on the broker, with RE2J): a pattern
        Python's ``re`` cannot read is accepted (nothing is matched locally then, and the
        subscription is the topics of the assignment), and every assigned topic is of the
        subscription. Otherwise a pattern ``re`` cannot read raises ``re.error``."""
        compiled: re.Pattern[str] | None
        if isinstance(pattern, str):
            try:
                compiled = re.compile(pattern)
            except re.error:
                if not broker_evaluated:
                    raise
                compiled = None
        else:
            compiled = pattern
        with self._lock:
            self._set_type(SubscriptionType.AUTO_PATTERN)
            self._pattern = compiled
            self._broker_pattern = broker_evaluated
            self._regex = pattern if isinstance(pattern, str) else pattern.pattern

    def subscribe_from_pattern(self, topics: Iterable[str]) -> bool:
        """The topics currently matching the subscribed pattern; True when they changed."""
        with self._lock:
            if self._type is not SubscriptionType.AUTO_PATTERN:
                raise IllegalStateError("Not subscribed to a pattern")
            return self._change_subscription(frozenset(topics))

    def _change_subscription(self, topics: frozenset[str]) -> bool:
        if topics == self._subscription:
            return False
        self._subscription = topics
        return True

    @property
    def subscription(self) -> frozenset[str]:
        """The subscribed topic names (for a pattern: the topics matching it); empty when
        partitions were assigned by the user."""
        with self._lock:
            return self._subscription if self._has_auto() else frozenset()

    @property
    def subscribed_pattern(self) -> re.Pattern[str] | None:
        with self._lock:
            return self._pattern

    @property
    def subscribed_regex(self) -> str | None:
        """The subscribed regex as given (also one only the broker reads); None: none."""
        with self._lock:
            return self._regex

    def matches_subscribed_pattern(self, topic: str) -> bool:
        with self._lock:
            return self._pattern is not None and self._pattern.fullmatch(topic) is not None

    def has_auto_assigned_partitions(self) -> bool:
        with self._lock:
            return self._has_auto()

    def _has_auto(self) -> bool:
        return self._type in (SubscriptionType.AUTO_TOPICS, SubscriptionType.AUTO_PATTERN)

    def has_no_subscription_or_user_assignment(self) -> bool:
        with self._lock:
            return self._type is SubscriptionType.NONE

    def metadata_topics(self) -> frozenset[str]:
        """Topics whose metadata the consumer needs: the subscription plus assigned topics."""
        with self._lock:
            topics = {tp.topic for tp in self._assignment}
            if self._has_auto():
                topics |= self._subscription
            return frozenset(topics)

    def unsubscribe(self) -> None:
        """Drop the subscription and the assignment; the type becomes NONE again."""
        with self._lock:
            self._subscription = frozenset()
            self._pattern = None
            self._broker_pattern = False
            self._regex = None
            self._type = SubscriptionType.NONE
            if self._assignment:
                self._assignment = self._replaced_assignment({})
                self._assignment_id += 1

    # -- assignment ------------------------------------------------------------------------

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> bool:
        """Manual assignment (USER_ASSIGNED). State of partitions kept across the change is
        kept; True when the assignment changed."""
        wanted = list(dict.fromkeys(partitions))
        with self._lock:
            self._set_type(SubscriptionType.USER_ASSIGNED)
            return self._set_assignment(wanted)

    def assign_from_subscribed(self, partitions: Iterable[TopicPartition]) -> bool:
        """The group's assignment for an auto subscription. Every partition must belong to a
        subscribed topic (or match the pattern, unless the broker evaluates it); True when the
        assignment changed."""
        wanted = list(dict.fromkeys(partitions))
        with self._lock:
            if not self._has_auto():
                raise IllegalStateError(
                    "Assignment from the group is only allowed with a topic or pattern "
                    f"subscription (current: {self._type.value})"
                )
            if self._broker_pattern:
                if self._pattern is None:  # nothing matched here: the broker's match
                    self._change_subscription(frozenset(tp.topic for tp in wanted))
                return self._set_assignment(wanted)
            for tp in wanted:
                if tp.topic not in self._subscription and not (
                    self._pattern is not None and self._pattern.fullmatch(tp.topic)
                ):
                    raise ValueError(f"Assigned partition {tp} is not of a subscribed topic")
            return self._set_assignment(wanted)

    def assign_from_subscribed_awaiting_callback(
        self, partitions: Iterable[TopicPartition], added: Iterable[TopicPartition]
    ) -> bool:
        """As :meth:`assign_from_subscribed`, with the newly ``added`` partitions not fetchable
        until :meth:`enable_fetching_for_new_partitions` (after onPartitionsAssigned, KIP-848)."""
        added_set = frozenset(added)
        with self._lock:
            changed = self.assign_from_subscribed(partitions)
            for tp in added_set:
                state = self._assignment.get(tp)
                if state is not None:
                    self._assignment[tp] = replace(state, pending_on_assigned_callback=True)
            return changed

    def enable_fetching_for_new_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                state = self._assignment.get(tp)
                if state is not None:
                    self._assignment[tp] = replace(state, pending_on_assigned_callback=False)

    def _set_assignment(self, wanted: list[TopicPartition]) -> bool:
        if list(self._assignment) == wanted:
            return False
        old = self._assignment
        self._assignment = self._replaced_assignment(
            {tp: old.get(tp, TopicPartitionState()) for tp in wanted}
        )
        self._assignment_id += 1
        return True

    def _replaced_assignment(
        self, states: dict[TopicPartition, TopicPartitionState]
    ) -> PartitionStates:
        """``states`` as the new assignment map, its usability changes counted on from the
        old one's (a new assignment is a change)."""
        new = PartitionStates(states.items())
        new.usability_changes = self._assignment.usability_changes + 1
        return new

    def move_partition_to_end(self, tp: TopicPartition) -> None:
        """Put ``tp`` last in assignment order, so the next fetch lists it last (fairness
        between partitions when a response is bounded by fetch.max.bytes, as Java)."""
        with self._lock:
            self._assignment.move_to_end(tp)

    def assigned_partitions(self) -> frozenset[TopicPartition]:
        with self._lock:
            return frozenset(self._assignment)

    def assigned_partitions_list(self) -> tuple[TopicPartition, ...]:
        """Assigned partitions in assignment order."""
        with self._lock:
            return tuple(self._assignment)

    def num_assigned_partitions(self) -> int:
        with self._lock:
            return len(self._assignment)

    def is_assigned(self, tp: TopicPartition) -> bool:
        with self._lock:
            return tp in self._assignment

    def partition_state(self, tp: TopicPartition) -> TopicPartitionState | None:
        """A snapshot of the partition's state, or None when it is not assigned."""
        with self._lock:
            return self._assignment.get(tp)

    def partition_states(self) -> tuple[tuple[TopicPartition, TopicPartitionState], ...]:
        """Every assigned partition with a snapshot of its state, in assignment order (one
        hold of the lock: the states are immutable)."""
        with self._lock:
            return tuple(self._assignment.items())

    def _state(self, tp: TopicPartition) -> TopicPartitionState:
        state = self._assignment.get(tp)
        if state is None:
            raise IllegalStateError(f"No current assignment for partition {tp}")
        return state

    def _update(self, tp: TopicPartition, **changes: object) -> None:
        self._assignment[tp] = replace(self._state(tp), **changes)  # type: ignore[arg-type]

    # -- positions -------------------------------------------------------------------------

    def seek(self, tp: TopicPartition, offset: int | FetchPosition) -> None:
        """Set a validated position: fetching starts there (Java seekValidated)."""
        position = offset if isinstance(offset, FetchPosition) else FetchPosition(offset)
        if position.offset < 0:
            raise ValueError(f"Seek offset must not be negative: {position.offset}")
        with self._lock:
            self._update(
                tp,
                fetch_state=FetchState.FETCHING,
                position=position,
                consumed=position,
                reset_strategy=None,
                next_retry_time_ms=None,
                end_of_partition_reported=False,
            )

    def seek_back_if_at(
        self, tp: TopicPartition, at_offset: int, offset: int, epoch: int | None = None
    ) -> bool:
        """Move ``tp``'s position (and consumed position) back to ``offset`` (keeping its
        current leader) only while it is still at ``at_offset``, where the fetch manager moved
        it when it handed records out (compare-and-set: a seek or reset since wins). How a
        front end gives back records it will not return, so that nothing is skipped. True
        when moved."""
        with self._lock:
            state = self._assignment.get(tp)
            if state is None or state.position is None or state.position.offset != at_offset:
                return False
            self.seek(tp, FetchPosition(offset, epoch, state.position.current_leader))
            return True

    def seek_unvalidated(self, tp: TopicPartition, position: FetchPosition) -> None:
        """Set a position that must first be validated against the leader's log (truncation
        detection, KIP-320) when it carries a leader epoch; without one it is used as is."""
        if position.offset < 0:
            raise ValueError(f"Seek offset must not be negative: {position.offset}")
        with self._lock:
            state = (
                FetchState.AWAIT_VALIDATION
                if position.offset_epoch is not None
                else FetchState.FETCHING
            )
            self._update(
                tp,
                fetch_state=state,
                position=position,
                consumed=position,
                reset_strategy=None,
                next_retry_time_ms=None,
                end_of_partition_reported=False,
            )

    def complete_validation(
        self, tp: TopicPartition, position: FetchPosition | None = None
    ) -> bool:
        """Validation of the position succeeded (or moved it to ``position`` after a
        truncation); True when the partition was still awaiting validation."""
        with self._lock:
            state = self._assignment.get(tp)
            if state is None or not state.awaiting_validation:
                return False
            self._assignment[tp] = replace(
                state,
                fetch_state=FetchState.FETCHING,
                position=position if position is not None else state.position,
                consumed=position if position is not None else state.consumed,
                next_retry_time_ms=None,
            )
            return True

    def partitions_needing_validation(self, now_ms: int) -> tuple[TopicPartition, ...]:
        with self._lock:
            if not self._assignment.not_fetching[FetchState.AWAIT_VALIDATION]:
                return ()
            return tuple(
                tp
                for tp, s in self._assignment.items()
                if s.awaiting_validation and not s.awaiting_retry_backoff(now_ms)
            )

    def position(self, tp: TopicPartition) -> FetchPosition | None:
        """The partition's position (validated or not), None when it has none."""
        with self._lock:
            state = self._state(tp)
            return state.position if state.has_position else None

    def valid_position(self, tp: TopicPartition) -> FetchPosition | None:
        with self._lock:
            state = self._assignment.get(tp)
            if state is None or not state.has_valid_position:
                return None
            return state.position

    def advance_position(
        self, tp: TopicPartition, expected_offset: int, new_position: FetchPosition
    ) -> bool:
        """Move a fetchable partition from ``expected_offset`` to ``new_position`` in one step;
        False (nothing changed) when the partition is no longer assigned, not fetchable, or its
        position is not ``expected_offset`` any more (a seek or reset came first)."""
        with self._lock:
            found = self._fetching(tp)
            if found is None or found[1].offset != expected_offset:
                return False
            state, position = found
            if new_position.current_leader == NO_LEADER:
                new_position = replace(new_position, current_leader=position.current_leader)
            self._assignment.set_advanced(tp, replace(state, position=new_position))
            return True

    def _fetching(self, tp: TopicPartition) -> tuple[TopicPartitionState, FetchPosition] | None:
        """``tp``'s state and position when it is assigned, fetchable and has a position
        (under the lock)."""
        state = self._assignment.get(tp)
        if state is None or not state.is_fetchable or state.position is None:
            return None
        return state, state.position

    def advance_consumed(
        self, tp: TopicPartition, consumed: FetchPosition, *, from_offset: int | None = None
    ) -> bool:
        """The application received the records before ``consumed`` (a front end returned
        them). Never past the position; with ``from_offset``, only if the consumed position is
        still there (a collect that moved the position over batches without records, such as
        transaction markers, moves the consumed position along only when nothing before them
        waits to be returned). False (nothing changed) when not applied."""
        with self._lock:
            state = self._assignment.get(tp)
            if (
                state is None
                or not state.has_valid_position
                or state.position is None
                or consumed.offset > state.position.offset
            ):
                return False
            if from_offset is not None and (
                state.consumed is None or state.consumed.offset != from_offset
            ):
                return False
            self._assignment.set_consumed(tp, replace(state, consumed=consumed))
            return True

    def consume_one(self, tp: TopicPartition, consumed: FetchPosition) -> bool:
        """A front end returns one record of ``tp`` if ``tp`` is fetchable now (False: it
        does not, nothing changed); the consumed position then moves to ``consumed`` as
        :meth:`advance_consumed` moves it. One hold of the lock for the check and the move
        (what ``async for`` pays per record)."""
        with self._lock:
            states = self._assignment
            state = states.unread_get(tp)  # the consumed position decides nothing here
            if state is None or not state.is_fetchable:
                return False
            position = state.position
            if position is not None and consumed.offset <= position.offset:
                states.move_consumed(tp, consumed)
            return True

    def update_current_leader(self, tp: TopicPartition, leader: LeaderAndEpoch) -> bool:
        """The metadata layer's current leader of an assigned partition (Java's
        ``maybeValidatePositionForCurrentLeader``). When the leader (or its epoch) changed
        and both the position's offset epoch and the new leader's epoch are known, the
        position must be validated again (KIP-320: the new leader's log may have been
        truncated below it) and the partition awaits validation; the preferred read replica
        is forgotten. True when the partition awaits validation."""
        with self._lock:
            state = self._assignment.get(tp)
            if state is None or state.position is None:
                return False
            if state.position.current_leader == leader:
                return state.awaiting_validation
            position = replace(state.position, current_leader=leader)
            if (
                state.has_position
                and leader.leader is not None
                and leader.epoch is not None
                and position.offset_epoch is not None
            ):
                self._assignment[tp] = replace(
                    state,
                    fetch_state=FetchState.AWAIT_VALIDATION,
                    position=position,
                    preferred_read_replica=None,
                    preferred_read_replica_expire_ms=None,
                    next_retry_time_ms=None,
                )
                return True
            self._assignment[tp] = replace(state, position=position)
            return state.awaiting_validation

    def fill_current_leader(self, tp: TopicPartition, leader: LeaderAndEpoch) -> None:
        """A fetchable position set while no leader was known (a committed offset applied
        before any Metadata answer) is being fetched from ``leader``: it carries it from now
        on. Nothing to validate (the position is fetchable already); left unknown, the next
        metadata naming that same leader would count as a leader change."""
        with self._lock:
            found = self._fetching(tp)
            if found is None or found[1].current_leader.leader is not None:
                return
            state, position = found
            position = replace(position, current_leader=leader)
            self._assignment.set_advanced(tp, replace(state, position=position))

    def maybe_complete_validation(
        self,
        tp: TopicPartition,
        requested: FetchPosition,
        end_epoch: int,
        end_offset: int,
    ) -> ValidationOutcome:
        """An OffsetsForLeaderEpoch answer for ``requested`` (the position validated): the
        end offset of the position's epoch on the leader (``end_epoch``: the largest epoch
        at or below the one asked for; -1 / -1 when the leader knows no such epoch). As
        Java's ``maybeCompleteValidation``: ignored unless the partition still awaits
        validation at exactly that position; an undefined answer resets (or, without a reset
        policy, reports NoOffsetForPartition); an end offset below the position is a
        truncation: with a reset policy the position moves to the divergent offset (the end
        offset, with its epoch), without one it is reported (the partition keeps awaiting
        validation until the user seeks); otherwise the position is valid."""
        with self._lock:
            state = self._assignment.get(tp)
            if state is None or not state.awaiting_validation or state.position != requested:
                return ValidationOutcome.IGNORED
            has_policy = self._default_reset_strategy.kind is not ResetKind.NONE
            if end_offset < 0 or end_epoch < 0:
                if has_policy:
                    self._request_reset(tp, self._default_reset_strategy)
                    return ValidationOutcome.RESET
                return ValidationOutcome.NO_OFFSET
            if end_offset < requested.offset:
                if not has_policy:
                    return ValidationOutcome.TRUNCATED
                position = FetchPosition(end_offset, end_epoch, requested.current_leader)
                self._assignment[tp] = replace(
                    state,
                    fetch_state=FetchState.FETCHING,
                    position=position,
                    consumed=position,
                    next_retry_time_ms=None,
                    end_of_partition_reported=False,
                )
                return ValidationOutcome.MOVED_TO_DIVERGENT
            self._assignment[tp] = replace(
                state, fetch_state=FetchState.FETCHING, next_retry_time_ms=None
            )
            return ValidationOutcome.VALID

    def has_all_fetch_positions(self) -> bool:
        with self._lock:
            return not any(self._assignment.not_fetching.values())

    def initializing_partitions(self) -> tuple[TopicPartition, ...]:
        """Partitions with no position yet whose committed offset must be fetched."""
        with self._lock:
            if not self._assignment.not_fetching[FetchState.INITIALIZING]:
                return ()
            return tuple(
                tp for tp, s in self._assignment.items() if s.fetch_state is FetchState.INITIALIZING
            )

    partitions_needing_position = initializing_partitions

    def reset_initializing_positions(
        self, only: Callable[[TopicPartition], bool] | None = None
    ) -> tuple[TopicPartition, ...]:
        """Initializing partitions (no committed offset) are put awaiting reset with the
        default strategy; returns those left without a position because that strategy is
        ``none`` (the caller raises NoOffsetForPartitionError for them)."""
        without: list[TopicPartition] = []
        with self._lock:
            for tp, s in list(self._assignment.items()):
                if s.fetch_state is not FetchState.INITIALIZING:
                    continue
                if only is not None and not only(tp):
                    continue
                if self._default_reset_strategy.kind is ResetKind.NONE:
                    without.append(tp)
                else:
                    self._request_reset(tp, self._default_reset_strategy)
        return tuple(without)

    # -- reset -----------------------------------------------------------------------------

    def request_offset_reset(
        self,
        partitions: Iterable[TopicPartition] | TopicPartition,
        strategy: OffsetResetStrategy | None = None,
    ) -> None:
        """Put partitions awaiting a reset with ``strategy`` (default: auto.offset.reset)."""
        tps = [partitions] if isinstance(partitions, TopicPartition) else list(partitions)
        with self._lock:
            chosen = strategy if strategy is not None else self._default_reset_strategy
            for tp in tps:
                self._request_reset(tp, chosen)

    def _request_reset(self, tp: TopicPartition, strategy: OffsetResetStrategy) -> None:
        self._update(
            tp,
            fetch_state=FetchState.AWAIT_RESET,
            reset_strategy=strategy,
            position=None,
            consumed=None,
            next_retry_time_ms=None,
            end_of_partition_reported=False,
        )

    def maybe_seek_unvalidated(
        self,
        tp: TopicPartition,
        position: FetchPosition,
        strategy: OffsetResetStrategy,
    ) -> bool:
        """Apply a reset result only if the partition still awaits a reset with ``strategy``
        (a seek by the user in between wins); True when applied."""
        with self._lock:
            state = self._assignment.get(tp)
            if state is None or not state.awaiting_reset or state.reset_strategy != strategy:
                return False
            self.seek_unvalidated(tp, position)
            return True

    def reset_strategy(self, tp: TopicPartition) -> OffsetResetStrategy | None:
        with self._lock:
            return self._state(tp).reset_strategy

    def is_offset_reset_needed(self, tp: TopicPartition) -> bool:
        with self._lock:
            return self._state(tp).awaiting_reset

    def partitions_needing_reset(self, now_ms: int) -> tuple[TopicPartition, ...]:
        """Partitions awaiting a reset whose retry backoff (if any) has passed."""
        with self._lock:
            if not self._assignment.not_fetching[FetchState.AWAIT_RESET]:
                return ()
            return tuple(
                tp
                for tp, s in self._assignment.items()
                if s.awaiting_reset and not s.awaiting_retry_backoff(now_ms)
            )

    def request_failed(self, partitions: Iterable[TopicPartition], next_retry_ms: int) -> None:
        """A reset or validation request failed: do not retry before ``next_retry_ms``."""
        with self._lock:
            for tp in partitions:
                if tp in self._assignment:
                    self._update(tp, next_retry_time_ms=next_retry_ms)

    def set_next_allowed_retry(
        self, partitions: Iterable[TopicPartition], next_retry_ms: int
    ) -> None:
        self.request_failed(partitions, next_retry_ms)

    # -- pause / revocation ----------------------------------------------------------------

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                self._update(tp, paused=True)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                self._update(tp, paused=False)

    def is_paused(self, tp: TopicPartition) -> bool:
        with self._lock:
            state = self._assignment.get(tp)
            return state is not None and state.paused

    def paused_partitions(self) -> frozenset[TopicPartition]:
        with self._lock:
            return frozenset(tp for tp, s in self._assignment.items() if s.paused)

    def mark_pending_revocation(self, partitions: Iterable[TopicPartition]) -> None:
        """Partitions about to be revoked: no longer fetched nor returned (their position is
        still committed)."""
        with self._lock:
            for tp in partitions:
                if tp in self._assignment:
                    self._update(tp, pending_revocation=True)

    def is_pending_revocation(self, tp: TopicPartition) -> bool:
        with self._lock:
            state = self._assignment.get(tp)
            return state is not None and state.pending_revocation

    # -- fetchability ----------------------------------------------------------------------

    @property
    def usability_changes(self) -> int:
        """Grows whenever buffered fetched data may have become unusable: a partition
        assigned or removed, or a fetch state, position (other than the fetch buffer's own
        advance), revocation or callback flag changed. A reader that checked the buffer at
        one value need not check it again while it stays the same."""
        return self._assignment.usability_changes

    def is_fetchable(self, tp: TopicPartition) -> bool:
        """Assigned, with a valid position, not paused, not pending revocation, not waiting
        for onPartitionsAssigned."""
        with self._lock:
            state = self._assignment.get(tp)
            return state is not None and state.is_fetchable

    def fetchable_partitions(
        self, predicate: Callable[[TopicPartition], bool] | None = None
    ) -> tuple[TopicPartition, ...]:
        """Fetchable partitions in assignment order (optionally filtered)."""
        with self._lock:
            return tuple(
                tp
                for tp, s in self._assignment.items()
                if s.is_fetchable and (predicate is None or predicate(tp))
            )

    def fetchable_positions(self) -> dict[TopicPartition, FetchPosition]:
        """Positions of the fetchable partitions, in assignment order, in one atomic read."""
        with self._lock:
            fetching = FetchState.FETCHING
            # is_fetchable spelt out: this runs over every assigned partition per Fetch round
            return {
                tp: s.position
                for tp, s in self._assignment.items()
                if s.fetch_state is fetching
                and s.position is not None
                and not s.paused
                and not s.pending_revocation
                and not s.pending_on_assigned_callback
            }

    # -- commits ---------------------------------------------------------------------------

    def all_consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """Consumed positions (what the application received, see the module docstring) of
        partitions with a valid position, as offsets to commit."""
        with self._lock:
            return {
                tp: OffsetAndMetadata(s.consumed.offset, "", s.consumed.offset_epoch)
                for tp, s in self._assignment.items()
                if s.has_valid_position and s.consumed is not None
            }

    # -- broker-reported offsets, lag ------------------------------------------------------

    def update_high_watermark(self, tp: TopicPartition, offset: int) -> None:
        with self._lock:
            if tp in self._assignment:
                self._update(tp, high_watermark=offset)

    def update_last_stable_offset(self, tp: TopicPartition, offset: int) -> None:
        with self._lock:
            if tp in self._assignment:
                self._update(tp, last_stable_offset=offset)

    def update_log_start_offset(self, tp: TopicPartition, offset: int) -> None:
        with self._lock:
            if tp in self._assignment:
                self._update(tp, log_start_offset=offset)

    def update_partition_offsets(
        self,
        tp: TopicPartition,
        *,
        high_watermark: int | None = None,
        last_stable_offset: int | None = None,
        log_start_offset: int | None = None,
    ) -> None:
        """Record what a Fetch response reported (values < 0 mean unknown and are skipped)."""
        with self._lock:
            state = self._assignment.get(tp)
            if state is None:
                return
            self._assignment[tp] = replace(
                state,
                high_watermark=(
                    high_watermark
                    if high_watermark is not None and high_watermark >= 0
                    else state.high_watermark
                ),
                last_stable_offset=(
                    last_stable_offset
                    if last_stable_offset is not None and last_stable_offset >= 0
                    else state.last_stable_offset
                ),
                log_start_offset=(
                    log_start_offset
                    if log_start_offset is not None and log_start_offset >= 0
                    else state.log_start_offset
                ),
            )

    def partition_lag(
        self, tp: TopicPartition, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    ) -> int | None:
        """High watermark (read_uncommitted) or last stable offset (read_committed) minus the
        position; None when either is unknown or the partition is not assigned."""
        with self._lock:
            state = self._assignment.get(tp)
            if state is None or state.position is None or not state.has_position:
                return None
            end = state.end_offset(isolation)
            return None if end is None else end - state.position.offset

    def partition_lead(self, tp: TopicPartition) -> int | None:
        """Position minus the log start offset (Java records-lead)."""
        with self._lock:
            state = self._assignment.get(tp)
            if state is None or state.position is None or state.log_start_offset is None:
                return None
            return state.position.offset - state.log_start_offset

    def check_end_of_partition(
        self, tp: TopicPartition, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    ) -> bool:
        """True exactly once each time the position reaches the end offset (high watermark or
        last stable offset); re-armed when the partition falls behind again or is sought."""
        with self._lock:
            state = self._assignment.get(tp)
            if state is None or state.position is None or not state.has_valid_position:
                return False
            end = state.end_offset(isolation)
            at_end = end is not None and state.position.offset >= end
            if at_end and not state.end_of_partition_reported:
                self._assignment[tp] = replace(state, end_of_partition_reported=True)
                return True
            if not at_end and state.end_of_partition_reported:
                self._assignment[tp] = replace(state, end_of_partition_reported=False)
            return False

    # -- preferred read replica (KIP-392) --------------------------------------------------

    def update_preferred_read_replica(
        self, tp: TopicPartition, replica: int, expire_ms: int
    ) -> None:
        with self._lock:
            if tp in self._assignment:
                self._update(
                    tp, preferred_read_replica=replica, preferred_read_replica_expire_ms=expire_ms
                )

    def preferred_read_replica(self, tp: TopicPartition, now_ms: int) -> int | None:
        """The preferred read replica while it has not expired; an expired one is cleared."""
        with self._lock:
            state = self._assignment.get(tp)
            if state is None or state.preferred_read_replica is None:
                return None
            expire = state.preferred_read_replica_expire_ms
            if expire is not None and now_ms >= expire:
                self._assignment[tp] = replace(
                    state, preferred_read_replica=None, preferred_read_replica_expire_ms=None
                )
                return None
            return state.preferred_read_replica

    def clear_preferred_read_replica(self, tp: TopicPartition) -> int | None:
        """Forget the preferred read replica; returns the one forgotten."""
        with self._lock:
            state = self._assignment.get(tp)
            if state is None or state.preferred_read_replica is None:
                return None
            self._assignment[tp] = replace(
                state, preferred_read_replica=None, preferred_read_replica_expire_ms=None
            )
            return state.preferred_read_replica

    # -- front ends: records handed out, kept or given back (atomic) ---------------------------

    def keep_handed_out(
        self,
        tp: TopicPartition,
        end: FetchPosition | None,
        first_offset: int,
        *,
        consume: bool,
        keep_paused: bool = False,
    ) -> bool:
        """Whether a front end keeps records of ``tp`` the fetch manager handed out (from
        ``first_offset``, the position moved to ``end``): True when ``tp`` is still owned
        and fetchable (or, with ``keep_paused``, paused and not being revoked); then, with
        ``consume``, the consumed position moves to ``end`` unless a seek moved the position
        since. Else (owned, not fetchable) the position moves back to ``first_offset`` while
        still at ``end`` (compare-and-set), so that nothing is skipped."""
        with self._lock:
            state = self._assignment.get(tp)
            if state is None:
                return False  # not owned any more: nothing to rewind
            if not state.is_fetchable:
                if keep_paused and state.paused and not state.pending_revocation:
                    return True
                if end is not None:
                    self.seek_back_if_at(tp, end.offset, first_offset)
                return False
            if consume and end is not None and state.position is not None:
                if state.position.offset == end.offset:  # no seek since the collect
                    self.advance_consumed(tp, end)
            return True

    def seek_back_to_failed(
        self,
        tp: TopicPartition,
        end: FetchPosition | None,
        offset: int,
        epoch_before: int | None,
        *,
        first: bool,
    ) -> bool:
        """Move ``tp``'s position (and consumed position) back to ``offset``, a record a
        deserializer failed on, while still at ``end`` (compare-and-set). Its leader epoch is
        ``epoch_before`` (the record before it), or for the ``first`` record handed out the
        consumed position's epoch when the consumed position is at it. True when moved."""
        with self._lock:
            state = self._assignment.get(tp)
            if state is None or end is None:
                return False
            if not first:
                epoch = epoch_before
            elif state.consumed is not None and state.consumed.offset == offset:
                epoch = state.consumed.offset_epoch
            else:
                epoch = None
            return self.seek_back_if_at(tp, end.offset, offset, epoch)
