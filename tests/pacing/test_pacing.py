"""No retry storm: each API answering each retriable error for a window (or a condition that
is the error: unknown topic, deleted topic, coordinator down) gets at most the requests Java's
retry schedule allows in that window, plus a stated margin (see :mod:`tests.pacing.cases`).

The cases run on the embedded mock cluster, :data:`JOBS` at a time (each on its own cluster)
in a module fixture that runs only the selected cases; each case is then its own test. A
loaded machine only lowers the counts (fewer polls, slower threads), never raises them.
"""

from __future__ import annotations

import pytest

from tests.pacing.cases import CASES, MARGIN, Case, Outcome, java_attempts, java_bound
from tests.pacing.table import run_all

pytestmark = pytest.mark.mock

JOBS = 3


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest) -> dict[str, Outcome]:
    selected: list[Case] = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        in_module = getattr(item, "module", None) is request.module
        if in_module and callspec is not None and "case" in callspec.params:
            selected.append(callspec.params["case"])
    results = run_all(selected, jobs=JOBS, peer=False)
    return {case_id: outcome for (case_id, _), outcome in results.items()}


def test_the_bound_follows_javas_schedule() -> None:
    # retry.backoff.ms=100 doubling to 1000, every jitter at 0.8: attempts at 0, 80, 240,
    # 560, 1200, 2000, 2800 ms; the next at 3600 ms is past a 3 s window.
    assert java_attempts(3000, 100, 1000) == 7
    assert java_bound(3.0) == 7 + MARGIN
    assert java_attempts(0, 100, 1000) == 1


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_no_retry_storm(case: Case, outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[case.id]
    bound = java_bound(outcome.window_s, case.per_attempt)
    assert not outcome.note, f"{case.id}: the case did not run as meant: {outcome.note}"
    # A case that may rightly stop at once (a Fetch of a deleted topic) came back with zero only
    # when a Metadata request in the window proved the client was looking (run_case).
    assert outcome.count >= 1 or case.may_stop, (
        f"{case.id}: no request of {case.api.api_name} in the window"
    )
    assert outcome.count <= bound, (
        f"{case.id}: {outcome.count} {case.api.api_name} requests in {outcome.window_s:g} s "
        f"answering {case.what}; Java's schedule allows {bound} (margin {MARGIN} included); "
        f"all requests of the run by API key: {outcome.by_api}"
    )
