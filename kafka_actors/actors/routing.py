"""Where the events the request managers publish go: one table, :data:`ROUTES`.

Owns: the routing table (event type → the steps that deliver it, in order), the step types and
the small functions that build a different event for a target, and
:class:`RoutingManagerActor`, the manager-actor shell that follows the table (and hands a
routed event to the target's receiver). A manager actor's
``route(event)`` runs, in this order:

1. the publishing actor's own *effect* for the event (its ``effects`` table: what it records in
   the shared context or the SubscriptionState, e.g. the cluster view, the coordinator's
   connection); an effect that returns ``False`` ends the route there (a pattern match that
   changed nothing);
2. the steps of :data:`ROUTES`: an actor name (``"membership"``, ``"facade"``, ...) tells that
   actor the event wrapped in :class:`~kafka_actors.actors.context.Routed`; :class:`To` tells
   it another event built from this one, or only when a condition holds; :data:`CALLER`
   completes the future of the API call waiting for the event (the publishing actor holds it,
   see its ``answer``); :data:`POLLER` wakes the polling thread (``ctx.signal``).

At the receiving end, a manager actor's ``receivers`` table says what it does with each event
routed to it (the method feeding it to its manager, or None: only poll the manager again).

An event type the table does not know is a bug: it is logged at error (``event_not_routed``,
or ``routed_event_not_received`` at a target without a receiver for it), and
``tests/actors/test_routing_table.py`` fails for every event class a manager publishes without
a row and for every row whose target has no receiver. An empty row is a decision: the event
ends at its publisher.

May touch: nothing by itself; a route acts through the publishing actor (``emit``, ``answer``,
its effects) and the shared context's signal, a receiver through the target actor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Final

from kafka_actors.actors.base import BackgroundError, ManagerActor
from kafka_actors.actors.context import Routed
from kafka_actors.actors.events import (
    CommitDone,
    PartitionCounts,
    PositionsChangedEvent,
    RefreshMetadataEvent,
    TopicNames,
)
from kafka_actors.protocol.fetch.manager import MetadataRefreshNeeded
from kafka_actors.protocol.group.consumer.membership import (
    AssignmentChanged,
    CommitBeforeRevocation,
    CoordinatorUnknown,
    ErrorEvent,
    InvokeAssigned,
    InvokeLost,
    InvokeRevoked,
    LeaveCompleted,
    MemberEpochChanged,
    NeedTopicNames,
    PauseFetching,
)
from kafka_actors.protocol.group.coordinator import CoordinatorChanged, CoordinatorErrorEvent
from kafka_actors.protocol.group.events import NeedPartitionCounts
from kafka_actors.protocol.metadata import (
    ClusterUpdated,
    MetadataErrorEvent,
    PatternSubscriptionMatched,
    TopicMetadataCompleted,
    TopicNamesResolved,
)
from kafka_actors.protocol.offsets.commit import (
    AutoCommitCompleted,
    CommitCompleted,
    CommitForRevocationDone,
    CommittedOffsetsFetched,
    PositionsInitialized,
)
from kafka_actors.protocol.offsets.list_offsets import (
    ListOffsetsCompleted,
    MetadataUpdateNeeded,
    PositionsValidated,
    ResetPositionsError,
)
from kafka_actors.protocol.share.events import (
    AcknowledgementsCommitted,
    ShareCloseCompleted,
    ShareCommitCompleted,
)

__all__ = [
    "ACTORS",
    "CALLER",
    "POLLER",
    "ROUTES",
    "RoutingManagerActor",
    "Step",
    "To",
    "feed_cluster",
    "route_of",
]

#: The actors a route may name: the six manager actors and the facade. A share consumer
#: (KIP-932) runs its own managers under two of these names, "membership" (share group
#: heartbeats) and "fetch" (share fetch and acknowledgements), beside metadata and
#: coordinator; a route to an actor a client does not run ends there
#: (``ConsumerContext.tell``).
ACTORS: Final = frozenset(
    {"metadata", "coordinator", "membership", "commit", "offsets", "fetch", "facade"}
)


class _Caller:
    """Step: complete the future of the API call waiting for this event."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "CALLER"


