"""The interim main job: ``python -m kafka_actors probe`` on the embedded mock cluster."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest

from kafka_actors.__main__ import _probe, _produce_demo


@pytest.mark.mock
def test_probe_prints_versions_metadata_and_all_records(mock_cluster: object) -> None:
    bootstrap = mock_cluster.bootstrap_servers  # type: ignore[attr-defined]
    mock_cluster.create_topic("probe-test", partitions=2)  # type: ignore[attr-defined]
    _produce_demo(bootstrap, "probe-test", 37)
    out = io.StringIO()
    assert _probe(bootstrap, "probe-test", out) == 0
    text = out.getvalue()
    assert re.search(r"Fetch\s+v\d+", text)
    assert re.search(r"ConsumerGroupHeartbeat\s+v\d+", text)
    assert "topic probe-test (2 partitions)" in text
    assert "== 37 records decoded" in text


def test_probe_command_end_to_end() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kafka_actors", "probe", "--records", "20"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    assert "embedded mock cluster at 127.0.0.1:" in proc.stdout
    assert "== 20 records decoded" in proc.stdout
