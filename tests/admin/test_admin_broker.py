"""kafka_actors.admin against a real broker (one per module): list shows a consumer and a
classic group with their type and state; offsets with lag; delete refused while a member is
active, then done once the group is empty."""

from __future__ import annotations

import io
import re
import time
import uuid
from typing import Any

import pytest

from kafka_actors import KafkaConsumer, TopicPartition
from kafka_actors.actors.network import ANY_NODE
from kafka_actors.admin import AdminClient
from kafka_actors.cli import main
from kafka_actors.cli.admin import ClusterClient
from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import GroupSubscribedToTopicError, NonEmptyGroupError

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _joined(consumer: KafkaConsumer, tps: set[TopicPartition]) -> None:
    deadline = time.monotonic() + 60  # a bound on a hang, not a timing assertion
    while consumer.assignment() != tps and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert consumer.assignment() == tps


def test_list_describe_offsets_and_delete(kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = _unique("admin")
    kafka_broker.create_topic(topic, partitions=2)
    tps = {TopicPartition(topic, p) for p in range(2)}
    groups = {protocol: _unique(f"admin-{protocol}") for protocol in ("consumer", "classic")}
    consumers = []
    try:
        for protocol, group in groups.items():
            consumer = KafkaConsumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": group,
                    "group.protocol": protocol,
                    "enable.auto.commit": False,
                }
            )
            consumers.append(consumer)
            consumer.subscribe([topic])
            _joined(consumer, tps)
            consumer.commit_sync({TopicPartition(topic, 0): 0})  # type: ignore[dict-item]
        with AdminClient(ConsumerConfig.from_dict({"bootstrap.servers": bootstrap})) as admin:
            listed = {g.group_id: g for g in admin.list_groups()}
            for protocol, group in groups.items():
                assert listed[group].group_type == protocol
                assert listed[group].protocol_type == "consumer"
                assert (listed[group].state or "").lower() == "stable"
            described = admin.describe_groups(groups.values())
            for protocol, group in groups.items():
                assert described[group].protocol == protocol
                assert len(described[group].members) == 1
            rows = admin.list_group_offsets(groups["consumer"])
            assert [(r.partition, r.committed, r.lag) for r in rows] == [
                (0, 0, 0),
                (1, None, None),
            ]
            # The CLI's table: kafka-consumer-groups' option names.
            out = io.StringIO()
            assert main(["groups", "-b", bootstrap, "--list"], out=out) == 0
            lines = {line.split()[0]: line.split() for line in out.getvalue().splitlines()}
            assert lines["GROUP"] == ["GROUP", "TYPE", "PROTOCOL-TYPE", "STATE"]
            for protocol, group in groups.items():
                assert lines[group][1:3] == [protocol, "consumer"]
            out = io.StringIO()
            assert (
                main(["groups", "-b", bootstrap, "--delete", "--group", groups["classic"]], out=out)
                == 1
            )
            assert "could not be deleted" in out.getvalue()
            outcome = admin.delete_groups([groups["classic"]])
            assert isinstance(outcome[groups["classic"]], NonEmptyGroupError)
            tp0 = TopicPartition(topic, 0)
            with pytest.raises(NonEmptyGroupError):
                admin.alter_group_offsets(groups["classic"], {tp0: 0})
            refused = admin.delete_group_offsets(groups["consumer"], [tp0])
            assert isinstance(refused[tp0], GroupSubscribedToTopicError)
            for consumer in consumers:
                consumer.close()
            consumers.clear()
            out = io.StringIO()
            code = main(
                ["groups", "-b", bootstrap, "--delete-offsets", "--group", groups["consumer"],
                 "--topic", f"{topic}:0"],
                out=out,
            )  # fmt: skip
            assert code == 0, out.getvalue()
            assert out.getvalue().splitlines()[1].split() == [topic, "0", "Successful"]
            assert [r.committed for r in admin.list_group_offsets(groups["consumer"])] == []
            assert admin.delete_groups(list(groups.values())) == dict.fromkeys(groups.values())
            remaining = {g.group_id for g in admin.list_groups()}
            assert not remaining & set(groups.values())
    finally:
        for consumer in consumers:
            consumer.close()


