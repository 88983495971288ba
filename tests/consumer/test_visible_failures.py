"""Failures a user can see: a wrong ``bootstrap.servers`` is announced on stderr.

With default logging (nothing configured: stdlib logging's last resort prints WARNING and
above to stderr, ``%(message)s``, which carries the context: issue 25), a consumer whose
bootstrap server refuses connections logs a WARNING naming the address within
``reconnect.backoff.max.ms`` of its start (issue 10, Show 5), for the sync and the asyncio
consumer. Each runs in a child process (so logging is the untouched default of a new program),
which the test kills by its PID when done. The last resort prints no time: a line's time is
when this process read it from the pipe (``_Line.at``).
"""

from __future__ import annotations

import itertools
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

BACKOFF_MAX_MS = 2_000  # reconnect.backoff.max.ms (Java's default is 1000; slack for load)
ROOT = Path(__file__).resolve().parents[2]

_SYNC = """
    import sys, time
    from kafka_actors import KafkaConsumer
    print("START", time.time(), flush=True)
    consumer = KafkaConsumer({config!r})
    consumer.subscribe(["orders"])
    end = time.monotonic() + {run_s}
    while time.monotonic() < end:
        consumer.poll(0.2)
    consumer.close(timeout=5)
"""

_ASYNC = """
    import asyncio, sys, time
    from kafka_actors.aio import AsyncKafkaConsumer

    async def main():
        print("START", time.time(), flush=True)
        async with AsyncKafkaConsumer("orders", config={config!r}) as consumer:
            end = time.monotonic() + {run_s}
            while time.monotonic() < end:
                await consumer.getmany(timeout_ms=200)

    asyncio.run(main())
"""


def _closed_port() -> int:
    """A loopback port nobody listens on (bound, then closed: connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Line(str):
    """A stderr line of the child, with the time it was read (``time.time()``)."""

    at: float


def _read_lines(stream: Any, into: list[_Line]) -> None:
    for text in stream:
        line = _Line(text.rstrip("\n"))
        line.at = time.time()
        into.append(line)


def _run_child(script: str, run_s: float) -> tuple[float, list[_Line]]:
    """Run ``script`` for ``run_s`` seconds, then kill it (by its PID); its start time (from
    its stdout) and the stderr lines it wrote meanwhile."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_ACTORS_LOG")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[_Line] = []
    reader = threading.Thread(target=_read_lines, args=(proc.stderr or (), lines), daemon=True)
    reader.start()
    try:
        first = proc.stdout.readline() if proc.stdout else ""  # "START <time>" (or EOF)
        deadline = time.monotonic() + run_s
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        reader.join(timeout=10)
    match = re.search(r"START ([0-9.]+)", first)
    assert match, f"the child did not start: {first!r} {''.join(lines)[-2000:]!r}"
    return float(match.group(1)), lines


#: Slack of a gap between two lines' read times against the gap between their writes (the
#: reader thread may take a line late, then the next one at once).
READ_SLACK_S = 0.25


@pytest.mark.parametrize("front_end", ["sync", "asyncio"])
def test_wrong_bootstrap_server_warns_on_stderr(front_end: str) -> None:
    port = _closed_port()
    address = f"127.0.0.1:{port}"
    config = {
        "bootstrap.servers": address,
        "group.id": "visible-failures",
        "reconnect.backoff.max.ms": BACKOFF_MAX_MS,
    }
    run_s = 2.5 * BACKOFF_MAX_MS / 1000
    template = _SYNC if front_end == "sync" else _ASYNC
    script = textwrap.dedent(template).format(config=config, run_s=run_s)
    started, lines = _run_child(script, run_s)
    # The last resort prints WARNING and above only.
    warnings = [line for line in lines if address in line]
    assert warnings, "no WARNING naming the address on stderr:\n" + "\n".join(lines[-30:])
    first = warnings[0]
    assert first.startswith("node_unavailable "), first
    assert f"address={address} " in first, first
    assert 'reason="connection could not be established"' in first, first
    assert "Connection refused" in first, first
    assert first.at - started <= BACKOFF_MAX_MS / 1000, (first, first.at, started)
    # Every bootstrap server is down: said once per reconnect.backoff.max.ms.
    assert any("all_brokers_unavailable" in line and address in line for line in lines), lines
    # Rate-limited: at most one node_unavailable per node per reconnect.backoff.max.ms
    # (the consumer retried every 50..2000 ms meanwhile: without the limit, more lines).
    per_node = [line for line in warnings if line.startswith("node_unavailable ")]
    assert 1 <= len(per_node) <= run_s / (BACKOFF_MAX_MS / 1000) + 1, per_node
    gaps = [b.at - a.at for a, b in itertools.pairwise(per_node)]
    assert all(gap >= BACKOFF_MAX_MS / 1000 - READ_SLACK_S for gap in gaps), gaps
    # Nothing below WARNING by default (the INFO lines of a connection refused, of the start).
    assert not any(line.startswith(("node_connect_failed", "consumer_created")) for line in lines)


@pytest.mark.parametrize(
    "setup",
    [
        "from kafka_actors.log import configure; configure(level='ERROR')",
        "import logging; logging.getLogger('kafka_actors').setLevel(logging.ERROR)",
    ],
    ids=["configure", "stdlib-level"],
)
def test_unreachable_warning_is_silenced_by_the_level(setup: str) -> None:
    """The warnings go through stdlib logging: the level a program sets decides, through our
    configure() or through the ``kafka_actors`` logger as for any library."""
    port = _closed_port()
    script = (
        textwrap.dedent(
            """
        import time
        SETUP
        from kafka_actors import KafkaConsumer
        print("START", time.time(), flush=True)
        consumer = KafkaConsumer({"bootstrap.servers": "127.0.0.1:PORT"})
        consumer.subscribe(["orders"])
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            consumer.poll(0.2)
        consumer.close(timeout=5)
        """
        )
        .replace("PORT", str(port))
        .replace("SETUP", setup)
    )
    _started, lines = _run_child(script, 2.0)
    assert not any("node_unavailable" in line for line in lines), lines


def test_authentication_failure_warns_and_repeats_rate_limited(kafka_broker_secured: Any) -> None:
    """A wrong password: the first failure is a WARNING (node_authentication_failed); while
    the consumer keeps retrying, node_unavailable (reason 'authentication failed') repeats at
    most once per reconnect.backoff.max.ms; the password never appears."""
    spec = kafka_broker_secured.listener("SASL_PLAINTEXT")
    bootstrap = kafka_broker_secured.listener_bootstrap("SASL_PLAINTEXT")
    address = bootstrap.split(",")[0]
    password = "not-alices-password-7c1e"
    config = {
        "bootstrap.servers": bootstrap,
        "security.protocol": spec.security_protocol,
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": password,
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 800,
    }
    script = textwrap.dedent(
        """
        import time
        from kafka_actors import KafkaConsumer
        print("START", time.time(), flush=True)
        consumer = KafkaConsumer(CONFIG)
        consumer.assign([])
        end = time.monotonic() + 6
        while time.monotonic() < end:
            try:
                consumer.list_topics(timeout=1)
            except Exception:
                pass
        """
    ).replace("CONFIG", repr(config))
    _started, lines = _run_child(script, 8.0)
    text = "\n".join(lines)
    assert password not in text
    first = [line for line in lines if "node_authentication_failed" in line]
    assert first and address in first[0], text[-3000:]  # (the last resort: WARNING and up)
    repeats = [line for line in lines if "node_unavailable" in line and address in line]
    assert repeats, text[-3000:]
    assert all('reason="authentication failed"' in line for line in repeats), repeats
    gaps = [b.at - a.at for a, b in itertools.pairwise(repeats)]
    assert all(gap >= 0.8 - READ_SLACK_S for gap in gaps), gaps
