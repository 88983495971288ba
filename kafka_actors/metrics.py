"""Java's consumer metrics: names, tags and sampled statistics.

Owns: :class:`MetricName` (group, name, tags, as Java's ``org.apache.kafka.common.MetricName``),
the statistics of Java's ``org.apache.kafka.common.metrics.stats`` (a sampled stat keeps
``metrics.num.samples`` windows of ``metrics.sample.window.ms``; Rate, Avg, Max and Min combine
the windows that are not older than ``samples x window``), :class:`Sensor` (stats recorded
together), :class:`MetricsRegistry` (Java's ``Metrics``: every metric, one lock), the catalogue
:data:`CATALOGUE` of every metric a consumer can register (group, name, tag keys, description,
unit, kind; ``docs/metrics.md`` shows the same table, a test keeps them equal) and
:class:`ConsumerMetrics`, the recording side the actors and front ends call: once per Fetch
response, per collect, per poll, per request, per select, never per record.

May touch: nothing but its own state; time comes from an injected clock.

Semantics (as Java's ``SampledStat`` / ``Rate``): a record goes to the current window, which
is replaced by a new one when it is ``window`` old; windows older than ``samples x window``
are reset before a measure. Avg / Max / Min over no event is NaN. A Rate divides the sum of its
windows by the time they cover, counted as at least ``samples - 1`` whole windows (a rate
measured 1 s after the first event is not 30 times too high).
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar, overload

from kafka_actors.clock import Clock, SystemClock

__all__ = [
    "CATALOGUE",
    "CONSUMER",
    "COORDINATOR",
    "FETCH_MANAGER",
    "Avg",
    "ConsumerMetrics",
    "CumulativeCount",
    "CumulativeSum",
    "Max",
    "Measured",
    "Metric",
    "MetricConfig",
    "MetricName",
    "MetricSpec",
    "MetricsRegistry",
    "MetricsView",
    "Min",
    "Rate",
    "Sensor",
    "Tags",
    "Value",
    "WindowedCount",
    "WindowedSum",
]

_D = TypeVar("_D")

FETCH_MANAGER: Final = "consumer-fetch-manager-metrics"
COORDINATOR: Final = "consumer-coordinator-metrics"
CONSUMER: Final = "consumer-metrics"

SECOND_MS: Final = 1_000.0
HOUR_MS: Final = 3_600_000.0
NANOSECOND_MS: Final = 1e-6


# -- names ---------------------------------------------------------------------------------------


class Tags(Mapping[str, str]):
    """An immutable, hashable mapping of tag key to value (iterates in key order)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        self._items: tuple[tuple[str, str], ...] = tuple(sorted((items or {}).items()))

    def __getitem__(self, key: str) -> str:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Tags):
            return self._items == other._items
        if isinstance(other, Mapping):
            return dict(self._items) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return repr(dict(self._items))


@dataclass(frozen=True, slots=True)
class MetricName:
    """Java's MetricName: equal (and hashed) by name, group and tags; the description is
    carried along. ``tags`` may be given as any mapping; it is kept as :class:`Tags`."""

    name: str
    group: str
    tags: Mapping[str, str] = field(default_factory=Tags)
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.tags, Tags):
            object.__setattr__(self, "tags", Tags(self.tags))

    def __str__(self) -> str:
        tags = ",".join(f"{k}={v}" for k, v in self.tags.items())
        return f"{self.group}:{self.name}{{{tags}}}"


# -- configuration and stats ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetricConfig:
    """``metrics.num.samples`` windows of ``metrics.sample.window.ms`` each."""

    samples: int = 2
    time_window_ms: int = 30_000

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError("metrics.num.samples must be at least 1")
        if self.time_window_ms < 1:
            raise ValueError("metrics.sample.window.ms must be at least 1")

    @classmethod
    def from_consumer_config(cls, config: Any) -> MetricConfig:
        return cls(int(config.metrics_num_samples), int(config.metrics_sample_window_ms))


class _Sample:
    __slots__ = ("count", "start_ms", "value")

    def __init__(self, initial: float, now_ms: float) -> None:
        self.value = initial
        self.count = 0
        self.start_ms = now_ms

    def reset(self, initial: float, now_ms: float) -> None:
        self.value = initial
        self.count = 0
        self.start_ms = now_ms


