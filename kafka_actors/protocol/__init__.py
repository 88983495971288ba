"""kafka_actors.protocol

Importing this package loads kio's phantom-type base first, with hypothesis hidden from it
when no one has imported hypothesis yet. kio (``kio.static._phantom``) imports
``hypothesis.strategies`` whenever hypothesis is importable, and then registers a hypothesis
strategy for each of its primitive types as they are defined: about 0.1-0.2 s of start-up,
paid by every process where hypothesis happens to be installed (a developer's or a test
environment), for strategies only property tests use. kio has no setting for it. A process
that imported hypothesis before us (a test suite, a user's property tests) keeps kio's
strategies, since hypothesis is then in ``sys.modules`` and nothing is hidden.
"""

from __future__ import annotations

import sys


def _load_kio_phantom() -> None:
    if "kio.static._phantom" in sys.modules or "hypothesis" in sys.modules:
        return
    # A None entry in sys.modules makes ``import hypothesis`` raise ImportError, which kio
    # takes as "hypothesis is not installed". The entry lives only while kio's module runs.
    sys.modules["hypothesis"] = None  # type: ignore[assignment]
    try:
        import kio.static._phantom  # noqa: F401
    finally:
        if sys.modules.get("hypothesis", False) is None:
            del sys.modules["hypothesis"]


_load_kio_phantom()
