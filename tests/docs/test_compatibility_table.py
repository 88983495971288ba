"""The feature table of ``docs/compatibility.md`` names, for every row, tests that exist.

The table (the one whose header starts with ``feature``) has a ``tests`` column: segments
``label: refs`` separated by ``;``, the label naming what the tests run against (``4.4``,
``3.9``, ``mock``, ``units``) and each reference a pytest node id in backticks:
``tests/x/test_y.py`` (the whole file is about the row), ``tests/x/test_y.py::test_z`` or
``tests/x/test_y.py::TestClass::test_z``. The test fails when

* a row has no reference, or a segment has an unknown label or no reference;
* a referenced file does not exist, or (parsed with :mod:`ast`) has no such test function
  (parametrized ones are plain functions there; a ``[id]`` suffix is not allowed), or no such
  class and method;
* a version column claims a feature is tested on a broker without a test for it: a ``Kafka 4.x``
  cell whose qualifier does not start "(not tested" needs a ``4.4`` segment, such a
  ``Kafka 3.9`` cell a ``3.9`` segment whose tests take a 3.9 broker fixture (an argument named
  like ``kafka_broker_39``).

No broker: the page and the test files are only read.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "compatibility.md"
LABELS = ("4.4", "3.9", "mock", "units")
REFERENCE = re.compile(r"`([^`]*)`")
NODE_ID = re.compile(r"tests/[\w/]+\.py(?:::\w+){0,2}")


@dataclass(frozen=True)
class Row:
    line: int
    cells: dict[str, str]

    @property
    def feature(self) -> str:
        return self.cells["feature"]


def split_cells(line: str) -> list[str]:
    """The cells of a Markdown table line (``\\|`` is a pipe inside a cell)."""
    body = line.strip().removeprefix("|").removesuffix("|")
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", body)]


def feature_table(text: str) -> list[Row]:
    """The rows of the table whose header starts with ``feature``, by column name."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("|") and split_cells(line)[0] == "feature":
            header = split_cells(line)
            rows = []
            for number, row_line in enumerate(lines[index + 2 :], start=index + 3):
                if not row_line.startswith("|"):
                    break
                cells = split_cells(row_line)
                assert len(cells) == len(header), f"line {number}: {len(cells)} cells"
                rows.append(Row(number, dict(zip(header, cells, strict=True))))
            return rows
    raise AssertionError(f"{PAGE}: no table whose header starts with 'feature'")


def column(row: Row, prefix: str) -> str:
    (name,) = [name for name in row.cells if name.startswith(prefix)]
    return row.cells[name]


def segments(cell: str) -> dict[str, list[str]]:
    """``label: refs; label: refs`` -> {label: [node ids]}; labels must be known."""
    found: dict[str, list[str]] = {}
    for segment in filter(None, (s.strip() for s in cell.split(";"))):
        label, sep, refs = segment.partition(":")
        assert sep and label in LABELS, f"segment {segment!r}: a label of {LABELS} first"
        found.setdefault(label, []).extend(REFERENCE.findall(refs))
    return found


