"""``python -m kafka_actors <command>``: see :mod:`kafka_actors.cli`."""

from __future__ import annotations

import sys

from kafka_actors.cli import main
from kafka_actors.cli.probe import probe as _probe
from kafka_actors.cli.probe import produce_demo as _produce_demo

__all__ = ["_probe", "_produce_demo", "main"]

if __name__ == "__main__":
    sys.exit(main())
