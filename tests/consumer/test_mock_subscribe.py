"""The embedded default (librdkafka's mock cluster) with a plain topic-name subscription
under group.protocol=consumer: the mock asserts (and aborts the whole process) on a join
heartbeat carrying topic names with a null regex; ours sends "" (no regex) beside the names.
Run in a child process so an abort is a failed test, not a dead pytest."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.mock

_CHILD = textwrap.dedent(
    """
    import time
    from confluent_kafka import Producer
    from kafka_actors import KafkaConsumer
    from kafka_actors.testing.mock import MockCluster

    with MockCluster(1) as cluster:
        cluster.create_topic("orders", 1)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        for i in range(5):
            producer.produce("orders", value=f"v{i}".encode())
        producer.flush(10)
        consumer = KafkaConsumer({"bootstrap.servers": cluster.bootstrap_servers,
                                  "group.id": "g", "group.protocol": "consumer",
                                  "auto.offset.reset": "earliest"})
        consumer.subscribe(["orders"])
        values = []
        deadline = time.monotonic() + 40
        while len(values) < 5 and time.monotonic() < deadline:
            values.extend(r.value for r in consumer.poll(0.5))
        consumer.close()
        print(sorted(values))
    """
)


def test_subscribe_by_names_on_the_mock_cluster() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"rc={done.returncode}\n{done.stderr[-2000:]}"
    assert done.stdout.strip().splitlines()[-1] == str([f"v{i}".encode() for i in range(5)])


_CHILD_IN_GROUP = textwrap.dedent(
    """
    import time
    from confluent_kafka import Producer
    from kafka_actors import KafkaConsumer
    from kafka_actors.protocol.wire.apis import ApiKey
    from kafka_actors.testing.mock import MockCluster

    COORDINATOR_NOT_AVAILABLE = 15

    def poll_for(consumer, seconds):
        got = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            got.extend(r.value for r in consumer.poll(0.1))
        return got

    with MockCluster(1) as cluster:
        cluster.set_group_consumer_heartbeat_interval_ms(200)
        cluster.create_topic("orders", 1)
        cluster.create_topic("refunds", 1)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        for i in range(5):
            producer.produce("orders", value=f"v{i}".encode())
        producer.flush(10)
        consumer = KafkaConsumer({"bootstrap.servers": cluster.bootstrap_servers,
                                  "group.id": "g", "group.protocol": "consumer",
                                  "auto.offset.reset": "earliest",
                                  "retry.backoff.ms": 50, "retry.backoff.max.ms": 200})
        consumer.subscribe(["orders"])
        values = []
        deadline = time.monotonic() + 40
        while len(values) < 5 and time.monotonic() < deadline:
            values.extend(r.value for r in consumer.poll(0.5))
        # One heartbeat of the member in the group fails: the next carries every field.
        cluster.push_request_errors(ApiKey.CONSUMER_GROUP_HEARTBEAT, [COORDINATOR_NOT_AVAILABLE])
        poll_for(consumer, 1.5)
        # A new subscription of the member in the group: the next heartbeat carries it.
        consumer.subscribe(["orders", "refunds"])
        producer.produce("refunds", value=b"r0")
        producer.flush(10)
        deadline = time.monotonic() + 40
        while b"r0" not in values and time.monotonic() < deadline:
            values.extend(r.value for r in consumer.poll(0.5))
        consumer.close()
        print(sorted(values))
    """
)


def test_heartbeats_of_a_member_in_the_group_on_the_mock_cluster() -> None:
    # Topic names without the regex (what Java sends after a failed heartbeat or on a new
    # subscription) made the mock abort: names and regex go together.
    done = subprocess.run(
        [sys.executable, "-c", _CHILD_IN_GROUP], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, f"rc={done.returncode}\n{done.stderr[-2000:]}"
    expected = [b"r0", *(f"v{i}".encode() for i in range(5))]
    assert done.stdout.strip().splitlines()[-1] == str(expected)
