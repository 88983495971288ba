#!/usr/bin/env bash
# The whole test suite, with all of its own set-up: virtual environment, Python
# dependencies, Kafka jars (resolved through Maven by the testkit into ~/.cache/kafka-actors).
# Extra arguments go to pytest.
#
#   bash scripts/test.sh            # everything (what CI runs)
#   bash scripts/test.sh --quick    # no broker, no mock cluster, no Spark cluster, no install:
#                                   # the unit tier for development (a few minutes)
#   bash scripts/test.sh tests/aio  # a folder (any pytest arguments)
#
# Tests run side by side in KAFKA_ACTORS_TEST_WORKERS pytest-xdist workers (default 3: most
# broker tests wait on broker timers, three overlap them on two cores without starving the JVMs; 0 runs them in this
# process). No test is run again after a failure: a test that fails once is a failure.
# Durations (the 30 slowest tests, time per folder) are printed at the end, from
# .test-results/junit.xml (scripts/test_durations.py).
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=0
ARGS=()
for a in "$@"; do
    if [ "$a" = "--quick" ]; then QUICK=1; else ARGS+=("$a"); fi
done
bash scripts/bootstrap.sh test,bench,spark,thespian,kerberos
PY=.venv/bin/python
echo "== lint: ruff"
$PY -m ruff check .
echo "== types: mypy"
$PY -m mypy
MARKS=()
if [ "$QUICK" -eq 1 ]; then
    MARKS=(-m "not broker and not mock and not cluster and not spark_cluster and not install")
else
    echo "== Kafka jars"
    $PY -m kafka_actors.testing fetch
fi
WORKERS="${KAFKA_ACTORS_TEST_WORKERS:-3}"
XDIST=()
if [ "$WORKERS" != "0" ]; then
    XDIST=(-n "$WORKERS" --dist loadgroup --no-loadscope-reorder)
fi
mkdir -p .test-results
echo "== pytest (${WORKERS} workers)"
set +e
$PY -m pytest "${XDIST[@]}" "${MARKS[@]}" --junitxml=.test-results/junit.xml "${ARGS[@]}"
rc=$?
if [ -s .test-results/junit.xml ]; then
    echo "== durations"
    $PY scripts/test_durations.py .test-results/junit.xml --top 30 || true
fi
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
