"""Alias: the asyncio comparison now runs inside ``bench/consume.py``.

Owns nothing. Runs ``bench/consume.py`` with only the asyncio clients (kafka-actors async and
aiokafka, ``getmany`` and ``async for``); any other option is passed on.

    .venv/bin/python bench/consume_async.py [--records 1000000] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ASYNC_CLIENTS = "kafka-actors async,aiokafka,kafka-actors async iter,aiokafka iter"

if __name__ == "__main__":
    script = str(Path(__file__).resolve().with_name("consume.py"))
    argv = sys.argv[1:]
    if not any(a == "--clients" or a.startswith("--clients=") for a in argv):
        argv = ["--clients", ASYNC_CLIENTS, *argv]
    os.execv(sys.executable, [sys.executable, script, *argv])
