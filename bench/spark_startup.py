"""Start-up of the kafka-actors Spark source: how soon its driver-side group member is ready
(group joined, partitions assigned, starting offsets known), today and, with ``--baseline REV``,
as of git revision ``REV`` (a temporary ``git worktree`` with its native record path built in
place, as ``bench/consume.py --baseline`` makes it), on the same broker and topic.

1. **member alone** (no Spark): ``GroupMember(options)`` then ``initial_offsets()``; and the
   same with ``prepare_available_now()`` first (Spark's first call under Trigger.AvailableNow).
   ``--runs`` members one after the other in one process, each in a new group; median and best.
2. **in Spark** (``--spark``; local[2], one SparkSession per tree, a warm-up query first): a
   query over a small topic with Trigger.AvailableNow, from ``start()`` to its first
   micro-batch (``foreachBatch`` called), median and best of ``--spark-runs``. From the
   source's own log lines: ``start()`` → ``consumer_created`` (Spark launches the source's
   Python worker, which imports pyspark and our modules, then creates the member) → the member
   STABLE in the group → ``group_member_ready`` (trees that log it). With ``--spark-kafka``
   also Spark's own Kafka source, from ``start()`` to its first micro-batch (its connector
   must be in the cache: ``bench/spark.py`` resolves it).

Each tree runs in a child process whose working directory and ``PYTHONPATH`` are that tree, so
the driver and Spark's Python workers import that tree's ``kafka_actors``, with bytecode caching
on (``PYTHONDONTWRITEBYTECODE`` unset for them), as an installed package has it. ``--rounds N``
lets the trees take turns N times (a new child each turn; results pooled), so a busy machine
weighs on both alike.

Usage::

    python bench/spark_startup.py [--runs 9] [--baseline REV] [--rounds 1] [--spark]
        [--spark-runs 5] [--spark-kafka] [--bootstrap-servers HOST:PORT]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PARTITIONS = 4


# -- children ------------------------------------------------------------------------------------


def _options(bootstrap: str, topic: str) -> Any:
    from kafka_actors.spark.options import SourceOptions

    return SourceOptions.parse(
        {
            "kafka.bootstrap.servers": bootstrap,
            "kafka.group.id": f"bench-startup-{uuid.uuid4().hex[:8]}",
            "subscribe": topic,
            "startingOffsets": "earliest",
        }
    )


def child_member(bootstrap: str, topic: str, runs: int) -> dict[str, Any]:
    """Milliseconds from GroupMember() to initial offsets, without and with the AvailableNow
    lookups first."""
    from kafka_actors.spark.coordinator import GroupMember

    out: dict[str, list[float]] = {"initial": [], "available_now": []}
    for _ in range(runs):
        for kind in out:
            member = None
            started = time.perf_counter()
            try:
                member = GroupMember(_options(bootstrap, topic))
                if kind == "available_now":
                    member.prepare_available_now()
                offsets = member.initial_offsets()
                elapsed = (time.perf_counter() - started) * 1000.0
            finally:
                if member is not None:
                    member.stop()
            parts = sum(len(v) for v in offsets.values())
            if parts != PARTITIONS:
                raise SystemExit(f"member got {parts} partitions, not {PARTITIONS}")
            out[kind].append(elapsed)
    return out


def _parse_log(path: Path) -> list[tuple[float, str]]:
    """(epoch seconds, event) of the JSON log lines of the Spark workers; a member state
    transition is named ``member_state_transition:<to_state>``."""
    events: list[tuple[float, str]] = []
    for line in path.read_text(errors="replace").splitlines():
        start = line.find("{")
        if start < 0:
            continue
        try:
            record = json.loads(line[start:])
        except ValueError:
            continue
        if not isinstance(record, dict) or "timestamp" not in record:
            continue
        stamp = datetime.fromisoformat(str(record["timestamp"]).replace("Z", "+00:00"))
        event = str(record.get("event"))
        if event == "member_state_transition":
            event = f"{event}:{record.get('to_state')}"
        events.append((stamp.timestamp(), event))
    return events


def child_spark(bootstrap: str, topic: str, runs: int, spark_kafka: bool) -> dict[str, Any]:
    """start() → first micro-batch of AvailableNow queries (ours, and Spark's Kafka source),
    and the phases of ours from its workers' log lines."""
    log = Path(tempfile.mkstemp(prefix="kafka-actors-startup-", suffix=".log")[1])
    # the workers inherit the JVM's stderr, which is this process's: send it to the log file
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    saved = os.dup(2)
    os.dup2(fd, 2)
    os.environ["KAFKA_ACTORS_LOG_LEVEL"] = "INFO"
    os.environ["KAFKA_ACTORS_LOG_JSON"] = "1"
    spark_bench = importlib.import_module("spark")  # bench/spark.py, beside this script
    jars: list[str] = []
    if spark_kafka:
        import pyspark

        cached = spark_bench.cache_root_dir() / f"spark-sql-kafka-upto-{pyspark.__version__}"
        jars = sorted(str(p) for p in (cached / "jars").glob("*.jar"))
        if not jars:
            raise SystemExit(f"no Spark Kafka connector in {cached}: run bench/spark.py once")
    spark = spark_bench.spark_session(jars)  # local[2], loopback, the source registered
    work = Path(tempfile.mkdtemp(prefix="kafka-actors-startup-"))

    def query(fmt: str, options: dict[str, str]) -> tuple[float, float, float]:
        """(epoch at start(), seconds to the first batch, seconds to termination)."""
        first: list[float] = []

        def each(batch: Any, _batch_id: int) -> None:
            if not first:
                first.append(time.perf_counter())
            batch.count()

        reader = spark.readStream.format(fmt)
        for key, value in options.items():
            reader = reader.option(key, value)
        frame = reader.load()
        at = time.time()
        started = time.perf_counter()
        running = (
            frame.writeStream.foreachBatch(each)
            .option("checkpointLocation", str(work / uuid.uuid4().hex))
            .trigger(availableNow=True)
            .start()
        )
        running.awaitTermination()
        ended = time.perf_counter()
        if running.exception() is not None:
            raise SystemExit(f"{fmt} query failed: {running.exception()}")
        if not first:
            raise SystemExit(f"{fmt} query planned no batch")
        return at, first[0] - started, ended - started

    def ours() -> dict[str, str]:
        return {
            "kafka.bootstrap.servers": bootstrap,
            "kafka.group.id": f"bench-startup-{uuid.uuid4().hex[:8]}",
            "subscribe": topic,
            "startingOffsets": "earliest",
        }

    builtin = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}
    result: dict[str, Any] = {"ours": [], "spark_kafka": [], "phases": []}
    try:
        query("kafka-actors", ours())  # warm-up: JVM code paths, the planner's Python worker
        if spark_kafka:
            query("kafka", builtin)
        for _ in range(runs):
            at, first_batch, total = query("kafka-actors", ours())
            result["ours"].append(first_batch * 1000.0)
            events = [(t - at, e) for t, e in _parse_log(log) if t >= at]
            created = next((t for t, e in events if e == "consumer_created"), None)
            stable = next((t for t, e in events if e == "member_state_transition:STABLE"), None)
            ready = next((t for t, e in events if e == "group_member_ready"), None)
            result["phases"].append(
                [None if v is None else v * 1000.0 for v in (created, stable, ready)]
                + [total * 1000.0]
            )
            if spark_kafka:
                result["spark_kafka"].append(query("kafka", builtin)[1] * 1000.0)
    finally:
        spark.stop()
        os.dup2(saved, 2)
        os.close(fd)
        log.unlink(missing_ok=True)
    return result


