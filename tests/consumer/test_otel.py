"""kafka_actors.otel against a real broker, read with the OTel SDK's in-memory reader and
exporter: the Java-named metrics as observable instruments, spans for polls and commits that
link to the ``traceparent`` of the records' headers."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Gauge, InMemoryMetricReader, Sum
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from kafka_actors import AsyncKafkaConsumer, KafkaConsumer
from kafka_actors.otel import (
    instrument_metrics,
    instrument_tracing,
    record_context,
)
from kafka_actors.protocol.messages import TopicPartition
from tests.consumer.helpers import base_config, poll_until, produce, unique

TRACE_A = "0af7651916cd43dd8448eb211c80319c"
TRACE_B = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "b7ad6b7169203331"


def _traceparent(trace_id: str) -> bytes:
    return f"00-{trace_id}-{PARENT}-01".encode()


@pytest.fixture
def traced_topic(kafka_broker: Any) -> str:
    name = unique("otel")
    kafka_broker.create_topic(name, partitions=2)
    bootstrap = kafka_broker.bootstrap_servers
    produce(bootstrap, name, 5, partition=0, headers=[("traceparent", _traceparent(TRACE_A))])
    produce(
        bootstrap, name, 5, partition=1, start=5, headers=[("traceparent", _traceparent(TRACE_B))]
    )
    produce(bootstrap, name, 3, partition=1, start=10)  # no header
    return name


def _points(reader: InMemoryMetricReader) -> dict[tuple[str, str], list[Any]]:
    data = reader.get_metrics_data()
    found: dict[tuple[str, str], list[Any]] = {}
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found[(scope.scope.name, metric.name)] = [metric.data, *metric.data.data_points]
    return found


def test_metrics_are_observable_instruments_with_java_names(
    kafka_broker: Any, traced_topic: str
) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        with KafkaConsumer(base_config(kafka_broker.bootstrap_servers)) as consumer:
            client = consumer.config.client_id
            instrument_metrics(consumer, provider)
            consumer.assign([TopicPartition(traced_topic, 0), TopicPartition(traced_topic, 1)])
            poll_until(consumer, 13)
            found = _points(reader)
    finally:
        provider.shutdown()
    data, *points = found[("consumer-fetch-manager-metrics", "records-consumed-total")]
    assert isinstance(data, Sum) and data.is_monotonic  # an observable counter
    by_attrs = {tuple(sorted(p.attributes.items())): p.value for p in points}
    assert by_attrs[(("client-id", client),)] == 13
    assert by_attrs[(("client-id", client), ("topic", traced_topic))] == 13
    data, *points = found[("consumer-fetch-manager-metrics", "records-lag")]
    assert isinstance(data, Gauge)
    lag = {p.attributes["partition"]: p.value for p in points}
    assert lag == {"0": 0, "1": 0}
    assert all(p.attributes["topic"] == traced_topic for p in points)
    data, *points = found[("consumer-metrics", "connection-count")]
    assert isinstance(data, Gauge) and points[0].value >= 1
    assert ("consumer-coordinator-metrics", "assigned-partitions") in found


def _tracer() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _check_poll_spans(spans: list[Any], operation: str, topic: str) -> None:
    polls = [s for s in spans if s.name == f"{operation} {topic}"]
    assert polls, [s.name for s in spans]
    assert all(s.kind is trace.SpanKind.CONSUMER for s in polls)
    assert sum(s.attributes["messaging.batch.message_count"] for s in polls) == 13
    links = [link for s in polls for link in s.links]
    by_trace = {format(link.context.trace_id, "032x"): link for link in links}
    # One link per partition batch carrying a traceparent (one traceparent per partition).
    assert set(by_trace) == {TRACE_A, TRACE_B}
    for s in polls:  # never two links of one span for the same partition and traceparent
        keys = [
            (link.context.trace_id, link.attributes["messaging.destination.partition.id"])
            for link in s.links
        ]
        assert len(keys) == len(set(keys))
    assert by_trace[TRACE_A].attributes["messaging.destination.partition.id"] == "0"
    assert by_trace[TRACE_B].attributes["messaging.destination.partition.id"] == "1"
    assert format(by_trace[TRACE_A].context.span_id, "016x") == PARENT
    commits = [s for s in spans if s.name == "commit"]
    assert commits and commits[0].kind is trace.SpanKind.CLIENT
    assert commits[0].status.status_code is trace.StatusCode.UNSET


def test_poll_and_commit_spans_link_the_records_traceparents(
    kafka_broker: Any, traced_topic: str
) -> None:
    provider, exporter = _tracer()
    config = base_config(kafka_broker.bootstrap_servers, **{"group.id": unique("otel-g")})
    with KafkaConsumer(config) as consumer:
        instrument_tracing(consumer, provider)
        consumer.assign([TopicPartition(traced_topic, 0), TopicPartition(traced_topic, 1)])
        records = poll_until(consumer, 13)
        assert not list(consumer.poll(0.3))  # caught up: an empty poll (no span)
        consumer.commit_sync()
        future = consumer.commit_async()
        future.result(30)
        deadline = time.monotonic() + 10
        while len([s for s in exporter.get_finished_spans() if s.name == "commit"]) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    spans = list(exporter.get_finished_spans())
    _check_poll_spans(spans, "poll", traced_topic)
    # Empty polls make no span.
    assert all(
        s.attributes["messaging.batch.message_count"] > 0
        for s in spans
        if s.name.startswith("poll")
    )
    # A record's own context continues the producer's trace.
    first = next(r for r in records if r.partition == 0)
    parent = trace.get_current_span(record_context(first)).get_span_context()
    assert format(parent.trace_id, "032x") == TRACE_A and parent.is_remote
    plain = next(r for r in records if r.offset >= 5 and r.partition == 1)
    assert not trace.get_current_span(record_context(plain)).get_span_context().is_valid


def test_asyncio_getmany_and_commit_spans(kafka_broker: Any, traced_topic: str) -> None:
    provider, exporter = _tracer()
    config = base_config(kafka_broker.bootstrap_servers, **{"group.id": unique("otel-ag")})

    async def main() -> None:
        async with AsyncKafkaConsumer(config=config) as consumer:
            instrument_tracing(consumer, provider)
            consumer.assign([TopicPartition(traced_topic, 0), TopicPartition(traced_topic, 1)])
            got = 0
            deadline = time.monotonic() + 60
            while got < 13:
                assert time.monotonic() < deadline
                batch = await consumer.getmany(timeout_ms=500)
                got += sum(len(v) for v in batch.values())
            await consumer.commit()

    asyncio.run(main())
    _check_poll_spans(list(exporter.get_finished_spans()), "getmany", traced_topic)