class _Poller:
    """Step: wake the polling thread (it may be waiting for what the event changed)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "POLLER"


CALLER: Final = _Caller()
POLLER: Final = _Poller()


@dataclass(frozen=True, slots=True)
class To:
    """Step: tell ``actor`` what ``make`` builds from the event (the event itself without
    ``make``), only when ``when(event)`` holds (always without ``when``)."""

    actor: str
    make: Callable[[Any], Any] | None = None
    when: Callable[[Any], bool] | None = None


Step = str | To | _Caller | _Poller


# -- what a target gets instead of the event, and when ---------------------------------------------


def commit_done(event: CommitForRevocationDone) -> CommitDone:
    return CommitDone(event.commit_id, event.error)


def refresh_metadata(event: MetadataRefreshNeeded) -> RefreshMetadataEvent:
    return RefreshMetadataEvent(event.reason)


def positions_changed(event: PositionsValidated) -> PositionsChangedEvent:
    return PositionsChangedEvent()


def has_positions_to_check(event: PositionsInitialized) -> bool:
    """Resets to do, or committed offsets with a leader epoch to validate (KIP-320)."""
    return bool(event.reset or event.seeked)


def has_seeked(event: PositionsInitialized) -> bool:
    return bool(event.seeked)


def feed_cluster(actor: Any, event: ClusterUpdated, now_ms: int) -> None:
    """A receiver: the new cluster view to the target's manager (offsets, fetch)."""
    actor.manager.on_cluster_updated(event.cluster)


# -- the table ------------------------------------------------------------------------------------
# Effects of the publishing actor (run first) are noted on the right.

# fmt: off
ROUTES: Final[Mapping[type, tuple[Step, ...]]] = MappingProxyType({
    # metadata publishes
    ClusterUpdated:             ("membership", "commit", "fetch", "offsets", POLLER),  # ctx.cluster
    PatternSubscriptionMatched: ("membership",),  # only if it changed the SubscriptionState
    TopicMetadataCompleted:     (CALLER,),  # a NeedPartitionCounts answer: PartitionCounts instead
    MetadataErrorEvent:         ("facade",),
    TopicNames:                 ("membership",),  # answers NeedTopicNames from the cluster view
    PartitionCounts:            ("membership",),  # answers NeedPartitionCounts
    TopicNamesResolved:         (),  # the actor answers NeedTopicNames itself (TopicNames)
    # coordinator publishes
    CoordinatorChanged:         ("membership", "commit"),  # ctx.coordinator_id, UpdateNodes
    CoordinatorErrorEvent:      ("facade",),
    # membership publishes (KIP-848 and classic; the share membership publishes
    # AssignmentChanged, NeedTopicNames, CoordinatorUnknown, ErrorEvent, LeaveCompleted)
    PauseFetching:              ("fetch",),  # SubscriptionState: pending revocation
    AssignmentChanged:          ("metadata", "fetch", "offsets", POLLER),  # SubscriptionState
    CommitBeforeRevocation:     ("commit",),
    MemberEpochChanged:         ("commit",),  # ctx.member_id / member_epoch
    InvokeRevoked:              ("facade",),
    InvokeAssigned:             ("facade",),
    InvokeLost:                 ("facade",),
    NeedTopicNames:             ("metadata",),
    NeedPartitionCounts:        ("metadata",),
    CoordinatorUnknown:         ("coordinator",),  # commit publishes it too
    ErrorEvent:                 ("facade",),
    LeaveCompleted:             (CALLER,),
    # commit publishes (a successful commit is noted for rebalance-safe commits first)
    CommitCompleted:            (CALLER,),
    CommittedOffsetsFetched:    (CALLER,),
    PositionsInitialized:       (To("offsets", when=has_positions_to_check),
                                 To("fetch", when=has_seeked), CALLER, POLLER),
    CommitForRevocationDone:    (To("membership", commit_done),),
    AutoCommitCompleted:        (),  # logged when it failed
    # offsets publishes
    ListOffsetsCompleted:       (CALLER,),
    MetadataUpdateNeeded:       ("metadata",),
    ResetPositionsError:        ("facade",),
    PositionsValidated:         (To("fetch", positions_changed), POLLER),
    PositionsChangedEvent:      ("fetch",),  # after each response (a reset may give positions)
    # fetch publishes
    MetadataRefreshNeeded:      (To("metadata", refresh_metadata),),
    # a share consumer's fetch actor publishes (and MetadataRefreshNeeded, above)
    AcknowledgementsCommitted:  (POLLER,),  # results queued for the acknowledgement callback
    ShareCommitCompleted:       (CALLER,),
    ShareCloseCompleted:        (CALLER,),
    # the shell (ManagerActor) sends
    BackgroundError:            ("facade",),  # a fatal failure of the ApiVersions ask
})
# fmt: on


