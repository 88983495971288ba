"""The KIP-714 telemetry state machine (kafka_actors.protocol.telemetry), with an injected clock:
subscription, jittered first push, push interval, error answers, backoff, terminating push,
metric selection, temporality and compression."""

from __future__ import annotations

import datetime
import gzip
import uuid
from typing import Any

import cramjam
import pytest
from kio.schema.get_telemetry_subscriptions.v0.response import (
    GetTelemetrySubscriptionsResponse,
)
from kio.schema.push_telemetry.v0.response import PushTelemetryResponse
from kio.static.primitive import i8, i32, i32Timedelta
from opentelemetry.proto.metrics.v1 import metrics_pb2

from kafka_actors.errors import (
    KafkaConnectionError,
    RequestTimedOutError,
    UnsupportedVersionError,
)
from kafka_actors.metrics import ConsumerMetrics
from kafka_actors.protocol.records.decode import _unxerial
from kafka_actors.protocol.telemetry import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    DEFAULT_PUSH_INTERVAL_MS,
    PayloadBuilder,
    TelemetryConfig,
    TelemetryManager,
    TelemetryPoint,
    TelemetryState,
    choose_compression,
    compress,
    metric_points,
    telemetry_name,
)

INSTANCE = uuid.UUID("3b8f2a51-0e2c-4a53-9d0c-7a1f3f1a2b3c")
WALL_MS = 1_700_000_000_000


def subscription(
    *,
    metrics: tuple[str, ...] = ("org.apache.kafka.consumer.",),
    interval_ms: int = 10_000,
    compression: tuple[int, ...] = (),
    delta: bool = True,
    error: int = 0,
    subscription_id: int = 7,
) -> GetTelemetrySubscriptionsResponse:
    return GetTelemetrySubscriptionsResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=error,  # type: ignore[arg-type]
        client_instance_id=INSTANCE,
        subscription_id=i32(subscription_id),
        accepted_compression_types=tuple(i8(c) for c in compression),
        push_interval=i32Timedelta.parse(datetime.timedelta(milliseconds=interval_ms)),
        telemetry_max_bytes=i32(1_000_000),
        delta_temporality=delta,
        requested_metrics=metrics,
    )


def pushed(error: int = 0) -> PushTelemetryResponse:
    return PushTelemetryResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=error,  # type: ignore[arg-type]
    )


class Points:
    """A metrics source whose values the test sets."""

    def __init__(self) -> None:
        self.records = 0.0
        self.ratio = 0.25

    def __call__(self) -> list[TelemetryPoint]:
        return [
            TelemetryPoint(
                "org.apache.kafka.consumer.fetch.manager.records.consumed.total",
                self.records,
                "counter",
            ),
            TelemetryPoint("org.apache.kafka.consumer.poll.idle.ratio.avg", self.ratio, "gauge"),
            TelemetryPoint("org.apache.kafka.consumer.request.latency.avg", float("nan"), "gauge"),
            TelemetryPoint("org.apache.kafka.other.thing", 1.0, "gauge"),
        ]


def manager(
    *, enabled: bool = True, supported: bool = True, random: float = 0.5, points: Any = None
) -> TelemetryManager:
    return TelemetryManager(
        TelemetryConfig(enabled=enabled, retry_backoff_ms=100, retry_backoff_max_ms=1_000),
        supported=supported,
        collect=points or Points(),
        wall_ms=lambda: WALL_MS,
        random=lambda: random,
        now_ms=0,
    )


def send(m: TelemetryManager, now: int) -> Any:
    result = m.poll(now)
    assert len(result.requests) == 1, result
    return result.requests[0]


def subscribed(m: TelemetryManager, now: int = 0, **kw: Any) -> None:
    req = send(m, now)
    assert int(req.request.__api_key__) == 71
    m.on_response(req.request_id, subscription(**kw), now)


def decode(data: bytes) -> dict[str, metrics_pb2.Metric]:
    parsed = metrics_pb2.MetricsData.FromString(data)
    return {
        m.name: m for rm in parsed.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }


