"""Bandwidth of each rail with iperf3 (doctor --deep): server on one end, client on the other.

One measurement per physical rail (the rail seen from both hosts is the same cable), from the
host listed first in the inventory. Rails run one after another: tests sharing a host would
compete for its CPU and skew each other. The server serves one test (`-s -1`) under a timeout,
so nothing is left listening.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Optional

from sparkctl.facts.host import peer_ip
from sparkctl.inventory.models import FabricLink, Inventory

BASE_PORT = 5201
SECONDS = 2
STREAMS = 4  # one TCP stream cannot fill a fast rail


@dataclass(frozen=True)
class Rail:
    client: str
    link: FabricLink
    client_ip: str
    server: str
    server_ip: str

    @property
    def key(self) -> str:
        return f"{self.client}/{self.link.device}"


@dataclass(frozen=True)
class BandwidthResult:
    gbps: float = 0.0
    streams: int = STREAMS
    seconds: float = SECONDS
    error: Optional[str] = None


def rails(inv: Inventory, hosts: list[str]) -> list[Rail]:
    """Every rail between two of `hosts`, once."""
    seen, out = set(), []
    for h in (h for h in inv.hosts if h in hosts):  # from the host listed first
        for link in inv.hosts[h].fabric:
            ip = peer_ip(inv, h, link)
            cable = frozenset({(h, str(link.address.ip)), (link.peer, ip)})  # the same seen from either end
            if ip is None or link.peer not in hosts or cable in seen:
                continue
            seen.add(cable)
            out.append(Rail(h, link, str(link.address.ip), link.peer, ip))
    return out


def server_command(rail: Rail, port: int) -> str:
    return (
        f"setsid -f timeout {SECONDS + 20} iperf3 -s -1 -B {shlex.quote(rail.server_ip)} -p {port} "
        ">/dev/null 2>&1 </dev/null"
    )


def client_command(rail: Rail, port: int) -> str:
    c = (
        f"iperf3 -c {shlex.quote(rail.server_ip)} -B {shlex.quote(rail.client_ip)} -p {port} "
        f"-t {SECONDS} -P {STREAMS} -J"
    )
    # the server may need a moment to listen: retry a refused connection briefly
    return f'i=0; while :; do out=$({c} 2>&1); rc=$?; [ $rc -eq 0 ] || [ $i -ge 30 ] && break; i=$((i+1)); sleep 0.1; done; printf "%s" "$out"; exit $rc'


def parse_iperf(rc: int, text: str) -> BandwidthResult:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return BandwidthResult(error=(text.strip().splitlines() or [f"iperf3 exit {rc}"])[-1][:200])
    if doc.get("error"):
        return BandwidthResult(error=str(doc["error"])[:200])
    end = doc.get("end") or {}
    summary = end.get("sum_received") or end.get("sum_sent") or {}
    bps = summary.get("bits_per_second")
    if bps is None:
        return BandwidthResult(error="iperf3 gave no summary")
    return BandwidthResult(gbps=float(bps) / 1e9, seconds=float(summary.get("seconds", SECONDS)))


def measure(fleet, rail: Rail, port: int = BASE_PORT) -> BandwidthResult:
    from sparkctl.errors import SparkctlError

    try:
        srv = fleet[rail.server].run(server_command(rail, port), timeout=10)
        if not srv.ok:
            return BandwidthResult(error=f"iperf3 server on {rail.server}: {(srv.stdout + srv.stderr).strip()[:200]}")
        r = fleet[rail.client].run(client_command(rail, port), timeout=SECONDS + 30)
        return parse_iperf(r.exit_code, r.stdout)
    except SparkctlError as exc:
        return BandwidthResult(error=exc.message[:200])
