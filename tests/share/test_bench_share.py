"""bench/share.py's short form runs to the end: its own broker, the data produced once, each
client in its own process, every client (ours and the peers) reading all the records, a
table with ratios over our sync share consumer's row. A broken share consumer of ours fails
the bench (non-zero exit), hence this test."""

from __future__ import annotations

import pytest

from tests.bench.runner import run_bench

N = 3000


@pytest.mark.broker
def test_share_bench_short_form() -> None:
    out = run_bench("share.py", "--records", str(N))
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
