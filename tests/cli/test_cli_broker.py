"""The command line against real brokers: ``consume`` on a SASL_SSL listener configured by a
properties file, from a timestamp, exiting at the end; ``group`` checked against Kafka's own
``kafka-consumer-groups --describe`` on the same group; ``list``; ``probe`` writing nothing
to a named cluster unless asked."""

from __future__ import annotations

import io
import json
import pathlib
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest

from kafka_actors import KafkaConsumer, TopicPartition
from kafka_actors.cli import main
from tests.interop.members import parse_assignment, parse_table

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]

T0 = (int(time.time()) // 60 - 60) * 60_000  # an hour ago: within the log retention


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def produce_timed(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    """Record i: partition i % partitions, timestamp T0 + i s, key k<i>, value v<i>, h=<i>."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    for i in range(count):
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            partition=i % partitions,
            timestamp=T0 + i * 1000,
            headers=[("h", str(i).encode())],
        )
    assert producer.flush(30) == 0


def run_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafka_actors", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=pathlib.Path(__file__).resolve().parents[2],
    )


def test_consume_sasl_ssl_from_a_timestamp_exits_at_end(
    kafka_broker_secured: Any, tmp_path: pathlib.Path
) -> None:
    broker = kafka_broker_secured
    topic = unique("cli-sasl-ssl")
    broker.create_topic(topic, partitions=2)
    produce_timed(broker.bootstrap_servers, topic, 20, partitions=2)
    properties = tmp_path / "client.properties"
    properties.write_text(
        "# SASL_SSL as alice, as Kafka's tools read it\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism: SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" \\\n'
        '    password="alice-secret";\n'
        f"ssl.truststore.location = {broker.ca_path}\n"
        "! fetch small batches so that several polls run\n"
        "max.poll.records=3\n"
    )
    proc = run_cli(
        "consume",
        "--consumer-config",
        str(properties),
        "-b",
        broker.listener_bootstrap("SASL_SSL"),
        "-t",
        topic,
        "-o",
        f"@{T0 + 10_000}",
        "-e",
        "-f",
        "%p %o %T %k %s %h\\n",
        "--progress-interval",
        "0.1",
    )
    assert proc.returncode == 0, proc.stderr
    # Records 10..19 have timestamps >= T0 + 10 s: offsets 5..9 of each partition.
    expected = {
        p: [f"{p} {i // 2} {T0 + i * 1000} k{i} v{i} h={i}" for i in range(10, 20) if i % 2 == p]
        for p in (0, 1)
    }
    lines = proc.stdout.splitlines()
    for p in (0, 1):
        assert [line for line in lines if line.startswith(f"{p} ")] == expected[p]
    assert len(lines) == 10
    # stdout is a pipe: the progress line goes to stderr, then the summary.
    assert "% 10 records" in proc.stderr and "0 behind" in proc.stderr
    assert proc.stderr.rstrip().endswith("% consumed 10 records")
    assert "alice-secret" not in proc.stderr


def test_consume_per_partition_offsets_with_x_settings(kafka_broker_secured: Any) -> None:
    """Per-partition start specs and -X settings instead of a file (SASL_PLAINTEXT, PLAIN)."""
    broker = kafka_broker_secured
    topic = unique("cli-specs")
    broker.create_topic(topic, partitions=3)
    produce_timed(broker.bootstrap_servers, topic, 30, partitions=3)
    out = io.StringIO()
    code = main(
        [
            "consume",
            "-X", "security.protocol=SASL_PLAINTEXT",
            "-X", "sasl.mechanism=PLAIN",
            "-X", "sasl.username=bob",
            "-X", "sasl.password=bob-secret",
            "-X", f"bootstrap.servers={broker.listener_bootstrap('SASL_PLAINTEXT')}",
            "-t", topic,
            "-o", "0=8", "-o", "1=-1", "-o", "2=end", "-o", "beginning",
            "-e", "--format", "jsonl", "--bytes", "utf8",
        ],
        out=out,
    )  # fmt: skip
    assert code == 0
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    got = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in rows)
    # partition 0 from offset 8 (records 24, 27), partition 1 the last one (record 28),
    # partition 2 from its end (nothing).
    assert got == [(0, 8, "k24", "v24"), (0, 9, "k27", "v27"), (1, 9, "k28", "v28")]
    assert all(r["headers"] == [["h", r["key"][1:]]] for r in rows)
    assert all(r["timestamp_type"] == "CreateTime" for r in rows)


def _describe(broker: Any, group: str, *extra: str) -> list[dict[str, str]]:
    result = broker.run_tool(
        "kafka-consumer-groups",
        ["--bootstrap-server", broker.bootstrap_servers, "--describe", "--group", group, *extra],
    )
    assert result.returncode == 0, result.stderr
    return parse_table(result.stdout)


def _ours(broker: Any, group: str, *extra: str) -> list[dict[str, str]]:
    out = io.StringIO()
    assert main(["group", group, "-b", broker.bootstrap_servers, *extra], out=out) == 0
    return parse_table(out.getvalue())


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_group_matches_kafka_consumer_groups(kafka_broker: Any, protocol: str) -> None:
    topic = unique(f"cli-group-{protocol}")
    kafka_broker.create_topic(topic, partitions=3)
    produce_timed(kafka_broker.bootstrap_servers, topic, 30, partitions=3)
    group = unique("cli-g")
    config = {
        "bootstrap.servers": kafka_broker.bootstrap_servers,
        "group.id": group,
        "group.protocol": protocol,
        "client.id": f"cli-client-{protocol}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    tps = [TopicPartition(topic, p) for p in range(3)]
    with KafkaConsumer(config) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while consumer.assignment() != set(tps) and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment() == set(tps)
        consumer.commit_sync({tps[0]: 3, tps[1]: 10})  # type: ignore[dict-item]
        # Both tools describe the same live group: one member owning all three partitions,
        # partition 2 assigned but never committed.
        java = {(r["TOPIC"], r["PARTITION"]): r for r in _describe(kafka_broker, group)}
        ours = {(r["TOPIC"], r["PARTITION"]): r for r in _ours(kafka_broker, group)}
        assert set(ours) == set(java) == {(topic, str(p)) for p in range(3)}
        for key, row in java.items():
            assert ours[key] == row, (key, ours[key], row)
        assert ours[(topic, "0")]["LAG"] == "7" and ours[(topic, "2")]["LAG"] == "-"
        assert ours[(topic, "0")]["CLIENT-ID"] == f"cli-client-{protocol}"

        java_members = _describe(kafka_broker, group, "--members", "--verbose")
        our_members = _ours(kafka_broker, group, "--members")
        assert len(java_members) == len(our_members) == 1
        # Every column the same: the member's epoch, its current and target assignment and
        # the target's epoch (KIP-848; "-" but the current assignment for a classic group).
        assert our_members == java_members
        [om] = our_members
        assert parse_assignment(om["CURRENT-ASSIGNMENT"], topic) == {0, 1, 2}
        [state] = _ours(kafka_broker, group, "--state")
        assert (state["PROTOCOL"], state["STATE"].lower(), state["#MEMBERS"]) == (
            protocol,
            "stable",
            "1",
        )
    # After the member left: no active members, the committed offsets remain.
    java_after = {(r["TOPIC"], r["PARTITION"]): r for r in _describe(kafka_broker, group)}
    ours_after = {(r["TOPIC"], r["PARTITION"]): r for r in _ours(kafka_broker, group)}
    assert ours_after == java_after
    assert set(ours_after) == {(topic, "0"), (topic, "1")}


def test_group_that_does_not_exist(kafka_broker: Any) -> None:
    out = io.StringIO()
    group = unique("no-such-group")
    assert main(["group", group, "-b", kafka_broker.bootstrap_servers], out=out) == 1
    assert out.getvalue() == f"Consumer group '{group}' does not exist.\n"


def test_consume_in_a_group_commits_then_group_shows_no_lag(kafka_broker: Any) -> None:
    topic = unique("cli-commit")
    kafka_broker.create_topic(topic, partitions=2)
    produce_timed(kafka_broker.bootstrap_servers, topic, 12, partitions=2)
    group = unique("cli-g")
    out = io.StringIO()
    bootstrap = kafka_broker.bootstrap_servers
    args = ["consume", "-b", bootstrap, "-t", topic, "-G", group, "--from-beginning", "-e"]
    assert main([*args, "-f", "%k\\n"], out=out) == 0
    assert sorted(out.getvalue().split()) == sorted(f"k{i}" for i in range(12))
    rows = _ours(kafka_broker, group)
    assert {(r["PARTITION"], r["CURRENT-OFFSET"], r["LAG"]) for r in rows} == {
        ("0", "6", "0"),
        ("1", "6", "0"),
    }
    # Again: the group's committed offsets are the start, nothing is left to print.
    again = io.StringIO()
    assert main([*args, "-f", "%k\\n"], out=again) == 0
    assert again.getvalue() == ""


def test_list_shows_topics_partitions_and_leaders(kafka_broker: Any) -> None:
    topic = unique("cli-list")
    kafka_broker.create_topic(topic, partitions=3)
    out = io.StringIO()
    assert main(["list", "-b", kafka_broker.bootstrap_servers, "-t", topic], out=out) == 0
    text = out.getvalue()
    assert f'topic "{topic}" with 3 partitions:' in text
    [broker_line] = [line for line in text.splitlines() if line.startswith("  broker ")]
    node = broker_line.split()[1]
    for p in range(3):
        assert f"    partition {p}, leader {node}, replicas: {node}, isrs: {node}" in text


def test_probe_writes_to_a_named_cluster_only_when_asked(kafka_broker: Any) -> None:
    topic = unique("cli-probe")
    kafka_broker.create_topic(topic, partitions=1)
    out = io.StringIO()
    assert main(["probe", "-b", kafka_broker.bootstrap_servers, "-t", topic], out=out) == 0
    assert "== 0 records decoded" in out.getvalue()
    with KafkaConsumer({"bootstrap.servers": kafka_broker.bootstrap_servers}) as consumer:
        assert consumer.end_offsets([TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): 0}
    asked = io.StringIO()
    args = ["probe", "-b", kafka_broker.bootstrap_servers, "-t", topic, "--produce-demo"]
    assert main([*args, "--records", "5"], out=asked) == 0
    assert "== 5 records decoded" in asked.getvalue()


def test_query_offsets_for_times(kafka_broker: Any) -> None:
    topic = unique("cli-query")
    kafka_broker.create_topic(topic, partitions=2)
    produce_timed(kafka_broker.bootstrap_servers, topic, 20, partitions=2)
    # Partition 0 holds records 0, 2, 4, ... (T0 + i s) at offsets 0, 1, 2, ...
    proc = run_cli(
        "query",
        "-b",
        kafka_broker.bootstrap_servers,
        "-J",
        "-t",
        f"{topic}:0:{T0 + 3000}",
        "-t",
        f"{topic}:1:{T0 + 7000}",
        "-t",
        f"{topic}:0:{T0}",
        "-t",
        f"{topic}:1:{T0 + 3_600_000}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    answers = [
        (a["partition"], a["offset"], a["record_timestamp"]) for a in json.loads(proc.stdout)
    ]
    assert answers == [(0, 2, T0 + 4000), (1, 3, T0 + 7000), (0, 0, T0), (1, -1, -1)]
