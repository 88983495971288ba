"""Orders pipeline: Kafka → Spark Structured Streaming (the kafka-actors source) → Parquet and
the console.

A generator produces JSON order events ``{"order_id", "product", "quantity", "price", "ts"}``
(``ts`` in epoch milliseconds, event time advancing ~1 s per 200 orders) to a topic with
confluent-kafka while a Spark query (local[2]) reads them through the ``kafka-actors`` source as
a member of a consumer group, parses them, and aggregates revenue per product per 10-second
event-time window with a 10-second watermark. Each finished window is appended to Parquet
(one directory per micro-batch, overwritten if Spark replays the batch, so a replay writes it
once) and printed. After every micro-batch one progress line shows the batch's input rows,
records/s, and the group's lag as the source's group member sees it (the end offsets it looked
up minus the offsets it committed to the group, carried by the query progress: no second
consumer asks the group; ``kafka_actors.spark.group_lag``). The program stops by itself once
every generated order has been read and every window has been emitted, and prints a summary
(total revenue read back from Parquet against what the generator produced).

Run it on the embedded default (librdkafka's mock cluster, in this process; it keeps only about
40k records per partition, so the default demo is small)::

    python examples/orders_pipeline.py

or against a real cluster::

    python examples/orders_pipeline.py --bootstrap-servers host:9092 --topic orders --produce-demo

Needs the ``spark`` extra (pyspark >= 4.2, pyarrow) and Java 17+.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRODUCTS = {
    "keyboard": 49.0,
    "mouse": 19.5,
    "monitor": 189.0,
    "laptop": 999.0,
    "headset": 79.9,
    "webcam": 59.0,
}
#: The generator's last event: its event time pushes the watermark past every real window; the
#: pipeline drops its (never emitted) window from the output.
END_MARKER = "__end__"
WINDOW = "10 seconds"
WATERMARK = "10 seconds"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--bootstrap-servers",
        help="a real cluster (default: an embedded librdkafka mock cluster)",
    )
    parser.add_argument("--topic", default=None, help="default: orders-<random>")
    parser.add_argument("--group", default=None, help="consumer group (default: <topic>-job)")
    parser.add_argument("--partitions", type=int, default=4, help="for a topic we create")
    parser.add_argument("--orders", type=int, default=20_000, help="orders to generate")
    parser.add_argument("--rate", type=float, default=5_000.0, help="orders per second")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=4_000)
    parser.add_argument("--output", default=None, help="Parquet directory (default: temp)")
    parser.add_argument("--checkpoint", default=None, help="checkpoint (default: temp)")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after (s)")
    parser.add_argument(
        "--group-protocol",
        choices=["consumer", "classic"],
        default=None,
        help="default: consumer (KIP-848)",
    )
    parser.add_argument(
        "--subscribe-pattern",
        action="store_true",
        help="subscribe by the regex ^topic$ (always on the embedded mock)",
    )
    parser.add_argument(
        "--produce-demo",
        action="store_true",
        help="allow creating --topic and writing the generated orders into --bootstrap-servers",
    )
    args = parser.parse_args(argv)
    if args.bootstrap_servers and not args.produce_demo:
        parser.error(
            "this example creates a topic and writes generated orders into the cluster you "
            "named: pass --produce-demo to allow it"
        )
    return args


@dataclass
class Generated:
    count: int = 0
    revenue: float = 0.0
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


def generate(bootstrap: str, topic: str, orders: int, rate: float, out: Generated) -> None:
    """Produce ``orders`` JSON events at about ``rate`` per second, then the end marker."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "log_level": 3})
    rng = random.Random(7)
    base_ms = int(time.time() * 1000) - 3_600_000
    started = time.monotonic()
    try:
        for i in range(orders):
            product = rng.choice(list(PRODUCTS))
            quantity = rng.randint(1, 5)
            price = PRODUCTS[product]
            event = {
                "order_id": i,
                "product": product,
                "quantity": quantity,
                "price": price,
                "ts": base_ms + i * 5,  # 200 orders per second of event time
            }
            producer.produce(topic, key=str(i).encode(), value=json.dumps(event).encode())
            out.revenue += quantity * price
            out.count += 1
            if i % 500 == 0:
                producer.poll(0)
                ahead = i / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
        end = {
            "order_id": -1,
            "product": END_MARKER,
            "quantity": 0,
            "price": 0.0,
            "ts": base_ms + orders * 5 + 60_000,
        }
        # one end marker per partition, so every partition's watermark input advances
        metadata = producer.list_topics(topic, timeout=10).topics[topic]
        for partition in metadata.partitions:
            producer.produce(topic, value=json.dumps(end).encode(), partition=partition)
        if producer.flush(60) != 0:
            raise RuntimeError("the generator could not deliver every order")
    except BaseException as exc:
        out.error = exc
    finally:
        out.done.set()


