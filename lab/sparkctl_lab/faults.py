"""Faults for tests and drills.

Link down and wrong MTU are real link changes (`ip -n lab-HOST link set ...`). A degraded rail
(`speed`) is real too: a lower cap on the token bucket (`tc ... tbf`, in this kernel; netem is not)
that holds every rail at the lab's line rate (shaping.py), on both ends of the rail's veth, while its
speed file and ethtool keep the nominal speed, as a ConnectX-7 capped near 13 Gb/s does
(NVIDIA/dgx-spark-playbooks PR #108). The others live in LAB_DIR/faults/HOST.json, which the
simulated tools and sysfs read (hw/state.py).
"""

from __future__ import annotations

from sparkctl.errors import InputError
from sparkctl_lab import netns, paths, preflight, procs, shaping
from sparkctl_lab import topology as topo
from sparkctl_lab.hostexec import host_exec, init_pid, lab_host
from sparkctl_lab.hw import state
from sparkctl_lab.lifecycle import sync_all
from sparkctl_lab.status import link_view
from sparkctl_lab.topology import ALL_HOSTS

# other names people use for the same faults
ALIASES = {
    "degraded-speed": "speed",
    "wrong-mtu": "mtu",
    "wrong-driver": "driver",
    "rdma-port-down": "rdma-down",
    "foreign-gpu-process": "gpu-process",
    "no-gpu": "gpu-missing",
}
# speed: Mb/s a degraded rail carries: a quarter of the 1000 every lab rail carries (shaping.RAIL_MBPS),
# as 13 Gb/s is ~14% of a CX-7 twin's ~95 real
DEFAULTS = {"mtu": 1500, "speed": 250, "driver": "580.82.09", "gpu-process": 16384}


def _netdev(h: topo.LabHost, target: str | None, kind: str) -> str:
    devices = [n.device for n in h.nics]
    if target is None:
        raise InputError(f"fault {kind} needs a TARGET device on {h.name}", fix=f"one of: {', '.join(devices)}")
    try:
        return h.nic(target).device
    except KeyError:
        raise InputError(f"{h.name} has no device {target!r}", fix=f"one of: {', '.join(devices)}") from None


def _int(value, default: int, what: str) -> int:
    try:
        return int(value if value is not None else default)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a whole number, not {value!r}", fix=f"e.g. --value {default}") from None


def fault(host: str, kind: str, target: str | None = None, value: str | int | None = None, clear: bool = False) -> dict:
    """Switch one fault on (or off with clear=True). See the module docstring for the kinds."""
    preflight.require_root("`sparkctl lab fault`")
    h = lab_host(host)
    kind = ALIASES.get(kind, kind)
    if kind not in state.FAULT_KINDS:
        raise InputError(f"unknown fault kind {kind!r}", fix=f"use one of: {', '.join(state.FAULT_KINDS)}")
    init_pid(host)
    f = state.load_faults(host)

    if kind in ("link-down", "mtu"):
        dev = _netdev(h, target, kind)
        if kind == "link-down":
            netns.ip("-n", h.netns, "link", "set", dev, "up" if clear else "down")
        else:
            mtu = h.nic(dev).mtu if clear else _int(value, DEFAULTS["mtu"], "the MTU")
            netns.ip("-n", h.netns, "link", "set", dev, "mtu", str(mtu))
    elif kind == "speed":
        dev = _netdev(h, target, kind)
        sp = f.setdefault("speed", {})
        if clear:
            sp.pop(dev, None)
            shaping.shape(h, dev)  # back at the lab's line rate
        else:
            rate = _int(value, DEFAULTS["speed"], "the rail's throughput (Mb/s)")
            if rate <= 0:
                raise InputError(f"the rail's throughput must be above 0 Mb/s, not {rate}", fix="e.g. --value 250")
            sp[dev] = rate
            shaping.shape(h, dev, rate)
    elif kind == "rdma-down":
        dev = _netdev(h, target, kind)
        names = [target] if target != dev else list(h.nic(dev).rdma)
        if not names:
            raise InputError(f"{dev} on {host} has no RDMA device", fix="name a fabric device or its RDMA device")
        cur = set(f.get("rdma-down", []))
        cur = cur - set(names) if clear else cur | set(names)
        f["rdma-down"] = sorted(cur)
    elif kind == "gpu-missing":
        if target is not None and not (str(target).isdigit() and int(target) < len(h.gpus)):
            raise InputError(f"{host} has no GPU {target!r}", fix=f"give an index 0..{len(h.gpus) - 1} or none for all")
        which = "all" if target is None else int(target)
        cur = list(f.get("gpu-missing", []))
        if clear:
            cur = [] if which == "all" else [x for x in cur if x != which]
        elif which not in cur:
            cur.append(which)
        f["gpu-missing"] = cur
    elif kind == "driver":
        if clear:
            f.pop("driver", None)
        else:
            f["driver"] = str(value or DEFAULTS["driver"])
    elif kind == "gpu-process":
        gpu = _int(target, 0, "the GPU index")
        if gpu >= len(h.gpus):
            raise InputError(f"{host} has no GPU {gpu}", fix=f"give an index 0..{len(h.gpus) - 1}")
        if clear:
            _kill_gpu_processes(host, f)
            f["gpu-process"] = []
        else:
            used = _int(value, DEFAULTS["gpu-process"], "the memory (MiB)")
            r = host_exec(host, ["sh", "-c", "setsid sleep infinity </dev/null >/dev/null 2>&1 & echo $!"], check=True)
            f.setdefault("gpu-process", []).append(
                {"pid": int(r.stdout.strip()), "name": "python3", "gpu": gpu, "used_mib": used}
            )
    state.save_faults(host, f)
    sync_all()
    return {
        "host": host,
        "faults": state.load_faults(host),
        "links": {ln["device"]: {k: ln.get(k) for k in ("state", "mtu", "admin_up")} for ln in link_view(host)},
    }


def _unshape_all() -> list[str]:
    """Every rail back at the lab's line rate (a degraded-rail fault, or a test's own shaping)."""
    return shaping.restore(ALL_HOSTS, set(netns.existing_netns()))


def _kill_gpu_processes(host: str, f: dict) -> None:
    """Kill the foreign GPU processes the host's fault view `f` lists."""
    for p in f.get("gpu-process", []):
        host_exec(host, ["kill", "-9", str(p["pid"])])


def clear_faults() -> list[str]:
    """Every fault off: links up at their nominal MTU, fault files emptied, foreign processes killed."""
    preflight.require_root("`sparkctl lab fault --clear-all`")
    changes = netns.restore_links()
    from sparkctl_lab.drills import stop_load  # a drill's background clients

    changes += stop_load()
    changes += _unshape_all()
    for name in ALL_HOSTS:  # a host of a pair the lab does not have has no fault file: {}
        f = state.load_faults(name)
        if not f:
            continue
        if procs.host_init(name):
            _kill_gpu_processes(name, f)
        state.save_faults(name, {})
        changes.append(f"{name}: cleared {', '.join(sorted(f))}")
    if paths.LAB_DIR.exists():
        sync_all()
    return changes
