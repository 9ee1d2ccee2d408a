"""What must hold before the lab touches anything, each refusal with the fix to print (exit 2)."""

from __future__ import annotations

import os
import shutil

from sparkctl.errors import InputError

TOOLS = {
    "ip": "iproute2",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "setsid": "util-linux",
    "dockerd": "docker.io",
    "sshd": "openssh-server",
    "ssh-keygen": "openssh-client",
    "docker-registry": "docker-registry",
    "busybox": "busybox-static",
    "ldd": "libc-bin",
}
APT = "apt-get install -y iproute2 openssh-server docker.io docker-registry busybox-static iputils-ping"


def require_root(what: str = "the lab") -> None:
    if os.geteuid() != 0:
        raise InputError(
            f"{what} needs root: it creates network namespaces, mounts, veths, routes and daemons",
            fix="run it as root, e.g. `sudo sparkctl lab up`",
        )


def cgroup_mode(mountinfo: str) -> str:
    """'v1' when a cgroup v1 devices hierarchy is mounted (what the lab's dockerd needs),
    'v2' when only the unified hierarchy is, 'none' otherwise."""
    v1_devices = unified = False
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields = right.split()
        if len(fields) < 3:
            continue
        fstype, opts = fields[0], fields[2]
        if fstype == "cgroup" and "devices" in opts.split(","):
            v1_devices = True
        elif fstype == "cgroup2":
            unified = True
    return "v1" if v1_devices else ("v2" if unified else "none")


def require_cgroup_v1() -> None:
    with open("/proc/self/mountinfo") as f:
        mode = cgroup_mode(f.read())
    if mode == "v2":
        raise InputError(
            "this machine mounts cgroup v2 only (the unified hierarchy); the lab's hosts run Debian's "
            "dockerd 20.10 in nested namespaces, which is only proven here on cgroup v1",
            fix="boot with `systemd.unified_cgroup_hierarchy=0` (cgroup v1/hybrid) or run the lab on a machine with cgroup v1",
        )
    if mode == "none":
        raise InputError(
            'no cgroup v1 `devices` hierarchy is mounted (dockerd fails with "Devices cgroup isn\'t mounted")',
            fix="mount the cgroup v1 hierarchies under /sys/fs/cgroup (or use a machine that has them)",
        )


def require_tools() -> None:
    missing = sorted(
        {pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}")}
    )
    if missing:
        raise InputError(f"the lab needs packages that are not installed: {', '.join(missing)}", fix=APT)