def test_reset_to_earliest_plan_then_execute(kafka_broker: Any) -> None:
    from confluent_kafka import Producer

    bootstrap = kafka_broker.bootstrap_servers
    topic = _unique("admin-reset")
    kafka_broker.create_topic(topic, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    for i in range(10):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    tp = TopicPartition(topic, 0)
    group = _unique("admin-reset-g")
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "latest",
    }
    with KafkaConsumer(config) as consumer:
        consumer.subscribe([topic])
        _joined(consumer, {tp})
        consumer.commit_sync({tp: 8})  # type: ignore[dict-item]
        with AdminClient(ConsumerConfig.from_dict({"bootstrap.servers": bootstrap})) as admin:
            with pytest.raises(NonEmptyGroupError):
                admin.alter_group_offsets(group, {tp: 0})
    with AdminClient(ConsumerConfig.from_dict({"bootstrap.servers": bootstrap})) as admin:
        plan = admin.plan_reset(group, [tp], to="earliest")
        assert [(r.partition, r.current, r.target) for r in plan] == [(tp, 8, 0)]
        assert admin.cluster.committed(group) == {tp: 8}  # the plan wrote nothing
        assert admin.plan_reset(group, [tp], to=99)[0].target == 10  # clamped to the end
        # From 1970: the first record; from an hour ahead (no record that recent): the log end.
        assert admin.plan_reset(group, [tp], to="timestamp", timestamp_ms=0)[0].target == 0
        far = int(time.time() * 1000) + 3_600_000
        assert admin.plan_reset(group, [tp], to="timestamp", timestamp_ms=far)[0].target == 10
        out = io.StringIO()
        args = ["groups", "-b", bootstrap, "--reset-offsets", "--group", group, "--topic", topic]
        assert main([*args, "--to-earliest", "--dry-run"], out=out) == 0
        assert out.getvalue().splitlines()[1].split() == [group, topic, "0", "0"]
        assert admin.cluster.committed(group) == {tp: 8}  # the dry run wrote nothing
        assert main([*args, "--to-earliest", "--execute"], out=io.StringIO()) == 0
        assert admin.cluster.committed(group) == {tp: 0}
    with KafkaConsumer(config) as consumer:
        consumer.subscribe([topic])
        records = []
        deadline = time.monotonic() + 60  # a bound on a hang, not a timing assertion
        while not records and time.monotonic() < deadline:
            records = list(consumer.poll(0.5))
        assert records and records[0].offset == 0


