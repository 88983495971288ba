"""Client telemetry (KIP-714): the pure :class:`TelemetryManager`.

Owns: the client's telemetry subscription (client instance id, subscription id, push interval,
accepted compression types, temporality, requested metric prefixes), the state machine of
Java's ``ClientTelemetryReporter`` sender (subscription needed -> in progress -> push needed ->
push in progress, and on close terminating push needed -> in progress -> terminated), the
GetTelemetrySubscriptions (API 71) and PushTelemetry (API 72) requests, the OTLP payload built
from the consumer's own metrics (:class:`TelemetryPoint`, Java's telemetry names
``org.apache.kafka.<group>.<name>``) and its compression.

May touch: nothing outside itself. Pure: the time is a parameter (``now_ms``, monotonic
milliseconds); the wall clock of the OTLP timestamps, the metrics source and the jitter are
injected.

Choices, in one place (Java's ``ClientTelemetryReporter`` / ``ClientTelemetryUtils``):

* The first GetTelemetrySubscriptions goes at once with the zero client instance id; the
  broker assigns one. A subscription requesting no metrics (an empty prefix list) is fetched
  again after its push interval; otherwise the first push waits the push interval times a
  jitter in [0.5, 1.5) (clients started together do not push together), later pushes the
  interval.
* Broker errors, as Java maps them: INVALID_REQUEST, INVALID_RECORD, UNSUPPORTED_VERSION and
  unknown codes disable telemetry; UNKNOWN_SUBSCRIPTION_ID and UNSUPPORTED_COMPRESSION_TYPE
  fetch the subscription again "at once" (here: after the request state's backoff, never right
  after a failure; UNSUPPORTED_COMPRESSION_TYPE also drops that codec); TELEMETRY_TOO_LARGE and
  THROTTLING_QUOTA_EXCEEDED fetch it again after the push interval.
* A request that got no answer (disconnect, timeout) is retried through the request state
  (``retry.backoff.ms`` doubling to ``retry.backoff.max.ms``, jitter 0.2; reset by a success);
  a broker without the APIs (or a non-retriable failure) disables telemetry, as Java.
* Metric selection: "*" alone selects every metric; otherwise a metric is pushed when its
  telemetry name starts with one of the requested prefixes.
* Temporality: counters (``*-total``) are OTLP monotonic sums, cumulative or (when the
  subscription asks for it) delta since the last push; a change of temporality starts the
  deltas over. Everything else is an OTLP gauge. A metric that measured nothing (NaN) is not
  pushed: a metric reports what it measures or does not exist.
* Compression: the first of the broker's accepted types (in its order of preference) that
  this client can write (zstd, gzip, snappy in snappy-java's framing; not lz4) and the broker
  has not refused; "none" otherwise.
* Close (:meth:`TelemetryManager.initiate_close`): with a subscription, one terminating push
  (``terminating=true``), whose answer ends telemetry; without one, nothing is sent.
"""

from __future__ import annotations

import enum
import math
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kafka_actors.errors import KafkaError, UnsupportedVersionError
from kafka_actors.log import get_logger
from kafka_actors.protocol.messages import ANY_NODE, PollResult, UnsentRequest
from kafka_actors.protocol.request_state import RequestState, retry_backoff
from kafka_actors.protocol.wire.apis import ApiKey, request_type

__all__ = [
    "COMPRESSION_GZIP",
    "COMPRESSION_LZ4",
    "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_ZSTD",
    "DEFAULT_PUSH_INTERVAL_MS",
    "TELEMETRY_PREFIX",
    "PayloadBuilder",
    "TelemetryConfig",
    "TelemetryManager",
    "TelemetryPoint",
    "TelemetryState",
    "TelemetrySubscription",
    "choose_compression",
    "compress",
    "metric_points",
    "telemetry_name",
]

#: Java's ``ClientTelemetryReporter.DEFAULT_PUSH_INTERVAL_MS`` (5 minutes): a push interval the
#: broker gave as <= 0 becomes this.
DEFAULT_PUSH_INTERVAL_MS: Final = 300_000
#: The first push waits the push interval times U(0.5, 1.5) (Java's INITIAL_PUSH_JITTER_*).
INITIAL_PUSH_JITTER_LOWER: Final = 0.5
INITIAL_PUSH_JITTER_UPPER: Final = 1.5
#: The prefix of every telemetry metric name (Java's ``org.apache.kafka`` naming strategy).
TELEMETRY_PREFIX: Final = "org.apache.kafka"

