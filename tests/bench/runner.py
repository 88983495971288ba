"""Runs a script of ``bench/`` in a fresh interpreter, as a user would, for the short-form
tests: this checkout first on ``PYTHONPATH``, from the repository's root, output captured. A
non-zero exit status fails the calling test with the end of both outputs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(script: str, *args: str, timeout: float = 600) -> str:
    """Run ``bench/<script>`` with ``args``; its standard output (it must exit 0)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout
