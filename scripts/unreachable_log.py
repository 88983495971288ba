"""What a user sees, at the default log level, of a consumer whose broker cannot be reached.

Starts a KafkaConsumer (group.id set) whose bootstrap.servers is a loopback port nobody
listens on, subscribes, polls for ``--seconds`` (default 60), closes, and leaves logging as a
user who never configured it has it: kafka-actors' default output (WARNING and above, to
stderr). Prints a summary of the lines it logged at the end (to stdout).

    python scripts/unreachable_log.py [--seconds 60] [--topic orders]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import socket
import sys
import time
from pathlib import Path

# This checkout's kafka_actors, not an installed one.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def closed_port() -> int:
    """A loopback port that was free a moment ago (bound, then closed: nothing listens)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class _Tee(io.TextIOBase):
    """stderr as it was, plus a copy of every line written (to count them)."""

    def __init__(self, target: io.TextIOBase) -> None:
        self.target = target
        self.copy = io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.target.write(text)

    def flush(self) -> None:
        self.target.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--topic", default="orders")
    args = parser.parse_args()

    from kafka_actors import KafkaConsumer

    tee = _Tee(sys.stderr)  # type: ignore[arg-type]
    address = f"127.0.0.1:{closed_port()}"
    print(f"# bootstrap.servers={address}, polling {args.seconds:g} s", flush=True)
    started = time.monotonic()
    with contextlib.redirect_stderr(tee):  # type: ignore[type-var]
        consumer = KafkaConsumer({"bootstrap.servers": address, "group.id": "unreachable-demo"})
        consumer.subscribe([args.topic])
        while time.monotonic() - started < args.seconds:
            consumer.poll(1.0)
        consumer.close()
    lines = [line for line in tee.copy.getvalue().splitlines() if line.strip()]
    elapsed = time.monotonic() - started
    print(f"# {len(lines)} lines logged in {elapsed:.1f} s (including close)", flush=True)


if __name__ == "__main__":
    main()