def test_first_subscription_at_once_with_zero_id_then_jittered_first_push() -> None:
    m = manager(random=0.0)  # jitter factor 0.5
    req = send(m, 0)
    assert req.request.client_instance_id == uuid.UUID(int=0)
    assert m.state is TelemetryState.SUBSCRIPTION_IN_PROGRESS
    assert m.poll(0).requests == ()  # one request at a time
    m.on_response(req.request_id, subscription(interval_ms=10_000), 0)
    assert m.client_instance_id == INSTANCE
    assert m.state is TelemetryState.PUSH_NEEDED
    assert m.poll(0).time_until_next_poll_ms == 5_000
    assert m.poll(4_999).requests == ()
    push = send(m, 5_000).request
    assert int(push.__api_key__) == 72
    assert push.client_instance_id == INSTANCE
    assert push.subscription_id == 7
    assert push.terminating is False
    m.on_response(2, pushed(), 5_000)
    assert m.state is TelemetryState.PUSH_NEEDED
    # later pushes every push interval, no jitter
    assert m.poll(5_000).time_until_next_poll_ms == 10_000
    assert m.poll(14_999).requests == ()
    assert send(m, 15_000).request.terminating is False
    assert m.pushes == 1


@pytest.mark.parametrize(
    ("random", "first_push_ms"), [(0.0, 5_000), (0.5, 10_000), (0.999, 14_990)]
)
def test_first_push_jitter_between_half_and_one_and_a_half_intervals(
    random: float, first_push_ms: int
) -> None:
    m = manager(random=random)
    subscribed(m, interval_ms=10_000)
    assert m.poll(0).time_until_next_poll_ms == first_push_ms


def test_payload_selects_by_prefix_and_drops_what_measured_nothing() -> None:
    points = Points()
    points.records = 42
    m = manager(points=points)
    subscribed(m, metrics=("org.apache.kafka.consumer.",), delta=False)
    data = decode(send(m, 10_000).request.metrics)
    assert set(data) == {
        "org.apache.kafka.consumer.fetch.manager.records.consumed.total",
        "org.apache.kafka.consumer.poll.idle.ratio.avg",
    }  # the NaN average and the unrequested prefix are absent
    total = data["org.apache.kafka.consumer.fetch.manager.records.consumed.total"]
    assert total.sum.is_monotonic
    assert total.sum.aggregation_temporality == metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
    assert total.sum.data_points[0].as_double == 42.0
    assert total.sum.data_points[0].time_unix_nano == WALL_MS * 1_000_000
    assert (
        data["org.apache.kafka.consumer.poll.idle.ratio.avg"].gauge.data_points[0].as_double == 0.25
    )


def test_star_selects_everything_and_empty_list_nothing() -> None:
    m = manager()
    subscribed(m, metrics=("*",))
    assert "org.apache.kafka.other.thing" in decode(send(m, 10_000).request.metrics)
    m2 = manager()
    subscribed(m2, metrics=(), interval_ms=3_000)
    # no metrics requested: no push, the subscription is fetched again after the interval
    assert m2.state is TelemetryState.SUBSCRIPTION_NEEDED
    assert m2.poll(0).time_until_next_poll_ms == 3_000
    again = send(m2, 3_000).request
    assert int(again.__api_key__) == 71
    assert again.client_instance_id == INSTANCE  # the assigned id, not zero


def test_delta_temporality_sends_the_change_since_the_last_push() -> None:
    points = Points()
    m = manager(points=points)
    subscribed(m, delta=True)
    name = "org.apache.kafka.consumer.fetch.manager.records.consumed.total"
    points.records = 10
    req = send(m, 10_000)
    first = decode(req.request.metrics)[name].sum
    assert first.aggregation_temporality == metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
    assert first.data_points[0].as_double == 10.0
    m.on_response(req.request_id, pushed(), 10_000)
    points.records = 25
    second = decode(send(m, 20_000).request.metrics)[name].sum
    assert second.data_points[0].as_double == 15.0


def test_payload_builder_reset_starts_deltas_over() -> None:
    builder = PayloadBuilder(start_unix_nano=1)
    point = TelemetryPoint("a.total", 5.0, "counter")
    builder.build([point], delta=True, now_unix_nano=2)
    builder.reset()
    again = decode(builder.build([point], delta=True, now_unix_nano=3))
    assert again["a.total"].sum.data_points[0].as_double == 5.0


