"""bench/share.py's short form runs to the end: its own broker, the data produced once, each
client in its own process, every client (ours and the peers) reading all the records, a
table with ratios over our sync share consumer's row. A broken share consumer of ours fails
the bench (non-zero exit), hence this test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
N = 3000


@pytest.mark.broker
def test_share_bench_short_form() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "share.py"), "--records", str(N)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
        cwd=ROOT,
    )
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert "!!" not in out, out  # a client that read fewer records than produced
    rows = {line.split("  ")[0].strip(): line for line in out.splitlines() if "x " in line}
    peers = {"confluent-kafka", "confluent-kafka explicit", "java"}
    ours = {
        "kafka-actors",
        "kafka-actors explicit",
        "kafka-actors async",
        "kafka-actors async iter",
        "kafka-actors big polls",
    }
    assert peers | ours <= rows.keys(), out
    assert "ka/peer rate" in out
    assert rows["kafka-actors"].rstrip().endswith("1.00x")
