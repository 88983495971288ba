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
