"""`lab up` and `lab down`: build the lab (or complete it) and take it all away again.

up: preflight (root, cgroup v1, packages, address range) -> keys and host files -> networks ->
simulated sysfs -> registry (a cached storage snapshot on a fresh lab) -> model hub (hub.py; it
generates the checkpoints on a cold cache) -> host inits -> wait for every sshd, dockerd, the
registry and the hub -> runtime image (built and pushed only when the sim sources changed). Each
step creates only what is missing and reports it.
`up(clusters=N)` sets the lab's number of Spark pairs (clusters.py; plain `up` keeps it): with 2 it
builds the second pair (head2, worker2) beside the first and writes its inventory and the fleet
file; with 1 it removes the second pair first (remove_second_pair), so the first is as it always was.
down: host inits (containers, dockerd, sshd go with them) -> stray processes -> registry, hub ->
namespaces, runner veth, route -> /run/netns, cgroups, mounts -> LAB_DIR; every pair, whatever
the count.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import threading
import time
from functools import partial
from pathlib import Path
from typing import Callable

from sparkctl.errors import SparkctlError
from sparkctl_lab import checkpoint, hostfiles, hostinit, hub, image, netns, paths, preflight, procs, registry, shaping
from sparkctl_lab import clusters as lab_clusters
from sparkctl_lab import topology as topo
from sparkctl_lab.health import docker_ping, ssh_banner
from sparkctl_lab.hw import state
from sparkctl_lab.paths import CACHE_DIR, docker_socket
from sparkctl_lab.topology import ALL_HOSTS, IMAGE, REGISTRY, SECOND_PAIR

Progress = Callable[[str], None]
READY_TIMEOUT = 60.0


def _quiet(msg: str) -> None:
    pass


@contextlib.contextmanager
def _locked():
    """One lab operation at a time on this machine (two `lab up`s racing would both create)."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _preflight() -> None:
    preflight.require_root()
    preflight.require_cgroup_v1()
    preflight.require_tools()
    netns.check_range_free()


def sync_all(host_set: dict[str, topo.LabHost] | None = None) -> None:
    """Rewrite every host's simulated sysfs now, then have each init resync too (SIGUSR1), so a
    pass it was making from the old faults cannot leave stale files behind."""
    for name, h in (lab_clusters.hosts() if host_set is None else host_set).items():
        state.sync_sys(name, {dev: v["operstate"] for dev, v in netns.links(h.netns).items()})
        init = procs.host_init(name)
        if init:
            procs.kill([init], signal.SIGUSR1)


def up(progress: Progress = _quiet, clusters: int | None = None) -> dict:
    """Bring the lab up (or complete it) with `clusters` Spark pairs (None: as many as it has; 1
    on a fresh lab); idempotent."""
    if clusters is not None:
        lab_clusters.check(clusters)  # bad input: refused before anything is touched
    _preflight()
    with _locked():
        return _up(progress, clusters)


