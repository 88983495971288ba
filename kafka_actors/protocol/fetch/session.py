"""Incremental fetch sessions (KIP-227): the per-node :class:`FetchSessionHandler`.

Owns: one node's fetch session (session id and epoch, the partitions the broker holds for it),
the full or incremental :class:`SessionRequest` each Fetch sends (added, altered, removed and
replaced partitions) and the reaction to the broker's answer. It follows the Java client's
``FetchSessionHandler``; the fetch manager (:mod:`kafka_actors.protocol.fetch.manager`) keeps one
per node.

May touch: nothing; pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from kafka_actors.errors import (
    NO_ERROR,
    FetchSessionIdNotFoundError,
)
from kafka_actors.protocol.messages import TopicPartition
from kafka_actors.protocol.wire.requests import FetchPartition

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "FetchSessionHandler",
    "SessionRequest",
]


INVALID_SESSION_ID: Final = 0
INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
_MIN_SESSION_VERSION: Final = 7


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """What one Fetch request to a node carries (built by :class:`FetchSessionHandler`)."""

    session_id: int
    epoch: int
    to_send: tuple[FetchPartition, ...]
    to_forget: tuple[TopicPartition, ...]
    #: Every partition in the session once the request is applied (to read the response).
    session_partitions: Mapping[TopicPartition, FetchPartition]

    @property
    def is_full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


def _same_fetch(a: FetchPartition, b: FetchPartition) -> bool:
    return a == b


class FetchSessionHandler:
    """The client side of one node's incremental fetch session (KIP-227).

    ``build(next)`` turns the partitions wanted now into a request: a full one (every
    partition) at epoch 0 — creating a session, or closing session ``session_id`` and creating
    a new one — or an incremental one carrying only the partitions added or changed and
    forgetting those removed. ``handle_response`` / ``handle_error`` move the session on.
    """

    def __init__(self, node: int) -> None:
        self.node = node
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._partitions: dict[TopicPartition, FetchPartition] = {}
        self._topic_ids: dict[str, str] = {}

    @property
    def is_full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    @property
    def session_partitions(self) -> Mapping[TopicPartition, FetchPartition]:
        return dict(self._partitions)

    @property
    def session_topic_ids(self) -> Mapping[str, str]:
        return dict(self._topic_ids)

    def build(
        self,
        wanted: Mapping[TopicPartition, FetchPartition],
        topic_ids: Mapping[str, str] | None = None,
    ) -> SessionRequest:
        """The request for ``wanted`` (in order). ``topic_ids``: the ids the request names
        topics by (v13+); a session partition whose topic id changed forces a full fetch."""
        ids = dict(topic_ids or {})
        if not self.is_full and any(
            self._topic_ids.get(tp.topic) not in (None, ids.get(tp.topic))
            for tp in wanted
            if tp in self._partitions
        ):
            self.epoch = INITIAL_EPOCH  # close the existing session, open a new one
        if self.is_full:
            self._partitions = dict(wanted)
            self._topic_ids = {t: i for t, i in ids.items() if any(tp.topic == t for tp in wanted)}
            return SessionRequest(
                self.session_id,
                self.epoch,
                tuple(wanted.values()),
                (),
                dict(self._partitions),
            )
        to_send: list[FetchPartition] = []
        to_forget = [tp for tp in self._partitions if tp not in wanted]
        for tp in to_forget:
            del self._partitions[tp]
        for tp, data in wanted.items():
            previous = self._partitions.get(tp)
            if previous is None or not _same_fetch(previous, data):
                to_send.append(data)
            self._partitions[tp] = data
        topics = {tp.topic for tp in self._partitions} | {tp.topic for tp in to_forget}
        self._topic_ids = {t: i for t, i in {**self._topic_ids, **ids}.items() if t in topics}
        return SessionRequest(
            self.session_id,
            self.epoch,
            tuple(to_send),
            tuple(to_forget),
            dict(self._partitions),
        )

    def handle_response(
        self,
        error_code: int,
        response_session_id: int,
        response_partitions: Iterable[TopicPartition],
        *,
        throttled: bool = False,
    ) -> bool:
        """Move the session on after a response; False when its data must not be used."""
        if error_code != NO_ERROR:
            if error_code == FetchSessionIdNotFoundError.code:
                self._reset()
            else:
                self.epoch = INITIAL_EPOCH  # close the existing session, try a new one
            return False
        got = set(response_partitions)
        if self.is_full:
            if not got and throttled:
                self._reset()  # KIP-219: an empty full response only says "throttled"
                return False
            if got != set(self._partitions):
                self._reset()
                return False
            if response_session_id == INVALID_SESSION_ID:
                self._reset_keep_partitions()
            else:
                self.session_id = response_session_id
                self.epoch = 1
            return True
        if not got <= set(self._partitions):
            self.epoch = INITIAL_EPOCH
            return False
        if response_session_id == INVALID_SESSION_ID:
            self._reset_keep_partitions()  # the broker closed the session
        else:
            self.epoch = _next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The request failed (disconnect, timeout): close the session next time, try anew."""
        self.epoch = INITIAL_EPOCH

    def close_request(self) -> SessionRequest:
        """The request closing the session (epoch -1, no partitions); the handler starts
        over afterwards."""
        request = SessionRequest(self.session_id, FINAL_EPOCH, (), (), {})
        self._reset()
        return request

    def _reset(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._partitions = {}
        self._topic_ids = {}

    def _reset_keep_partitions(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH


def _next_epoch(epoch: int) -> int:
    # Epochs wrap from 2^31-1 to 1 (0 is the initial epoch, never reused).
    return 1 if epoch >= 2**31 - 1 else epoch + 1
