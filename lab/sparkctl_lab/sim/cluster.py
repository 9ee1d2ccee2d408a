"""A small stand-in for Ray's control plane: the GCS on the head, node agents, and drivers.

JSON lines over TCP. A node (`ray start --head` itself, or `ray start --address=HEAD:PORT`)
registers with its IP and resources and keeps its connection open; both ends ping every
second and a silent peer is dead after SIM_RAY_HEALTH_TIMEOUT seconds (a closed connection is
dead at once). A driver (`vllm serve` with the ray backend) asks for the nodes, reserves GPUs
(shown by `ray status`), calls methods on a node (its rank's compile cache) and is told when a
node dies. The same server is embedded by `vllm serve --nnodes 2` (mp backend) for its
`--headless` worker.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import socket
import socketserver
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

PING_INTERVAL = 1.0


def send(sock_file, lock: threading.Lock, msg: dict) -> bool:
    data = (json.dumps(msg) + "\n").encode()
    with lock:
        try:
            sock_file.write(data)
            sock_file.flush()
            return True
        except (OSError, ValueError):
            return False


def node_id_for(ip: str, salt: str) -> str:
    return hashlib.sha256(f"{ip}/{salt}".encode()).hexdigest()[:56]


@dataclass
class Node:
    node_id: str
    ip: str
    resources: dict[str, float]
    is_head: bool
    pid: int
    hostname: str
    wfile: object = None
    wlock: threading.Lock = field(default_factory=threading.Lock)
    last_seen: float = field(default_factory=time.monotonic)
    alive: bool = True
    used: dict[str, float] = field(default_factory=dict)
    close: Callable[[], None] | None = None


class GcsServer:
    def __init__(self, host: str, port: int, health_timeout: float):
        self.host = host
        self.health_timeout = health_timeout
        self.lock = threading.RLock()
        self.nodes: dict[str, Node] = {}
        self.drivers: dict[int, tuple[object, threading.Lock]] = {}
        self.reservations: dict[int, list[tuple[str, str, float]]] = {}
        self.pending: dict[int, dict] = {}
        self.call_ids = itertools.count(1)
        self.started = time.time()
        self.stopping = threading.Event()
        gcs = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                gcs._handle(self)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server((host, port), Handler)
        self.port = self.server.server_address[1]

    def serve_in_background(self) -> None:
        threading.Thread(target=self.server.serve_forever, name="gcs", daemon=True).start()
        threading.Thread(target=self._monitor, name="gcs-health", daemon=True).start()

    def shutdown(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        with self.lock:
            for n in self.nodes.values():
                if n.close:
                    n.close()

    # ---- connections ----
    def _handle(self, h) -> None:
        conn_id = id(h)
        first = _read(h.rfile)
        if first is None:
            return
        op = first.get("op")
        if op == "register":
            self._serve_node(h, first)
        elif op == "driver":
            self._serve_driver(h, conn_id)
        elif op == "status":
            send(h.wfile, threading.Lock(), self.status())

    def _serve_node(self, h, msg: dict) -> None:
        ip = msg["ip"]
        node = Node(
            node_id=node_id_for(ip, f"{msg.get('pid')}-{time.time()}"),
            ip=ip,
            resources=msg.get("resources", {}),
            is_head=bool(msg.get("is_head")),
            pid=int(msg.get("pid", 0)),
            hostname=msg.get("hostname", ""),
            wfile=h.wfile,
        )

        def close():
            try:
                h.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        node.close = close
        with self.lock:
            self.nodes[node.node_id] = node
        send(h.wfile, node.wlock, {"op": "registered", "node_id": node.node_id})
        h.connection.settimeout(PING_INTERVAL * 2)
        for m in messages(h.rfile, self.stopping.is_set, node, self.health_timeout):
            if m.get("op") == "reply":
                with self.lock:
                    waiter = self.pending.get(m.get("call_id"))
                if waiter is not None:
                    waiter["reply"] = m
                    waiter["event"].set()
        self._node_dead(node, "connection closed" if not self.stopping.is_set() else "shutdown")

    def _node_dead(self, node: Node, why: str) -> None:
        with self.lock:
            if not node.alive:
                return
            node.alive = False
            drivers = list(self.drivers.values())
            for waiter in self.pending.values():
                if waiter["node_id"] == node.node_id:
                    waiter["reply"] = {"error": f"node {node.node_id} died"}
                    waiter["event"].set()
        event = {"op": "node_dead", "node_id": node.node_id, "ip": node.ip, "why": why}
        for wfile, wlock in drivers:
            send(wfile, wlock, event)

    def _monitor(self) -> None:
        while not self.stopping.wait(PING_INTERVAL):
            now = time.monotonic()
            with self.lock:
                nodes = [n for n in self.nodes.values() if n.alive]
            for n in nodes:
                if now - n.last_seen > self.health_timeout:
                    self._node_dead(n, f"no heartbeat for {self.health_timeout:.0f}s")
                    if n.close:
                        n.close()
                else:
                    send(n.wfile, n.wlock, {"op": "ping"})

    def _serve_driver(self, h, conn_id: int) -> None:
        wlock = threading.Lock()
        with self.lock:
            self.drivers[conn_id] = (h.wfile, wlock)
        try:
            for m in json_lines(h.rfile):
                threading.Thread(target=self._driver_op, args=(m, h.wfile, wlock, conn_id), daemon=True).start()
        finally:
            with self.lock:
                self.drivers.pop(conn_id, None)
                for node_id, res, amount in self.reservations.pop(conn_id, []):
                    n = self.nodes.get(node_id)
                    if n:
                        n.used[res] = max(0.0, n.used.get(res, 0.0) - amount)

    def _driver_op(self, m: dict, wfile, wlock, conn_id: int) -> None:
        op, rid = m.get("op"), m.get("id")
        if op == "ping":
            send(wfile, wlock, {"id": rid, "result": "pong"})
        elif op == "nodes":
            send(wfile, wlock, {"id": rid, "result": self.node_list()})
        elif op == "reserve":
            with self.lock:
                n = self.nodes.get(m["node_id"])
                if n and n.alive:
                    n.used[m["resource"]] = n.used.get(m["resource"], 0.0) + m["amount"]
                    self.reservations.setdefault(conn_id, []).append((n.node_id, m["resource"], m["amount"]))
            send(wfile, wlock, {"id": rid, "result": True})
        elif op == "call":
            send(wfile, wlock, {"id": rid, **self._call(m["node_id"], m["method"], m.get("args", {}), m.get("timeout", 600))})
        elif op == "status":
            send(wfile, wlock, {"id": rid, "result": self.status()})

    def _call(self, node_id: str, method: str, args: dict, timeout: float) -> dict:
        with self.lock:
            n = self.nodes.get(node_id)
            if n is None or not n.alive:
                return {"error": f"node {node_id} is not alive"}
            call_id = next(self.call_ids)
            waiter = {"event": threading.Event(), "reply": None, "node_id": node_id}
            self.pending[call_id] = waiter
        send(n.wfile, n.wlock, {"op": "call", "call_id": call_id, "method": method, "args": args})
        waiter["event"].wait(timeout)
        with self.lock:
            self.pending.pop(call_id, None)
        reply = waiter["reply"] or {"error": f"call {method} on {node_id} timed out"}
        if "error" in reply:
            return {"error": reply["error"]}
        return {"result": reply.get("result")}

    def node_list(self) -> list[dict]:
        with self.lock:
            return [
                {
                    "node_id": n.node_id,
                    "ip": n.ip,
                    "resources": n.resources,
                    "is_head": n.is_head,
                    "alive": n.alive,
                    "pid": n.pid,
                    "hostname": n.hostname,
                    "used": dict(n.used),
                }
                for n in self.nodes.values()
            ]

    def status(self) -> dict:
        return {"nodes": self.node_list(), "started": self.started, "address": f"{self.host}:{self.port}"}


def messages(rfile, stopped: Callable[[], bool], peer, health_timeout: float):
    """Yield each JSON line from a peer until the connection closes, `stopped()` turns true, or the
    peer has been silent (peer.last_seen, refreshed on every line) longer than health_timeout.
    The socket has a read timeout, so silence is noticed even with nothing to read."""
    while not stopped():
        try:
            line = rfile.readline()
        except socket.timeout:
            if time.monotonic() - peer.last_seen > health_timeout:
                return
            continue
        except OSError:
            return
        if not line:
            return
        peer.last_seen = time.monotonic()
        try:
            yield json.loads(line)
        except ValueError:
            continue


def json_lines(rfile):
    """Yield each JSON line (skipping garbled ones) until the connection closes."""
    while True:
        try:
            line = rfile.readline()
        except OSError:
            return
        if not line:
            return
        try:
            yield json.loads(line)
        except ValueError:
            continue


def _read(rfile) -> dict | None:
    return next(json_lines(rfile), None)


def connect(address: str, timeout: float = 5.0, source_ip: str | None = None) -> socket.socket:
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    if source_ip:
        try:
            sock.bind((source_ip, 0))
        except OSError:
            pass
    sock.connect((host, int(port)))
    sock.settimeout(None)
    return sock


class _Connection:
    """A JSON-lines connection to the GCS, from a node agent or a driver."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.rfile = sock.makefile("rb")
        self.wfile = sock.makefile("wb")
        self.wlock = threading.Lock()

    def send(self, msg: dict) -> bool:
        return send(self.wfile, self.wlock, msg)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class NodeAgent(_Connection):
    """A registered node: answers pings and method calls; `lost` is set when the head goes away."""

    def __init__(
        self,
        address: str,
        ip: str | None,
        resources: dict[str, float],
        is_head: bool,
        handlers: dict[str, Callable[[dict], dict]],
        health_timeout: float,
        hostname: str,
        pid: int,
        lost: threading.Event | None = None,
    ):
        self.address = address
        self.handlers = handlers
        self.health_timeout = health_timeout
        self.lost = lost if lost is not None else threading.Event()  # the caller's, to block on it with others
        super().__init__(connect(address, source_ip=ip))
        self.ip = ip or self.sock.getsockname()[0]
        self.send({"op": "register", "ip": self.ip, "resources": resources, "is_head": is_head, "pid": pid, "hostname": hostname})
        reply = _read(self.rfile)
        if not reply or reply.get("op") != "registered":
            raise ConnectionError(f"GCS at {address} did not accept the node")
        self.node_id = reply["node_id"]
        self.last_seen = time.monotonic()
        threading.Thread(target=self._reader, daemon=True).start()
        threading.Thread(target=self._pinger, daemon=True).start()

    def _reader(self) -> None:
        self.sock.settimeout(PING_INTERVAL * 2)
        for m in messages(self.rfile, self.lost.is_set, self, self.health_timeout):
            if m.get("op") == "call":
                threading.Thread(target=self._call, args=(m,), daemon=True).start()
        self.lost.set()

    def _call(self, m: dict) -> None:
        handler = self.handlers.get(m.get("method"))
        try:
            if handler is None:
                raise KeyError(f"no method {m.get('method')}")
            reply = {"op": "reply", "call_id": m["call_id"], "result": handler(m.get("args", {}))}
        except Exception as e:  # report, do not die
            reply = {"op": "reply", "call_id": m["call_id"], "error": f"{type(e).__name__}: {e}"}
        self.send(reply)

    def _pinger(self) -> None:
        while not self.lost.wait(PING_INTERVAL):
            if not self.send({"op": "ping"}):
                self.lost.set()

    def close(self) -> None:
        self.lost.set()
        super().close()


