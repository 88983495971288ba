"""Consumer throughput: kafka-actors (sync and asyncio) beside confluent-kafka, aiokafka and
kafka-python.

Owns: nothing but its own run. Starts ONE Kafka 4.x broker with the testkit, creates two
topics (1 and 8 partitions), produces the same data into each once with confluent-kafka
(``--records`` records, 8-byte keys, ``--value-size``-byte values, default batching, no
compression), then consumes each topic from the beginning to the end with every client, each in
its own subprocess (so the peak RSS, VmHWM of the child, is that client's alone):

* ``kafka-actors``: ``KafkaConsumer`` with ``assign`` + ``seek_to_beginning`` (no group);
* ``kafka-actors sub``: ``subscribe`` in a new group (group.protocol=consumer, KIP-848);
* ``kafka-actors pure``: as ``kafka-actors`` with ``KAFKA_ACTORS_PURE_PYTHON=1`` (the
  pure-Python record path even when the native one is built);
  the record path in use is printed beside each kafka-actors row (native or python);
* ``kafka-actors columns`` / ``kafka-actors columns 50k``: the columnar poll,
  ``KafkaConsumer.poll_batches(max_records=500 / 50,000)`` (one ``pyarrow.RecordBatch`` per
  partition, no Python object per record) after ``assign`` + ``seek_to_beginning``; its work
  per batch is the same in columns: the rows counted, the key and value lengths summed (from
  the Arrow offsets), the last offset read. A third table sets them beside Java's
  ConsumerPerformance and ``poll`` (``kafka-actors``) of the same run;
* ``kafka-actors async columns 50k``: ``AsyncKafkaConsumer.getmany_batches(max_records=50,000)``,
  the same way (in that third table too);
* ``confluent-kafka``: ``Consumer.consume(500)`` after ``assign`` at OFFSET_BEGINNING;
* ``confluent-kafka tuned``: the same with ``queued.min.messages=1000000`` and
  ``fetch.queue.backoff.ms=5`` (librdkafka's pre-fetch queue kept full);
* ``java``: Java's ``org.apache.kafka.tools.ConsumerPerformance`` (kafka-consumer-perf-test,
  the testkit's jars, a group subscription; only when this script started the broker). Its own
  "fetch" figures are used: records/s over its fetch time (without JVM start and the group
  join); "cpu s" is the JVM's whole CPU time (start-up and JIT included);
* ``aiokafka``: ``AIOKafkaConsumer.getmany(max_records=500)`` after ``assign`` +
  ``seek_to_beginning``;
* ``kafka-python``: ``KafkaConsumer.poll(max_records=500)`` after ``assign`` +
  ``seek_to_beginning``;
* ``kafka-actors async``: ``AsyncKafkaConsumer.getmany(max_records=500)`` after ``assign`` +
  ``seek_to_beginning`` (no group), beside ``aiokafka`` above;
* ``kafka-actors async iter`` / ``aiokafka iter``: ``async for record in consumer`` (one
  record per step), the same way.

Same fetch settings where comparable (Java's defaults: fetch.min.bytes 1, fetch.max.wait.ms
500, fetch.max.bytes 50 MiB, max.partition.fetch.bytes 1 MiB, 500 records per poll), CRCs
checked by every client (librdkafka's check.crcs is turned on: it defaults to off), no
auto-commit but for the group variant. Every client touches the key, value and offset of each
record. The clock runs from just before the consumer is created until the last record is
handed out (connecting, metadata, the group join and the offset lookups included); "first"
is when the first record arrived, and "steady/s" the rate from it on (what is left after the
start-up; a client that pre-fetched while it started has part of the data in memory by then:
librdkafka tuned with ``queued.min.messages`` 1M buffers up to 1M records meanwhile, so its
steady rate over a 1M-record topic is partly a drain of its queue); "cpu s" is the child's
process CPU time over the same span (every thread; steadier than wall time on a shared
machine). Ratios: ``ka/peer rate`` is kafka-actors (assign) records/s over the peer's (> 1: we
are faster), ``ka/peer steady`` the same from the first record on, ``peer/ka cpu`` the
peer's CPU time over ours (> 1: we use less CPU per record), ``ka/peer RSS`` our peak RSS
over the peer's (> 1: we use more memory). Every asyncio child also runs a ticker task (5 ms
sleeps) and reports the event loop's worst lag (oversleep) during the run ("loop lag ms").
A second table sets each asyncio way of reading beside aiokafka's: ``async/aiokafka rate`` is
kafka-actors async records/s over aiokafka's (> 1: we are faster), ``aiokafka/async cpu`` the
CPU time ratio (> 1: we use less CPU).

    .venv/bin/python bench/consume.py [--records 1000000] [--value-size 100] [--repeat 1]
        [--clients kafka-actors,confluent-kafka,...] [--bootstrap HOST:PORT] [--profile DIR]

``--repeat N`` lets the clients take turns N times on each topic and keeps each client's best
(by wall time); every round's async ratios are printed too.

``--baseline REV`` also runs every kafka-actors client of ``--clients`` from the project as it
was at git revision ``REV`` (a temporary ``git worktree`` of this repository, its native record
path built in place), taking turns with today's code on the same broker and the same topics;
those rows are named ``<client> @REV`` and the ratios beside them compare them with today's
``kafka-actors`` row (a restructuring shows its cost or gain in one run). The worktree is
removed at the end.

``--profile DIR`` also runs the kafka-actors (assign) child once more on the 8-partition topic
under yappi (every thread, CPU clock; without yappi, cProfile: the polling thread only) and
writes ``DIR/consume-<topic>.pstats`` and the top functions to stdout. Children are run with
``--child`` (internal).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

CLIENTS = (
    "kafka-actors",
    "kafka-actors sub",
    "kafka-actors pure",
    "kafka-actors columns",
    "kafka-actors columns 50k",
    "confluent-kafka",
    "confluent-kafka tuned",
    "java",
    "aiokafka",
    "kafka-python",
    "kafka-actors async",
    "aiokafka iter",
    "kafka-actors async iter",
    "kafka-actors async columns 50k",
)
#: asyncio way of reading → (kafka-actors client, aiokafka client)
ASYNC_PAIRS = {
    "getmany": ("kafka-actors async", "aiokafka"),
    "async for": ("kafka-actors async iter", "aiokafka iter"),
}
MAX_RECORDS = 500
#: max_records of "kafka-actors columns 50k" (a columnar user takes big batches).
MAX_COLUMNAR = 50_000
FETCH = {
    "fetch.min.bytes": 1,
    "fetch.max.wait.ms": 500,
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 1_048_576,
}
CHILD_TIMEOUT_S = 900.0


# -- the children: one client each ------------------------------------------------------------


class Tally:
    """The fair work every client does per record: touch key, value and offset."""

    __slots__ = ("count", "first_at", "last_offset", "nbytes")

    def __init__(self) -> None:
        self.count = 0
        self.nbytes = 0
        self.last_offset = -1
        self.first_at: float | None = None


class Ticker:
    """Worst oversleep of 5 ms sleeps: how long the loop was kept from running tasks."""

    def __init__(self) -> None:
        self.worst = 0.0

    async def run(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.005)
            self.worst = max(self.worst, time.perf_counter() - t - 0.005)


def kafka_actors_consumer(bootstrap: str, topic: str, partitions: int, group: bool) -> Any:
    """A KafkaConsumer reading ``topic`` from the beginning: subscribed in a new group, or
    assigned every partition."""
    from kafka_actors import KafkaConsumer
    from kafka_actors.protocol.messages import TopicPartition

    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "auto.offset.reset": "earliest",
        "max.poll.records": MAX_RECORDS,
        **FETCH,
    }
    if group:
        config.update(
            {"group.id": f"bench-{os.getpid()}-{time.time_ns()}", "group.protocol": "consumer"}
        )
    consumer = KafkaConsumer(config)
    if group:
        consumer.subscribe([topic])
    else:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
    return consumer


def run_kafka_actors(
    bootstrap: str, topic: str, partitions: int, expected: int, group: bool
) -> Tally:
    tally = Tally()
    consumer = kafka_actors_consumer(bootstrap, topic, partitions, group)
    try:
        count = nbytes = 0
        last = -1
        while count < expected:
            records = consumer.poll(1.0)
            if records and tally.first_at is None:
                tally.first_at = time.perf_counter()
            for r in records:
                k = r.key
                v = r.value
                last = r.offset
                nbytes += len(v) if v is not None else 0
                nbytes += len(k) if k is not None else 0
                count += 1
        tally.count, tally.nbytes, tally.last_offset = count, nbytes, last
    finally:
        consumer.close(5.0)
    return tally


def binary_length(array: Any) -> int:
    """The bytes of a binary Arrow array's values, from its offsets buffer (pyarrow.compute
    kernels give the GIL up, and waiting for it again behind the consumer's threads would be
    measured as the client's)."""
    offsets = memoryview(array.buffers()[1]).cast("i")
    return int(offsets[array.offset + len(array)] - offsets[array.offset])


