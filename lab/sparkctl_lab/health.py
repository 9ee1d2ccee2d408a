"""Is a lab host's daemon answering? Cheap probes, for `lab up` and `lab status`."""

from __future__ import annotations

import socket

import httpx

from sparkctl_lab.paths import docker_socket
from sparkctl_lab.topology import ALL_HOSTS


def _docker(name: str, path: str, timeout: float) -> httpx.Response | None:
    """GET `path` from the host's dockerd through the runner's socket; None when it does not answer."""
    transport = httpx.HTTPTransport(uds=str(docker_socket(name)))
    try:
        with httpx.Client(transport=transport, timeout=timeout, trust_env=False) as c:
            return c.get(f"http://docker{path}")
    except httpx.HTTPError:
        return None


def docker_ping(name: str, timeout: float = 1.0) -> bool:
    r = _docker(name, "/_ping", timeout)
    return r is not None and r.status_code == 200


def docker_get(name: str, path: str, timeout: float = 2.0) -> dict | None:
    r = _docker(name, path, timeout)
    try:
        return r.json() if r is not None and r.status_code == 200 else None
    except ValueError:
        return None


def ssh_banner(name: str, timeout: float = 1.0) -> str | None:
    try:
        with socket.create_connection((ALL_HOSTS[name].mgmt_ip, 22), timeout=timeout) as s:
            s.settimeout(timeout)
            data = s.recv(256).decode(errors="replace").strip()
            return data if data.startswith("SSH-2.0") else None
    except OSError:
        return None