def write_parquet(rows: list[dict[str, Any]], directory: Path) -> None:
    """One batch's windows as one Parquet file; a replayed batch replaces its own file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows)
    tmp = directory / ".part.parquet.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, directory / "part.parquet")


def format_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'window':<27} {'product':<9} {'revenue':>12} {'units':>6} {'orders':>6}"]
    for r in rows:
        window = f"{r['window_start']:%H:%M:%S}-{r['window_end']:%H:%M:%S}"
        lines.append(
            f"{window:<27} {r['product']:<9} {r['revenue']:>12.2f} {r['units']:>6} {r['orders']:>6}"
        )
    return "\n".join(lines)


def build_spark() -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("orders-pipeline")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from kafka_actors.spark import register

    register(spark)
    return spark


def build_query(
    spark: Any,
    args: argparse.Namespace,
    bootstrap: str,
    paths: dict[str, str],
    emitted: list[int],
) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        DoubleType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    order = StructType(
        [
            StructField("order_id", LongType()),
            StructField("product", StringType()),
            StructField("quantity", IntegerType()),
            StructField("price", DoubleType()),
            StructField("ts", LongType()),
        ]
    )
    raw = (
        spark.readStream.format("kafka-actors")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.group.id", args.group)
        .option("kafka.group.protocol", args.group_protocol)
        .option(*args.subscription)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        .option("checkpointLocation", paths["checkpoint"])
        .load()
    )
    orders = (
        raw.select(F.from_json(F.col("value").cast("string"), order).alias("o"))
        .select("o.*")
        .withColumn("event_time", F.timestamp_millis("ts"))
        .withWatermark("event_time", WATERMARK)
    )
    revenue = orders.groupBy(F.window("event_time", WINDOW), "product").agg(
        F.round(F.sum(F.col("quantity") * F.col("price")), 2).alias("revenue"),
        F.sum("quantity").alias("units"),
        F.count("*").alias("orders"),
    )
    output = paths["output"]

    def write_batch(batch: Any, batch_id: int) -> None:
        rows = batch.select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "product",
            "revenue",
            "units",
            "orders",
        )
        # the end markers are aggregated like orders (a filter before the aggregation would be
        # pushed below the watermark and stop them from moving it) and dropped here
        closed = sorted(
            (r.asDict() for r in rows.collect() if r["product"] != END_MARKER),
            key=lambda r: (r["window_start"], r["product"]),
        )
        if not closed:
            return
        write_parquet(closed, Path(output) / f"batch={batch_id}")
        emitted[0] += sum(int(r["orders"]) for r in closed)
        print(f"-- batch {batch_id}: {len(closed)} windows closed by the watermark --")
        print(format_table(closed), flush=True)

    return (
        revenue.writeStream.outputMode("append")
        .foreachBatch(write_batch)
        .option("checkpointLocation", paths["checkpoint"])
        .trigger(processingTime="1 second")
        .start()
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from kafka_actors.log import configure

    # before any consumer module binds its logger; the Spark workers do the same on their own
    configure(level=os.environ.get("KAFKA_ACTORS_LOG_LEVEL", "WARNING"))
    args.topic = args.topic or f"orders-{uuid.uuid4().hex[:8]}"
    args.group = args.group or f"{args.topic}-job"
    workdir = Path(tempfile.mkdtemp(prefix="orders-pipeline-"))
    paths = {
        "output": args.output or str(workdir / "revenue"),
        "checkpoint": args.checkpoint or str(workdir / "checkpoint"),
    }
    mock = None
    if args.bootstrap_servers:
        bootstrap = args.bootstrap_servers
        _ensure_topic(bootstrap, args.topic, args.partitions)
    else:
        from kafka_actors.testing.mock import MockCluster

        mock = MockCluster(num_brokers=1).start()
        bootstrap = mock.bootstrap_servers
        mock.create_topic(args.topic, partitions=args.partitions)
        # librdkafka's mock serves KIP-848 groups subscribed by regex (a heartbeat naming
        # topics aborts it, and it closes the connection on JoinGroup v6)
        args.subscribe_pattern = True
        print(f"embedded mock cluster at {bootstrap}")
    args.group_protocol = args.group_protocol or "consumer"
    subscription = (
        ("subscribePattern", f"^{re.escape(args.topic)}$")
        if args.subscribe_pattern
        else ("subscribe", args.topic)
    )
    args.subscription = subscription
    print(
        f"topic {args.topic}, group {args.group} ({args.group_protocol} protocol), "
        f"output {paths['output']}"
    )

    generated = Generated()
    spark = build_spark()
    lag_after: list[int | None] = [None]  # the group's lag after the newest batch
    progress_lock = threading.Lock()
    consumed = [0]
    emitted = [0]  # orders in the windows written so far

    from pyspark.sql.streaming.listener import StreamingQueryListener

    from kafka_actors.spark import group_lag as spark_group_lag

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            p = event.progress
            with progress_lock:
                consumed[0] += int(p.numInputRows)
                total = consumed[0]
            # the lag as the source's group member saw it (its reported end offsets minus
            # what it committed), carried by the progress: no second consumer asks the group
            source = p.sources[0] if p.sources else None
            group_lag: object = "?"
            try:
                if source is not None:
                    during = spark_group_lag(source)
                    after = spark_group_lag(source, after_batch=True)
                    with progress_lock:
                        lag_after[0] = after
                    # a query's first batch has no start in the progress
                    group_lag = f"{'?' if during is None else during} ({after} after the batch)"
            except Exception as exc:  # report, do not stop the pipeline
                group_lag = f"? ({exc})"
            print(
                f"[progress] batch {p.batchId}: rows {p.numInputRows}, "
                f"{p.processedRowsPerSecond:.0f} records/s, read {total}, "
                f"group lag {group_lag}",
                flush=True,
            )

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    spark.streams.addListener(Progress())
    query = build_query(spark, args, bootstrap, paths, emitted)
    producer = threading.Thread(
        target=generate,
        args=(bootstrap, args.topic, args.orders, args.rate, generated),
        daemon=True,
    )
    producer.start()
    deadline = time.monotonic() + args.timeout
    status = 0
    try:
        while True:
            if query.exception() is not None:
                raise RuntimeError(f"the query failed: {query.exception()}")
            if generated.error is not None:
                raise RuntimeError(f"the generator failed: {generated.error}")
            if generated.done.is_set() and emitted[0] >= generated.count:
                # every order is in a window the watermark closed and the sink wrote; wait
                # (briefly) for a progress (reported after Spark's commit log holds the batch)
                # saying the member has nothing left to read; stopping the query then commits
                # that batch to the group (the source knows the checkpoint)
                settle = time.monotonic() + 30
                while lag_after[0] != 0 and time.monotonic() < settle:
                    time.sleep(0.5)
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"not done after {args.timeout}s")
            time.sleep(0.5)
    except Exception as exc:
        print(f"pipeline failed: {exc}", file=sys.stderr)
        status = 1
    finally:
        query.stop()
        final_lag = lag_after[0]
    if status == 0:
        from pyspark.sql import functions as F

        table = spark.read.parquet(paths["output"])
        summary = table.agg(
            F.round(F.sum("revenue"), 2).alias("revenue"),
            F.sum("orders").alias("orders"),
            F.countDistinct("window_start").alias("windows"),
        ).collect()[0]
        print("-- revenue per product (all windows, from Parquet) --")
        table.groupBy("product").agg(
            F.round(F.sum("revenue"), 2).alias("revenue"), F.sum("orders").alias("orders")
        ).orderBy("product").show(truncate=False)
        print(
            f"summary: {summary['orders']} orders in {summary['windows']} windows, revenue "
            f"{summary['revenue']:.2f} (generated {generated.count} orders, revenue "
            f"{generated.revenue:.2f}); final group lag {final_lag}"
        )
        if summary["orders"] != generated.count or abs(
            summary["revenue"] - generated.revenue
        ) > 0.01 * max(1, generated.count):
            print("pipeline check failed: Parquet does not hold every order once", file=sys.stderr)
            status = 1
    spark.stop()
    if mock is not None:
        mock.stop()
    if args.output is None and args.checkpoint is None and status == 0:
        shutil.rmtree(workdir, ignore_errors=True)
    return status


def _ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    if topic in admin.list_topics(timeout=30).topics:
        return
    future = admin.create_topics([NewTopic(topic, partitions, 1)])[topic]
    try:
        future.result(30)
    except Exception as exc:
        if "already exists" not in str(exc).lower():
            raise


if __name__ == "__main__":
    sys.exit(main())
