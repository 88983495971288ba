"""Command-line options of the test suite."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from hypothesis import HealthCheck, settings


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kafka-actors")
    group.addoption(
        "--fuzz-minutes",
        type=float,
        default=0.0,
        help="run the wire fault-injection fuzzer (tests/wire_faults) for N minutes of random "
        "cases, beside its short fixed run",
    )
    group.addoption(
        "--run-quarantined",
        action="store_true",
        default=False,
        help="run the tests marked quarantine (skipped otherwise, with their reason)",
    )
    group.addoption(
        "--fuzz-seed",
        type=int,
        default=None,
        help="seed of the wire fault cases (default: fixed for the short run, random for the "
        "long one; printed either way)",
    )


# --- Running the suite side by side (pytest-xdist, ``--dist loadgroup``) -------------------
#
# Each xdist worker is its own process with its own session fixtures, so a session broker is
# started once per worker that needs it. Cheap ones (one KRaft node, the in-process mock) are
# left to spread: the tests using them are independent (unique topics and groups) and a
# worker's broker is started once. Expensive or stateful ones are kept on one worker by an
# ``xdist_group``: a test module that starts its own brokers in a module fixture runs whole on
# one worker (its brokers start once), and the tests of a heavy session fixture (the 3-broker
# cluster, Kafka 3.9, the secured node) run on one worker. The Spark session spreads like the
# single brokers (one per worker: a single worker running every Spark test was the long pole).
#
# Order: xdist hands tests out in collection order as workers free up, so the files that take
# longest go first (``tests/durations.json``, seconds per file from a full run; refresh with
# ``python scripts/test_durations.py .test-results/junit.xml --update``); within a file the
# order is kept.

#: Session fixtures that do not tie their tests to one worker: the cheap brokers and Spark,
#: started once per worker, and pytest's and its plugins' own, which start nothing.
_UNGROUPED_SESSION_FIXTURES = frozenset(
    {
        "kafka_broker",
        "share_broker",
        "mock_cluster",
        "spark",
        "tmp_path_factory",
        "tmpdir_factory",
        "worker_id",
        "testrun_uid",
        "cache",
        "anyio_backend",
    }
)
_DURATIONS = Path(__file__).with_name("durations.json")


def _xdist_group(item: pytest.Item) -> str | None:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    heavy_session: list[str] = []
    for name, defs in info.name2fixturedefs.items():
        if not defs:
            continue
        scope = defs[-1].scope
        if scope in ("module", "class", "package"):
            return f"file:{item.path.relative_to(item.config.rootpath)}"
        if scope == "session" and name not in _UNGROUPED_SESSION_FIXTURES:
            heavy_session.append(name)
    if heavy_session:
        return "session:" + sorted(heavy_session)[0]
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        per_file: dict[str, float] = json.loads(_DURATIONS.read_text())
    except (OSError, ValueError):
        per_file = {}
    root = config.rootpath

    def weight(item: pytest.Item) -> float:
        return per_file.get(str(item.path.relative_to(root)), 0.0)

    # A stable sort: files by descending measured time, each file's own order kept.
    items.sort(key=lambda it: -weight(it))
    # In a worker, xdist has set ``dist`` back to "no" by now and keeps the choice in
    # ``loadgroup`` (the controller schedules by the group suffixes the workers report: marks
    # added only in the controller group nothing).
    if getattr(config.option, "loadgroup", False) or config.getoption("dist", "no") == "loadgroup":
        for item in items:
            group = _xdist_group(item)
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(trylast=True)  # after xdist's own hook wrote the group suffixes
def pytest_collection_finish(session: pytest.Session) -> None:
    """In a worker of ``--dist loadgroup``: every grouped test's id must carry its group, or the
    controller schedules it alone (a module fixture then runs once per worker, a heavy session
    fixture starts on every worker). pytest 9.2 with pytest-xdist 3.8 did that silently."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [
        item.nodeid
        for item in session.items
        if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid
    ]
    if lost:
        raise pytest.UsageError(
            f"{len(lost)} tests have an xdist_group mark but no group in their id (first: "
            f"{lost[0]}): this pytest and pytest-xdist do not group; pin pytest as "
            "pyproject.toml's test extra does"
        )


# --- Hypothesis: no wall-clock limits ------------------------------------------------------
# Tests assert behaviour, never timings: on a shared 2-core machine running four workers, a
# property test's example may take longer than Hypothesis's default 200 ms deadline, and input
# generation longer than its health check allows, with nothing wrong in the code. The number
# of examples and their shrinking are unchanged.
settings.register_profile(
    "kafka-actors",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("kafka-actors")


# --- Each test starts with logging as the session found it ---------------------------------
# A test that configures logging (kafka_actors.log.configure, a level, a handler, structlog's
# configuration) and does not restore it changed what every later test of the same process
# logs: which tests follow which depends on how the run is split across workers, so a test
# reading its logs passed or failed by order. Restored after every test: structlog's
# configuration, and the handlers, level and propagation of the ``kafka_actors`` logger (where
# kafka_actors.log.configure puts its handler; the root logger's handlers are pytest's, which
# adds and removes its own at each phase of a test).
@pytest.fixture(autouse=True)
def _logging_as_the_session_found_it() -> Iterator[None]:
    was_configured = structlog.is_configured()
    before = structlog.get_config()
    ours = logging.getLogger("kafka_actors")
    handlers, level, propagate = ours.handlers[:], ours.level, ours.propagate
    yield
    ours.handlers[:] = handlers
    ours.setLevel(level)
    ours.propagate = propagate
    if structlog.is_configured() == was_configured and structlog.get_config() == before:
        return
    if was_configured:
        structlog.configure(**before)
    else:
        structlog.reset_defaults()


# --- Quarantine ----------------------------------------------------------------------------
# ``@pytest.mark.quarantine("why; issue N")``: a test that failed in a full run for a reason
# not yet understood or fixed is skipped (the reason is printed in the summary), never rerun
# until it passes. ``--run-quarantined`` runs them.
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "quarantine(reason): failed in a full run, not yet fixed; skipped (see reason)"
    )


#: Parametrized cases quarantined by test id (a mark cannot name one case of a fixture's
#: parameters): failed in a full run, not yet understood; each reason names its issue.
_QUARANTINED_IDS: dict[str, str] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    reason = _QUARANTINED_IDS.get(item.nodeid.split("@", 1)[0])
    if reason is not None and not item.config.getoption("--run-quarantined"):
        pytest.skip(f"quarantined: {reason}")
    mark = item.get_closest_marker("quarantine")
    if mark is not None and not item.config.getoption("--run-quarantined"):
        pytest.skip(f"quarantined: {mark.args[0] if mark.args else 'no reason given'}")
