"""Build hook beside pyproject.toml (which stays the metadata source): the native record path.

``kafka_actors.protocol.records._crecords`` is a C extension (CPython API, no dependency) built by
every install from source (wheel, sdist, editable). It is optional: when no C compiler is present or
the compile fails, the install still succeeds, with the pure-Python record path, and
``kafka_actors.protocol.records.decode.IMPLEMENTATION`` says ``"python"`` (with the reason in
``NATIVE_UNAVAILABLE_REASON``, logged at INFO when a consumer starts).

Why C (CPython API) rather than Rust (pyo3/maturin) or Cython: a plain C extension needs
nothing at build time but setuptools and a C compiler, and setuptools' ``optional=True`` turns
a failed compile into a pure-Python install. maturin would make cargo a hard build requirement
(no optional-extension fallback: an install without a Rust toolchain fails), and Cython is one
more build dependency whose output is C anyway. The loop is small (one file) and the part that
costs is allocating the Python objects handed out, which is the same in any of them. Measured
beside the mypyc build of records.py it replaced (bench/decode.py --mypyc): at least as fast on
columns, and it also builds the ConsumerRecords in C.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kafka_actors.protocol.records._crecords",
            sources=["kafka_actors/protocol/records/_crecords.c"],
            optional=True,
        )
    ]
)
