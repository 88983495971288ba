"""The consumer side of a fault case, run in a child process (``python -m
tests.wire_faults.child '<json spec>'``) so that an abort kills this process, not pytest.

Owns: one KafkaConsumer and the report it prints. It subscribes (or assigns) to the case's
topic, asks for metadata, polls until every expected record arrived or the case's deadline
passed, asks for positions, commits, reads the commit back and closes, timing every call. The
last line on stdout is a JSON report: records (partition, offset, key, value, headers), every
exception a call raised (class and module), calls that returned later than their timeout
allows, RSS at the start and at its peak, how long close() took. The parent decides.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


FAILED = object()  # what Calls.run returns when the call raised


class Calls:
    """Runs consumer calls, timing each and recording what it raised (once per call and error
    class, with a count)."""

    def __init__(self, slack: float) -> None:
        self.slack = slack
        self.errors: list[dict[str, Any]] = []
        self._seen: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.late: list[dict[str, Any]] = []
        self.count = 0

    def failed(self, name: str, exc: BaseException) -> None:
        key = (name, type(exc).__module__, type(exc).__name__)
        seen = self._seen.get(key)
        if seen is not None:
            seen["count"] += 1
            return
        self._seen[key] = entry = {
            "call": name,
            "type": type(exc).__name__,
            "module": type(exc).__module__,
            "message": str(exc)[:500],
            "retriable": getattr(exc, "retriable", None),
            "count": 1,
            "traceback": traceback.format_exc()[-1500:]
            if not type(exc).__module__.startswith("kafka_actors")
            else "",
        }
        self.errors.append(entry)

    def run(self, name: str, limit: float, call: Any, *args: Any, **kwargs: Any) -> Any:
        self.count += 1
        started = time.monotonic()
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            self.failed(name, exc)
            if name == "poll":
                time.sleep(limit)  # as a user loop would: no spinning on a failing poll
            return FAILED
        finally:
            took = time.monotonic() - started
            if took > limit + self.slack:
                self.late.append({"call": name, "timeout": limit, "took": round(took, 3)})


def main(spec: dict[str, Any]) -> dict[str, Any]:
    from kafka_actors import KafkaConsumer, TopicPartition

    if os.environ.get("KAFKA_ACTORS_LOG_LEVEL"):  # to debug a case: its logs on stderr
        from kafka_actors import log

        log.configure()
    rss_start = _rss_kb("VmRSS")
    calls = Calls(spec.get("slack", 5.0))
    topic = spec["topic"]
    partitions = [TopicPartition(topic, p) for p in range(spec["partitions"])]
    expected = spec["expected"]
    deadline = time.monotonic() + spec["deadline_s"]
    records: list[list[Any]] = []
    consumer = None
    close_s: float | None = None
    committed: dict[str, Any] = {}
    try:
        consumer = KafkaConsumer(spec["config"])
        api_timeout = spec["config"]["default.api.timeout.ms"] / 1000.0
        if spec.get("group", True):
            consumer.subscribe([topic])
        else:
            consumer.assign(partitions)
        calls.run("list_topics", 3.0, consumer.list_topics, timeout=3.0)
        linger_until = time.monotonic() + spec.get("min_run_s", 0.0)
        while (
            len(records) < expected or time.monotonic() < linger_until
        ) and time.monotonic() < deadline:
            got = calls.run("poll", 0.5, consumer.poll, 0.5)
            for record in () if got is FAILED else got:
                records.append(
                    [
                        record.partition,
                        record.offset,
                        None if record.key is None else record.key.hex(),
                        None if record.value is None else record.value.hex(),
                        [[k, None if v is None else bytes(v).hex()] for k, v in record.headers],
                    ]
                )
        for tp in partitions:
            calls.run("position", 3.0, consumer.position, tp, timeout=3.0)
        if spec.get("group", True) and records:
            # Commit what was consumed; retry typed failures until the case's deadline.
            while time.monotonic() < deadline + api_timeout:
                done = calls.run(
                    "commit_sync", api_timeout, consumer.commit_sync, timeout=api_timeout
                )
                if done is not FAILED:
                    break
                time.sleep(0.2)
            found = calls.run(
                "committed", api_timeout, consumer.committed, set(partitions), timeout=api_timeout
            )
            for tp, meta in ({} if found is FAILED else found).items():
                committed[str(tp.partition)] = None if meta is None else meta.offset
    except Exception as exc:  # an error outside the timed calls (constructor, subscribe)
        calls.failed("setup", exc)
    finally:
        if consumer is not None:
            close_timeout = spec.get("close_timeout_s", 10.0)
            started = time.monotonic()
            calls.run("close", close_timeout, consumer.close, timeout=close_timeout)
            close_s = round(time.monotonic() - started, 3)
    return {
        "records": records,
        "errors": calls.errors,
        "late": calls.late,
        "calls": calls.count,
        "committed": committed,
        "close_s": close_s,
        "rss_start_kb": rss_start,
        "rss_peak_kb": _rss_kb("VmHWM"),
    }


if __name__ == "__main__":
    report = main(json.loads(sys.argv[1]))
    sys.stdout.write("\nREPORT " + json.dumps(report) + "\n")
    sys.stdout.flush()
