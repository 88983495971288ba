"""Optional compiled speedups: the record decoder built with mypyc from its own source.

Owns: building a compiled copy of :mod:`kafka_actors.protocol.records` (unchanged source, one
line appended: the SHA-256 of that source) with mypyc into ``kafka_actors/_speedups/`` (a
directory of build output that git ignores), checking that a build matches the source it
sits beside, and swapping the pure module's public names for the compiled ones at import
(:func:`accelerate`, called by ``records.py`` itself).

Nothing changes in behaviour: the compiled module is the same code. Without a build, with a
stale one (``records.py`` changed since), or with ``KAFKA_ACTORS_PURE_PYTHON=1`` in the
environment, the pure-Python module is used. ``records.IMPLEMENTATION`` says which one is in
use (``"python"`` or ``"mypyc"``).

    python -m kafka_actors.speedups build     # needs mypy (mypyc) and a C compiler
    python -m kafka_actors.speedups status
    python -m kafka_actors.speedups clean

May touch: files under ``kafka_actors/_speedups/`` and a temporary build directory; runs
mypyc (a subprocess) only when asked to build.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

__all__ = ["PURE_ENV", "accelerate", "build", "clean", "main", "status"]

#: Set to 1 (or true / yes) to use the pure-Python modules even when a build is present.
PURE_ENV = "KAFKA_ACTORS_PURE_PYTHON"
_PACKAGE = Path(__file__).resolve().parent
_OUT = _PACKAGE / "_speedups"
_SOURCE = _PACKAGE / "protocol" / "records.py"
_COMPILED_NAME = "records_c"
_HASH_NAME = "KAFKA_ACTORS_SOURCE_SHA256"


def _source_hash(path: Path = _SOURCE) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _compiled_path() -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = _OUT / f"{_COMPILED_NAME}{suffix}"
        if candidate.exists():
            return candidate
    return None


def _pure_forced() -> bool:
    return os.environ.get(PURE_ENV, "").strip().lower() in ("1", "true", "yes")


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(_COMPILED_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def accelerate(module: ModuleType) -> bool:
    """Replace ``module``'s public names (its ``__all__``) by those of its compiled build when
    one is present, built from exactly this source, and not disabled; True when swapped."""
    if _pure_forced():
        return False
    path = _compiled_path()
    if path is None or module.__file__ is None:
        return False
    try:
        compiled = _load(path)
    except Exception:  # a build for another interpreter, a broken file: use the pure module
        return False
    if getattr(compiled, _HASH_NAME, None) != _source_hash(Path(module.__file__)):
        return False  # stale: built from another version of the source
    for name in module.__all__:
        value = getattr(compiled, name)
        if isinstance(value, type) and value.__module__ == compiled.__name__:
            try:  # pickle finds the class under the module users import it from
                value.__module__ = module.__name__
            except (AttributeError, TypeError):
                pass
        setattr(module, name, value)
    setattr(module, "IMPLEMENTATION", "mypyc")  # noqa: B010
    return True


def status() -> str:
    """One line: whether a build is present, current, and in use."""
    path = _compiled_path()
    if path is None:
        return "not built (pure Python)"
    try:
        compiled = _load(path)
    except Exception as exc:
        return f"unloadable build {path.name}: {exc!r} (pure Python)"
    current = getattr(compiled, _HASH_NAME, None) == _source_hash()
    if not current:
        return f"stale build {path.name}: records.py changed since (pure Python)"
    if _pure_forced():
        return f"built and current ({path.name}), disabled by {PURE_ENV} (pure Python)"
    return f"built and current ({path.name}): mypyc in use"


def build(*, quiet: bool = False) -> Path:
    """Compile a copy of records.py with mypyc into ``kafka_actors/_speedups/``."""
    source = _SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()
    with tempfile.TemporaryDirectory(prefix="kafka-actors-mypyc-") as tmp:
        work = Path(tmp)
        copy = work / f"{_COMPILED_NAME}.py"
        copy.write_bytes(source + f'\n{_HASH_NAME} = "{digest}"\n'.encode())
        env = {**os.environ, "MYPYPATH": str(_PACKAGE.parent)}
        proc = subprocess.run(
            [sys.executable, "-m", "mypyc", copy.name],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"mypyc failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        built = [
            p
            for p in work.iterdir()
            if p.name.startswith(_COMPILED_NAME) and p.suffix in (".so", ".pyd")
        ]
        if len(built) != 1:
            raise RuntimeError(f"unexpected mypyc output: {sorted(p.name for p in work.iterdir())}")
        _OUT.mkdir(exist_ok=True)
        (_OUT / ".gitignore").write_text("*\n")
        for old in _OUT.glob(f"{_COMPILED_NAME}*"):
            old.unlink()
        target = _OUT / built[0].name
        shutil.copy2(built[0], target)
    if not quiet:
        print(f"built {target}")
    return target


def clean() -> None:
    """Remove the build output (the pure modules are used afterwards)."""
    if _OUT.exists():
        shutil.rmtree(_OUT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kafka_actors.speedups", description=__doc__.splitlines()[0]
    )
    parser.add_argument("command", choices=("build", "status", "clean"))
    args = parser.parse_args(argv)
    if args.command == "build":
        build()
        print(status())
    elif args.command == "clean":
        clean()
        print(status())
    else:
        print(status())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
