"""A client-telemetry receiver for a real broker (KIP-714), as Kafka's own tests use one.

Owns: the Java source of a small broker plugin (:data:`RECEIVER_CLASS`, a ``MetricsReporter``
that is a ``ClientTelemetryExporterProvider``, the 4.x API), compiled once per Kafka version
with the testkit's jars (:func:`compile_receiver`), the broker settings that load it
(:func:`receiver_broker_args`), the client-metrics subscription made with Kafka's own
``kafka-client-metrics`` tool (:func:`subscribe_client_metrics`) and the reading of what it
received (:func:`read_pushes`: one :class:`ReceivedPush` per PushTelemetry the broker
accepted, its OTLP payload decoded with ``opentelemetry-proto``).

The plugin appends one line per push to the file named by the system property
``kafka_actors.telemetry.out``: ``<client instance id> <terminating> <content type>
<payload as base64>`` (the payload as the broker hands it to exporters: decompressed).

May touch: the file it is given, the cluster (through Kafka's tools), ``javac``.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka_actors.testing import jars as _jars
from kafka_actors.testing.java_share import compile_java_class

__all__ = [
    "RECEIVER_CLASS",
    "ReceivedPush",
    "compile_receiver",
    "kafka_uuid",
    "read_pushes",
    "receiver_broker_args",
    "subscribe_client_metrics",
]

RECEIVER_CLASS = "KafkaActorsTelemetryReceiver"

_SOURCE = """
import java.io.FileWriter;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.telemetry.ClientTelemetryContext;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;

public class KafkaActorsTelemetryReceiver
        implements MetricsReporter, ClientTelemetryExporterProvider {
    private final String out = System.getProperty("kafka_actors.telemetry.out");

    @Override public void configure(Map<String, ?> configs) {}
    @Override public void init(List<KafkaMetric> metrics) {}
    @Override public void metricChange(KafkaMetric metric) {}
    @Override public void metricRemoval(KafkaMetric metric) {}
    @Override public void close() {}

    @Override
    public ClientTelemetryExporter clientTelemetryExporter() {
        return (ClientTelemetryContext context, ClientTelemetryPayload payload) -> {
            ByteBuffer data = payload.data().duplicate();
            byte[] bytes = new byte[data.remaining()];
            data.get(bytes);
            String line = payload.clientInstanceId() + " " + payload.isTerminating() + " "
                + payload.contentType() + " " + Base64.getEncoder().encodeToString(bytes) + "\\n";
            synchronized (KafkaActorsTelemetryReceiver.class) {
                try (FileWriter writer = new FileWriter(out, true)) {
                    writer.write(line);
                } catch (IOException e) {
                    throw new RuntimeException(e);
                }
            }
        };
    }
}
"""


def compile_receiver(jars: _jars.KafkaJars) -> Path:
    """The directory holding the compiled receiver for ``jars`` (Kafka 4.x)."""
    return compile_java_class(
        jars, RECEIVER_CLASS, _SOURCE, "telemetry-receiver", hint="needs Kafka 4.x"
    )


def receiver_broker_args(out: Path, version: str | None = None) -> dict[str, Any]:
    """Keyword arguments for :class:`~kafka_actors.testing.broker.KafkaBroker` that load the
    receiver, writing to ``out``: its classpath, ``metric.reporters`` and the system
    property naming the file."""
    directory = compile_receiver(_jars.resolve(version))
    return {
        "classpath": (str(directory),),
        "jvm_options": (f"-Dkafka_actors.telemetry.out={out}",),
        "broker_config": {"metric.reporters": RECEIVER_CLASS},
    }


def subscribe_client_metrics(
    cluster: Any, name: str, metrics: Sequence[str], interval_ms: int
) -> None:
    """A client-metrics subscription ``name`` asking every client for ``metrics`` (prefixes,
    or ``*``) every ``interval_ms``, made with Kafka's ``kafka-client-metrics`` tool."""
    cluster.run_tool(
        "kafka-client-metrics",
        [
            "--bootstrap-server",
            cluster.bootstrap_servers,
            "--alter",
            "--name",
            name,
            "--metrics",
            ",".join(metrics),
            "--interval",
            str(interval_ms),
        ],
        check=True,
    )


@dataclass(frozen=True, slots=True)
class ReceivedPush:
    """One PushTelemetry the broker accepted, as its exporter saw it."""

    client_instance_id: uuid.UUID
    terminating: bool
    content_type: str
    #: metric name -> [(attributes, value)] of its data points.
    points: dict[str, list[tuple[dict[str, str], float]]]
    #: metric name -> "sum" | "gauge" (with "/delta" or "/cumulative" for sums).
    kinds: dict[str, str]


def _decode(data: bytes) -> tuple[dict[str, list[tuple[dict[str, str], float]]], dict[str, str]]:
    from opentelemetry.proto.metrics.v1 import metrics_pb2

    parsed = metrics_pb2.MetricsData.FromString(data)
    points: dict[str, list[tuple[dict[str, str], float]]] = {}
    kinds: dict[str, str] = {}
    for resource in parsed.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                which = metric.WhichOneof("data")
                if which == "sum":
                    temporality = (
                        "delta"
                        if metric.sum.aggregation_temporality
                        == metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
                        else "cumulative"
                    )
                    kinds[metric.name] = f"sum/{temporality}"
                    data_points = metric.sum.data_points
                else:
                    kinds[metric.name] = str(which)
                    data_points = metric.gauge.data_points
                for dp in data_points:
                    attrs = {kv.key: kv.value.string_value for kv in dp.attributes}
                    value = dp.as_double if dp.HasField("as_double") else float(dp.as_int)
                    points.setdefault(metric.name, []).append((attrs, value))
    return points, kinds


def kafka_uuid(text: str) -> uuid.UUID:
    """A ``uuid.UUID`` from Kafka's ``Uuid.toString()`` (URL-safe base64, no padding)."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def read_pushes(out: Path) -> list[ReceivedPush]:
    """Every push the receiver wrote to ``out`` so far, in order."""
    if not out.exists():
        return []
    pushes = []
    for line in out.read_text().splitlines():
        instance, terminating, content_type, payload = line.split(" ")
        points, kinds = _decode(base64.b64decode(payload))
        pushes.append(
            ReceivedPush(kafka_uuid(instance), terminating == "true", content_type, points, kinds)
        )
    return pushes
