"""env: the runtime's rendered NCCL/Gloo/UCX/Ray variables name the fabric device and every RDMA twin.

The environment comes from render() (pure), so these checks compare it with what each host
really has: the interface exists and holds VLLM_HOST_IP, every NCCL_IB_HCA device exists, and
a Spark rail's other ConnectX-7 twin is not left out (one twin ~98 Gb/s, both ~161 Gb/s).
NCCL_IB_GID_INDEX is best unpinned; pinned, it fails where it cannot work (an empty slot, another
address's GID, RoCE v1 at one end and v2 at the other) and warns where it works but is not the
recommended GID (RoCE v1, or the fe80 link-local GID: fine on a direct cable only).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional

from sparkctl.checks.base import Context, fail, head_host, host_check, ok, skipped, warn
from sparkctl.checks.host import runtime_hosts

if TYPE_CHECKING:
    from ipaddress import IPv4Network

    from sparkctl.facts.host import HostFacts
    from sparkctl.facts.rdma import GidEntry
    from sparkctl.inventory.models import FabricLink

READS = frozenset({"ip_addr", "rdma_state", "gid"})

IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "UCX_NET_DEVICES", "OMPI_MCA_btl_tcp_if_include")
_TWIN = re.compile(r"^(roce)(p|P2p)(\d+s\d+f\d+)$")


def twin_of(dev: str) -> str | None:
    """rocep1s0f0 <-> roceP2p1s0f0: the two PCIe x4 halves of one ConnectX-7 port on a Spark."""
    m = _TWIN.match(dev)
    if not m:
        return None
    return f"{m[1]}{'P2p' if m[2] == 'p' else 'p'}{m[3]}"


@host_check(
    "env.fabric", "NCCL/Gloo/UCX/Ray env names this host's fabric device, its IP and every RDMA twin", scope=runtime_hosts
)
def fabric_env(ctx: Context, host: str, f: HostFacts):
    for spec in ctx.launch_on(host):
        env = spec.env
        devs = {env[v] for v in IFNAME_VARS if v in env}
        if not devs:
            yield skipped(f"{spec.name} has no fabric rail to its peer in the inventory: runs over the management net", spec.name)
            continue
        problems = [f"the socket variables disagree: {', '.join(sorted(devs))}"] if len(devs) > 1 else []
        ip = env.get("VLLM_HOST_IP")
        for dev in sorted(devs):
            iface = (f.interfaces or {}).get(dev)
            if f.interfaces is not None and iface is None:
                problems.append(f"{dev} (NCCL_SOCKET_IFNAME, ...) does not exist on {host}")
            elif iface is not None and ip and ip not in [str(a.ip) for a in iface.addresses]:
                problems.append(f"VLLM_HOST_IP {ip} is not on {dev}")
        hcas = [d for d in env.get("NCCL_IB_HCA", "").split(",") if d]
        missing = [d for d in hcas if f.rdma_states.get(d) == "missing"]
        problems += [f"NCCL_IB_HCA names {d}, which {host} does not have" for d in missing]
        left_out = []
        if ctx.role(host) in ("head", "worker"):
            left_out = sorted({t for d in hcas if (t := twin_of(d)) and t not in hcas and t in f.ibdev})
        summary = f"{spec.name}: {', '.join(sorted(devs))}, VLLM_HOST_IP={ip}, NCCL_IB_HCA={','.join(hcas) or '(none)'}"
        if problems:
            yield fail(
                f"{summary}: " + "; ".join(problems),
                f"fix hosts.{host}.fabric (device, rdma, address) in the inventory: the runtime env is rendered "
                "from it; `sparkctl render` shows the result",
                spec.name,
            )
        elif left_out:
            yield warn(
                f"{summary}: NCCL_IB_HCA={','.join(hcas)} leaves out the twin(s) {', '.join(left_out)} "
                "(one twin alone ~98 Gb/s, both ~161 Gb/s)",
                f"add the twin to the rail's rdma list in hosts.{host}.fabric (both halves of the port)",
                spec.name,
            )
        else:
            yield ok(summary, spec.name)


# What a pinned GID index can point at, and what a person would say of each (NCCL uses the same
# index on both ends; the recommended GID is RoCE v2 over the rail's own IPv4 address, which NCCL
# finds per device when NCCL_IB_GID_INDEX is unset).
V2 = "RoCE v2"
UNPIN = "remove NCCL_IB_GID_INDEX from runtime.env: unset, NCCL picks the RoCE v2 GID of each device's IPv4 address"


def _judge_gid(index: str, dev: str, link: FabricLink, entry: GidEntry, f: HostFacts, rails: set[str]) -> tuple[str, str]:
    """(ok|warn|fail, why) for one device's entry at the pinned index."""
    where = f"GID {index} on {dev}"
    if entry.type == "missing":
        return "failed", (
            f"{where} is an empty slot (the table moved when an address came or went; NCCL's ibv_modify_qp fails on it)"
        )
    if entry.ipv4 is not None:
        ip, netdev = entry.ipv4, entry.netdev or link.device
        if ip.is_link_local and netdev in rails:
            return "failed", (
                f"{where} is {ip}, the IPv4 link-local address NVIDIA's netplan adds to {netdev}: "
                "`sparkctl up` removes that address (fabric.address) and the GID goes with it"
            )
        if netdev in rails and ip != link.address.ip and netdev == link.device:
            return "failed", (
                f"{where} is {ip}, not the rail's {link.address.ip}: `sparkctl up` removes that "
                "address (fabric.address), and the peer's GID at that index is in another subnet"
            )
        iface = (f.interfaces or {}).get(netdev)
        held = [a for a in (iface.addresses if iface else ()) if a.ip == ip]
        if f.interfaces is not None and not held:
            return "failed", f"{where} is {ip}, which {netdev} no longer holds (a stale entry)"
        if entry.type == V2:
            return "ok", f"{where} is RoCE v2 {ip} ({netdev})"
        return "warn", (
            f"{where} is {entry.type} over {ip}: RoCE v1 is plain Ethernet, so it works on a "
            "direct cable but not through a routed switch, and without RoCE v2's congestion control"
        )
    if entry.link_local:
        if entry.type == V2:
            return "warn", (
                f"{where} is RoCE v2 over the port's fe80 link-local GID: reaches the peer on a direct cable only (not routed)"
            )
        return "warn", (
            f"{where} is {entry.type} over the port's fe80 link-local GID (upstream DSpark examples pin "
            "0): works on a direct cable, not through a routed switch, and RoCE v1 has no congestion control"
        )
    if entry.gid is None:  # the type alone (the GID itself not read): judge by the type
        if entry.type == V2:
            return "ok", f"{where} is RoCE v2"
        return "warn", f"{where} is {entry.type}, not RoCE v2: works on a direct cable only"
    return "warn", f"{where} is {entry.type} {entry.gid}, not an IPv4 GID"


