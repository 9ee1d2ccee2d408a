"""fabric: every rail up at the right MTU and speed, RDMA ACTIVE, its address, route and jumbo ping.

One result per rail (target = the rail's net device). Every host pings its peers over each
rail, so each rail is proven in both directions; the offload host's links to each Spark are
rails like any other. fabric.bandwidth probes each rail with a short iperf3 test (a longer one
with `--deep`): a degraded ConnectX-7 reports its nominal speed and shows only under traffic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from sparkctl.checks.base import Context, Finding, fail, host_check, ok, skipped, warn
from sparkctl.facts import network
from sparkctl.facts.network import NETPLAN_PATH, peer_ip
from sparkctl.inventory.models import FabricLink

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

READS = frozenset({"ip_addr", "speeds", "rdma_state", "ibdev2netdev", "route", "ping", "netplan"})

DEGRADED = 0.5  # below half the expected speed: the link negotiated low (a 40G cable in a 200G port)


def fabric_hosts(ctx: Context) -> list[str]:
    return [h for h in ctx.hosts if ctx.inventory.hosts[h].fabric]


PERSIST = "`sparkctl up` persists it in netplan"


def _iface(f: HostFacts, link: FabricLink):
    if f.interfaces is None:
        return None, skipped(f"could not read interfaces: {f.errors.get('ip_addr', 'ip -j addr gave nothing')}", link.device)
    iface = f.interfaces.get(link.device)
    if iface is None:
        return None, skipped(f"no net device {link.device} (see fabric.link)", link.device)
    return iface, None


@host_check("fabric.link", "each rail's net device exists and is up with carrier", scope=fabric_hosts, runbook=True)
def link_up(ctx: Context, host: str, f: HostFacts):
    for link in ctx.inventory.hosts[host].fabric:
        if f.interfaces is None:
            yield fail(
                f"cannot read interfaces: {f.errors.get('ip_addr', 'no answer')}",
                "check `ip -j addr` on the host (iproute2)",
                link.device,
            )
            continue
        iface = f.interfaces.get(link.device)
        if iface is None:
            have = ", ".join(sorted(n for n in f.interfaces if n != "lo"))
            yield fail(
                f"net device {link.device} does not exist (have: {have})",
                f"fix hosts.{host}.fabric device names (`ip -br link`), or load the NIC driver (mlx5_core)",
                link.device,
            )
        elif not iface.up:
            why = "administratively down" if "UP" not in iface.flags else "no carrier (cable, transceiver or the peer's port)"
            yield fail(
                f"{link.device} to {link.peer} is down: {why} (state {iface.operstate})",
                f"`ip link set {link.device} up` on {host}; if it stays without carrier, check the cable and "
                f"{link.peer}'s end of this rail",
                link.device,
            )
        else:
            yield ok(f"{link.device} to {link.peer} is up", link.device)


@host_check("fabric.mtu", "each rail has the inventory's MTU (9000 for jumbo frames)", scope=fabric_hosts, runbook=True)
def mtu(ctx: Context, host: str, f: HostFacts):
    for link in ctx.inventory.hosts[host].fabric:
        iface, why = _iface(f, link)
        if why:
            yield why
        elif iface.mtu != link.mtu:
            yield fail(
                f"{link.device} has MTU {iface.mtu}, expected {link.mtu}",
                f"`ip link set {link.device} mtu {link.mtu}` on {host} now; {PERSIST}",
                link.device,
                mtu=iface.mtu,
            )
        else:
            yield ok(f"MTU {iface.mtu}", link.device)


@host_check(
    "fabric.speed",
    "each rail links at its expected speed (what it negotiated; a degraded ConnectX-7 shows in fabric.bandwidth)",
    scope=fabric_hosts,
    runbook=True,
)
def speed(ctx: Context, host: str, f: HostFacts):
    for link in ctx.inventory.hosts[host].fabric:
        iface, why = _iface(f, link)
        mbps, want = f.speeds.get(link.device), link.speed_gbps
        gbps = mbps / 1000 if mbps is not None else None
        if why:
            yield why
        elif not iface.up:
            yield skipped(f"{link.device} is down: no link speed (see fabric.link)", link.device)
        elif gbps is None:
            yield warn(f"{link.device} reports no speed", f"read it by hand: `ethtool {link.device}`", link.device)
        elif gbps < want * DEGRADED:
            yield fail(
                f"{link.device} links at {gbps:g} Gb/s, expected {want:g} Gb/s: degraded",
                f"`ethtool {link.device}` on {host} to confirm (autonegotiation, the cable's rating); reseat or "
                "replace the cable/transceiver, or set speed_gbps to what the link is meant to run",
                link.device,
                gbps=gbps,
                expected_gbps=want,
            )
        elif gbps < want:
            yield warn(
                f"{link.device} links at {gbps:g} Gb/s, below the expected {want:g} Gb/s",
                f"check `ethtool {link.device}` (autonegotiation, cable rating) or set speed_gbps to what the link is",
                link.device,
                gbps=gbps,
                expected_gbps=want,
            )
        else:
            yield ok(f"{gbps:g} Gb/s", link.device, gbps=gbps)


@host_check("fabric.rdma", "each rail's RDMA device(s) exist and their port is ACTIVE", scope=fabric_hosts, runbook=True)
def rdma_state(ctx: Context, host: str, f: HostFacts):
    for link in ctx.inventory.hosts[host].fabric:
        for dev in link.rdma:
            state = f.rdma_states.get(dev)
            mapped = f.ibdev.get(dev)
            netdev = f" (-> {mapped.netdev})" if mapped else ""
            if state is None:
                yield skipped("RDMA state not read", dev)
            elif state == "missing":
                yield fail(
                    f"RDMA device {dev} not found",
                    f"`ibdev2netdev` on {host} lists the RDMA devices: fix hosts.{host}.fabric rdma names, "
                    "or load the RDMA driver (`modprobe mlx5_ib`)",
                    dev,
                )
            elif state != "ACTIVE":
                yield fail(
                    f"RDMA port {dev}/1 is {state}{netdev}, not ACTIVE",
                    f"the port follows its link: fix fabric.link for {link.device} first; if the link is up, "
                    f"`rdma link show {dev}/1` and `ibdev2netdev` on {host}, restart the RDMA stack or the host",
                    dev,
                    state=state,
                )
            else:
                yield ok(f"{dev}/1 ACTIVE{netdev}", dev)


def _other_netplan(f: HostFacts, device: str) -> list[tuple[str, dict]]:
    """(path, the device's entry) for every other /etc/netplan file that configures this rail."""
    out = []
    for path, text in sorted(f.netplan_others.items()):
        try:
            stanza = network.netplan_stanzas(text, [device])
        except ValueError:
            stanza = {device: {"unreadable": True}}
        if device in stanza:
            out.append((path, stanza[device]))
    return out


def _link_local_note(others: list[tuple[str, dict]]) -> tuple[str, str]:
    """Where a rail's 169.254.x/16 address comes from, and what `up` does about it."""
    source = next((p for p, st in others if "ipv4" in [str(x).lower() for x in (st.get("link-local") or [])]), None)
    if source:
        return (
            f"IPv4 link-local from {source} (`link-local: [ ipv4 ]`, NVIDIA's connect-two-sparks netplan)",
            f"`sparkctl up` takes the rail over from {source} (the original kept as {source}.bak) and removes the address",
        )
    return (
        "IPv4 link-local, from outside /etc/netplan (a NetworkManager profile with ipv4.link-local, avahi-autoipd)",
        "`sparkctl up` removes it; turn link-local off where it comes from or it returns (see the fabric.address runbook)",
    )


@host_check(
    "fabric.address",
    "each rail's fabric IP sits on its device with the inventory's prefix, and only sparkctl configures the rail",
    scope=fabric_hosts,
    runbook=True,
)
def address(ctx: Context, host: str, f: HostFacts):
    for link in ctx.inventory.hosts[host].fabric:
        if f.interfaces is None:
            yield skipped("interfaces not read (see fabric.link)", link.device)
            continue
        holders = [i for i in f.interfaces.values() if any(a.ip == link.address.ip for a in i.addresses)]
        on_dev = f.interfaces.get(link.device)
        have = on_dev.addresses if on_dev is not None else []
        fix_add = f"`ip addr add {link.address} dev {link.device}` on {host} now; {PERSIST}"
        link_local = [a for a in have if a.ip != link.address.ip and network.is_link_local(a)]
        strays = [a for a in have if a.ip != link.address.ip and not network.is_link_local(a)]
        wrong_prefix = next((a for a in have if a.ip == link.address.ip), None)
        others = _other_netplan(f, link.device)
        if link.address in have and not strays and not [h for h in holders if h.name != link.device] and (link_local or others):
            # works (the rail's traffic uses our address), but it does not stay ours: a warning, which `up` fixes
            if link_local:
                where, fix = _link_local_note(others)
                msg = (
                    f"{link.device} has {link.address} and also {', '.join(map(str, link_local))}: {where}; "
                    "traffic uses ours, but the extra address adds RoCE GIDs (a pinned NCCL_IB_GID_INDEX can "
                    "land on it) and returns at every boot"
                )
            else:
                msg = (
                    f"{link.address} on {link.device}, but "
                    + "; ".join(f"{p} also configures it ({network.describe_stanza(st)})" for p, st in others)
                    + f": netplan merges it with {NETPLAN_PATH} at the next boot"
                )
                fix = "`sparkctl up` takes the rail over (each file kept as <file>.bak, its other devices stay)"
            yield warn(msg, fix, link.device, link_local=[str(a) for a in link_local], files=[p for p, _ in others])
        elif link.address in have and strays:
            described = []
            for a in strays:
                whose = next(
                    (n for n, spec in ctx.inventory.hosts.items() if any(x.address.ip == a.ip for x in spec.fabric)), None
                )
                described.append(f"{a} ({whose}'s address: a duplicate on the fabric)" if whose and whose != host else str(a))
            yield fail(
                f"{link.device} has {link.address} and also {', '.join(described)}",
                "`sparkctl up` removes the stray address(es), or by hand: "
                + "; ".join(f"`ip addr del {a} dev {link.device}`" for a in strays)
                + f" on {host}",
                link.device,
                strays=[str(a) for a in strays],
            )
        elif link.address in have:
            also_on = [i.name for i in holders if i.name != link.device]
            if also_on:
                yield fail(
                    f"{link.address.ip} is on {link.device} and also on {', '.join(also_on)}",
                    f"remove it from {', '.join(also_on)}: `ip addr del {link.address.ip}/... dev ...`",
                    link.device,
                )
            else:
                yield ok(f"{link.address} on {link.device}", link.device)
        elif wrong_prefix:
            yield fail(
                f"{link.device} has {wrong_prefix}, expected {link.address} (wrong prefix: the peer is not in its subnet)",
                f"`ip addr del {wrong_prefix} dev {link.device} && ip addr add {link.address} dev {link.device}` on {host}; "
                + PERSIST,
                link.device,
            )
        elif holders:
            yield fail(
                f"{link.address.ip} is on {', '.join(i.name for i in holders)}, not on {link.device}",
                f"move it: `ip addr del {link.address.ip}/{link.address.network.prefixlen} dev {holders[0].name}`, then {fix_add}",
                link.device,
            )
        elif strays or link_local:
            strays = strays + link_local
            yield fail(
                f"{link.device} has {', '.join(map(str, strays))}, not {link.address} (a wrong address on the rail"
                + (f"; {_link_local_note(others)[0]}" if link_local else "")
                + ")",
                "`sparkctl up` replaces it, or by hand: "
                + "; ".join(f"`ip addr del {a} dev {link.device}`" for a in strays)
                + f"; then {fix_add}",
                link.device,
                strays=[str(a) for a in strays],
            )
        else:
            yield fail(f"{link.address} is not configured on {host}", fix_add, link.device)


@host_check(
    "fabric.route",
    "the route to each peer's fabric IP leaves through that rail (no leak to the default route)",
    scope=fabric_hosts,
    runbook=True,
)
def route(ctx: Context, host: str, f: HostFacts):
    for i, link in enumerate(ctx.inventory.hosts[host].fabric):
        ip = peer_ip(ctx.inventory, host, link)
        dev = f.routes.get(i)
        if ip is None:
            yield skipped(f"no rail on {link.peer} in {link.address.network} (inventory)", link.device)
        elif i not in f.routes:
            yield skipped("route not read", link.device)
        elif dev == link.device:
            yield ok(f"{ip} via {dev}", link.device)
        elif dev is None:
            detail = f.route_text.get(i, "").splitlines()[-1:] or [""]
            yield fail(
                f"no route to {link.peer}'s {ip}: {detail[0][:120]}",
                f"{link.device} must be up with {link.address} (see fabric.link / fabric.address on {host})",
                link.device,
            )
        else:
            yield fail(
                f"traffic to {link.peer}'s {ip} leaves via {dev}, not {link.device} (a leak to another network)",
                f"put {link.address} on {link.device} (fabric.address) and remove any more specific route: "
                f"`ip route get {ip}` on {host} shows which one wins",
                link.device,
                via=dev,
            )


@host_check(
    "fabric.ping", "a don't-fragment ping of MTU-28 bytes reaches the peer over each rail", scope=fabric_hosts, runbook=True
)
def ping(ctx: Context, host: str, f: HostFacts):
    for i, link in enumerate(ctx.inventory.hosts[host].fabric):
        ip = peer_ip(ctx.inventory, host, link)
        p = f.pings.get(i)
        size = link.mtu - 28
        if ip is None:
            yield skipped(f"no rail on {link.peer} in {link.address.network} (inventory)", link.device)
        elif p is None:
            yield skipped("ping not run", link.device)
        elif p.ok:
            yield ok(f"{size}-byte don't-fragment ping to {link.peer} {ip}: {p.received}/{p.sent}", link.device)
        else:
            yield fail(
                f"{size}-byte don't-fragment ping to {link.peer} {ip} over {link.device} failed: {p.detail or 'no reply'}",
                f"both ends need MTU {link.mtu} and the link up (fabric.mtu / fabric.link on {host} and {link.peer}); "
                f"retry by hand: `ping -M do -s {size} -I {link.device} {ip}`",
                link.device,
            )


# fabric.bandwidth: judged by what holds on real rails and on the lab's veths alike, relative to the
# twin first. Published figures on real Sparks: a degraded ConnectX-7 twin carries 8-25 Gb/s (12.86
# Gb/s TCP, 13.23 RDMA) and keeps reporting 200 Gb/s, beside healthy twins' 92.57 and 97.28 Gb/s
# (NVIDIA/dgx-spark-playbooks PR #108); untuned iperf3 -P 16 over one interface 96.2 Gb/s
# (catharsis.net.au, two Sparks through a CRS804); one TCP stream on a healthy rail 17-23% of the
# link (iperf3 before 3.16 runs every stream on one core). Siblings are measured at the same time,
# so they share CPU and PCIe alike.
SIBLING_FAIL = 1 / 3  # below a third of its sibling: degraded (healthy lab twins stay within 0.75x)
SIBLING_WARN = 0.5
NOMINAL_FAIL = 0.13  # a physical rail below 13% of speed_gbps (26 of 200 Gb/s): above the degraded 8-25 Gb/s
NOMINAL_WARN = 0.15  # below what one healthy TCP stream carries (17-23%): the warning asks for ib_write_bw


@dataclass(frozen=True)
class RailVerdict:
    status: str
    message: str
    fix: Optional[str] = None
    data: dict = field(default_factory=dict)


def _degraded_fix(rail, rdma: list[str]) -> str:
    ib = f"`ib_write_bw -d {(rdma or ['<rdma dev>'])[0]} -F --report_gbits` between the hosts"
    return (
        f"a ConnectX-7 capped near 13 Gb/s stays ACTIVE at its nominal speed (ethtool cannot show it): reboot "
        f"{rail.client} and {rail.server} (or reset the adapter with `mlxfwreset`), reseat the cable; confirm with {ib}"
    )


def judge_rails(measured: list, results: dict, virtual: set) -> dict[str, RailVerdict]:
    """One verdict per measured rail (key -> RailVerdict). `virtual`: (host, device) ends with no
    line rate (veths): they are judged against their siblings only."""
    from sparkctl.facts import bandwidth

    out: dict[str, RailVerdict] = {}
    for group in bandwidth.siblings(measured):
        for rail in group:
            r = results.get(rail.key)
            if r is None:
                continue
            if r.error:
                if r.missing_tool:
                    out[rail.key] = RailVerdict(
                        "warn",
                        f"{rail.label()}: not probed, iperf3 is not installed ({r.error})",
                        f"`apt install iperf3` on {rail.client} and {rail.server}: a degraded "
                        "ConnectX-7 shows only under traffic",
                    )
                else:
                    out[rail.key] = RailVerdict(
                        "failed",
                        f"{rail.label()}: iperf3 failed: {r.error}",
                        "check that the rail pings (fabric.ping) and that no firewall drops TCP "
                        f"{bandwidth.BASE_PORT}+ on the fabric addresses",
                    )
                continue
            others = [(x, results[x.key]) for x in group if x is not rail and x.key in results and not results[x.key].error]
            best = max(others, key=lambda o: o[1].gbps, default=None)
            nominal = rail.nominal_gbps
            real = (rail.client, rail.link.device) not in virtual and (rail.server, rail.server_device) not in virtual
            data = {"gbps": round(r.gbps, 2), "expected_gbps": nominal}
            msg = f"{rail.label()} carries {r.gbps:.1f} Gb/s (iperf3, {r.streams} streams, {r.seconds:.0f} s; link {nominal:g} Gb/s)"
            share = None
            if best is not None:
                sib, sr = best
                data["sibling_gbps"] = round(sr.gbps, 2)
                word = "twin" if {sib.client, sib.server} == {rail.client, rail.server} else "sibling"
                share = r.gbps / sr.gbps if sr.gbps > 0 else 1.0
                msg += f", {share:.0%} of its {word} {sib.client}:{sib.link.device} ({sr.gbps:.1f} Gb/s, measured alongside)"
            if real:
                msg += f", {r.gbps / nominal:.0%} of the link" if nominal else ""
            fix = _degraded_fix(rail, list(rail.link.rdma))
            if share is not None and share < SIBLING_FAIL:
                out[rail.key] = RailVerdict("failed", f"{msg}: degraded", fix, data)
            elif real and r.gbps < nominal * NOMINAL_FAIL:
                out[rail.key] = RailVerdict("failed", f"{msg}: degraded (below {NOMINAL_FAIL:.0%} of the link)", fix, data)
            elif share is not None and share < SIBLING_WARN:
                out[rail.key] = RailVerdict("warn", f"{msg}: below half of its sibling", fix, data)
            elif real and r.gbps < nominal * NOMINAL_WARN:
                out[rail.key] = RailVerdict(
                    "warn",
                    f"{msg}: below {NOMINAL_WARN:.0%} of the link (TCP through one iperf3 is "
                    "CPU-bound; confirm with ib_write_bw)",
                    fix,
                    data,
                )
            else:
                if not real and share is None:
                    msg += "; a virtual link with no sibling: the figure only"
                out[rail.key] = RailVerdict("ok", msg, None, data)
    return out


def _bandwidth_verdicts(ctx: Context):
    """Every rail between reached hosts, the keys of those that pinged (probed), their verdicts."""
    from sparkctl.facts import bandwidth

    reached = [h for h in ctx.hosts if h in ctx.facts]
    every = bandwidth.rails(ctx.inventory, reached)
    ready = bandwidth.pinging(ctx.inventory, ctx.facts, every)
    virtual = {(h, d) for h in reached for d in ctx.facts[h].virtual}
    return every, {r.key for r in ready}, judge_rails(ready, ctx.bandwidth, virtual)


@host_check(
    "fabric.bandwidth",
    "a short iperf3 probe per rail: it carries a fair share of its link and about what its twin does",
    scope=fabric_hosts,
    runbook=True,
)
def bandwidth(ctx: Context, host: str, f: HostFacts):
    every, ready, verdicts = _bandwidth_verdicts(ctx)
    for rail in every:
        dev = rail.end(host)
        if dev is None:
            continue
        v = verdicts.get(rail.key)
        if v is not None:
            yield Finding(v.status, v.message, v.fix, dev, dict(v.data))
        elif rail.key not in ready:
            yield skipped(f"{rail.label()}: not probed, the rail does not pass its jumbo ping (see fabric.ping)", dev)
        else:
            yield skipped(f"{rail.label()}: not probed in this run", dev)
