"""``python -m kafka_actors consume`` against the real broker."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from typing import Any

import pytest

from kafka_actors import KafkaConsumer, TopicPartition
from tests.consumer.helpers import produce, unique

pytestmark = pytest.mark.broker


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafka_actors", "consume", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_consume_jsonl_commits_and_stops(kafka_broker: Any, protocol: str) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("cli")
    group = unique("cli-g")
    kafka_broker.create_topic(topic, partitions=1)
    produce(bootstrap, topic, 12, headers=[("h", b"\x00\x01")])
    common = ["--bootstrap-servers", bootstrap, "--group", group, "--topic", topic]
    first = run_cli(
        *common, "--from-beginning", "--max-records", "7", "--format", "jsonl",
        "--group-protocol", protocol,
    )
    assert first.returncode == 0, first.stderr[-2000:]
    lines = [json.loads(line) for line in first.stdout.splitlines()]
    assert [line["offset"] for line in lines] == list(range(7))
    assert base64.b64decode(lines[0]["value"]) == b"value-0"
    assert base64.b64decode(lines[0]["key"]) == b"key-0"
    assert lines[0]["headers"] == [["h", base64.b64encode(b"\x00\x01").decode()]]
    assert lines[0]["topic"] == topic and lines[0]["partition"] == 0
    assert isinstance(lines[0]["timestamp"], int)
    # The group committed what was printed: a second run continues at offset 7 and stops
    # when idle.
    second = run_cli(*common, "--format", "text", "--timeout", "3", "--group-protocol", protocol)
    assert second.returncode == 0, second.stderr[-2000:]
    text = second.stdout.splitlines()
    assert [line.split("\t")[0] for line in text] == [f"{topic}-0@{i}" for i in range(7, 12)]
    assert text[0].split("\t")[2] == "value-7"
    with KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group}) as consumer:
        committed = consumer.committed(TopicPartition(topic, 0))[TopicPartition(topic, 0)]
    assert committed is not None and committed.offset == 12


@pytest.mark.mock
def test_consume_on_the_embedded_mock_cluster() -> None:
    result = run_cli(
        "--records", "30", "--max-records", "30", "--format", "text", "--timeout", "20"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 30
    assert {line.split("@")[0].rsplit("-", 1)[0] for line in lines} == {"kafka-actors-demo"}
    assert "consumed 30 records" in result.stderr
