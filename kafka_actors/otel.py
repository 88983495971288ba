"""OpenTelemetry for the consumers (the optional ``otel`` extra: ``opentelemetry-api``).

Owns: :class:`KafkaMetricsInstruments` (the Java-named metrics of ``metrics()`` as OTel
observable instruments: one Meter per Java group, an observable counter for each ``*-total``
metric and an observable gauge for the others, named as in Java, with the metric's tags as
attributes), :func:`instrument_tracing` (spans for each poll / getmany / getone that returned
records and for each commit, with a link per partition batch to every W3C ``traceparent``
found in its records' headers) and :func:`record_context` (the context a record's
``traceparent`` header carries, for a span that continues the producer's trace).

May touch: the public API of the consumers (``metrics()``, and the methods it wraps on one
consumer instance); nothing of the actors. Nothing here runs unless called.

Choices: observations are read from ``metrics()`` when the SDK collects (nothing is recorded
twice); a windowed value with no sample in its window (NaN) is not observed. Tracing wraps the
instance's methods (the class is untouched, other instances are not traced); a poll that
returns nothing makes no span, as in OpenTelemetry's Java Kafka instrumentation.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from kafka_actors.metrics import CATALOGUE, MetricSpec

__all__ = [
    "KafkaMetricsInstruments",
    "instrument_metrics",
    "instrument_tracing",
    "record_context",
]

_SCOPE = "kafka_actors"
_PROPAGATOR = TraceContextTextMapPropagator()
_VIEW_TTL_S = 1.0


# -- metrics -------------------------------------------------------------------------------------


class KafkaMetricsInstruments:
    """The metrics of the consumers :meth:`add` ed, as observable instruments of
    ``meter_provider`` (the global one by default). Create one per provider: the instruments
    are registered once, each consumer's metrics are observations with its ``client-id``."""

    def __init__(self, meter_provider: otel_metrics.MeterProvider | None = None) -> None:
        provider = meter_provider or otel_metrics.get_meter_provider()
        self._lock = threading.Lock()
        self._consumers: weakref.WeakSet[Any] = weakref.WeakSet()
        #: consumer -> (monotonic time, metrics() view): one view serves every instrument of
        #: a collection (a view's values are measured when observed; only its keys are kept).
        self._views: weakref.WeakKeyDictionary[Any, tuple[float, Any]] = weakref.WeakKeyDictionary()
        self.instruments: list[Any] = []
        specs_by_name: dict[tuple[str, str], list[MetricSpec]] = {}
        for spec in CATALOGUE:
            specs_by_name.setdefault((spec.group, spec.name), []).append(spec)
        meters: dict[str, otel_metrics.Meter] = {}
        for (group, name), specs in specs_by_name.items():
            meter = meters.get(group)
            if meter is None:
                meter = meters[group] = provider.get_meter(group)
            spec = specs[0]
            create = (
                meter.create_observable_counter
                if spec.kind == "counter"
                else meter.create_observable_gauge
            )
            self.instruments.append(
                create(
                    name,
                    callbacks=[self._callback(group, name)],
                    unit=spec.unit,
                    description=spec.description,
                )
            )

    def add(self, consumer: Any) -> None:
        """Observe ``consumer`` (a KafkaConsumer or AsyncKafkaConsumer) from now on."""
        with self._lock:
            self._consumers.add(consumer)

    def remove(self, consumer: Any) -> None:
        with self._lock:
            self._consumers.discard(consumer)

    def _view(self, consumer: Any) -> Any:
        now = time.monotonic()
        with self._lock:
            cached = self._views.get(consumer)
        if cached is not None and now - cached[0] < _VIEW_TTL_S:
            return cached[1]
        try:
            view = consumer.metrics()
        except Exception:  # closed or failed: nothing to observe
            return None
        with self._lock:
            self._views[consumer] = (now, view)
        return view

    def _callback(
        self, group: str, name: str
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterator[Observation]:
            with self._lock:
                consumers = list(self._consumers)
            for consumer in consumers:
                view = self._view(consumer)
                if view is None:
                    continue
                for metric_name in view:
                    if metric_name.name != name or metric_name.group != group:
                        continue
                    number = view[metric_name].value()
                    if not math.isnan(number):
                        yield Observation(number, dict(metric_name.tags))

        return observe


def instrument_metrics(
    consumer: Any, meter_provider: otel_metrics.MeterProvider | None = None
) -> KafkaMetricsInstruments:
    """The instruments of a new :class:`KafkaMetricsInstruments` observing ``consumer``."""
    instruments = KafkaMetricsInstruments(meter_provider)
    instruments.add(consumer)
    return instruments


# -- tracing -------------------------------------------------------------------------------------


def record_context(record: Any, parent: otel_context.Context | None = None) -> otel_context.Context:
    """The context of the W3C ``traceparent`` (and ``tracestate``) headers of ``record``
    (``parent`` unchanged when it has none): ``tracer.start_as_current_span("process",
    context=record_context(record))`` continues the producer's trace."""
    return _PROPAGATOR.extract(_carrier(record.headers), context=parent)


def _carrier(headers: Iterable[tuple[str, bytes | None]] | None) -> dict[str, str]:
    carrier: dict[str, str] = {}
    for key, value in headers or ():
        if key in ("traceparent", "tracestate") and value is not None:
            try:
                carrier[key] = value.decode("ascii")
            except UnicodeDecodeError:
                continue
    return carrier


def _links(batches: Mapping[tuple[str, int], list[Any]]) -> list[Link]:
    """A link per partition batch to each distinct valid traceparent of its records."""
    links: list[Link] = []
    for (topic, partition), records in batches.items():
        seen: set[tuple[int, int]] = set()
        for record in records:
            carrier = _carrier(record.headers)
            if "traceparent" not in carrier:
                continue
            ctx = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
            if not ctx.is_valid or (ctx.trace_id, ctx.span_id) in seen:
                continue
            seen.add((ctx.trace_id, ctx.span_id))
            links.append(
                Link(
                    ctx,
                    {
                        "messaging.destination.name": topic,
                        "messaging.destination.partition.id": str(partition),
                        "messaging.kafka.offset": int(record.offset),
                        "messaging.batch.message_count": len(records),
                    },
                )
            )
    return links


def _by_partition(records: Iterable[Any]) -> dict[tuple[str, int], list[Any]]:
    batches: dict[tuple[str, int], list[Any]] = {}
    for record in records:
        batches.setdefault((record.topic, record.partition), []).append(record)
    return batches


class _Spans:
    def __init__(self, consumer: Any, tracer: trace.Tracer) -> None:
        self.tracer = tracer
        config = consumer.config
        self.attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.client.id": config.client_id,
        }
        if config.group_id is not None:
            self.attributes["messaging.consumer.group.name"] = config.group_id

    def batch(self, operation: str, started_ns: int, records: list[Any]) -> None:
        """One span for a batch that returned records (started when the call began)."""
        if not records:
            return
        batches = _by_partition(records)
        topics = {topic for topic, _ in batches}
        attributes = dict(self.attributes)
        attributes["messaging.operation.name"] = operation
        attributes["messaging.operation.type"] = "receive"
        attributes["messaging.batch.message_count"] = len(records)
        name = operation
        if len(topics) == 1:
            (topic,) = topics
            attributes["messaging.destination.name"] = topic
            name = f"{operation} {topic}"
        span = self.tracer.start_span(
            name,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=_links(batches),
            start_time=started_ns,
        )
        span.end()

    def failed(self, operation: str, started_ns: int, error: BaseException) -> None:
        attributes = dict(self.attributes)
        attributes["messaging.operation.name"] = operation
        span = self.tracer.start_span(
            operation, kind=SpanKind.CONSUMER, attributes=attributes, start_time=started_ns
        )
        _end(span, error)

    def commit(self, offsets: Mapping[Any, Any] | None) -> trace.Span:
        attributes = dict(self.attributes)
        attributes["messaging.operation.name"] = "commit"
        attributes["messaging.operation.type"] = "settle"
        if offsets:
            attributes["messaging.batch.message_count"] = len(offsets)
        return self.tracer.start_span("commit", kind=SpanKind.CLIENT, attributes=attributes)