def _subnet(f: HostFacts, entry: GidEntry) -> Optional[IPv4Network]:
    """The network of the address an IPv4 GID stands for, from the host's interfaces."""
    iface = (f.interfaces or {}).get(entry.netdev)
    return next((a.network for a in (iface.addresses if iface else ()) if a.ip == entry.ipv4), None)


@host_check(
    "env.gid_index", "NCCL_IB_GID_INDEX is unpinned, or pinned to the RoCE v2 GID of each rail's own address", scope=runtime_hosts
)
def gid_index(ctx: Context, host: str, f: HostFacts):
    pinned = ctx.inventory.runtime.env.get("NCCL_IB_GID_INDEX")
    if pinned is None:
        return ok("NCCL_IB_GID_INDEX not pinned: NCCL finds the RoCE v2 GID itself")
    links = [(link, d) for link in ctx.inventory.hosts[host].fabric for d in link.rdma]
    if not links:
        return ok(f"NCCL_IB_GID_INDEX={pinned} (no RDMA device on this host)")
    if not f.gids:
        return skipped(f"GID table entry {pinned} not read: {f.errors.get('gid', 'no answer')}")
    rails = {link.device for link in ctx.inventory.hosts[host].fabric}
    verdicts = []
    for link, dev in links:
        entry = f.gids.get(dev)
        if entry is None:
            verdicts.append(("failed", f"GID {pinned} on {dev} not read (no such RDMA device?)"))
            continue
        verdicts.append(_judge_gid(pinned, dev, link, entry, f, rails))
        # both ends use the same index (the twins carry the same names on both Sparks): RoCE v1 at one
        # end cannot talk to v2 at the other, nor an address to one in another subnet
        peer = ctx.facts.get(link.peer)
        back = (
            next(
                (
                    x
                    for x in ctx.inventory.hosts[link.peer].fabric
                    if x.peer == host and x.address.network == link.address.network
                ),
                None,
            )
            if link.peer in ctx.inventory.hosts
            else None
        )
        theirs = peer.gids.get(dev) if peer is not None and back is not None and dev in back.rdma else None
        if theirs is None or "missing" in (theirs.type, entry.type):
            continue
        if theirs.type != entry.type:
            verdicts.append(
                (
                    "failed",
                    f"GID {pinned} is {entry.type} on {dev} but {theirs.type} on {link.peer}'s {dev}: "
                    "the two ends cannot connect",
                )
            )
        elif entry.ipv4 is not None and theirs.ipv4 is not None and (net := _subnet(f, entry)) and theirs.ipv4 not in net:
            verdicts.append(
                (
                    "failed",
                    f"GID {pinned} on {dev} is {entry.ipv4} but on {link.peer}'s {dev} {theirs.ipv4}, "
                    f'outside {net}: NCCL fails at TP init ("unhandled system error")',
                )
            )
    bad = [why for v, why in verdicts if v == "failed"]
    meh = [why for v, why in verdicts if v == "warn"]
    if bad:
        return fail(
            f"NCCL_IB_GID_INDEX={pinned} cannot work: " + "; ".join(bad),
            f"{UNPIN}; or pin the index `show_gids` lists as v2 with the rail's address on every device of "
            f"{host} and its peers (indexes move after link events: 3 became 4 on a Spark)",
        )
    if meh:
        return warn(f"NCCL_IB_GID_INDEX={pinned} works, but is not the recommended GID: " + "; ".join(meh), UNPIN)
    return ok(
        f"NCCL_IB_GID_INDEX={pinned}: "
        + "; ".join(why for _, why in verdicts)
        + " (pinned: re-checked here, as indexes move after link events)"
    )


