"""The driver of the Spark standalone cluster test, run as its own process (a Python process
holds one SparkContext, and the test suite's local[2] session may exist already).

Runs one streaming query of the kafka-actors source against ``--master`` into Parquet, with the
checkpoint given to the sink and to the source. ``--until N``: a processing-time trigger, stopped
once N rows are committed; without it: Trigger.AvailableNow to the end of the topic. Prints one
line ``progress <batch id> <rows>`` per batch (the test kills a worker on cue) and finally
``done <json>`` with the rows the query committed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

_out = threading.Lock()


def say(line: str) -> None:
    """One whole line on stdout (the listener's thread prints too)."""
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--max-per-trigger", type=int, required=True)
    parser.add_argument("--until", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=400.0)
    args = parser.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQueryListener

    spark = (
        SparkSession.builder.master(args.master)
        .appName("kafka-actors-cluster-test")
        .config("spark.driver.memory", "512m")
        .config("spark.executor.memory", "450m")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.task.maxFailures", "8")
        .config("spark.python.worker.reuse", "true")
        # the test JVMs' options (tests/spark/conftest.py) for the executors too
        .config("spark.executor.extraJavaOptions", os.environ.get("SPARK_SUBMIT_OPTS", ""))
        # the executors' Python workers import this worktree's kafka_actors
        .config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from kafka_actors.spark import register

    register(spark)

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: object) -> None:
            pass

        def onQueryProgress(self, event: object) -> None:
            p = event.progress  # type: ignore[attr-defined]
            say(f"progress {p.batchId} {p.numInputRows}")

        def onQueryIdle(self, event: object) -> None:
            pass

        def onQueryTerminated(self, event: object) -> None:
            pass

    spark.streams.addListener(Progress())
    df = (
        spark.readStream.format("kafka-actors")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("kafka.group.id", args.group)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_per_trigger))
        .option("checkpointLocation", args.checkpoint)
        .load()
    )
    writer = (
        df.writeStream.format("parquet")
        .option("path", args.out)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.until is None:
        query = writer.trigger(availableNow=True).start()
        finished = query.awaitTermination(args.timeout)
    else:
        query = writer.trigger(processingTime="500 milliseconds").start()
        deadline = time.monotonic() + args.timeout
        finished = False
        while time.monotonic() < deadline and query.isActive:
            rows = sum(int(p["numInputRows"]) for p in query.recentProgress)
            if rows >= args.until:
                finished = True
                break
            time.sleep(0.2)
        query.stop()
    error = query.exception()
    rows = sum(int(p["numInputRows"]) for p in query.recentProgress)
    say(
        "done "
        + json.dumps(
            {"finished": bool(finished), "rows": rows, "error": str(error) if error else None}
        )
    )
    spark.stop()
    return 0 if finished and error is None else 1


if __name__ == "__main__":
    sys.exit(main())