# -- parent --------------------------------------------------------------------------------------


def _run_child(tree: Path, args: list[str]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    # bytecode cached as an installed package has it (the warm-ups write it), whatever the
    # environment says: compiling every module in each new Spark worker is not what users pay
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"child in {tree} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


def _small_topic(bootstrap: str) -> str:
    """A new topic of PARTITIONS partitions with 1000 records of 100 B."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    topic = f"bench-startup-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    for i in range(1000):
        producer.produce(topic, value=b"x" * 100, partition=i % PARTITIONS)
    if producer.flush(60) != 0:
        raise SystemExit("producer could not deliver every record")
    return topic


def _stats(values: list[float]) -> str:
    return f"{statistics.median(values):8.0f} {min(values):8.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", help="default: a testkit Kafka broker")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--baseline", metavar="REV", help="also measure the project at git REV")
    parser.add_argument("--spark", action="store_true", help="also measure inside Spark")
    parser.add_argument("--spark-runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=1, help="turns the trees take")
    parser.add_argument("--spark-kafka", action="store_true", help="and Spark's Kafka source")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        kind, bootstrap, topic, runs = args.child[:4]
        if kind == "member":
            out = child_member(bootstrap, topic, int(runs))
        else:
            out = child_spark(bootstrap, topic, int(runs), args.child[4:] == ["kafka"])
        print("RESULT " + json.dumps(out), flush=True)
        return 0

    trees: list[tuple[str, Path]] = [("today", ROOT)]
    baseline: Any = None
    if args.baseline:
        sys.path.insert(0, str(ROOT / "bench"))
        baseline = importlib.import_module("consume").Baseline(args.baseline)
        trees.insert(0, (f"@{args.baseline}", baseline.path))
    broker = None
    try:
        if args.bootstrap_servers:
            bootstrap = args.bootstrap_servers
        else:
            from kafka_actors.testing.broker import KafkaBroker

            broker = KafkaBroker().__enter__()
            bootstrap = broker.bootstrap_servers
        topic = _small_topic(bootstrap)
        # the broker's first group creates __consumer_offsets: not part of anyone's start-up
        child_member_warm = ["member", bootstrap, topic, "1"]
        _run_child(ROOT, child_member_warm)

        print(
            f"member alone: GroupMember() -> initial offsets, ms ({args.runs} runs x "
            f"{args.rounds} round(s), {PARTITIONS} partitions), median / best"
        )
        print(f"{'tree':<16} {'initial':>8} {'best':>8} {'+AvailableNow':>14} {'best':>8}")
        members: dict[str, dict[str, list[float]]] = {}
        for _ in range(args.rounds):
            for name, tree in trees:
                r = _run_child(tree, ["member", bootstrap, topic, str(args.runs)])
                pooled = members.setdefault(name, {"initial": [], "available_now": []})
                for kind, values in r.items():
                    pooled[kind] += values
        for name, r in members.items():
            print(f"{name:<16} {_stats(r['initial'])} {'':>5} {_stats(r['available_now'])}")
        if args.spark:
            extra = ["kafka"] if args.spark_kafka else []
            print(
                f"\nin Spark (local[2], Trigger.AvailableNow; {args.rounds} session(s) per tree, "
                f"{args.spark_runs} queries each after a warm-up): ms from start(), median / best"
            )
            print(
                f"{'tree':<16} {'1st batch':>9} {'best':>6} {'member created':>15} "
                f"{'joined':>7} {'ready':>6} {'query end':>9}"
            )
            sessions: dict[str, dict[str, list[Any]]] = {}
            for _ in range(args.rounds):
                for name, tree in trees:
                    r = _run_child(tree, ["spark", bootstrap, topic, str(args.spark_runs), *extra])
                    pooled_runs = sessions.setdefault(name, {})
                    for key, values in r.items():
                        pooled_runs.setdefault(key, []).extend(values)
            kafka_rows: list[tuple[str, list[float]]] = []
            for name, r in sessions.items():
                phases = r["phases"]

                def median(i: int, rows: list[list[float | None]] = phases) -> str:
                    known = [v for row in rows if (v := row[i]) is not None]
                    return f"{statistics.median(known):.0f}" if known else "-"

                ours = r["ours"]
                print(
                    f"{name:<16} {statistics.median(ours):9.0f} {min(ours):6.0f} "
                    f"{median(0):>15} {median(1):>7} {median(2):>6} {median(3):>9}"
                )
                if r["spark_kafka"]:
                    kafka_rows.append((name, r["spark_kafka"]))
            for name, values in kafka_rows:
                print(
                    f"{'Spark kafka':<16} {statistics.median(values):9.0f} {min(values):6.0f}"
                    f"   (Spark's own source, in the {name} session)"
                )
            print(
                "(member created: consumer_created logged by the source's driver worker, after "
                "Spark launched it and it imported pyspark and kafka_actors; joined: the member "
                "STABLE; ready: group_member_ready, also offsets known, trees that log it)"
            )
    finally:
        if broker is not None:
            broker.__exit__(None, None, None)
        if baseline is not None:
            baseline.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