_resolved: dict[type, tuple[Step, ...] | None] = {}


def route_of(kind: type) -> tuple[Step, ...] | None:
    """The steps for an event of type ``kind`` (a subclass follows its base's row); None when
    the table has no row for it."""
    try:
        return _resolved[kind]
    except KeyError:
        pass
    steps = next((ROUTES[cls] for cls in kind.__mro__ if cls in ROUTES), None)
    _resolved[kind] = steps
    return steps


Effect = Callable[[Any, Any], "bool | None"]
#: A target's handler of a routed event: ``method(actor, event, now_ms)``.
Receiver = Callable[[Any, Any, int], None]


class RoutingManagerActor(ManagerActor):
    """A :class:`~kafka_actors.actors.base.ManagerActor` whose ``route`` follows
    :data:`ROUTES` (see the module docstring).

    Subclasses list their effects in :attr:`effects` (event type → method, run before the
    steps; ``False`` ends the route), implement :meth:`answer` when a row they publish has
    :data:`CALLER`, and list what they do with the events routed to them in
    :attr:`receivers`. An actor sends an event of its own (not its manager's) with
    :meth:`route` too, so that the table names every edge.
    """

    effects: ClassVar[Mapping[type, Effect]] = {}
    #: The receiving end: event type routed to this actor → the method that feeds it to the
    #: manager, or None when there is nothing to do but poll the manager (every message ends
    #: with a poll). ``tests/actors/test_routing_table.py`` checks that every target in
    #: :data:`ROUTES` has an entry for what it is sent.
    receivers: ClassVar[Mapping[type, Receiver | None]] = {}

    def handle(self, message: Any, now_ms: int) -> Any:
        if isinstance(message, Routed):
            self.receive(message.event, now_ms)
            return None
        return super().handle(message, now_ms)

    def receive(self, event: Any, now_ms: int) -> None:
        """An event another actor routed here (its row in :attr:`receivers`)."""
        for kind in type(event).__mro__:
            if kind in self.receivers:
                receiver = self.receivers[kind]
                if receiver is not None:
                    receiver(self, event, now_ms)
                return
        self.log.error(
            "routed_event_not_received", kind=type(event).__name__, target=self.component
        )

    def route(self, event: Any) -> None:
        steps = route_of(type(event))
        if steps is None:
            self.log.error("event_not_routed", kind=type(event).__name__, source=self.component)
            return
        effect = next((self.effects[c] for c in type(event).__mro__ if c in self.effects), None)
        if effect is not None and effect(self, event) is False:
            return
        for step in steps:
            if isinstance(step, str):
                self.emit(step, event)
            elif isinstance(step, To):
                if step.when is None or step.when(event):
                    self.emit(step.actor, event if step.make is None else step.make(event))
            elif step is CALLER:
                self.answer(event)
            else:
                self.ctx.signal.notify()

    def answer(self, event: Any) -> None:
        """Complete the future waiting for ``event`` (rows with :data:`CALLER`)."""
        self.log.error("no_caller_to_answer", kind=type(event).__name__, source=self.component)
