"""Network facts: interfaces and addresses (`ip -j addr`), routes (`ip -j route get`), link speed, pings."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from ipaddress import IPv4Interface
from typing import Optional


@dataclass(frozen=True)
class Interface:
    name: str
    operstate: str  # UP, DOWN, UNKNOWN, LOWERLAYERDOWN ...
    flags: tuple[str, ...]
    mtu: int
    addresses: tuple[IPv4Interface, ...] = field(default_factory=tuple)

    @property
    def up(self) -> bool:
        # admin UP and carrier (LOWER_UP); veths and real NICs alike
        return "UP" in self.flags and "LOWER_UP" in self.flags


def parse_ip_addr(text: str) -> dict[str, Interface]:
    """Parse `ip -j addr` into interfaces by name (IPv4 addresses only: the fabric is IPv4)."""
    out: dict[str, Interface] = {}
    for item in json.loads(text or "[]"):
        addrs = tuple(
            IPv4Interface(f"{a['local']}/{a['prefixlen']}") for a in item.get("addr_info", []) if a.get("family") == "inet"
        )
        name = item["ifname"]
        out[name] = Interface(
            name=name,
            operstate=item.get("operstate", "UNKNOWN"),
            flags=tuple(item.get("flags", [])),
            mtu=int(item.get("mtu", 0)),
            addresses=addrs,
        )
    return out


def parse_route_get(text: str) -> Optional[str]:
    """The device `ip -j route get ADDR` would send through, or None (unreachable / error)."""
    try:
        routes = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not routes or routes[0].get("type", "unicast") not in ("unicast", "local"):
        return None
    return routes[0].get("dev")


def parse_speeds(text: str) -> dict[str, Optional[int]]:
    """Lines `DEV SPEED` (from /sys/class/net/DEV/speed) -> Mb/s, None when unreadable or -1."""
    speeds: dict[str, Optional[int]] = {}
    for dev, value, *_ in (line.split() + [""] for line in text.splitlines() if line.strip()):
        speeds[dev] = int(value) if value.isdigit() and int(value) > 0 else None
    return speeds


_PING_TX = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")


@dataclass(frozen=True)
class PingResult:
    ok: bool
    sent: int
    received: int
    detail: str


def parse_ping(rc: int, text: str) -> PingResult:
    """`ping -M do -s SIZE -c N -I DEV PEER` output: ok only when every packet came back.

    When the output holds several runs (a retry after a lost packet), the last one counts."""
    matches = list(_PING_TX.finditer(text))
    m = matches[-1] if matches else None
    sent, received = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    detail = next((ln for ln in lines if "too long" in ln or "mtu" in ln.lower() or "unreachable" in ln.lower()), "")
    if not detail and lines:
        detail = lines[-1]
    return PingResult(ok=(rc == 0 and sent > 0 and received == sent), sent=sent, received=received, detail=detail)
