"""KIP-320 against real brokers: positions are validated with OffsetsForLeaderEpoch.

* A committed offset that carries a leader epoch is validated before fetching and kept when the
  log was not truncated (one broker).
* An unclean leader election on a 3-broker cluster truncates the log below a committed
  position: our consumer and Java's consumer (``kafka-console-consumer`` from the testkit's
  jars) see the same thing — with ``auto.offset.reset=none`` a log-truncation error naming the
  partition, its fetch offset and the divergent offset; with ``earliest`` / ``latest`` they
  resume at the divergent offset.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import ElectionType, Producer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient

from kafka_actors import KafkaConsumer
from kafka_actors.errors import LogTruncationError
from kafka_actors.protocol.messages import OffsetAndMetadata, TopicPartition
from kafka_actors.protocol.offsets import list_offsets as offsets_module
from kafka_actors.protocol.subscription import SubscriptionState, ValidationOutcome
from kafka_actors.testing.broker import KafkaBroker, KafkaCluster
from tests.consumer.helpers import base_config, poll_until, produce, unique


def _spy_validation(monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[Any]]:
    """Record every OffsetForLeaderEpoch built and every validation outcome."""
    requests: list[Any] = []
    outcomes: list[Any] = []
    build = offsets_module.offset_for_leader_epoch_request
    complete = SubscriptionState.maybe_complete_validation

    def spy_build(version: int, **kwargs: Any) -> Any:
        requests.append(dict(kwargs["epochs"]))
        return build(version, **kwargs)

    def spy_complete(self: SubscriptionState, *args: Any) -> ValidationOutcome:
        outcome = complete(self, *args)
        outcomes.append((args, outcome))
        return outcome

    monkeypatch.setattr(offsets_module, "offset_for_leader_epoch_request", spy_build)
    monkeypatch.setattr(SubscriptionState, "maybe_complete_validation", spy_complete)
    return requests, outcomes


def test_committed_offset_with_epoch_is_validated_and_kept(
    kafka_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, group = unique("kip320-keep"), unique("kip320-keep-g")
    kafka_broker.create_topic(topic)
    produce(kafka_broker.bootstrap_servers, topic, 10, partition=0)
    tp = TopicPartition(topic, 0)
    config = base_config(
        kafka_broker.bootstrap_servers, **{"group.id": group, "enable.auto.commit": False}
    )
    first = KafkaConsumer(config)
    try:
        first.assign([tp])
        records = poll_until(first, 6)[:6]
        epoch = records[-1].leader_epoch
        assert epoch is not None and epoch >= 0
        first.commit_sync({tp: OffsetAndMetadata(6, "", epoch)})
        assert first.committed({tp})[tp] == OffsetAndMetadata(6, "", epoch)
    finally:
        first.close()

    requests, outcomes = _spy_validation(monkeypatch)
    second = KafkaConsumer(config)
    try:
        second.assign([tp])
        got = poll_until(second, 4)
        assert [r.offset for r in got][:4] == [6, 7, 8, 9]  # position kept
    finally:
        second.close()
    assert requests and requests[0] == {tp: (epoch, epoch)}  # (epoch asked, current epoch)
    assert [o for _, o in outcomes] == [ValidationOutcome.VALID]


def test_seek_with_leader_epoch_is_validated(
    kafka_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = unique("kip320-seek")
    kafka_broker.create_topic(topic)
    produce(kafka_broker.bootstrap_servers, topic, 10, partition=0)
    tp = TopicPartition(topic, 0)
    # Metadata is asked again every 200 ms: the answers that come while the test polls name
    # the same leader, which must not count as a leader change.
    config = base_config(kafka_broker.bootstrap_servers, **{"metadata.max.age.ms": 200})
    consumer = KafkaConsumer(config)
    try:
        consumer.assign([tp])
        epoch = poll_until(consumer, 10)[-1].leader_epoch
        assert epoch is not None
        requests, outcomes = _spy_validation(monkeypatch)
        consumer.seek(tp, OffsetAndMetadata(3, "", epoch))  # as Java: validated first
        got = poll_until(consumer, 7)
        assert [r.offset for r in got[:7]] == list(range(3, 10))
        consumer.seek(tp, 5)  # a plain offset: no validation, now or at the next Metadata
        assert [r.offset for r in poll_until(consumer, 5)[:5]] == list(range(5, 10))
        # Before the fix a seek left the position's leader unknown: the first Metadata
        # answer after it put the partition awaiting validation again (CI caught it once).
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            assert not consumer.poll(0.1)
    finally:
        consumer.close()
    assert requests == [{tp: (epoch, epoch)}]
    assert [o for _, o in outcomes] == [ValidationOutcome.VALID]


# -- unclean leader election -----------------------------------------------------------------


def _partition(admin: AdminClient, topic: str) -> Any:
    return admin.list_topics(topic=topic, timeout=10).topics[topic].partitions[0]


def _wait(check: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _produce(bootstrap: str, topic: str, values: list[str], acks: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "log_level": 3, "linger.ms": 0})
    for v in values:
        p.produce(topic, v.encode(), partition=0)
    assert p.flush(60) == 0


def _java_console(cluster: KafkaCluster, topic: str, group: str, reset: str) -> tuple[str, str]:
    result = cluster.run_tool(
        "kafka-console-consumer",
        [
            "--bootstrap-server",
            cluster.bootstrap_servers,
            "--topic",
            topic,
            "--group",
            group,
            "--consumer-property",
            f"auto.offset.reset={reset}",
            "--property",
            "print.offset=true",
            "--max-messages",
            "1",
            "--timeout-ms",
            "30000",
        ],
        timeout=120,
    )
    return result.stdout, result.stderr


@pytest.mark.cluster
def test_unclean_election_truncation_detected_like_java(
    kafka_cluster: KafkaCluster, kafka_topic: Callable[..., str], request: pytest.FixtureRequest
) -> None:
    topic = kafka_topic(
        kafka_cluster,
        partitions=1,
        replication_factor=3,
        config={"unclean.leader.election.enable": "true", "min.insync.replicas": "1"},
    )
    tp = TopicPartition(topic, 0)
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers, "log_level": 0})
    part = _partition(admin, topic)
    index = {b.node_id: i for i, b in enumerate(kafka_cluster.brokers)}
    leader = part.leader
    followers = [r for r in part.replicas if r != leader]
    stale, other = followers  # ``stale`` misses the last records and is made leader uncleanly

    _produce(kafka_cluster.bootstrap_servers, topic, [f"a{i}" for i in range(10)], "all")
    kafka_cluster.stop_broker(index[stale])
    _wait(lambda: stale not in _partition(admin, topic).isrs, "the stale replica out of the ISR")
    _produce(kafka_cluster.bootstrap_servers, topic, [f"b{i}" for i in range(10)], "all")

    # Every group commits position 20 with the leader epoch of the records before it.
    groups = {name: unique(f"kip320-{name}") for name in ("none", "earliest", "latest")}
    java_groups = {name: unique(f"kip320-java-{name}") for name in ("none", "earliest")}
    # Two consumers stay open across the election (positions at 20, fetched from the leader
    # of the time): they must notice the truncation by themselves (leader epoch change).
    live = {
        reset: KafkaConsumer(
            base_config(
                kafka_cluster.bootstrap_servers,
                **{"enable.auto.commit": False, "auto.offset.reset": reset},
            )
        )
        for reset in ("none", "earliest")
    }
    for consumer in live.values():
        request.addfinalizer(consumer.close)  # also when the test fails (close is idempotent)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        records = poll_until(consumer, 20, timeout=120)
        epoch = records[19].leader_epoch
        assert records[19].offset == 19 and epoch is not None
    for group in [*groups.values(), *java_groups.values()]:
        committer = KafkaConsumer(
            base_config(
                kafka_cluster.bootstrap_servers, **{"group.id": group, "enable.auto.commit": False}
            )
        )
        try:
            committer.commit_sync({tp: OffsetAndMetadata(20, "", epoch)})
        finally:
            committer.close()

    # Lose every in-sync replica; elect the stale one (it has offsets 0..9 only).
    kafka_cluster.stop_broker(index[other])
    kafka_cluster.stop_broker(index[leader])
    kafka_cluster.start_broker(index[stale])
    stale_node = kafka_cluster.brokers[index[stale]]
    stale_admin = AdminClient(
        {"bootstrap.servers": f"{stale_node.host}:{stale_node.port}", "log_level": 0}
    )

    def elected() -> bool:
        if _partition(stale_admin, topic).leader == stale:
            return True
        futures = stale_admin.elect_leaders(
            ElectionType.UNCLEAN, [CKTopicPartition(topic, 0)], request_timeout=10
        )
        try:
            futures.result(timeout=15)
        except Exception:  # retried until the deadline
            pass
        return _partition(stale_admin, topic).leader == stale

    _wait(elected, "the unclean election of the stale replica", timeout=180)
    _produce(f"{stale_node.host}:{stale_node.port}", topic, [f"c{i}" for i in range(5)], "1")
    # The old replicas come back and truncate their logs to the new leader's.
    kafka_cluster.ensure_running()

    # The live consumers: the leader change is validated before the next fetch.
    try:
        live_error: LogTruncationError | None = None
        deadline = time.monotonic() + 120
        while live_error is None and time.monotonic() < deadline:
            try:
                assert not list(live["none"].poll(0.5))
            except LogTruncationError as exc:
                live_error = exc
        assert live_error is not None, "the live consumer missed the truncation"
        assert live_error.fetch_offsets == {(topic, 0): 20}
        assert live_error.divergent_offsets[(topic, 0)][0] == 10
        first_live = poll_until(live["earliest"], 1, timeout=120)[0]
        assert (first_live.offset, first_live.value) == (10, b"c0")
    finally:
        for consumer in live.values():
            consumer.close()

    # Ours, auto.offset.reset=none: LogTruncationError naming partition and offsets.
    consumer = KafkaConsumer(
        base_config(
            kafka_cluster.bootstrap_servers,
            **{
                "group.id": groups["none"],
                "auto.offset.reset": "none",
                "enable.auto.commit": False,
            },
        )
    )
    error: LogTruncationError | None = None
    try:
        consumer.assign([tp])
        deadline = time.monotonic() + 120
        while error is None and time.monotonic() < deadline:
            try:
                assert not list(consumer.poll(0.5))
            except LogTruncationError as exc:
                error = exc
    finally:
        consumer.close()
    assert error is not None, "no LogTruncationError"
    assert error.fetch_offsets == {(topic, 0): 20}
    assert error.divergent_offsets[(topic, 0)][0] == 10

    # Ours, with a reset policy: resume at the divergent offset (10: the first new record).
    ours: dict[str, tuple[int, bytes]] = {}
    for name in ("earliest", "latest"):
        consumer = KafkaConsumer(
            base_config(
                kafka_cluster.bootstrap_servers,
                **{
                    "group.id": groups[name],
                    "auto.offset.reset": name,
                    "enable.auto.commit": False,
                },
            )
        )
        try:
            consumer.assign([tp])
            first = poll_until(consumer, 1, timeout=120)[0]
            ours[name] = (first.offset, first.value)
        finally:
            consumer.close()
    assert ours == {"earliest": (10, b"c0"), "latest": (10, b"c0")}

    # Java's consumer on the same log and the same committed offsets.
    out, err = _java_console(kafka_cluster, topic, java_groups["none"], "none")
    assert "LogTruncationException" in err or "Truncation detected" in err, (out, err)
    assert "Offset:" not in out
    out, err = _java_console(kafka_cluster, topic, java_groups["earliest"], "earliest")
    assert "Offset:10" in out and "c0" in out, (out, err)
