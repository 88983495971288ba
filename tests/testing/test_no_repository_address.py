"""Kafka's and Spark's jars are resolved through Maven alone (its configured repositories and
mirrors): no repository address is written in the testkit or the benchmarks. The Maven POM
XML namespace is a name, not an address, and is allowed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POM_NAMESPACE = "http://maven.apache.org/POM/4.0.0"


def test_no_repository_address_in_jar_resolution_code() -> None:
    files = [*sorted((ROOT / "kafka_actors" / "testing").glob("*.py")), ROOT / "bench" / "spark.py"]
    found = []
    for path in files:
        text = path.read_text().replace(POM_NAMESPACE, "")
        found += [f"{path.name}: {m}" for m in re.findall(r"https?://[^\s\"')]+", text)]
    assert not found