def _up(progress: Progress, clusters: int | None) -> dict:
    t0 = time.monotonic()
    changes: list[str] = []
    was = lab_clusters.count() if clusters is None else lab_clusters.saved()
    n = was if clusters is None else clusters
    host_set = topo.hosts(n)
    if n == 1:  # the second pair goes (also whatever a removal cut short left of it)
        changes += remove_second_pair(progress)
    if n != was:
        changes.append(f"clusters {'(unreadable)' if was is None else was} -> {n}")
    lab_clusters.save(n)
    key = image.image_key()
    key_file = paths.REGISTRY_DIR / "image-key"  # the key of the image the registry holds

    # the rootfs tarball takes a second or two: build it while the hosts start, when needed
    builder = None
    if not image.snapshot_dir(key).is_dir() and not key_file.exists():
        builder = threading.Thread(target=image.tarball, args=(key,), daemon=True)
        builder.start()

    hostfiles.prepare(changes, n)
    net = netns.ensure(host_set)
    net += shaping.ensure(host_set)  # every rail at the lab's line rate
    if net:
        progress("network: " + "; ".join(net))
    changes += net
    sync_all(host_set)

    # registry (restoring a cached storage snapshot on a fresh lab)
    paths.REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
    if hostfiles.write_if_changed(paths.REGISTRY_DIR / "config.yml", registry.config_yaml()):
        changes.append("registry config")
    storage = paths.REGISTRY_DIR / "storage"
    if not storage.exists() and image.restore_snapshot(key, storage):
        key_file.write_text(key)
        changes.append("registry storage restored from cache")
    storage.mkdir(exist_ok=True)
    if procs.registry_pid() is None:
        procs.start_registry()
        changes.append(f"registry on {REGISTRY}")
    changes += _start_hub()

    started = []
    for name in host_set:
        init = procs.host_init(name)
        orphans = [p for p in procs.all_inits(name) if p != init]
        if orphans:  # its namespace was deleted under it: it still holds the host's dockerd data
            procs.stop(orphans, 15)
            changes.append(f"stopped {len(orphans)} orphaned {name} host(s)")
        if init is not None and not (docker_ping(name) and ssh_banner(name)):
            # a host whose dockerd or sshd died: restart the whole host, as a reboot would
            procs.stop([init], 15)
            changes.append(f"host {name} restarted (sshd or dockerd was not answering)")
            init = None
        elif init is not None and not set(hostinit.PRIVATE_DIRS) <= procs.mount_points(init):
            # started by an older lab that shared one of these folders with the machine (/models)
            procs.stop([init], 15)
            changes.append(f"host {name} restarted (its {', '.join(hostinit.PRIVATE_DIRS)} were not all its own)")
            init = None
        if init is None:
            procs.start_host(name)
            started.append(name)
    if started:
        changes.append("hosts started: " + ", ".join(started))
        progress(f"starting hosts {', '.join(started)} (init, sshd, dockerd)")
    _wait_ready(host_set)

    if (key_file.read_text().strip() if key_file.exists() else "") != key or registry.manifest() is None:
        progress(f"building {IMAGE} (sim sources changed or image absent)")
        if builder:
            builder.join()
        image.build_and_push(key, docker_socket("head"), progress)
        key_file.write_text(key)
        image.save_snapshot(key, storage)
        changes.append(f"image {IMAGE} built and pushed")
    return {"changed": bool(changes), "changes": changes, "seconds": round(time.monotonic() - t0, 2)}


def _start_hub() -> list[str]:
    """The model hub, started (or restarted when its code or checkpoints changed) in the background:
    on a cold cache it generates the checkpoints while the hosts start, then binds (_wait_ready)."""
    changes = hub.prepare()
    key = hub.code_key()
    running = procs.hub_pids()
    stale = [pid for pid, k in running.items() if k != key]
    if stale:
        procs.stop(stale, 5)
        changes.append("model hub restarted (its code or checkpoints changed)")
    if len(running) == len(stale):
        if not paths.other_labs():  # older checkpoints go, unless another lab's hub may serve them
            changes += [f"removed old checkpoints {k}" for k in checkpoint.prune()]
        procs.start_hub(key)
        changes.append(f"model hub on {topo.HUB}")
    return changes


def reboot(name: str, progress: Progress = _quiet) -> dict:
    """A reboot of lab host `name`: its PID 1 stops (containers killed, dockerd stopped, every mount
    of its own namespace gone: its tmpfs too) and starts again (sshd, dockerd, then its enabled
    units, as systemd would); its disks (LAB_DIR/hosts/NAME: /etc, /root, /var/lib/sparkctl, ...)
    stay as they were. Returns when sshd and dockerd answer again."""
    _preflight()
    host = {name: topo.ALL_HOSTS[name]}
    with _locked():
        t0 = time.monotonic()
        init = procs.host_init(name)
        if init is None:
            raise SparkctlError(f"lab host {name} is not running", fix="run `sparkctl lab up`")
        progress(f"rebooting {name}")
        procs.stop([init], 15)
        procs.start_host(name)
        _wait_ready(host)
        return {"host": name, "seconds": round(time.monotonic() - t0, 2)}


