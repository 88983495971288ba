"""The command line on the embedded mock cluster, as kcat users use it: raw bytes through a
pipe, ``| head -1``, an unknown topic, stopping at a timestamp, offsets for times."""

from __future__ import annotations

import json
import pathlib
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytest

pytestmark = [pytest.mark.mock, pytest.mark.timeout(180)]

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "kafka_actors"]


def run_cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, *args], capture_output=True, timeout=150, cwd=ROOT, check=False)


def read_all(bootstrap: str, topic: str) -> list[str]:
    """The arguments of a ``consume`` of ``topic`` from its start to its end."""
    return ["consume", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e"]


def produce(
    bootstrap: str, topic: str, records: Sequence[tuple[bytes | None, bytes | None, int]]
) -> None:
    """(key, value, timestamp ms) records into partition 0, in order."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    for key, value, timestamp in records:
        producer.produce(topic, key=key, value=value, partition=0, timestamp=timestamp)
    assert producer.flush(30) == 0


def topic_names(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    return set(admin.list_topics(timeout=10).topics)


BINARY = [
    (b"k\xff\x00", b"\x80\xfe\xc3(\xff", 1_700_000_000_000),
    (None, b"\xed\xa0\x80 lone surrogate \xf0\x28\x8c\xbc", 1_700_000_001_000),
    (b"\n", b"", 1_700_000_002_000),
    (b"plain", "caf\u00e9".encode(), 1_700_000_003_000),
]


def test_raw_mode_round_trips_bytes_exactly(
    mock_cluster: Any, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(mock_cluster)
    bootstrap = mock_cluster.bootstrap_servers
    produce(bootstrap, topic, BINARY)
    result = run_cli(
        *read_all(bootstrap, topic),
        "-K",
        "\\x1f",
        "-D",
        "\\0\\x1e",
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    expected = b"".join(
        (key or b"") + b"\x1f" + (value or b"") + b"\x00\x1e" for key, value, _ in BINARY
    )
    assert result.stdout == expected
    # The default text layout and -f write the bytes too (nothing replaced).
    text = run_cli(*read_all(bootstrap, topic), "-f", "%s\\n")
    assert text.returncode == 0, text.stderr.decode(errors="replace")[-2000:]
    assert text.stdout == b"".join(value + b"\n" for _, value, _ in BINARY)


def test_a_closed_pipe_ends_quietly(mock_cluster: Any, kafka_topic: Callable[..., str]) -> None:
    topic = kafka_topic(mock_cluster)
    bootstrap = mock_cluster.bootstrap_servers
    produce(bootstrap, topic, [(None, b"x" * 2000, 1_700_000_000_000 + i) for i in range(2000)])
    command = " ".join(
        shlex.quote(part)
        for part in [
            *CLI,
            "consume",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-o",
            "beginning",
            "--format",
            "value",
        ]
    )
    # The CLI does not stop by itself (no -e): only the closed pipe ends it.
    result = subprocess.run(
        [
            "bash",
            "-c",
            f"set -o pipefail; {command} | head -1 >/dev/null; "
            'echo "status=${PIPESTATUS[0]}" >&2',
        ],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=ROOT,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "BrokenPipeError" not in result.stderr
    assert "status=141" in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("group", [False, True], ids=["assigned", "group"])
def test_an_unknown_topic_is_an_error_and_is_not_created(mock_cluster: Any, group: bool) -> None:
    bootstrap = mock_cluster.bootstrap_servers
    topic = f"no-such-topic-{'g' if group else 'a'}-{pathlib.Path(__file__).stem}"
    extra = ["-G", f"{topic}-group"] if group else []
    # Even asked to create topics, the CLI does not.
    result = run_cli(
        "consume",
        "-b",
        bootstrap,
        "-t",
        topic,
        "-e",
        "-X",
        "allow.auto.create.topics=true",
        *extra,
    )
    stderr = result.stderr.decode(errors="replace")
    assert result.returncode == 1, stderr[-2000:]
    assert topic in stderr and "does not exist" in stderr
    assert "Traceback" not in stderr
    assert result.stdout == b""
    assert topic not in topic_names(bootstrap)


T0 = 1_700_000_000_000


def produce_timed(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    """Record i of partition p: timestamp T0 + i s, value p-i."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p, timestamp=T0 + i * 1000)
    assert producer.flush(30) == 0


def test_stop_at_a_timestamp(mock_cluster: Any, kafka_topic: Callable[..., str]) -> None:
    topic = kafka_topic(mock_cluster, partitions=2)
    bootstrap = mock_cluster.bootstrap_servers
    produce_timed(bootstrap, topic, 10, partitions=2)
    # No -e: only the end timestamps end the run; partition 1 stops earlier than the rest.
    result = run_cli(
        "consume",
        "-b",
        bootstrap,
        "-t",
        topic,
        "-f",
        "%s\\n",
        "-o",
        "beginning",
        "-o",
        f"e@{T0 + 6000}",
        "-o",
        f"1=e@{T0 + 4500}",
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    lines = result.stdout.decode().splitlines()
    assert sorted(lines) == sorted([f"0-{i}" for i in range(6)] + [f"1-{i}" for i in range(5)])


def test_query_checks_its_topics(mock_cluster: Any, kafka_topic: Callable[..., str]) -> None:
    # (The mock cluster answers every timestamp lookup with -1: the offsets themselves are
    # checked on a real broker, tests/cli/test_cli_broker.py.)
    topic = kafka_topic(mock_cluster, partitions=2)
    bootstrap = mock_cluster.bootstrap_servers
    missing = run_cli("query", "-b", bootstrap, "-t", f"{topic}:7:{T0}")
    assert missing.returncode == 1
    assert b"no partition 7" in missing.stderr
    unknown = f"{topic}-unknown"
    result = run_cli("query", "-b", bootstrap, "-t", f"{unknown}:0:{T0}")
    assert result.returncode == 1
    assert b"does not exist" in result.stderr
    assert unknown not in topic_names(bootstrap)
    usage = run_cli("query", "-b", bootstrap, "-t", f"{topic}:{T0}")
    assert usage.returncode == 2


def test_list_as_json(mock_cluster: Any, kafka_topic: Callable[..., str]) -> None:
    topic = kafka_topic(mock_cluster, partitions=3)
    # kcat's way of asking: the -L mode flag anywhere in the line.
    result = run_cli("-b", mock_cluster.bootstrap_servers, "-L", "-t", topic, "-J")
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    document = json.loads(result.stdout)
    [listed] = document["topics"]
    assert listed["name"] == topic and listed["internal"] is False
    assert [p["partition"] for p in listed["partitions"]] == [0, 1, 2]
    brokers = {b["id"] for b in document["brokers"]}
    assert all(p["leader"] in brokers for p in listed["partitions"])


def test_version_quiet_and_debug(mock_cluster: Any, kafka_topic: Callable[..., str]) -> None:
    from kafka_actors import __version__

    version = run_cli("--version")
    assert version.returncode == 0
    assert version.stdout.decode().strip() == f"kafka-actors {__version__}"
    topic = kafka_topic(mock_cluster)
    bootstrap = mock_cluster.bootstrap_servers
    produce(bootstrap, topic, [(None, b"v", T0)])
    common = [
        *read_all(bootstrap, topic),
        "--progress",
        "always",
        "--format",
        "value",
    ]
    quiet = run_cli(*common, "-q")
    assert quiet.returncode == 0 and quiet.stdout == b"v\n" and quiet.stderr == b""
    loud = run_cli(*common)
    assert loud.returncode == 0 and b"consumed 1 records" in loud.stderr
    debug = run_cli(*common, "-d")
    assert debug.returncode == 0 and debug.stdout == b"v\n"
    assert b"debug" in debug.stderr and b"Fetch" in debug.stderr


def test_group_without_describe_apis_still_shows_offsets_and_lag(
    mock_cluster: Any, kafka_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses
    import io

    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    from kafka_actors.cli import main
    from kafka_actors.cli.admin import ClusterClient
    from kafka_actors.protocol.wire.apis import ApiKey

    topic = kafka_topic(mock_cluster, partitions=2)
    bootstrap = mock_cluster.bootstrap_servers
    produce_timed(bootstrap, topic, 10, partitions=2)
    group = f"{topic}-group"
    committer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    try:
        committer.commit(offsets=[CTP(topic, 0, 3), CTP(topic, 1, 10)], asynchronous=False)
    finally:
        committer.close()

    # A broker that answers neither ConsumerGroupDescribe nor DescribeGroups.
    negotiated = ClusterClient.versions

    def without_describe(self: ClusterClient) -> Any:
        versions = negotiated(self)
        broker = {
            api: r
            for api, r in versions.broker.items()
            if api not in (ApiKey.DESCRIBE_GROUPS, ApiKey.CONSUMER_GROUP_DESCRIBE)
        }
        return dataclasses.replace(versions, broker=broker)

    monkeypatch.setattr(ClusterClient, "versions", without_describe)
    out = io.StringIO()
    assert main(["group", group, "-b", bootstrap], out=out) == 0
    header, *rows = out.getvalue().splitlines()
    assert header.split()[:6] == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
    ]
    assert [row.split()[:6] for row in rows] == [
        [group, topic, "0", "3", "10", "7"],
        [group, topic, "1", "10", "10", "0"],
    ]
    # --members needs the description: an error, not a made-up table.
    assert main(["group", group, "-b", bootstrap, "--members"], out=io.StringIO()) == 1
