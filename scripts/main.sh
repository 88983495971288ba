#!/usr/bin/env bash
# The main job on the embedded default (librdkafka's in-process mock cluster), with all of
# its own set-up (virtual environment, Python dependencies). Extra arguments go to the job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh test,bench,spark
exec .venv/bin/python -m kafka_actors probe "$@"
