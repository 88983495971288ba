"""The NetworkActor's metadata recovery (KIP-899, KIP-1102) and what it learns from Metadata.

Owns (as :class:`NetworkRebootstrap`, a part of the NetworkActor; see :mod:`.state`): learning
node addresses from every Metadata response, noticing that no Metadata response came for
``metadata.recovery.rebootstrap.trigger.ms`` while one is wanted, and then either forgetting
every known broker and starting again from the bootstrap servers
(``metadata.recovery.strategy=rebootstrap``) or failing the waiting Metadata requests with
:class:`~kafka_actors.errors.BrokersUnreachableError` (``none``). May touch: the node registry
and the request queues (through the NetworkActor's other parts), the inbox's selector.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Final, cast

from kafka_actors.actors.network.messages import BOOTSTRAP_NODE, ConnectionEvent, Send
from kafka_actors.actors.network.state import NetworkBase
from kafka_actors.config import BrokerAddress
from kafka_actors.errors import BrokersUnreachableError, DisconnectedError
from kafka_actors.protocol.connection.node import Failed, PendingRequest
from kafka_actors.protocol.messages import ANY_NODE
from kafka_actors.protocol.wire.apis import ApiKey

__all__ = ["NetworkRebootstrap"]


#: Keys of the recovery conditions in ``NetworkBase._unavailable`` (their log lines' schedule).
_REBOOTSTRAP: Final = "rebootstrap"
_NO_RECOVERY: Final = "metadata_recovery_impossible"


class NetworkRebootstrap(NetworkBase):
    """The metadata recovery part of the NetworkActor (module docstring)."""

    def _metadata_answered(self) -> None:
        """A Metadata response came: the recovery conditions (if reported) have ended."""
        now_ms = round(self._clock.monotonic() * 1000)
        for key in (_REBOOTSTRAP, _NO_RECOVERY):
            if (cleared := self._unavailable.cleared(key, now_ms)) is not None:
                self._log.info("metadata_recovered", after=key, **cleared.fields())

    def _metadata_starved(self) -> bool:
        """Brokers are known and a Metadata request waits for an answer (KIP-1102 counts the
        trigger time from the first unanswered attempt)."""
        return (
            self._metadata_wanted_since is not None
            and self._rebootstrap_trigger > 0
            and any(n >= 0 for n in self._nodes)
        )

    def _maybe_recover_metadata(self, now: float) -> None:
        since = self._metadata_wanted_since
        if since is None or not self._metadata_starved() or now - since < self._rebootstrap_trigger:
            return
        waited_ms = round((now - since) * 1000)
        if self._rebootstrap:
            self._do_rebootstrap(now, f"no Metadata response for {waited_ms} ms")
            return
        self._metadata_wanted_since = now  # reported once per trigger period
        error = BrokersUnreachableError(
            f"No Metadata response from any known broker for {waited_ms} ms "
            "(metadata.recovery.rebootstrap.trigger.ms) and metadata.recovery.strategy=none: "
            "the client does not go back to the bootstrap servers; known brokers: "
            + ", ".join(sorted(str(n.address) for n in self._nodes.values() if n.node_id >= 0))
        )
        if (report := self._unavailable.occurred(_NO_RECOVERY, round(now * 1000))) is not None:
            self._log.warning("metadata_recovery_impossible", error=str(error), **report.fields())
        keep: deque[PendingRequest] = deque()
        for pending in self._unassigned:
            if pending.api_key == ApiKey.METADATA:
                self._fail(pending, error, ANY_NODE)
            else:
                keep.append(pending)
        self._unassigned = keep

    def _do_rebootstrap(self, now: float, reason: str) -> None:
        """Forget every known broker and start again from the bootstrap servers."""
        if self._metadata_wanted_since is not None:
            self._metadata_wanted_since = now  # the next trigger counts from here
        forgotten = [n for n in self._nodes.values() if n.node_id >= 0]
        if (report := self._unavailable.occurred(_REBOOTSTRAP, round(now * 1000))) is not None:
            self._log.warning(
                "rebootstrap",
                reason=reason,
                forgotten=sorted(f"{n.node_id}@{n.address}" for n in forgotten),
                bootstrap=[str(a) for a in self.config.bootstrap_servers],
                **report.fields(),
            )
        self._events.append(ConnectionEvent(BOOTSTRAP_NODE, "rebootstrap", now, reason, None))
        for node in forgotten:
            error = DisconnectedError(f"Rebootstrapping ({reason})", node=node.node_id)
            self._drop_transport(node)
            for pending in node.conn.take_queued():
                if cast(Send, pending.token).node in (ANY_NODE, BOOTSTRAP_NODE):
                    self._unassigned.append(pending)
                else:
                    self._fail(pending, error, node.node_id)
            for event in node.conn.close(error):
                if isinstance(event, Failed):
                    self._fail(event.request, event.error, node.node_id)
            del self._nodes[node.node_id]

    def _learn(self, response: Any) -> None:
        """The brokers of a Metadata response are the cluster's nodes (Java's ``Metadata``
        builds its node set from the latest response only): learn them, and retire the nodes
        an earlier response named that this one leaves out (a decommissioned or fenced broker,
        the old cluster after a move). An empty broker list changes nothing."""
        brokers = getattr(response, "brokers", None)
        if not brokers:
            return
        named: set[int] = set()
        for broker in brokers:
            node_id = int(broker.node_id)
            named.add(node_id)
            self._set_address(node_id, BrokerAddress(str(broker.host), int(broker.port)))
            self._nodes[node_id].in_metadata = True
        for node in [n for n in self._nodes.values() if n.in_metadata and n.node_id not in named]:
            self._retire(node)
