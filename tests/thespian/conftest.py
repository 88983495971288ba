"""Fixtures for the Thespian bridge tests: an ActorSystem per test under each base."""

from __future__ import annotations

import socket
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


def start_actor_system(base: str) -> Any:
    from thespian.actors import ActorSystem

    capabilities: dict[str, object] = {}
    if base == "multiprocTCPBase":
        # A private admin on a free loopback port; 'fork' (Thespian's default) starts the admin
        # well within Thespian's 5 s admin start-up limit, which 'spawn' can miss on a loaded
        # machine (the child re-imports the test process's modules).
        capabilities = {"Admin Port": free_loopback_port(), "Process Startup Method": "fork"}
    return ActorSystem(base, capabilities, transientUnique=True)


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
        asys.shutdown()
