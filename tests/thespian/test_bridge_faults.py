"""The Thespian bridge takes a FaultInjector (``Configure(faults=...)``, in-process bases):
rules given by Kafka's names reach the bridge's consumer, which recovers, and the stream
delivers every record once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kafka_actors.supervisors import FaultInjector
from kafka_actors.thespian import Configure, Configured, KafkaBridge
from tests.consumer.helpers import produce, unique
from tests.thespian.actors import RecordingSubscriber, SetMode
from tests.thespian.conftest import start_actor_system, stop_actor_system
from tests.thespian.test_bridge import bridge_config, by_partition, close, subscribe, until

pytestmark = [pytest.mark.broker, pytest.mark.timeout(240)]


@pytest.fixture
def simple_system() -> Iterator[Any]:
    asys = start_actor_system("simpleSystemBase")
    try:
        yield asys
    finally:
        stop_actor_system(asys)


def test_bridge_consumer_obeys_injected_faults(simple_system: Any, kafka_broker: Any) -> None:
    asys = simple_system
    topic = unique("th-faults")
    kafka_broker.create_topic(topic, partitions=2)
    produce(kafka_broker.bootstrap_servers, topic, 400)
    faults = FaultInjector()
    faults.crash("fetch", times=2)  # the bridge's fetch actor crashes twice, is restarted
    faults.error_response("OffsetFetch", "COORDINATOR_LOAD_IN_PROGRESS", times=2)
    bridge = asys.createActor(KafkaBridge)
    config = bridge_config(kafka_broker.bootstrap_servers, unique("g"))
    reply = asys.ask(bridge, Configure(config, faults=faults), 60)
    assert isinstance(reply, Configured), reply
    sub = asys.createActor(RecordingSubscriber)
    asys.tell(sub, SetMode(window=100))
    subscribe(asys, bridge, topic, sub)
    final = until(asys, sub, lambda s: len(s.records) >= 400, "all records")
    close(asys, bridge)
    assert faults.pending() == 0, "the injected faults never reached the bridge's consumer"
    assert len(final.records) == 400
    for records in by_partition(final.records).values():
        offsets = [r.offset for r in records]
        assert offsets == list(range(len(offsets)))
