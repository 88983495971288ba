#!/usr/bin/env bash
# The whole test suite, with all of its own set-up: virtual environment, Python
# dependencies, Kafka jars (resolved from Maven Central by the testkit into
# ~/.cache/kafka-actors). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh test,bench,spark,thespian
PY=.venv/bin/python
echo "== lint: ruff"
$PY -m ruff check .
echo "== types: mypy"
$PY -m mypy
echo "== Kafka jars"
$PY -m kafka_actors.testing fetch
echo "== pytest"
set +e
$PY -m pytest --durations=30 --reruns 1 "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure here" >&2
    exit 1
fi
exit "$rc"
