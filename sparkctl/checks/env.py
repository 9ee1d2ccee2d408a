"""env: the runtime's rendered NCCL/Gloo/UCX/Ray variables name the fabric device and every RDMA twin.

The environment comes from render() (pure), so these checks compare it with what each host
really has: the interface exists and holds VLLM_HOST_IP, every NCCL_IB_HCA device exists, and
a Spark rail's other ConnectX-7 twin is not left out (one twin ~98 Gb/s, both ~161 Gb/s).
NCCL_IB_GID_INDEX is fine unpinned; pinned, its index must be RoCE v2 on every device.
"""

from __future__ import annotations

import re

from sparkctl.checks.base import Context, fail, head_host, host_check, ok, skipped, warn
from sparkctl.checks.host import runtime_hosts

READS = frozenset({"ip_addr", "rdma_state", "gid"})

IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "UCX_NET_DEVICES", "OMPI_MCA_btl_tcp_if_include")
_TWIN = re.compile(r"^(roce)(p|P2p)(\d+s\d+f\d+)$")


def twin_of(dev: str) -> str | None:
    """rocep1s0f0 <-> roceP2p1s0f0: the two PCIe x4 halves of one ConnectX-7 port on a Spark."""
    m = _TWIN.match(dev)
    if not m:
        return None
    return f"{m[1]}{'P2p' if m[2] == 'p' else 'p'}{m[3]}"


@host_check("env.fabric", "NCCL/Gloo/UCX/Ray env names this host's fabric device, its IP and every RDMA twin", scope=runtime_hosts)
def fabric_env(ctx: Context, host: str, f):
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


@host_check("env.gid_index", "NCCL_IB_GID_INDEX is unpinned, or pinned to a RoCE v2 GID on every device", scope=runtime_hosts)
def gid_index(ctx: Context, host: str, f):
    pinned = ctx.inventory.runtime.env.get("NCCL_IB_GID_INDEX")
    if pinned is None:
        return ok("NCCL_IB_GID_INDEX not pinned: NCCL finds the RoCE v2 GID itself")
    devs = sorted({d for link in ctx.inventory.hosts[host].fabric for d in link.rdma})
    bad = {d: f.gid_types.get(d, "not read") for d in devs if f.gid_types.get(d) != "RoCE v2"}
    if not devs:
        return ok(f"NCCL_IB_GID_INDEX={pinned} (no RDMA device on this host)")
    if bad:
        listing = ", ".join(f"{d}: {t}" for d, t in bad.items())
        return fail(
            f"NCCL_IB_GID_INDEX={pinned} is pinned but GID {pinned} is not RoCE v2 on {listing}",
            "remove NCCL_IB_GID_INDEX from runtime.env (the RoCE v2 index has moved from 3 to 4 after updates), "
            f"or pin the index `show_gids` lists as RoCE v2 on {host}",
        )
    return ok(f"NCCL_IB_GID_INDEX={pinned} is RoCE v2 on {', '.join(devs)}")


def moe_clamp_warning(inv) -> str | None:
    """`render`'s and doctor's words when vLLM 0.33 would refuse this MoE backend for this checkpoint."""
    from sparkctl.inventory.vllm import swiglu_clamp_refusal

    r = inv.runtime
    refusal = swiglu_clamp_refusal(r.moe_backend, r.moe_quantization, r.checkpoint_swiglu_limit)
    if refusal is None:
        return None
    return (f"runtime.moe_backend {r.moe_backend} with a checkpoint that sets swiglu_limit "
            f"(runtime.checkpoint_swiglu_limit {r.checkpoint_swiglu_limit:g}): upstream vLLM 0.33 refuses to start "
            f"(fused_moe/oracle/nvfp4.py: {refusal})")


@host_check("env.moe_clamp", "the MoE backend applies the SwiGLU clamp the checkpoint asks for (vLLM 0.33 refuses one that does not)",
            scope=head_host, needs_reach=False)
def moe_clamp(ctx: Context, host: str, f):
    words = moe_clamp_warning(ctx.inventory)
    if words is None:
        return ok(f"MoE backend {ctx.inventory.runtime.moe_backend or 'auto'}: no SwiGLU clamp conflict")
    return warn(words, "set runtime.moe_backend to b12x (the same GB10 kernels, with the clamp), or keep flashinfer_b12x "
                "only with an image whose vLLM build accepts it (the DSpark image's fork does)")
