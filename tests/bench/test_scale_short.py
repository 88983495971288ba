"""bench/scale.py's short form runs to the end: its own broker, two topics (1 and 8
partitions), every client reading every record (a client reading fewer or more fails the
bench), the paused consumer handing out nothing, the table, the two checks and the PNG.
Rates and CPU are printed, not asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.runner import run_bench

CLIENTS = ("kafka-actors", "confluent-kafka tuned", "aiokafka", "java")


@pytest.mark.broker
def test_scale_bench_short_form(tmp_path: Path) -> None:
    png, rows = tmp_path / "scale.png", tmp_path / "scale.json"
    out = run_bench(
        "scale.py",
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
    )
    table = json.loads(rows.read_text())
    assert {(r["client"], r["partitions"]) for r in table["rows"]} == {
        (c, p) for c in CLIENTS for p in (1, 8)
    }
    assert all(r["records"] == 2000 for r in table["rows"])
    paused = table["paused"]
    assert paused["partitions_read"] == 8 and paused["handed_out_after_pause"] == 0
    assert out.count("our CPU per record / confluent-kafka tuned's") == 2
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
