"""bench/parallel.py's short form runs to the end: its own broker, two topics, every way of
handling (a poll loop, aiokafka with a task per partition, ParallelConsumer with each
ordering, AsyncParallelConsumer) reading its quota of records with a no-op and a 1 ms handler,
a table per topic and handler with ratios over the poll loop. A way that handles a record
twice or fewer than its quota fails the bench (non-zero exit and ``!!``), hence this test.
Rates are printed, not asserted."""

from __future__ import annotations

import importlib.util
import re
import sys
import threading
from pathlib import Path

import pytest

from tests.bench.runner import run_bench

WAYS = (
    "poll loop",
    "aiokafka task/partition",
    "parallel key",
    "parallel partition",
    "parallel unordered",
    "async key",
    "async partition",
    "async unordered",
)


@pytest.mark.broker
def test_parallel_bench_short_form() -> None:
    out = run_bench(
        "parallel.py",
        "--records",
        "2000",
        "--quota",
        "600",
        "--keys",
        "100",
        "--handlers",
        "0,1",
        "--seconds-sequential",
        "0.2",
        "--max-concurrency",
        "32",
        timeout=900,
    )
    assert "!!" not in out, out
    sections = out.split("\n\n")[1:]
    titles = [s.splitlines()[0] for s in sections]
    assert titles == [
        "1 partition(s), handler 0 ms",
        "1 partition(s), handler 1 ms",
        "8 partition(s), handler 0 ms",
        "8 partition(s), handler 1 ms",
    ], out
    row = re.compile(r"^(.+?)\s+(\d+)\s+([\d,]+)\s+([\d.]+)x$")
    for section in sections:
        rows = {}
        for line in section.splitlines()[2:]:
            match = row.match(line)
            assert match, (line, out)
            rows[match.group(1).strip()] = match
        assert set(rows) == set(WAYS), out
        assert rows["poll loop"].group(4) == "1.0"
        for match in rows.values():
            assert int(match.group(2)) > 0 and float(match.group(3).replace(",", "")) > 0


def _bench_tally() -> type:
    path = Path(__file__).resolve().parents[2] / "bench" / "parallel.py"
    spec = importlib.util.spec_from_file_location("bench_parallel_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # what its dataclasses look their module up in
    spec.loader.exec_module(module)
    return module.Tally  # type: ignore[no-any-return]


def test_the_bench_tally_counts_every_handling_from_many_threads_without_a_lock() -> None:
    # The bench's bookkeeping takes no lock; what it reports must still be exact: each
    # duplicate counted, the distinct places, the quota reached once.
    tally = _bench_tally()(quota=4000)

    def handle(start: int) -> None:
        for offset in range(start, 4000, 4):
            tally.add(0, offset)

    threads = [threading.Thread(target=handle, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert tally.done.is_set() and tally.twice == 0 and len(tally.seen) == 4000
    assert tally.rate > 0
    fresh = _bench_tally()(quota=3)
    for place in ((0, 1), (0, 2), (0, 1)):
        fresh.add(*place)
    assert fresh.done.is_set()
    assert (len(fresh.seen), fresh.twice) == (2, 1)  # the quota was reached with a duplicate
