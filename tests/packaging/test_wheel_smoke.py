"""``python -m build`` makes an sdist and a wheel (the wheel built from the sdist, so both are
checked); the wheel installs with pip into a fresh virtual environment (pip's configured
index and cache for the dependencies), reports the version written in
``kafka_actors/__init__.py``, and runs the README's first example against the embedded mock
cluster, importing the installed package, not this source tree."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.mock


def _first_python_block(markdown: str) -> str:
    found = re.search(r"```python\n(.*?)```", markdown, re.S)
    assert found is not None, "README has no python example"
    return found.group(1)


def _run(cmd: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_wheel_installs_in_a_fresh_venv_and_runs_the_readme_example(tmp_path: Path) -> None:
    pytest.importorskip("build")
    src = tmp_path / "src"
    # A copy of the tracked files, so the build leaves nothing in the working tree.
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    dist = tmp_path / "dist"
    # As a user builds: an isolated build environment with the build-system requirements
    # (from pip's configured index; pip's cache keeps repeated runs fast).
    _run([sys.executable, "-m", "build", "--outdir", str(dist)], cwd=src)
    (sdist,) = dist.glob("kafka_actors-*.tar.gz")
    (wheel,) = dist.glob("kafka_actors-*.whl")
    assert sdist.stat().st_size > 0

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", f"{wheel}[mock]"], cwd=tmp_path)

    from kafka_actors import __version__

    where = _run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m, kafka_actors as k; "
            "print(k.__version__, m.version('kafka-actors'), k.__file__)",
        ],
        cwd=tmp_path,
    ).stdout.split()
    assert where[0] == where[1] == __version__
    assert where[2].startswith(str(env_dir)), where[2]

    example = tmp_path / "readme_example.py"
    example.write_text(_first_python_block((ROOT / "README.md").read_text()))
    out = _run([str(python), str(example)], cwd=tmp_path, timeout=120).stdout.splitlines()
    assert [line.split(" ", 3)[3] for line in out] == [f"order {i}" for i in range(10)]
