"""The package version, in a module of its own so that any layer (the package root, the
protocol's ApiVersions client software version) reads it without importing the package root.

Owns: ``__version__`` (the one place the version is written; pyproject reads it through
``kafka_actors.__version__``). May touch: nothing.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0.dev0"
