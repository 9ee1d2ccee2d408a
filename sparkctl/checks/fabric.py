"""fabric: every rail up at the right MTU and speed, RDMA ACTIVE, its address, route and jumbo ping.

One result per rail (target = the rail's net device). Every host pings its peers over each
rail, so each rail is proven in both directions; the offload host's links to each Spark are
rails like any other. `--deep` adds an iperf3 figure per rail.
"""

from __future__ import annotations

from sparkctl.checks.base import Context, fail, host_check, ok, skipped, warn
from sparkctl.facts.host import peer_ip
from sparkctl.inventory.models import FabricLink

# the fact kinds (sparkctl/facts/host.py) this group's checks read: gathered for them
READS = frozenset({"ip_addr", "speeds", "rdma_state", "ibdev2netdev", "route", "ping"})

DEGRADED = 0.5  # below half the expected speed: a degraded link (a CX-7 capped near 13 Gb/s, a bad cable)
# --deep iperf3 is one TCP test bound by CPU, far from an RDMA link's line rate: it only catches a
# link that is badly broken. Virtual links (the lab's veths) get the figure and no threshold.
BANDWIDTH_FAIL = 0.10
BANDWIDTH_WARN = 0.25


def fabric_hosts(ctx: Context) -> list[str]:
    return [h for h in ctx.hosts if ctx.inventory.hosts[h].fabric]


def _rails(ctx: Context, host: str) -> list[tuple[int, FabricLink]]:
    return list(enumerate(ctx.inventory.hosts[host].fabric))


def _persist(link: FabricLink) -> str:
    return "`sparkctl up` persists it in netplan"


def _iface(f, link: FabricLink):
    if f.interfaces is None:
        return None, skipped(f"could not read interfaces: {f.errors.get('ip_addr', 'ip -j addr gave nothing')}", link.device)
    iface = f.interfaces.get(link.device)
    if iface is None:
        return None, skipped(f"no net device {link.device} (see fabric.link)", link.device)
    return iface, None


@host_check("fabric.link", "each rail's net device exists and is up with carrier", scope=fabric_hosts, runbook=True)
def link_up(ctx: Context, host: str, f):
    out = []
    for _, link in _rails(ctx, host):
        t = link.device
        if f.interfaces is None:
            out.append(fail(f"cannot read interfaces: {f.errors.get('ip_addr', 'no answer')}", "check `ip -j addr` on the host (iproute2)", t))
            continue
        iface = f.interfaces.get(link.device)
        if iface is None:
            have = ", ".join(sorted(n for n in f.interfaces if n != "lo"))
            out.append(
                fail(
                    f"net device {link.device} does not exist (have: {have})",
                    f"fix hosts.{host}.fabric device names (`ip -br link`), or load the NIC driver (mlx5_core)",
                    t,
                )
            )
        elif not iface.up:
            why = "administratively down" if "UP" not in iface.flags else "no carrier (cable, transceiver or the peer's port)"
            out.append(
                fail(
                    f"{link.device} to {link.peer} is down: {why} (state {iface.operstate})",
                    f"`ip link set {link.device} up` on {host}; if it stays without carrier, check the cable and "
                    f"{link.peer}'s end of this rail",
                    t,
                )
            )
        else:
            out.append(ok(f"{link.device} to {link.peer} is up", t))
    return out


@host_check("fabric.mtu", "each rail has the inventory's MTU (9000 for jumbo frames)", scope=fabric_hosts, runbook=True)
def mtu(ctx: Context, host: str, f):
    out = []
    for _, link in _rails(ctx, host):
        iface, why = _iface(f, link)
        if why:
            out.append(why)
        elif iface.mtu != link.mtu:
            out.append(
                fail(
                    f"{link.device} has MTU {iface.mtu}, expected {link.mtu}",
                    f"`ip link set {link.device} mtu {link.mtu}` on {host} now; {_persist(link)}",
                    link.device,
                    mtu=iface.mtu,
                )
            )
        else:
            out.append(ok(f"MTU {iface.mtu}", link.device))
    return out


@host_check("fabric.speed", "each rail links at its expected speed (catches a degraded ConnectX-7)", scope=fabric_hosts, runbook=True)
def speed(ctx: Context, host: str, f):
    out = []
    for _, link in _rails(ctx, host):
        iface, why = _iface(f, link)
        if why:
            out.append(why)
            continue
        if not iface.up:
            out.append(skipped(f"{link.device} is down: no link speed (see fabric.link)", link.device))
            continue
        mbps = f.speeds.get(link.device)
        want = link.speed_gbps
        if mbps is None:
            out.append(warn(f"{link.device} reports no speed", f"read it by hand: `ethtool {link.device}`", link.device))
            continue
        gbps = mbps / 1000
        if gbps < want * DEGRADED:
            out.append(
                fail(
                    f"{link.device} links at {gbps:g} Gb/s, expected {want:g} Gb/s: degraded",
                    f"`ethtool {link.device}` on {host} to confirm; reseat the cable/transceiver; a ConnectX-7 stuck "
                    "near 13 Gb/s after boot needs a reboot (or `mlxfwreset`) of the host",
                    link.device,
                    gbps=gbps,
                    expected_gbps=want,
                )
            )
        elif gbps < want:
            out.append(
                warn(
                    f"{link.device} links at {gbps:g} Gb/s, below the expected {want:g} Gb/s",
                    f"check `ethtool {link.device}` (autonegotiation, cable rating) or set speed_gbps to what the link is",
                    link.device,
                    gbps=gbps,
                    expected_gbps=want,
                )
            )
        else:
            out.append(ok(f"{gbps:g} Gb/s", link.device, gbps=gbps))
    return out