# Kafka's compression type ids (the record batch attribute codes).
COMPRESSION_NONE: Final = 0
COMPRESSION_GZIP: Final = 1
COMPRESSION_SNAPPY: Final = 2
COMPRESSION_LZ4: Final = 3
COMPRESSION_ZSTD: Final = 4

# Kafka error codes the state machine tells apart.
_INVALID_REQUEST: Final = 42
_INVALID_RECORD: Final = 87
_UNSUPPORTED_VERSION: Final = 35
_UNKNOWN_SUBSCRIPTION_ID: Final = 117
_UNSUPPORTED_COMPRESSION_TYPE: Final = 76
_TELEMETRY_TOO_LARGE: Final = 118
_THROTTLING_QUOTA_EXCEEDED: Final = 89
_ZERO_UUID: Final = uuid.UUID(int=0)


def telemetry_name(group: str, name: str) -> str:
    """Java's telemetry name of a metric: ``org.apache.kafka.`` + the group lower-cased with
    dashes as dots and ``.metrics`` removed + ``.`` + the name lower-cased with dashes as dots
    (``consumer-fetch-manager-metrics`` / ``records-consumed-total`` ->
    ``org.apache.kafka.consumer.fetch.manager.records.consumed.total``)."""
    clean_group = group.lower().replace("-", ".").replace(".metrics", "")
    return f"{TELEMETRY_PREFIX}.{clean_group}.{name.lower().replace('-', '.')}"