def test_unknown_subscription_id_refetches_after_backoff_not_at_once() -> None:
    m = manager()
    subscribed(m)
    req = send(m, 10_000)
    m.on_response(req.request_id, pushed(error=117), 10_000)
    assert m.state is TelemetryState.SUBSCRIPTION_NEEDED
    assert m.poll(10_000).requests == ()  # never right after a failure
    wait = m.poll(10_000).time_until_next_poll_ms
    assert wait is not None and 80 <= wait <= 120  # retry.backoff.ms with jitter 0.2
    again = send(m, 10_000 + wait).request
    assert int(again.__api_key__) == 71
    assert again.client_instance_id == INSTANCE


def test_terminal_errors_disable_telemetry() -> None:
    for code in (42, 87, 35, 9999):
        m = manager()
        subscribed(m)
        req = send(m, 10_000)
        m.on_response(req.request_id, pushed(error=code), 10_000)
        assert not m.enabled
        assert m.poll(10**9).requests == ()


def test_too_large_waits_the_push_interval() -> None:
    m = manager()
    subscribed(m, interval_ms=10_000)
    req = send(m, 10_000)
    m.on_response(req.request_id, pushed(error=118), 10_000)
    assert m.state is TelemetryState.SUBSCRIPTION_NEEDED
    assert m.poll(10_000).time_until_next_poll_ms == 10_000


def test_transport_failures_back_off_exponentially_and_success_resets() -> None:
    m = manager()
    waits = []
    now = 0
    for _ in range(4):
        req = send(m, now)
        m.on_failure(req.request_id, KafkaConnectionError("gone"), now)
        wait = m.poll(now).time_until_next_poll_ms
        assert wait is not None
        waits.append(wait)
        now += wait
    assert waits[0] < waits[1] < waits[2] and waits[3] <= 1_000 * 1.2
    subscribed(m, now)
    req = send(m, now + 10_000)
    m.on_failure(req.request_id, RequestTimedOutError("slow"), now + 10_000)
    wait = m.poll(now + 10_000).time_until_next_poll_ms
    assert wait is not None and wait <= 120  # back to retry.backoff.ms


def test_broker_without_the_apis_or_fatal_failure_disables() -> None:
    assert not manager(supported=False).enabled
    assert manager(supported=False).poll(0).requests == ()
    assert not manager(enabled=False).enabled
    m = manager()
    req = send(m, 0)
    m.on_failure(req.request_id, UnsupportedVersionError("no"), 0)
    assert not m.enabled and m.done


def test_terminating_push_on_close() -> None:
    m = manager()
    subscribed(m)
    m.initiate_close(1_000)
    assert m.state is TelemetryState.TERMINATING_PUSH_NEEDED
    assert not m.closing_done
    req = send(m, 1_000)  # at once, not at the push interval
    assert req.request.terminating is True
    assert m.poll(1_000).requests == ()
    m.on_response(req.request_id, pushed(), 1_000)
    assert m.state is TelemetryState.TERMINATED and m.closing_done and m.done
    assert m.poll(10**9).requests == ()


def test_close_while_a_push_is_in_flight_sends_the_terminating_push() -> None:
    m = manager()
    subscribed(m)
    inflight = send(m, 10_000)
    m.initiate_close(10_001)
    m.on_response(inflight.request_id, pushed(), 10_002)  # forgotten
    assert m.state is TelemetryState.TERMINATING_PUSH_NEEDED
    assert send(m, 10_002).request.terminating is True


def test_close_without_subscription_sends_nothing() -> None:
    m = manager()
    req = send(m, 0)
    m.initiate_close(1)
    assert m.state is TelemetryState.TERMINATED and m.closing_done
    m.on_response(req.request_id, subscription(), 2)
    assert m.poll(2).requests == ()


def test_terminating_push_failure_ends_telemetry() -> None:
    m = manager()
    subscribed(m)
    m.initiate_close(1)
    req = send(m, 1)
    m.on_failure(req.request_id, KafkaConnectionError("gone"), 2)
    assert m.state is TelemetryState.TERMINATED


