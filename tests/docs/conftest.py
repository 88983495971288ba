"""The documentation site, built once per session in strict mode (``mkdocs build --strict``),
for the tests that read the built pages."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.site_build import ROOT, build_site


@pytest.fixture(scope="session")
def docs_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's own site, built in strict mode; the build must succeed."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    site = tmp_path_factory.mktemp("docs") / "site"
    proc = build_site(ROOT / "mkdocs.yml", site)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return site
