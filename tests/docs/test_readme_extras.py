"""The README's extras table has a row for every extra in pyproject.toml's
``[project.optional-dependencies]``, and no row for an extra that does not exist."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def declared_extras() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return set(project["optional-dependencies"])


def readme_extras() -> set[str]:
    """The extras named in the first column of the README's table of extras."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index("| extra | what it adds |") :]
    names: set[str] = set()
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        first = line.split("|")[1]
        names.update(re.findall(r"`([^`]+)`", first))
    assert names, "the README's table of extras is empty"
    return names


def test_every_extra_is_in_the_readme() -> None:
    missing = declared_extras() - readme_extras()
    assert not missing, f"extras missing from the README's table: {sorted(missing)}"


def test_the_readme_lists_no_unknown_extra() -> None:
    unknown = readme_extras() - declared_extras()
    assert not unknown, f"the README lists extras pyproject.toml does not have: {sorted(unknown)}"
