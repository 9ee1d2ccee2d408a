"""An opt-in fence for development and CI: refuse to contact addresses outside allowed networks.

sparkctl's own tests and demos must only reach loopback and the lab's namespaces, while the
shipped inventories hold real-world addresses (192.168.x) that are for validation only. With
SPARKCTL_ONLY_NETWORKS set (dev.sh, CI and the test suite set it to the loopback and lab
ranges), every SSH connection and HTTP request sparkctl makes is checked here first and refused
otherwise. Operators normally leave it unset.
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import urlsplit

from sparkctl.errors import InputError

ENV = "SPARKCTL_ONLY_NETWORKS"


class FencedAddress(InputError):
    """An address outside the allowed networks: refused before any connection is tried."""


def check_address(address: str, what: str = "") -> None:
    fence = os.environ.get(ENV, "").strip()
    if not fence:
        return
    nets = [ipaddress.ip_network(n.strip(), strict=False) for n in fence.split(",") if n.strip()]
    host = "127.0.0.1" if address == "localhost" else address
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise FencedAddress(
            f"refusing to contact {address!r}{' for ' + what if what else ''}: {ENV} is set and it is not an IP address",
            fix=f"use an address inside {fence}, or unset {ENV}",
        ) from None
    if not any(ip in n for n in nets):
        raise FencedAddress(
            f"refusing to contact {address}{' for ' + what if what else ''}: outside {ENV}={fence}",
            fix=f"this run is fenced to {fence} (tests/dev); unset {ENV} to reach real hosts",
        )


def check_url(url: str, what: str = "") -> None:
    check_address(urlsplit(url).hostname or "", what)
