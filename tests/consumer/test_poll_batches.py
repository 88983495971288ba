"""``KafkaConsumer.poll_batches``: the columnar poll. Its rows are ``poll()``'s records (every
codec, headers, null keys and values, control batches, aborted transactions), and positions,
commits, mixing with ``poll()``, failures while making the batches and rebalance-safe commits
work as for ``poll()``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from kafka_actors import KafkaConsumer, TopicPartition
from kafka_actors.errors import IllegalStateError, MissingDependencyError
from kafka_actors.protocol.records import arrow
from kafka_actors.protocol.records.decode import ConsumerRecord
from tests.consumer.helpers import base_config, poll_until, produce, unique
from tests.records.test_columnar import batch_rows, row_of

pa = pytest.importorskip("pyarrow")

Rows = dict[TopicPartition, list[dict[str, Any]]]


def poll_batches_until(
    consumer: KafkaConsumer,
    count: int,
    *,
    timeout: float = 60.0,
    check: Callable[[TopicPartition, Any], None] | None = None,
    **kw: Any,
) -> Rows:
    """poll_batches until ``count`` rows arrived; rows per partition, in order."""
    rows: Rows = {}
    deadline = time.monotonic() + timeout
    while sum(len(r) for r in rows.values()) < count:
        assert time.monotonic() < deadline, f"only {sum(map(len, rows.values()))} of {count}"
        for tp, batch in consumer.poll_batches(0.5, **kw).items():
            assert batch.num_rows > 0
            assert batch.schema == arrow.arrow_schema(kw.get("include_headers", False))
            if check is not None:
                check(tp, batch)
            rows.setdefault(tp, []).extend(batch_rows(batch))
    return rows


def records_by_partition(records: list[ConsumerRecord], headers: bool = True) -> Rows:
    rows: Rows = {}
    for r in records:
        row = row_of(r)
        if not headers:
            del row["headers"]
        rows.setdefault(TopicPartition(r.topic, r.partition), []).append(row)
    return rows


# -- the embedded mock cluster -----------------------------------------------------------------


@pytest.mark.mock
def test_rows_are_poll_records_with_headers_and_null_keys(mock_cluster: Any) -> None:
    topic = unique("cols")
    mock_cluster.create_topic(topic, partitions=3)
    bootstrap = mock_cluster.bootstrap_servers
    produce(
        bootstrap,
        topic,
        90,
        key=lambda i: None if i % 4 == 0 else b"k%d" % i,
        headers=[("h", b"1"), ("\u00fc", b"")],
    )
    tps = [TopicPartition(topic, p) for p in range(3)]
    with KafkaConsumer(base_config(bootstrap)) as reference:
        reference.assign(tps)
        expected = records_by_partition(poll_until(reference, 90))
    with KafkaConsumer(base_config(bootstrap)) as consumer:
        consumer.assign(tps)
        got = poll_batches_until(consumer, 90, include_headers=True)
        assert got == expected
        assert {tp: consumer.position(tp) for tp in tps} == {
            tp: rows[-1]["offset"] + 1 for tp, rows in expected.items()
        }
        assert consumer.poll_batches(0.2) == {}  # nothing more


@pytest.mark.mock
def test_poll_and_poll_batches_continue_each_other(mock_cluster: Any) -> None:
    """Mixed on one consumer, small max_records: every offset once, in order."""
    topic = unique("mixed")
    mock_cluster.create_topic(topic, partitions=1)
    produce(mock_cluster.bootstrap_servers, topic, 200)
    tp = TopicPartition(topic, 0)
    with KafkaConsumer(base_config(mock_cluster.bootstrap_servers)) as consumer:
        consumer.assign([tp])
        offsets: list[int] = []
        deadline = time.monotonic() + 60
        turn = 0
        while len(offsets) < 200:
            assert time.monotonic() < deadline
            if turn % 2:
                offsets += [r.offset for r in consumer.poll(0.5)][:]
            else:
                for batch in consumer.poll_batches(0.5, max_records=7).values():
                    assert batch.num_rows <= 7
                    offsets += batch.column("offset").to_pylist()
            turn += 1
        assert offsets == list(range(200))


@pytest.mark.mock
def test_commits_after_poll_batches(mock_cluster: Any) -> None:
    """commit_sync() commits what poll_batches returned; a new member resumes there."""
    topic = unique("colcommit")
    mock_cluster.create_topic(topic, partitions=2)
    bootstrap = mock_cluster.bootstrap_servers
    produce(bootstrap, topic, 60)
    group = unique("g")
    config = base_config(bootstrap, **{"group.id": group, "enable.auto.commit": False})
    with KafkaConsumer(config) as consumer:
        consumer.subscribe([topic])
        rows = poll_batches_until(consumer, 60, max_records=13)
        consumer.commit_sync()
        committed = consumer.committed(set(rows))
    assert {tp: c.offset for tp, c in committed.items() if c is not None} == {
        tp: r[-1]["offset"] + 1 for tp, r in rows.items()
    }
    produce(bootstrap, topic, 10, start=60)
    with KafkaConsumer(config) as again:
        again.subscribe([topic])
        more = poll_batches_until(again, 10)
    for tp, r in more.items():
        assert r[0]["offset"] == committed[tp].offset  # type: ignore[union-attr]
    assert sorted(x["value"] for r in more.values() for x in r) == sorted(
        f"value-{i}".encode() for i in range(60, 70)
    )


@pytest.mark.mock
def test_a_failure_making_the_batches_gives_the_records_back(
    mock_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = unique("colfail")
    mock_cluster.create_topic(topic, partitions=1)
    produce(mock_cluster.bootstrap_servers, topic, 30)
    tp = TopicPartition(topic, 0)
    from kafka_actors.core import handout

    real = handout.record_batch
    failures = [1]

    def failing(*args: Any, **kwargs: Any) -> Any:
        if failures:
            failures.pop()
            raise MemoryError("no room for the batch")
        return real(*args, **kwargs)

    with KafkaConsumer(base_config(mock_cluster.bootstrap_servers)) as consumer:
        consumer.assign([tp])
        monkeypatch.setattr(handout, "record_batch", failing)
        deadline = time.monotonic() + 30
        with pytest.raises(MemoryError):
            while time.monotonic() < deadline:
                consumer.poll_batches(0.5)
        assert not failures
        assert consumer.position(tp) == 0  # given back
        rows = poll_batches_until(consumer, 30)
    assert [r["offset"] for r in rows[tp]] == list(range(30))


@pytest.mark.mock
def test_deserializers_and_missing_pyarrow_are_typed_errors_that_consume_nothing(
    mock_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = unique("colerr")
    mock_cluster.create_topic(topic, partitions=1)
    produce(mock_cluster.bootstrap_servers, topic, 5)
    tp = TopicPartition(topic, 0)
    config = base_config(mock_cluster.bootstrap_servers)
    with KafkaConsumer(config, value_deserializer=lambda v: v) as consumer:
        consumer.assign([tp])
        with pytest.raises(IllegalStateError, match="deserializers"):
            consumer.poll_batches(1.0)
    with KafkaConsumer(config) as consumer:
        consumer.assign([tp])
        with pytest.raises(ValueError, match="max_records"):
            consumer.poll_batches(0.1, max_records=0)

        def missing() -> Any:
            raise MissingDependencyError("the columnar poll needs pyarrow")

        monkeypatch.setattr("kafka_actors.core.handout.require_pyarrow", missing)
        with pytest.raises(MissingDependencyError, match="pyarrow"):
            consumer.poll_batches(1.0)
        monkeypatch.undo()
        assert [r.offset for r in poll_until(consumer, 5)] == list(range(5))


# -- a real broker -------------------------------------------------------------------------------


@pytest.mark.broker
@pytest.mark.timeout(300)
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_rows_are_poll_records_for_every_codec(kafka_broker: Any, codec: str) -> None:
    from tests.records.test_broker import _create_topic, _produce

    bootstrap = kafka_broker.bootstrap_servers
    topic = _create_topic(bootstrap)
    produced = _produce(bootstrap, topic, codec, n=400)
    tp = TopicPartition(topic, 0)
    with KafkaConsumer(base_config(bootstrap)) as reference:
        reference.assign([tp])
        expected = records_by_partition(poll_until(reference, len(produced)))
    with KafkaConsumer(base_config(bootstrap, **{"max.partition.fetch.bytes": 4096})) as consumer:
        consumer.assign([tp])
        got = poll_batches_until(consumer, len(produced), include_headers=True, max_records=77)
    assert got == expected
    assert [r["offset"] for r in got[tp]] == [p.offset for p in produced]


@pytest.mark.broker
@pytest.mark.timeout(300)
@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_rows_are_poll_records_with_control_batches_and_aborted_transactions(
    kafka_broker: Any, isolation: str
) -> None:
    from tests.records.test_broker import _create_topic, produce_transactions

    bootstrap = kafka_broker.bootstrap_servers
    topic = _create_topic(bootstrap)
    values = produce_transactions(bootstrap, topic)
    expected_values = (
        [v for v in values if b"aborted" not in v] if isolation == "read_committed" else values
    )
    tp = TopicPartition(topic, 0)
    config = base_config(bootstrap, **{"isolation.level": isolation})
    with KafkaConsumer(config) as reference:
        reference.assign([tp])
        expected = records_by_partition(poll_until(reference, len(expected_values)))
        end = reference.position(tp)
    with KafkaConsumer(config) as consumer:
        consumer.assign([tp])
        got = poll_batches_until(consumer, len(expected_values), include_headers=True)
        deadline = time.monotonic() + 30
        while consumer.position(tp) < end:  # past the last commit marker, as poll() went
            assert time.monotonic() < deadline
            assert consumer.poll_batches(0.2) == {}
        assert consumer.position(tp) == end
    assert got == expected
    assert [r["value"] for r in got[tp]] == expected_values


@pytest.mark.mock
def test_auto_commit_covers_what_poll_batches_returned(mock_cluster: Any) -> None:
    topic = unique("colauto")
    mock_cluster.create_topic(topic, partitions=2)
    bootstrap = mock_cluster.bootstrap_servers
    produce(bootstrap, topic, 40)
    config = base_config(
        bootstrap,
        **{"group.id": unique("g"), "enable.auto.commit": True, "auto.commit.interval.ms": 100},
    )
    with KafkaConsumer(config) as consumer:
        consumer.subscribe([topic])
        rows = poll_batches_until(consumer, 40, max_records=7)
        ends = {tp: r[-1]["offset"] + 1 for tp, r in rows.items()}
        deadline = time.monotonic() + 30
        while True:
            assert consumer.poll_batches(0.2) == {}  # auto-commit runs from the polls
            committed = consumer.committed(set(ends))
            if {tp: c.offset for tp, c in committed.items() if c is not None} == ends:
                break
            assert time.monotonic() < deadline, committed
