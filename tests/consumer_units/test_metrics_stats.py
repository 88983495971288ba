"""Java's sampled stats (kafka_actors.metrics) with a manual clock, and the consumer's sensors."""

from __future__ import annotations

import math

import pytest

from kafka_actors.clock import ManualClock
from kafka_actors.config import ConsumerConfig
from kafka_actors.errors import ConfigError
from kafka_actors.metrics import (
    CATALOGUE,
    CONSUMER,
    COORDINATOR,
    FETCH_MANAGER,
    HOUR_MS,
    NANOSECOND_MS,
    Avg,
    ConsumerMetrics,
    Max,
    MetricConfig,
    MetricName,
    Min,
    Rate,
    WindowedCount,
)

CONFIG = MetricConfig(samples=2, time_window_ms=1_000)


def test_avg_max_min_over_the_live_windows_only() -> None:
    avg, mx, mn = Avg(), Max(), Min()
    for stat in (avg, mx, mn):
        assert math.isnan(stat.measure(CONFIG, 0))  # no event: NaN, as Java
        stat.record(CONFIG, 10, 0)
        stat.record(CONFIG, 30, 500)
        stat.record(CONFIG, 20, 1_200)  # second window
    assert avg.measure(CONFIG, 1_500) == 20.0
    assert mx.measure(CONFIG, 1_500) == 30.0
    assert mn.measure(CONFIG, 1_500) == 10.0
    # The first window (started at 0) expires at 2 x 1000 ms: only the 20 remains.
    assert avg.measure(CONFIG, 2_000) == 20.0
    assert mx.measure(CONFIG, 2_000) == 20.0
    assert mn.measure(CONFIG, 2_000) == 20.0
    # A third window reuses the oldest slot.
    for stat in (avg, mx, mn):
        stat.record(CONFIG, 5, 2_300)
    assert avg.measure(CONFIG, 2_300) == 12.5
    assert mx.measure(CONFIG, 2_300) == 20.0 and mn.measure(CONFIG, 2_300) == 5.0
    # Nothing for 2 windows: all expired.
    assert math.isnan(avg.measure(CONFIG, 10_000))
    assert math.isnan(mx.measure(CONFIG, 10_000))


def test_rate_counts_at_least_samples_minus_one_whole_windows() -> None:
    rate = Rate()  # per second, windowed sum
    rate.record(CONFIG, 100, 0)
    # 200 ms after the first event: the window is padded to 1 whole window + 200 ms.
    assert rate.measure(CONFIG, 200) == pytest.approx(100 / 1.2)
    rate.record(CONFIG, 100, 1_500)
    # windows started at 0 and 1500: 200 over 1.8 s
    assert rate.measure(CONFIG, 1_800) == pytest.approx(200 / 1.8)
    # the first window expires at 2000: 100 over 1 whole window + 0.5 s
    assert rate.measure(CONFIG, 2_000) == pytest.approx(100 / 1.5)
    assert rate.measure(CONFIG, 10_000) == 0.0


def test_rate_units_and_counts() -> None:
    per_hour = Rate(HOUR_MS, WindowedCount())
    per_hour.record(CONFIG, 12345, 0)  # a count ignores the value
    per_hour.record(CONFIG, 1, 0)
    assert per_hour.measure(CONFIG, 1_000) == pytest.approx(2 / (1_000 / HOUR_MS))
    ratio = Rate(NANOSECOND_MS)
    ratio.record(CONFIG, 500_000_000, 0)  # 0.5 s waited
    ratio.record(CONFIG, 500_000_000, 1_000)
    assert ratio.measure(CONFIG, 2_000 - 1) == pytest.approx(1e9 / 1_999e6)


def test_metric_config_is_validated_from_the_consumer_config() -> None:
    config = ConsumerConfig.from_dict(
        {"bootstrap.servers": "h:1", "metrics.sample.window.ms": 500, "metrics.num.samples": 3}
    )
    assert MetricConfig.from_consumer_config(config) == MetricConfig(3, 500)
    defaults = ConsumerConfig.from_dict({"bootstrap.servers": "h:1"})
    assert MetricConfig.from_consumer_config(defaults) == MetricConfig(2, 30_000)
    for key, bad in (("metrics.sample.window.ms", 0), ("metrics.num.samples", 0)):
        with pytest.raises(ConfigError) as info:
            ConsumerConfig.from_dict({"bootstrap.servers": "h:1", key: bad})
        assert info.value.key == key


def test_metric_name_equality_ignores_description_and_tag_order() -> None:
    a = MetricName("records-lag", FETCH_MANAGER, {"topic": "t", "client-id": "c"}, "x")
    b = MetricName("records-lag", FETCH_MANAGER, {"client-id": "c", "topic": "t"})
    assert a == b and hash(a) == hash(b)
    assert a.tags == {"client-id": "c", "topic": "t"}
    assert str(a) == "consumer-fetch-manager-metrics:records-lag{client-id=c,topic=t}"


def _metrics(clock: ManualClock, assigned: int = 3) -> ConsumerMetrics:
    return ConsumerMetrics("c1", CONFIG, clock, assigned_partitions=lambda: assigned)


def _value(m: ConsumerMetrics, group: str, name: str, **tags: str) -> float:
    view = m.view(dict)
    return view.find(group, name, **tags).value()


