"""`python -m sparkctl.gateway.ctl hold|release|status`: the admin interface from the gateway's host
(sparkctl runs it in the gateway's container over its SSH session). Prints the gateway's answer
(one JSON document) on stdout; exit 1 when the gateway does not answer, 2 on bad arguments."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import sys

from .settings import ENV


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a unix socket: the standard library speaks the HTTP."""

    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def call(socket_path: str, method: str, path: str, body: dict | None = None, timeout: float = 10.0) -> dict:
    conn = UnixHTTPConnection(socket_path, timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        r = conn.getresponse()
        doc = json.loads(r.read() or b"{}")
        if r.status != 200:
            raise RuntimeError(doc.get("error") or f"HTTP {r.status}")
        return doc
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sparkctl.gateway.ctl")
    p.add_argument("--admin-socket", default=os.environ.get(ENV + "ADMIN_SOCKET", "/run/sparkctl-gateway/admin.sock"))
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hold", help="stop sending new requests to the engine; queue them")
    h.add_argument("--expected-s", type=float, help="how long until the engine serves again (sparkctl's estimate)")
    h.add_argument("--ttl-s", type=float, help="end the hold by itself after this (at most the gateway's hold_max_s)")
    h.add_argument("--reason", default="admin")
    sub.add_parser("release", help="send the held requests on, in arrival order")
    sub.add_parser("status")
    ns = p.parse_args(argv)
    try:
        if ns.cmd == "hold":
            doc = call(ns.admin_socket, "POST", "/hold", {"expected_s": ns.expected_s, "ttl_s": ns.ttl_s, "reason": ns.reason})
        elif ns.cmd == "release":
            doc = call(ns.admin_socket, "POST", "/release")
        else:
            doc = call(ns.admin_socket, "GET", "/status")
    except (OSError, RuntimeError, ValueError) as e:
        print(f"gateway admin {ns.admin_socket}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
