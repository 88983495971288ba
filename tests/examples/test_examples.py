"""The README's example commands: each runs to the end by itself and reports success.

On the embedded mock (what the README runs) and, for the asyncio service, against the real
broker under both group protocols (the mock refuses the classic protocol's JoinGroup). Each
example exits non-zero when a record was missed or processed twice, so a run that returns 0
is the example's own check passing; the output is asserted too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.consumer.helpers import unique

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    # This checkout's kafka_actors, not whichever one the interpreter has installed.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(EXAMPLES.parent), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
        env=env,
    )


@pytest.mark.mock
@pytest.mark.parametrize("run", range(3))
def test_asyncio_service_on_the_embedded_mock(run: int) -> None:
    done = _run("asyncio_service.py")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "10000 of 10000 records processed" in done.stdout
    assert "records processed more than once: 0" in done.stdout


@pytest.mark.broker
@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_asyncio_service_on_a_real_broker(kafka_broker: Any, protocol: str) -> None:
    topic = unique("payments")
    kafka_broker.create_topic(topic, partitions=6)
    done = _run(
        "asyncio_service.py",
        "--bootstrap-servers",
        kafka_broker.bootstrap_servers,
        "--topic",
        topic,
        "--records",
        "6000",
        "--group-protocol",
        protocol,
        "--produce-demo",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "6000 of 6000 records processed" in done.stdout
    assert "records processed more than once: 0" in done.stdout
    assert "revoked" in done.stdout  # the second worker's arrival revoked partitions


@pytest.mark.mock
@pytest.mark.parametrize("base", ["multiprocTCPBase", "simpleSystemBase"])
def test_thespian_service_on_the_embedded_mock(base: str) -> None:
    done = _run("thespian_service.py", "--base", base)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "committed offsets = end offsets" in done.stdout


@pytest.mark.mock
@pytest.mark.parametrize("run", range(2))
def test_pykka_service_on_the_embedded_mock(run: int) -> None:
    done = _run("pykka_service.py")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "10000 of 10000 records processed" in done.stdout
    assert "records processed more than once: 0" in done.stdout
    assert "committed offsets = end offsets" in done.stdout


@pytest.mark.parametrize("script", ["asyncio_service.py", "orders_pipeline.py"])
def test_examples_refuse_to_write_to_a_named_cluster_unless_asked(script: str) -> None:
    # Port 9 (discard) on loopback: nothing is contacted, the refusal comes first.
    done = _run(script, "--bootstrap-servers", "127.0.0.1:9")
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "--produce-demo" in done.stderr


def test_share_work_queue_needs_a_real_cluster_and_consent() -> None:
    # The librdkafka mock has no share groups: the example says so instead of hanging.
    done = _run("share_work_queue.py")
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "real cluster" in done.stderr
    done = _run("share_work_queue.py", "--bootstrap-servers", "127.0.0.1:9")
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "--produce-demo" in done.stderr


@pytest.mark.broker
def test_share_work_queue_on_a_real_broker(share_broker: Any) -> None:
    # Three threads and two asyncio workers (the example's defaults): sync and asyncio share
    # consumers in one share group.
    done = _run(
        "share_work_queue.py",
        "--bootstrap-servers",
        share_broker.bootstrap_servers,
        "--produce-demo",
        "--records",
        "1000",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "999 of 999 good jobs processed" in done.stdout
    assert "jobs processed more than once: 0" in done.stdout
    poison = next(line for line in done.stdout.splitlines() if line.startswith("poison job"))
    assert "(delivery 3); rejected" in poison, poison
    assert "(delivery 1)" in poison and "(delivery 2)" in poison
    workers = [line for line in done.stdout.splitlines() if line.startswith("  ")]
    assert len(workers) >= 2, f"the jobs did not spread over the workers:\n{done.stdout}"


def test_parallel_service_needs_a_real_cluster_and_consent() -> None:
    done = _run("parallel_service.py")
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "real cluster" in done.stderr
    done = _run("parallel_service.py", "--bootstrap-servers", "127.0.0.1:9")
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "--produce-demo" in done.stderr


@pytest.mark.broker
def test_parallel_service_on_a_real_broker(kafka_broker: Any) -> None:
    done = _run(
        "parallel_service.py",
        "--bootstrap-servers",
        kafka_broker.bootstrap_servers,
        "--produce-demo",
        "--topic",
        unique("orders"),
        "--records",
        "2000",
        "--customers",
        "200",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1999 of 1999 order events handled" in done.stdout
    assert "each customer's events in order: True" in done.stdout
    assert "events handled more than once: 0" in done.stdout
    assert "dead letters sent to" in done.stdout and ": 1 (after 3 failed attempts)" in done.stdout
