"""Installing the package the ordinary way gives the native record path; an install where
the C compiler fails gives the pure-Python path, and both decode records.

One clean virtual environment (no system site-packages), dependencies from the machine's
configured package index (pip's cache makes reruns quick); the project is copied as a fresh
clone would have it (tracked and new files, not ignored build output).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Run once (not rerun on failure): it is slow, and a failure is not flakiness.
pytestmark = [pytest.mark.install, pytest.mark.timeout(900)]

SMOKE = textwrap.dedent(
    """
    import json, sys
    from kafka_actors.errors import CorruptRecordError
    from kafka_actors.protocol.records import decode as records
    from kafka_actors.protocol.records.build import RecordSpec, build_batch
    from kafka_actors.protocol.records.decode import CompressionType, ConsumerRecord, decode_records

    specs = [RecordSpec(key=b"k%d" % i, value=b"v" * i, headers=(("h", b"%d" % i),))
             for i in range(50)]
    for codec in CompressionType:
        data = build_batch(specs, base_offset=7, compression=codec)
        decoded = decode_records(data, "t", 0, fetch_offset=9)
        got = list(decoded)
        assert [r.offset for r in got] == list(range(9, 57)), codec
        assert all(type(r) is ConsumerRecord for r in got)
        assert [r.value for r in got] == [s.value for s in specs[2:]], codec
        assert [r.headers for r in got] == [s.headers for s in specs[2:]], codec
        bad = bytearray(data)
        bad[-1] ^= 1
        try:
            decode_records(bytes(bad), "t", 0)
        except CorruptRecordError as exc:
            assert exc.offset == 7
        else:
            raise AssertionError("corrupt batch accepted")
    native = records._native
    print(json.dumps({
        "implementation": records.IMPLEMENTATION,
        "reason": records.NATIVE_UNAVAILABLE_REASON,
        "module": None if native is None else native.__file__,
        "records": records.__file__,
    }))
    """
)


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _smoke(python: Path, cwd: Path, env: dict[str, str]) -> dict[str, str]:
    import json

    lines = _run([str(python), "-c", SMOKE], cwd, env).strip().splitlines()
    result: dict[str, str] = json.loads(lines[-1])
    return result


def test_pip_install_gives_native_and_falls_back_without_a_compiler(tmp_path: Path) -> None:
    src = tmp_path / "src"
    files = _run(["git", "ls-files", "-co", "--exclude-standard", "-z"], ROOT).split("\0")
    for name in filter(None, files):
        if not (ROOT / name).is_file():
            continue  # deleted in the work tree
        target = src / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((ROOT / name).read_bytes())
    assert not list(src.rglob("*.so")), "build output copied"
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_ACTORS_", "PYTHON"))}
    work = tmp_path / "elsewhere"  # not the source tree: import the installed package
    work.mkdir()

    # 1. pip install . -> the native record path, from the installed package.
    _run([str(python), "-m", "pip", "install", "--quiet", str(src)], work, env)
    native = _smoke(python, work, env)
    assert native["implementation"] == "native", native
    site = str(venv / "lib")
    assert native["module"].startswith(site) and native["records"].startswith(site), native
    assert native["module"].endswith(".so")

    # 2. The same with a C compiler that fails: the install succeeds, the pure path is used
    #    (and says why), and decodes the same.
    no_cc = {**env, "CC": "/bin/false"}
    shutil.rmtree(src / "build", ignore_errors=True)  # pip built in the tree: no reuse
    _run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--force-reinstall",
            "--no-cache-dir",
            str(src),
        ],
        work,
        no_cc,
    )
    pure = _smoke(python, work, env)
    assert pure["implementation"] == "python", pure
    assert pure["module"] is None and "not built" in pure["reason"], pure

    # 3. An editable install builds it too (what scripts/bootstrap.sh does).
    _run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(src)], work, env)
    editable = _smoke(python, work, env)
    assert editable["implementation"] == "native", editable
    assert editable["module"].startswith(str(src)), editable
