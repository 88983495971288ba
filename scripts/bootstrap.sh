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
# The kerberos extra (python-gssapi) compiles against the system's Kerberos headers
# (krb5-config). Missing: as root with apt-get, Debian's libkrb5-dev is installed; otherwise
# the extra is left out with a warning (the GSSAPI tests then skip, saying why) and the rest
# installs as usual.
without_kerberos() {
    EXTRAS="$(echo ",$EXTRAS," | sed 's/,kerberos,/,/; s/^,//; s/,$//')"
}
if [[ ",$EXTRAS," == *",kerberos,"* ]] && ! command -v krb5-config >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "bootstrap: installing libkrb5-dev (headers for the kerberos extra)"
        if ! { apt-get update -qq >/dev/null &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libkrb5-dev >/dev/null; }; then
            echo "warning: apt-get could not install libkrb5-dev: the kerberos extra (gssapi)" \
                "is left out (the GSSAPI tests then skip, saying why)" >&2
            without_kerberos
        fi
    else
        echo "warning: krb5-config not found and not root with apt-get: the kerberos extra" \
            "(gssapi) is left out; install your system's Kerberos headers (Debian:" \
            "libkrb5-dev) and run this again for SASL/GSSAPI" >&2
        without_kerberos
    fi
fi
STAMP=".venv/.kafka-actors-installed"
WANT="$(sha256sum pyproject.toml | cut -c1-16) $EXTRAS"
if [ ! -f "$STAMP" ] || ! grep -qxF "$WANT" "$STAMP"; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[$EXTRAS]"
    # Several extras sets may share one venv: remember each that was installed.
    echo "$WANT" >> "$STAMP"
fi
# The install built the native record path (kafka_actors/protocol/records/_crecords.c) when a C
# compiler was present; an editable install does not rebuild it when the C source changes.
# Rebuilt when the C source changed since the last attempt (an attempt without a compiler is
# not repeated for the same source: the pure-Python path is used and says why).
SO="$(ls kafka_actors/protocol/records/_crecords.*.so 2>/dev/null | head -1 || true)"
NATIVE_STAMP=".venv/.kafka-actors-native"
SRC_HASH="$(sha256sum kafka_actors/protocol/records/_crecords.c setup.py | sha256sum | cut -c1-16)"
if { [ -z "$SO" ] || [ kafka_actors/protocol/records/_crecords.c -nt "$SO" ]; } \
    && ! grep -qxF "$SRC_HASH" "$NATIVE_STAMP" 2>/dev/null; then
    .venv/bin/python -m pip install --quiet --no-deps -e . \
        || echo "warning: reinstall failed" >&2
    echo "$SRC_HASH" > "$NATIVE_STAMP"
fi
# pip byte-compiles a regular install but not an editable one, and where
# PYTHONDONTWRITEBYTECODE is set no process writes the bytecode either: every Python process
# (the tests start many) would compile the package from source, 0.4-0.8 s each. Compiled here
# (only what changed since the last time), as a regular install has it.
.venv/bin/python -m compileall -q kafka_actors >/dev/null
.venv/bin/python -c "from kafka_actors.protocol.records import decode as r; print('record path:', r.IMPLEMENTATION, r.NATIVE_UNAVAILABLE_REASON)"
