"""Structured logging and trace ids for kafka-actors.

Owns: the logger factory every component uses (:func:`get_logger`), trace-id creation and
binding (:func:`new_trace_id`, :func:`traced`), the secret-redaction processor, and the two
documented ways to route our logs (:func:`configure` for scripts, :func:`stdlib_processors`
for services that already configure structlog or stdlib logging).
May touch: structlog's global configuration, but only when a caller asks for it
(:func:`configure`); importing kafka-actors never reconfigures logging.

How a trace travels: an API entry point calls :func:`new_trace_id` and puts the id into every
message it sends (messages are frozen dataclasses with a ``trace_id`` field). Each actor wraps
its handling of a message in ``with traced(msg.trace_id):``, which binds the id into
structlog's context variables for that thread, so every line logged while handling the
message (and every message created from it, via :func:`current_trace_id`) carries it.

Routing into a service's own configuration
------------------------------------------
kafka-actors logs through ``structlog.get_logger("kafka_actors.<component>")``. It never calls
``structlog.configure`` on import, so:

* a service that configures structlog gets our lines through its own processors and
  renderer; add :func:`redact_secrets` and ``structlog.contextvars.merge_contextvars`` to its
  chain to keep trace ids and the redaction guarantee;
* a service that uses stdlib ``logging`` calls ``configure(stdlib=True)``: our events become
  ``logging`` records on loggers named ``kafka_actors.<component>``, so its handlers, levels
  and formatters apply;
* a script calls ``configure(json=True)`` for one JSON object per line, or ``configure()`` for
  human-readable console lines.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

__all__ = [
    "configure",
    "current_trace_id",
    "get_logger",
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


def get_logger(component: str, **bind: Any) -> Any:
    """A structlog logger named ``kafka_actors.<component>`` with ``bind`` bound.

    The logger stays lazy: it follows the structlog configuration in force when it logs, not
    the one at creation, so module-level loggers obey a later :func:`configure` (or the
    service's own ``structlog.configure``). While nobody configured structlog, it logs
    warnings and errors only, to stderr (as stdlib logging's last-resort handler does), so
    that a program which never set up logging is not flooded with the consumer's debug lines.
    """
    return _Logger(f"kafka_actors.{component}", bind)


class _Logger:
    """Lazy logger: structlog's configured chain when there is one, else the quiet default."""

    __slots__ = ("_bind", "_name", "_quiet")

    def __init__(self, name: str, bind: dict[str, Any]) -> None:
        self._name = name
        self._bind = bind
        self._quiet: Any = None  # the quiet default with ``bind`` bound, made once

    def _target(self) -> Any:
        if structlog.is_configured():
            return structlog.get_logger(self._name, **self._bind)
        quiet = self._quiet
        if quiet is None:
            quiet = self._quiet = _unconfigured_default().bind(**self._bind)
        return quiet

    def bind(self, **more: Any) -> _Logger:
        return _Logger(self._name, {**self._bind, **more})

    def new(self, **values: Any) -> _Logger:
        return _Logger(self._name, dict(values))

    def unbind(self, *keys: str) -> _Logger:
        bound = dict(self._bind)
        for key in keys:
            del bound[key]
        return _Logger(self._name, bound)

    def try_unbind(self, *keys: str) -> _Logger:
        return _Logger(self._name, {k: v for k, v in self._bind.items() if k not in keys})

    def __getattr__(self, name: str) -> Any:
        # debug / info / warning / error / exception / critical / msg / log and the rest
        return getattr(self._target(), name)


class _Stderr:
    """Writes to ``sys.stderr`` as it is when a line is logged (not when it was created)."""

    def msg(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    log = debug = info = warning = warn = error = critical = exception = failure = fatal = msg


@functools.cache
def _unconfigured_default() -> Any:
    """What our loggers log through while nobody configured structlog (made once)."""
    return structlog.wrap_logger(
        _Stderr(),
        processors=[
            *stdlib_processors(),
            structlog.processors.format_exc_info,
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        cache_logger_on_first_use=True,
    )


def new_trace_id() -> str:
    """A fresh 16-hex-digit trace id, created at each public API entry.

    From the process's Mersenne Twister, not ``os.urandom``: a trace id need not be
    unguessable, and ``os.urandom`` is a system call that releases the GIL, so on every poll
    the polling thread would wait to take the GIL back from a decoding actor thread."""
    return f"{_getrandbits(64):016x}"


_getrandbits = random.getrandbits


def current_trace_id() -> str | None:
    """The trace id bound on this thread (inside :func:`traced`), if any."""
    value = structlog.contextvars.get_contextvars().get("trace_id")
    return value if isinstance(value, str) else None


class traced:
    """Bind ``trace_id`` (and ``extra``) to every log line on this thread inside the block.

    A plain context manager class (not a generator) binding through structlog's context
    variables directly: it runs on every poll, where the generator form's overhead showed.
    """

    __slots__ = ("_tokens", "_values")

    def __init__(self, trace_id: str | None, **extra: Any) -> None:
        if trace_id is not None:
            extra["trace_id"] = trace_id
        self._values = extra
        self._tokens: Any = None

    def __enter__(self) -> None:
        if self._values:
            self._tokens = _bind_contextvars(**self._values)

    def __exit__(self, *exc: object) -> None:
        tokens = self._tokens
        if tokens is not None:
            self._tokens = None
            _reset_contextvars(**tokens)


_bind_contextvars = structlog.contextvars.bind_contextvars
_reset_contextvars = structlog.contextvars.reset_contextvars


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


_LOGRECORD_ATTRS = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__
) | {"message", "asctime"}


def _rename_reserved(_logger: WrappedLogger, _name: str, event_dict: EventDict) -> EventDict:
    """Keys that would overwrite LogRecord attributes (``message``, ``args`` ...) get a ``_``
    suffix, so stdlib routing never raises KeyError."""
    for key in [k for k in event_dict if k in _LOGRECORD_ATTRS and k != "event"]:
        event_dict[f"{key}_"] = event_dict.pop(key)
    return event_dict


def stdlib_processors() -> list[Processor]:
    """The processors kafka-actors needs in front of any renderer (for services' own chains)."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]


def configure(
    *,
    json: bool | None = None,
    level: str | int | None = None,
    stdlib: bool = False,
    stream: Any = None,
) -> None:
    """Configure structlog for kafka-actors' own scripts, demos and tests.

    ``json`` defaults to the ``KAFKA_ACTORS_LOG_JSON`` environment variable (``1`` = JSON);
    ``level`` to ``KAFKA_ACTORS_LOG_LEVEL`` (default ``INFO``). With ``stdlib=True`` events are
    handed to stdlib ``logging`` (loggers ``kafka_actors.*``) instead of being printed.
    """
    if json is None:
        json = os.environ.get("KAFKA_ACTORS_LOG_JSON", "") in ("1", "true", "yes")
    if level is None:
        level = os.environ.get("KAFKA_ACTORS_LOG_LEVEL", "INFO")
    numeric = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    processors = stdlib_processors()
    if stdlib:
        structlog.configure(
            processors=[
                structlog.stdlib.filter_by_level,
                structlog.stdlib.add_logger_name,
                *processors,
                _rename_reserved,
                structlog.stdlib.render_to_log_kwargs,
            ],
            logger_factory=structlog.stdlib.LoggerFactory(),
            wrapper_class=structlog.stdlib.BoundLogger,
            cache_logger_on_first_use=False,
        )
        return
    renderer: Processor = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            *processors,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
