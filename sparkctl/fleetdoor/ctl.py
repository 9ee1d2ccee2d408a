"""`python -m sparkctl.fleetdoor.ctl drain NAME [--wait-s S] | undrain NAME | status`: the admin
interface from the front door's host (sparkctl runs it in the container over SSH). Prints the
door's answer (one JSON document) on stdout; exit 1 when the door does not answer or a drain
times out (the document then says how many are still in flight), 2 on bad arguments."""

from __future__ import annotations

import argparse
import json
import os
import sys

from sparkctl.gateway.ctl import UnixHTTPConnection

from .placement import ADMIN_SOCKET
from .settings import ENV


def call(socket_path: str, method: str, path: str, body: dict | None, timeout: float) -> tuple[int, dict]:
    conn = UnixHTTPConnection(socket_path, timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sparkctl.fleetdoor.ctl")
    p.add_argument("--admin-socket", default=os.environ.get(ENV + "ADMIN_SOCKET", ADMIN_SOCKET))
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("drain", help="send new requests to the other members; wait until NAME has none in flight")
    d.add_argument("member")
    d.add_argument("--wait-s", type=float, default=600.0, help="give up after this many seconds (exit 1)")
    u = sub.add_parser("undrain", help="let NAME take new requests again")
    u.add_argument("member")
    sub.add_parser("status")
    ns = p.parse_args(argv)
    if ns.cmd == "drain" and ns.wait_s < 0:
        p.error("--wait-s must be 0 or more")
    try:
        if ns.cmd == "drain":
            status, doc = call(ns.admin_socket, "POST", "/drain", {"member": ns.member, "wait_s": ns.wait_s}, ns.wait_s + 10)
        elif ns.cmd == "undrain":
            status, doc = call(ns.admin_socket, "POST", "/undrain", {"member": ns.member}, 10)
        else:
            status, doc = call(ns.admin_socket, "GET", "/status", None, 10)
    except (OSError, ValueError) as e:
        print(f"fleet door admin {ns.admin_socket}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(doc))
    if status != 200:
        print(f"fleet door: {doc.get('error') or f'HTTP {status}'}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
