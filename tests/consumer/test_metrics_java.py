"""Java-named metrics against a real broker: each one moves when what it measures happens.

The sample window is shortened (``metrics.sample.window.ms``) so windowed values follow the
test rather than 30 s of history. Values are read through ``metrics()`` by MetricName.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import threading
import time
from typing import Any

import pytest

from kafka_actors import AsyncKafkaConsumer, KafkaConsumer
from kafka_actors.metrics import CONSUMER, COORDINATOR, FETCH_MANAGER, MetricName
from kafka_actors.protocol.messages import TopicPartition
from tests.consumer.helpers import base_config, poll_until, produce, unique

WINDOW = {"metrics.sample.window.ms": 2_000, "metrics.num.samples": 2}


def value(consumer: Any, group: str, name: str, **tags: str) -> float:
    return float(consumer.metrics().find(group, name, **tags).value())


@pytest.fixture
def two_partitions(kafka_broker: Any) -> str:
    name = unique("jmetrics")
    kafka_broker.create_topic(name, partitions=2)
    produce(kafka_broker.bootstrap_servers, name, 100, partition=0)
    produce(kafka_broker.bootstrap_servers, name, 60, partition=1, start=100)
    return name


def test_fetch_manager_metrics_move_as_records_are_read(
    kafka_broker: Any, two_partitions: str
) -> None:
    topic = two_partitions
    config = base_config(kafka_broker.bootstrap_servers, **WINDOW, **{"max.poll.records": 15})
    t0, t1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with KafkaConsumer(config) as consumer:
        consumer.assign([t0, t1])
        names = set(consumer.metrics())
        # The client-level fetch-rate is registered under Java's name, group and tags
        # (client-id only) from the start, not only once something was fetched.
        client = {"client-id": consumer.config.client_id}
        fetch_rate = MetricName("fetch-rate", FETCH_MANAGER, client)
        assert fetch_rate in names, sorted(map(str, names))
        assert all("partition" not in n.tags for n in names)  # nothing read yet
        lags: dict[str, list[float]] = {"0": [], "1": []}
        leads: list[float] = []
        got = 0
        deadline = time.monotonic() + 60
        while got < 160:
            assert time.monotonic() < deadline, got
            got += len(consumer.poll(0.5))
            view = consumer.metrics()
            for p in ("0", "1"):
                try:
                    lags[p].append(
                        view.find(FETCH_MANAGER, "records-lag", topic=topic, partition=p).value()
                    )
                except KeyError:
                    pass
            try:
                leads.append(
                    view.find(FETCH_MANAGER, "records-lead", topic=topic, partition="0").value()
                )
            except KeyError:
                pass
        # Lag falls as records are read, to 0; lead (position - log start) grows.
        for p, seen in lags.items():
            assert seen and seen[0] > 0 and seen[-1] == 0, (p, seen)
            assert seen == sorted(seen, reverse=True), (p, seen)
        assert leads[-1] == 100 and leads == sorted(leads)
        assert value(consumer, FETCH_MANAGER, "records-lag-max") > 0
        assert value(consumer, FETCH_MANAGER, "records-lag-max", topic=topic, partition="0") > 0
        assert value(consumer, FETCH_MANAGER, "records-lag-avg", topic=topic, partition="1") >= 0
        assert value(consumer, FETCH_MANAGER, "records-lead-min") >= 0
        assert value(consumer, FETCH_MANAGER, "records-lead-min", topic=topic, partition="0") < 100
        assert value(consumer, FETCH_MANAGER, "records-lead-avg", topic=topic, partition="0") > 0
        assert value(consumer, FETCH_MANAGER, "records-consumed-total") == 160
        assert value(consumer, FETCH_MANAGER, "records-consumed-total", topic=topic) == 160
        assert value(consumer, FETCH_MANAGER, "records-consumed-rate") > 0
        assert value(consumer, FETCH_MANAGER, "records-consumed-rate", topic=topic) > 0
        consumed_bytes = value(consumer, FETCH_MANAGER, "bytes-consumed-total")
        assert consumed_bytes > 160 * len(b"value-0")  # record batches: raw bytes
        assert value(consumer, FETCH_MANAGER, "bytes-consumed-total", topic=topic) == consumed_bytes
        assert value(consumer, FETCH_MANAGER, "bytes-consumed-rate") > 0
        assert value(consumer, FETCH_MANAGER, "bytes-consumed-rate", topic=topic) > 0
        assert value(consumer, FETCH_MANAGER, "fetch-size-max") > 0
        assert value(consumer, FETCH_MANAGER, "fetch-size-max", topic=topic) > 0
        assert value(consumer, FETCH_MANAGER, "fetch-size-avg", topic=topic) > 0
        fetches = value(consumer, FETCH_MANAGER, "fetch-total")
        # Looked up by that MetricName: the metric find() reads, and it moved.
        view = consumer.metrics()
        assert view[fetch_rate] is view.find(FETCH_MANAGER, "fetch-rate")
        assert fetches >= 1 and view[fetch_rate].value() > 0
        # Caught up: each Fetch waits up to fetch.max.wait.ms (100) at the broker.
        consumer.poll(1.0)
        assert value(consumer, FETCH_MANAGER, "fetch-total") > fetches
        assert value(consumer, FETCH_MANAGER, "fetch-latency-max") >= 50
        assert value(consumer, FETCH_MANAGER, "fetch-latency-avg") > 0
        assert value(consumer, FETCH_MANAGER, "fetch-throttle-time-max") == 0  # no quota here
        # The window passes with nothing consumed: the rates fall to 0, the totals stay.
        time.sleep(4.2)
        assert value(consumer, FETCH_MANAGER, "records-consumed-rate") == 0
        assert value(consumer, FETCH_MANAGER, "records-consumed-total") == 160
        assert math.isnan(value(consumer, FETCH_MANAGER, "records-lag-max"))
        # Unassigned partitions lose their per-partition metrics at the next collect.
        consumer.assign([t1])
        consumer.poll(0.3)
        parts = {n.tags["partition"] for n in consumer.metrics() if "partition" in n.tags}
        assert parts <= {"1"}
        # The flat values of before stay readable by their old string keys.
        assert consumer.metrics()["records-consumed-total"] == 160


def _established(port: int) -> int:
    """TCP connections of this process to ``port`` in state ESTABLISHED (from /proc)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


