"""host: free disk where images and caches live, systemd-logind RemoveIPC, memlock for RDMA, and the
programs sparkctl runs there (docker's GPU hook, iperf3, rsync)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkctl.checks.base import Context, fail, host_check, ok, skipped, warn

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

READS = frozenset({"disk", "memlock", "logind", "containers", "tools"})

GIB = 1 << 30
# (fail below, warn below) GiB free. An image of this kind is ~20-30 GB and a new tag needs room
# next to the old one; compile caches (torch.compile, Triton, FlashInfer JIT) take a few GB.
# Under containerd's image store docker's data root keeps only logs, volumes and container
# metadata (images and container layers are containerd's), so the cache limits do for it.
DISK_LIMITS = {"images": (10, 30), "docker": (10, 30), "caches": (2, 10)}
SMALL = (2, 10)


def runtime_hosts(ctx: Context) -> list[str]:
    plan = ctx.plan
    hosts = {c.host for c in plan.containers} if plan else set(ctx.hosts)
    return [h for h in ctx.hosts if h in hosts]


def _disk_targets(ctx: Context, f: HostFacts) -> list[tuple[str, str, tuple[int, int]]]:
    """(key, what, limits) of the disks to judge: where images really are, and the cache dir."""
    caches = ("caches", f"cache dir {ctx.inventory.caches.host_path}", DISK_LIMITS["caches"])
    if f.image_store != "containerd":  # the classic store: images under docker's data root
        return [("docker", f"docker data root {f.docker_root or ''}".strip(), DISK_LIMITS["docker"]), caches]
    images = ("images", f"containerd image store {f.images_root}", DISK_LIMITS["images"])
    docker, img = f.disks.get("docker"), f.disks.get("images")
    if docker is not None and img is not None and docker.mount == img.mount:
        return [images, caches]  # one filesystem: judged once, as the image store's
    return [images, ("docker", f"docker data root {f.docker_root or ''}".strip(), SMALL), caches]


@host_check(
    "host.disk",
    "free disk where the image store keeps images (docker's data root, or containerd's root "
    "under containerd's image store) and under the cache directory",
    scope=runtime_hosts,
)
def disk(ctx: Context, host: str, f: HostFacts):
    for key, what, (fail_gib, warn_gib) in _disk_targets(ctx, f):
        d = f.disks.get(key)
        if d is None:
            yield skipped(f"could not read free space for the {what}", target=key)
            continue
        free = d.available / GIB
        msg = f"{free:.1f} GiB free on {d.mount} ({what})"
        fix = (
            f"free space on {d.mount}: `docker image prune` (unused images), old compile caches under "
            f"{ctx.inventory.caches.host_path}/torch_compile_cache, logs"
        )
        if free < fail_gib:
            yield fail(f"{msg}: below {fail_gib} GiB", fix, target=key, free_gib=round(free, 1))
        elif free < warn_gib:
            yield warn(f"{msg}: below {warn_gib} GiB", fix, target=key, free_gib=round(free, 1))
        else:
            yield ok(msg, target=key, free_gib=round(free, 1))


@host_check("host.remove_ipc", "systemd-logind keeps shared memory (RemoveIPC=no)")
def remove_ipc(ctx: Context, host: str, f: HostFacts):
    if f.logind_running is None:
        return skipped(f"could not read logind's state: {f.errors.get('logind', 'no answer')}")
    effective = "yes (systemd's default)" if f.remove_ipc is None else ("yes" if f.remove_ipc else "no")
    if f.remove_ipc is False:
        return ok("RemoveIPC=no")
    if not f.logind_running:
        return ok(f"systemd-logind is not running, so nothing removes IPC (its config says RemoveIPC={effective})")
    return fail(
        f"RemoveIPC={effective}: logind deletes a user's shared memory when their last session ends, "
        "which kills the runtime's NCCL/IPC segments",
        # the drop-in folder does not exist on a fresh Ubuntu or DGX OS
        "as root: mkdir -p /etc/systemd/logind.conf.d && printf '[Login]\\nRemoveIPC=no\\n' > "
        "/etc/systemd/logind.conf.d/90-sparkctl.conf && systemctl restart systemd-logind",
    )


def rdma_runtime_hosts(ctx: Context) -> list[str]:
    return [h for h in runtime_hosts(ctx) if any(link.rdma for link in ctx.inventory.hosts[h].fabric)]


@host_check(
    "host.memlock", "the runtime's containers may lock memory without limit (RDMA registers it)", scope=rdma_runtime_hosts
)
def memlock(ctx: Context, host: str, f: HostFacts):
    specs = {s.name: s for s in ctx.launch_on(host)}
    shell = "unlimited" if f.memlock_kib == -1 else (f"{f.memlock_kib} KiB" if f.memlock_kib is not None else "unknown")
    running = [c for c in (f.containers or []) if c.running and c.name in specs]
    drifted = [c for c in running if c.memlock != specs[c.name].ulimits.get("memlock")]
    if drifted:
        return fail(
            "running with another memlock limit than the launch: "
            + ", ".join(f"{c.name} ({'not set' if c.memlock is None else c.memlock})" for c in drifted),
            "restart the runtime with `sparkctl up` (it starts containers with the launch's --ulimit memlock)",
        )
    limited = sorted({s.ulimits.get("memlock") for s in specs.values()} - {-1}, key=str)
    if limited:
        return warn(
            f"the launch limits locked memory to {', '.join(map(str, limited))} bytes (runtime.memlock): "
            "RDMA memory registration needs unlimited on real hosts",
            "leave runtime.memlock at its default -1 (unlimited) unless the engine cannot raise limits (the lab)",
        )
    where = f"{len(running)} running container(s) unlimited" if running else "containers start with --ulimit memlock=-1"
    return ok(f"{where} (login shell: {shell}, not what the runtime gets)")


def _gpu_runtime_hosts(ctx: Context) -> list[str]:
    return [h for h in runtime_hosts(ctx) if ctx.inventory.hosts[h].gpu is not None]


TOOLKIT_FIX = (
    "install the NVIDIA Container Toolkit and let it configure docker: `sudo apt-get install -y nvidia-container-toolkit && "
    "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker` (DGX OS ships it: a "
    "missing hook means it was removed)"
)


@host_check("host.gpu_containers", "docker can give the runtime's containers the GPUs (`--gpus all`)", scope=_gpu_runtime_hosts)
def gpu_containers(ctx: Context, host: str, f: HostFacts):
    if f.tools is None:
        return skipped(f"not read: {f.errors.get('tools', 'no answer')}")
    if "nvidia-container-runtime-hook" not in f.tools:
        return fail(
            "nvidia-container-runtime-hook is not installed: dockerd registers its `--gpus` driver only when it finds "
            'the hook, and refuses every container of the launch (`could not select device driver "" with capabilities: '
            "[[gpu]]`)",
            TOOLKIT_FIX,
        )
    return ok("the NVIDIA Container Toolkit's hook is installed: `--gpus all` has a driver")


def _needs(ctx: Context, host: str) -> dict[str, str]:
    """tool -> what needs it on this host."""
    inv, spec = ctx.inventory, ctx.inventory.hosts[host]
    need = {}
    if spec.fabric:
        need["iperf3"] = "doctor's bandwidth probe of each rail (fabric.bandwidth)"
    if inv.weights is not None and spec.role in ("head", "worker"):
        need["rsync"] = "the weights step's copy of the model between the Sparks"
    return need


@host_check("host.tools", "the programs sparkctl runs on the host are installed (iperf3, rsync)")
def tools(ctx: Context, host: str, f: HostFacts):
    need = _needs(ctx, host)
    if not need:
        return ok("sparkctl runs no extra program here")
    if f.tools is None:
        return skipped(f"not read: {f.errors.get('tools', 'no answer')}")
    missing = [t for t in need if t not in f.tools]
    if not missing:
        return ok(f"{', '.join(need)} installed")
    said = "; ".join(f"{t}: {need[t]}" for t in missing)
    fix = f"`sudo apt-get install -y {' '.join(missing)}` on {host}"
    if "rsync" in missing:  # without it, `up` cannot put the model on this node
        return fail(f"not installed: {said}", fix)
    return warn(f"not installed: {said} (that check cannot measure)", fix)
