"""Structured logging and trace ids for kafka-actors.

Owns: the logger factory every component uses (:func:`get_logger`), trace-id creation and
binding (:func:`new_trace_id`, :func:`traced`), the secret-redaction processor, the rendering
of our events into stdlib ``logging`` records, and the opt-in output of :func:`configure`.
May touch: the ``kafka_actors`` stdlib logger, but only when a caller asks for it
(:func:`configure`). It never touches structlog's global configuration, and importing
kafka-actors configures nothing.

Logging as Python libraries do
------------------------------
Our loggers are stdlib loggers named ``kafka_actors.<component>``: the application's levels,
handlers and filters apply (``logging.getLogger("kafka_actors").setLevel(logging.ERROR)``
silences everything below ERROR). Binding context is structlog's API: :func:`get_logger`
returns a :class:`BoundLogger`, a bound logger as structlog's are (``bind``, ``unbind``,
``new``) that wraps the stdlib logger with a chain of its own (context variables, secret
redaction, rendering), whatever structlog configuration the application has or has not
made, and without importing structlog (below). A call below the stdlib logger's effective
level returns at once (``isEnabledFor``), before any event dictionary is built.

Each line becomes one ``logging.LogRecord``:

* ``record.getMessage()`` (``%(message)s``) is the event and its context, logfmt-like:
  ``node_unavailable node=-1 address=127.0.0.1:9092 reason="connection could not be
  established" error="..."`` (a value with spaces, quotes or ``=`` is double-quoted);
* ``record.kafka_actors`` is the same as a dict (``{"event": "node_unavailable", "node": -1,
  ...}``) for JSON formatters and tests; nothing is put into other record attributes, so no
  key can clash with the LogRecord's own;
* level, logger name, time, exception (``exc_info``) and the caller's file and line are the
  record's own attributes.

Secrets are redacted (:func:`redact_secrets`) before either is made.

While the application configured no handler at all, stdlib logging's last resort prints
WARNING and above to stderr (``%(message)s``), so a wrong ``bootstrap.servers`` is visible in
a program that never set logging up. A script or demo that wants our own console or JSON
lines calls :func:`configure` (or ``configure(json=True)``): it puts one handler on the
``kafka_actors`` logger, nothing else.

How a trace travels: an API entry point calls :func:`new_trace_id` and puts the id into every
message it sends (messages are frozen dataclasses with a ``trace_id`` field). Each actor wraps
its handling of a message in ``with traced(msg.trace_id):``, which binds the id into
a context variable of the thread, so every line logged while handling the message (and every
message created from it, via :func:`current_trace_id`) carries it.

structlog's context variables without structlog: a context variable named ``structlog_<key>``
is how ``structlog.contextvars`` keeps ``<key>``, and its merge, get and clear functions find
every such variable by that name. Ours are named so (:func:`traced`), and our lines merge
every such variable in the context (:func:`_merge_context_vars`, what
``structlog.contextvars.merge_contextvars`` does): an application's
``structlog.contextvars.bind_contextvars(request_id=...)`` shows in our lines, and our
``trace_id`` in an application's structlog lines logged inside our calls (a rebalance
listener), as when we bound through structlog. So the consumer's runtime never imports
structlog (its own modules took 10-17 ms of start-up, issue 26; the asyncio it imports is
loaded anyway, by kio's writers): only :func:`configure`'s
renderers, :func:`stdlib_processors` and the parallel consumer do, when used. (An
application that binds ``trace_id`` itself with structlog makes a second variable of that
name; a line then shows one of the two.)
"""

from __future__ import annotations

import logging
import os
import random
import re
import sys
from collections.abc import MutableMapping
from contextvars import ContextVar, Token, copy_context
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from structlog.typing import EventDict, Processor, WrappedLogger

__all__ = [
    "RECORD_ATTRIBUTE",
    "ROOT_LOGGER",
    "BoundLogger",
    "configure",
    "current_trace_id",
    "get_logger",
    "merge_record_fields",
    "new_trace_id",
    "redact_secrets",
    "stdlib_processors",
    "traced",
]

_SECRET_MARKERS = (
    "password",
    "secret",
    "token",
    "jaas",
    "credential",
    "sasl_auth_bytes",
    "bearer",
)
_REDACTED = "[hidden]"

#: The package logger: every logger of ours is below it.
ROOT_LOGGER = "kafka_actors"

#: The LogRecord attribute holding the event dict (the event and its context).
RECORD_ATTRIBUTE = "kafka_actors"


