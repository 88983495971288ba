"""The layer contract of the package, read from every module's imports (TYPE_CHECKING imports
included: a type is a dependency too).

From the bottom up:

* the shared leaves (``errors``, ``config``, ``log``, ``clock``, ``metrics``, ``serialization``,
  ``_version``, ``runtime``, ``retrying``) and the pure ``protocol`` layer: protocol imports
  only itself and errors/config/log/_version, never the package root (which re-exports the
  front ends), so ``kafka_actors/protocol`` stays importable on its own;
* ``structs`` and ``health`` (the public value types): protocol and the leaves;
* ``supervisors``: protocol, the leaves;
* ``actors``: protocol, supervisors, structs, the leaves (and ``oauth``, the token fetcher its
  connections use, and ``kerberos``, the GSSAPI login);
* ``core``: actors and everything below (``health``: what ``health()`` returns; ``kerberos``:
  the optional binding checked when a consumer is built);
* the front ends (``consumer``, ``aio``, ``aio_loop``, ``share_consumer``, ``aio_share``): the
  core and everything below it except the actors, which they reach only through the core.

No layer imports a layer above it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import kafka_actors
from kafka_actors.protocol.wire import versions

PACKAGE = Path(kafka_actors.__file__).resolve().parent
PROTOCOL = PACKAGE / "protocol"

LEAVES = frozenset(
    {
        "errors",
        "config",
        "log",
        "clock",
        "metrics",
        "serialization",
        "_version",
        "runtime",
        "retrying",
    }
)
#: What each layer may import besides itself (the first part of the module path under
#: ``kafka_actors``).
ALLOWED: dict[str, frozenset[str]] = {
    "protocol": frozenset({"errors", "config", "log", "_version"}),
    "structs": LEAVES | {"protocol"},
    "health": LEAVES | {"protocol"},
    "supervisors": LEAVES | {"protocol"},
    "actors": LEAVES | {"protocol", "supervisors", "structs", "oauth", "kerberos"},
    "core": LEAVES | {"protocol", "supervisors", "structs", "health", "actors", "kerberos"},
}
FRONT_ENDS = ("consumer", "aio", "aio_loop", "share_consumer", "aio_share")
for _front_end in FRONT_ENDS:
    ALLOWED[_front_end] = (
        LEAVES | {"protocol", "supervisors", "structs", "health", "core"} | set(FRONT_ENDS)
    )
#: Parallel processing is a front end on the front ends: it drives a KafkaConsumer through
#: its public API (its pure core, ``parallel/scheduler.py`` and below, imports only
#: protocol and the leaves).
ALLOWED["parallel"] = LEAVES | {"protocol", "supervisors", "structs"} | set(FRONT_ENDS)


def _layer(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _imported_layers(path: Path) -> dict[str, int]:
    """The layers ``path`` imports (``kafka_actors.<layer>...``), each with a line."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules = [node.module]
            if node.module == "kafka_actors":
                modules = [f"kafka_actors.{a.name}" for a in node.names]
        for module in modules:
            parts = module.split(".")
            if parts[0] == "kafka_actors":
                found.setdefault(parts[1] if len(parts) > 1 else "<root>", node.lineno)
    return found


def _offenders(layer: str) -> dict[str, list[str]]:
    allowed = ALLOWED[layer] | {layer}
    root = PACKAGE / layer
    paths = sorted(root.rglob("*.py")) if root.is_dir() else [PACKAGE / f"{layer}.py"]
    out: dict[str, list[str]] = {}
    for path in paths:
        bad = [
            f"{target} (line {line})"
            for target, line in _imported_layers(path).items()
            if target not in allowed
        ]
        if bad:
            out[str(path.relative_to(PACKAGE))] = bad
    return out


def test_the_layers_are_all_checked() -> None:
    for layer in ALLOWED:
        assert (PACKAGE / layer).is_dir() or (PACKAGE / f"{layer}.py").is_file(), layer
    # every wing of the protocol layer is read (the scan must keep working)
    wings = {p.relative_to(PROTOCOL).parts[0] for p in PROTOCOL.rglob("*.py")}
    assert {"wire", "records", "connection", "group", "fetch", "offsets", "share"} <= wings


def test_protocol_imports_only_itself_and_the_leaves_it_may() -> None:
    assert _offenders("protocol") == {}


def test_no_protocol_module_imports_the_package_root() -> None:
    offenders = {
        str(path.relative_to(PROTOCOL)): line
        for path in sorted(PROTOCOL.rglob("*.py"))
        if (line := _imported_layers(path).get("<root>")) is not None
    }
    assert offenders == {}


def test_structs_supervisors_actors_and_core_import_no_layer_above_them() -> None:
    for layer in ("structs", "supervisors", "actors", "core"):
        assert _offenders(layer) == {}, layer


def test_parallel_reaches_the_consumer_only_through_front_ends_and_its_core_is_pure() -> None:
    assert _offenders("parallel") == {}
    pure = ("offset_map", "window", "scheduler", "messages")
    for name in pure:
        layers = set(_imported_layers(PACKAGE / "parallel" / f"{name}.py"))
        assert layers <= {"errors", "protocol", "parallel"}, (name, layers)


def test_front_ends_reach_the_actors_only_through_the_core() -> None:
    for layer in FRONT_ENDS:
        assert _offenders(layer) == {}, layer


def test_the_client_software_version_is_the_package_version() -> None:
    assert versions.CLIENT_SOFTWARE_VERSION == kafka_actors.__version__
