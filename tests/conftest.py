"""Command-line options of the test suite."""

from __future__ import annotations

import pytest


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
        "--fuzz-seed",
        type=int,
        default=None,
        help="seed of the wire fault cases (default: fixed for the short run, random for the "
        "long one; printed either way)",
    )
