"""Test actors for the pykka bridge: a probe that records every message it is told, and a
recording :class:`StreamSubscriber` (processed records, events in order, commit replies)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pykka

from kafka_actors.protocol.records.decode import ConsumerRecord
from kafka_actors.pykka import (
    CommitFailed,
    CommitOk,
    PartitionsAssigned,
    PartitionsLost,
    PartitionsRevoked,
    RebalanceAck,
    RecordBatch,
    StreamSubscriber,
)


class Inbox:
    """What a Probe was told, readable from the test thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.messages: list[Any] = []

    def seen(self, kind: type[Any] | tuple[type[Any], ...] = object) -> list[Any]:
        with self.lock:
            return [m for m in self.messages if isinstance(m, kind)]

    def batches(self) -> list[RecordBatch]:
        return self.seen(RecordBatch)

    def records(self) -> list[ConsumerRecord]:
        return [r for batch in self.batches() for r in batch.records]


class Probe(pykka.ThreadingActor):
    """A subscriber that records every message; the test drives the bridge (demand, acks).
    With ``fail_on``, it raises on a matching message (pykka then stops it)."""

    def __init__(self, inbox: Inbox, fail_on: Callable[[Any], bool] | None = None) -> None:
        super().__init__()
        self.inbox = inbox
        self.fail_on = fail_on

    def on_receive(self, message: Any) -> Any:
        if self.fail_on is not None and self.fail_on(message):
            raise RuntimeError("the probe fails on this message")
        with self.inbox.lock:
            self.inbox.messages.append(message)
        return None


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not reached within {timeout}s: {what}"
        time.sleep(0.02)


class Log:
    """What a RecordingSubscriber did, readable from the test thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: list[ConsumerRecord] = []
        #: ("revoked" | "assigned" | "lost", partitions, rebalance_id), ("commit", reply),
        #: ("ack", rebalance_id), in the order they happened on the subscriber's thread
        self.events: list[tuple[Any, ...]] = []
        self.times: list[float] = []  # time.monotonic() of each event

    def add(self, *event: Any) -> None:
        with self.lock:
            self.events.append(event)
            self.times.append(time.monotonic())

    def time_of(self, *event: Any) -> float:
        """When the first event equal to ``event`` happened."""
        with self.lock:
            return self.times[self.events.index(event)]

    def snapshot(self) -> tuple[list[ConsumerRecord], list[tuple[Any, ...]]]:
        with self.lock:
            return list(self.records), list(self.events)


class _AckRecorder:
    """Stands for the bridge ref: records each RebalanceAck told through it, forwards all."""

    def __init__(self, bridge: pykka.ActorRef[Any], log: Log) -> None:
        self._bridge = bridge
        self._log = log

    def tell(self, message: Any) -> None:
        if isinstance(message, RebalanceAck):
            self._log.add("ack", message.rebalance_id)
        self._bridge.tell(message)


class RecordingSubscriber(StreamSubscriber):
    """Processes by recording; logs every rebalance event, commit reply and ack, in order."""

    window = 300

    def __init__(self, bridge: pykka.ActorRef[Any], log: Log) -> None:
        super().__init__(_AckRecorder(bridge, log))  # type: ignore[arg-type]
        self.record_log = log

    def process(self, records: tuple[ConsumerRecord, ...]) -> None:
        with self.record_log.lock:
            self.record_log.records.extend(records)

    def on_revoked(self, message: PartitionsRevoked) -> None:
        self.record_log.add("revoked", message.partitions, message.rebalance_id)
        super().on_revoked(message)

    def on_assigned(self, message: PartitionsAssigned) -> None:
        self.record_log.add("assigned", message.partitions, message.rebalance_id)
        super().on_assigned(message)

    def on_lost(self, message: PartitionsLost) -> None:
        self.record_log.add("lost", message.partitions, message.rebalance_id)
        super().on_lost(message)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, (CommitOk, CommitFailed)):
            self.record_log.add("commit", message)
        return super().on_receive(message)
