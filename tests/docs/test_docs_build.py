"""The documentation site builds in strict mode (a broken link, a missing page or a failed
API reference fails it), with the configuration reference generated from config.py and the
API reference from the docstrings; a broken link does fail the build."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("mkdocs")
pytest.importorskip("mkdocstrings")


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)},
    )


def test_docs_build_in_strict_mode(tmp_path: Path) -> None:
    from kafka_actors import config

    site = tmp_path / "site"
    proc = _build(ROOT / "mkdocs.yml", site)
    assert proc.returncode == 0, proc.stderr[-4000:]
    reference = (site / "configuration" / "index.html").read_text()
    for key in config._SPECS:
        assert f"<code>{key}</code>" in reference, key
    api = (site / "api" / "index.html").read_text()
    for name in (
        "KafkaConsumer",
        "AsyncKafkaConsumer",
        "commit_sync",
        "getmany",
        "DeserializationContext",
        "RecordDeserializationError",
    ):
        assert name in api, name
    assert (site / "getting-started" / "index.html").is_file()
    assert (site / "migration" / "index.html").is_file()


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    copy = tmp_path / "project"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    page = copy / "docs" / "delivery.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    proc = _build(copy / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode != 0
    assert "no-such-page.md" in proc.stderr
