"""Durations of a test run, from pytest's JUnit XML (``--junitxml``): the slowest tests, the time
per folder, and (``--update``) the per-file seconds that order the suite under xdist
(``tests/durations.json``, read by ``tests/conftest.py``).

    python scripts/test_durations.py .test-results/junit.xml            # tables
    python scripts/test_durations.py .test-results/junit.xml --top 50
    python scripts/test_durations.py .test-results/junit.xml --update   # refresh the order
    python scripts/test_durations.py after.xml --before before.xml      # side by side

A test's time is its setup + call + teardown as pytest measured it on the worker that ran it
(a session broker started by a test's setup is counted in that test).
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DURATIONS_JSON = ROOT / "tests" / "durations.json"


def read_junit(path: Path) -> dict[str, float]:
    """Test id (``folder/file.py::name``) to seconds."""
    out: dict[str, float] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        classname = case.get("classname", "")
        name = case.get("name", "")
        at = name.rfind("@")
        if at > name.rfind("]"):  # pytest-xdist's "@group" suffix (--dist loadgroup)
            name = name[:at]
        seconds = float(case.get("time", "0") or 0)
        parts = classname.split(".")
        # classname is "tests.folder.test_file" or "tests.folder.test_file.TestClass".
        module_end = next(
            (i for i, p in enumerate(parts) if i > 0 and p.startswith("test_")), len(parts) - 1
        )
        file = "/".join(parts[: module_end + 1]) + ".py"
        rest = "::".join([*parts[module_end + 1 :], name])
        key = f"{file}::{rest}"
        out[key] = out.get(key, 0.0) + seconds
    return out


def per_folder(tests: dict[str, float]) -> dict[str, tuple[int, float]]:
    folders: dict[str, list[float]] = defaultdict(list)
    for test_id, seconds in tests.items():
        file = test_id.split("::", 1)[0]
        folders[str(Path(file).parent)].append(seconds)
    return {k: (len(v), sum(v)) for k, v in folders.items()}


def per_file(tests: dict[str, float]) -> dict[str, float]:
    files: dict[str, float] = defaultdict(float)
    for test_id, seconds in tests.items():
        files[test_id.split("::", 1)[0]] += seconds
    return dict(files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", type=Path)
    parser.add_argument("--before", type=Path, help="an earlier run's JUnit XML, side by side")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--update", action="store_true", help=f"write {DURATIONS_JSON.name}")
    args = parser.parse_args(argv)

    after = read_junit(args.junit)
    before = read_junit(args.before) if args.before else None
    if not after:
        print(f"no test cases in {args.junit}", file=sys.stderr)
        return 1

    print(f"## Slowest {args.top} tests (setup + call + teardown, s)\n")
    print("| s | test |" if before is None else "| s | before s | test |")
    print("|---:|---|" if before is None else "|---:|---:|---|")
    for test_id, seconds in sorted(after.items(), key=lambda kv: -kv[1])[: args.top]:
        if before is None:
            print(f"| {seconds:.1f} | `{test_id}` |")
        else:
            b = before.get(test_id)
            print(f"| {seconds:.1f} | {'-' if b is None else f'{b:.1f}'} | `{test_id}` |")

    print("\n## Per folder (sum of test times, s)\n")
    a_f = per_folder(after)
    b_f = per_folder(before) if before is not None else {}
    if before is None:
        print("| folder | tests | s |\n|---|---:|---:|")
    else:
        print("| folder | tests | s | before tests | before s |\n|---|---:|---:|---:|---:|")
    for folder in sorted(set(a_f) | set(b_f), key=lambda f: -a_f.get(f, (0, 0.0))[1]):
        n, s = a_f.get(folder, (0, 0.0))
        if before is None:
            print(f"| {folder} | {n} | {s:.0f} |")
        else:
            bn, bs = b_f.get(folder, (0, 0.0))
            print(f"| {folder} | {n} | {s:.0f} | {bn} | {bs:.0f} |")
    total = sum(after.values())
    line = f"\ntotal: {len(after)} tests, {total:.0f} s of test time"
    if before is not None:
        line += f" (before: {len(before)} tests, {sum(before.values()):.0f} s)"
    print(line)

    if args.update:
        files = {k: round(v, 1) for k, v in sorted(per_file(after).items(), key=lambda kv: -kv[1])}
        DURATIONS_JSON.write_text(json.dumps(files, indent=1) + "\n")
        print(f"wrote {DURATIONS_JSON.relative_to(ROOT)} ({len(files)} files)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