def _end(span: trace.Span, error: BaseException | None) -> None:
    if error is not None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, type(error).__name__))
    span.end()


@contextlib.contextmanager
def _committing(spans: _Spans, offsets: Mapping[Any, Any] | None) -> Iterator[trace.Span]:
    """The commit's span, current inside the block; ended with the error the block raises
    (the caller ends it otherwise, when the commit completes)."""
    span = spans.commit(offsets)
    with trace.use_span(span, end_on_exit=False):
        try:
            yield span
        except BaseException as exc:
            _end(span, exc)
            raise


def _traced_receive(
    operation: str,
    receive: Callable[..., Awaitable[Any]],
    spans: _Spans,
    records_of: Callable[[Any], list[Any]],
) -> Callable[..., Awaitable[Any]]:
    """``receive`` (getmany / getone) with a span for the records it returned
    (``records_of`` lists them) or for its error."""

    @functools.wraps(receive)
    async def traced(*args: Any, **kwargs: Any) -> Any:
        started = time.time_ns()
        try:
            result = await receive(*args, **kwargs)
        except Exception as exc:
            spans.failed(operation, started, exc)
            raise
        spans.batch(operation, started, records_of(result))
        return result

    return traced


def instrument_tracing(consumer: Any, tracer_provider: trace.TracerProvider | None = None) -> None:
    """Trace ``consumer``'s polls and commits (see the module docstring).

    KafkaConsumer: ``poll``, ``commit_sync``, ``commit_async``
    (the span ends when the commit completes). AsyncKafkaConsumer: ``getmany``, ``getone``
    (and ``async for``), ``commit``."""
    tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
    spans = _Spans(consumer, tracer)
    if hasattr(consumer, "getmany"):
        _trace_async(consumer, spans)
    else:
        _trace_sync(consumer, spans)


