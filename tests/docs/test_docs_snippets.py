"""The code blocks of the getting-started page and the migration guide marked
``<!-- run -->`` run as they are, in order, in one namespace per page, against the embedded
mock cluster each page starts (and stops) itself, as a reader would run them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.mock

_BLOCK = re.compile(r"<!-- run -->\s*\n```python\n(.*?)```", re.S)


def runnable_blocks(page: str) -> list[str]:
    return _BLOCK.findall((ROOT / "docs" / page).read_text())


@pytest.mark.parametrize("page", ["getting-started.md", "migration.md"])
def test_marked_code_blocks_run(page: str) -> None:
    pytest.importorskip("confluent_kafka")
    blocks = runnable_blocks(page)
    assert len(blocks) >= 3, f"{page}: expected marked blocks, found {len(blocks)}"
    namespace: dict[str, Any] = {"__name__": f"docs_{page}"}
    try:
        for i, code in enumerate(blocks):
            exec(compile(code, f"{page}[block {i}]", "exec"), namespace)
    finally:
        cluster = namespace.get("cluster")
        if cluster is not None and cluster.running:
            cluster.stop()
    assert namespace["cluster"].running is False, "the page stops its cluster"