def _wait_ready(host_set: dict[str, topo.LabHost]) -> None:
    # what must answer -> (its probe, the logs that say why it does not)
    waits = {"registry": (registry.healthy, [paths.REGISTRY_DIR / "registry.log"]), "hub": (hub.healthy, [hub.LOG_FILE])}
    for n in host_set:
        log = paths.host_dir(n) / "log"
        waits[f"{n}/dockerd"] = (partial(docker_ping, n), [log / "dockerd.log", log / "init.log"])
        waits[f"{n}/sshd"] = (partial(ssh_banner, n), [log / "sshd.log", log / "init.log"])
    deadline = time.monotonic() + READY_TIMEOUT
    pending = set(waits)
    while pending and time.monotonic() < deadline:
        pending -= {item for item in pending if waits[item][0]()}
        if pending:
            time.sleep(0.05)
    if pending:
        logs = [
            f"--- {f}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-8:])
            for item in sorted(pending)
            for f in waits[item][1]
            if f.exists()
        ]
        raise SparkctlError(
            f"lab did not come up within {READY_TIMEOUT:.0f}s: {', '.join(sorted(pending))} not answering\n" + "\n".join(logs),
            fix="see the logs above; `sparkctl lab down` then `sparkctl lab up` starts from nothing",
        )


def down(progress: Progress = _quiet) -> dict:
    """Stop the lab and remove everything it made except the caches."""
    preflight.require_root()
    with _locked():
        return _down(progress)


def _down(progress: Progress) -> dict:
    t0 = time.monotonic()
    changes: list[str] = []

    inits = {n: procs.all_inits(n) for n in ALL_HOSTS}
    live = [p for pids in inits.values() for p in pids]
    if live:
        progress("stopping hosts (containers, dockerd, sshd)")
        procs.stop(live, 20)
        changes.append("hosts stopped: " + ", ".join(n for n, pids in inits.items() if pids))
    for ns in topo.ALL_NETNS:  # anything else still living in a lab namespace
        stray = procs.pids_in_netns(ns)
        if stray:
            procs.kill(stray)
            procs.wait_gone(stray, 5)
            changes.append(f"killed {len(stray)} stray processes in {ns}")
    from sparkctl_lab import prometheus  # the lab's Prometheus (its dir goes with LAB_DIR)

    changes += prometheus.down()
    reg = procs.registry_pid()
    if reg:
        procs.stop([reg], 5)
        changes.append("registry stopped")
    hubs = list(procs.hub_pids())
    if hubs:
        procs.stop(hubs, 5)
        changes.append("model hub stopped")

    changes += netns.teardown()
    # iproute2 made /run/netns a mount point for the namespaces; empty now, it goes too
    # (`ip netns add` makes it again whenever anyone needs it)
    if netns.NETNS_DIR in _mountpoints() and not os.listdir(netns.NETNS_DIR):
        subprocess.run(["umount", netns.NETNS_DIR], check=False)
        with contextlib.suppress(OSError):
            os.rmdir(netns.NETNS_DIR)
        changes.append(f"unmounted {netns.NETNS_DIR}")
    changes += _remove_cgroups(list(ALL_HOSTS))
    # the mount points the hosts needed for their own /var/lib/sparkctl and /models (empty here; one
    # that holds anything stays); not while another lab is up: removing a mount point detaches it in
    # every mount namespace, that lab's hosts' too
    if not paths.other_labs():
        for d in ("/var/lib/sparkctl", "/models"):
            with contextlib.suppress(OSError):
                os.rmdir(d)
    for m in _lab_mounts():
        subprocess.run(["umount", "-l", m], check=False)
        changes.append(f"unmounted {m}")
    if paths.LAB_DIR.exists():
        shutil.rmtree(paths.LAB_DIR)
        changes.append(f"removed {paths.LAB_DIR}")
    return {"changed": bool(changes), "changes": changes, "seconds": round(time.monotonic() - t0, 2)}


