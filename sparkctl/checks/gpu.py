"""gpu: nvidia-smi answers, the expected GPUs per host, one driver on both Sparks, no foreign GPU process."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from sparkctl.checks.base import Context, cluster_check, fail, host_check, ok, skipped
from sparkctl.facts.gpu import GPUApp

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

READS = frozenset({"gpus", "gpu_apps", "containers"})


def gpu_hosts(ctx: Context) -> list[str]:
    return [h for h in ctx.hosts if ctx.inventory.hosts[h].gpu is not None]


def spark_hosts(ctx: Context) -> list[str]:
    return [h for h in gpu_hosts(ctx) if ctx.role(h) in ("head", "worker")]


def _smi_fix(host: str, error: str) -> str:
    """What to do, by the cause nvidia-smi names."""
    e = error.lower()
    if "version mismatch" in e:
        return (
            f"the driver's user-space libraries were updated under the kernel module still loaded: reboot {host} "
            "(`cat /proc/driver/nvidia/version` shows the loaded module; an unattended `apt upgrade` of "
            "nvidia-driver-* is the usual cause)"
        )
    if "couldn't communicate" in e or "not loaded" in e:
        return (
            f"the NVIDIA kernel module is not loaded on {host}: `lsmod | grep nvidia`, `dmesg | grep -i nvrm`; "
            "after a kernel update reinstall the driver of the DGX OS release "
            "(`sudo apt install --reinstall nvidia-driver-<version>`) and reboot"
        )
    if "device handle" in e or "gpu is lost" in e:
        return (
            f"the GPU dropped off: `dmesg | grep -iE 'xid|nvrm'` on {host}, then power-cycle it (a reboot may not bring it back)"
        )
    if "not found" in e or "no such file" in e:
        return f"nvidia-smi is not installed on {host}: install the driver package of the DGX OS release"
    return (
        "check the NVIDIA driver on the host: `nvidia-smi`, `dmesg | grep -i nvrm`; after a driver or "
        "kernel update reboot (DGX OS: `sudo apt install --reinstall nvidia-driver-<version>`)"
    )


@host_check("gpu.smi", "nvidia-smi runs and talks to the driver", scope=gpu_hosts, runbook=True)
def smi(ctx: Context, host: str, f: HostFacts):
    if f.gpu_error:
        return fail(f"nvidia-smi failed: {f.gpu_error}", _smi_fix(host, f.gpu_error))
    if f.gpus is None:
        return skipped("nvidia-smi was not asked")
    driver = f.gpus[0].driver if f.gpus else "no GPU listed"
    return ok(f"nvidia-smi answers (driver {driver})")


@host_check("gpu.model", "the host shows the inventory's GPU model and count", scope=gpu_hosts, runbook=True)
def model(ctx: Context, host: str, f: HostFacts):
    want = ctx.inventory.hosts[host].gpu
    if want is None:  # gpu_hosts scopes this to hosts whose inventory entry names a GPU
        return skipped("the inventory names no GPU for this host")
    if f.gpus is None:
        return skipped("nvidia-smi did not answer (see gpu.smi)")
    names = Counter(g.name for g in f.gpus)
    seen = ", ".join(f"{n}x {name}" for name, n in names.items()) or "no GPU"
    if names.get(want.model, 0) == want.count and len(f.gpus) == want.count:
        return ok(f"{want.count}x {want.model}")
    return fail(
        f"expected {want.count}x {want.model}, nvidia-smi shows {seen}",
        "a GPU the driver no longer sees: `nvidia-smi -L`, `dmesg | grep -iE 'xid|nvrm'` (fallen off the bus?), "
        "reseat/power-cycle the host; if the hardware changed on purpose, fix hosts."
        f"{host}.gpu in the inventory",
        expected=want.count,
        found=len(f.gpus),
    )


@cluster_check("gpu.driver", "both Sparks run the same NVIDIA driver version", scope=spark_hosts, runbook=True)
def driver(ctx: Context):
    drivers = {h: f.gpus[0].driver for h in spark_hosts(ctx) if (f := ctx.facts.get(h)) and f.gpus}
    out = {
        h: skipped("no driver version (see gpu.smi / gpu.model)") for h in spark_hosts(ctx) if h in ctx.facts and h not in drivers
    }
    agree = len(set(drivers.values())) <= 1
    # the head's driver is the reference, as `sparkctl up` converges images on the head's
    ref_host = next((h for h in drivers if ctx.role(h) == "head"), next(iter(drivers), None))
    ref = drivers.get(ref_host) if ref_host else None
    listing = ", ".join(f"{h} {d}" for h, d in drivers.items())
    for h, d in drivers.items():
        if agree:
            out[h] = ok(f"driver {d}" + (" on every Spark" if len(drivers) > 1 else ""))
        elif d == ref:
            out[h] = ok(f"driver {d} (the reference; differs elsewhere: {listing})")
        else:
            out[h] = fail(
                f"driver {d}, but {ref_host} runs {ref} ({listing}): NCCL across the Sparks needs one version",
                f"install driver {ref} on {h} (the same DGX OS / nvidia-driver package as {ref_host}) and reboot it",
                driver=d,
                reference=ref,
            )
    return out


@host_check("gpu.processes", "no process outside sparkctl's runtime holds GPU memory", scope=gpu_hosts, runbook=True)
def processes(ctx: Context, host: str, f: HostFacts):
    if f.gpus is None:
        return skipped("nvidia-smi did not answer (see gpu.smi)")
    ours = [c.id for c in (f.containers or []) if c.id]
    foreign: list[GPUApp] = []
    mine: list[GPUApp] = []
    for app in f.gpu_apps:
        cgroup = f.app_cgroups.get(app.pid, "")
        (mine if any(cid in cgroup for cid in ours) else foreign).append(app)
    if not foreign:
        return ok(f"only sparkctl's runtime uses the GPU ({len(mine)} process(es))" if mine else "no process holds GPU memory")
    listing = "; ".join(f"pid {a.pid} {a.process} {a.used_mib if a.used_mib is not None else '?'} MiB" for a in foreign)
    pids = " ".join(str(a.pid) for a in foreign)
    return fail(
        f"foreign process(es) hold GPU memory: {listing}",
        f"find the owner (`ps -o user,etime,cmd -p {pids}`) and stop it; the runtime sizes its KV pool from "
        "free GPU memory (gpu_memory_utilization), so this shrinks the pool or fails the start",
        pids=[a.pid for a in foreign],
    )
