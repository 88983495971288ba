"""Java's retry schedule, for tests that count requests over a simulated window.

Java's ``RequestState`` waits ``ExponentialBackoff(retry.backoff.ms, 2, retry.backoff.max.ms,
0.2).backoff(n)`` after the n-th failure since the last success (n from 0): at least
``0.8 * min(retry.backoff.ms * 2**n, retry.backoff.max.ms)``. :func:`java_max_requests` is the
most requests that schedule allows in a window when every answer is a failure that comes back
at once and every backoff is at its shortest.
"""

from __future__ import annotations

__all__ = ["MARGIN", "java_max_requests"]

#: Requests allowed above the schedule: one (the window's edge).
MARGIN = 1


def java_max_requests(
    window_ms: float, *, initial_ms: int = 100, max_ms: int = 1_000, jitter: float = 0.2
) -> int:
    """The first request at 0, then one after each shortest backoff, within ``window_ms``."""
    t = 0.0
    count = 1
    n = 0
    while True:
        term = min(initial_ms * 2**n, max_ms)
        t += (1.0 - jitter) * term
        if t > window_ms:
            return count
        count += 1
        n += 1
