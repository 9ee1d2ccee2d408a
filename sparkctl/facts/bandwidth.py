"""Bandwidth of each rail with iperf3: a short probe (default doctor, `up` after a fabric change),
a longer one with `doctor --deep`.

A degraded ConnectX-7 (NVIDIA/dgx-spark-playbooks PR #108) stays ACTIVE and keeps reporting its
nominal speed in sysfs and ethtool while TCP and RDMA carry ~13 Gb/s: only traffic shows it.

One measurement per physical rail (the rail seen from both hosts is the same cable), from the
host listed first in the inventory, and only over rails whose jumbo ping passed at both ends (a
rail that does not ping is fabric.ping's to report). Rails that should carry the same (same
nominal speed, sharing a host: the two twins of one ConnectX-7 port, the offload host's two
links) are siblings: they are measured at the same time, so the CPU and PCIe they share weigh
on each alike and their figures can be compared; sibling groups run one after another. Each
server serves one test (`-s -1`) under a timeout, so nothing is left listening.
"""

from __future__ import annotations

import json
import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional

from sparkctl.facts.network import peer_ip
from sparkctl.inventory.models import FabricLink, Inventory

BASE_PORT = 5201
PROBE_SECONDS = 1  # iperf3's shortest test (it takes whole seconds): what default doctor and `up` pay
DEEP_SECONDS = 3
STREAMS = 4  # one TCP stream cannot fill a fast rail


@dataclass(frozen=True)
class Rail:
    client: str
    link: FabricLink
    client_ip: str
    server: str
    server_ip: str
    server_device: str

    @property
    def key(self) -> str:
        return f"{self.client}/{self.link.device}"

    @property
    def nominal_gbps(self) -> float:
        return float(self.link.speed_gbps)

    def end(self, host: str) -> Optional[str]:
        """This rail's net device on `host` (None: the rail does not touch it)."""
        return self.link.device if host == self.client else self.server_device if host == self.server else None

    def label(self) -> str:
        return f"{self.client}:{self.link.device} -> {self.server}:{self.server_device}"


@dataclass(frozen=True)
class BandwidthResult:
    gbps: float = 0.0
    streams: int = STREAMS
    seconds: float = PROBE_SECONDS
    error: Optional[str] = None
    exit_code: int = 0

    @property
    def missing_tool(self) -> bool:
        """iperf3 is not installed on one end (the shell's 127, or its words)."""
        return self.exit_code == 127 or "iperf3: not found" in (self.error or "") or "command not found" in (self.error or "")


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
            far = next(x.device for x in inv.hosts[link.peer].fabric if str(x.address.ip) == ip)
            out.append(Rail(h, link, str(link.address.ip), link.peer, ip, far))
    return out


def pinging(inv: Inventory, facts: dict, candidates: list[Rail]) -> list[Rail]:
    """The rails whose jumbo ping passed from both ends (the others are fabric.ping's failures)."""

    def pinged(host: str, device: str) -> bool:
        f = facts.get(host)
        i = next((i for i, link in enumerate(inv.hosts[host].fabric) if link.device == device), None)
        p = f.pings.get(i) if f is not None and i is not None else None
        return bool(p and p.ok)

    return [r for r in candidates if pinged(r.client, r.link.device) and pinged(r.server, r.server_device)]


def siblings(all_rails: list[Rail]) -> list[list[Rail]]:
    """Rails that should carry the same: equal nominal speed and a host in common (transitively),
    in inventory order. A rail with no sibling is a group of one."""
    groups: list[list[Rail]] = []
    for r in all_rails:
        joined = [
            g
            for g in groups
            if g[0].nominal_gbps == r.nominal_gbps and any({r.client, r.server} & {x.client, x.server} for x in g)
        ]
        merged = [x for g in joined for x in g] + [r]
        groups = [g for g in groups if g not in joined] + [merged]
    order = {r.key: i for i, r in enumerate(all_rails)}
    return sorted((sorted(g, key=lambda x: order[x.key]) for g in groups), key=lambda g: order[g[0].key])


def server_command(rail: Rail, port: int, seconds: int = PROBE_SECONDS) -> str:
    return f"setsid -f timeout {seconds + 20} iperf3 -s -1 -B {shlex.quote(rail.server_ip)} -p {port} >/dev/null 2>&1 </dev/null"