def run_kafka_actors_columns(
    bootstrap: str, topic: str, partitions: int, expected: int, max_records: int
) -> Tally:
    """The columnar poll: the same work per record, done on columns (no loop per record)."""
    tally = Tally()
    consumer = kafka_actors_consumer(bootstrap, topic, partitions, False)
    try:
        while tally.count < expected:
            count_batches(tally, consumer.poll_batches(1.0, max_records))
    finally:
        consumer.close(5.0)
    return tally


def count_batches(tally: Tally, batches: dict[Any, Any]) -> None:
    """The columnar clients' work: rows counted, key and value lengths summed, last offset."""
    if batches and tally.first_at is None:
        tally.first_at = time.perf_counter()
    for batch in batches.values():
        for name in ("key", "value"):
            tally.nbytes += binary_length(batch.column(name))
        tally.last_offset = batch.column("offset")[-1].as_py()
        tally.count += batch.num_rows


#: librdkafka settings of "confluent-kafka tuned": a deep pre-fetch queue, refilled promptly.
CONFLUENT_TUNED = {"queued.min.messages": 1_000_000, "fetch.queue.backoff.ms": 5}


def run_confluent(
    bootstrap: str, topic: str, partitions: int, expected: int, tuned: bool = False
) -> Tally:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    tally = Tally()
    consumer = Consumer(
        {
            **(CONFLUENT_TUNED if tuned else {}),
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{os.getpid()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "check.crcs": True,
            "fetch.min.bytes": FETCH["fetch.min.bytes"],
            "fetch.wait.max.ms": FETCH["fetch.max.wait.ms"],
            "fetch.max.bytes": FETCH["fetch.max.bytes"],
            "max.partition.fetch.bytes": FETCH["max.partition.fetch.bytes"],
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        count = nbytes = 0
        last = -1
        while count < expected:
            messages = consumer.consume(MAX_RECORDS, 1.0)
            if messages and tally.first_at is None:
                tally.first_at = time.perf_counter()
            for m in messages:
                if m.error() is not None:
                    continue  # partition EOF and the like are not records
                k = m.key()
                v = m.value()
                last = m.offset() or 0
                nbytes += len(v) if v is not None else 0
                nbytes += len(k) if k is not None else 0
                count += 1
        tally.count, tally.nbytes, tally.last_offset = count, nbytes, last
    finally:
        consumer.close()
    return tally


async def read_async(consumer: Any, tally: Tally, expected: int, one_by_one: bool) -> None:
    """The same loop for both asyncio clients: ``async for`` or ``getmany(500)``; the work per
    record is written out as in the other runners (no call per record)."""
    count = nbytes = 0
    last = -1
    if one_by_one:
        async for r in consumer:
            if tally.first_at is None:
                tally.first_at = time.perf_counter()
            k = r.key
            v = r.value
            last = r.offset
            nbytes += len(v) if v is not None else 0
            nbytes += len(k) if k is not None else 0
            count += 1
            if count >= expected:
                break
    else:
        while count < expected:
            batches = await consumer.getmany(timeout_ms=1000, max_records=MAX_RECORDS)
            if batches and tally.first_at is None:
                tally.first_at = time.perf_counter()
            for records in batches.values():
                for r in records:
                    k = r.key
                    v = r.value
                    last = r.offset
                    nbytes += len(v) if v is not None else 0
                    nbytes += len(k) if k is not None else 0
                    count += 1
    tally.count, tally.nbytes, tally.last_offset = count, nbytes, last


def async_kafka_actors_consumer(bootstrap: str, topic: str, partitions: int) -> Any:
    """An AsyncKafkaConsumer assigned every partition of ``topic``, from the beginning."""
    from kafka_actors.aio import AsyncKafkaConsumer
    from kafka_actors.protocol.messages import TopicPartition

    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "auto.offset.reset": "earliest",
        "max.poll.records": MAX_RECORDS,
        **FETCH,
    }
    consumer = AsyncKafkaConsumer(config=config)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    return consumer


async def run_kafka_actors_async(
    bootstrap: str, topic: str, partitions: int, expected: int, one_by_one: bool
) -> Tally:
    tally = Tally()
    async with async_kafka_actors_consumer(bootstrap, topic, partitions) as consumer:
        await read_async(consumer, tally, expected, one_by_one)
    return tally


async def run_kafka_actors_async_columns(
    bootstrap: str, topic: str, partitions: int, expected: int, _one_by_one: bool
) -> Tally:
    """``AsyncKafkaConsumer.getmany_batches(max_records=MAX_COLUMNAR)``, as the sync columnar
    client reads."""
    tally = Tally()
    async with async_kafka_actors_consumer(bootstrap, topic, partitions) as consumer:
        while tally.count < expected:
            count_batches(tally, await consumer.getmany_batches(1000, MAX_COLUMNAR))
    return tally


async def run_aiokafka(
    bootstrap: str, topic: str, partitions: int, expected: int, one_by_one: bool
) -> Tally:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    tally = Tally()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        check_crcs=True,
        fetch_min_bytes=FETCH["fetch.min.bytes"],
        fetch_max_wait_ms=FETCH["fetch.max.wait.ms"],
        fetch_max_bytes=FETCH["fetch.max.bytes"],
        max_partition_fetch_bytes=FETCH["max.partition.fetch.bytes"],
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        await read_async(consumer, tally, expected, one_by_one)
    finally:
        await consumer.stop()
    return tally


def run_on_loop(
    runner: Callable[[str, str, int, int, bool], Awaitable[Tally]],
    args: argparse.Namespace,
    one_by_one: bool,
    lag: list[float],
) -> Tally:
    """Run an asyncio client beside a ticker; its worst loop lag (ms) goes into ``lag``."""

    async def go() -> Tally:
        ticker = Ticker()
        task = asyncio.get_running_loop().create_task(ticker.run())
        try:
            return await runner(
                args.bootstrap, args.topic, args.partitions, args.records, one_by_one
            )
        finally:
            task.cancel()
            lag.append(ticker.worst * 1000)

    return asyncio.run(go())


def run_kafka_python(bootstrap: str, topic: str, partitions: int, expected: int) -> Tally:
    from kafka import KafkaConsumer, TopicPartition

    tally = Tally()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        check_crcs=True,
        fetch_min_bytes=FETCH["fetch.min.bytes"],
        fetch_max_wait_ms=FETCH["fetch.max.wait.ms"],
        fetch_max_bytes=FETCH["fetch.max.bytes"],
        max_partition_fetch_bytes=FETCH["max.partition.fetch.bytes"],
        max_poll_records=MAX_RECORDS,
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        count = nbytes = 0
        last = -1
        while count < expected:
            batches = consumer.poll(timeout_ms=1000, max_records=MAX_RECORDS)
            if batches and tally.first_at is None:
                tally.first_at = time.perf_counter()
            for records in batches.values():
                for r in records:
                    k = r.key
                    v = r.value
                    last = r.offset
                    nbytes += len(v) if v is not None else 0
                    nbytes += len(k) if k is not None else 0
                    count += 1
        tally.count, tally.nbytes, tally.last_offset = count, nbytes, last
    finally:
        consumer.close()
    return tally


def peak_rss_kb() -> int:
    """This process's peak RSS (VmHWM): unlike ``ru_maxrss``, which keeps the high-water mark
    of the forked parent across ``exec``, it counts this program's memory alone."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(args: argparse.Namespace) -> int:
    lag: list[float] = []  # the asyncio clients' worst loop lag (ms)
    runners: dict[str, Callable[[], Tally]] = {
        "kafka-actors": lambda: run_kafka_actors(
            args.bootstrap, args.topic, args.partitions, args.records, False
        ),
        "kafka-actors sub": lambda: run_kafka_actors(
            args.bootstrap, args.topic, args.partitions, args.records, True
        ),
        "kafka-actors pure": lambda: run_kafka_actors(
            args.bootstrap, args.topic, args.partitions, args.records, False
        ),
        "kafka-actors columns": lambda: run_kafka_actors_columns(
            args.bootstrap, args.topic, args.partitions, args.records, MAX_RECORDS
        ),
        "kafka-actors columns 50k": lambda: run_kafka_actors_columns(
            args.bootstrap, args.topic, args.partitions, args.records, MAX_COLUMNAR
        ),
        "confluent-kafka": lambda: run_confluent(
            args.bootstrap, args.topic, args.partitions, args.records
        ),
        "confluent-kafka tuned": lambda: run_confluent(
            args.bootstrap, args.topic, args.partitions, args.records, tuned=True
        ),
        "aiokafka": lambda: run_on_loop(run_aiokafka, args, False, lag),
        "aiokafka iter": lambda: run_on_loop(run_aiokafka, args, True, lag),
        "kafka-python": lambda: run_kafka_python(
            args.bootstrap, args.topic, args.partitions, args.records
        ),
        "kafka-actors async": lambda: run_on_loop(run_kafka_actors_async, args, False, lag),
        "kafka-actors async iter": lambda: run_on_loop(run_kafka_actors_async, args, True, lag),
        "kafka-actors async columns 50k": lambda: run_on_loop(
            run_kafka_actors_async_columns, args, False, lag
        ),
    }
    runner = runners[args.child]
    if args.child.startswith("kafka-actors"):
        from kafka_actors import log

        log.configure(level="WARNING")  # our lines: WARNING and above, to stderr
    # Imports are not part of the measurement (each runner's own imports are then cached).
    module = {
        "confluent-kafka": "confluent_kafka",
        "confluent-kafka tuned": "confluent_kafka",
        "aiokafka": "aiokafka",
        "aiokafka iter": "aiokafka",
        "kafka-python": "kafka",
        "kafka-actors async": "kafka_actors.aio",
        "kafka-actors async iter": "kafka_actors.aio",
        "kafka-actors async columns 50k": "kafka_actors.aio",
    }.get(args.child, "kafka_actors.consumer")
    importlib.import_module(module)
    profiler: Any = None
    yappi: Any = None
    if args.profile:
        try:
            import yappi  # type: ignore[import-untyped,no-redef]

            yappi.set_clock_type("cpu")
            yappi.start(builtins=False)
        except ImportError:  # cProfile: the polling (main) thread only, wall clock
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    tally = runner()
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    if args.profile and yappi is not None:
        yappi.stop()
        profiler = yappi.get_func_stats()
        profiler.save(args.profile, type="pstat")
    elif args.profile:
        profiler.disable()
        profiler.dump_stats(args.profile)
    impl = ""
    if args.child.startswith("kafka-actors"):
        try:  # the record decoder's module: protocol/records/decode since the protocol wings
            _records = importlib.import_module("kafka_actors.protocol.records.decode")
        except ImportError:  # a baseline from before them
            _records = importlib.import_module("kafka_actors.protocol.records")
        impl = _records.IMPLEMENTATION
    result = {
        "client": args.child,
        "impl": impl,
        "records": tally.count,
        "bytes": tally.nbytes,
        "last_offset": tally.last_offset,
        "seconds": elapsed,
        "first_s": (tally.first_at - t0) if tally.first_at is not None else None,
        "cpu_s": cpu,
        "max_rss_kb": peak_rss_kb(),
        "loop_lag_ms": lag[0] if lag else None,
    }
    print("RESULT " + json.dumps(result), flush=True)
    return 0


# -- the parent: broker, data, children, table -------------------------------------------------


def produce(bootstrap: str, topic: str, n: int, value_size: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "none"})
    value = (b"0123456789abcdef" * (value_size // 16 + 1))[:value_size]
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value, b"%08d" % i)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} records not delivered to {topic}")
    return time.perf_counter() - t0


def run_child(
    client: str,
    bootstrap: str,
    topic: str,
    partitions: int,
    n: int,
    profile: str | None = None,
    checkout: Path | None = None,
) -> dict[str, Any]:
    """One client in its own process; with ``checkout``, kafka-actors imported from there."""
    script = Path(__file__).resolve()
    if checkout is not None:
        script = checkout / "bench" / "consume.py"
    cmd = [
        sys.executable,
        str(script),
        "--child",
        client,
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--partitions",
        str(partitions),
        "--records",
        str(n),
    ]
    if profile:
        cmd += ["--profile", profile]
    env = dict(os.environ)
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(checkout), env.get("PYTHONPATH")]))
    if client == "kafka-actors pure":
        env["KAFKA_ACTORS_PURE_PYTHON"] = "1"  # the pure-Python decoder even if built
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False, env=env
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    raise RuntimeError(
        f"{client} on {topic} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    )


class Baseline:
    """The project at an earlier git revision, in a temporary worktree with its native record
    path built in place; removed by :meth:`remove`."""

    def __init__(self, rev: str) -> None:
        root = Path(__file__).resolve().parents[1]
        self.rev = rev
        self.path = Path(tempfile.mkdtemp(prefix="kafka-actors-baseline-"))
        subprocess.run(
            ["git", "-C", str(root), "worktree", "add", "--detach", str(self.path), rev],
            check=True,
            capture_output=True,
        )
        self._root = root
        # the extension alone (setup.py's Extension), built outside the checkout so that no
        # pyproject.toml is read (the venv's setuptools may be older than the build's)
        # (where the C source is: protocol/records/ since the protocol wings, protocol/ before)
        source = self.path / "kafka_actors" / "protocol" / "records" / "_crecords.c"
        extension = "kafka_actors.protocol.records._crecords"
        if not source.exists():
            source = self.path / "kafka_actors" / "protocol" / "_crecords.c"
            extension = "kafka_actors.protocol._crecords"
        build = (
            "from setuptools import Extension, setup; "
            "setup(name='baseline', script_args=['build_ext', '--build-lib', "
            f"{str(self.path)!r}, '--build-temp', 'tmp'], ext_modules=[Extension("
            f"{extension!r}, [{str(source)!r}])])"
        )
        scratch = tempfile.mkdtemp(prefix="kafka-actors-baseline-build-")
        built = subprocess.run(
            [sys.executable, "-c", build],
            cwd=scratch,
            capture_output=True,
            text=True,
            check=False,
        )
        shutil.rmtree(scratch, ignore_errors=True)
        if built.returncode != 0:
            print(f"baseline {rev}: native build failed, its pure-Python path is measured")

    def remove(self) -> None:
        subprocess.run(
            ["git", "-C", str(self._root), "worktree", "remove", "--force", str(self.path)],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(self.path, ignore_errors=True)


def run_java(broker: Any, topic: str, partitions: int, n: int) -> dict[str, Any]:
    """Java's ConsumerPerformance on ``topic``: its fetch rate (records over fetch time)."""
    args = [
        "--bootstrap-server",
        broker.bootstrap_servers,
        "--topic",
        topic,
        "--num-records",
        str(n),
        "--group",
        f"bench-java-{time.time_ns()}",
        "--timeout",
        "120000",
        "--command-property",
        "auto.offset.reset=earliest",
        "--command-property",
        f"max.poll.records={MAX_RECORDS}",
    ]
    cmd = broker.tool_command("org.apache.kafka.tools.ConsumerPerformance", args, short_lived=False)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or len(lines) < 2:
        raise RuntimeError(
            f"java on {topic} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    header = [h.strip() for h in lines[-2].split(",")]
    row = dict(zip(header, (v.strip() for v in lines[-1].split(",")), strict=True))
    records = int(row["data.consumed.in.nMsg"])
    fetch_s = float(row["fetch.time.ms"]) / 1000.0
    return {
        "client": "java",
        "impl": "fetch rate",
        "records": records,
        "bytes": int(float(row["data.consumed.in.MB"]) * 1024 * 1024),
        "last_offset": -1,
        "seconds": fetch_s,
        "first_s": None,
        "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "max_rss_kb": 0,  # not measured (the JVM is not our child's child)
        "loop_lag_ms": None,
    }


def steady_rate(r: dict[str, Any]) -> float | None:
    """Records per second from the first record on (None: the first is not known)."""
    if r["first_s"] is None:
        return None
    return float((r["records"] - 1) / max(r["seconds"] - r["first_s"], 1e-9))


def print_table(title: str, results: list[dict[str, Any]], n: int) -> None:
    base = next((r for r in results if r["client"] == "kafka-actors"), None)
    base_steady = steady_rate(base) if base is not None else None
    print(f"\n{title}")
    print(
        f"{'client (decoder)':40} {'records/s':>11} {'steady/s':>11} {'MB/s':>8} {'total s':>8} "
        f"{'first s':>8} {'cpu s':>7} {'peak RSS MB':>12} {'loop lag ms':>12} "
        f"{'ka/peer rate':>13} {'ka/peer steady':>15} {'peer/ka cpu':>12} {'ka/peer RSS':>12}"
    )
    for r in results:
        rate = r["records"] / r["seconds"]
        mbs = r["bytes"] / r["seconds"] / 1e6
        rss_s = f"{r['max_rss_kb'] / 1024:12.1f}" if r["max_rss_kb"] else f"{'-':>12}"
        first = f"{r['first_s']:8.2f}" if r["first_s"] is not None else f"{'-':>8}"
        lag = r.get("loop_lag_ms")
        lag_s = f"{lag:12.1f}" if lag is not None else f"{'-':>12}"
        if base is not None:
            base_rate = base["records"] / base["seconds"]
            ratio = f"{base_rate / rate:12.2f}x"
            rss_ratio = f"{base['max_rss_kb'] / r['max_rss_kb']:11.2f}x" if r["max_rss_kb"] else "-"
            cpu_ratio = f"{r['cpu_s'] / base['cpu_s']:11.2f}x"
        else:
            ratio = rss_ratio = cpu_ratio = ""
        steady = steady_rate(r)
        steady_s = f"{steady:11,.0f}" if steady is not None else f"{'-':>11}"
        steady_ratio = f"{base_steady / steady:14.2f}x" if steady and base_steady else "-"
        name = f"{r['client']} ({r['impl']})" if r.get("impl") else r["client"]
        print(
            f"{name:40} {rate:11,.0f} {steady_s} {mbs:8.1f} {r['seconds']:8.2f} {first} "
            f"{r['cpu_s']:7.2f} {rss_s} {lag_s} {ratio:>13} {steady_ratio:>15} {cpu_ratio:>12} "
            f"{rss_ratio:>12}"
        )
        if r["records"] != n:
            print(f"  !! {r['client']} consumed {r['records']} records, expected {n}")


def async_ratios(results: dict[str, dict[str, Any]]) -> list[tuple[str, float, float, float]]:
    """Per asyncio way of reading run by both: (way, ours records/s, aiokafka's, rate ratio)."""
    out = []
    for way, (ours, theirs) in ASYNC_PAIRS.items():
        if ours in results and theirs in results:
            a, b = results[ours], results[theirs]
            rate_a, rate_b = a["records"] / a["seconds"], b["records"] / b["seconds"]
            out.append((way, rate_a, rate_b, rate_a / rate_b))
    return out


def print_async_table(title: str, results: dict[str, dict[str, Any]]) -> None:
    rows = async_ratios(results)
    if not rows:
        return
    print(f"\n{title}: asyncio, kafka-actors async beside aiokafka")
    print(
        f"{'way of reading':15} {'async rec/s':>12} {'aiokafka rec/s':>15} "
        f"{'async/aiokafka rate':>20} {'async cpu s':>12} {'aiokafka cpu s':>15} "
        f"{'aiokafka/async cpu':>19} {'lag ms (ka/aio)':>16}"
    )
    for way, rate_a, rate_b, ratio in rows:
        ours, theirs = ASYNC_PAIRS[way]
        a, b = results[ours], results[theirs]
        lags = f"{a['loop_lag_ms']:.1f}/{b['loop_lag_ms']:.1f}"
        print(
            f"{way:15} {rate_a:12,.0f} {rate_b:15,.0f} {ratio:19.2f}x {a['cpu_s']:12.2f} "
            f"{b['cpu_s']:15.2f} {b['cpu_s'] / a['cpu_s']:18.2f}x {lags:>16}"
        )


#: The columnar poll's rows and what they are set beside.
COLUMNAR = ("kafka-actors columns", "kafka-actors columns 50k", "kafka-actors async columns 50k")


def print_columnar_table(title: str, results: dict[str, dict[str, Any]]) -> None:
    """The columnar poll beside Java's ConsumerPerformance (its fetch rate: without JVM
    start and group join) and ``poll`` of the same run; "rate after first" leaves out the time
    to the first batch (connect, metadata, offset lookup), as Java's fetch rate does."""
    rows = [c for c in COLUMNAR if c in results]
    if not rows:
        return
    java = results.get("java")
    poll = results.get("kafka-actors")
    print(f"\n{title}: the columnar poll beside Java's ConsumerPerformance and poll")
    print(
        f"{'client':28} {'records/s':>11} {'rate after first':>17} {'cpu s':>7} "
        f"{'/java fetch rate':>17} {'(after first)':>14} {'/poll rate':>11} {'poll/cols cpu':>14}"
    )
    for c in rows:
        r = results[c]
        rate = r["records"] / r["seconds"]
        first = r["first_s"] or 0.0
        after = r["records"] / max(r["seconds"] - first, 1e-9)
        java_rate = java["records"] / java["seconds"] if java else None
        vs_java = f"{rate / java_rate:16.2f}x" if java_rate else f"{'-':>17}"
        vs_java_after = f"{after / java_rate:13.2f}x" if java_rate else f"{'-':>14}"
        vs_poll = f"{rate / (poll['records'] / poll['seconds']):10.2f}x" if poll else f"{'-':>11}"
        cpu = f"{poll['cpu_s'] / r['cpu_s']:13.2f}x" if poll else f"{'-':>14}"
        print(
            f"{c:28} {rate:11,.0f} {after:17,.0f} {r['cpu_s']:7.2f} {vs_java} {vs_java_after} "
            f"{vs_poll} {cpu}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per topic")
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=1, help="runs per client, best kept")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--profile", metavar="DIR", help="profile kafka-actors (yappi)")
    parser.add_argument("--bootstrap", help="use this broker (else start one)")
    parser.add_argument(
        "--baseline", metavar="REV", help="also run the kafka-actors clients as of git REV"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--partitions", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = set(clients) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown clients {sorted(unknown)}; known: {', '.join(CLIENTS)}")
    from kafka_actors.testing import KafkaBroker

    baseline = Baseline(args.baseline) if args.baseline else None
    broker: Any = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        broker = KafkaBroker()
        broker.start()
        bootstrap = broker.bootstrap_servers
    try:
        suffix = f"{time.time_ns() % 10**9}"
        topics = [(f"bench-p1-{suffix}", 1), (f"bench-p8-{suffix}", 8)]
        if broker is not None:
            for name, parts in topics:
                broker.create_topic(name, parts)
        else:
            from confluent_kafka.admin import AdminClient
            from confluent_kafka.cimpl import NewTopic

            admin = AdminClient({"bootstrap.servers": bootstrap})
            futures = admin.create_topics([NewTopic(t, p, 1) for t, p in topics])
            for f in futures.values():
                f.result(60)
            time.sleep(2)
        print(
            f"{args.records:,} records per topic, {args.value_size}-byte values, 8-byte keys, "
            f"no compression; produced with confluent-kafka"
        )
        for name, parts in topics:
            took = produce(bootstrap, name, args.records, args.value_size)
            print(f"produced {name} ({parts} partitions) in {took:.1f}s")
        for name, parts in topics:
            best: dict[str, dict[str, Any]] = {}
            for round_no in range(args.repeat):  # clients take turns: load spreads over all
                this_round: dict[str, dict[str, Any]] = {}
                for client in clients:
                    if client == "java":
                        if broker is None:
                            continue  # needs the testkit's jars: only with our own broker
                        r = run_java(broker, name, parts, args.records)
                    else:
                        r = run_child(client, bootstrap, name, parts, args.records)
                    this_round[client] = r
                    if client not in best or r["seconds"] < best[client]["seconds"]:
                        best[client] = r
                    if baseline is not None and client.startswith("kafka-actors"):
                        r = run_child(
                            client, bootstrap, name, parts, args.records, checkout=baseline.path
                        )
                        r["client"] = f"{client} @{baseline.rev}"
                        key = r["client"]
                        if key not in best or r["seconds"] < best[key]["seconds"]:
                            best[key] = r
                if args.repeat > 1:
                    ratios = ", ".join(
                        f"{way} {ratio:.2f}x" for way, _, _, ratio in async_ratios(this_round)
                    )
                    if ratios:
                        print(f"{name} round {round_no + 1}: async/aiokafka rate: {ratios}")
            title = f"{name}: {parts} partition(s)"
            if args.repeat > 1:
                title += f", best of {args.repeat} (by wall time)"
            shown = [c for c in clients if c in best]
            if baseline is not None:
                shown += [k for k in best if k.endswith(f"@{baseline.rev}")]
            print_table(title, [best[c] for c in shown], args.records)
            print_async_table(title, best)
            print_columnar_table(title, best)
        if args.profile:
            out = Path(args.profile)
            out.mkdir(parents=True, exist_ok=True)
            for name, parts in topics:
                path = out / f"consume-p{parts}.pstats"
                run_child("kafka-actors", bootstrap, name, parts, args.records, str(path))
                import pstats

                print(
                    f"\nprofile of kafka-actors on {name} (yappi, CPU, all threads; without "
                    f"yappi: cProfile, the polling thread only): {path}"
                )
                pstats.Stats(str(path)).sort_stats("tottime").print_stats(25)
    finally:
        if broker is not None:
            broker.stop()
        if baseline is not None:
            baseline.remove()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
