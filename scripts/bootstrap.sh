#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv and installs the
# project with the extras named in $1 (default: test,bench). Idempotent: it reinstalls only
# when pyproject.toml or the extras change.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${1:-test,bench}"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
STAMP=".venv/.kafka-actors-installed"
WANT="$(sha256sum pyproject.toml | cut -c1-16) $EXTRAS"
if [ ! -f "$STAMP" ] || ! grep -qxF "$WANT" "$STAMP"; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[$EXTRAS]"
    # Several extras sets may share one venv: remember each that was installed.
    echo "$WANT" >> "$STAMP"
fi
# The optional compiled record decoder (mypyc; needs a C compiler). Rebuilt only when
# records.py changed; without it kafka-actors runs in pure Python, so a failed build only warns.
if ! .venv/bin/python -m kafka_actors.speedups status 2>/dev/null | grep -q "built and current"; then
    .venv/bin/python -m kafka_actors.speedups build >/dev/null 2>&1 \
        || echo "warning: the compiled record decoder did not build; using pure Python" >&2
fi
