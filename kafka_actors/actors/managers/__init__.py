"""The request-manager actors: one thin :class:`~kafka_actors.actors.base.ManagerActor` per pure
manager, children of the NetworkActor's supervision, one module each.

=============  =============================================================================
module         actor
=============  =============================================================================
metadata       :class:`MetadataActor`: the cluster view, topic lookups, pattern matches
coordinator    :class:`CoordinatorActor`: where the group coordinator is
membership     :class:`MembershipActor`: KIP-848 or classic group membership, rebalances
commit         :class:`CommitActor`: commits, committed offsets, positions from them
offsets        :class:`OffsetsActor`: ListOffsets lookups, resets, leader-epoch validation
fetch          :class:`FetchActor`: fetching ahead into the buffer; collect on the poller
share_*        the share consumer's managers (KIP-932), run under the names "membership"
               and "fetch": ``share_membership.ShareMembershipActor`` (ShareGroupHeartbeat),
               ``share_fetch.ShareFetchActor`` (ShareFetch, ShareAcknowledge); imported
               from their modules (this package's ``__all__`` lists the consumer's six)
=============  =============================================================================

Owns: for each manager, which inputs it takes (application events from the facade; events
routed from the other managers, its ``receivers``), what it records when its manager publishes
an event (its ``effects``), which futures it completes, and what a new incarnation replays to
rebuild its state. Where a published event goes is one table,
:data:`kafka_actors.actors.routing.ROUTES` (followed through the shared context's
:meth:`ConsumerContext.tell`, so a restarted target is found again). The pure managers live
in :mod:`kafka_actors.protocol`; nothing here decides protocol behaviour.

May touch: the NetworkActor (``Send``, ``UpdateNodes``), the shared context and
SubscriptionState, the other actors through the context.
"""

from kafka_actors.actors.events import CommitDone
from kafka_actors.actors.managers.commit import CommitActor
from kafka_actors.actors.managers.coordinator import CoordinatorActor
from kafka_actors.actors.managers.fetch import (
    CloseFetchEvent,
    CollectEvent,
    FetchActor,
    FetchMetricsEvent,
)
from kafka_actors.actors.managers.membership import MembershipActor
from kafka_actors.actors.managers.metadata import MetadataActor
from kafka_actors.actors.managers.offsets import OffsetsActor

__all__ = [
    "CloseFetchEvent",
    "CollectEvent",
    "CommitActor",
    "CommitDone",
    "CoordinatorActor",
    "FetchActor",
    "FetchMetricsEvent",
    "MembershipActor",
    "MetadataActor",
    "OffsetsActor",
]