def telemetry_attributes(tags: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The metric's tags as OTLP attributes: keys in snake_case (Java's ``cleanTags``); the
    client id is left out (the broker adds the client's identity as resource attributes, and
    Java's collector excludes it as well)."""
    return tuple(
        (key.lower().replace("-", "_"), value)
        for key, value in sorted(tags.items())
        if key != "client-id"
    )


@dataclass(frozen=True, slots=True)
class TelemetryPoint:
    """One measured value of one metric, under its telemetry name."""

    name: str
    value: float
    #: "counter": a monotonic cumulative total (an OTLP Sum); "gauge": anything else.
    kind: str
    attributes: tuple[tuple[str, str], ...] = ()
    unit: str = ""
    description: str = ""


@dataclass(frozen=True, slots=True)
class TelemetrySubscription:
    """What GetTelemetrySubscriptions answered."""

    client_instance_id: uuid.UUID
    subscription_id: int
    push_interval_ms: int
    accepted_compression_types: tuple[int, ...]
    delta_temporality: bool
    requested_metrics: tuple[str, ...]
    telemetry_max_bytes: int

    @property
    def selects_nothing(self) -> bool:
        return not self.requested_metrics

    def selects(self, name: str) -> bool:
        """Java's selector: nothing for no prefixes, everything for "*" alone, else a prefix
        match."""
        requested = self.requested_metrics
        if not requested:
            return False
        if len(requested) == 1 and requested[0] == "*":
            return True
        return any(name.startswith(prefix) for prefix in requested)


class TelemetryState(enum.Enum):
    """Java's ``ClientTelemetryState``."""

    SUBSCRIPTION_NEEDED = "subscription_needed"
    SUBSCRIPTION_IN_PROGRESS = "subscription_in_progress"
    PUSH_NEEDED = "push_needed"
    PUSH_IN_PROGRESS = "push_in_progress"
    TERMINATING_PUSH_NEEDED = "terminating_push_needed"
    TERMINATING_PUSH_IN_PROGRESS = "terminating_push_in_progress"
    TERMINATED = "terminated"


_TERMINATING: Final = frozenset(
    {
        TelemetryState.TERMINATING_PUSH_NEEDED,
        TelemetryState.TERMINATING_PUSH_IN_PROGRESS,
        TelemetryState.TERMINATED,
    }
)


# -- compression ----------------------------------------------------------------------------------


def _zstd(data: bytes) -> bytes:
    import cramjam

    return bytes(cramjam.zstd.compress(data))


def _gzip(data: bytes) -> bytes:
    import gzip  # (here, as cramjam above: only the codec the broker asks for is loaded)

    return gzip.compress(data)


#: snappy-java's stream header (xerial framing): magic, version 1, compatible version 1.
_XERIAL_HEADER: Final = b"\x82SNAPPY\x00" + (1).to_bytes(4, "big") + (1).to_bytes(4, "big")
_XERIAL_BLOCK: Final = 32 * 1024


def _snappy(data: bytes) -> bytes:
    """Snappy in snappy-java's framing (what Kafka's Java side reads, as for record
    batches): the header, then each block of up to 32 KiB as a big-endian length and its raw
    snappy bytes."""
    import cramjam

    out = bytearray(_XERIAL_HEADER)
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
        out += len(block).to_bytes(4, "big") + block
    return bytes(out)


#: The codecs this client writes a payload with (the broker decompresses them as its record
#: batches: gzip and zstd are plain streams, snappy is in snappy-java's framing; lz4 (Kafka's
#: frame) is not written here and never chosen).
_COMPRESSORS: Final[Mapping[int, Callable[[bytes], bytes]]] = {
    COMPRESSION_ZSTD: _zstd,
    COMPRESSION_GZIP: _gzip,
    COMPRESSION_SNAPPY: _snappy,
}


def choose_compression(accepted: Iterable[int], refused: Iterable[int] = ()) -> int:
    """The first of the broker's ``accepted`` types this client writes and the broker has not
    ``refused``; :data:`COMPRESSION_NONE` when none is left (always accepted)."""
    refused_set = set(refused)
    for kind in accepted:
        if kind in _COMPRESSORS and kind not in refused_set:
            return int(kind)
    return COMPRESSION_NONE


def compress(data: bytes, compression_type: int) -> bytes:
    if compression_type == COMPRESSION_NONE:
        return data
    return _COMPRESSORS[compression_type](data)


# -- the OTLP payload -----------------------------------------------------------------------------


@dataclass(slots=True)
class PayloadBuilder:
    """Builds OTLP ``MetricsData`` from points; keeps what delta temporality needs (the value
    each counter had at the last push) and the start time of the cumulative sums."""

    start_unix_nano: int
    resource_attributes: tuple[tuple[str, str], ...] = ()
    _last: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, int]] = field(
        default_factory=dict
    )

    def reset(self) -> None:
        """Start the deltas over (the temporality changed)."""
        self._last.clear()

    def build(self, points: Iterable[TelemetryPoint], *, delta: bool, now_unix_nano: int) -> bytes:
        from opentelemetry.proto.common.v1 import common_pb2
        from opentelemetry.proto.metrics.v1 import metrics_pb2

        data = metrics_pb2.MetricsData()
        resource_metrics = data.resource_metrics.add()
        for attr_key, attr_value in self.resource_attributes:
            resource_metrics.resource.attributes.append(
                common_pb2.KeyValue(
                    key=attr_key, value=common_pb2.AnyValue(string_value=attr_value)
                )
            )
        scope = resource_metrics.scope_metrics.add()
        for point in points:
            if math.isnan(point.value):
                continue
            metric = scope.metrics.add()
            metric.name = point.name
            metric.unit = point.unit
            metric.description = point.description
            value: float
            if point.kind == "counter":
                metric.sum.is_monotonic = True
                key = (point.name, point.attributes)
                if delta:
                    metric.sum.aggregation_temporality = metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
                    previous, since = self._last.get(key, (0.0, self.start_unix_nano))
                    value, start = point.value - previous, since
                    self._last[key] = (point.value, now_unix_nano)
                else:
                    metric.sum.aggregation_temporality = (
                        metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
                    )
                    value, start = point.value, self.start_unix_nano
                dp = metric.sum.data_points.add()
                dp.start_time_unix_nano = start
            else:
                dp = metric.gauge.data_points.add()
                value = point.value
            dp.time_unix_nano = now_unix_nano
            dp.as_double = float(value)
            for attr_key, attr_value in point.attributes:
                dp.attributes.append(
                    common_pb2.KeyValue(
                        key=attr_key, value=common_pb2.AnyValue(string_value=attr_value)
                    )
                )
        return bytes(data.SerializeToString())


