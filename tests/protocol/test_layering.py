"""The protocol layer imports its own modules, errors and small leaf modules, never the package
root (which re-exports the front ends): ``kafka_actors/protocol`` stays importable on its own."""

from __future__ import annotations

import ast
from pathlib import Path

import kafka_actors
from kafka_actors.protocol import versions

PROTOCOL = Path(kafka_actors.__file__).resolve().parent / "protocol"


def _root_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name == "kafka_actors"]
        elif isinstance(node, ast.ImportFrom) and node.module == "kafka_actors" and not node.level:
            found.append(f"from kafka_actors import {', '.join(a.name for a in node.names)}")
    return found


def test_no_protocol_module_imports_the_package_root() -> None:
    offenders = {
        path.name: imports
        for path in sorted(PROTOCOL.glob("*.py"))
        if (imports := _root_imports(path))
    }
    assert offenders == {}


def test_the_client_software_version_is_the_package_version() -> None:
    assert versions.CLIENT_SOFTWARE_VERSION == kafka_actors.__version__