def _trace_sync(consumer: Any, spans: _Spans) -> None:
    poll, commit_sync, commit_async = consumer.poll, consumer.commit_sync, consumer.commit_async

    @functools.wraps(poll)
    def traced_poll(*args: Any, **kwargs: Any) -> Any:
        started = time.time_ns()
        try:
            records = poll(*args, **kwargs)
        except Exception as exc:
            spans.failed("poll", started, exc)
            raise
        spans.batch("poll", started, list(records))
        return records

    @functools.wraps(commit_sync)
    def traced_commit_sync(offsets: Any = None, *args: Any, **kwargs: Any) -> Any:
        with _committing(spans, offsets) as span:
            result = commit_sync(offsets, *args, **kwargs)
        _end(span, None)
        return result

    @functools.wraps(commit_async)
    def traced_commit_async(offsets: Any = None, *args: Any, **kwargs: Any) -> Any:
        with _committing(spans, offsets) as span:
            future = commit_async(offsets, *args, **kwargs)
        future.add_done_callback(lambda f: _end(span, None if f.cancelled() else f.exception()))
        return future

    consumer.poll = traced_poll
    consumer.commit_sync = traced_commit_sync
    consumer.commit_async = traced_commit_async


def _trace_async(consumer: Any, spans: _Spans) -> None:
    getmany, getone, commit = consumer.getmany, consumer.getone, consumer.commit

    @functools.wraps(commit)
    async def traced_commit(offsets: Any = None, *args: Any, **kwargs: Any) -> Any:
        with _committing(spans, offsets) as span:
            result = await commit(offsets, *args, **kwargs)
        _end(span, None)
        return result

    consumer.getmany = _traced_receive(
        "getmany", getmany, spans, lambda batch: [r for rs in batch.values() for r in rs]
    )
    consumer.getone = _traced_receive("getone", getone, spans, lambda record: [record])
    consumer.commit = traced_commit