class SampledStat:
    """Java's SampledStat: up to ``samples`` windows, the current one replaced in turn."""

    initial: float = 0.0

    def __init__(self) -> None:
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, config: MetricConfig, value: float, now_ms: float) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= config.time_window_ms:
            sample = self._advance(config, now_ms)
        self.update(sample, value)
        sample.count += 1

    def _current_sample(self, now_ms: float) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(self.initial, now_ms))
        return self._samples[self._current]

    def _advance(self, config: MetricConfig, now_ms: float) -> _Sample:
        self._current = (self._current + 1) % config.samples
        if self._current >= len(self._samples):
            sample = _Sample(self.initial, now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(self.initial, now_ms)
        return sample

    def purge(self, config: MetricConfig, now_ms: float) -> None:
        expire = config.samples * config.time_window_ms
        for sample in self._samples:
            if now_ms - sample.start_ms >= expire:
                sample.reset(self.initial, now_ms)

    def oldest_start_ms(self, now_ms: float) -> float:
        if not self._samples:
            self._samples.append(_Sample(self.initial, now_ms))
        return min(s.start_ms for s in self._samples)

    def measure(self, config: MetricConfig, now_ms: float) -> float:
        self.purge(config, now_ms)
        return self.combine(self._samples)

    def update(self, sample: _Sample, value: float) -> None:
        raise NotImplementedError

    def combine(self, samples: list[_Sample]) -> float:
        raise NotImplementedError


class Avg(SampledStat):
    def update(self, sample: _Sample, value: float) -> None:
        sample.value += value

    def combine(self, samples: list[_Sample]) -> float:
        count = sum(s.count for s in samples)
        return sum(s.value for s in samples) / count if count else math.nan


class _Extreme(SampledStat):
    """Max / Min: the value ``pick`` keeps of every value recorded (NaN without one)."""

    pick: Callable[[float, float], float]

    def update(self, sample: _Sample, value: float) -> None:
        sample.value = self.pick(sample.value, value)

    def combine(self, samples: list[_Sample]) -> float:
        if not any(s.count for s in samples):
            return math.nan
        return functools.reduce(self.pick, [s.value for s in samples])


class Max(_Extreme):
    initial = -math.inf
    pick = staticmethod(max)


class Min(_Extreme):
    initial = math.inf
    pick = staticmethod(min)


class WindowedSum(SampledStat):
    def update(self, sample: _Sample, value: float) -> None:
        sample.value += value

    def combine(self, samples: list[_Sample]) -> float:
        return float(sum(s.value for s in samples))


class WindowedCount(WindowedSum):
    def update(self, sample: _Sample, value: float) -> None:
        sample.value += 1.0


class Rate:
    """Java's Rate: the windowed sum (or count) per ``unit_ms`` of the time the windows cover
    (at least ``samples - 1`` whole windows, at least 1 ms)."""

    def __init__(self, unit_ms: float = SECOND_MS, stat: SampledStat | None = None) -> None:
        self.unit_ms = unit_ms
        self.stat: SampledStat = stat if stat is not None else WindowedSum()

    def record(self, config: MetricConfig, value: float, now_ms: float) -> None:
        self.stat.record(config, value, now_ms)

    def window_ms(self, config: MetricConfig, now_ms: float) -> float:
        self.stat.purge(config, now_ms)
        elapsed = now_ms - self.stat.oldest_start_ms(now_ms)
        full = int(elapsed // config.time_window_ms)
        minimum = config.samples - 1
        if full < minimum:
            elapsed += (minimum - full) * config.time_window_ms
        return max(elapsed, 1.0)

    def measure(self, config: MetricConfig, now_ms: float) -> float:
        value = self.stat.measure(config, now_ms)
        return value / (self.window_ms(config, now_ms) / self.unit_ms)


class CumulativeSum:
    def __init__(self) -> None:
        self.total = 0.0

    def record(self, config: MetricConfig, value: float, now_ms: float) -> None:
        self.total += value

    def measure(self, config: MetricConfig, now_ms: float) -> float:
        return self.total


class CumulativeCount(CumulativeSum):
    def record(self, config: MetricConfig, value: float, now_ms: float) -> None:
        self.total += 1.0


class Value:
    """The last value recorded (Java's Value)."""

    def __init__(self) -> None:
        self.value = 0.0

    def record(self, config: MetricConfig, value: float, now_ms: float) -> None:
        self.value = value

    def measure(self, config: MetricConfig, now_ms: float) -> float:
        return self.value


class Measured:
    """A value read from live state at measure time (Java's Measurable lambda)."""

    def __init__(self, read: Callable[[float], float]) -> None:
        self.read = read

    def record(self, config: MetricConfig, value: float, now_ms: float) -> None:
        pass

    def measure(self, config: MetricConfig, now_ms: float) -> float:
        return float(self.read(now_ms))


Stat = SampledStat | Rate | CumulativeSum | Value | Measured


# -- the catalogue ---------------------------------------------------------------------------------

Kind = Literal["gauge", "counter"]
_C: Final = ("client-id",)
_T: Final = ("client-id", "topic")
_P: Final = ("client-id", "topic", "partition")


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One row of the metrics table: ``kind`` "counter" for cumulative totals (an OTel
    observable counter), "gauge" for the rest; ``unit`` in UCUM form, as OTel wants it."""

    group: str
    name: str
    tags: tuple[str, ...]
    unit: str
    kind: Kind
    description: str

    @property
    def key(self) -> tuple[str, str, tuple[str, ...]]:
        return (self.group, self.name, self.tags)


def _spec(group: str, name: str, tags: tuple[str, ...], unit: str, desc: str) -> MetricSpec:
    kind: Kind = "counter" if name.endswith("-total") else "gauge"
    return MetricSpec(group, name, tags, unit, kind, desc)


def _spec_avg_max(
    group: str, name: str, tags: tuple[str, ...], unit: str, what: str, low: bool = False
) -> tuple[MetricSpec, MetricSpec]:
    """``name-avg`` ("Average ...") and ``name-max`` ("Maximum ...", or ``name-min`` when
    ``low``) of ``what``."""
    extreme = ("min", "Minimum") if low else ("max", "Maximum")
    return (
        _spec(group, f"{name}-avg", tags, unit, f"Average {what}"),
        _spec(group, f"{name}-{extreme[0]}", tags, unit, f"{extreme[1]} {what}"),
    )


def _spec_rate_total(
    group: str, name: str, tags: tuple[str, ...], unit: str, what: str
) -> tuple[MetricSpec, MetricSpec]:
    """``name-rate`` ("... per second", in ``unit``/s) and ``name-total`` (``what``)."""
    return (
        _spec(group, f"{name}-rate", tags, f"{unit}/s", f"{what} per second"),
        _spec(group, f"{name}-total", tags, unit, what),
    )


def _spec_seconds_ago(group: str, event: str, since: str) -> MetricSpec:
    """``last-<event>-seconds-ago``: whole seconds since ``since`` (-1 before the first)."""
    desc = f"Whole seconds since {since} (-1 before the first)"
    return _spec(group, f"last-{event}-seconds-ago", _C, "s", desc)


_F, _G, _N = FETCH_MANAGER, COORDINATOR, CONSUMER

CATALOGUE: Final[tuple[MetricSpec, ...]] = (
    # consumer-fetch-manager-metrics
    *_spec_rate_total(_F, "fetch", _C, "{request}", "Fetch responses received"),
    *_spec_avg_max(_F, "fetch-latency", _C, "ms", "time from Fetch request to response"),
    *_spec_avg_max(_F, "fetch-size", _C, "By", "record bytes in a Fetch response"),
    *_spec_avg_max(_F, "fetch-throttle-time", _C, "ms", "throttle_time_ms of Fetch responses"),
    *_spec_rate_total(_F, "bytes-consumed", _C, "By", "Record bytes handed to the application"),
    *_spec_rate_total(_F, "records-consumed", _C, "{record}", "Records handed to the application"),
    _spec(_F, "records-lag-max", _C, "{record}", "Maximum lag of any partition in the window"),
    _spec(_F, "records-lead-min", _C, "{record}", "Minimum lead of any partition in the window"),
    *_spec_avg_max(_F, "fetch-size", _T, "By", "record bytes of the topic in a Fetch response"),
    *_spec_rate_total(_F, "bytes-consumed", _T, "By", "Record bytes of the topic handed out"),
    *_spec_rate_total(_F, "records-consumed", _T, "{record}", "Records of the topic handed out"),
    _spec(
        _F,
        "records-lag",
        _P,
        "{record}",
        "High watermark (LSO when read_committed) minus position, at the last collect",
    ),
    *_spec_avg_max(_F, "records-lag", _P, "{record}", "lag of the partition in the window"),
    _spec(
        _F, "records-lead", _P, "{record}", "Position minus log start offset, at the last collect"
    ),
    *_spec_avg_max(_F, "records-lead", _P, "{record}", "lead of the partition in the window", True),
    # consumer-coordinator-metrics
    _spec(_G, "heartbeat-rate", _C, "{heartbeat}/s", "Heartbeat responses per second"),
    _spec(_G, "heartbeat-total", _C, "{heartbeat}", "Heartbeat responses received"),
    _spec(
        _G,
        "heartbeat-response-time-max",
        _C,
        "ms",
        "Maximum time from heartbeat request to response",
    ),
    _spec_seconds_ago(_G, "heartbeat", "the last heartbeat was sent"),
    *_spec_avg_max(
        _G, "rebalance-latency", _C, "ms", "time from the start of a rebalance to STABLE"
    ),
    _spec(_G, "rebalance-latency-total", _C, "ms", "Time spent in completed rebalances"),
    _spec(_G, "rebalance-rate-per-hour", _C, "{rebalance}/h", "Completed rebalances per hour"),
    _spec(_G, "rebalance-total", _C, "{rebalance}", "Completed rebalances"),
    _spec_seconds_ago(_G, "rebalance", "the last completed rebalance"),
    *_spec_avg_max(_G, "commit-latency", _C, "ms", "time from OffsetCommit request to response"),
    _spec(_G, "commit-rate", _C, "{commit}/s", "OffsetCommit responses per second"),
    _spec(_G, "commit-total", _C, "{commit}", "OffsetCommit responses received"),
    _spec(_G, "assigned-partitions", _C, "{partition}", "Partitions assigned to this consumer now"),
    # consumer-metrics
    _spec(_N, "connection-count", _C, "{connection}", "Broker connections open now"),
    _spec(_N, "connection-creation-total", _C, "{connection}", "Connections opened"),
    _spec(_N, "connection-close-total", _C, "{connection}", "Connections closed"),
    _spec(_N, "request-rate", _C, "{request}/s", "Requests sent per second (all APIs)"),
    _spec(_N, "request-total", _C, "{request}", "Requests sent (all APIs)"),
    *_spec_avg_max(_N, "request-latency", _C, "ms", "time from request sent to response read"),
    _spec(_N, "io-wait-ratio", _C, "1", "Fraction of time the network actor waited in select"),
    _spec(_N, "io-wait-time-ns-avg", _C, "ns", "Average time of one select wait"),
    _spec(_N, "poll-idle-ratio-avg", _C, "1", "Average share of time spent inside poll"),
    *_spec_avg_max(_N, "time-between-poll", _C, "ms", "time between two polls"),
    _spec_seconds_ago(_N, "poll", "the last poll"),
)

_SPECS: Final = {(s.group, s.name, tuple(sorted(s.tags))): s for s in CATALOGUE}


# -- registry ------------------------------------------------------------------------------------


class Metric:
    """One metric: its :class:`MetricName` and its current ``value()`` (Java's KafkaMetric
    and ``metricValue()``); live: each ``value()`` measures again."""

    __slots__ = ("_registry", "_stat", "metric_name", "spec")

    def __init__(
        self, registry: MetricsRegistry, name: MetricName, stat: Stat, spec: MetricSpec
    ) -> None:
        self._registry = registry
        self._stat = stat
        self.metric_name = name
        self.spec = spec

    def value(self) -> float:
        return self._registry.measure(self._stat)

    def __repr__(self) -> str:
        return f"Metric({self.metric_name}, {self.value()!r})"


class Sensor:
    """Stats recorded together by one ``record(value)`` (Java's Sensor); the registry's lock
    guards them."""

    __slots__ = ("_registry", "stats")

    def __init__(self, registry: MetricsRegistry) -> None:
        self._registry = registry
        self.stats: list[Stat] = []

    def record(self, value: float, now_ms: float) -> None:
        """Record under the registry's lock (callers recording several sensors at once take
        the lock themselves and call :meth:`record_locked`)."""
        with self._registry.lock:
            self.record_locked(value, now_ms)

    def record_locked(self, value: float, now_ms: float) -> None:
        config = self._registry.config
        for stat in self.stats:
            stat.record(config, value, now_ms)


class MetricsRegistry:
    """Every registered metric of one consumer; one lock for recording and measuring."""

    def __init__(self, config: MetricConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.lock = threading.RLock()
        self._metrics: dict[MetricName, Metric] = {}

    def now_ms(self) -> float:
        return self.clock.monotonic() * 1000.0

    def measure(self, stat: Stat) -> float:
        with self.lock:
            return stat.measure(self.config, self.now_ms())

    def sensor(self, group: str, tags: Mapping[str, str], stats: Mapping[str, Stat]) -> Sensor:
        """A sensor whose stats are registered as metrics named by ``stats``' keys."""
        sensor = Sensor(self)
        for name, stat in stats.items():
            self.add(group, name, tags, stat)
            sensor.stats.append(stat)
        return sensor

    def add(self, group: str, name: str, tags: Mapping[str, str], stat: Stat) -> Metric:
        spec = _SPECS.get((group, name, tuple(sorted(tags))))
        if spec is None:
            raise KeyError(f"{group}:{name} with tags {tuple(tags)} is not in the catalogue")
        metric_name = MetricName(name, group, tags, spec.description)
        metric = Metric(self, metric_name, stat, spec)
        with self.lock:
            self._metrics[metric_name] = metric
        return metric

    def remove_where(self, keep: Callable[[MetricName], bool]) -> None:
        with self.lock:
            for name in [n for n in self._metrics if not keep(n)]:
                del self._metrics[name]

    def snapshot(self) -> dict[MetricName, Metric]:
        with self.lock:
            return dict(self._metrics)


class MetricsView(Mapping[MetricName, Metric]):
    """What ``metrics()`` returns: the metrics registered when it was called, keyed by
    :class:`MetricName` (``view[name].value()`` measures again, as Java's ``metricValue()``).

    Compatibility: a plain string key (``view["records-consumed-total"]``) reads the flat
    values ``metrics()`` returned before it had Java's names and tags (numbers, and
    ``records-lag`` as a dict by partition); ``flat()`` returns all of them. Strings are not
    keys of the mapping (iteration, ``len`` and ``keys()`` give MetricNames only).
    """

    def __init__(
        self, metrics: Mapping[MetricName, Metric], flat: Callable[[], Mapping[str, Any]]
    ) -> None:
        self._metrics = dict(metrics)
        # Read now, as metrics() did before: the flat values stay those of the call.
        self._flat: Mapping[str, Any] = flat()

    @overload
    def __getitem__(self, key: MetricName) -> Metric: ...
    @overload
    def __getitem__(self, key: str) -> Any: ...
    def __getitem__(self, key: MetricName | str) -> Any:
        if isinstance(key, str):
            return self.flat()[key]
        return self._metrics[key]

    @overload
    def get(self, key: MetricName, /) -> Metric | None: ...
    @overload
    def get(self, key: MetricName, default: Metric, /) -> Metric: ...
    @overload
    def get(self, key: MetricName, default: _D, /) -> Metric | _D: ...
    @overload
    def get(self, key: str, default: Any = None, /) -> Any: ...
    def get(self, key: MetricName | str, default: Any = None, /) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            return key in self.flat()
        return key in self._metrics

    def __iter__(self) -> Iterator[MetricName]:
        return iter(self._metrics)

    def __len__(self) -> int:
        return len(self._metrics)

    def flat(self) -> Mapping[str, Any]:
        """The flat values of before, read when the view was made."""
        return self._flat

    def values_by_name(self) -> dict[MetricName, float]:
        """Every metric's value now."""
        return {name: metric.value() for name, metric in self._metrics.items()}

    def find(self, group: str, name: str, **tags: str) -> Metric:
        """The metric of ``group``/``name`` with exactly these tags besides ``client-id``
        (keys with ``_`` for ``-``: ``find(FETCH_MANAGER, "records-lag", topic="t",
        partition="0")``; ``find(FETCH_MANAGER, "records-lag-max")`` is the client's)."""
        wanted = {k.replace("_", "-"): v for k, v in tags.items()}
        keys = set(wanted) - {"client-id"}
        found = [
            m
            for n, m in self._metrics.items()
            if n.group == group
            and n.name == name
            and set(n.tags) - {"client-id"} == keys
            and all(n.tags.get(k) == v for k, v in wanted.items())
        ]
        if len(found) != 1:
            raise KeyError(f"{group}:{name} {wanted}: {len(found)} metrics match")
        return found[0]


# -- the consumer's sensors ------------------------------------------------------------------------


def _seconds_ago(at: Callable[[], float | None]) -> Measured:
    def read(now_ms: float) -> float:
        then = at()
        return -1.0 if then is None else float(int((now_ms - then) // 1000))

    return Measured(read)


# The stat sets several sensors share (named as the catalogue's helpers name them).


def _avg_max(name: str) -> dict[str, Stat]:
    return {f"{name}-avg": Avg(), f"{name}-max": Max()}


def _rate_sum(name: str) -> dict[str, Stat]:
    """A rate of the values recorded and their cumulative sum."""
    return {f"{name}-rate": Rate(), f"{name}-total": CumulativeSum()}


def _rate_count(name: str) -> dict[str, Stat]:
    """A rate of the events recorded and their cumulative count."""
    return {f"{name}-rate": Rate(stat=WindowedCount()), f"{name}-total": CumulativeCount()}


def _last_avg_extreme(name: str, extreme: Literal["max", "min"]) -> dict[str, Stat]:
    """The last value recorded, the windowed average and the windowed max (or min)."""
    return {
        name: Value(),
        f"{name}-avg": Avg(),
        f"{name}-{extreme}": Max() if extreme == "max" else Min(),
    }


class ConsumerMetrics:
    """The sensors of one consumer (``ctx.metrics``): each ``record``-style method takes the
    registry's lock once.

    Also keeps the flat counters of the ``metrics()`` of before (:meth:`snapshot`)."""

    def __init__(
        self,
        client_id: str = "",
        config: MetricConfig | None = None,
        clock: Clock | None = None,
        *,
        assigned_partitions: Callable[[], int] | None = None,
    ) -> None:
        self.client_id = client_id
        self.registry = registry = MetricsRegistry(config or MetricConfig(), clock or SystemClock())
        self._tags: Final = Tags({"client-id": client_id})
        tags = self._tags
        sensor = registry.sensor
        # fetch manager
        self._fetch = sensor(_F, tags, {**_avg_max("fetch-latency"), **_rate_count("fetch")})
        self._fetch_size = sensor(_F, tags, _avg_max("fetch-size"))
        self._throttle = sensor(_F, tags, _avg_max("fetch-throttle-time"))
        self._bytes = sensor(_F, tags, _rate_sum("bytes-consumed"))
        self._records = sensor(_F, tags, _rate_sum("records-consumed"))
        self._lag = sensor(_F, tags, {"records-lag-max": Max()})
        self._lead = sensor(_F, tags, {"records-lead-min": Min()})
        self._topic: dict[str, tuple[Sensor, Sensor, Sensor]] = {}
        self._partition: dict[tuple[str, int], tuple[Sensor, Sensor]] = {}
        self._assignment_id: int | None = None
        # coordinator
        self._last_heartbeat_ms: float | None = None
        #: When a heartbeat was last answered without error (``health()``).
        self._last_heartbeat_ok_ms: float | None = None
        self._last_rebalance_ms: float | None = None
        self._heartbeat = sensor(
            _G, tags, {"heartbeat-response-time-max": Max(), **_rate_count("heartbeat")}
        )
        registry.add(
            _G, "last-heartbeat-seconds-ago", tags, _seconds_ago(lambda: self._last_heartbeat_ms)
        )
        self._rebalance = sensor(
            _G,
            tags,
            {
                **_avg_max("rebalance-latency"),
                "rebalance-latency-total": CumulativeSum(),
                "rebalance-rate-per-hour": Rate(HOUR_MS, WindowedCount()),
                "rebalance-total": CumulativeCount(),
            },
        )
        registry.add(
            _G, "last-rebalance-seconds-ago", tags, _seconds_ago(lambda: self._last_rebalance_ms)
        )
        self._commit = sensor(
            _G, tags, {**_avg_max("commit-latency"), "commit-rate": Rate(stat=WindowedCount())}
        )
        self._commits_total = CumulativeSum()
        registry.add(_G, "commit-total", tags, self._commits_total)
        assigned = assigned_partitions or (lambda: 0)
        registry.add(_G, "assigned-partitions", tags, Measured(lambda _now: float(assigned())))
        # consumer (network and poll)
        self._connections = 0
        registry.add(_N, "connection-count", tags, Measured(lambda _now: float(self._connections)))
        self._created = sensor(_N, tags, {"connection-creation-total": CumulativeCount()})
        self._closed = sensor(_N, tags, {"connection-close-total": CumulativeCount()})
        self._request = sensor(_N, tags, _rate_sum("request"))
        self._request_latency = sensor(_N, tags, _avg_max("request-latency"))
        self._io_wait = sensor(
            _N, tags, {"io-wait-ratio": Rate(NANOSECOND_MS), "io-wait-time-ns-avg": Avg()}
        )
        self._poll_idle = sensor(_N, tags, {"poll-idle-ratio-avg": Avg()})
        self._between_polls = sensor(_N, tags, _avg_max("time-between-poll"))
        self._poll_started_ms: float | None = None
        self._last_poll_ms: float | None = None
        self._last_poll_ended_ms: float | None = None
        self._since_last_poll_ms = 0.0
        registry.add(_N, "last-poll-seconds-ago", tags, _seconds_ago(lambda: self._last_poll_ms))
        # the flat view of before
        self._polls = Rate(stat=WindowedCount())
        self._polls_total = 0
        self._commit_latency_sum = 0.0  # all timed commits ever (not windowed), as before
        self._commit_latency_count = 0
        self._fetch_bytes_total = 0.0
        self.rebalances = 0
        #: Milliseconds between the last two polls (Java's time-between-poll-last).
        self.time_between_polls_ms: float | None = None

    # -- fetch ---------------------------------------------------------------------------------

    def fetch_response(
        self,
        latency_ms: float,
        throttle_ms: float,
        bytes_by_topic: Mapping[str, int],
        *,
        other_bytes: int = 0,
    ) -> None:
        """One Fetch response: its latency, throttle time and record bytes per topic
        (``other_bytes``: bytes not attributed to a topic)."""
        registry = self.registry
        with registry.lock:
            now = registry.now_ms()
            self._fetch.record_locked(latency_ms, now)
            self._throttle.record_locked(throttle_ms, now)
            total = other_bytes
            for topic, size in bytes_by_topic.items():
                self._topic_sensors(topic)[0].record_locked(size, now)
                total += size
            self._fetch_size.record_locked(total, now)
            self._fetch_bytes_total += total

    def fetch_completed(self, latency_ms: float, num_bytes: int) -> None:
        """A Fetch response without a per-topic split (kept for callers of before)."""
        self.fetch_response(latency_ms, 0.0, {}, other_bytes=num_bytes)

    def _topic_sensors(self, topic: str) -> tuple[Sensor, Sensor, Sensor]:
        sensors = self._topic.get(topic)
        if sensors is None:
            tags = Tags({"client-id": self.client_id, "topic": topic})
            sensor = self.registry.sensor
            sensors = self._topic[topic] = (
                sensor(_F, tags, _avg_max("fetch-size")),
                sensor(_F, tags, _rate_sum("bytes-consumed")),
                sensor(_F, tags, _rate_sum("records-consumed")),
            )
        return sensors

    def _partition_sensors(self, topic: str, partition: int) -> tuple[Sensor, Sensor]:
        key = (topic, partition)
        sensors = self._partition.get(key)
        if sensors is None:
            tags = Tags({"client-id": self.client_id, "topic": topic, "partition": str(partition)})
            sensor = self.registry.sensor
            sensors = self._partition[key] = (
                sensor(_F, tags, _last_avg_extreme("records-lag", "max")),
                sensor(_F, tags, _last_avg_extreme("records-lead", "min")),
            )
        return sensors

    def consumed(
        self,
        num_records: int,
        num_bytes: int,
        *,
        by_topic: Mapping[str, tuple[int, int]] | None = None,
        lag: Mapping[tuple[str, int], int] | None = None,
        lead: Mapping[tuple[str, int], int] | None = None,
    ) -> None:
        """One collect: records and bytes handed out (``by_topic``: (records, bytes)), and
        the lag / lead of the partitions it advanced."""
        registry = self.registry
        with registry.lock:
            now = registry.now_ms()
            if num_records or num_bytes:
                self._records.record_locked(num_records, now)
                self._bytes.record_locked(num_bytes, now)
            for topic, (records, size) in (by_topic or {}).items():
                _, bytes_sensor, records_sensor = self._topic_sensors(topic)
                bytes_sensor.record_locked(size, now)
                records_sensor.record_locked(records, now)
            for (topic, partition), value in (lag or {}).items():
                self._partition_sensors(topic, partition)[0].record_locked(value, now)
                self._lag.record_locked(value, now)
            for (topic, partition), value in (lead or {}).items():
                self._partition_sensors(topic, partition)[1].record_locked(value, now)
                self._lead.record_locked(value, now)

    def update_assignment(self, assignment_id: int, assigned: Callable[[], Any]) -> None:
        """Drop the per-partition metrics of partitions no longer assigned (when the
        assignment changed since the last call), as Java's FetchMetricsManager does."""
        if assignment_id == self._assignment_id:
            return
        self._assignment_id = assignment_id
        owned = {(tp.topic, tp.partition) for tp in assigned()}
        with self.registry.lock:
            gone = [key for key in self._partition if key not in owned]
            if not gone:
                return
            for key in gone:
                del self._partition[key]
            dropped = {(t, str(p)) for t, p in gone}
            self.registry.remove_where(
                lambda n: (
                    "partition" not in n.tags
                    or (n.tags["topic"], n.tags["partition"]) not in dropped
                )
            )

    # -- coordinator ---------------------------------------------------------------------------

    def heartbeat_sent(self) -> None:
        with self.registry.lock:
            self._last_heartbeat_ms = self.registry.now_ms()

    def heartbeat_response(self, latency_ms: float, *, ok: bool = True) -> None:
        """A heartbeat response (``ok``: answered without error)."""
        registry = self.registry
        with registry.lock:
            now = registry.now_ms()
            self._heartbeat.record_locked(latency_ms, now)
            if ok:
                self._last_heartbeat_ok_ms = now

    def rebalance_completed(self, latency_ms: float) -> None:
        registry = self.registry
        with registry.lock:
            now = registry.now_ms()
            self._rebalance.record_locked(latency_ms, now)
            self._last_rebalance_ms = now
            self.rebalances += 1

    def committed(self, latency_ms: float | None) -> None:
        """An OffsetCommit response (``latency_ms``: request to response); None for a commit
        that was not timed: counted in commit-total only."""
        registry = self.registry
        with registry.lock:
            now = registry.now_ms()
            self._commits_total.total += 1
            if latency_ms is not None:
                self._commit.record_locked(latency_ms, now)
                self._commit_latency_sum += latency_ms
                self._commit_latency_count += 1

    # -- network -------------------------------------------------------------------------------

    def connection_opened(self) -> None:
        with self.registry.lock:
            self._connections += 1
            self._created.record_locked(1, self.registry.now_ms())

    def connection_closed(self) -> None:
        with self.registry.lock:
            self._connections = max(0, self._connections - 1)
            self._closed.record_locked(1, self.registry.now_ms())

    def requests_sent(self, count: int) -> None:
        self._request.record(count, self.registry.now_ms())

    def response_received(self, latency_ms: float) -> None:
        self._request_latency.record(latency_ms, self.registry.now_ms())

    def io_waited(self, waited_ns: float) -> None:
        self._io_wait.record(waited_ns, self.registry.now_ms())

    # -- poll ----------------------------------------------------------------------------------

    def polled(self) -> None:
        """A poll / getmany starts (Java's recordPollStart)."""
        registry = self.registry
        with registry.lock:
            now = registry.now_ms()
            self._poll_started_ms = now
            self._polls.record(registry.config, 1, now)
            self._polls_total += 1
            last = self._last_poll_ms
            if last is not None:
                self._since_last_poll_ms = now - last
                self._between_polls.record_locked(now - last, now)
                self.time_between_polls_ms = now - last
            else:
                self._since_last_poll_ms = 0.0
            self._last_poll_ms = now

    def poll_ended(self) -> None:
        """The poll that :meth:`polled` started returns (Java's recordPollEnd): the share of
        time since the previous poll that this one took (skipped for the first poll)."""
        registry = self.registry
        with registry.lock:
            started = self._poll_started_ms
            if started is None:
                return
            now = registry.now_ms()
            self._poll_started_ms = None
            self._last_poll_ended_ms = now
            inside = now - started
            span = inside + self._since_last_poll_ms
            if self._since_last_poll_ms > 0 and span > 0:
                self._poll_idle.record_locked(inside / span, now)

    def activity(self) -> Activity:
        """When the last good heartbeat and the last poll were (``health()``)."""
        registry = self.registry
        with registry.lock:
            return Activity(
                now_ms=registry.now_ms(),
                last_heartbeat_ok_ms=self._last_heartbeat_ok_ms,
                last_poll_ms=self._last_poll_ms,
                last_poll_ended_ms=self._last_poll_ended_ms,
                polling=self._poll_started_ms is not None,
            )

    def polling(self) -> _Polling:
        """``with ctx.metrics.polling(): ...`` around a poll / getmany."""
        return _Polling(self)

    # -- reading -------------------------------------------------------------------------------

    def view(self, flat: Callable[[], Mapping[str, Any]]) -> MetricsView:
        return MetricsView(self.registry.snapshot(), flat)

    def snapshot(self) -> dict[str, float]:
        """The flat values of before (string keys; 0.0 where nothing was measured)."""

        metrics = self.registry.snapshot()

        def value(metric: str) -> float:
            found = metrics.get(MetricName(metric, _F, self._tags))
            number = found.value() if found is not None else math.nan
            return 0.0 if math.isnan(number) else number

        registry = self.registry
        with registry.lock:
            now = registry.now_ms()
            polls = self._polls.measure(registry.config, now)
            timed = self._commit_latency_count
            return {
                **{name: value(name) for name in _FLAT_FETCH_MANAGER},
                "poll-rate": polls,
                "poll-total": float(self._polls_total),
                "time-between-poll-last": self.time_between_polls_ms or 0.0,
                "commit-total": self._commits_total.total,
                "commit-latency-avg": self._commit_latency_sum / timed if timed else 0.0,
                "rebalance-total": float(self.rebalances),
            }


#: The client-level fetch manager metrics of the flat ``snapshot()``, in its order.
_FLAT_FETCH_MANAGER: Final = (
    "fetch-rate",
    "fetch-total",
    "bytes-consumed-rate",
    "bytes-consumed-total",
    "fetch-size-avg",
    "fetch-latency-avg",
    "fetch-latency-max",
    "records-consumed-rate",
    "records-consumed-total",
)


@dataclass(frozen=True, slots=True)
class Activity:
    """What :meth:`ConsumerMetrics.activity` returns: the registry clock's now and when (on
    the same clock, ms) a heartbeat was last answered without error, the last poll started
    and ended, and whether a poll runs now."""

    now_ms: float
    last_heartbeat_ok_ms: float | None
    last_poll_ms: float | None
    last_poll_ended_ms: float | None
    polling: bool


class _Polling:
    __slots__ = ("_metrics",)

    def __init__(self, metrics: ConsumerMetrics) -> None:
        self._metrics = metrics

    def __enter__(self) -> None:
        self._metrics.polled()

    def __exit__(self, *exc: object) -> None:
        self._metrics.poll_ended()
