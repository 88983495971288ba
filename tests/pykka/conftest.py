"""Fixtures for the pykka bridge tests: every actor a test starts is stopped after it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pykka
import pytest


@pytest.fixture
def actors() -> Iterator[list[pykka.ActorRef[Any]]]:
    """Append each ActorRef the test starts; they are stopped (bridges close) afterwards."""
    started: list[pykka.ActorRef[Any]] = []
    try:
        yield started
    finally:
        for ref in reversed(started):
            try:
                ref.stop(block=True, timeout=30)
            except (pykka.ActorDeadError, pykka.Timeout):
                pass
