"""Rows/s through the kafka-actors Spark source vs Spark's built-in Kafka source, same topic,
same query, one run each, and where the time goes.

The query: ``count(*)`` and ``sum(length(value))`` over the whole topic, Trigger.AvailableNow,
each micro-batch aggregated in ``foreachBatch`` (no state store), Spark local[2]. Before the
two measured runs a small warm-up query through each source starts the JVM's code paths and
the Python workers, so neither measured run pays Spark's start-up.

Then the same aggregate as one batch read (``spark.read``, earliest to latest, no group) through
each source, after a warm-up batch read of the small topic, and the ratio of their times.

Spark's Kafka source is ``org.apache.spark:spark-sql-kafka-0-10_2.13`` with its runtime
dependencies (``kafka-clients``, ``commons-pool2``, ``spark-token-provider-kafka-0-10``),
resolved by Maven alone (its configured repositories and mirrors; no repository address here)
into ``${KAFKA_ACTORS_CACHE:-~/.cache/kafka-actors}/spark-sql-kafka-upto-<pyspark>/`` (the same
cache and local repository as the testkit's Kafka jars; no Ivy, no network at query time). The
newest release of the same major version not newer than the installed pyspark is used (a
Maven version range: the repositories may not carry the connector of the newest pyspark, nor
every token-provider release), and the script prints the versions it used.

Also measured, outside Spark: the executors' range reader alone in this process (fetch +
decode + Arrow), which bounds what one Spark task can do, and the pure decode of the same bytes.

Usage::

    python bench/spark.py                       # a real Kafka broker from the testkit
    python bench/spark.py --records 2000000 --bootstrap-servers host:9092
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

_CONNECTOR = (
    ("org.apache.spark", "spark-sql-kafka-0-10_2.13"),
    ("org.apache.spark", "spark-token-provider-kafka-0-10_2.13"),
    ("org.apache.kafka", "kafka-clients"),
    ("org.apache.commons", "commons-pool2"),
)


def _run_copy(pom: Path, deps: str, out: Path) -> None:
    from kafka_actors.testing.jars import maven_repo

    pom.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        f"  <groupId>kafka-actors.bench</groupId><artifactId>{pom.stem}</artifactId>"
        "<version>0</version><packaging>pom</packaging>\n"
        f"  <dependencies>{deps}</dependencies>\n</project>\n"
    )
    proc = subprocess.run(
        [
            "mvn",
            "-B",
            "-q",
            "-f",
            str(pom),
            f"-Dmaven.repo.local={maven_repo()}",
            "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies",
            f"-DoutputDirectory={out}",
            "-DincludeScope=runtime",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"mvn failed:\n{(proc.stdout + proc.stderr)[-3000:]}")


def _vkey(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _alone(group: str, artifact: str, version: str) -> str:
    """A dependency without its own dependencies (Spark ships those)."""
    return (
        f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
        f"<version>{version}</version><exclusions><exclusion><groupId>*</groupId>"
        "<artifactId>*</artifactId></exclusion></exclusions></dependency>"
    )


def _copied(jars_dir: Path, artifact: str) -> str:
    found = [
        m.group(1)
        for p in jars_dir.glob("*.jar")
        if (m := re.fullmatch(rf"{re.escape(artifact)}-(\d[^/]*)\.jar", p.name))
    ]
    if len(found) != 1:
        raise SystemExit(f"connector jar {artifact} missing in {jars_dir}: {found}")
    return found[0]


def _run_mvn_quietly(pom: Path, deps: str, out: Path) -> bool:
    try:
        _run_copy(pom, deps, out)
    except SystemExit:
        return False
    return True


def _releases(group: str, artifact: str, upto: str) -> list[str]:
    """Releases (no -preview / -rc qualifiers) of ``artifact`` with ``upto``'s major version,
    not newer than it, newest first: from the repository metadata that Maven fetched into its
    local repository while resolving the version range (the range's own choice may be a
    preview, whose descriptor may be missing, so it is not used)."""
    from kafka_actors.testing.jars import maven_repo

    major = upto.split(".", 1)[0]
    tmp = cache_root_dir() / "spark-metadata"
    tmp.mkdir(parents=True, exist_ok=True)
    _run_mvn_quietly(
        tmp / "metadata.xml", _alone(group, artifact, f"[{major}.0.0,{upto}]"), tmp / "out"
    )
    folder = maven_repo().joinpath(*group.split("."), artifact)
    found: set[str] = set()
    for meta in folder.glob("maven-metadata-*.xml"):
        found.update(re.findall(r"<version>(\d+\.\d+\.\d+)</version>", meta.read_text()))
    wanted = _vkey(upto)
    return sorted(
        (v for v in found if v.split(".", 1)[0] == major and _vkey(v) <= wanted),
        key=_vkey,
        reverse=True,
    )


def cache_root_dir() -> Path:
    from kafka_actors.testing.jars import cache_root

    return cache_root()


def resolve_connector(spark_version: str) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(group, artifact, version) of Spark's Kafka source and the runtime dependencies Spark
    does not ship, and their jars, resolved once by Maven into the kafka-actors cache:
    ``spark-sql-kafka`` and ``spark-token-provider-kafka`` each in the newest release of
    ``spark_version``'s major not newer than it that resolves, ``kafka-clients`` and
    ``commons-pool2`` in the versions the connector's pom (in Maven's local repository) pins."""
    from kafka_actors.testing.jars import maven_repo

    directory = cache_root_dir() / f"spark-sql-kafka-upto-{spark_version}"
    jars_dir = directory / "jars"
    sql, token = "spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13"
    if not jars_dir.is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        partial = directory / "jars.partial"
        shutil.rmtree(partial, ignore_errors=True)
        version = ""
        for artifact in (sql, token):
            upto = version or spark_version  # the token provider: not newer than the connector
            for candidate in _releases("org.apache.spark", artifact, upto):
                deps = _alone("org.apache.spark", artifact, candidate)
                if _run_mvn_quietly(directory / f"{artifact}.xml", deps, partial):
                    version = version or candidate
                    break
            else:
                raise SystemExit(f"no org.apache.spark:{artifact} release <= {upto} resolves")
        pom = (
            maven_repo() / "org/apache/spark" / sql / version / f"{sql}-{version}.pom"
        ).read_text()

        def pinned(artifact: str) -> str:
            found = re.search(
                rf"<artifactId>{re.escape(artifact)}</artifactId>\s*<version>([^<]+)</version>",
                pom,
            )
            if found is None:
                raise SystemExit(f"{sql} {version}: no {artifact} version in its pom")
            return found.group(1)

        _run_copy(
            directory / "runtime.xml",
            _alone("org.apache.kafka", "kafka-clients", pinned("kafka-clients"))
            + _alone("org.apache.commons", "commons-pool2", pinned("commons-pool2")),
            partial,
        )
        partial.rename(jars_dir)
    coordinates = [
        (group, artifact, _copied(jars_dir, artifact))
        for group, artifact in (
            ("org.apache.spark", sql),
            ("org.apache.spark", token),
            ("org.apache.kafka", "kafka-clients"),
            ("org.apache.commons", "commons-pool2"),
        )
    ]
    return coordinates, sorted(str(p) for p in jars_dir.glob("*.jar"))