def client_command(rail: Rail, port: int, seconds: int = PROBE_SECONDS) -> str:
    c = (
        f"iperf3 -c {shlex.quote(rail.server_ip)} -B {shlex.quote(rail.client_ip)} -p {port} "
        f"-t {seconds} -P {STREAMS} --connect-timeout 3000 -J"
    )
    # the server may need a moment to listen: retry a refused connection (only that) briefly
    return (
        "command -v iperf3 >/dev/null || { echo 'iperf3: not found'; exit 127; }; "
        f'i=0; while :; do out=$({c} 2>&1); rc=$?; case "$out" in *refused*) [ $i -lt 30 ] || break;; *) break;; esac; '
        'i=$((i+1)); sleep 0.1; done; printf "%s" "$out"; exit $rc'
    )


def parse_iperf(rc: int, text: str) -> BandwidthResult:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return BandwidthResult(error=(text.strip().splitlines() or [f"iperf3 exit {rc}"])[-1][:200], exit_code=rc)
    if doc.get("error"):
        return BandwidthResult(error=str(doc["error"])[:200], exit_code=rc)
    end = doc.get("end") or {}
    summary = end.get("sum_received") or end.get("sum_sent") or {}
    bps = summary.get("bits_per_second")
    if bps is None:
        return BandwidthResult(error="iperf3 gave no summary", exit_code=rc)
    streams = len(end.get("streams") or []) or STREAMS
    return BandwidthResult(gbps=float(bps) / 1e9, streams=streams, seconds=float(summary.get("seconds", PROBE_SECONDS)))


def measure_group(
    fleet, group: list[Rail], seconds: int = PROBE_SECONDS, base_port: int = BASE_PORT
) -> dict[str, BandwidthResult]:
    """Every rail of one sibling group at the same time: servers first (one call per server host),
    then the clients in parallel."""
    from sparkctl.errors import SparkctlError

    ports = {r.key: base_port + i for i, r in enumerate(group)}
    out: dict[str, BandwidthResult] = {}
    for server in dict.fromkeys(r.server for r in group):
        mine = [r for r in group if r.server == server]
        try:
            srv = fleet[server].run("; ".join(server_command(r, ports[r.key], seconds) for r in mine), timeout=10)
            failed = (
                None
                if srv.ok
                else BandwidthResult(
                    error=f"iperf3 server on {server}: {(srv.stdout + srv.stderr).strip()[:200]}", exit_code=srv.exit_code
                )
            )
        except SparkctlError as exc:
            failed = BandwidthResult(error=exc.message[:200], exit_code=1)
        if failed:
            out.update({r.key: failed for r in mine})

    def client(rail: Rail) -> BandwidthResult:
        try:
            r = fleet[rail.client].run(client_command(rail, ports[rail.key], seconds), timeout=seconds + 30)
            return parse_iperf(r.exit_code, r.stdout)
        except SparkctlError as exc:
            return BandwidthResult(error=exc.message[:200])

    todo = [r for r in group if r.key not in out]
    with ThreadPoolExecutor(max_workers=max(1, len(todo)), thread_name_prefix="sparkctl-iperf") as pool:
        out.update(zip((r.key for r in todo), pool.map(client, todo)))
    return out


def measured_ends(chosen: list[Rail], results: dict[str, BandwidthResult]) -> dict[tuple[str, str], float]:
    """(host, device) -> Gb/s of every rail measured without an error, at both of its ends."""
    out = {}
    for rail in chosen:
        r = results.get(rail.key)
        if r is not None and r.error is None and r.gbps > 0:
            out[(rail.client, rail.link.device)] = out[(rail.server, rail.server_device)] = r.gbps
    return out


def measure(fleet, chosen: list[Rail], seconds: int = PROBE_SECONDS) -> dict[str, BandwidthResult]:
    """Probe `chosen`, one sibling group after another (rail key -> result)."""
    out: dict[str, BandwidthResult] = {}
    for i, group in enumerate(siblings(chosen)):
        out.update(measure_group(fleet, group, seconds, BASE_PORT + 10 * i))
    return out
