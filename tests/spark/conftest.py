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