def test_consumer_sensors_fetch_and_collect() -> None:
    clock = ManualClock()
    m = _metrics(clock)
    m.fetch_response(20, 0, {"t": 1_000, "u": 500})
    clock.advance(0.5)
    m.fetch_response(40, 300, {"t": 2_000})
    assert _value(m, FETCH_MANAGER, "fetch-latency-avg", client_id="c1") == 30.0
    assert _value(m, FETCH_MANAGER, "fetch-latency-max", client_id="c1") == 40.0
    assert _value(m, FETCH_MANAGER, "fetch-total", client_id="c1") == 2.0
    assert _value(m, FETCH_MANAGER, "fetch-throttle-time-avg", client_id="c1") == 150.0
    assert _value(m, FETCH_MANAGER, "fetch-throttle-time-max", client_id="c1") == 300.0
    assert _value(m, FETCH_MANAGER, "fetch-size-avg", client_id="c1") == 1_750.0
    view = m.view(dict)
    t_size = [n for n in view if n.name == "fetch-size-max" and n.tags.get("topic") == "t"]
    assert [view[n].value() for n in t_size] == [2_000.0]
    m.consumed(
        5, 700, by_topic={"t": (5, 700)}, lag={("t", 0): 9, ("t", 1): 4}, lead={("t", 0): 5}
    )
    clock.advance(0.1)
    m.consumed(2, 100, by_topic={"t": (2, 100)}, lag={("t", 0): 7}, lead={("t", 0): 7})
    assert _value(m, FETCH_MANAGER, "records-lag", topic="t", partition="0") == 7.0
    assert _value(m, FETCH_MANAGER, "records-lag-max", topic="t", partition="0") == 9.0
    assert _value(m, FETCH_MANAGER, "records-lag-avg", topic="t", partition="0") == 8.0
    assert _value(m, FETCH_MANAGER, "records-lead-min", topic="t", partition="0") == 5.0
    agg = [n for n in m.view(dict) if n.name == "records-lag-max" and "topic" not in n.tags]
    assert len(agg) == 1 and m.view(dict)[agg[0]].value() == 9.0
    assert _value(m, FETCH_MANAGER, "records-consumed-total", client_id="c1", topic="t") == 7.0
    # Partitions no longer assigned lose their per-partition metrics.
    m.update_assignment(1, lambda: [_TP("t", 1)])
    names = {(n.name, n.tags.get("partition")) for n in m.view(dict) if "partition" in n.tags}
    assert names == {(n, "1") for n in ("records-lag", "records-lag-avg", "records-lag-max")} | {
        (n, "1") for n in ("records-lead", "records-lead-avg", "records-lead-min")
    }


class _TP:
    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition


def test_consumer_sensors_poll_coordinator_network() -> None:
    clock = ManualClock()
    m = _metrics(clock, assigned=4)
    assert _value(m, CONSUMER, "last-poll-seconds-ago") == -1.0
    with m.polling():
        clock.advance(0.1)
    clock.advance(0.9)  # 900 ms outside poll
    with m.polling():
        clock.advance(0.1)  # 100 ms inside
    assert _value(m, CONSUMER, "time-between-poll-avg") == pytest.approx(1_000.0)
    assert _value(m, CONSUMER, "poll-idle-ratio-avg") == pytest.approx(0.1 / 1.1)
    clock.advance(2.5)
    assert _value(m, CONSUMER, "last-poll-seconds-ago") == 2.0
    m.heartbeat_sent()
    clock.advance(0.05)
    m.heartbeat_response(50)
    assert _value(m, COORDINATOR, "heartbeat-response-time-max") == 50.0
    assert _value(m, COORDINATOR, "heartbeat-total") == 1.0
    assert _value(m, COORDINATOR, "last-heartbeat-seconds-ago") == 0.0
    m.rebalance_completed(1_200)
    m.rebalance_completed(800)
    assert _value(m, COORDINATOR, "rebalance-latency-avg") == 1_000.0
    assert _value(m, COORDINATOR, "rebalance-latency-max") == 1_200.0
    assert _value(m, COORDINATOR, "rebalance-total") == 2.0
    assert _value(m, COORDINATOR, "rebalance-rate-per-hour") > 0
    m.committed(12)
    assert _value(m, COORDINATOR, "commit-latency-max") == 12.0
    assert _value(m, COORDINATOR, "assigned-partitions") == 4.0
    m.connection_opened()
    m.connection_opened()
    m.connection_closed()
    assert _value(m, CONSUMER, "connection-count") == 1.0
    assert _value(m, CONSUMER, "connection-creation-total") == 2.0
    m.requests_sent(3)
    m.response_received(7)
    assert _value(m, CONSUMER, "request-total") == 3.0
    assert _value(m, CONSUMER, "request-latency-avg") == 7.0
    m.io_waited(400_000_000)
    assert 0 < _value(m, CONSUMER, "io-wait-ratio") < 1
    assert _value(m, CONSUMER, "io-wait-time-ns-avg") == 400_000_000.0


def test_every_catalogue_metric_is_registered_once_exercised() -> None:
    clock = ManualClock()
    m = _metrics(clock)
    m.fetch_response(1, 0, {"t": 1})
    m.consumed(1, 1, by_topic={"t": (1, 1)}, lag={("t", 0): 1}, lead={("t", 0): 1})
    registered = {(n.group, n.name, tuple(sorted(n.tags))) for n in m.view(dict)}
    catalogue = {(s.group, s.name, tuple(sorted(s.tags))) for s in CATALOGUE}
    assert registered == catalogue


def test_string_keys_read_the_flat_values_of_before() -> None:
    m = _metrics(ManualClock())
    view = m.view(lambda: {"records-lag": {"tp": 3}, "fetch-total": 1.0})
    assert view["records-lag"] == {"tp": 3}
    assert view.get("fetch-total", 0) == 1.0 and view.get("nothing", 5) == 5
    assert "fetch-total" in view
    assert all(isinstance(k, MetricName) for k in view)