@host_check("fabric.rdma", "each rail's RDMA device(s) exist and their port is ACTIVE", scope=fabric_hosts, runbook=True)
def rdma_state(ctx: Context, host: str, f):
    out = []
    for _, link in _rails(ctx, host):
        for dev in link.rdma:
            state = f.rdma_states.get(dev)
            mapped = f.ibdev.get(dev)
            netdev = f" (-> {mapped.netdev})" if mapped else ""
            if state is None:
                out.append(skipped("RDMA state not read", dev))
            elif state == "missing":
                out.append(
                    fail(
                        f"RDMA device {dev} not found",
                        f"`ibdev2netdev` on {host} lists the RDMA devices: fix hosts.{host}.fabric rdma names, "
                        "or load the RDMA driver (`modprobe mlx5_ib`)",
                        dev,
                    )
                )
            elif state != "ACTIVE":
                out.append(
                    fail(
                        f"RDMA port {dev}/1 is {state}{netdev}, not ACTIVE",
                        f"the port follows its link: fix fabric.link for {link.device} first; if the link is up, "
                        f"`rdma link show {dev}/1` and `ibdev2netdev` on {host}, restart the RDMA stack or the host",
                        dev,
                        state=state,
                    )
                )
            else:
                out.append(ok(f"{dev}/1 ACTIVE{netdev}", dev))
    return out


@host_check("fabric.address", "each rail's fabric IP sits on its device with the inventory's prefix", scope=fabric_hosts, runbook=True)
def address(ctx: Context, host: str, f):
    out = []
    for _, link in _rails(ctx, host):
        if f.interfaces is None:
            out.append(skipped("interfaces not read (see fabric.link)", link.device))
            continue
        holders = [i for i in f.interfaces.values() if any(a.ip == link.address.ip for a in i.addresses)]
        on_dev = f.interfaces.get(link.device)
        fix_add = f"`ip addr add {link.address} dev {link.device}` on {host} now; {_persist(link)}"
        strays = [a for a in (on_dev.addresses if on_dev is not None else ()) if a.ip != link.address.ip]
        if on_dev is not None and link.address in on_dev.addresses and strays:
            described = []
            for a in strays:
                whose = next((n for n, spec in ctx.inventory.hosts.items() if any(x.address.ip == a.ip for x in spec.fabric)), None)
                described.append(f"{a} ({whose}'s address: a duplicate on the fabric)" if whose and whose != host else str(a))
            out.append(
                fail(
                    f"{link.device} has {link.address} and also {', '.join(described)}",
                    "`sparkctl up` removes the stray address(es), or by hand: "
                    + "; ".join(f"`ip addr del {a} dev {link.device}`" for a in strays) + f" on {host}",
                    link.device,
                    strays=[str(a) for a in strays],
                )
            )
        elif on_dev is not None and link.address in on_dev.addresses:
            others = [i.name for i in holders if i.name != link.device]
            if others:
                out.append(
                    fail(
                        f"{link.address.ip} is on {link.device} and also on {', '.join(others)}",
                        f"remove it from {', '.join(others)}: `ip addr del {link.address.ip}/... dev ...`",
                        link.device,
                    )
                )
            else:
                out.append(ok(f"{link.address} on {link.device}", link.device))
        elif on_dev is not None and any(a.ip == link.address.ip for a in on_dev.addresses):
            have = next(a for a in on_dev.addresses if a.ip == link.address.ip)
            out.append(
                fail(
                    f"{link.device} has {have}, expected {link.address} (wrong prefix: the peer is not in its subnet)",
                    f"`ip addr del {have} dev {link.device} && ip addr add {link.address} dev {link.device}` on {host}; "
                    + _persist(link),
                    link.device,
                )
            )
        elif holders:
            out.append(
                fail(
                    f"{link.address.ip} is on {', '.join(i.name for i in holders)}, not on {link.device}",
                    f"move it: `ip addr del {link.address.ip}/{link.address.network.prefixlen} dev {holders[0].name}`, then {fix_add}",
                    link.device,
                )
            )
        elif strays:
            out.append(
                fail(
                    f"{link.device} has {', '.join(map(str, strays))}, not {link.address} (a wrong address on the rail)",
                    "`sparkctl up` replaces it, or by hand: "
                    + "; ".join(f"`ip addr del {a} dev {link.device}`" for a in strays) + f"; then {fix_add}",
                    link.device,
                    strays=[str(a) for a in strays],
                )
            )
        else:
            out.append(fail(f"{link.address} is not configured on {host}", fix_add, link.device))
    return out


