"""Finding and stopping the lab's processes, from /proc alone (no pid files to go stale).

A host's init is the process whose network namespace is /run/netns/lab-NAME, which is PID 1 of
its own PID namespace and runs `sparkctl_lab.hostinit NAME`. Everything else of the host lives
in the same network namespace. The registry is the `docker-registry` serving the lab's config; the
model hub the `python -m sparkctl_lab.hub` whose environment names this LAB_DIR.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from sparkctl_lab import paths
from sparkctl_lab import topology as topo
from sparkctl_lab.hw import tools


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def cmdline(pid: int) -> list[str]:
    return [a for a in _read(f"/proc/{pid}/cmdline").split("\0") if a]


def alive(pid: int) -> bool:
    """Running and not a zombie (a detached daemon can linger as Z until reaped)."""
    stat = _read(f"/proc/{pid}/stat")
    return bool(stat) and stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def pids_in_netns(name: str) -> list[int]:
    try:
        want = f"net:[{os.stat(f'/run/netns/{name}').st_ino}]"
    except OSError:
        return []
    out = []
    for pid in all_pids():
        try:
            if os.readlink(f"/proc/{pid}/ns/net") == want and alive(pid):
                out.append(pid)
        except OSError:
            pass
    return out


def _is_init(pid: int, name: str) -> bool:
    """Is pid lab host `name`'s init: `sparkctl_lab.hostinit NAME`, PID 1 of its own PID namespace?"""
    args = cmdline(pid)
    if "sparkctl_lab.hostinit" not in args or args[-1] != name or not alive(pid):
        return False
    # of this lab: a second lab beside it (paths.INSTANCE) has a host of the same name
    if f"SPARKCTL_LAB_DIR={paths.LAB_DIR}" not in _read(f"/proc/{pid}/environ").split("\0"):
        return False
    nspid = [ln for ln in _read(f"/proc/{pid}/status").splitlines() if ln.startswith("NSpid:")]
    return bool(nspid) and nspid[0].split()[-1] == "1"


def host_init(name: str) -> int | None:
    """Root-namespace pid of the host's PID-1 init, if it runs."""
    return next((pid for pid in pids_in_netns(topo.ALL_HOSTS[name].netns) if _is_init(pid, name)), None)


def all_inits(name: str) -> list[int]:
    """Every PID-1 init of lab host `name`, in whatever network namespace (a namespace deleted
    by hand leaves its host running, unnamed: `up` and `down` must stop it)."""
    return [pid for pid in all_pids() if _is_init(pid, name)]


def host_children(init_pid: int) -> dict[str, int]:
    """The init's daemons by name (sshd, dockerd), root-namespace pids."""
    out = {}
    for k in map(int, _read(f"/proc/{init_pid}/task/{init_pid}/children").split()):
        exe = os.path.basename((cmdline(k) or [""])[0])
        if exe in ("sshd", "dockerd") and alive(k):
            out[exe] = k
    return out


def mount_points(pid: int) -> set[str]:
    """The mount points of pid's mount namespace."""
    return {ln.split()[4] for ln in _read(f"/proc/{pid}/mountinfo").splitlines() if len(ln.split()) > 4}


def registry_pid() -> int | None:
    config = str(paths.REGISTRY_DIR / "config.yml")
    for pid in all_pids():
        args = cmdline(pid)
        if len(args) >= 3 and os.path.basename(args[0]) == "docker-registry" and args[-1] == config and alive(pid):
            return pid
    return None


def hub_pids() -> dict[int, str]:
    """The lab's model hub processes (`python -S -m sparkctl_lab.hub KEY` of this LAB_DIR): pid -> KEY."""
    out = {}
    for pid in all_pids():
        args = cmdline(pid)
        if len(args) >= 2 and args[-2] == "sparkctl_lab.hub" and alive(pid):
            if f"SPARKCTL_LAB_DIR={paths.LAB_DIR}" in _read(f"/proc/{pid}/environ").split("\0"):
                out[pid] = args[-1]
    return out


def _detach(argv: list[str], log: Path, env: dict | None = None) -> None:
    """Start argv in a session of its own (setsid -f: it is nobody's child here, so it never
    lingers as our zombie), its output appended to `log`."""
    import subprocess  # here: every simulated tool call imports this module (hw/state.py), ~20 ms each

    with open(log, "ab") as out:
        subprocess.run(["setsid", "-f", *argv], stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env, check=True, cwd="/")


def _lab_env() -> dict[str, str]:
    """The environment of the lab's own long-lived processes (host inits, the model hub): this lab's
    folders and instance, the lab's package on the path, nothing of the caller's."""
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONPATH": str(tools.package_root()),
        "SPARKCTL_LAB_DIR": str(paths.LAB_DIR),
        "SPARKCTL_LAB_INSTANCE": str(paths.INSTANCE),
        "SPARKCTL_LAB_CACHE": str(paths.CACHE_DIR),
        "LANG": "C.UTF-8",
    }


def start_host(name: str) -> None:
    env = _lab_env()
    _detach(
        [
            "nsenter",
            f"--net=/run/netns/{topo.ALL_HOSTS[name].netns}",
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            "--mount",
            "--uts",
            "--propagation",
            "slave",
            "--kill-child",
            "--",
            sys.executable,
            "-S",
            "-m",
            "sparkctl_lab.hostinit",
            name,
        ],
        paths.host_dir(name) / "log" / "init.log",
        env,
    )


def start_registry() -> None:
    _detach(["docker-registry", "serve", str(paths.REGISTRY_DIR / "config.yml")], paths.REGISTRY_DIR / "registry.log")


def start_hub(key: str) -> None:
    """The model hub (hub.py) in the root namespace, on the runner's management address like the registry."""
    env = _lab_env()
    log = paths.LAB_DIR / "hub" / "hub.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    _detach([sys.executable, "-S", "-m", "sparkctl_lab.hub", key], log, env)


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if alive(p)]
    return left


def kill(pids: list[int], sig: int = signal.SIGKILL) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def stop(pids: list[int], timeout: float) -> None:
    """SIGTERM, then SIGKILL whatever still runs after `timeout` s."""
    kill(pids, signal.SIGTERM)
    kill(wait_gone(pids, timeout))


def descendants(pids: list[int]) -> list[int]:
    """pids and every process below them."""
    seen: list[int] = []
    todo = [p for p in pids if p]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):  # nothing when p is gone
            todo += [int(c) for c in _read(f"{task}/children").split()]
    return seen


def _sum_field(pids: list[int], path: str, field: str) -> int:
    total = 0
    for p in descendants(pids):
        for ln in _read(f"/proc/{p}/{path}").splitlines():
            if ln.startswith(field + ":"):
                total += int(ln.split()[1])
    return total


def rss_kib(pids: list[int]) -> int:
    """Sum of VmRSS over pids and all their descendants (shared pages counted in each)."""
    return _sum_field(pids, "status", "VmRSS")


def pss_kib(pids: list[int]) -> int:
    """Proportional set size over pids and descendants: shared pages split between sharers."""
    return _sum_field(pids, "smaps_rollup", "Pss")
