"""The process registry of the testkit: every JVM it starts, by PID, and their cleanup.

Owns: the process-wide table of started JVM processes (``subprocess.Popen`` objects, so a
PID is only ever signalled while its process is known to be ours), the set of cluster
directories still to remove, the atexit hook and the SIGTERM/SIGHUP handlers that stop those
processes (installed only where the signal has its default action), and the sweeping of
directories that dead testkit processes left behind. May touch: processes it registered
(by PID, never by name), those directories, ``/proc`` (read only).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

_registry_lock = threading.Lock()
_live: dict[int, subprocess.Popen[bytes]] = {}
_started_pids: set[int] = set()


def register(proc: subprocess.Popen[bytes]) -> None:
    with _registry_lock:
        _live[proc.pid] = proc
        _started_pids.add(proc.pid)


def unregister(proc: subprocess.Popen[bytes]) -> None:
    with _registry_lock:
        _live.pop(proc.pid, None)


def started_pids() -> frozenset[int]:
    """PIDs of every JVM this process has started (alive or not)."""
    with _registry_lock:
        return frozenset(_started_pids)


def pid_alive(pid: int) -> bool:
    """True if ``pid`` names a live process that is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def live_pids() -> list[int]:
    """PIDs of JVMs started by this process that are still alive."""
    with _registry_lock:
        procs = list(_live.values())
    return [p.pid for p in procs if p.poll() is None]


def terminate(procs: Sequence[subprocess.Popen[bytes]], timeout: float) -> None:
    """SIGTERM each process, wait up to ``timeout`` in all, then SIGKILL the rest."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        unregister(proc)


def kill_all(timeout: float = 10.0) -> list[int]:
    """Stop every JVM this process started and is still running; returns their PIDs."""
    with _registry_lock:
        procs = list(_live.values())
    alive = [p for p in procs if p.poll() is None]
    terminate(procs, timeout)
    return [p.pid for p in alive]


# Temporary directories of started clusters, removed at exit if their owner did not.
_dirs: set[Path] = set()


def _exit_cleanup() -> None:
    kill_all(timeout=10.0)
    with _registry_lock:
        dirs = list(_dirs)
        _dirs.clear()
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


_handlers_installed = False


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _exit_cleanup()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def install_exit_handlers() -> None:
    """atexit, plus SIGTERM/SIGHUP handlers where nobody else handles those signals."""
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(_exit_cleanup)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _on_signal)


DIR_PREFIX = "kafka-actors-"
OWNER_FILE = "owner.pid"


def _cwds_under(root: Path) -> bool:
    """True if any process we can see has its working directory inside ``root``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cwd == str(root) or cwd.startswith(f"{root}/"):
            return True
    return False


def sweep_stale_dirs() -> list[Path]:
    """Remove cluster directories left in the temp dir by testkit processes that died
    without cleaning up (e.g. SIGKILLed): only those whose ``owner.pid`` names a dead
    process and in which no live process (an orphaned JVM) still works. Returns them."""
    removed: list[Path] = []
    for d in Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}*"):
        try:
            owner = int((d / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not ours, or still being created
        if pid_alive(owner) or _cwds_under(d):
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


def register_dir(path: Path) -> None:
    """Remove ``path`` at exit (or on SIGTERM/SIGHUP) unless :func:`unregister_dir` ran."""
    with _registry_lock:
        _dirs.add(path)


def unregister_dir(path: Path) -> None:
    with _registry_lock:
        _dirs.discard(path)


def pdeathsig_prefix() -> list[str]:
    """``setpriv --pdeathsig KILL`` when available and we are on the main thread.

    The kernel delivers the parent-death signal when the *thread* that forked exits, so it
    is used only from the main thread, whose end is the process's end. It makes a JVM die
    even when this interpreter is SIGKILLed and no cleanup code can run.
    ``KAFKA_ACTORS_PDEATHSIG=0`` turns it off.
    """
    if threading.current_thread() is not threading.main_thread():
        return []
    if os.environ.get("KAFKA_ACTORS_PDEATHSIG", "1") == "0":
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL"] if setpriv else []