def test_consumer_metrics_connections_requests_io_wait_and_polls(
    kafka_broker: Any, two_partitions: str
) -> None:
    port = int(kafka_broker.bootstrap_servers.rsplit(":", 1)[1])
    config = base_config(kafka_broker.bootstrap_servers, **WINDOW)
    # A consumer connects as it is built (ApiVersions, the bootstrap Metadata): reading the
    # count right after that raced with the connect. One that cannot connect counts none.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        unreachable = KafkaConsumer(base_config(f"127.0.0.1:{closed.getsockname()[1]}", **WINDOW))
        try:
            time.sleep(0.3)
            assert value(unreachable, CONSUMER, "connection-count") == 0
        finally:
            unreachable.close(1.0)
    with KafkaConsumer(config) as consumer:
        assert value(consumer, CONSUMER, "last-poll-seconds-ago") == -1
        consumer.assign([TopicPartition(two_partitions, 0)])
        poll_until(consumer, 100)
        # connection-count is the number of connections open (read from /proc).
        deadline = time.monotonic() + 20
        while True:
            counted = value(consumer, CONSUMER, "connection-count")
            if counted == _established(port) and counted >= 1:
                break
            assert time.monotonic() < deadline, (counted, _established(port))
            time.sleep(0.2)
        assert value(consumer, CONSUMER, "connection-creation-total") >= counted
        requests = value(consumer, CONSUMER, "request-total")
        assert requests >= 3  # metadata, list offsets, fetches at least
        assert value(consumer, CONSUMER, "request-rate") > 0
        assert value(consumer, CONSUMER, "request-latency-max") > 0
        assert value(consumer, CONSUMER, "request-latency-avg") > 0
        # io-wait-ratio: a fraction, and it moves as the network actor waits more or less.
        ratios = set()
        for _ in range(6):
            consumer.poll(0.4)
            ratio = value(consumer, CONSUMER, "io-wait-ratio")
            assert 0 < ratio < 1, ratio
            ratios.add(ratio)
        assert len(ratios) > 1, ratios
        assert value(consumer, CONSUMER, "io-wait-time-ns-avg") > 0
        assert value(consumer, CONSUMER, "request-total") > requests
        # Polls with time outside them: the idle ratio and the time between polls.
        for _ in range(3):
            time.sleep(0.3)
            consumer.poll(0.1)
        idle = value(consumer, CONSUMER, "poll-idle-ratio-avg")
        assert 0 < idle < 1, idle
        assert value(consumer, CONSUMER, "time-between-poll-max") >= 300
        assert value(consumer, CONSUMER, "time-between-poll-avg") > 0
        assert value(consumer, CONSUMER, "last-poll-seconds-ago") == 0
        time.sleep(1.2)
        assert value(consumer, CONSUMER, "last-poll-seconds-ago") >= 1


