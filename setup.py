"""Build hook beside pyproject.toml (which stays the metadata source): the native record path.

``kafka_actors.protocol._crecords`` is a C extension (CPython API, no dependency) built by every
install from source (wheel, sdist, editable). It is optional: when no C compiler is present or
the compile fails, the install still succeeds, with the pure-Python record path, and
``kafka_actors.protocol.records.IMPLEMENTATION`` says ``"python"`` (with the reason in
``NATIVE_UNAVAILABLE_REASON``, logged at INFO when a consumer starts).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kafka_actors.protocol._crecords",
            sources=["kafka_actors/protocol/_crecords.c"],
            optional=True,
        )
    ]
)
