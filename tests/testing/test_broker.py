"""A real single Kafka broker (4.x and 3.9.x) from the testkit's session fixtures."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer

from kafka_actors.testing.broker import KafkaBroker, pid_alive

pytestmark = pytest.mark.broker


def round_trip(conf: dict[str, str], topic: str, n: int = 20, timeout: float = 60) -> list[bytes]:
    """Produce ``n`` values with confluent-kafka, consume them back with a group."""
    p = Producer({**conf, "log_level": 3})
    for i in range(n):
        p.produce(topic, f"value-{i}".encode(), key=b"k")
    assert p.flush(timeout) == 0
    c = Consumer(
        {
            **conf,
            "group.id": f"group-{topic}",
            "auto.offset.reset": "earliest",
            "log_level": 3,
        }
    )
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def test_single_broker_round_trip(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    assert kafka_broker.jars.version.startswith("4.")
    node = kafka_broker.node
    assert node.running and node.pid is not None and pid_alive(node.pid)
    assert kafka_broker.bootstrap_servers == f"127.0.0.1:{node.port}"
    topic = kafka_topic(kafka_broker, partitions=3)
    assert round_trip({"bootstrap.servers": kafka_broker.bootstrap_servers}, topic) == [
        f"value-{i}".encode() for i in range(20)
    ]


def test_consumer_group_protocol_kip848(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(kafka_broker, partitions=2)
    conf = {"bootstrap.servers": kafka_broker.bootstrap_servers, "group.protocol": "consumer"}
    assert len(round_trip(conf, topic, n=5)) == 5


def test_kafka_39_broker_starts(
    kafka_broker_39: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    assert kafka_broker_39.jars.version.startswith("3.9.")
    topic = kafka_topic(kafka_broker_39, partitions=1)
    assert len(round_trip({"bootstrap.servers": kafka_broker_39.bootstrap_servers}, topic)) == 20


def test_run_tool_describes_group(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(kafka_broker)
    round_trip({"bootstrap.servers": kafka_broker.bootstrap_servers}, topic, n=3)
    proc = kafka_broker.run_tool(
        "kafka-consumer-groups",
        ["--bootstrap-server", kafka_broker.bootstrap_servers, "--describe", "--group",
         f"group-{topic}"],
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert topic in proc.stdout


def test_restart_broker_keeps_data(kafka_topic: Callable[..., str]) -> None:
    with KafkaBroker() as b:
        topic = kafka_topic(b)
        assert len(round_trip({"bootstrap.servers": b.bootstrap_servers}, topic, n=5)) == 5
        old = b.node.pid
        b.restart_broker(0)
        assert b.node.pid != old and old is not None and not pid_alive(old)
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "log_level": 3})
        p.produce(topic, b"after")
        assert p.flush(60) == 0
        wm = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "wm", "log_level": 3})
        from confluent_kafka import TopicPartition

        assert wm.get_watermark_offsets(TopicPartition(topic, 0), timeout=30) == (0, 6)
        wm.close()
        pids = [n.pid for n in b.nodes]
    assert all(p is not None and not pid_alive(p) for p in pids)


def test_run_tool_console_consumer_reads_what_confluent_kafka_wrote(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(kafka_broker)
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "log_level": 3})
    for i in range(3):
        p.produce(topic, f"line-{i}".encode())
    assert p.flush(60) == 0
    proc = kafka_broker.run_tool(
        "kafka-console-consumer",
        ["--bootstrap-server", kafka_broker.bootstrap_servers, "--topic", topic,
         "--from-beginning", "--max-messages", "3", "--timeout-ms", "60000"],
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["line-0", "line-1", "line-2"]


def test_run_tool_on_39_lists_groups(
    kafka_broker_39: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(kafka_broker_39)
    round_trip({"bootstrap.servers": kafka_broker_39.bootstrap_servers}, topic, n=2)
    proc = kafka_broker_39.run_tool(
        "kafka-consumer-groups", ["--bootstrap-server", kafka_broker_39.bootstrap_servers, "--list"]
    )
    assert proc.returncode == 0, proc.stderr
    assert f"group-{topic}" in proc.stdout.split()


def test_unknown_tool_is_a_launch_error(kafka_broker: KafkaBroker) -> None:
    from kafka_actors.testing.broker import KafkaLaunchError

    with pytest.raises(KafkaLaunchError, match="no main class"):
        kafka_broker.tool_command("org.example.NoSuchTool")


def test_popen_tool_is_tracked_by_pid(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    import subprocess

    from kafka_actors.testing.broker import live_pids, started_pids

    topic = kafka_topic(kafka_broker)
    proc = kafka_broker.popen_tool(
        "kafka-verifiable-consumer",
        ["--bootstrap-server", kafka_broker.bootstrap_servers, "--topic", topic,
         "--group-id", f"vc-{topic}", "--group-protocol", "consumer"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert proc.pid in started_pids() and proc.pid in live_pids()
        assert proc.stdout is not None
        first = proc.stdout.readline()  # VerifiableConsumer prints JSON events
        assert b'"name":"startup_complete"' in first.replace(b" ", b"")
    finally:
        proc.terminate()
        proc.wait(60)
    assert proc.pid not in live_pids()
