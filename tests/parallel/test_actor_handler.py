"""A pykka actor as the handler: each record an ask, the reply completes it (real broker)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pykka

from kafka_actors import ParallelConsumer
from kafka_actors.protocol.records.decode import ConsumerRecord
from kafka_actors.testing import KafkaBroker
from tests.parallel.faults import committed, wait_for
from tests.parallel.test_show_broker import config, produce, running


class Orders(pykka.ThreadingActor):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []
        self.failed_once: set[int] = set()

    def on_receive(self, message: Any) -> Any:
        assert isinstance(message, ConsumerRecord)
        if message.offset % 5 == 0 and message.offset not in self.failed_once:
            self.failed_once.add(message.offset)
            raise RuntimeError("first ask of this record fails")
        self.seen.append(message.offset)
        return "done"


def test_an_actor_handles_each_record_by_ask_and_its_failures_are_retried(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(kafka_broker, partitions=1)
    produce(kafka_broker.bootstrap_servers, topic, [(b"k%d" % i, b"v", 0) for i in range(20)])
    ref = Orders.start()
    try:
        group = f"g-{uuid.uuid4().hex[:8]}"
        pc = ParallelConsumer(
            config(kafka_broker.bootstrap_servers, group), handler=ref, retry_backoff_ms=20
        )
        with pc:
            pc.subscribe([topic])
            with running(pc):
                wait_for(lambda: len(ref.proxy().seen.get()) == 20, 60, "20 records")
            assert pc.metrics()["records-retried-total"] == 4
        assert sorted(ref.proxy().seen.get()) == list(range(20))
        assert committed(kafka_broker.bootstrap_servers, group, topic, [0])[0] == (20, "")
    finally:
        ref.stop()
