"""A sync rebalance listener without ``on_partitions_lost`` gets ``on_partitions_revoked``.

Java's ``ConsumerRebalanceListener.onPartitionsLost`` is a default method calling
``onPartitionsRevoked``; a Python listener object not derived from our base class (duck
typing) must behave the same, not fail with AttributeError the first time partitions are lost.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kafka_actors.actors.events import CallbackCompletedEvent
from kafka_actors.actors.facade import Facade
from kafka_actors.config import ConsumerConfig
from kafka_actors.protocol.group import events as group_events
from kafka_actors.protocol.messages import TopicPartition

TP = TopicPartition("orders", 0)


class _Ctx(SimpleNamespace):
    def tell(self, target: str, event: Any) -> bool:
        self.told.append((target, event))
        return True


def _facade() -> tuple[Facade, _Ctx]:
    ctx = _Ctx(
        config=ConsumerConfig.from_dict({"bootstrap.servers": "127.0.0.1:9"}),
        safe_commits=None,
        signal=SimpleNamespace(notify=lambda: None),
        told=[],
    )
    return Facade(ctx, lambda: None), ctx  # type: ignore[arg-type]


def _completions(ctx: _Ctx) -> list[CallbackCompletedEvent]:
    return [e for t, e in ctx.told if t == "membership" and isinstance(e, CallbackCompletedEvent)]


class RevokedOnly:
    def __init__(self) -> None:
        self.revoked: list[set[TopicPartition]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.revoked.append(revoked)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        pass


def test_lost_falls_back_to_revoked_for_a_duck_typed_listener() -> None:
    facade, ctx = _facade()
    listener = RevokedOnly()
    facade.listener = listener  # type: ignore[assignment]
    facade._invoke(group_events.InvokeLost(frozenset({TP}), callback_id=7))
    assert listener.revoked == [{TP}]
    (done,) = _completions(ctx)
    assert done.callback_id == 7
    assert done.error is None, done.error
    assert facade._errors == []


def test_listener_with_on_partitions_lost_gets_it() -> None:
    facade, ctx = _facade()
    calls: list[str] = []

    class Both(RevokedOnly):
        def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
            calls.append("lost")

    listener = Both()
    facade.listener = listener  # type: ignore[assignment]
    facade._invoke(group_events.InvokeLost(frozenset({TP}), callback_id=8))
    assert calls == ["lost"]
    assert listener.revoked == []
    (done,) = _completions(ctx)
    assert done.error is None
