"""How long ``close()`` takes when there is nothing it can do (issue 20).

Each front end (sync, asyncio, share sync, share asyncio; the first two with both group
protocols) is closed with ``close(timeout=30)`` in two cases:

* **no cluster**: bootstrap to a loopback port nothing listens on; the consumer subscribed
  (and, for the sync/asyncio rows "assign", assigned a partition with auto-commit on) and
  polled once;
* **no coordinator**: the embedded mock cluster is up, but every FindCoordinator is answered
  COORDINATOR_NOT_AVAILABLE (``MockCluster.push_request_errors``).

Run from the repository root: ``python bench/close.py`` (``--quick``: the consumer rows
only, one protocol). Prints one table row per case: the seconds ``close()`` took. Java after
KAFKA-19357 returns within about a second (a leave needs a known coordinator; a commit on
close with nothing consumed sends nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's kafka_actors, not an installed one

FIND_COORDINATOR = 10
COORDINATOR_NOT_AVAILABLE = 15
CLOSE_TIMEOUT_S = 30.0


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextmanager
def no_cluster() -> Iterator[str]:
    yield f"127.0.0.1:{closed_port()}"


@contextmanager
def no_coordinator() -> Iterator[str]:
    from kafka_actors.testing import MockCluster

    with MockCluster(num_brokers=1) as cluster:
        cluster.create_topic("t", partitions=1)
        cluster.push_request_errors(FIND_COORDINATOR, [COORDINATOR_NOT_AVAILABLE] * 5000)
        yield cluster.bootstrap_servers


CASES: dict[str, Callable[[], Any]] = {"no cluster": no_cluster, "no coordinator": no_coordinator}


def _config(bootstrap: str, group: str, protocol: str | None) -> dict[str, object]:
    config: dict[str, object] = {"bootstrap.servers": bootstrap, "group.id": group}
    if protocol is not None:
        config["group.protocol"] = protocol
    return config


def sync_close(bootstrap: str, protocol: str | None, mode: str) -> float:
    from kafka_actors import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(_config(bootstrap, "close-bench", protocol))
    try:
        if mode == "assign":
            consumer.assign([TopicPartition("t", 0)])
        else:
            consumer.subscribe(["t"])
        consumer.poll(1.0)
    finally:
        started = time.monotonic()
        consumer.close(timeout=CLOSE_TIMEOUT_S)
    return time.monotonic() - started


def asyncio_close(bootstrap: str, protocol: str | None, mode: str) -> float:
    from kafka_actors import TopicPartition
    from kafka_actors.aio import AsyncKafkaConsumer

    async def run() -> float:
        consumer = AsyncKafkaConsumer(config=_config(bootstrap, "close-bench", protocol))
        try:
            if mode == "assign":
                consumer.assign([TopicPartition("t", 0)])
            else:
                consumer.subscribe(["t"])
            await consumer.getmany(timeout_ms=1000)
        finally:
            started = time.monotonic()
            await consumer.close(timeout=CLOSE_TIMEOUT_S)
        return time.monotonic() - started

    return asyncio.run(run())


def share_close(bootstrap: str, protocol: str | None, mode: str) -> float:
    from kafka_actors import KafkaShareConsumer

    consumer = KafkaShareConsumer(_config(bootstrap, "close-bench-share", None))
    try:
        consumer.subscribe(["t"])
        with suppress(Exception):  # without a cluster, a share poll may time out
            consumer.poll(1.0)
    finally:
        started = time.monotonic()
        consumer.close(timeout=CLOSE_TIMEOUT_S)
    return time.monotonic() - started


def share_asyncio_close(bootstrap: str, protocol: str | None, mode: str) -> float:
    from kafka_actors import AsyncKafkaShareConsumer

    async def run() -> float:
        consumer = AsyncKafkaShareConsumer(_config(bootstrap, "close-bench-share", None))
        try:
            consumer.subscribe(["t"])
            with suppress(Exception):
                await consumer.poll(1.0)
        finally:
            started = time.monotonic()
            await consumer.close(timeout=CLOSE_TIMEOUT_S)
        return time.monotonic() - started

    return asyncio.run(run())


#: (front end, group protocol, subscribe/assign, function)
ROWS: list[tuple[str, str | None, str, Callable[[str, str | None, str], float]]] = [
    ("sync", "consumer", "subscribe", sync_close),
    ("sync", "classic", "subscribe", sync_close),
    ("sync", "consumer", "assign", sync_close),
    ("asyncio", "consumer", "subscribe", asyncio_close),
    ("asyncio", "classic", "subscribe", asyncio_close),
    ("asyncio", "consumer", "assign", asyncio_close),
    ("share sync", None, "subscribe", share_close),
    ("share asyncio", None, "subscribe", share_asyncio_close),
]


def coordinator_gone(protocol: str, auto_commit: bool) -> float:
    """A member of the group (partitions assigned, positions known) whose coordinator broker
    goes down just before ``close()``: what the close waits for the leave (and, with
    auto-commit, the commit of the consumed positions)."""
    from kafka_actors import KafkaConsumer
    from kafka_actors.testing import MockCluster

    with MockCluster(num_brokers=3) as cluster:
        cluster.create_topic("t", partitions=3)
        consumer = KafkaConsumer(
            {
                **_config(cluster.bootstrap_servers, "close-bench-gone", protocol),
                "enable.auto.commit": auto_commit,
            }
        )
        try:
            consumer.subscribe(["t"])
            ctx = consumer._ctx
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                consumer.poll(0.2)
                owned = consumer.assignment()
                if owned and all(ctx.subscriptions.valid_position(tp) for tp in owned):
                    break
            coordinator = ctx.coordinator_id
            assert coordinator is not None, "no coordinator found"
            cluster.broker_down(2147483647 - coordinator)  # the coordinator's node id -> broker
        finally:
            started = time.monotonic()
            consumer.close(timeout=CLOSE_TIMEOUT_S)
        return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sync and asyncio, KIP-848 only")
    parser.add_argument(
        "--coordinator-gone",
        action="store_true",
        help="also: a KIP-848 member whose coordinator broker goes down before close()",
    )
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)
    sys.stderr = open(os.devnull, "w")  # the consumers' warnings (stdlib's last resort)
    rows = [r for r in ROWS if not args.quick or r[1] == "consumer"]
    print(f"close(timeout={CLOSE_TIMEOUT_S:g}) seconds")
    header = ("front end", "protocol", "mode", "no cluster", "no coordinator")
    print(f"{header[0]:<14} {header[1]:<9} {header[2]:<10} {header[3]:>11} {header[4]:>15}")
    for front, protocol, mode, fn in rows:
        cells = []
        for case in CASES.values():
            with case() as bootstrap:
                try:
                    cells.append(f"{fn(bootstrap, protocol, mode):.2f}")
                except Exception as exc:  # a row that cannot run here says why
                    cells.append(type(exc).__name__)
        print(
            f"{front:<14} {protocol or 'share':<9} {mode:<10} {cells[0]:>11} {cells[1]:>15}",
            flush=True,
        )
    if args.coordinator_gone:
        print("coordinator gone before close() (member with positions, KIP-848):")
        for auto_commit in (False, True):
            try:
                took = f"{coordinator_gone('consumer', auto_commit):.2f}"
            except Exception as exc:
                took = type(exc).__name__
            print(f"  enable.auto.commit={str(auto_commit).lower():<5} {took:>6}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
