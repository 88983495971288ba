"""Actor processes forked from a test process must never finalize what it left as garbage.

Under ``multiprocTCPBase`` every actor is a process forked (through the admin) from the test
process. Garbage the test process had not collected yet is copied into each child, and the
child's collector finalizes it there: for a confluent-kafka client left in a reference cycle
by an earlier test, librdkafka's destroy joins threads that do not exist in the child. In a
full CI run that crashed two actor processes, and because Thespian handles every signal in
its actor processes (SIGSEGV included) each crash became a process spinning at 100 % CPU
forever, burning a core for the rest of the run; one was the flood test's subscriber, which
went silent (gdb: ``rd_kafka_destroy_app`` -> ``pthread_join`` -> SIGSEGV, from
``Admin_dealloc`` in a collection inside the actor). ``start_actor_system`` collects, and
freezes what is left, across the fork (tests/thespian/conftest.py).
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from tests.thespian.actors import Collector
from tests.thespian.conftest import start_actor_system, stop_actor_system


class _Finalized:
    """A reference cycle that writes the pid of the process finalizing it."""

    def __init__(self, path: Path) -> None:
        self.me = self
        self.path = path

    def __del__(self) -> None:
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()}\n")


@pytest.mark.timeout(120)
def test_actors_never_finalize_the_test_process_garbage(tmp_path: Path) -> None:
    marks = tmp_path / "finalized-by"
    gc.disable()  # no automatic collection before the fork: the cycle is garbage when it forks
    try:
        _Finalized(marks)
        asys = start_actor_system("multiprocTCPBase")
    finally:
        gc.enable()
    try:
        collector = asys.createActor(Collector)
        assert isinstance(asys.ask(collector, "collect", 30), int)
    finally:
        stop_actor_system(asys)
    gc.collect()
    finalized_by = marks.read_text().split() if marks.exists() else []
    assert finalized_by == [str(os.getpid())], (
        f"finalized by {finalized_by}; only this process ({os.getpid()}) may"
    )