@host_check("fabric.route", "the route to each peer's fabric IP leaves through that rail (no leak to the default route)", scope=fabric_hosts, runbook=True)
def route(ctx: Context, host: str, f):
    out = []
    for i, link in _rails(ctx, host):
        ip = peer_ip(ctx.inventory, host, link)
        if ip is None:
            out.append(skipped(f"no rail on {link.peer} in {link.address.network} (inventory)", link.device))
            continue
        if i not in f.routes:
            out.append(skipped("route not read", link.device))
            continue
        dev = f.routes[i]
        if dev == link.device:
            out.append(ok(f"{ip} via {dev}", link.device))
        elif dev is None:
            detail = f.route_text.get(i, "").splitlines()[-1:] or [""]
            out.append(
                fail(
                    f"no route to {link.peer}'s {ip}: {detail[0][:120]}",
                    f"{link.device} must be up with {link.address} (see fabric.link / fabric.address on {host})",
                    link.device,
                )
            )
        else:
            out.append(
                fail(
                    f"traffic to {link.peer}'s {ip} leaves via {dev}, not {link.device} (a leak to another network)",
                    f"put {link.address} on {link.device} (fabric.address) and remove any more specific route: "
                    f"`ip route get {ip}` on {host} shows which one wins",
                    link.device,
                    via=dev,
                )
            )
    return out


@host_check("fabric.ping", "a don't-fragment ping of MTU-28 bytes reaches the peer over each rail", scope=fabric_hosts, runbook=True)
def ping(ctx: Context, host: str, f):
    out = []
    for i, link in _rails(ctx, host):
        ip = peer_ip(ctx.inventory, host, link)
        if ip is None:
            out.append(skipped(f"no rail on {link.peer} in {link.address.network} (inventory)", link.device))
            continue
        p = f.pings.get(i)
        size = link.mtu - 28
        if p is None:
            out.append(skipped("ping not run", link.device))
        elif p.ok:
            out.append(ok(f"{size}-byte don't-fragment ping to {link.peer} {ip}: {p.received}/{p.sent}", link.device))
        else:
            detail = p.detail or "no reply"
            out.append(
                fail(
                    f"{size}-byte don't-fragment ping to {link.peer} {ip} over {link.device} failed: {detail}",
                    f"both ends need MTU {link.mtu} and the link up (fabric.mtu / fabric.link on {host} and {link.peer}); "
                    f"retry by hand: `ping -M do -s {size} -I {link.device} {ip}`",
                    link.device,
                )
            )
    return out


@host_check("fabric.bandwidth", "iperf3 between the ends of each rail (--deep)", scope=fabric_hosts, runbook=True, deep_only=True)
def bandwidth(ctx: Context, host: str, f):
    out = []
    for _, link in _rails(ctx, host):
        r = ctx.bandwidth.get(f"{host}/{link.device}")
        if r is None:
            continue  # measured from the other end of the rail
        if r.error:
            out.append(
                fail(
                    f"iperf3 to {link.peer} over {link.device} failed: {r.error}",
                    "check that iperf3 is installed on both hosts and the rail pings (fabric.ping)",
                    link.device,
                )
            )
            continue
        want = link.speed_gbps
        msg = f"{r.gbps:.1f} Gb/s to {link.peer} (iperf3, {r.streams} streams, {r.seconds:.0f} s; link {want:g} Gb/s)"
        if link.device in f.virtual:
            out.append(ok(f"{msg}; virtual link: no threshold", link.device, gbps=round(r.gbps, 2)))
        elif r.gbps < want * BANDWIDTH_FAIL:
            out.append(
                fail(
                    f"{msg}: below {BANDWIDTH_FAIL:.0%} of the link",
                    "see fabric.speed; check cable and both ends, then measure RDMA itself: "
                    f"`ib_write_bw -d {(link.rdma or ['<rdma dev>'])[0]} -F --report_gbits`",
                    link.device,
                    gbps=round(r.gbps, 2),
                )
            )
        elif r.gbps < want * BANDWIDTH_WARN:
            out.append(
                warn(
                    f"{msg}: below {BANDWIDTH_WARN:.0%} of the link (TCP through one iperf3 is CPU-bound; "
                    "confirm with ib_write_bw)",
                    f"`ib_write_bw -d {(link.rdma or ['<rdma dev>'])[0]} -F --report_gbits` between the hosts",
                    link.device,
                    gbps=round(r.gbps, 2),
                )
            )
        else:
            out.append(ok(msg, link.device, gbps=round(r.gbps, 2)))
    return out
