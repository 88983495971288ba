"""Print the pacing table: API x error -> requests in the window, ours, bound, librdkafka.

``python -m tests.pacing.table [--only SUBSTRING] [--jobs N] [--no-peer] [--window S]``
from the repository root. Every case runs on its own mock cluster (see
:mod:`tests.pacing.cases`); ``--jobs`` runs that many cases at once (a loaded machine
only lowers the counts, never raises them).
"""

from __future__ import annotations

import argparse
import logging
import sys
from concurrent.futures import ThreadPoolExecutor

from tests.pacing.cases import (
    CASES,
    MARGIN,
    RETRY_BACKOFF_MAX_MS,
    RETRY_BACKOFF_MS,
    WINDOW_S,
    Case,
    Outcome,
    java_bound,
    run_case,
)


def run_all(
    cases: list[Case], *, jobs: int = 1, peer: bool = True, window_s: float = WINDOW_S
) -> dict[tuple[str, str], Outcome]:
    """Outcomes per (case id, ``ours`` or ``librdkafka``)."""
    work = [(c, "ours") for c in cases]
    if peer:
        work += [(c, "librdkafka") for c in cases if c.peer]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {(c.id, who): pool.submit(run_case, c, who, window_s) for c, who in work}
        return {key: f.result() for key, f in futures.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", default="", help="run the cases whose id contains this")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--no-peer", action="store_true", help="skip the librdkafka column")
    parser.add_argument("--window", type=float, default=WINDOW_S)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)
    cases = [c for c in CASES if args.only in c.id]
    results = run_all(cases, jobs=args.jobs, peer=not args.no_peer, window_s=args.window)
    print(
        f"window {args.window:g} s, retry.backoff.ms={RETRY_BACKOFF_MS}, "
        f"retry.backoff.max.ms={RETRY_BACKOFF_MAX_MS}; bound = attempts of Java's schedule "
        f"with jitter 0.8 in the window + {MARGIN} = {java_bound(args.window)} "
        "(ApiVersions: 2 per attempt)"
    )
    header = f"| {'API':<22} | {'error / condition':<44} | {'client':<8} | {'inject':<6} "
    header += "| ours | bound | librdkafka | verdict |"
    print(header)
    print("|" + "|".join("-" * (len(part)) for part in header.split("|")[1:-1]) + "|")
    failed = 0
    for c in cases:
        ours = results[(c.id, "ours")]
        peer = results.get((c.id, "librdkafka"))
        what = c.what
        bound = java_bound(args.window, c.per_attempt)
        verdict = "ok" if ours.count <= bound else "STORM"
        failed += verdict != "ok"
        notes = "; ".join(n for n in (ours.note, peer.note if peer else "") if n)
        print(
            f"| {c.api.api_name:<22} | {what:<44} | {c.client:<8} | {c.inject:<6} "
            f"| {ours.count:>4} | {bound:>5} | {peer.count if peer else '-':>10} "
            f"| {verdict:<7} |" + (f" {notes}" if notes else "")
        )
    print(f"{failed} of {len(cases)} cases over the bound")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
