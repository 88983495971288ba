"""Logging of the Spark worker processes that host kafka-actors code.

Owns: :func:`quiet_logging`, which prints kafka-actors' log lines of a Spark Python worker
process on stderr at ``KAFKA_ACTORS_LOG_LEVEL`` (default WARNING), so the consumer's info
lines do not flood the driver's console. May touch: the ``kafka_actors`` stdlib logger of the
worker process only (through :func:`kafka_actors.log.configure`; never called in the user's
process).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

__all__ = ["quiet_logging"]

_done = False


class _SafeStream:
    """stderr that never raises: Spark closes a worker's pipes when it stops the worker, and a
    log line must not abort leaving the group."""

    def __init__(self, stream: Any) -> None:
        self._stream: Any = stream

    def write(self, text: str) -> int:
        if self._stream is not None:
            try:
                return int(self._stream.write(text))
            except (OSError, ValueError):
                self._stream = None
        return len(text)

    def flush(self) -> None:
        if self._stream is not None:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._stream = None


def quiet_logging() -> None:
    global _done
    if _done:
        return
    _done = True
    from kafka_actors.log import configure

    level = os.environ.get("KAFKA_ACTORS_LOG_LEVEL", "WARNING").upper()
    configure(level=level, stream=_SafeStream(sys.stderr))
    logging.getLogger("kafka_actors").setLevel(level)
