"""What a lab rail carries: a token bucket (`tc ... tbf`) on both ends of each fabric veth.

A bare veth carries whatever the CPU can push (4-17 Gb/s on a loaded 2-core machine), so the rail
probe's one second of iperf3 (doctor, `up` after a fabric change) cost about a core-second each
time: 154 CPU-s of a two-lab CI run went to it. Every rail is therefore capped at RAIL_MBPS, a real
line rate the veth holds at a quarter of that CPU. Doctor judges a virtual rail against its
siblings, measured at the same time, so its verdicts are the same; and twins at one cap agree more
closely than two CPU-bound transfers did. A degraded rail (the `speed` fault) is a lower cap on the
same qdisc; clearing it puts the rail back at RAIL_MBPS, not uncapped.
"""

from __future__ import annotations

import json
import subprocess
from typing import Callable

from sparkctl.errors import SparkctlError
from sparkctl_lab import topology as topo

# What every healthy lab rail carries, both ways. The `speed` fault's 250 Mb/s is a quarter of it,
# under the third of its sibling at which doctor calls a rail degraded (a CX-7 twin at 13 Gb/s of 95).
# 1000, not 4000: a probing doctor (four rails at once, 1 s) cost the machine 1.2 CPU-s of veth and
# iperf3 at 4000 and 0.3 at 1000 (`doctor --only fabric`, the whole machine's busy time), and the
# verdicts are the same: siblings are judged against each other.
RAIL_MBPS = 1000


def _tc(netns_name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["tc", "-n", netns_name, *args], capture_output=True, text=True, timeout=10)


def rail_ends(h: topo.LabHost, dev: str) -> list[tuple[str, str]]:
    """(netns, device) of both ends of the veth behind `dev` (the management NIC: this end only)."""
    for c in topo.cables():
        ends = [(c.a, c.a_nic.device), (c.b, c.b_nic.device)]
        if (h.name, dev) in ends:
            return [(topo.ALL_HOSTS[name].netns, d) for name, d in ends]
    return [(h.netns, dev)]


def cap_mbps(netns_name: str, dev: str) -> int | None:
    """The Mb/s a root tbf caps this veth end at; None without one (or no such device)."""
    r = _tc(netns_name, "-j", "qdisc", "show", "dev", dev)
    try:
        qdiscs = json.loads(r.stdout or "[]")
    except ValueError:
        return None
    for q in qdiscs:
        if q.get("kind") == "tbf" and q.get("root"):
            return round(q["options"]["rate"] * 8 / 1_000_000)  # tc reports bytes per second
    return None


def tbf(rate_mbps: int = RAIL_MBPS) -> list[str]:
    """`tc qdisc replace dev DEV root` + these: the cap at rate_mbps."""
    burst = max(64 * 1024, rate_mbps * 1_000_000 // 8 // 100)  # 10 ms at the rate, at least a few jumbo frames
    return ["tbf", "rate", f"{rate_mbps}mbit", "burst", str(burst), "latency", "50ms"]


def _cap(ends: list[tuple[str, str]], rate_mbps: int) -> None:
    for ns, d in ends:
        r = _tc(ns, "qdisc", "replace", "dev", d, "root", *tbf(rate_mbps))
        if r.returncode != 0:
            raise SparkctlError(f"cannot shape {d} in {ns}: `tc` said {r.stderr.strip()}",
                                fix="the kernel needs the tbf qdisc (CONFIG_NET_SCH_TBF)")  # fmt: skip


def shape(h: topo.LabHost, dev: str, rate_mbps: int = RAIL_MBPS) -> None:
    """Cap what the rail behind `dev` carries both ways (egress of each veth end) at rate_mbps."""
    _cap(rail_ends(h, dev), rate_mbps)


def _to_line_rate(host_set: dict[str, topo.LabHost], present: set[str] | None, off: Callable[[int | None], bool],
                  said: str) -> list[str]:  # fmt: skip
    """Every rail of `host_set` (whose namespaces are all in `present`, None: any) with an end whose
    cap is `off` put at RAIL_MBPS; a line per rail, `said` formatted with a, dev, b, bdev."""
    changes = []
    for c in topo.cables(host_set):
        ends = [(host_set[c.a].netns, c.a_nic.device), (host_set[c.b].netns, c.b_nic.device)]
        if present is not None and not all(ns in present for ns, _ in ends):
            continue
        if any(off(cap_mbps(ns, d)) for ns, d in ends):
            _cap(ends, RAIL_MBPS)
            changes.append(said.format(a=c.a, dev=c.a_nic.device, b=c.b, bdev=c.b_nic.device))
    return changes


def ensure(host_set: dict[str, topo.LabHost]) -> list[str]:
    """`lab up`: every rail end with no cap gets RAIL_MBPS (a new cable, or one a test unshaped);
    a cap already there (RAIL_MBPS, or a `speed` fault's) stays. One line per rail capped."""
    return _to_line_rate(host_set, None, lambda cap: cap is None, "{a}/{dev}<->{b}/{bdev} at " + f"{RAIL_MBPS} Mb/s")


def restore(host_set: dict[str, topo.LabHost], present: set[str]) -> list[str]:
    """Every rail in a namespace in `present` back at RAIL_MBPS (a degraded-rail fault, or a test's
    own shaping, undone). One line per rail that was not."""
    return _to_line_rate(host_set, present, lambda cap: cap != RAIL_MBPS, "{a}/{dev} back at " + f"{RAIL_MBPS} Mb/s")
