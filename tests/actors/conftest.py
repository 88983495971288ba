"""Fixtures for the NetworkActor tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pykka
import pytest

from kafka_actors.actors.network import NetworkActor
from kafka_actors.config import ConsumerConfig


@pytest.fixture
def start_network() -> Iterator[Any]:
    """Factory: ``start_network(config, **kwargs)`` starts a NetworkActor, stopped after the
    test (with a timeout: never hangs)."""
    refs: list[pykka.ActorRef[Any]] = []

    def start(config: ConsumerConfig, **kwargs: Any) -> pykka.ActorRef[Any]:
        ref = NetworkActor.start(config, **kwargs)
        refs.append(ref)
        return ref

    yield start
    for ref in reversed(refs):
        try:
            ref.stop(block=True, timeout=15)
        except pykka.ActorDeadError:
            pass


@pytest.fixture
def captured_logs() -> Iterator[Any]:
    """Our lines as JSON, at DEBUG, into a StringIO (``log.configure``; the ``kafka_actors``
    logger is restored after the test by the autouse fixture of tests/conftest.py)."""
    import io

    from kafka_actors import log

    stream = io.StringIO()
    log.configure(json=True, level="DEBUG", stream=stream)
    yield stream
