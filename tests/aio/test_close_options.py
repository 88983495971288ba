"""AsyncKafkaConsumer.close(membership=...) (KIP-1092) against a real broker: of two static
members, the one closed with "leave" is gone from the group's description right after its
close, the one closed with "default" is still listed (it may come back within its session
timeout); an unknown operation raises InvalidArgumentError and leaves the consumer open."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from kafka_actors.aio import AsyncKafkaConsumer
from kafka_actors.errors import InvalidArgumentError
from tests.aio.helpers import group_config
from tests.consumer.helpers import described_client_ids, unique

pytestmark = pytest.mark.broker


def test_async_close_leave_and_default_static_members(kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic, group, prefix = unique("aio-closeopts"), unique("aio-closeopts-g"), unique("c")
    kafka_broker.create_topic(topic, partitions=4)

    def config(name: str) -> dict[str, Any]:
        return group_config(
            bootstrap,
            group,
            **{"client.id": f"{prefix}-{name}", "group.instance.id": f"{prefix}-{name}"},
        )

    async def main() -> set[str]:
        leaver = AsyncKafkaConsumer(config=config("leave"))
        stayer = AsyncKafkaConsumer(config=config("default"))
        try:
            for consumer in (leaver, stayer):
                consumer.subscribe([topic])
            deadline = time.monotonic() + 120
            while not (leaver.assignment() and stayer.assignment()):
                assert time.monotonic() < deadline, "timed out waiting for both assignments"
                await asyncio.gather(leaver.getmany(timeout_ms=100), stayer.getmany(timeout_ms=100))
            leaver.enforce_rebalance("consumer protocol: only a warning")
            with pytest.raises(InvalidArgumentError):
                await leaver.close(membership="bogus")  # type: ignore[arg-type]
            assert leaver.assignment()
            await leaver.close(timeout=20, membership="leave")
            await stayer.close(timeout=20)
            return described_client_ids(bootstrap, group)
        finally:
            await leaver.close(timeout=10)
            await stayer.close(timeout=10)

    assert asyncio.run(main()) == {f"{prefix}-default"}
