"""A token endpoint on a loopback port for the OAuth unit tests: each POST's headers and body
go to ``answer``, whose ``(status, JSON payload)`` is the reply. Test code only."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

#: ``answer(headers, body) -> (HTTP status, JSON payload)``.
Answer = Callable[[Mapping[str, str], str], tuple[int, dict[str, Any]]]


class LocalTokenServer:
    """Serves ``POST /token`` on 127.0.0.1 (a port of its own) on a thread until ``close``."""

    def __init__(self, answer: Answer) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                status, payload = answer(self.headers, self.rfile.read(length).decode())
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
