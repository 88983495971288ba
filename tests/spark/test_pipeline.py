"""The main job, ``examples/orders_pipeline.py``, end to end as a user runs it: on the embedded
mock cluster (the default) and on a real broker (``--bootstrap-servers``). It must print window
aggregates and a progress line per batch, find every generated order exactly once in Parquet,
leave no group lag, and exit 0 by itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "orders_pipeline.py"

pytestmark = pytest.mark.timeout(900)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("pyspark", reason="pyspark (the 'spark' extra) is not installed")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    return subprocess.run(
        [sys.executable, str(PIPELINE), "--orders", "3000", "--rate", "3000", *args],
        capture_output=True,
        text=True,
        timeout=840,
        env=env,
        check=False,
    )


def _check(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    progress = re.findall(r"\[progress\] batch (\d+): rows (\d+), \d+ records/s", out)
    assert progress, out[-3000:]
    assert sum(int(rows) for _, rows in progress) >= 3000
    assert "windows closed by the watermark" in out
    assert re.search(r"^\d\d:\d\d:\d\d-\d\d:\d\d:\d\d\s+laptop\s+\d+\.\d\d", out, re.M)
    assert re.search(r"summary: 3000 orders in \d+ windows.*generated 3000 orders", out), out
    assert "final group lag 0" in out


@pytest.mark.mock
def test_pipeline_on_the_embedded_mock_cluster() -> None:
    _check(_run())


@pytest.mark.broker
def test_pipeline_on_a_real_broker(kafka_broker: Any) -> None:
    _check(_run("--bootstrap-servers", kafka_broker.bootstrap_servers, "--produce-demo"))
