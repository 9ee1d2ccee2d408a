"""Is a lab host's daemon answering? Stdlib probes, cheap enough for `lab status`."""

from __future__ import annotations

import json
import socket

from sparkctl_lab.paths import docker_socket
from sparkctl_lab.topology import HOSTS


def docker_ping(name: str, timeout: float = 1.0) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(docker_socket(name)))
            s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            head = s.recv(64)
            return head.split(b"\r\n", 1)[0].split(b" ")[1:2] == [b"200"]
    except OSError:
        return False


def docker_get(name: str, path: str, timeout: float = 2.0) -> dict | None:
    import http.client

    class Conn(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(str(docker_socket(name)))

    c = Conn("docker", timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        return json.loads(body) if r.status == 200 else None
    except (OSError, ValueError):
        return None
    finally:
        c.close()


def ssh_banner(name: str, timeout: float = 1.0) -> str | None:
    try:
        with socket.create_connection((HOSTS[name].mgmt_ip, 22), timeout=timeout) as s:
            s.settimeout(timeout)
            data = s.recv(256).decode(errors="replace").strip()
            return data if data.startswith("SSH-2.0") else None
    except OSError:
        return None
