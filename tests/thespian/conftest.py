"""Fixtures for the Thespian bridge tests: an ActorSystem per test under each base."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

BASES = ("simpleSystemBase", "multiprocTCPBase")

try:
    import thespian  # noqa: F401
except ImportError:  # the `thespian` extra is not installed: nothing here can run
    collect_ignore_glob = ["test_*.py"]


def free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # ended meanwhile
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        parents[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    return parents


def _descendants(roots: set[int]) -> set[int]:
    parents = _parents()
    found = {pid for pid in roots if pid in parents}
    grew = True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in found} - found
        found |= more
        grew = bool(more)
    return found


#: ActorSystem -> the processes it started from this one (its admin; the actors descend from it)
_ADMINS: dict[int, set[int]] = {}


def start_actor_system(base: str) -> Any:
    """An ActorSystem of its own for one test; end it with :func:`stop_actor_system`.

    Under ``multiprocTCPBase`` every actor is a process forked from the admin, which is forked
    from this test process. Nothing collectable may reach them: a child's garbage collector
    that frees a confluent-kafka client left in a reference cycle by an earlier test (a test
    helper's producer or admin client) calls librdkafka's destroy, which joins threads that
    do not exist in the child and crashes; Thespian handles every signal in its actor
    processes, SIGSEGV included, so the crash became an actor spinning at 100 % CPU forever,
    unresponsive (a full CI run had two such processes, each burning a core, from 02:13 on;
    the flood test's subscriber went silent that way). So: collect, then freeze what is left
    (``gc.freeze``: the children never collect it) across the fork."""
    from thespian.actors import ActorSystem

    capabilities: dict[str, object] = {}
    if base != "multiprocTCPBase":
        return ActorSystem(base, capabilities, transientUnique=True)
    # A private admin on a free loopback port; 'fork' (Thespian's default) starts the admin
    # well within Thespian's 5 s admin start-up limit, which 'spawn' can miss on a loaded
    # machine (the child re-imports the test process's modules).
    capabilities = {"Admin Port": free_loopback_port(), "Process Startup Method": "fork"}
    before = _descendants({os.getpid()})
    gc.collect()
    gc.freeze()
    try:
        asys = ActorSystem(base, capabilities, transientUnique=True)
    finally:
        gc.unfreeze()
    _ADMINS[id(asys)] = _descendants({os.getpid()}) - before
    return asys


def stop_actor_system(asys: Any, grace_s: float = 10.0) -> None:
    """Shut the ActorSystem down; then end, by pid, every process it started that is still
    there after ``grace_s`` (a hung actor would otherwise outlive the test)."""
    started = _descendants(_ADMINS.pop(id(asys), set()))
    try:
        asys.shutdown()
    finally:
        deadline = time.monotonic() + grace_s
        alive = set(started)
        while alive and time.monotonic() < deadline:
            alive = {pid for pid in alive if _running(pid)}
            if alive:
                time.sleep(0.1)
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        leftover = sorted(alive)
        assert not leftover, f"actor processes {leftover} outlived the ActorSystem's shutdown"


def _running(pid: int) -> bool:
    """Whether ``pid`` is still a process that is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@dataclass(frozen=True)
class Actors:
    """The ActorSystem of one test and the name of its base."""

    system: Any
    base: str

    @property
    def separate_processes(self) -> bool:
        return self.base != "simpleSystemBase"


@pytest.fixture(params=BASES)
def actors(request: pytest.FixtureRequest) -> Iterator[Actors]:
    asys = start_actor_system(request.param)
    try:
        yield Actors(asys, request.param)
    finally:
        stop_actor_system(asys)
