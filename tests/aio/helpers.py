"""Helpers for the asyncio consumer tests: group configs, a loop-lag ticker, group settings."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from kafka_actors import KafkaConsumer
from tests.consumer.helpers import base_config


def group_config(
    bootstrap: str, group: str, protocol: str = "consumer", **extra: Any
) -> dict[str, Any]:
    config = base_config(bootstrap, **{"group.id": group, "group.protocol": protocol})
    config["enable.auto.commit"] = False
    if protocol == "classic":
        config["heartbeat.interval.ms"] = 300
        config["session.timeout.ms"] = 10_000
    config.update(extra)
    return config


def fast_group_heartbeats(bootstrap: str, group: str, interval_ms: int = 500) -> None:
    """KIP-848 groups heartbeat every 5 s by default: ask the broker for a shorter interval for
    this group (the group config ``consumer.heartbeat.interval.ms``), so rebalances settle in
    a test's time."""
    from confluent_kafka import admin as ck

    AdminClient, AlterConfigOpType = ck.AdminClient, ck.AlterConfigOpType  # type: ignore[attr-defined]
    ConfigEntry, ConfigResource = ck.ConfigEntry, ck.ConfigResource  # type: ignore[attr-defined]
    ResourceType = ck.ResourceType  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(
                "consumer.heartbeat.interval.ms",
                str(interval_ms),
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


class LoopLag:
    """A task that sleeps ``interval`` s again and again and records how late it wakes up:
    the event loop's worst scheduling lag while it runs."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.worst = 0.0
        self.samples = 0
        self.total = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(self.interval)
            late = time.perf_counter() - start - self.interval
            self.samples += 1
            self.total += max(0.0, late)
            self.worst = max(self.worst, late)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    @property
    def mean(self) -> float:
        return self.total / self.samples if self.samples else 0.0


class PollingMember:
    """A group member subscribed to ``topic`` that polls on its own thread (0.2 s polls) and
    keeps what it receives in ``records``, until :meth:`stop`; closing it is the caller's."""

    def __init__(self, config: dict[str, Any], topic: str) -> None:
        self.consumer = KafkaConsumer(config)
        self.consumer.subscribe([topic])
        self.records: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.records.extend(self.consumer.poll(0.2))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
