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
# The pure-Python record path too (what an install without a C compiler runs): the decoder's
# own tests only, when the first run used the native path.
if [ "$rc" -eq 0 ] && [ "$($PY -c 'from kafka_actors.protocol.records import decode as r; print(r.IMPLEMENTATION)')" = native ]; then
    echo "== pytest: pure-Python record path (KAFKA_ACTORS_PURE_PYTHON=1)"
    KAFKA_ACTORS_PURE_PYTHON=1 $PY -m pytest -p no:cacheprovider tests/records -m "not broker"
    rc=$?
fi
set -e
if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure here" >&2
    exit 1
fi
exit "$rc"
