"""One ``poll()`` right after ``subscribe()`` joins the group, on a real broker.

That first poll is told to the membership actor before the supervision tree runs it (the tell
is dropped); the member must still join, without another poll (a ``poll(0)`` sends no second
poll event). The unit tests of the same rule: ``tests/actors/test_first_poll.py``."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kafka_actors import KafkaConsumer

pytestmark = pytest.mark.broker


@pytest.mark.parametrize("group_protocol", ["consumer", "classic"])
def test_one_poll_right_after_subscribe_joins_the_group(
    kafka_broker: Any, kafka_topic: Callable[..., str], group_protocol: str
) -> None:
    topic = kafka_topic(kafka_broker, partitions=2)
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": kafka_broker.bootstrap_servers,
            "group.id": f"first-poll-{uuid.uuid4().hex[:8]}",
            "group.protocol": group_protocol,
        }
    )
    try:
        consumer.subscribe([topic])
        assert consumer.poll(0).count() == 0
        deadline = time.monotonic() + 30  # slack for a loaded machine
        while consumer.group_metadata().generation_id <= 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert consumer.group_metadata().generation_id > 0, "the member never joined"
    finally:
        consumer.close()