def moe_clamp_warning(inv) -> str | None:
    """`render`'s and doctor's words when vLLM 0.33 would refuse this MoE backend for this checkpoint."""
    from sparkctl.inventory.vllm import swiglu_clamp_refusal

    r = inv.runtime
    refusal = swiglu_clamp_refusal(r.moe_backend, r.moe_quantization, r.checkpoint_swiglu_limit)
    if refusal is None:
        return None
    return (
        f"runtime.moe_backend {r.moe_backend} with a checkpoint that sets swiglu_limit "
        f"(runtime.checkpoint_swiglu_limit {r.checkpoint_swiglu_limit:g}): upstream vLLM 0.33 refuses to start "
        f"(fused_moe/oracle/nvfp4.py: {refusal})"
    )


@host_check(
    "env.moe_clamp",
    "the MoE backend applies the SwiGLU clamp the checkpoint asks for (vLLM 0.33 refuses one that does not)",
    scope=head_host,
    needs_reach=False,
)
def moe_clamp(ctx: Context, host: str, f: HostFacts):
    words = moe_clamp_warning(ctx.inventory)
    if words is None:
        return ok(f"MoE backend {ctx.inventory.runtime.moe_backend or 'auto'}: no SwiGLU clamp conflict")
    return warn(
        words,
        "set runtime.moe_backend to b12x (the same GB10 kernels, with the clamp), or keep flashinfer_b12x "
        "only with an image whose vLLM build accepts it (the DSpark image's fork does)",
    )