@cache
def definitions(path: Path) -> dict[str, ast.AST]:
    """Top-level functions and classes of a test file, and ``Class::method`` of classes."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    names[f"{node.name}::{member.name}"] = member
    return names


def reference_problem(reference: str, root: Path = ROOT) -> str | None:
    """Why ``reference`` names no test in the repository under ``root``, or None."""
    if not NODE_ID.fullmatch(reference):
        return f"{reference!r} is not a node id tests/...py[::name[::name]]"
    path_text, _, name = reference.partition("::")
    path = root / path_text
    if not path.is_file():
        return f"{path_text} does not exist"
    if not name:
        return None
    node = definitions(path).get(name)
    is_test = name.rpartition("::")[2].startswith("test")
    if not (is_test and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)):
        return f"{path_text} has no test {name}"
    return None


def takes_a_39_broker(reference: str, root: Path = ROOT) -> bool:
    path_text, _, name = reference.partition("::")
    node = definitions(root / path_text).get(name) if name else None
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    return any("39" in arg.arg for arg in node.args.args)


def untested(cell: str) -> bool:
    """A version cell that makes no claim of a test: its qualifier starts ``(not tested``
    (``yes (not tested)``, ``classic: yes (not tested; ...)``). A cell that says only part
    is untested (``yes (range ...; roundrobin: not tested)``) claims a test for the rest."""
    return "(not tested" in cell


def row_problems(row: Row, root: Path = ROOT) -> list[str]:
    where = f"line {row.line} ({row.feature[:50]})"
    try:
        found = segments(row.cells["tests"])
    except AssertionError as exc:
        return [f"{where}: {exc}"]
    problems = [] if any(found.values()) else [f"{where}: no test named"]
    problems += [f"{where}: '{label}:' names no test" for label, refs in found.items() if not refs]
    for refs in found.values():
        for reference in refs:
            problem = reference_problem(reference, root)
            if problem:
                problems.append(f"{where}: {problem}")
    if not untested(column(row, "Kafka 4")) and "4.4" not in found:
        problems.append(f"{where}: the Kafka 4.x cell claims a test, none is labelled '4.4:'")
    if not untested(column(row, "Kafka 3.9")):
        on_39 = [r for r in found.get("3.9", []) if takes_a_39_broker(r, root)]
        if not on_39:
            problems.append(
                f"{where}: the Kafka 3.9 cell does not say '(not tested' but no '3.9:' test "
                "takes a 3.9 broker fixture"
            )
    return problems


ROWS = feature_table(PAGE.read_text())


def test_the_table_has_the_rows_and_columns_it_promises() -> None:
    assert set(ROWS[0].cells) == {
        "feature",
        "Kafka 4.x (tested 4.4.0)",
        "Kafka 3.9 (tested 3.9.2)",
        "older 3.x / 2.x",
        "tests",
    }
    assert len(ROWS) >= 15
    assert len({row.feature for row in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[f"line{row.line}" for row in ROWS])
def test_every_row_names_tests_that_exist(row: Row) -> None:
    assert row_problems(row) == []


def test_version_cells_name_no_tests() -> None:
    """Tests belong in the tests column: the version cells say yes / no / notes."""
    for row in ROWS:
        for name, cell in row.cells.items():
            if name not in ("feature", "tests"):
                assert "tests/" not in cell and "test_" not in cell, (row.line, name, cell)


def test_every_test_named_anywhere_on_the_page_exists() -> None:
    """The prose beside the tables names tests too."""
    named = [r for r in REFERENCE.findall(PAGE.read_text()) if r.startswith("tests/")]
    assert named
    assert [p for p in map(reference_problem, named) if p] == []


def test_the_checks_catch_a_missing_or_wrong_reference(tmp_path: Path) -> None:
    """The checks fail on what they are for (a copy of a row, edited)."""
    (tmp_path / "tests" / "x").mkdir(parents=True)
    (tmp_path / "tests" / "x" / "test_y.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.parametrize('p', [1, 2])\n"
        "def test_here(p): ...\n\n"
        "def test_on_39(kafka_broker_39): ...\n\n"
        "def helper(): ...\n\n"
        "class TestC:\n    def test_m(self): ...\n"
    )
    cells = {
        "feature": "f",
        "Kafka 4.x (tested 4.4.0)": "yes",
        "Kafka 3.9 (tested 3.9.2)": "yes (not tested)",
        "older 3.x / 2.x": "yes (not tested)",
    }

    def problems(tests: str) -> list[str]:
        return row_problems(Row(1, {**cells, "tests": tests}), tmp_path)

    good = "4.4: `tests/x/test_y.py::test_here`, `tests/x/test_y.py::TestC::test_m`"
    assert problems(good) == []
    assert problems("units: `tests/x/test_y.py`") != []  # 4.x claims a test, none on 4.4
    assert problems("") != []
    assert problems("4.4:") != []
    assert problems("4.4 `tests/x/test_y.py::test_here`") != []  # no label
    assert problems("4.4: `tests/x/test_y.py::test_gone`") != []
    assert problems("4.4: `tests/x/test_y.py::helper`") != []
    assert problems("4.4: `tests/x/test_y.py::TestC::test_gone`") != []
    assert problems("4.4: `tests/x/test_nope.py`") != []
    assert problems("4.4: `tests/x/test_y.py::test_here[1]`") != []
    partly = {**cells, "Kafka 4.x (tested 4.4.0)": "yes (b: not tested)"}
    assert row_problems(Row(1, {**partly, "tests": "units: `tests/x/test_y.py`"}), tmp_path)
    row_39 = Row(1, {**cells, "Kafka 3.9 (tested 3.9.2)": "yes", "tests": good})
    assert row_problems(row_39, tmp_path) != []  # 3.9 claimed, nothing runs on 3.9
    row_39.cells["tests"] = good + "; 3.9: `tests/x/test_y.py::test_here`"
    assert row_problems(row_39, tmp_path) != []  # labelled 3.9, but takes no 3.9 broker
    row_39.cells["tests"] = good + "; 3.9: `tests/x/test_y.py::test_on_39`"
    assert row_problems(row_39, tmp_path) == []