class DriverClient(_Connection):
    """vLLM's side: ask, reserve, call; `on_event` gets node deaths and the loss of the GCS."""

    def __init__(self, address: str, on_event: Callable[[dict], None], timeout: float = 5.0):
        self.address = address
        self.on_event = on_event
        super().__init__(connect(address, timeout=timeout))
        self.ids = itertools.count(1)
        self.waiters: dict[int, dict] = {}
        self.lock = threading.Lock()
        self.closed = False
        self.send({"op": "driver"})
        threading.Thread(target=self._reader, daemon=True).start()
        threading.Thread(target=self._pinger, daemon=True).start()

    def _reader(self) -> None:
        for m in json_lines(self.rfile):
            if "id" in m:
                with self.lock:
                    w = self.waiters.get(m["id"])
                if w:
                    w["reply"] = m
                    w["event"].set()
            elif m.get("op") == "node_dead":
                self.on_event(m)
        with self.lock:
            for w in self.waiters.values():
                w["reply"] = {"error": "GCS connection lost"}
                w["event"].set()
        if not self.closed:
            self.on_event({"op": "gcs_lost", "address": self.address})

    def _pinger(self) -> None:
        # A head host that vanishes without closing the connection is noticed by the timeout.
        while not self.closed:
            time.sleep(PING_INTERVAL)
            try:
                self.request({"op": "ping"}, timeout=30)
            except ConnectionError:
                return

    def request(self, msg: dict, timeout: float = 30.0):
        rid = next(self.ids)
        w = {"event": threading.Event(), "reply": None}
        with self.lock:
            self.waiters[rid] = w
        if not self.send({**msg, "id": rid}):
            raise ConnectionError("GCS connection lost")
        w["event"].wait(timeout)
        with self.lock:
            self.waiters.pop(rid, None)
        reply = w["reply"]
        if reply is None:
            raise ConnectionError(f"GCS did not answer {msg.get('op')} within {timeout:.0f}s")
        if "error" in reply:
            raise ConnectionError(reply["error"])
        return reply.get("result")

    def nodes(self) -> list[dict]:
        return self.request({"op": "nodes"})

    def reserve(self, node_id: str, resource: str, amount: float) -> None:
        self.request({"op": "reserve", "node_id": node_id, "resource": resource, "amount": amount})

    def call(self, node_id: str, method: str, args: dict, timeout: float = 3600.0):
        return self.request(
            {"op": "call", "node_id": node_id, "method": method, "args": args, "timeout": timeout}, timeout=timeout + 5
        )

    def close(self) -> None:
        self.closed = True
        super().close()


def query_status(address: str, timeout: float = 5.0) -> dict:
    sock = connect(address, timeout=timeout)
    try:
        f = sock.makefile("rwb")
        f.write(b'{"op": "status"}\n')
        f.flush()
        sock.settimeout(timeout)
        reply = _read(f)
        if reply is None:
            raise ConnectionError("no answer")
        return reply
    finally:
        sock.close()
