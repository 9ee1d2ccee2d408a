"""A made-up HTTP peer on loopback for the unit tests (an engine, an endpoint): a handler class
served from a thread on a port the kernel picks, its base URL, and a stop that closes it."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Quiet(BaseHTTPRequestHandler):
    """A handler that logs nothing (the test's output is its assertions)."""

    def log_message(self, *args) -> None:
        pass


class LoopbackServer:
    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0):
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.port = self.httpd.server_address[1]
        self.base = f"http://{host}:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
