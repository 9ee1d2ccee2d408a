"""What a lab host's simulated hardware looks like right now: topology + faults + real link state.

Shared by the simulated tools (which run inside a host, where /sys/class/net is that host's)
and by the runner (faults, status). Stdlib only.

Fault file (LAB_DIR/faults/<host>.json), every key optional:
    {"speed": {"enp1s0f0np0": 1000},           # a degraded rail: Mb/s it carries (tc shapes it, faults.py);
                                               # sysfs and ethtool keep the nominal speed, as a real CX-7 does
     "rdma-down": ["rocep1s0f0"],              # RDMA port state DOWN whatever the netdev says
     "gpu-missing": [1] | ["all"],             # GPUs nvidia-smi no longer sees
     "driver": "580.82.09",                    # driver version nvidia-smi reports
     "gpu-process": [{"pid": 42, "name": "python3", "used_mib": 16384, "gpu": 0}]}
Link down and wrong MTU are not in the file: they are real (`ip -n lab-X link set ...`).
"""

from __future__ import annotations

import os
from pathlib import Path

from sparkctl_lab import paths
from sparkctl_lab.procs import alive
from sparkctl_lab.topology import ALL_HOSTS, LabHost

FAULT_KINDS = ("link-down", "mtu", "speed", "rdma-down", "gpu-missing", "driver", "gpu-process")


def current_host() -> LabHost:
    """The host a simulated tool runs on (its wrapper sets SPARKCTL_LAB_HOST)."""
    return ALL_HOSTS[os.environ["SPARKCTL_LAB_HOST"]]


def load_faults(name: str) -> dict:
    try:
        text = paths.faults_file(name).read_text()
    except FileNotFoundError:
        return {}
    import json  # only with a fault file: a tool call on a healthy host saves its ~20 ms import

    return json.loads(text or "{}")


def save_faults(name: str, faults: dict) -> None:
    import json

    f = paths.faults_file(name)
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps({k: v for k, v in faults.items() if v}, indent=1, sort_keys=True))
    os.replace(tmp, f)


def sysfs_operstate(device: str) -> str:
    """A net device's operstate as this mount namespace's sysfs tells it ('absent' if none)."""
    try:
        return Path(f"/sys/class/net/{device}/operstate").read_text().strip()
    except OSError:
        return "absent"


def gpu_uuid(host: str, index: int) -> str:
    import hashlib

    h = hashlib.sha256(f"sparkctl-lab/{host}/gpu{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def gpus(host: LabHost, faults: dict) -> list[dict]:
    """The GPUs nvidia-smi sees, with the memory the (foreign, still running) processes hold on each."""
    missing = faults.get("gpu-missing", [])
    procs = [p for p in faults.get("gpu-process", []) if alive(int(p["pid"]))]
    out = []
    for i, g in enumerate(host.gpus):
        if "all" in missing or i in missing:
            continue
        held = sum(int(p.get("used_mib", 0)) for p in procs if int(p.get("gpu", 0)) == i)
        out.append(
            {
                "index": len(out),  # nvidia-smi renumbers what it can see
                "name": g.name,
                "uuid": gpu_uuid(host.name, i),
                "bus_id": g.bus_id,
                "memory_total": g.memory_mib,
                "memory_used": None if g.memory_mib is None else 1 + held,
                "processes": [p for p in procs if int(p.get("gpu", 0)) == i],
            }
        )
    return out


def driver(host: LabHost, faults: dict) -> str:
    return faults.get("driver") or host.driver


def nominal_speed(host: LabHost, device: str) -> int | None:
    return next((n.speed_mbps for n in host.nics if n.device == device), None)


def speed(host: LabHost, device: str, faults: dict, operstate: str) -> int:
    """Mb/s as /sys/class/net/<dev>/speed shows it: -1 when the link is not up. A degraded rail
    (the `speed` fault) still shows its nominal speed: a capped ConnectX-7 does (PR #108)."""
    if operstate != "up":
        return -1
    return nominal_speed(host, device) or -1


def rdma_state(rdma: str, faults: dict, operstate: str) -> tuple[int, str]:
    if rdma in faults.get("rdma-down", []) or operstate != "up":
        return 1, "DOWN"
    return 4, "ACTIVE"


# --- the files the host's sysfs shows (bound over / into /sys inside the host) -------------------


def sys_root(name: str) -> Path:
    return paths.host_dir(name) / "sys"


def _put(path: Path, text: str) -> None:
    """Rewrite in place: the file may be bind-mounted over a sysfs attribute (same inode)."""
    data = text.encode()
    try:
        if path.read_bytes() == data:
            return
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o444)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def speed_file(name: str, device: str) -> Path:
    return sys_root(name) / "net" / device / "speed"


def sync_sys(name: str, operstates: dict[str, str]) -> None:
    """Bring the host's simulated sysfs files in line with its faults and real link states."""
    host = ALL_HOSTS[name]
    faults = load_faults(name)
    for n in host.nics:
        _put(speed_file(name, n.device), f"{speed(host, n.device, faults, operstates.get(n.device, 'absent'))}\n")
    for n in host.fabric:
        op = operstates.get(n.device, "absent")
        for r in n.rdma:
            port = sys_root(name) / "infiniband" / r / "ports" / "1"
            code, label = rdma_state(r, faults, op)
            _put(port / "state", f"{code}: {label}\n")
            _put(port / "phys_state", "5: LinkUp\n" if op == "up" else "3: Disabled\n")
            gbps = speed(host, n.device, faults, op) // 1000
            _put(port / "rate", f"{gbps} Gb/sec (4X)\n" if gbps > 0 else "Invalid argument\n")
            _put(port / "link_layer", "Ethernet\n")
            # a ConnectX-7 port's table once its netdev has an IPv4 address: v1/v2 of the fe80 GID the
            # port has from its MAC, then v1/v2 of the IPv4-mapped GID (show_gids on a Spark)
            for i, (kind, gid) in enumerate(zip(("IB/RoCE v1", "RoCE v2") * 2, [_fe80_gid(r)] * 2 + [_ipv4_gid(n.ip)] * 2)):
                _put(port / "gid_attrs" / "types" / str(i), kind + "\n")
                _put(port / "gid_attrs" / "ndevs" / str(i), n.device + "\n")
                _put(port / "gids" / str(i), gid + "\n")
            _put(sys_root(name) / "infiniband" / r / "node_type", "1: CA\n")


def _fe80_gid(rdma: str) -> str:
    import hashlib

    h = hashlib.sha256(f"sparkctl-lab/{rdma}".encode()).hexdigest()
    return f"fe80:0000:0000:0000:{h[0:4]}:{h[4:6]}ff:fe{h[6:8]}:{h[8:12]}"


def _ipv4_gid(ip: str) -> str:
    a, b, c, d = (int(x) for x in ip.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


def host_operstates() -> dict[str, str]:
    """Inside a host: the operstate of every net device its sysfs lists."""
    try:
        names = os.listdir("/sys/class/net")
    except OSError:
        return {}
    return {d: sysfs_operstate(d) for d in names}
