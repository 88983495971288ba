"""A request waiting in the share fetch actor's inbox when the actor crashes is answered,
not lost: the collect of a poll gets "no records" (the poll goes on; the crashed response's
records come again after their lock expires), a commit fails retriably, a close completes.
Before: the future was never completed and ``poll`` waited its internal 30 s bound
(``poll timed out``: a full CI run, tests/share/test_share_faults.py)."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any

import pytest

from kafka_actors.actors.managers.share_fetch import CloseShareEvent, ShareCommitEvent
from kafka_actors.config import ConsumerConfig
from kafka_actors.core.share_core import ShareCore
from kafka_actors.errors import RetriableError
from kafka_actors.supervisors import FaultInjector


class Crash:
    """The message the fetch actor crashes on (fault injection)."""


def _wait_until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_requests_queued_behind_a_crash_are_answered() -> None:
    inside, release = threading.Event(), threading.Event()

    def crash_on(message: Any) -> bool:
        if not isinstance(message, Crash):
            return False
        inside.set()
        release.wait(10)  # hold the actor while the requests queue up behind this message
        return True

    faults = FaultInjector()
    faults.crash("fetch", when=crash_on, times=1)
    config = ConsumerConfig.from_dict(
        {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "client.id": "crash-units"}
    )
    core = ShareCore(config, faults=faults)
    try:
        _wait_until(lambda: core.ctx.tell("fetch", object()))  # the fetch actor is up
        assert core.ctx.tell("fetch", Crash())
        assert inside.wait(10)
        collected = core.collect("t-1")
        commit: concurrent.futures.Future[Any] = concurrent.futures.Future()
        close: concurrent.futures.Future[Any] = concurrent.futures.Future()
        assert core.ctx.tell("fetch", ShareCommitEvent(commit))
        assert core.ctx.tell("fetch", CloseShareEvent(close))
        release.set()
        assert collected.result(timeout=10) is None
        with pytest.raises(RetriableError):
            commit.result(timeout=10)
        assert close.result(timeout=10) is None
        assert faults.pending() == 0
    finally:
        release.set()
        core.stop(time.monotonic() + 10)
