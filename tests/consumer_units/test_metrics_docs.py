"""docs/metrics.md's table and the code name the same metrics (group, name, tags, unit)."""

from __future__ import annotations

import re
from pathlib import Path

from kafka_actors.clock import ManualClock
from kafka_actors.metrics import CATALOGUE, ConsumerMetrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
ROW = re.compile(r"^\| `([a-z-]+)` \| `([a-z-]+)` \| ([^|]*) \| `([^`]*)` \| ([^|]+) \|$")


def _table() -> list[tuple[str, str, tuple[str, ...], str]]:
    rows = []
    for line in DOC.read_text().splitlines():
        match = ROW.match(line)
        if match:
            name, group, tags, unit, meaning = match.groups()
            assert meaning.strip(), line
            rows.append((group, name, tuple(re.findall(r"`([a-z-]+)`", tags)), unit))
    return rows


def test_the_docs_table_lists_every_metric_of_the_code_and_no_other() -> None:
    table = _table()
    assert len(table) == len(set(table)), "a metric listed twice"
    code = [(s.group, s.name, s.tags, s.unit) for s in CATALOGUE]
    assert set(table) - set(code) == set(), "in the docs, not in the code"
    assert set(code) - set(table) == set(), "in the code, not in the docs"


def test_every_metric_a_consumer_registers_is_in_the_table() -> None:
    metrics = ConsumerMetrics("c", clock=ManualClock())
    metrics.fetch_response(1, 0, {"t": 1})
    metrics.consumed(1, 1, by_topic={"t": (1, 1)}, lag={("t", 0): 1}, lead={("t", 0): 1})
    registered = {(n.group, n.name, tuple(sorted(n.tags))) for n in metrics.view(dict)}
    documented = {(g, n, tuple(sorted(t))) for g, n, t, _ in _table()}
    assert registered == documented