def metric_points(metrics: Iterable[Any]) -> list[TelemetryPoint]:
    """The consumer's registered metrics (:class:`kafka_actors.metrics.Metric`) as telemetry
    points, each measured now under its telemetry name."""
    points = []
    for metric in metrics:
        name = metric.metric_name
        points.append(
            TelemetryPoint(
                name=telemetry_name(name.group, name.name),
                value=float(metric.value()),
                kind=metric.spec.kind,
                attributes=telemetry_attributes(name.tags),
                unit=metric.spec.unit,
                description=metric.spec.description,
            )
        )
    return points


# -- the manager ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TelemetryConfig:
    enabled: bool = True  # enable.metrics.push
    retry_backoff_ms: int = 100  # retry.backoff.ms
    retry_backoff_max_ms: int = 1_000  # retry.backoff.max.ms
    request_timeout_ms: int | None = None  # request.timeout.ms

    @classmethod
    def from_consumer_config(cls, config: Any) -> TelemetryConfig:
        return cls(
            enabled=bool(config.enable_metrics_push),
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
            request_timeout_ms=config.request_timeout_ms,
        )


class TelemetryManager:
    """The KIP-714 sender (see the module docstring): ``poll(now_ms)`` returns the
    GetTelemetrySubscriptions or PushTelemetry due, ``on_response`` / ``on_failure`` feed the
    answers, :meth:`initiate_close` asks for the terminating push."""

    def __init__(
        self,
        config: TelemetryConfig,
        *,
        supported: bool,
        collect: Callable[[], Iterable[TelemetryPoint]],
        wall_ms: Callable[[], int],
        random: Callable[[], float],
        now_ms: int,
        client_id: str | None = None,
        resource_attributes: tuple[tuple[str, str], ...] = (),
        client_instance_id: uuid.UUID | None = None,
    ) -> None:
        self._config = config
        #: The id an earlier incarnation was assigned: sent in the first
        #: GetTelemetrySubscriptions instead of the zero id (the broker keeps it).
        self._known_instance_id = client_instance_id
        self._collect = collect
        self._wall_ms = wall_ms
        self._random = random
        self._log = get_logger("telemetry", client_id=client_id)
        self._enabled = config.enabled and supported
        if config.enabled and not supported:
            self._log.info("telemetry_not_supported_by_broker")
        self.state = TelemetryState.SUBSCRIPTION_NEEDED
        self.subscription: TelemetrySubscription | None = None
        self._request_state = RequestState(retry_backoff(config, random))
        # The next request is due at _last_request_ms + _interval_ms (Java's lastRequestMs /
        # intervalMs); 0/0: the first GetTelemetrySubscriptions goes at once.
        self._last_request_ms = now_ms
        self._interval_ms = 0
        self._in_flight: int | None = None
        self._next_id = 1
        self._refused_compression: set[int] = set()
        self._last_compression = COMPRESSION_NONE
        self._payload = PayloadBuilder(
            start_unix_nano=wall_ms() * 1_000_000, resource_attributes=resource_attributes
        )
        #: Pushes answered without error (terminating included), for tests and logs.
        self.pushes = 0

    # -- observability -------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """False once telemetry is off (by configuration, the broker, or a fatal answer)."""
        return self._enabled

    @property
    def client_instance_id(self) -> uuid.UUID | None:
        """The id the broker assigned, once a subscription was loaded."""
        sub = self.subscription
        return None if sub is None else sub.client_instance_id

    @property
    def done(self) -> bool:
        """Nothing more will be sent: disabled, or terminated."""
        return not self._enabled or self.state is TelemetryState.TERMINATED

    @property
    def closing_done(self) -> bool:
        """After :meth:`initiate_close`: the terminating push was answered or will not go."""
        return self.done or self.state not in _TERMINATING

    # -- inputs --------------------------------------------------------------------------------

    def initiate_close(self, now_ms: int) -> None:
        """The consumer closes: a terminating push when a subscription was loaded (Java's
        ``initiateClose``); otherwise telemetry ends here."""
        if not self._enabled or self.state in _TERMINATING:
            return
        if self.subscription is None or self.state in (
            TelemetryState.SUBSCRIPTION_NEEDED,
            TelemetryState.SUBSCRIPTION_IN_PROGRESS,
        ):
            self._log.debug("telemetry_close_without_push", state=self.state.value)
            self.state = TelemetryState.TERMINATED
            return
        # A push in flight is forgotten: its answer no longer matters.
        self._in_flight = None
        self.state = TelemetryState.TERMINATING_PUSH_NEEDED

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        if request_id != self._in_flight:
            return
        self._in_flight = None
        if int(response.__api_key__) == ApiKey.GET_TELEMETRY_SUBSCRIPTIONS:
            self._on_subscription(response, now_ms)
        else:
            self._on_push(response, now_ms)

    def on_failure(self, request_id: int, error: BaseException, now_ms: int) -> None:
        if request_id != self._in_flight:
            return
        self._in_flight = None
        if self.state is TelemetryState.TERMINATING_PUSH_IN_PROGRESS:
            self.state = TelemetryState.TERMINATED
            return
        if isinstance(error, UnsupportedVersionError) or not (
            isinstance(error, KafkaError) and error.retriable
        ):
            self._disable(f"request failed: {error!r}")
            return
        backoff = self._request_state.on_failed_attempt(now_ms)
        self._log.debug("telemetry_request_failed", error=repr(error), backoff_ms=backoff)
        self.state = TelemetryState.SUBSCRIPTION_NEEDED
        self._due(now_ms, 0)

    # -- the request-manager contract ----------------------------------------------------------

    def poll(self, now_ms: int) -> PollResult:
        if not self._enabled or self._in_flight is not None:
            return PollResult(time_until_next_poll_ms=None)
        state = self.state
        if state is TelemetryState.TERMINATING_PUSH_NEEDED:
            request = self._push(now_ms, terminating=True)
            return PollResult(requests=() if request is None else (request,))
        if state not in (TelemetryState.SUBSCRIPTION_NEEDED, TelemetryState.PUSH_NEEDED):
            return PollResult(time_until_next_poll_ms=None)
        wait = max(
            self._last_request_ms + self._interval_ms - now_ms,
            self._request_state.remaining_backoff_ms(now_ms),
        )
        if wait > 0:
            return PollResult(time_until_next_poll_ms=wait)
        if state is TelemetryState.SUBSCRIPTION_NEEDED:
            request = self._get_subscription(now_ms)
        else:
            request = self._push(now_ms, terminating=False)
        if request is None:
            return self.poll(now_ms) if self._in_flight is None and self._enabled else PollResult()
        return PollResult(requests=(request,))

    # -- internals -----------------------------------------------------------------------------

    def _due(self, now_ms: int, interval_ms: int) -> None:
        self._last_request_ms = now_ms
        self._interval_ms = interval_ms

    def _disable(self, reason: str) -> None:
        self._log.info("telemetry_disabled", reason=reason)
        self._enabled = False

    def _new_request(self, request: Any, now_ms: int) -> UnsentRequest:
        request_id = self._next_id
        self._next_id += 1
        self._in_flight = request_id
        self._request_state.on_send_attempt(now_ms)
        return UnsentRequest(
            node=ANY_NODE,
            request=request,
            request_id=request_id,
            timeout_ms=self._config.request_timeout_ms,
        )

    def _get_subscription(self, now_ms: int) -> UnsentRequest:
        cls: Any = request_type(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0)
        instance = self.client_instance_id or self._known_instance_id or _ZERO_UUID
        self.state = TelemetryState.SUBSCRIPTION_IN_PROGRESS
        self._log.debug("get_telemetry_subscriptions", client_instance_id=str(instance))
        return self._new_request(cls(client_instance_id=instance), now_ms)

    def _push(self, now_ms: int, *, terminating: bool) -> UnsentRequest | None:
        sub = self.subscription
        if sub is None:
            self.state = TelemetryState.SUBSCRIPTION_NEEDED
            return None
        try:
            points = [p for p in self._collect() if sub.selects(p.name)]
            payload = self._payload.build(
                points, delta=sub.delta_temporality, now_unix_nano=self._wall_ms() * 1_000_000
            )
            compression = choose_compression(
                sub.accepted_compression_types, self._refused_compression
            )
            data = compress(payload, compression)
        except Exception as exc:  # a metric that cannot be read: try at the next interval
            self._log.warning("telemetry_payload_failed", error=repr(exc))
            if terminating:
                self.state = TelemetryState.TERMINATED
            else:
                self._due(now_ms, sub.push_interval_ms)
            return None
        cls: Any = request_type(ApiKey.PUSH_TELEMETRY, 0)
        self.state = (
            TelemetryState.TERMINATING_PUSH_IN_PROGRESS
            if terminating
            else TelemetryState.PUSH_IN_PROGRESS
        )
        self._log.debug(
            "push_telemetry",
            metrics=len(points),
            bytes=len(data),
            compression=compression,
            terminating=terminating,
        )
        self._last_compression = compression
        return self._new_request(
            cls(
                client_instance_id=sub.client_instance_id,
                subscription_id=sub.subscription_id,
                terminating=terminating,
                compression_type=compression,
                metrics=data,
            ),
            now_ms,
        )

    def _error_interval(self, code: int) -> int | None:
        """Java's ``maybeFetchErrorIntervalMs``: None disables telemetry, 0 fetches the
        subscription again after the backoff, else after that many ms."""
        if code in (_UNKNOWN_SUBSCRIPTION_ID, _UNSUPPORTED_COMPRESSION_TYPE):
            return 0
        if code in (_TELEMETRY_TOO_LARGE, _THROTTLING_QUOTA_EXCEEDED):
            sub = self.subscription
            return sub.push_interval_ms if sub is not None else DEFAULT_PUSH_INTERVAL_MS
        return None

    def _on_error_code(self, code: int, now_ms: int) -> None:
        interval = self._error_interval(code)
        if interval is None:
            self._disable(f"broker answered error code {code}")
            return
        if code == _UNSUPPORTED_COMPRESSION_TYPE:
            self._refused_compression.add(self._last_compression)
        if interval == 0:
            # "Retry immediately" in Java: here after the request state's backoff.
            self._request_state.on_failed_attempt(now_ms)
        self._log.info("telemetry_error", error_code=code, retry_in_ms=interval)
        self.state = TelemetryState.SUBSCRIPTION_NEEDED
        self._due(now_ms, interval)

    def _on_subscription(self, response: Any, now_ms: int) -> None:
        if self.state in _TERMINATING:
            return
        code = int(response.error_code)
        if code != 0:
            self._on_error_code(code, now_ms)
            return
        instance = response.client_instance_id
        if instance is None or instance == _ZERO_UUID:
            instance = self.client_instance_id or self._known_instance_id
        if instance is None:
            self._disable("the broker assigned no client instance id")
            return
        push_interval = int(response.push_interval.total_seconds() * 1000)
        if push_interval <= 0:
            push_interval = DEFAULT_PUSH_INTERVAL_MS
        sub = TelemetrySubscription(
            client_instance_id=instance,
            subscription_id=int(response.subscription_id),
            push_interval_ms=push_interval,
            accepted_compression_types=tuple(int(c) for c in response.accepted_compression_types),
            delta_temporality=bool(response.delta_temporality),
            requested_metrics=tuple(str(m) for m in response.requested_metrics),
            telemetry_max_bytes=int(response.telemetry_max_bytes),
        )
        old = self.subscription
        if old is not None and old.delta_temporality != sub.delta_temporality:
            self._payload.reset()
        self.subscription = sub
        self._request_state.reset()
        if sub.selects_nothing:
            self.state = TelemetryState.SUBSCRIPTION_NEEDED
            self._due(now_ms, push_interval)
        else:
            self.state = TelemetryState.PUSH_NEEDED
            jitter = (
                INITIAL_PUSH_JITTER_LOWER
                + (INITIAL_PUSH_JITTER_UPPER - INITIAL_PUSH_JITTER_LOWER) * self._random()
            )
            self._due(now_ms, round(push_interval * jitter))
        self._log.info(
            "telemetry_subscribed",
            client_instance_id=str(instance),
            subscription_id=sub.subscription_id,
            push_interval_ms=push_interval,
            metrics=list(sub.requested_metrics),
            accepted_compression_types=list(sub.accepted_compression_types),
            delta_temporality=sub.delta_temporality,
        )

    def _on_push(self, response: Any, now_ms: int) -> None:
        code = int(response.error_code)
        if self.state is TelemetryState.TERMINATING_PUSH_IN_PROGRESS:
            if code == 0:
                self.pushes += 1
            self.state = TelemetryState.TERMINATED
            return
        if self.state in _TERMINATING:
            return
        if code != 0:
            self._on_error_code(code, now_ms)
            return
        self.pushes += 1
        self._request_state.reset()
        sub = self.subscription
        assert sub is not None
        self.state = TelemetryState.PUSH_NEEDED
        self._due(now_ms, sub.push_interval_ms)
