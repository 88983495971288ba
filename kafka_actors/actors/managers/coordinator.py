"""The coordinator actor: the shell of
:class:`~kafka_actors.protocol.group.coordinator.CoordinatorManager` (FindCoordinator).

Owns: where the group coordinator is, for the other actors: ``ctx.coordinator_id`` (the
coordinator's own connection id, Java's ``2**31 - 1 - node``, told to the NetworkActor with
``UpdateNodes`` so heartbeats never queue behind a long-polling Fetch on the leader's
connection). A ``CoordinatorUnknown`` routed to it (from membership or commit) marks the
coordinator unknown, and the manager looks it up again. Where its events go:
:data:`kafka_actors.actors.routing.ROUTES`.

May touch: the NetworkActor (``Send``, ``UpdateNodes``), the shared context
(``coordinator_id``), the other actors through the routing table.
"""

from __future__ import annotations

import pykka

from kafka_actors.actors.network import UpdateNodes
from kafka_actors.actors.routing import RoutingManagerActor
from kafka_actors.protocol.group.consumer.membership import CoordinatorUnknown
from kafka_actors.protocol.group.coordinator import (
    CoordinatorChanged,
    CoordinatorConfig,
    CoordinatorManager,
)

__all__ = ["CoordinatorActor"]


class CoordinatorActor(RoutingManagerActor):
    """A new incarnation needs nothing replayed (no :meth:`rebuild`): it looks the coordinator
    up again, and the others hear of it only through the ``CoordinatorChanged`` it publishes."""

    component = "coordinator"

    def build(self) -> CoordinatorManager:
        assert self.ctx.versions is not None
        return CoordinatorManager(
            CoordinatorConfig.from_consumer_config(self.ctx.config),
            self.ctx.versions,
            random=self.ctx.random,
            client_id=self.ctx.config.client_id,
        )

    def _coordinator_unknown(self, event: CoordinatorUnknown, now_ms: int) -> None:
        self.manager.mark_coordinator_unknown(event.reason or type(event).__name__, now_ms)

    receivers = {CoordinatorUnknown: _coordinator_unknown}

    def _coordinator_changed(self, event: CoordinatorChanged) -> None:
        """Remember the coordinator's connection (and tell the NetworkActor its address)
        before membership and commit hear of it: they read ``ctx.coordinator_id``."""
        if event.node_id is not None and event.host is not None and event.port is not None:
            connection = event.connection_id
            assert connection is not None
            try:
                self.network.tell(UpdateNodes(((connection, event.host, event.port),)))
            except pykka.ActorDeadError:
                # The NetworkActor stopped (the consumer is closing): no connection is made
                # any more, so there is nothing to tell; as every manager actor's send does.
                self.log.debug(
                    "network_gone",
                    update="coordinator_address",
                    node=event.node_id,
                    connection=connection,
                )
            self.ctx.coordinator_id = connection
            self.ctx.coordinator_node = event.node_id
        else:
            self.ctx.coordinator_id = None
            self.ctx.coordinator_node = None

    effects = {CoordinatorChanged: _coordinator_changed}
