"""Fixtures of the Spark tests: one local[2] SparkSession per test session (small driver memory,
no UI, loopback only), with the kafka-actors source registered. Tests needing it are skipped
with a reason when pyspark (the ``spark`` extra) is not installed; the pure tests of this
directory run without it."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

#: Spark's test JVMs (the local session's driver, the main job's driver, the standalone
#: cluster's master, workers, driver and executors) run with the C1 compiler only: they live
#: for seconds to minutes, and C2's background compiles were a third of their CPU on this
#: 2-core machine (one Spark test: 65.5 CPU-s with C2, 45.1 with C1 only). Set the variables
#: to run them otherwise. SPARK_SUBMIT_OPTS reaches every driver pyspark launches.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", TEST_JVM_OPTIONS)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    try:
        import pyarrow  # noqa: F401
        from pyspark.sql import SparkSession
    except ImportError as exc:
        pytest.skip(f"pyspark/pyarrow not installed (the 'spark' extra): {exc}")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kafka-actors-tests")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from kafka_actors.spark import register

    register(session)
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()