def get_logger(component: str, **bind: Any) -> BoundLogger:
    """A logger for ``logging.getLogger("kafka_actors.<component>")`` with ``bind`` bound.

    It follows the stdlib logging configuration in force when it logs (levels, handlers,
    filters), so module-level loggers obey a later ``logging.basicConfig`` or
    :func:`configure`; structlog's global configuration plays no part."""
    return BoundLogger(logging.getLogger(f"{ROOT_LOGGER}.{component}"), dict(bind))


_DEBUG, _INFO, _WARNING, _ERROR, _CRITICAL = (
    logging.DEBUG,
    logging.INFO,
    logging.WARNING,
    logging.ERROR,
    logging.CRITICAL,
)
#: The stdlib logger's stack frames between the caller and ``Logger.log`` (the caller's
#: method and :meth:`BoundLogger._emit`): the record names the caller's file, function, line.
_STACKLEVEL = 3


class BoundLogger:
    """A structlog-style bound logger over a stdlib ``logging.Logger`` (module docstring).

    ``bind`` / ``unbind`` / ``try_unbind`` / ``new`` return new loggers, as structlog's do;
    ``debug`` ... ``critical``, ``exception`` and ``log`` test the stdlib logger's level
    first, then build the event dict (bound context, keywords, ``event``, context variables),
    redact secrets and hand the result to the stdlib logger."""

    __slots__ = ("_context", "_logger")

    def __init__(self, logger: logging.Logger, context: dict[str, Any]) -> None:
        self._logger = logger
        self._context = context

    def __repr__(self) -> str:
        return f"<BoundLogger(context={self._context!r}, logger={self._logger.name!r})>"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, BoundLogger)
            and self._logger is other._logger
            and self._context == other._context
        )

    __hash__ = None  # type: ignore[assignment]

    def bind(self, **new_values: Any) -> BoundLogger:
        """A new logger with ``new_values`` added to this one's context."""
        return BoundLogger(self._logger, {**self._context, **new_values})

    def unbind(self, *keys: str) -> BoundLogger:
        """A new logger without ``keys`` (KeyError if one is not bound)."""
        context = dict(self._context)
        for key in keys:
            del context[key]
        return BoundLogger(self._logger, context)

    def try_unbind(self, *keys: str) -> BoundLogger:
        """A new logger without ``keys``, those that are bound."""
        context = dict(self._context)
        for key in keys:
            context.pop(key, None)
        return BoundLogger(self._logger, context)

    def new(self, **new_values: Any) -> BoundLogger:
        """A new logger with ``new_values`` as its whole context."""
        return BoundLogger(self._logger, dict(new_values))

    def debug(self, event: str, *args: Any, **kw: Any) -> None:
        if self._logger.isEnabledFor(_DEBUG):
            self._emit(_DEBUG, event, args, kw)

    def info(self, event: str, *args: Any, **kw: Any) -> None:
        if self._logger.isEnabledFor(_INFO):
            self._emit(_INFO, event, args, kw)

    def warning(self, event: str, *args: Any, **kw: Any) -> None:
        if self._logger.isEnabledFor(_WARNING):
            self._emit(_WARNING, event, args, kw)

    warn = warning

    def error(self, event: str, *args: Any, **kw: Any) -> None:
        if self._logger.isEnabledFor(_ERROR):
            self._emit(_ERROR, event, args, kw)

    def exception(self, event: str, *args: Any, **kw: Any) -> None:
        """An ERROR with the exception being handled (``exc_info=True`` unless given)."""
        if self._logger.isEnabledFor(_ERROR):
            kw.setdefault("exc_info", True)
            self._emit(_ERROR, event, args, kw)

    def critical(self, event: str, *args: Any, **kw: Any) -> None:
        if self._logger.isEnabledFor(_CRITICAL):
            self._emit(_CRITICAL, event, args, kw)

    fatal = critical

    def log(self, level: int, event: str, *args: Any, **kw: Any) -> None:
        if self._logger.isEnabledFor(level):
            self._emit(level, event, args, kw)

    def is_enabled_for(self, level: int) -> bool:
        """True if a line at ``level`` would reach the stdlib logger's handlers."""
        return self._logger.isEnabledFor(level)

    def _emit(self, level: int, event: str, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
        if args:  # structlog's stdlib loggers accept %-style positional arguments too
            event = event % args
        event_dict = {**self._context, **kw}
        event_dict["event"] = event
        _merge_context_vars(event_dict)
        margs, mkw = _to_record(redact_secrets(None, "", event_dict))
        self._logger.log(level, *margs, stacklevel=_STACKLEVEL, **mkw)


def new_trace_id() -> str:
    """A fresh 16-hex-digit trace id, created at each public API entry.

    From the process's Mersenne Twister, not ``os.urandom``: a trace id need not be
    unguessable, and ``os.urandom`` is a system call that releases the GIL, so on every poll
    the polling thread would wait to take the GIL back from a decoding actor thread."""
    return f"{_getrandbits(64):016x}"


_getrandbits = random.getrandbits


#: The start of a structlog context variable's name (module docstring).
_STRUCTLOG_PREFIX = "structlog_"
_PREFIX_LEN = len(_STRUCTLOG_PREFIX)
#: Our context variables by key (``structlog_<key>``; Ellipsis: unbound, as structlog's).
_CONTEXT_VARS: dict[str, ContextVar[Any]] = {}


def _context_var(key: str) -> ContextVar[Any]:
    var = _CONTEXT_VARS.get(key)
    if var is None:
        var = _CONTEXT_VARS.setdefault(
            key, ContextVar(f"{_STRUCTLOG_PREFIX}{key}", default=Ellipsis)
        )
    return var


_TRACE_ID = _context_var("trace_id")


def current_trace_id() -> str | None:
    """The trace id bound on this thread (inside :func:`traced`), if any."""
    value = _TRACE_ID.get()
    return value if isinstance(value, str) else None


class traced:
    """Bind ``trace_id`` (and ``extra``) to every log line on this thread inside the block.

    A plain context manager class (not a generator) setting our context variables (module
    docstring) directly: it runs on every poll, where the generator form's overhead showed.
    """

    __slots__ = ("_tokens", "_values")

    def __init__(self, trace_id: str | None, **extra: Any) -> None:
        if trace_id is not None:
            extra["trace_id"] = trace_id
        self._values = extra
        self._tokens: list[Token[Any]] | None = None

    def __enter__(self) -> None:
        if self._values:
            self._tokens = [_context_var(k).set(v) for k, v in self._values.items()]

    def __exit__(self, *exc: object) -> None:
        tokens = self._tokens
        if tokens is not None:
            self._tokens = None
            for token in reversed(tokens):
                token.var.reset(token)


def _merge_context_vars(event_dict: dict[str, Any]) -> None:
    """Add every bound structlog context variable of this context (ours and the
    application's) not already a key, as ``structlog.contextvars.merge_contextvars`` does."""
    for var, value in copy_context().items():
        if value is not Ellipsis and var.name.startswith(_STRUCTLOG_PREFIX):
            event_dict.setdefault(var.name[_PREFIX_LEN:], value)


def _looks_secret(key: str) -> bool:
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


#: A JWT (base64url JSON header ``eyJ...``, three dot-separated parts) or an HTTP/SASL bearer
#: credential, wherever it appears in a logged string (an error message quoting a token).
_TOKEN_PATTERN = re.compile(
    r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*|(?<=Bearer )[^\s\x01\"']+"
)


def _redact_tokens(text: str) -> str:
    if "eyJ" not in text and "Bearer " not in text:
        return text
    return _TOKEN_PATTERN.sub(_REDACTED, text)


def _redact(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return _redact_tokens(value)
    if depth > 4:
        return value
    if isinstance(value, MutableMapping):
        return {
            k: (_REDACTED if isinstance(k, str) and _looks_secret(k) else _redact(v, depth + 1))
            for k, v in value.items()
        }
    return value


def redact_secrets(_logger: WrappedLogger, _name: str, event_dict: EventDict) -> EventDict:
    """structlog processor: replace values of secret-looking keys (at any nesting of dicts)."""
    for key in list(event_dict):
        if _looks_secret(key):
            event_dict[key] = _REDACTED
        else:
            event_dict[key] = _redact(event_dict[key])
    return event_dict


def _logfmt_value(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    if text and not _NEEDS_QUOTES.search(text):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f'"{escaped}"'


_NEEDS_QUOTES = re.compile(r'[\s"=\\]')


def _render_message(event_dict: EventDict) -> str:
    """``event key=value key2="value two"``: the message of our records (module docstring)."""
    parts = [str(event_dict.get("event", ""))]
    parts.extend(f"{k}={_logfmt_value(v)}" for k, v in event_dict.items() if k != "event")
    return " ".join(parts)


_RECORD_KWARGS = ("exc_info", "stack_info")


def _to_record(event_dict: MutableMapping[str, Any]) -> tuple[tuple[str], dict[str, Any]]:
    """The arguments of ``Logger.log`` after the level. The message is the logfmt rendering;
    the event dict (event first) rides on ``record.kafka_actors``."""
    kwargs: dict[str, Any] = {k: event_dict.pop(k) for k in _RECORD_KWARGS if k in event_dict}
    event_dict.pop("stacklevel", None)  # ours is fixed (_STACKLEVEL)
    fields = {"event": event_dict.pop("event", None), **event_dict}
    kwargs["extra"] = {RECORD_ATTRIBUTE: fields}
    return (_render_message(fields),), kwargs


def stdlib_processors() -> list[Processor]:
    """The processors kafka-actors puts in front of a renderer: context variables (trace
    ids), level, ISO timestamp, secret redaction. For a service's own structlog chain, if it
    wants our trace ids and redaction in its own lines; our lines need nothing of it."""
    import structlog

    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]


def merge_record_fields(_logger: WrappedLogger, _name: str, event_dict: EventDict) -> EventDict:
    """structlog processor for ``structlog.stdlib.ProcessorFormatter(foreign_pre_chain=...)``:
    a record of ours becomes its event dict (``event`` the bare event name, the context as
    keys), so a service's structlog renderer shows our lines as it shows its own."""
    record = event_dict.get("_record")
    fields = getattr(record, RECORD_ATTRIBUTE, None)
    if isinstance(fields, dict):
        event_dict.update(fields)
    return event_dict


def _record_event_dict(record: logging.LogRecord) -> dict[str, Any]:
    """A record's event dict: ours from ``record.kafka_actors``, another's from its message."""
    fields = getattr(record, RECORD_ATTRIBUTE, None)
    if isinstance(fields, dict):
        return dict(fields)
    return {"event": record.getMessage()}


class _Formatter(logging.Formatter):
    """Our console or JSON lines, for the handler :func:`configure` attaches."""

    def __init__(self, json: bool) -> None:
        super().__init__()
        import structlog

        self._format_exc_info = structlog.processors.format_exc_info
        self._render: Processor = (
            structlog.processors.JSONRenderer()
            if json
            else structlog.dev.ConsoleRenderer(colors=False)
        )

    def format(self, record: logging.LogRecord) -> str:
        event = _record_event_dict(record)
        event["level"] = record.levelname.lower()
        event["logger"] = record.name
        event["timestamp"] = (
            datetime.fromtimestamp(record.created, UTC).isoformat().replace("+00:00", "Z")
        )
        if record.exc_info:
            event["exc_info"] = record.exc_info
            event = dict(self._format_exc_info(None, "", event))
        elif record.exc_text:
            event["exception"] = record.exc_text
        if record.stack_info:
            event["stack"] = record.stack_info
        return str(self._render(None, event["level"], event))


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure` attaches to the ``kafka_actors`` logger. Without a
    stream it writes to ``sys.stderr`` as it is at each line (pytest's capture, a program
    that redirects stderr later)."""

    def __init__(self, stream: TextIO | None, json: bool) -> None:
        super().__init__(stream)
        self._fixed = stream is not None
        self.setFormatter(_Formatter(json))

    def emit(self, record: logging.LogRecord) -> None:
        if not self._fixed:
            self.stream = sys.stderr
        super().emit(record)


def configure(
    *,
    json: bool | None = None,
    level: str | int | None = None,
    stdlib: bool = False,
    stream: Any = None,
) -> None:
    """Print kafka-actors' lines our way, for scripts, demos and tests (opt-in).

    Puts one handler on the ``kafka_actors`` stdlib logger (replacing the one an earlier
    call put there), writing to ``stream`` (default: ``sys.stderr``) human-readable console
    lines, or one JSON object per line with ``json=True``; sets that logger's level; and
    stops its lines from also reaching the root logger's handlers (no line twice). structlog's
    configuration and other loggers are left as they are.

    ``json`` defaults to the ``KAFKA_ACTORS_LOG_JSON`` environment variable (``1`` = JSON);
    ``level`` to ``KAFKA_ACTORS_LOG_LEVEL`` (default ``INFO``). ``stdlib=True`` undoes an
    earlier call instead: our lines go to the application's handlers again, at the level
    given (if any), else at the application's levels.
    """
    if json is None:
        json = os.environ.get("KAFKA_ACTORS_LOG_JSON", "") in ("1", "true", "yes")
    if level is None:
        level = os.environ.get("KAFKA_ACTORS_LOG_LEVEL", None if stdlib else "INFO")
    numeric = logging.NOTSET if level is None else _level_number(level)
    logger = logging.getLogger(ROOT_LOGGER)
    for handler in [h for h in logger.handlers if isinstance(h, _Handler)]:
        logger.removeHandler(handler)
    logger.setLevel(numeric)
    if stdlib:
        logger.propagate = True
        return
    logger.addHandler(_Handler(stream, json))
    logger.propagate = False


def _level_number(level: str | int) -> int:
    numeric = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    return numeric
