"""The bridge packages export the whole bridge protocol, to type checkers too.

``kafka_actors.thespian`` and ``kafka_actors.pykka`` list the protocol's names literally (a
type checker reads a literal ``__all__`` only): each list must hold every name of the shared
protocol (``kafka_actors.bridges.messages``), and each listed name must exist."""

from __future__ import annotations

import importlib

import pytest

from kafka_actors.bridges import messages as shared


@pytest.mark.parametrize(
    ("module", "own"),
    [
        ("kafka_actors.thespian.messages", {"Configure"}),
        (
            "kafka_actors.thespian",
            {
                "Configure",
                "BridgeRequestFailedError",
                "KafkaBridge",
                "StreamSubscriber",
                "SubscriberFailedError",
            },
        ),
        (
            "kafka_actors.pykka",
            {
                "BatchFailed",
                "BridgeRequestFailedError",
                "Call",
                "KafkaBridge",
                "StreamSubscriber",
                "SubscriberFailedError",
                "call",
            },
        ),
    ],
)
def test_the_protocol_is_exported_whole(module: str, own: set[str]) -> None:
    if module.startswith("kafka_actors.thespian"):
        pytest.importorskip("thespian")
    mod = importlib.import_module(module)
    assert set(mod.__all__) == set(shared.__all__) | own
    assert len(mod.__all__) == len(set(mod.__all__))
    for name in mod.__all__:
        assert getattr(mod, name) is not None, name
    for name in shared.__all__:
        assert getattr(mod, name) is getattr(shared, name), name
