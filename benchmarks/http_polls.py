#!/usr/bin/env python3
"""CPU per HTTP poll of a local port, three ways: `httpx.get()` (a Client, and so a TLS context,
per call), `sparkctl.httpclient.get()` (a Client per call on the process's one TLS context) and one
client reused across the polls (what sparkctl's poll loops now do).

    python benchmarks/http_polls.py [--polls 200]

A threaded http.server on 127.0.0.1 answers `GET /metrics` with a short page; the figure is this
process's CPU time (time.process_time, the server's threads included) per poll. Asserts nothing.
"""

from __future__ import annotations

import argparse
import http.server
import threading
import time

import httpx

from sparkctl import httpclient


class Page(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as vLLM's server does

    def do_GET(self) -> None:
        body = b"vllm:num_requests_running 0\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def per_poll(poll, n: int) -> float:
    poll()  # warm: imports, first connection
    t = time.process_time()
    for _ in range(n):
        poll()
    return (time.process_time() - t) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--polls", type=int, default=200)
    n = ap.parse_args().polls
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    rows = [("httpx.get()", per_poll(lambda: httpx.get(url, timeout=1, trust_env=False), n)),
            ("sparkctl.httpclient.get()", per_poll(lambda: httpclient.get(url, timeout=1, trust_env=False), n))]  # fmt: skip
    with httpclient.client(timeout=1, trust_env=False) as c:
        rows.append(("one client, reused", per_poll(lambda: c.get(url), n)))
    server.shutdown()
    print(f"{'poll':<28}{'CPU ms/poll':>12}{'% of a core at 5 Hz':>22}")
    for name, s in rows:
        print(f"{name:<28}{s * 1000:>12.2f}{s * 5 * 100:>21.1f}%")


if __name__ == "__main__":
    main()
