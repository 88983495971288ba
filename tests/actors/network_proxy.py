"""A tiny TCP forwarder for tests: listen on one address (e.g. IPv6 loopback), forward to a
broker, and cut every connection on demand (a socket closed under in-flight requests).

Owns: its listening socket, its accepted and upstream sockets, one thread. Test code only.
"""

from __future__ import annotations

import selectors
import socket
import threading
from types import TracebackType


class TcpProxy:
    def __init__(self, listen_host: str, target: tuple[str, int]) -> None:
        family = socket.AF_INET6 if ":" in listen_host else socket.AF_INET
        self._server = socket.socket(family, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind((listen_host, 0))
        self._server.listen(16)
        self._server.setblocking(False)
        self.host = listen_host
        self.port: int = self._server.getsockname()[1]
        self.target = target
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ, None)
        self._peers: dict[socket.socket, socket.socket] = {}
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._cut = False
        self._stop = False
        self.accepted = 0
        self._thread = threading.Thread(target=self._run, name="test-proxy", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def cut(self) -> None:
        """Close every proxied connection now (both sides)."""
        with self._lock:
            self._cut = True
        self._wake_w.send(b"x")

    def close(self) -> None:
        self._stop = True
        self._wake_w.send(b"x")
        self._thread.join(5)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _drop(self, sock: socket.socket) -> None:
        other = self._peers.pop(sock, None)
        for s in (sock, other):
            if s is None:
                continue
            self._peers.pop(s, None)
            try:
                self._selector.unregister(s)
            except (KeyError, ValueError):
                pass
            s.close()

    def _run(self) -> None:
        while not self._stop:
            for key, _mask in self._selector.select(1.0):
                if key.data == "wake":
                    self._wake_r.recv(64)
                    with self._lock:
                        cut, self._cut = self._cut, False
                    if cut:
                        for s in list(self._peers):
                            self._drop(s)
                elif key.fileobj is self._server:
                    try:
                        client, _ = self._server.accept()
                    except BlockingIOError:
                        continue
                    try:
                        upstream = socket.create_connection(self.target)
                    except OSError:  # the target is down: refuse as it would
                        client.close()
                        continue
                    self.accepted += 1
                    self._peers[client] = upstream
                    self._peers[upstream] = client
                    for s in (client, upstream):
                        s.setblocking(True)
                        self._selector.register(s, selectors.EVENT_READ, "peer")
                else:
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    if sock not in self._peers:
                        continue
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        self._drop(sock)
                        continue
                    try:
                        self._peers[sock].sendall(data)
                    except OSError:
                        self._drop(sock)
        for s in list(self._peers):
            self._drop(s)
        self._server.close()
        self._selector.close()
