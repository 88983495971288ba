"""A ParallelConsumer group member in its own process, to be SIGTERMed or killed (SIGKILL) by
the Show 2 tests (``tests/parallel/test_show_2_faults.py``).

``python -m tests.parallel.member BOOTSTRAP TOPIC GROUP PROTOCOL OUT HANDLER_MS``: handles
records with a handler that sleeps HANDLER_MS, appending ``S partition offset`` to OUT when
a handler starts and ``D partition offset`` when it is done (one ``os.write`` of an
``O_APPEND`` file each: a line survives a SIGKILL once written). SIGTERM stops the consumer
(``pc.stop()`` from the signal handler), which then closes: awaits its records in flight,
commits and leaves. Prints ``consuming`` once its first record is done, ``closed`` at the end.

Owns nothing outside the tests.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import FrameType

from kafka_actors import ParallelConsumer
from kafka_actors.protocol.records.decode import ConsumerRecord
from tests.parallel.faults import member_config


def main(argv: list[str]) -> None:
    bootstrap, topic, group, protocol, out_path, handler_ms = argv
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    first = threading.Event()
    sleep_s = int(handler_ms) / 1000

    def handle(record: ConsumerRecord) -> None:
        os.write(fd, b"S %d %d\n" % (record.partition, record.offset))
        time.sleep(sleep_s)
        os.write(fd, b"D %d %d\n" % (record.partition, record.offset))
        if not first.is_set():
            first.set()
            print("consuming", flush=True)

    pc = ParallelConsumer(
        member_config(bootstrap, group, protocol), handler=handle, max_concurrency=8
    )

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        pc.stop()

    signal.signal(signal.SIGTERM, on_term)
    with pc:
        pc.subscribe([topic])
        pc.run()
    os.close(fd)
    print("closed", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
