"""Records a share consumer could not deserialize, and RENEW refused by the group, on a real
Kafka 4.4 broker (issue 24), as Java's KafkaShareConsumer handles them:

* a value deserializer fails on one record: ``poll`` raises RecordDeserializationError with
  its topic, partition, offset and raw bytes; ``acknowledge_offset(topic, partition, offset,
  type)`` (Java's ``acknowledge(topic, partition, offset, type)``, explicit mode) says what
  becomes of it: REJECT, never delivered again; RELEASE (also what happens when the
  application says nothing), delivered again. The records around it come once, in order.
* a group with ``share.renew.acknowledge.enable=false`` (Kafka 4.3+, a group config, KIP-1240):
  the broker refuses a RENEW with INVALID_RECORD_STATE. As in Java, that ends the record's
  delivery (the next poll does not wait for it, its lock expires and it is delivered again);
  the error reaches ``commit_sync``'s result and the acknowledgement-commit callback, and the
  consumer goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from kafka_actors.errors import (
    IllegalStateError,
    InvalidRecordStateError,
    RecordDeserializationError,
)
from kafka_actors.testing import KafkaBroker
from tests.share.helpers import first_batch, poll_for, produce, share_api, share_config, value_of

N = 5
BAD = 2


def _explicit(ka: Any, broker: KafkaBroker, group: str, topic: str, **kwargs: Any) -> Any:
    consumer = ka.KafkaShareConsumer(
        share_config(broker, group, share_acknowledgement_mode="explicit", fetch_max_wait_ms=100),
        **kwargs,
    )
    consumer.subscribe([topic])
    return consumer


def _consume_around_the_bad_record(
    consumer: Any, ka: Any, kind: Any, until: Callable[[dict[int, list[int]]], bool]
) -> tuple[dict[int, list[int]], list[tuple[str, int, int, bytes | None]]]:
    """Poll (ACCEPTing every record) until ``until(deliveries)``; each
    RecordDeserializationError is acknowledged ``kind`` by its offset."""
    deliveries: dict[int, list[int]] = {}
    errors: list[tuple[str, int, int, bytes | None]] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not until(deliveries):
        try:
            for r in consumer.poll(0.5):
                deliveries.setdefault(r.offset, []).append(r.delivery_count)
                consumer.acknowledge(r, ka.AcknowledgeType.ACCEPT)
        except RecordDeserializationError as e:
            assert e.topic is not None and e.partition is not None and e.offset is not None
            errors.append((e.topic, e.partition, e.offset, e.value))
            consumer.acknowledge_offset(e.topic, e.partition, e.offset, kind)
    return deliveries, errors


@pytest.mark.broker
def test_a_failed_record_acknowledged_reject_by_offset_is_never_delivered_again(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    ka = share_api()
    topic = kafka_topic(share_broker)
    group = share_group(record_lock_duration_ms=1000)  # an expired lock would show quickly
    produce(share_broker.bootstrap_servers, topic, N)

    def value(raw: bytes | None) -> bytes | None:
        if raw == value_of(BAD):
            raise ValueError("not readable")
        return raw

    with _explicit(ka, share_broker, group, topic, value_deserializer=value) as consumer:
        deliveries, errors = _consume_around_the_bad_record(
            consumer, ka, ka.AcknowledgeType.REJECT, lambda d: len(d) == N - 1
        )
        assert errors == [(topic, 0, BAD, value_of(BAD))]
        assert deliveries == {i: [1] for i in range(N) if i != BAD}
        with pytest.raises(IllegalStateError):  # its acknowledgement went with that poll
            consumer.acknowledge_offset(topic, 0, BAD, ka.AcknowledgeType.ACCEPT)
        result = consumer.commit_sync(30.0)
        assert all(error is None for error in result.values()), result
        # Rejected: never delivered again (a delivery would raise here), nor anything else.
        assert poll_for(consumer, 4.0, ack=ka.AcknowledgeType.ACCEPT) == []


@pytest.mark.broker
def test_a_failed_record_acknowledged_release_by_offset_is_delivered_again(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    ka = share_api()
    topic, group = kafka_topic(share_broker), share_group()
    produce(share_broker.bootstrap_servers, topic, N)
    failures = 0

    def value(raw: bytes | None) -> bytes | None:
        nonlocal failures
        if raw == value_of(BAD) and failures == 0:  # readable the second time
            failures += 1
            raise ValueError("not readable yet")
        return raw

    with _explicit(ka, share_broker, group, topic, value_deserializer=value) as consumer:
        deliveries, errors = _consume_around_the_bad_record(
            consumer, ka, ka.AcknowledgeType.RELEASE, lambda d: len(d) == N
        )
        assert errors == [(topic, 0, BAD, value_of(BAD))]
        # Released: delivered again, its delivery count one higher; the others once.
        assert deliveries == {i: [2] if i == BAD else [1] for i in range(N)}
        result = consumer.commit_sync(30.0)
        assert all(error is None for error in result.values()), result
        assert poll_for(consumer, 3.0, ack=ka.AcknowledgeType.ACCEPT) == []


@pytest.mark.broker
def test_renew_refused_by_a_group_with_renew_disabled_ends_the_delivery_not_the_consumer(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    ka = share_api()
    topic = kafka_topic(share_broker)
    group = share_group(
        record_lock_duration_ms=2000, config={"share.renew.acknowledge.enable": "false"}
    )
    produce(share_broker.bootstrap_servers, topic, 1)
    seen: list[tuple[dict[Any, set[int]], Any]] = []
    with _explicit(ka, share_broker, group, topic) as consumer:
        consumer.set_acknowledgement_commit_callback(lambda o, e: seen.append((o, e)))
        (record,) = first_batch(consumer)
        assert record.delivery_count == 1
        consumer.acknowledge(record, ka.AcknowledgeType.RENEW)
        tp = ka.TopicPartition(topic, 0)
        result = consumer.commit_sync(30.0)
        assert isinstance(result[tp], InvalidRecordStateError), result
        assert [(o, type(e)) for o, e in seen] == [({tp: {0}}, InvalidRecordStateError)]
        # The delivery ended: nothing to acknowledge, the next poll does not refuse to run.
        with pytest.raises(IllegalStateError):
            consumer.acknowledge(record, ka.AcknowledgeType.ACCEPT)
        # Its lock expires and the broker delivers it again; the consumer goes on.
        again = poll_for(consumer, 60.0, until=lambda got: bool(got), ack=ka.AcknowledgeType.ACCEPT)
        assert [(r.offset, r.delivery_count) for r in again] == [(0, 2)]
        result = consumer.commit_sync(30.0)
        assert result == {tp: None}, result


@pytest.mark.broker
def test_the_asyncio_share_consumer_acknowledges_a_failed_record_by_offset(
    share_broker: KafkaBroker, kafka_topic: Callable[..., str], share_group: Callable[..., str]
) -> None:
    import asyncio

    ka = share_api()
    topic = kafka_topic(share_broker)
    group = share_group(record_lock_duration_ms=1000)
    produce(share_broker.bootstrap_servers, topic, N)

    def value(raw: bytes | None) -> bytes | None:
        if raw == value_of(BAD):
            raise ValueError("not readable")
        return raw

    async def run() -> tuple[dict[int, int], list[int], list[Any]]:
        got: dict[int, int] = {}
        failed: list[int] = []
        config = share_config(
            share_broker, group, share_acknowledgement_mode="explicit", fetch_max_wait_ms=100
        )
        async with ka.AsyncKafkaShareConsumer(config, value_deserializer=value) as consumer:
            consumer.subscribe([topic])
            async with asyncio.timeout(90):
                while len(got) < N - 1:
                    try:
                        for r in await consumer.poll(0.5):
                            got[r.offset] = r.delivery_count
                            consumer.acknowledge(r, ka.AcknowledgeType.ACCEPT)
                    except RecordDeserializationError as e:
                        assert (e.topic, e.partition, e.value) == (topic, 0, value_of(BAD))
                        assert e.offset is not None
                        failed.append(e.offset)
                        consumer.acknowledge_offset(topic, 0, e.offset, ka.AcknowledgeType.REJECT)
            await consumer.commit_sync(30.0)
            later: list[Any] = []
            end = asyncio.get_running_loop().time() + 4.0
            while asyncio.get_running_loop().time() < end:  # a redelivery would raise here
                for r in await consumer.poll(0.5):
                    later.append(r)
                    consumer.acknowledge(r, ka.AcknowledgeType.ACCEPT)
        return got, failed, later

    got, failed, later = asyncio.run(run())
    assert failed == [BAD]
    assert got == {i: 1 for i in range(N) if i != BAD}
    assert later == []
