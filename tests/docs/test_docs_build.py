"""The documentation site builds in strict mode (a broken link, a missing page or a failed
API reference fails it), with the configuration reference generated from config.py and the
API reference from the docstrings; a broken link does fail the build."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.docs.site_build import ROOT, build_site


def test_docs_build_in_strict_mode(docs_site: Path) -> None:
    from kafka_actors import config

    site = docs_site
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
    for page in ("getting-started", "production", "guides/share-groups", "api-integrations"):
        assert (site / page / "index.html").is_file(), page
    assert (site / "migration" / "index.html").is_file()


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    copy = tmp_path / "project"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    page = copy / "docs" / "delivery.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    proc = build_site(copy / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode != 0
    assert "no-such-page.md" in proc.stderr
