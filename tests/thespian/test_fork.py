"""multiprocTCPBase forks actor processes: the process-wide timer must work in a child."""

from __future__ import annotations

import gc
import os
import threading

import pytest

from kafka_actors import clock


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_default_scheduler_fires_in_a_forked_child() -> None:
    parent = clock.default_scheduler()
    started = threading.Event()
    parent.call_later(0.0, started.set)  # the parent's timer thread is running
    assert started.wait(5)
    # Nothing collectable crosses the fork (see start_actor_system in conftest.py: a child
    # that collects a librdkafka client left in a cycle by an earlier test crashes).
    gc.collect()
    gc.freeze()
    try:
        pid = os.fork()
    except BaseException:
        gc.unfreeze()
        raise
    if pid != 0:
        gc.unfreeze()
    if pid == 0:  # the child: exit status 0 only if a timer fires
        fired = threading.Event()
        try:
            clock.default_scheduler().call_later(0.01, fired.set)
            ok = fired.wait(5)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
