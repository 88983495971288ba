"""A consumer its application never closed must not keep the Python process from exiting.

The actor threads are daemon threads and an ``atexit`` hook shuts every tree still running
down (bounded), so a script that forgets ``close()`` (or dies in the middle of its work with
an exception) still exits, as it does with the other Python clients. Each case runs in a child
process; without the fix the child never exits and ``subprocess.run`` times out (and kills it).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from tests.consumer.helpers import produce, unique

EXIT_WITHIN_S = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=EXIT_WITHIN_S,
        check=False,
    )


SYNC = """
    import sys
    from kafka_actors import KafkaConsumer
    c = KafkaConsumer(config={{
        "bootstrap.servers": "{bootstrap}", "group.id": "{group}",
        "auto.offset.reset": "earliest", "group.protocol": "{protocol}",
    }})
    c.subscribe(["{topic}"])
    got = 0
    for _ in range(200):
        got += len(c.poll(0.2))
        if got >= {wanted}:
            break
    print(f"got {{got}}", flush=True)
    {ending}
"""

ASYNC = """
    import asyncio
    from kafka_actors.aio import AsyncKafkaConsumer

    async def main() -> None:
        c = AsyncKafkaConsumer("{topic}", config={{
            "bootstrap.servers": "{bootstrap}", "group.id": "{group}",
            "auto.offset.reset": "earliest", "group.protocol": "{protocol}",
        }})
        got = 0
        for _ in range(200):
            batch = await c.getmany(timeout_ms=200)
            got += sum(len(v) for v in batch.values())
            if got >= {wanted}:
                break
        print(f"got {{got}}", flush=True)
        {ending}

    asyncio.run(main())
"""


@pytest.mark.parametrize("template", [SYNC, ASYNC], ids=["sync", "async"])
def test_unclosed_consumer_without_broker_lets_the_process_exit(template: str) -> None:
    # Nothing listens on the port: the network actor keeps reconnecting with backoff.
    script = template.format(
        bootstrap=f"127.0.0.1:{_free_port()}", group="g", protocol="consumer", topic="t",
        wanted=0, ending="pass",
    )
    done = _run(script)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "got 0" in done.stdout


@pytest.mark.broker
@pytest.mark.parametrize("protocol", ["consumer", "classic"])
@pytest.mark.parametrize("template", [SYNC, ASYNC], ids=["sync", "async"])
@pytest.mark.parametrize("ending", ["pass", "raise RuntimeError('the application failed')"])
def test_unclosed_group_member_lets_the_process_exit(
    kafka_broker: Any, protocol: str, template: str, ending: str
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("exit")
    kafka_broker.create_topic(topic, partitions=2)
    produce(bootstrap, topic, 50)
    script = template.format(
        bootstrap=bootstrap, group=unique("exit-g"), protocol=protocol, topic=topic,
        wanted=50, ending=ending,
    )
    done = _run(script)
    assert "got 50" in done.stdout, done.stderr[-3000:]
    if ending == "pass":
        assert done.returncode == 0, done.stderr[-3000:]
    else:
        assert done.returncode == 1
        assert "the application failed" in done.stderr