def _mountpoints() -> list[str]:
    """Mount points of this mount namespace (os.path.ismount misses same-filesystem binds)."""
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f]


def _lab_mounts(under: Path = paths.LAB_DIR) -> list[str]:
    lab = str(under)
    return sorted((m for m in _mountpoints() if m == lab or m.startswith(lab + "/")), reverse=True)


def _cgroup_dirs(names: list[str]) -> list[Path]:
    """The cgroups the hosts' dockerd made (cgroup-parent sparkctl-lab-<host>), looked for at most 3
    levels below each hierarchy's root (walking a busy machine's whole cgroup tree is slow)."""
    want = {f"sparkctl-{paths.PREFIX}-{n}" for n in names}  # one walk for all of them
    return [
        d
        for depth in range(4)
        for d in Path("/sys/fs/cgroup").glob("*/" + "*/" * depth + f"sparkctl-{paths.PREFIX}-*")
        if d.name in want
    ]


def _remove_cgroups(names: list[str]) -> list[str]:
    removed = 0
    for d in _cgroup_dirs(names):
        for sub, _, _ in os.walk(d, topdown=False):  # children before their parent
            with contextlib.suppress(OSError):
                os.rmdir(sub)
                removed += 1
    return [f"removed {removed} lab cgroups"] if removed else []


def _second_pair_present() -> bool:
    """Is anything of the second pair on this machine? Its host folders go last in a removal, so
    while one exists something else may be left too (a removal cut short)."""
    have = netns.existing_netns()
    return any(h.netns in have or paths.host_dir(n).exists() for n, h in SECOND_PAIR.items())


def remove_second_pair(progress: Progress = _quiet) -> list[str]:
    """Take the second pair away completely: its hosts (containers, dockerd, sshd), whatever else
    runs in its namespaces, the namespaces (and so its cables and switch ports), its dockerd's
    cgroups, mounts under its folders, its folders (dockerd data, node dirs, logs), fault files,
    inventory and the fleet file; and the runner's known_hosts and SSH config lose its hosts.
    The first pair, the registry and the runner's link are not touched. Nothing there: []."""
    if not _second_pair_present():
        stale = [f for f in hostfiles.FLEET_FILES if f.exists()]
        for f in stale:
            f.unlink()
        return [f"removed {f.name}" for f in stale]
    names = list(SECOND_PAIR)
    progress(f"removing the second pair ({', '.join(names)})")
    removed: list[str] = []
    inits = [p for n in names for p in procs.all_inits(n)]
    if inits:
        procs.stop(inits, 20)
        removed.append("hosts stopped")
    stray = [p for h in SECOND_PAIR.values() for p in procs.pids_in_netns(h.netns)]
    if stray:
        procs.kill(stray)
        procs.wait_gone(stray, 5)
        removed.append(f"{len(stray)} stray processes killed")
    removed += netns.remove_netns([h.netns for h in SECOND_PAIR.values()])
    removed += _remove_cgroups(names)
    for n in names:
        for m in _lab_mounts(paths.host_dir(n)):
            subprocess.run(["umount", "-l", m], check=False)
            removed.append(f"unmounted {m}")
    for f in [*hostfiles.FLEET_FILES, *(paths.faults_file(n) for n in names)]:
        if f.exists():
            f.unlink()
            removed.append(f"{f.name}")
    for n in names:  # last: while a host folder exists, `up` knows something may be left
        if paths.host_dir(n).exists():
            shutil.rmtree(paths.host_dir(n))
            removed.append(f"host folder {paths.host_dir(n)} (dockerd data, node dirs, logs)")
    return [f"second pair removed ({', '.join(names)}): " + "; ".join(removed)]
