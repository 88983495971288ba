"""Dead letters: a record that failed ``max_attempts`` times, produced to the dead-letter
topic with headers that say where it came from and why it failed.

Owns: :class:`DeadLetterProducer` (confluent-kafka's ``Producer``, idempotent, ``acks=all``)
and :func:`dead_letter_headers`. May touch: confluent-kafka (an optional dependency: the
``mock`` extra), the :class:`~kafka_actors.parallel.messages.DeadLetter` values.

Headers (values UTF-8 text), after the record's own headers:

=============================== =================================================
``dlt.original.topic``          the record's topic
``dlt.original.partition``      its partition
``dlt.original.offset``         its offset
``dlt.original.timestamp``      its timestamp (ms) and type, ``1700000000000 CreateTime``
``dlt.exception.type``          the class name of the handler's last exception
``dlt.exception.message``       its message
``dlt.attempts``                how many times the handler ran
=============================== =================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kafka_actors.errors import KafkaError, MissingDependencyError
from kafka_actors.parallel.messages import DeadLetter

__all__ = ["DeadLetterProducer", "dead_letter_headers"]

_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


def dead_letter_headers(letter: DeadLetter) -> list[tuple[str, str | bytes | None]]:
    record = letter.record
    ts_type = _TIMESTAMP_TYPES.get(int(record.timestamp_type), "NoTimestampType")
    own: list[tuple[str, str | bytes | None]] = [
        (str(k), v if isinstance(v, bytes) else None) for k, v in (record.headers or ())
    ]
    return [
        *own,
        ("dlt.original.topic", record.topic.encode()),
        ("dlt.original.partition", str(record.partition).encode()),
        ("dlt.original.offset", str(record.offset).encode()),
        ("dlt.original.timestamp", f"{record.timestamp} {ts_type}".encode()),
        ("dlt.exception.type", letter.error_type.encode()),
        ("dlt.exception.message", letter.error_message.encode("utf-8", "replace")),
        ("dlt.attempts", str(letter.attempts).encode()),
    ]


class DeadLetterProducer:
    """Produces dead letters to ``topic``; ``on_delivery(work_id, error)`` is called from
    :meth:`poll` (on the caller's thread) once the broker acknowledged the record (error
    None) or the producer gave up on it."""

    def __init__(
        self,
        topic: str,
        config: Mapping[str, Any],
        on_delivery: Callable[[int, BaseException | None], None],
    ) -> None:
        try:
            from confluent_kafka import Producer
        except ImportError:
            raise MissingDependencyError(
                "dead_letter_topic needs confluent-kafka (pip install 'kafka-actors[mock]')"
            ) from None
        self.topic = topic
        self._on_delivery = on_delivery
        settings: dict[str, Any] = {
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "log_level": 3,
        }
        settings.update(config)
        self._producer = Producer(settings)

    def send(self, letter: DeadLetter) -> None:
        record = letter.record
        work_id = letter.work_id

        def delivered(err: Any, _msg: Any) -> None:
            self._on_delivery(work_id, None if err is None else KafkaError(str(err)))

        try:
            self._producer.produce(
                self.topic,
                key=record.key,
                value=record.value,
                headers=dead_letter_headers(letter),
                on_delivery=delivered,
            )
        except (BufferError, Exception) as exc:  # queue full, or a local produce error
            self._on_delivery(work_id, exc)
        self._producer.poll(0)

    def poll(self) -> None:
        self._producer.poll(0)

    def pending(self) -> int:
        return len(self._producer)

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` for dead letters in flight; returns how many remain."""
        remaining: int = self._producer.flush(max(0.0, timeout))
        return remaining
