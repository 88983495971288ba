"""Start-up cost of kafka-actors (issue 26): how long a fresh interpreter takes to import the
package and to construct a consumer, and, with ``--broker``, from process start to the first
record (beside aiokafka's).

Every measurement is a new interpreter (``python -c``) whose working directory is the tree
being measured, so that tree's ``kafka_actors`` is imported (``--root DIR`` measures another
checkout with this script, e.g. an older commit's worktree). The wall time is taken by this
process around the child (``subprocess.run``): interpreter start-up included, warm file cache.
Rows, each the median (and best) of ``--runs`` children:

* ``python -c pass``: the interpreter alone (the floor every row includes);
* ``import kafka_actors``;
* ``from kafka_actors import KafkaConsumer``;
* ``construct KafkaConsumer``: the import plus
  ``KafkaConsumer(bootstrap_servers=..., group_id=...)`` and ``close()`` against a port
  nothing listens on (no network: the actors start, nothing connects before the first call);

then the top ``--top`` items of ``-X importtime`` (cumulative microseconds, one child) of
``from kafka_actors import KafkaConsumer``.

With ``--broker`` a real broker is started by the testkit (or ``--bootstrap HOST:PORT`` is
used), a topic gets ``100`` small records, and each child imports the client, creates a
consumer, assigns partition 0, seeks to the beginning and polls until the first record; the
time is from this process's ``Popen`` to the child's report of its first record (the child
prints ``time.perf_counter()`` offsets; the parent adds its own start-up gap, measured the same
way as the rows above). aiokafka (``getmany``) is measured beside it when it is installed.

    .venv/bin/python bench/startup.py [--runs 10] [--top 15] [--root DIR ...] [--broker]
        [--bootstrap HOST:PORT]

``--root DIR`` more than once sets trees side by side (the broker section on one broker and
topic for all of them; aiokafka with the first).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

IMPORT = "import kafka_actors"
FROM = "from kafka_actors import KafkaConsumer"
CONSTRUCT = (
    "from kafka_actors import KafkaConsumer\n"
    "c = KafkaConsumer(bootstrap_servers='127.0.0.1:1', group_id='startup-bench', "
    "client_id='startup-bench')\n"
    "c.close(timeout=5)\n"
)

FIRST_KA = """
import time, sys
t_start = time.perf_counter()
from kafka_actors import KafkaConsumer, TopicPartition
c = KafkaConsumer(bootstrap_servers=sys.argv[1], enable_auto_commit=False)
tp = TopicPartition(sys.argv[2], 0)
c.assign([tp])
c.seek_to_beginning([tp])
while not c.poll(1.0):
    pass
t_first = time.perf_counter()
print(t_first - t_start, flush=True)
c.close(timeout=5)
"""

FIRST_AIOKAFKA = """
import time, sys
t_start = time.perf_counter()
import asyncio
from aiokafka import AIOKafkaConsumer, TopicPartition
async def main():
    c = AIOKafkaConsumer(bootstrap_servers=sys.argv[1], enable_auto_commit=False)
    await c.start()
    tp = TopicPartition(sys.argv[2], 0)
    c.assign([tp])
    await c.seek_to_beginning(tp)
    while True:
        batch = await c.getmany(timeout_ms=1000)
        if batch:
            break
    t_first = time.perf_counter()
    print(t_first - t_start, flush=True)
    await c.stop()
asyncio.run(main())
"""


#: Bytecode is cached (as an installed package has it) under one prefix outside the trees, so
#: measuring a checkout writes nothing into it.
PYCACHE = Path(tempfile.gettempdir()) / "kafka-actors-startup-pycache"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPATH", None)
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def _wall(code: str, root: Path, extra: list[str] | None = None) -> tuple[float, str]:
    """One fresh interpreter running ``code`` in ``root``: its wall time and its stdout."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, *(extra or [])],
        cwd=root,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"child failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return wall, done.stdout