def test_a_java_consumer_starts_where_the_reset_put_the_group(kafka_broker: Any) -> None:
    """The offsets our reset commits are where Java's consumer (kafka-console-consumer in the
    group, KIP-848 protocol) starts: --to-offset, then --shift-by back from there, and
    --all-topics picks the partitions the group has committed offsets on."""
    from confluent_kafka import Producer

    bootstrap = kafka_broker.bootstrap_servers
    topic = _unique("admin-java")
    kafka_broker.create_topic(topic, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    for i in range(20):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    tp = TopicPartition(topic, 0)
    group = _unique("admin-java-g")

    def java_reads(count: int) -> list[int]:
        result = kafka_broker.run_tool(
            "kafka-console-consumer",
            [
                "--bootstrap-server", bootstrap, "--topic", topic, "--group", group,
                "--max-messages", str(count), "--timeout-ms", "60000",
                "--consumer-property", "group.protocol=consumer",
                "--consumer-property", "enable.auto.commit=false",
                "--formatter-property", "print.offset=true",
            ],
            timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return [int(m) for m in re.findall(r"Offset:(\d+)", result.stdout)]

    with AdminClient(ConsumerConfig.from_dict({"bootstrap.servers": bootstrap})) as admin:
        admin.alter_group_offsets(group, {tp: 3})  # the group exists with an offset
        args = ["groups", "-b", bootstrap, "--reset-offsets", "--group", group]
        assert (
            main([*args, "--topic", topic, "--to-offset", "12", "--execute"], out=io.StringIO())
            == 0
        )
        assert admin.cluster.committed(group) == {tp: 12}
        assert java_reads(3) == [12, 13, 14]
        # Java committed nothing (auto commit off): the group is still at 12; shift back 5.
        out = io.StringIO()
        assert main([*args, "--all-topics", "--shift-by", "-5", "--execute"], out=out) == 0
        assert out.getvalue().splitlines()[1].split() == [group, topic, "0", "7"]
        assert java_reads(2) == [7, 8]
        # Clamped to the log start, as Kafka's tool does.
        assert admin.plan_reset(group, [tp], to="shift", shift_by=-100)[0].target == 0
        with pytest.raises(ValueError, match="no committed offset"):
            admin.plan_reset(_unique("admin-none"), [tp], to="shift", shift_by=1)


def test_describe_a_share_group(kafka_broker: Any) -> None:
    """A share group is described with ShareGroupDescribe: its type, state and each member's
    assignment, from Python and in the CLI's member table; it is listed as ``share``."""
    from kafka_actors import KafkaShareConsumer

    bootstrap = kafka_broker.bootstrap_servers
    topic = _unique("admin-share")
    kafka_broker.create_topic(topic, partitions=2)
    group = _unique("admin-share-g")
    consumer = KafkaShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.subscribe([topic])
        with AdminClient(ConsumerConfig.from_dict({"bootstrap.servers": bootstrap})) as admin:
            deadline = time.monotonic() + 60  # a bound on a hang, not a timing assertion
            described = admin.describe_groups([group])[group]
            while not (described.members and described.members[0].assignment):
                assert time.monotonic() < deadline, described
                consumer.poll(0.2)
                described = admin.describe_groups([group])[group]
            assert described.protocol == "share"
            assert (described.state or "").lower() == "stable"
            [member] = described.members
            assert member.assignment == (TopicPartition(topic, 0), TopicPartition(topic, 1))
            assert member.member_epoch is not None and member.member_epoch > 0
            listed = {g.group_id: g for g in admin.list_groups()}
            assert listed[group].group_type == "share"
        out = io.StringIO()
        args = ["groups", "-b", bootstrap, "--describe", "--group", group, "--members"]
        assert main(args, out=out) == 0, out.getvalue()
        assert member.member_id in out.getvalue()
    finally:
        consumer.close()


def test_share_group_offsets_listed_reset_and_deleted(
    share_broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A share group's offsets are its share-partition start offsets
    (DescribeShareGroupOffsets): listed with the broker's lag, reset while the group is
    empty (AlterShareGroupOffsets; a new member then gets the records again) and deleted
    (DeleteShareGroupOffsets); a reset while a member is in is refused."""
    from kafka_actors import KafkaShareConsumer
    from kafka_actors.testing.share import set_share_group_config
    from tests.share.helpers import poll_for, produce

    bootstrap = share_broker.bootstrap_servers
    topic = _unique("admin-share-off")
    share_broker.create_topic(topic, partitions=1)
    group = _unique("admin-share-off-g")
    set_share_group_config(share_broker, group)  # share.auto.offset.reset=earliest
    produce(bootstrap, topic, 10)
    tp = TopicPartition(topic, 0)
    config = {"bootstrap.servers": bootstrap, "group.id": group}
    with AdminClient(ConsumerConfig.from_dict({"bootstrap.servers": bootstrap})) as admin:
        consumer = KafkaShareConsumer(config)
        try:
            consumer.subscribe([topic])
            got = poll_for(consumer, 60, until=lambda records: len(records) >= 10)
            assert sorted(r.offset for r in got) == list(range(10))
            consumer.commit_sync()
            # The broker counts the lag past its share-partition start offset, which it
            # persists when it likes (the 10 acknowledged records may sit above it).
            deadline = time.monotonic() + 60  # a bound on a hang, not a timing assertion
            rows = admin.list_group_offsets(group)
            while [(r.partition, r.lag) for r in rows] != [(0, 0)]:
                assert time.monotonic() < deadline, rows
                consumer.poll(0.2)
                rows = admin.list_group_offsets(group)
            [row] = rows
            assert row.committed is not None and 0 <= row.committed <= 10
            assert (row.topic, row.log_end) == (topic, 10)
            assert row.member is not None
            with pytest.raises(NonEmptyGroupError):
                admin.alter_group_offsets(group, {tp: 0})
        finally:
            consumer.close()
        produce(bootstrap, topic, 5, start=10)
        [row] = admin.list_group_offsets(group)
        assert (row.log_end, row.lag, row.member) == (15, 5, None)
        start = row.committed
        # The CLI's table and reset, as for any group; each asks the group's start offsets
        # once (DescribeShareGroupOffsets) and describes it only where it must.
        sent: list[str] = []
        real_send = ClusterClient.send

        def counting_send(self: ClusterClient, payload: Any, node: int = ANY_NODE) -> Any:
            sent.append(type(payload).__name__)
            return real_send(self, payload, node)

        monkeypatch.setattr(ClusterClient, "send", counting_send)
        out = io.StringIO()
        assert main(["groups", "-b", bootstrap, "--describe", "--group", group], out=out) == 0
        [line] = [line.split() for line in out.getvalue().splitlines() if topic in line]
        assert line[:6] == [group, topic, "0", str(start), "15", "5"]
        assert sent.count("DescribeShareGroupOffsetsRequest") == 1, sent
        sent.clear()
        out = io.StringIO()
        args = ["groups", "-b", bootstrap, "--reset-offsets", "--group", group,
                "--all-topics", "--to-offset", "3", "--execute"]  # fmt: skip
        assert main(args, out=out) == 0, out.getvalue()
        assert out.getvalue().splitlines()[1].split() == [group, topic, "0", "3"]
        # Described for its protocol, then again right before the write (members may have
        # joined meanwhile); its start offsets asked once.
        assert sent.count("DescribeShareGroupOffsetsRequest") == 1, sent
        assert sent.count("ShareGroupDescribeRequest") == 2, sent
        monkeypatch.undo()
        assert admin.committed_offsets(group) == {tp: 3}
        again = KafkaShareConsumer(config)
        try:
            again.subscribe([topic])
            got = poll_for(again, 60, until=lambda records: len(records) >= 12)
            assert sorted(r.offset for r in got) == list(range(3, 15))
        finally:
            again.close()
        assert admin.delete_group_offsets(group, [tp]) == {tp: None}
        assert admin.list_group_offsets(group) == []
