"""The NetworkActor's mailbox: a queue whose blocking get also waits on sockets and deadlines.

Stress for lost wake-ups: several producer threads put while the consumer blocks in select
with no deadline; every item must arrive (a lost wake-up hangs the consumer, which the
watchdog turns into a failure).
"""

from __future__ import annotations

import selectors
import socket
import threading
import time

from kafka_actors.actors.network import SelectorInbox


class IdleDriver:
    """No deadlines, no sockets: get() may only wake up through put()."""

    def __init__(self) -> None:
        self.rounds = 0

    def io_timeout(self) -> float | None:
        return None

    def on_io(self, events: list[tuple[selectors.SelectorKey, int]]) -> None:
        self.rounds += 1


def test_no_lost_wakeups_under_concurrent_puts() -> None:
    inbox = SelectorInbox()
    inbox.driver = IdleDriver()
    producers, per_producer = 4, 20_000
    received: list[int] = []

    def consume() -> None:
        for _ in range(producers * per_producer):
            received.append(inbox.get())

    def produce(base: int) -> None:
        for i in range(per_producer):
            inbox.put(base + i)
            if i % 1000 == 0:
                time.sleep(0.001)  # let the consumer drain and block again

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    threads = [
        threading.Thread(target=produce, args=(p * per_producer,), daemon=True)
        for p in range(producers)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    consumer.join(60)
    assert not consumer.is_alive(), f"consumer stuck after {len(received)} items"
    assert sorted(received) == list(range(producers * per_producer))
    inbox.close()


def test_deadline_and_socket_readiness_wake_the_driver() -> None:
    inbox = SelectorInbox()
    a, b = socket.socketpair()
    a.setblocking(False)
    inbox.selector.register(a, selectors.EVENT_READ, 1)
    seen: list[int] = []
    timeouts = iter([0.05, None])

    class Driver:
        def io_timeout(self) -> float | None:
            return next(timeouts, None)

        def on_io(self, events: list[tuple[selectors.SelectorKey, int]]) -> None:
            seen.append(len(events))
            for key, _mask in events:
                key.fileobj.recv(10)  # type: ignore[union-attr]
            if len(seen) == 2:
                inbox.put("done")

    inbox.driver = Driver()
    threading.Timer(0.2, lambda: b.send(b"x")).start()
    got: list[object] = []
    consumer = threading.Thread(target=lambda: got.append(inbox.get()), daemon=True)
    consumer.start()
    consumer.join(10)
    # First wake-up: the 50 ms deadline (no events); second: the socket became readable.
    assert got == ["done"] and seen == [0, 1]
    inbox.close()
    a.close()
    b.close()