class _Member:
    def __init__(self, config: dict[str, Any], topic: str) -> None:
        self.consumer = KafkaConsumer(config)
        self.consumer.subscribe([topic])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_coordinator_metrics_heartbeats_rebalances_commits(
    kafka_broker: Any, two_partitions: str, protocol: str
) -> None:
    group = unique("jmetrics-group")
    config = base_config(
        kafka_broker.bootstrap_servers,
        **WINDOW,
        **{"group.id": group, "group.protocol": protocol, "enable.auto.commit": False},
    )
    with KafkaConsumer(config) as consumer:
        assert value(consumer, COORDINATOR, "last-heartbeat-seconds-ago") == -1
        assert math.isnan(value(consumer, COORDINATOR, "rebalance-latency-max"))
        consumer.subscribe([two_partitions])
        polled: list[Any] = []
        deadline = time.monotonic() + 60
        while len(consumer.assignment()) < 2:
            assert time.monotonic() < deadline, consumer.assignment()
            polled.extend(consumer.poll(0.2))
        while value(consumer, COORDINATOR, "rebalance-total") < 1:
            assert time.monotonic() < deadline
            polled.extend(consumer.poll(0.2))
        assert value(consumer, COORDINATOR, "assigned-partitions") == 2
        first = value(consumer, COORDINATOR, "rebalance-latency-max")
        assert first > 0
        assert value(consumer, COORDINATOR, "rebalance-latency-avg") > 0
        assert value(consumer, COORDINATOR, "rebalance-latency-total") >= first
        assert value(consumer, COORDINATOR, "rebalance-rate-per-hour") > 0
        assert value(consumer, COORDINATOR, "last-rebalance-seconds-ago") >= 0
        # (classic: the first Heartbeat goes heartbeat.interval.ms after the join)
        while value(consumer, COORDINATOR, "heartbeat-total") < 1:
            assert time.monotonic() < deadline, "no heartbeat response recorded"
            polled.extend(consumer.poll(0.2))
        assert value(consumer, COORDINATOR, "heartbeat-rate") > 0
        assert value(consumer, COORDINATOR, "heartbeat-response-time-max") >= 0
        assert 0 <= value(consumer, COORDINATOR, "last-heartbeat-seconds-ago") <= 10
        # Commits: each OffsetCommit response is timed.
        assert value(consumer, COORDINATOR, "commit-total") == 0
        assert math.isnan(value(consumer, COORDINATOR, "commit-latency-max"))
        if not polled:  # something consumed, so that there is something to commit
            polled.extend(poll_until(consumer, 1))
        consumer.commit_sync()
        consumer.commit_sync()
        assert value(consumer, COORDINATOR, "commit-total") >= 2
        assert value(consumer, COORDINATOR, "commit-rate") > 0
        assert value(consumer, COORDINATOR, "commit-latency-max") >= 0
        assert value(consumer, COORDINATOR, "commit-latency-avg") >= 0
        # A second member joins: a new rebalance, recorded with its latency.
        member = _Member(config, two_partitions)
        try:
            deadline = time.monotonic() + 60
            while value(consumer, COORDINATOR, "rebalance-total") < 2:
                assert time.monotonic() < deadline, "no second rebalance recorded"
                polled.extend(consumer.poll(0.2))
            assert value(consumer, COORDINATOR, "assigned-partitions") == len(consumer.assignment())
            while value(consumer, COORDINATOR, "assigned-partitions") != 1:
                assert time.monotonic() < deadline
                polled.extend(consumer.poll(0.2))
            assert value(consumer, COORDINATOR, "rebalance-latency-total") > first
        finally:
            member.stop()


def test_async_consumer_exposes_the_same_metrics(kafka_broker: Any, two_partitions: str) -> None:
    config = base_config(kafka_broker.bootstrap_servers, **WINDOW)
    tp = TopicPartition(two_partitions, 1)

    async def main() -> tuple[set[tuple[str, str, tuple[str, ...]]], float, float]:
        async with AsyncKafkaConsumer(config=config) as consumer:
            consumer.assign([tp])
            got = 0
            deadline = time.monotonic() + 60
            while got < 60:
                assert time.monotonic() < deadline
                batch = await consumer.getmany(timeout_ms=500)
                got += sum(len(v) for v in batch.values())
            view = consumer.metrics()
            names = {(n.group, n.name, tuple(sorted(n.tags))) for n in view}
            lag = view.find(FETCH_MANAGER, "records-lag", topic=tp.topic, partition="1").value()
            total = view.find(FETCH_MANAGER, "records-consumed-total").value()
            return names, lag, total

    names, lag, total = asyncio.run(main())
    with KafkaConsumer(config) as consumer:
        consumer.assign([tp])
        poll_until(consumer, 60)
        sync = {(n.group, n.name, tuple(sorted(n.tags))) for n in consumer.metrics()}
    assert names == sync
    assert lag == 0 and total == 60
