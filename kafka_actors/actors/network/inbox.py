"""The NetworkActor's mailbox (:class:`SelectorInbox`): a queue whose blocking ``get`` also
waits on the sockets and the actor's next deadline (see "How it wakes up" in
:mod:`kafka_actors.actors.network`).

Owns: the ``selectors`` selector every broker socket is registered with, and the socketpair a
``put`` writes to wake the actor. May touch: the driver it is given (the NetworkActor's
``io_timeout`` / ``on_io``), :func:`kafka_actors.runtime.envelope`.
"""

from __future__ import annotations

import queue
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

from kafka_actors.actors.network.messages import IoFailure
from kafka_actors.runtime import envelope

__all__ = ["SelectorInbox"]


class _Driver(Protocol):
    def io_timeout(self) -> float | None: ...

    def on_io(self, events: list[tuple[selectors.SelectorKey, int]]) -> None: ...


_WAKE: Final = object()


class SelectorInbox(queue.Queue[Any]):
    """A pykka inbox whose blocking ``get`` waits on sockets and deadlines too (module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self.selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        self._signaled = False
        self.driver: _Driver | None = None
        #: Told the nanoseconds each select waited (io-wait-ratio), when set.
        self.on_wait: Callable[[int], None] | None = None
        #: Times ``select`` returned (idle-CPU and wake-up accounting in tests/benchmarks).
        self.wakeups = 0

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        if not self._signaled:
            self._signaled = True
            try:
                self._wake_w.send(b"\0")
            except OSError:  # full (a wake-up is pending anyway) or closed at shutdown
                pass

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        driver = self.driver
        if not block or timeout is not None or driver is None:
            return super().get(block, timeout)
        while True:
            try:
                return super().get(False)
            except queue.Empty:
                pass
            driver = self.driver
            if driver is None:
                return super().get()
            try:
                on_wait = self.on_wait
                if on_wait is None:
                    ready = self.selector.select(driver.io_timeout())
                else:
                    started = time.monotonic_ns()
                    ready = self.selector.select(driver.io_timeout())
                    on_wait(time.monotonic_ns() - started)
                self.wakeups += 1
                io: list[tuple[selectors.SelectorKey, int]] = []
                woken = False
                for key, mask in ready:
                    if key.data is _WAKE:
                        # Drain first, then clear: a put in between finds the flag still set
                        # and sends nothing, but its envelope is already queued and the loop
                        # reads the queue again before it next blocks. (Clearing first would
                        # let a put's byte be drained while the flag stays set: a lost wake-up.)
                        self._drain()
                        self._signaled = False
                        woken = True
                    else:
                        io.append((key, mask))
                if io or not woken:  # sockets ready or a deadline passed (a mailbox-only
                    driver.on_io(io)  # wake-up is followed by handling the message anyway)
            except Exception as exc:
                self.driver = None
                return envelope(IoFailure(exc))

    def _drain(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def close(self) -> None:
        self.driver = None
        try:
            self.selector.close()
        finally:
            self._wake_r.close()
            self._wake_w.close()
