"""Capturing kafka-actors' log lines in a test.

Owns: :func:`capture_logs`, the stdlib-logging counterpart of ``structlog.testing.
capture_logs`` for our lines (which go through stdlib ``logging``, not through structlog's
global configuration, so structlog's own capture does not see them). May touch: the
``kafka_actors`` stdlib logger, for the duration of the block only.

Usage::

    from kafka_actors.testing import capture_logs

    with capture_logs() as logs:
        consumer.poll(1.0)
    assert any(e["event"] == "node_unavailable" and e["log_level"] == "warning" for e in logs)
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kafka_actors.log import RECORD_ATTRIBUTE, ROOT_LOGGER

__all__ = ["capture_logs"]


class _Capture(logging.Handler):
    def __init__(self, entries: list[dict[str, Any]]) -> None:
        super().__init__(logging.NOTSET)
        self.entries = entries

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, RECORD_ATTRIBUTE, None)
        entry = dict(fields) if isinstance(fields, dict) else {"event": record.getMessage()}
        entry["log_level"] = record.levelname.lower()
        if record.exc_info:
            entry["exc_info"] = record.exc_info
        self.entries.append(entry)


@contextmanager
def capture_logs(level: int = logging.DEBUG) -> Iterator[list[dict[str, Any]]]:
    """Every line kafka-actors logs inside the block at ``level`` or above, from any thread.

    Each entry is the line's event dict (``event``, the bound and call context, trace ids;
    secrets redacted) plus ``log_level`` (``"debug"`` ... ``"critical"``; ``exception()`` is
    ``"error"``), as in ``structlog.testing.capture_logs``. The ``kafka_actors`` logger is set
    to ``level`` meanwhile (a level set on one of its children still applies), and restored
    after; the application's handlers still receive what they did."""
    entries: list[dict[str, Any]] = []
    handler = _Capture(entries)
    logger = logging.getLogger(ROOT_LOGGER)
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield entries
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
