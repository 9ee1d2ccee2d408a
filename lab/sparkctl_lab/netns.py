"""The lab's networks, built with iproute2: named namespaces, veth cables, a management bridge.

    root namespace   lab-mgmt 10.231.0.1/24 ──┐            unreachable 10.231.0.0/16
    lab-switch       br-mgmt: sw-runner, sw-head, sw-worker, sw-offload (1500 MTU)
    lab-head         enP7s7 10.231.0.11 · enp1s0f0np0 .100.2 · enP2p1s0f0np0 .101.2 · enp1s0f1np1 .110.2
    lab-worker       enP7s7 10.231.0.12 · enp1s0f0np0 .100.3 · enP2p1s0f0np0 .101.3 · enp1s0f1np1 .111.3
    lab-offload      eno1   10.231.0.13 · enp65s0f0np0 .110.4 · enp65s0f1np1 .111.4   (fabric MTU 9000)
  with a second pair (`lab up --clusters 2`), on the same switch:
    lab-head2        enP7s7 10.231.0.21 · enp1s0f0np0 .102.2 · enP2p1s0f0np0 .103.2
    lab-worker2      enP7s7 10.231.0.22 · enp1s0f0np0 .102.3 · enP2p1s0f0np0 .103.3

`ensure()` creates only what is missing (a half-present cable is recreated) and never undoes
a fault: a link someone set down or to a wrong MTU stays as it is until `lab fault --clear-all`.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess

from sparkctl.errors import InputError, SparkctlError
from sparkctl_lab import topology as topo

NETNS_DIR = "/run/netns"


def ip(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *args], input=stdin, capture_output=True, text=True)
    if check and r.returncode != 0:
        what = " ".join(args) if stdin is None else f"{' '.join(args)} <<{stdin.strip()!r}"
        raise SparkctlError(f"`ip {what}` failed: {r.stderr.strip()}")
    return r


def batch(cmds: list[str], netns: str | None = None) -> None:
    if cmds:
        ip(*(["-n", netns] if netns else []), "-batch", "-", stdin="\n".join(cmds) + "\n")


def existing_netns() -> set[str]:
    try:
        return set(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return set()


def links(netns: str | None) -> dict[str, dict]:
    """name -> {mtu, operstate, up (admin), master, addresses[]} as `ip -j addr` reports them."""
    r = ip(*(["-n", netns] if netns else []), "-j", "addr", "show", check=False)
    if r.returncode != 0:
        return {}
    out = {}
    for link in json.loads(r.stdout or "[]"):
        out[link["ifname"]] = {
            "mtu": link.get("mtu"),
            "operstate": link.get("operstate", "UNKNOWN").lower(),
            "up": "UP" in link.get("flags", []),
            "master": link.get("master"),
            "addresses": [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", []) if a.get("family") == "inet"],
        }
    return out


def foreign_routes() -> list[str]:
    """Routes in the root namespace into this lab's range that no lab made (the other labs beside
    it, paths.INSTANCE, route their own ranges: topo.ALL_SUBNETS, topo.RUNNER_DEVICES)."""
    r = ip("-j", "route", "show", "table", "all", check=False)
    return foreign(json.loads(r.stdout or "[]"), topo.SUBNETS, topo.ALL_SUBNETS, topo.RUNNER_DEVICES)


def foreign(
    routes: list[dict], subnets: tuple[str, ...], all_subnets: tuple[str, ...], runner_devices: tuple[str, ...]
) -> list[str]:
    """Of `ip -j route show` routes, those into `subnets` (this lab's) that no lab made."""
    own = [ipaddress.ip_network(s) for s in subnets]
    labs = {ipaddress.ip_network(s) for s in all_subnets}
    found = []
    for route in routes:
        dst = route.get("dst", "")
        try:
            net = ipaddress.ip_network(dst, strict=False)
        except ValueError:  # "default"
            continue
        if net.version != 4 or not any(net.overlaps(o) for o in own):
            continue
        if route.get("dev") in runner_devices:
            continue
        if route.get("type") == "unreachable" and net in labs:
            continue
        # inside another lab's range that holds none of ours: that lab's (the first lab's /16 holds
        # the others': test_lab_updown's blackhole in lab 2's range is no concern of lab 1's or 0's)
        owner = max((n for n in labs if net.subnet_of(n)), key=lambda n: n.prefixlen, default=None)
        if owner is not None and owner not in own and not any(o.subnet_of(owner) for o in own):
            continue
        found.append(f"{route.get('type', 'unicast')} {dst}" + (f" dev {route['dev']}" if route.get("dev") else ""))
    return found


def check_range_free() -> None:
    found = foreign_routes()
    if found:
        raise InputError(
            f"the lab's address range {' '.join(topo.SUBNETS)} is already routed on this machine: " + "; ".join(found),
            fix=f"free {' '.join(topo.SUBNETS)} (remove those routes/addresses) or run the lab on another machine; "
            "the lab never shares its range",
        )


def _mgmt_peer(host: str) -> str:
    return f"sw-{host}"


def ensure(host_set: dict[str, topo.LabHost] = topo.HOSTS) -> list[str]:
    """Create what is missing for the hosts `host_set` (the lab's pairs); return a line per change."""
    changes: list[str] = []
    have = existing_netns()
    names = topo.netns_names(host_set)
    missing = [n for n in names if n not in have]
    if missing:
        batch([f"netns add {n}" for n in missing])
        changes.append("namespaces " + ", ".join(missing))

    state = {ns: links(ns) for ns in [None, *names]}
    dels: dict[str | None, list[str]] = {}
    adds: list[str] = []
    created: set[tuple[str | None, str]] = set()  # (netns, device) made now: bring them up

    def cable(a_ns: str | None, a_dev: str, b_ns: str, b_dev: str, mtu: int) -> bool:
        a_has, b_has = a_dev in state[a_ns], b_dev in state[b_ns]
        if a_has and b_has:
            return False
        for ns, dev, has in ((a_ns, a_dev, a_has), (b_ns, b_dev, b_has)):
            if has:  # half a cable: remove it and lay the whole one again
                dels.setdefault(ns, []).append(f"link del {dev}")
        where = "" if a_ns is None else f" netns {a_ns}"
        adds.append(f"link add {a_dev}{where} mtu {mtu} type veth peer name {b_dev} netns {b_ns} mtu {mtu}")
        created.update({(a_ns, a_dev), (b_ns, b_dev)})
        return True

    sw = topo.SWITCH_NETNS
    new_mgmt = []
    if cable(None, topo.RUNNER_DEVICE, sw, "sw-runner", topo.MGMT_MTU):
        new_mgmt.append("runner")
    for h in host_set.values():
        if cable(h.netns, h.mgmt_device, sw, _mgmt_peer(h.name), topo.MGMT_MTU):
            new_mgmt.append(h.name)
    new_fabric = []
    for c in topo.cables(host_set):
        ha, hb = host_set[c.a], host_set[c.b]
        if cable(ha.netns, c.a_nic.device, hb.netns, c.b_nic.device, c.a_nic.mtu):
            new_fabric.append(f"{c.a}/{c.a_nic.device}<->{c.b}/{c.b_nic.device}")
    for ns, cmds in dels.items():
        batch(cmds, ns)
    batch(adds)
    if new_mgmt:
        changes.append("management links " + ", ".join(new_mgmt))
    if new_fabric:
        changes.append("fabric cables " + ", ".join(new_fabric))

    # bridge, addresses and link state: only what is missing, and `up` only for new links
    sw_links = links(sw)
    cmds = []
    if topo.SWITCH_BRIDGE not in sw_links:
        cmds += [f"link add {topo.SWITCH_BRIDGE} type bridge", f"link set {topo.SWITCH_BRIDGE} up"]
        changes.append("management bridge")
    for port in ["sw-runner"] + [_mgmt_peer(h) for h in host_set]:
        if sw_links.get(port, {}).get("master") != topo.SWITCH_BRIDGE:
            cmds.append(f"link set {port} master {topo.SWITCH_BRIDGE}")
        if (sw, port) in created:
            cmds.append(f"link set {port} up")
    batch(cmds, sw)

    root = links(None)
    rc = []
    runner_addr = f"{topo.RUNNER_ADDRESS}/24"
    if runner_addr not in root.get(topo.RUNNER_DEVICE, {}).get("addresses", []):
        rc.append(f"addr add {runner_addr} dev {topo.RUNNER_DEVICE}")
    if (None, topo.RUNNER_DEVICE) in created:
        rc.append(f"link set {topo.RUNNER_DEVICE} up")
    for subnet in sorted(set(topo.SUBNETS) - _unreachable()):
        rc.append(f"route add unreachable {subnet}")
        changes.append(f"route unreachable {subnet}")
    batch(rc)

    if new_mgmt or new_fabric:
        # a re-laid cable has new MACs: forget the old ones now rather than in ~30 s
        if (None, topo.RUNNER_DEVICE) not in created:
            ip("neigh", "flush", "dev", topo.RUNNER_DEVICE, check=False)
        for h in host_set.values():
            ip("-n", h.netns, "neigh", "flush", "all", check=False)
    for h in host_set.values():
        have_links = links(h.netns)
        hc = []
        if not have_links.get("lo", {}).get("up"):
            hc.append("link set lo up")
        for n in h.nics:
            if n.address not in have_links.get(n.device, {}).get("addresses", []):
                hc.append(f"addr add {n.address} dev {n.device}")
            if (h.netns, n.device) in created:
                hc.append(f"link set {n.device} up")
        batch(hc, h.netns)
    return changes


def _unreachable() -> set[str]:
    """Which of this lab's prefixes the root namespace routes `unreachable`."""
    r = ip("-j", "route", "show", "type", "unreachable", check=False)
    return {x.get("dst") for x in json.loads(r.stdout or "[]")} & set(topo.SUBNETS)


def _has_unreachable() -> bool:
    return _unreachable() == set(topo.SUBNETS)


def restore_links() -> list[str]:
    """Undo link faults: every lab link up at its nominal MTU. Returns what changed."""
    changes = []
    present = existing_netns()
    for h in topo.ALL_HOSTS.values():
        if h.netns not in present:  # a pair the lab does not have
            continue
        have = links(h.netns)
        cmds = []
        for n in h.nics:
            cur = have.get(n.device)
            if cur is None:
                continue
            if cur["mtu"] != n.mtu:
                cmds.append(f"link set {n.device} mtu {n.mtu}")
                changes.append(f"{h.name}/{n.device} mtu {cur['mtu']} -> {n.mtu}")
            if not cur["up"]:
                cmds.append(f"link set {n.device} up")
                changes.append(f"{h.name}/{n.device} up")
        batch(cmds, h.netns)
    return changes


def remove_netns(names: list[str]) -> list[str]:
    """Delete those of the namespaces that exist (their veths go with them, and so the far ends:
    a host's switch port, its fabric cables)."""
    have = existing_netns()
    gone = [n for n in names if n in have]
    if gone:
        batch([f"netns del {n}" for n in gone])
        return ["namespaces " + ", ".join(gone)]
    return []


def teardown() -> list[str]:
    """Remove every lab namespace (their veths go with them), the runner's veth and the route."""
    changes = remove_netns(topo.ALL_NETNS)
    if topo.RUNNER_DEVICE in links(None):
        ip("link", "del", topo.RUNNER_DEVICE, check=False)
        changes.append(f"link {topo.RUNNER_DEVICE}")
    for subnet in sorted(_unreachable()):
        ip("route", "del", "unreachable", subnet, check=False)
        changes.append(f"route unreachable {subnet}")
    return changes