def _check_root(root: Path) -> None:
    _, out = _wall("import kafka_actors; print(kafka_actors.__file__)", root)
    if not Path(out.strip()).resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"{root}: imports kafka_actors from {out.strip()}, not from the tree")


def _row(name: str, times: list[float]) -> str:
    return f"{name:42} {statistics.median(times) * 1e3:9.1f} {min(times) * 1e3:9.1f}"


def importtime_top(code: str, root: Path, top: int) -> list[tuple[int, int, str]]:
    """The ``top`` largest cumulative items of ``-X importtime`` for ``code`` (one child)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        cwd=root,
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    rows: list[tuple[int, int, str]] = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        head, cumulative_us, name = line.split("|", 2)
        self_us = head.split(":", 1)[1]
        rows.append((int(cumulative_us), int(self_us), name.rstrip()))
    rows.sort(reverse=True)
    return rows[:top]


def startup_rows(root: Path, runs: int, top: int) -> None:
    print(f"tree: {root}   ({runs} fresh interpreters per row; wall ms)")
    print(f"{'':42} {'median':>9} {'best':>9}")
    for name, code in (
        ("python -c pass", "pass"),
        (IMPORT, IMPORT),
        (FROM, FROM),
        ("construct KafkaConsumer (no network)", CONSTRUCT),
    ):
        times = [_wall(code, root)[0] for _ in range(runs)]
        print(_row(name, times), flush=True)
    _wall(FROM, root)  # warm
    print(f"\n-X importtime, {FROM!r}: top {top} cumulative (ms; self ms)")
    for cumulative, self_us, name in importtime_top(FROM, root, top):
        print(f"  {cumulative / 1e3:8.1f} {self_us / 1e3:8.1f}  {name}")
    print()


def _first_record(root: Path, runs: int, bootstrap: str, topic: str, *, peers: bool) -> None:
    clients = [("kafka-actors KafkaConsumer", FIRST_KA)]
    try:
        import aiokafka  # noqa: F401
    except ImportError:
        pass
    else:
        if peers:
            clients.append(("aiokafka AIOKafkaConsumer", FIRST_AIOKAFKA))
    print(f"tree {root}: process start to first record ({runs} runs; ms): median, best")
    floor = statistics.median(_wall("pass", root)[0] for _ in range(runs))
    for name, code in clients:
        _wall(code, root, [bootstrap, topic])  # warm-up: bytecode of what the first fetch needs
        times = []
        for _ in range(runs):
            _, out = _wall(code, root, [bootstrap, topic])
            times.append(floor + float(out.strip().splitlines()[0]))
        print(_row(name, times), flush=True)
    print("(interpreter start-up, the median of `python -c pass`, is added to each child's span)")


def _produce(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(100):
        producer.produce(topic, value=b"x" * 100, key=str(i).encode())
    producer.flush(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument(
        "--root",
        type=Path,
        action="append",
        help="a tree to measure (repeat to set trees side by side; default: this one)",
    )
    parser.add_argument("--broker", action="store_true", help="also time to the first record")
    parser.add_argument("--bootstrap", help="use this broker (else the testkit starts one)")
    args = parser.parse_args()
    roots = [root.resolve() for root in (args.root or [HERE])]
    for root in roots:
        _check_root(root)
        _wall(CONSTRUCT, root)  # compiles and caches the bytecode of everything the rows import
        startup_rows(root, args.runs, args.top)
    if not (args.broker or args.bootstrap):
        return 0
    topic = f"startup-{os.getpid()}"
    if args.bootstrap:
        _produce(args.bootstrap, topic)
        for i, root in enumerate(roots):
            _first_record(root, args.runs, args.bootstrap, topic, peers=i == 0)
        return 0
    from kafka_actors.testing import KafkaBroker

    with KafkaBroker() as broker:
        _produce(broker.bootstrap_servers, topic)
        for i, root in enumerate(roots):
            _first_record(root, args.runs, broker.bootstrap_servers, topic, peers=i == 0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
