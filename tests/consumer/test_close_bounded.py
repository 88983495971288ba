"""``close()`` returns promptly when there is nothing it can do (issue 20; Java's
KAFKA-19357): a leave needs a known coordinator (skipped when none is known), a member that
never reached a broker is in no group, and a commit on close with nothing consumed sends
nothing. So ``close(timeout=30)`` of a consumer with a ``group.id`` returns within about a
second in the two cases below, for every front end and both group protocols:

* **no cluster**: bootstrap to a loopback port nothing listens on (before the fix: the leave,
  the commit on close and the share session close waited in actors that had no manager yet,
  the whole 30 s);
* **no coordinator**: the mock cluster is up but answers every FindCoordinator
  COORDINATOR_NOT_AVAILABLE (these already returned at once; kept as guards).

This is the one place a time bound is the behaviour itself: the bound (10 s, against the
30 s of the old code) leaves a wide margin for a loaded 2-core machine.
``bench/close.py`` prints the measured timings.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import pytest

from kafka_actors import (
    AsyncKafkaShareConsumer,
    KafkaConsumer,
    KafkaShareConsumer,
    TopicPartition,
)
from kafka_actors.aio import AsyncKafkaConsumer

FIND_COORDINATOR = 10
COORDINATOR_NOT_AVAILABLE = 15
CLOSE_TIMEOUT_S = 30.0
#: Well under the close timeout the old code waited in full; generous for a loaded machine.
BOUND_S = 10.0


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextmanager
def _no_cluster() -> Iterator[str]:
    yield f"127.0.0.1:{_closed_port()}"


@contextmanager
def _no_coordinator() -> Iterator[str]:
    from kafka_actors.testing import MockCluster

    with MockCluster(num_brokers=1) as cluster:
        cluster.create_topic("t", partitions=1)
        cluster.push_request_errors(FIND_COORDINATOR, [COORDINATOR_NOT_AVAILABLE] * 5000)
        yield cluster.bootstrap_servers


CASES = {
    "no-cluster": _no_cluster,
    "no-coordinator": pytest.param(_no_coordinator, marks=pytest.mark.mock),
}


def _config(bootstrap: str, protocol: str | None) -> dict[str, object]:
    config: dict[str, object] = {"bootstrap.servers": bootstrap, "group.id": "close-bounded"}
    if protocol is not None:
        config["group.protocol"] = protocol
    return config


def _sync(bootstrap: str, protocol: str | None, assign: bool) -> float:
    consumer = KafkaConsumer(_config(bootstrap, protocol))
    try:
        if assign:
            consumer.assign([TopicPartition("t", 0)])  # auto-commit is on (the default)
        else:
            consumer.subscribe(["t"])
        consumer.poll(1.0)
    finally:
        started = time.monotonic()
        consumer.close(timeout=CLOSE_TIMEOUT_S)
    return time.monotonic() - started


def _asyncio(bootstrap: str, protocol: str | None, assign: bool) -> float:
    async def run() -> float:
        consumer = AsyncKafkaConsumer(config=_config(bootstrap, protocol))
        try:
            if assign:
                consumer.assign([TopicPartition("t", 0)])
            else:
                consumer.subscribe(["t"])
            await consumer.getmany(timeout_ms=1000)
        finally:
            started = time.monotonic()
            await consumer.close(timeout=CLOSE_TIMEOUT_S)
        return time.monotonic() - started

    return asyncio.run(run())


def _share(bootstrap: str, protocol: str | None, assign: bool) -> float:
    consumer = KafkaShareConsumer(_config(bootstrap, None))
    try:
        consumer.subscribe(["t"])
        with suppress(Exception):
            consumer.poll(1.0)
    finally:
        started = time.monotonic()
        consumer.close(timeout=CLOSE_TIMEOUT_S)
    return time.monotonic() - started


def _share_asyncio(bootstrap: str, protocol: str | None, assign: bool) -> float:
    async def run() -> float:
        consumer = AsyncKafkaShareConsumer(_config(bootstrap, None))
        try:
            consumer.subscribe(["t"])
            with suppress(Exception):
                await consumer.poll(1.0)
        finally:
            started = time.monotonic()
            await consumer.close(timeout=CLOSE_TIMEOUT_S)
        return time.monotonic() - started

    return asyncio.run(run())


FRONT_ENDS: dict[str, tuple[Callable[[str, str | None, bool], float], str | None, bool]] = {
    "sync-consumer": (_sync, "consumer", False),
    "sync-classic": (_sync, "classic", False),
    "sync-assign-autocommit": (_sync, "consumer", True),
    "asyncio-consumer": (_asyncio, "consumer", False),
    "asyncio-classic": (_asyncio, "classic", False),
    "asyncio-assign-autocommit": (_asyncio, "consumer", True),
    "share": (_share, None, False),
    "share-asyncio": (_share_asyncio, None, False),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
@pytest.mark.parametrize("front_end", list(FRONT_ENDS))
def test_close_returns_promptly_when_nothing_can_be_done(case: Any, front_end: str) -> None:
    run, protocol, assign = FRONT_ENDS[front_end]
    with case() as bootstrap:
        took = run(bootstrap, protocol, assign)
    assert took < BOUND_S, (
        f"close(timeout={CLOSE_TIMEOUT_S:g}) took {took:.1f} s with nothing it could do "
        f"(bound {BOUND_S:g} s)"
    )