def produce(bootstrap: str, topic: str, records: int, size: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": "none",
            "log_level": 3,
        }
    )
    payload = b"x" * size
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=str(i).encode(), value=payload[: size - (i % 7)])
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) != 0:
        raise SystemExit("producer could not deliver every record")


def spark_session(jars: list[str]) -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kafka-actors-bench")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.jars", ",".join(jars))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from kafka_actors.spark import register

    register(spark)
    return spark


def run_query(spark: Any, fmt: str, options: dict[str, str], checkpoint: Path) -> dict[str, Any]:
    from pyspark.sql import functions as F

    totals = {"rows": 0, "bytes": 0}

    def each(batch: Any, _batch_id: int) -> None:
        row = batch.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b")).collect()
        totals["rows"] += int(row[0]["n"])
        totals["bytes"] += int(row[0]["b"] or 0)

    reader = spark.readStream.format(fmt)
    for key, value in options.items():
        reader = reader.option(key, value)
    started = time.perf_counter()
    query = (
        reader.load()
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    if query.exception() is not None:
        raise SystemExit(f"{fmt} query failed: {query.exception()}")
    durations: dict[str, int] = {}
    for progress in query.recentProgress:
        for key, value in progress["durationMs"].items():
            durations[key] = durations.get(key, 0) + int(value)
    return {
        **totals,
        "seconds": elapsed,
        "batches": len(query.recentProgress),
        "durations": durations,
    }


def batch_read(spark: Any, fmt: str, options: dict[str, str]) -> dict[str, Any]:
    """One batch read (``spark.read``) of the whole topic: ``count(*)`` and
    ``sum(length(value))``, timed from ``load()`` to the collected answer."""
    from pyspark.sql import functions as F

    reader = spark.read.format(fmt)
    for key, value in options.items():
        reader = reader.option(key, value)
    started = time.perf_counter()
    row = (
        reader.load().agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b")).collect()[0]
    )
    return {
        "rows": int(row["n"]),
        "bytes": int(row["b"] or 0),
        "seconds": time.perf_counter() - started,
    }


def reader_alone(bootstrap: str, topic: str, partitions: int) -> tuple[int, float, float]:
    """The executors' reader in this process: (rows, seconds, of which decoding seconds)."""
    from kafka_actors.spark import reader as reader_module
    from kafka_actors.spark.reader import RangeReader

    decode_seconds = [0.0]
    original = reader_module.__dict__["decode_records"]

    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            decode_seconds[0] += time.perf_counter() - t

    from kafka_actors import KafkaConsumer, TopicPartition

    with KafkaConsumer({"bootstrap.servers": bootstrap}) as consumer:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    setattr(reader_module, "decode_records", timed)  # noqa: B010
    try:
        reader = RangeReader({"bootstrap.servers": bootstrap})
        rows = 0
        started = time.perf_counter()
        for tp, end in ends.items():
            for batch in reader.read(topic, tp.partition, 0, end):
                rows += batch.num_rows
        elapsed = time.perf_counter() - started
    finally:
        setattr(reader_module, "decode_records", original)  # noqa: B010
    return rows, elapsed, decode_seconds[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", help="default: a testkit Kafka broker")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()

    from kafka_actors.log import configure

    configure(level=os.environ.get("KAFKA_ACTORS_LOG_LEVEL", "WARNING"))
    import pyspark

    coordinates, jars = resolve_connector(pyspark.__version__)
    version = coordinates[0][2]
    note = "" if version == pyspark.__version__ else f" (no {pyspark.__version__} published)"
    print(
        f"pyspark {pyspark.__version__}; Spark's Kafka source: "
        + ", ".join(f"{a} {v}" for _, a, v in coordinates)
        + note
    )

    broker = None
    if args.bootstrap_servers:
        bootstrap = args.bootstrap_servers
    else:
        from kafka_actors.testing.broker import KafkaBroker

        broker = KafkaBroker().__enter__()
        bootstrap = broker.bootstrap_servers
    try:
        topic = f"bench-spark-{uuid.uuid4().hex[:8]}"
        warm = f"{topic}-warm"
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.cimpl import NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
        for name in (topic, warm):
            admin.create_topics([NewTopic(name, args.partitions, 1)])[name].result(60)
        del admin
        t = time.perf_counter()
        produce(bootstrap, topic, args.records, args.value_size)
        produce(bootstrap, warm, 20_000, args.value_size)
        print(
            f"produced {args.records} records of ~{args.value_size} B to {args.partitions} "
            f"partitions in {time.perf_counter() - t:.1f}s"
        )
        spark = spark_session(jars)
        work = Path(f"/tmp/kafka-actors-bench-spark-{uuid.uuid4().hex[:8]}")

        def ours(name: str) -> dict[str, str]:
            return {
                "kafka.bootstrap.servers": bootstrap,
                "kafka.group.id": f"{name}-{uuid.uuid4().hex[:6]}",
                "subscribe": name,
                "startingOffsets": "earliest",
            }

        def builtin(name: str) -> dict[str, str]:
            return {
                "kafka.bootstrap.servers": bootstrap,
                "subscribe": name,
                "startingOffsets": "earliest",
            }

        run_query(spark, "kafka-actors", ours(warm), work / "warm-a")
        run_query(spark, "kafka", builtin(warm), work / "warm-b")
        results = {
            "kafka-actors": run_query(spark, "kafka-actors", ours(topic), work / "a"),
            "kafka (Spark's)": run_query(spark, "kafka", builtin(topic), work / "b"),
        }
        expected_bytes = sum(args.value_size - (i % 7) for i in range(args.records))
        print(
            f"\n{'source':<16} {'rows':>9} {'seconds':>8} {'rows/s':>10} {'batches':>7} "
            f"{'in batches s':>12} {'rows/s there':>12}"
        )
        for name, r in results.items():
            assert r["rows"] == args.records and r["bytes"] == expected_bytes, (name, r)
            in_batches = r["durations"].get("triggerExecution", 0) / 1000.0
            print(
                f"{name:<16} {r['rows']:>9} {r['seconds']:>8.2f} "
                f"{r['rows'] / r['seconds']:>10.0f} {r['batches']:>7} {in_batches:>12.2f} "
                f"{r['rows'] / max(in_batches, 1e-9):>12.0f}"
            )
        print(
            "(seconds: start() to termination, including the source's start-up: for "
            "kafka-actors the driver worker, joining the group and the first offsets)"
        )
        a, b = results["kafka-actors"], results["kafka (Spark's)"]
        ratio = (a["rows"] / a["seconds"]) / (b["rows"] / b["seconds"])
        print(f"ratio kafka-actors / Spark's Kafka source: {ratio:.2f}x")
        print("\nwhere the time goes (ms summed over batches, Spark's durationMs):")
        print(f"  {'':<18} {'ours':>8} {'Spark':>8}")
        keys = sorted(set(a["durations"]) | set(b["durations"]))
        for key in keys:
            print(f"  {key:<18} {a['durations'].get(key, 0):>8} {b['durations'].get(key, 0):>8}")

        # batch reads (spark.read): earliest to latest, no group; warm-up first
        def batch_options(name: str) -> dict[str, str]:
            return {"kafka.bootstrap.servers": bootstrap, "subscribe": name}

        batch_read(spark, "kafka-actors", batch_options(warm))
        batch_read(spark, "kafka", batch_options(warm))
        batches = {
            "kafka-actors": batch_read(spark, "kafka-actors", batch_options(topic)),
            "kafka (Spark's)": batch_read(spark, "kafka", batch_options(topic)),
        }
        print(
            f"\nbatch read (spark.read, whole topic):\n{'source':<16} {'seconds':>8} {'rows/s':>10}"
        )
        for name, r in batches.items():
            assert r["rows"] == args.records and r["bytes"] == expected_bytes, (name, r)
            print(f"{name:<16} {r['seconds']:>8.2f} {r['rows'] / r['seconds']:>10.0f}")
        a, b = batches["kafka-actors"], batches["kafka (Spark's)"]
        print(
            f"batch ratio kafka-actors / Spark's Kafka source: {b['seconds'] / a['seconds']:.2f}x"
        )
        rows, seconds, decoding = reader_alone(bootstrap, topic, args.partitions)
        print(
            f"\nrange reader alone (one process, no Spark): {rows / seconds:,.0f} rows/s; "
            f"decoding {decoding / seconds:.0%} of it, fetch + Arrow the rest"
        )
        spark.stop()
    finally:
        if broker is not None:
            broker.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
