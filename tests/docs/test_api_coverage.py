"""Every public name has an entry in the API reference of the built site.

The rule for what is public:

* every name in the ``__all__`` of the modules in :data:`PUBLIC_MODULES` (the package root and
  the modules users import from: the consumers, parallel processing, health, records and structs,
  errors, configuration, deserializers, logging, metrics, OpenTelemetry, OAuth, the testkit,
  the pykka and Thespian bridges, Spark), except names starting with an underscore
  (``__version__``) and the few in :data:`NOT_REFERENCED`, each with its reason;
* every public method and property of the consumer classes (:data:`CONSUMER_CLASSES`),
  inherited ones included.

Everything else (``protocol``, ``actors``, ``supervisors``, ``core``, the CLI's modules,
the bridges' shared core) is internal: its ``__all__`` organizes the code, it is no promise.

"An entry" is what mkdocstrings renders on the API pages (``docs/api.md``,
``docs/api-*.md``): an element whose ``id`` is the object's dotted path, as exported
(``kafka_actors.pykka.KafkaBridge``) or where it is defined
(``kafka_actors.bridges.messages.Subscribe``); a method's entry is under its class's entry.
The test reads the built pages, so a name that the ``:::`` directives would skip (an
inherited method, a member filtered out, no docstring without ``show_if_no_docstring``)
counts as missing.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

PUBLIC_MODULES = (
    "kafka_actors",
    "kafka_actors.consumer",
    "kafka_actors.aio",
    "kafka_actors.share_consumer",
    "kafka_actors.aio_share",
    "kafka_actors.parallel.consumer",
    "kafka_actors.parallel.aio",
    "kafka_actors.parallel.messages",
    "kafka_actors.health",
    "kafka_actors.structs",
    "kafka_actors.errors",
    "kafka_actors.config",
    "kafka_actors.serialization",
    "kafka_actors.log",
    "kafka_actors.metrics",
    "kafka_actors.otel",
    "kafka_actors.oauth",
    "kafka_actors.testing",
    "kafka_actors.pykka",
    "kafka_actors.thespian",
    "kafka_actors.spark",
)

#: Exported for the package's own modules, not for users: name -> why it has no entry.
NOT_REFERENCED = {
    "kafka_actors.share_consumer.ShareFrontEnd": (
        "the base the two share consumers share; its methods are documented on each of them"
    ),
    "kafka_actors.parallel.consumer.read_offset_metadata_max_bytes": (
        "a helper AsyncParallelConsumer imports from the sync module"
    ),
    "kafka_actors.aio.ConsumerRebalanceListener": (
        "the same class as kafka_actors.ConsumerRebalanceListener, re-exported for convenience"
    ),
}

CONSUMER_CLASSES = (
    "KafkaConsumer",
    "AsyncKafkaConsumer",
    "KafkaShareConsumer",
    "AsyncKafkaShareConsumer",
    "ParallelConsumer",
    "AsyncParallelConsumer",
)

_ID = re.compile(r'\bid="(kafka_actors[\w.]*)"')


@pytest.fixture(scope="module")
def anchors(docs_site: Path) -> set[str]:
    """The entries of the API pages: ``docs/api.md`` and ``docs/api-*.md``."""
    found: set[str] = set()
    pages = [docs_site / "api" / "index.html", *docs_site.glob("api-*/index.html")]
    for page in pages:
        found.update(_ID.findall(page.read_text(encoding="utf-8")))
    return found


def _paths(module: str, name: str) -> set[str]:
    """The dotted paths an entry for ``module.name`` may have."""
    paths = {f"{module}.{name}"}
    obj = getattr(importlib.import_module(module), name)
    defined_in = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if (
        isinstance(defined_in, str)
        and isinstance(qualname, str)
        and (defined_in.startswith("kafka_actors"))
    ):
        paths.add(f"{defined_in}.{qualname}")
    return paths


def public_names() -> list[tuple[str, str]]:
    names: list[tuple[str, str]] = []
    for module in PUBLIC_MODULES:
        exported = importlib.import_module(module).__all__
        for name in exported:
            if name.startswith("_") or f"{module}.{name}" in NOT_REFERENCED:
                continue
            names.append((module, name))
    return names


def consumer_methods(cls: type) -> list[str]:
    """Public methods and properties of ``cls``, inherited from our own classes too."""
    methods: list[str] = []
    for name in dir(cls):
        if name.startswith("_"):
            continue
        owner = next(base for base in cls.__mro__ if name in base.__dict__)
        if not owner.__module__.startswith("kafka_actors"):
            continue
        member = inspect.getattr_static(cls, name)
        if callable(member) or isinstance(member, (property, staticmethod, classmethod)):
            methods.append(name)
    return methods


def test_every_public_name_has_an_entry(anchors: set[str]) -> None:
    missing = [
        f"{module}.{name}" for module, name in public_names() if not _paths(module, name) & anchors
    ]
    assert not missing, f"{len(missing)} public names without an API entry: {missing}"


def test_every_public_consumer_method_has_an_entry(anchors: set[str]) -> None:
    import kafka_actors

    missing: list[str] = []
    for class_name in CONSUMER_CLASSES:
        cls = getattr(kafka_actors, class_name)
        entries = _paths("kafka_actors", class_name) & anchors
        assert entries, f"{class_name} has no API entry"
        for method in consumer_methods(cls):
            if not any(f"{entry}.{method}" in anchors for entry in entries):
                missing.append(f"{class_name}.{method}")
    assert not missing, f"{len(missing)} consumer methods without an API entry: {missing}"


def test_the_exclusions_are_still_exported() -> None:
    """An exclusion that no longer names an export is stale and goes."""
    for path in NOT_REFERENCED:
        module, _, name = path.rpartition(".")
        assert name in importlib.import_module(module).__all__, path


def test_every_public_consumer_method_has_a_docstring() -> None:
    """An entry without a docstring is only a signature: each consumer method says what it
    does."""
    import kafka_actors

    missing: list[str] = []
    for class_name in CONSUMER_CLASSES:
        cls = getattr(kafka_actors, class_name)
        for method in consumer_methods(cls):
            member = inspect.getattr_static(cls, method)
            if isinstance(member, property):
                member = member.fget
            if not inspect.getdoc(member):
                missing.append(f"{class_name}.{method}")
    assert not missing, f"consumer methods without a docstring: {missing}"