def test_compression_follows_the_broker_preference_among_what_we_write() -> None:
    assert choose_compression([]) == COMPRESSION_NONE
    assert choose_compression([COMPRESSION_ZSTD, COMPRESSION_GZIP]) == COMPRESSION_ZSTD
    assert choose_compression([COMPRESSION_SNAPPY, COMPRESSION_GZIP]) == COMPRESSION_SNAPPY
    assert choose_compression([COMPRESSION_LZ4, COMPRESSION_GZIP]) == COMPRESSION_GZIP
    assert choose_compression([COMPRESSION_ZSTD, COMPRESSION_GZIP], [COMPRESSION_ZSTD]) == (
        COMPRESSION_GZIP
    )
    assert choose_compression([COMPRESSION_LZ4]) == COMPRESSION_NONE


@pytest.mark.parametrize("codec", [COMPRESSION_ZSTD, COMPRESSION_GZIP, COMPRESSION_SNAPPY])
def test_compressed_push_decodes(codec: int) -> None:
    points = Points()
    m = manager(points=points)
    subscribed(m, compression=(codec,))
    push = send(m, 10_000).request
    assert push.compression_type == codec
    if codec == COMPRESSION_ZSTD:
        raw = bytes(cramjam.zstd.decompress(push.metrics))
    elif codec == COMPRESSION_GZIP:
        raw = gzip.decompress(push.metrics)
    else:  # snappy-java's framing, read by the record decoder's own xerial reader
        raw = _unxerial(push.metrics, 1 << 20)
    assert "org.apache.kafka.consumer.poll.idle.ratio.avg" in decode(raw)


def test_unsupported_compression_drops_the_codec() -> None:
    m = manager()
    subscribed(m, compression=(COMPRESSION_ZSTD, COMPRESSION_GZIP))
    req = send(m, 10_000)
    assert req.request.compression_type == COMPRESSION_ZSTD
    m.on_response(req.request_id, pushed(error=76), 10_000)
    wait = m.poll(10_000).time_until_next_poll_ms
    assert wait is not None
    sub = send(m, 10_000 + wait)
    m.on_response(
        sub.request_id, subscription(compression=(COMPRESSION_ZSTD, COMPRESSION_GZIP)), 10_200
    )
    assert send(m, 10**6).request.compression_type == COMPRESSION_GZIP


def test_invalid_push_interval_becomes_the_default() -> None:
    m = manager()
    subscribed(m, interval_ms=0)
    assert m.subscription is not None
    assert m.subscription.push_interval_ms == DEFAULT_PUSH_INTERVAL_MS


def test_java_telemetry_names_of_our_metrics() -> None:
    assert (
        telemetry_name("consumer-fetch-manager-metrics", "records-consumed-total")
        == "org.apache.kafka.consumer.fetch.manager.records.consumed.total"
    )
    assert (
        telemetry_name("consumer-metrics", "connection-creation-total")
        == "org.apache.kafka.consumer.connection.creation.total"
    )
    assert (
        telemetry_name("consumer-coordinator-metrics", "commit-latency-avg")
        == "org.apache.kafka.consumer.coordinator.commit.latency.avg"
    )


def test_metric_points_from_the_consumer_metrics() -> None:
    metrics = ConsumerMetrics("c1")
    metrics.connection_opened()
    metrics.connection_opened()
    points = {p.name: p for p in metric_points(metrics.registry.snapshot().values())}
    total = points["org.apache.kafka.consumer.fetch.manager.records.consumed.total"]
    assert total.kind == "counter"
    assert ("client_id", "c1") not in total.attributes
    assert total.value == 0.0
    opened = points["org.apache.kafka.consumer.connection.creation.total"]
    assert (opened.kind, opened.value) == ("counter", 2.0)
    assert points["org.apache.kafka.consumer.poll.idle.ratio.avg"].kind == "gauge"


def test_a_new_incarnation_asks_under_the_known_instance_id() -> None:
    m = TelemetryManager(
        TelemetryConfig(),
        supported=True,
        collect=Points(),
        wall_ms=lambda: WALL_MS,
        random=lambda: 0.5,
        now_ms=0,
        client_instance_id=INSTANCE,
    )
    assert m.client_instance_id is None  # not before the broker answered
    req = send(m, 0)
    assert req.request.client_instance_id == INSTANCE


def test_snappy_framing_splits_large_payloads_into_blocks() -> None:
    data = bytes(range(256)) * 1000  # 256 000 bytes: 8 blocks of 32 KiB
    framed = compress(data, COMPRESSION_SNAPPY)
    assert framed.startswith(b"\x82SNAPPY\x00")
    assert _unxerial(framed, len(data)) == data
