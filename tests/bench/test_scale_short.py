"""bench/scale.py's short form runs to the end: its own broker, two topics (1 and 8
partitions), every client reading every record (a client reading fewer or more fails the
bench), the paused consumer handing out nothing, the table, the two checks and the PNG.
Rates and CPU are printed, not asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ("kafka-actors", "confluent-kafka tuned", "aiokafka", "java")


@pytest.mark.broker
def test_scale_bench_short_form(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    png, rows = tmp_path / "scale.png", tmp_path / "scale.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "scale.py"),
            "--partitions",
            "1,8",
            "--brokers",
            "1",
            "--records",
            "2000",
            "--clients",
            ",".join(CLIENTS),
            "--paused-seconds",
            "1",
            "--plot",
            str(png),
            "--json",
            str(rows),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
        cwd=ROOT,
    )
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    table = json.loads(rows.read_text())
    assert {(r["client"], r["partitions"]) for r in table["rows"]} == {
        (c, p) for c in CLIENTS for p in (1, 8)
    }
    assert all(r["records"] == 2000 for r in table["rows"])
    paused = table["paused"]
    assert paused["partitions_read"] == 8 and paused["handed_out_after_pause"] == 0
    assert out.count("our CPU per record / confluent-kafka tuned's") == 2
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
