#!/usr/bin/env bash
# The main job on the embedded default (librdkafka's in-process mock cluster), with all of
# its own set-up (virtual environment, Python dependencies incl. PySpark): the orders
# pipeline (generator -> kafka-actors Spark source as a group member -> windowed revenue ->
# Parquet + console). Extra arguments go to the job (e.g. --bootstrap-servers host:port
# --produce-demo: the job writes its generated orders into that cluster only when asked).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh test,bench,spark,thespian
exec .venv/bin/python examples/orders_pipeline.py "$@"
