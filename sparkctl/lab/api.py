"""The lab's Python API (what `sparkctl lab ...`, the tests and other engineers use). Needs root.

    from sparkctl.lab import api

    api.up(progress=print) -> dict        bring the lab up; idempotent (a second run changes nothing
                                          and says so: {"changed": False, "changes": [], ...})
    api.down(progress=print) -> dict      stop everything; leaves no namespace, process, mount, veth,
                                          route or LAB_DIR behind (caches under CACHE_DIR stay)
    api.status() -> dict                  hosts (netns, init pid, sshd/dockerd health, links, faults),
                                          runner link and route, registry, image; "up": all healthy
    api.fault(host, kind, target=None, value=None, clear=False) -> dict
                                          switch a fault on (or off with clear=True); returns the
                                          host's fault view. Kinds (state.FAULT_KINDS):
        link-down   TARGET=netdev          real: `ip -n lab-HOST link set DEV down`
        mtu         TARGET=netdev [VALUE=1500]   real: `ip -n lab-HOST link set DEV mtu VALUE`
        speed       TARGET=netdev [VALUE=13000]  Mb/s in ethtool and /sys/class/net/DEV/speed
        rdma-down   TARGET=rdma dev or netdev    /sys/class/infiniband/DEV/ports/1/state "1: DOWN"
        gpu-missing [TARGET=gpu index]     nvidia-smi loses that GPU (all: "No devices were found")
        driver      [VALUE=580.82.09]      nvidia-smi reports another driver version
        gpu-process [TARGET=gpu index] [VALUE=MiB, 16384]  a real foreign process in the host that
                                          nvidia-smi lists as holding GPU memory
        (aliases: degraded-speed, wrong-mtu, wrong-driver, rdma-port-down, foreign-gpu-process, no-gpu)
    api.clear_faults() -> list[str]       every fault off: links up at nominal MTU, fault files empty
    api.host_exec(host, argv, input=None, timeout=60, check=False) -> CompletedProcess
                                          run argv inside a lab host's namespaces (net, mount, UTS, PID)
                                          with the host's PATH (so the simulated tools answer)
    api.faults(host) -> dict              a host's fault file
    LAB_DIR, INVENTORY_PATH, SSH_KEY, KNOWN_HOSTS, SSH_CONFIG, CACHE_DIR, HOSTS, IMAGE, REGISTRY

Link down and wrong MTU are real link states, so a hand-made `ip -n lab-worker link set
enp1s0f0np0 down` is seen exactly like the API's (ibdev2netdev, RDMA port state, ethtool).
The runner reaches hosts over the management net only (10.231.0.0/24 via `lab-mgmt`); docker
CLI/SDK can also use each host's runner socket, `docker_socket(host)`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

from sparkctl.errors import InputError, SparkctlError
from sparkctl.lab import hostfiles, image, netns, preflight, procs, registry
from sparkctl.lab import topology as topo
from sparkctl.lab.hw import state
from sparkctl.lab.paths import (  # noqa: F401  (re-exported)
    CACHE_DIR,
    INVENTORY_PATH,
    KNOWN_HOSTS,
    LAB_DIR,
    SSH_CONFIG,
    SSH_KEY,
    docker_socket,
)
from sparkctl.lab import paths
from sparkctl.lab.topology import HOSTS, IMAGE, REGISTRY  # noqa: F401

Progress = Callable[[str], None] | None
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
READY_TIMEOUT = 60.0
# other names people use for the same faults
ALIASES = {"degraded-speed": "speed", "wrong-mtu": "mtu", "wrong-driver": "driver", "rdma-port-down": "rdma-down",
           "foreign-gpu-process": "gpu-process", "no-gpu": "gpu-missing"}
DEFAULTS = {"mtu": 1500, "speed": 13000, "driver": "580.82.09", "gpu-process": 16384}


def _say(progress: Progress, msg: str) -> None:
    if progress:
        progress(msg)


# --- health probes (stdlib only: status must stay cheap) ------------------------------------------


def docker_ping(name: str, timeout: float = 1.0) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(docker_socket(name)))
            s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            head = s.recv(64)
            return head.split(b"\r\n", 1)[0].split(b" ")[1:2] == [b"200"]
    except OSError:
        return False


def docker_get(name: str, path: str, timeout: float = 2.0) -> dict | None:
    import http.client

    class Conn(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(str(docker_socket(name)))

    c = Conn("docker", timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        return json.loads(body) if r.status == 200 else None
    except (OSError, ValueError):
        return None
    finally:
        c.close()


def ssh_banner(name: str, timeout: float = 1.0) -> str | None:
    try:
        with socket.create_connection((HOSTS[name].mgmt_ip, 22), timeout=timeout) as s:
            s.settimeout(timeout)
            data = s.recv(256).decode(errors="replace").strip()
            return data if data.startswith("SSH-2.0") else None
    except OSError:
        return None


@contextlib.contextmanager
def _locked():
    """One lab operation at a time on this machine (two `lab up`s racing would both create)."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


# --- up -----------------------------------------------------------------------------------------


def _preflight() -> None:
    preflight.require_root()
    preflight.require_cgroup_v1()
    preflight.require_tools()
    netns.check_range_free()


def ip_operstates(name: str) -> dict[str, str]:
    return {dev: v["operstate"] for dev, v in netns.links(HOSTS[name].netns).items()}


def _sync_all() -> None:
    """Rewrite every host's simulated sysfs now, then have each init resync too (SIGUSR1), so a
    pass it was making from the old faults cannot leave stale files behind."""
    for name in HOSTS:
        state.sync_sys(name, ip_operstates(name))
        init = procs.host_init(name)
        if init:
            procs.kill([init], signal.SIGUSR1)


def up(progress: Progress = None) -> dict:
    """Bring the lab up (or complete it); idempotent."""
    _preflight()
    with _locked():
        return _up(progress)


def _up(progress: Progress) -> dict:
    t0 = time.monotonic()
    changes: list[str] = []
    key = image.image_key()

    # the rootfs tarball takes a second or two: build it while the hosts start, when needed
    builder = None
    if not image.snapshot_dir(key).is_dir() and not (paths.REGISTRY_DIR / "image-key").exists():
        builder = threading.Thread(target=image.tarball, args=(key,), daemon=True)
        builder.start()

    hostfiles.prepare(changes)
    changes += netns.ensure()
    _sync_all()

    # registry (restoring a cached storage snapshot on a fresh lab)
    paths.REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
    if hostfiles.write_if_changed(paths.REGISTRY_DIR / "config.yml", registry.config_yaml()):
        changes.append("registry config")
    storage = paths.REGISTRY_DIR / "storage"
    if not storage.exists() and image.restore_snapshot(key, storage):
        (paths.REGISTRY_DIR / "image-key").write_text(key)
        changes.append("registry storage restored from cache")
    storage.mkdir(exist_ok=True)
    if procs.registry_pid() is None:
        procs.start_registry()
        changes.append(f"registry on {REGISTRY}")

    started = []
    for name in HOSTS:
        init = procs.host_init(name)
        orphans = [p for p in procs.all_inits(name) if p != init]
        if orphans:  # its namespace was deleted under it: it still holds the host's dockerd data
            procs.kill(orphans, signal.SIGTERM)
            procs.kill(procs.wait_gone(orphans, 15))
            changes.append(f"stopped {len(orphans)} orphaned {name} host(s)")
        if init is not None and not (docker_ping(name) and ssh_banner(name)):
            # a host whose dockerd or sshd died: restart the whole host, as a reboot would
            procs.kill([init], signal.SIGTERM)
            procs.kill(procs.wait_gone([init], 15))
            changes.append(f"host {name} restarted (sshd or dockerd was not answering)")
            init = None
        if init is None:
            procs.start_host(name)
            started.append(name)
    if started:
        changes.append("hosts started: " + ", ".join(started))
        _say(progress, f"starting hosts {', '.join(started)} (init, sshd, dockerd)")
    _wait_ready(started)

    have = (paths.REGISTRY_DIR / "image-key").read_text().strip() if (paths.REGISTRY_DIR / "image-key").exists() else ""
    if have != key or registry.manifest() is None:
        _say(progress, f"building {IMAGE} (sim sources changed or image absent)")
        if builder:
            builder.join()
        image.build_and_push(key, docker_socket("head"), lambda m: _say(progress, m))
        (paths.REGISTRY_DIR / "image-key").write_text(key)
        image.save_snapshot(key, storage)
        changes.append(f"image {IMAGE} built and pushed")
    took = time.monotonic() - t0
    return {"changed": bool(changes), "changes": changes, "seconds": round(took, 2)}


def _wait_ready(started: list[str]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    pending = {"registry"} | {f"{n}/dockerd" for n in HOSTS} | {f"{n}/sshd" for n in HOSTS}
    while pending and time.monotonic() < deadline:
        for item in sorted(pending):
            if item == "registry":
                ok = registry.healthy()
            else:
                name, daemon = item.split("/")
                ok = docker_ping(name) if daemon == "dockerd" else ssh_banner(name) is not None
            if ok:
                pending.discard(item)
        if pending:
            time.sleep(0.05)
    if pending:
        logs = []
        for item in sorted(pending):
            log = (paths.REGISTRY_DIR / "registry.log") if item == "registry" else \
                paths.host_dir(item.split("/")[0]) / "log" / f"{item.split('/')[1]}.log"
            init_log = paths.host_dir(item.split("/")[0]) / "log" / "init.log" if item != "registry" else None
            for f in (log, init_log):
                if f and f.exists():
                    logs.append(f"--- {f}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-8:]))
        raise SparkctlError(
            f"lab did not come up within {READY_TIMEOUT:.0f}s: {', '.join(sorted(pending))} not answering\n"
            + "\n".join(logs),
            fix="see the logs above; `sparkctl lab down` then `sparkctl lab up` starts from nothing",
        )


# --- down ---------------------------------------------------------------------------------------


def down(progress: Progress = None) -> dict:
    """Stop the lab and remove everything it made except the caches."""
    preflight.require_root()
    with _locked():
        return _down(progress)


def _down(progress: Progress) -> dict:
    t0 = time.monotonic()
    changes: list[str] = []

    inits = {n: procs.all_inits(n) for n in HOSTS}
    live = [p for pids in inits.values() for p in pids]
    if live:
        _say(progress, "stopping hosts (containers, dockerd, sshd)")
        procs.kill(live, signal.SIGTERM)
        left = procs.wait_gone(live, 20)
        procs.kill(left)
        changes.append("hosts stopped: " + ", ".join(n for n, pids in inits.items() if pids))
    for ns in topo.NETNS:  # anything else still living in a lab namespace
        stray = procs.pids_in_netns(ns)
        if stray:
            procs.kill(stray)
            procs.wait_gone(stray, 5)
            changes.append(f"killed {len(stray)} stray processes in {ns}")
    reg = procs.registry_pid()
    if reg:
        procs.kill([reg], signal.SIGTERM)
        procs.kill(procs.wait_gone([reg], 5))
        changes.append("registry stopped")

    changes += netns.teardown()
    # iproute2 made /run/netns a mount point for the namespaces; empty now, it goes too
    # (`ip netns add` makes it again whenever anyone needs it)
    if netns.NETNS_DIR in _mountpoints() and not os.listdir(netns.NETNS_DIR):
        subprocess.run(["umount", netns.NETNS_DIR], check=False)
        try:
            os.rmdir(netns.NETNS_DIR)
        except OSError:
            pass
        changes.append(f"unmounted {netns.NETNS_DIR}")
    changes += _remove_cgroups()
    try:  # the mount point the hosts needed for their own /var/lib/sparkctl (empty on this machine)
        os.rmdir("/var/lib/sparkctl")
    except OSError:
        pass
    for m in _lab_mounts():
        subprocess.run(["umount", "-l", m], check=False)
        changes.append(f"unmounted {m}")
    if paths.LAB_DIR.exists():
        hostfiles.remove_lab_dir()
        changes.append(f"removed {paths.LAB_DIR}")
    return {"changed": bool(changes), "changes": changes, "seconds": round(time.monotonic() - t0, 2)}


def _mountpoints() -> list[str]:
    """Mount points of this mount namespace (os.path.ismount misses same-filesystem binds)."""
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f]


def _lab_mounts() -> list[str]:
    lab = str(paths.LAB_DIR)
    return sorted((m for m in _mountpoints() if m == lab or m.startswith(lab + "/")), reverse=True)


def _cgroup_dirs() -> list[Path]:
    """The cgroups the hosts' dockerd made (cgroup-parent sparkctl-lab-<host>), deepest first."""
    root = Path("/sys/fs/cgroup")
    found: list[Path] = []
    names = {f"sparkctl-lab-{n}" for n in HOSTS}
    for hier in root.iterdir() if root.is_dir() else []:
        if not hier.is_dir():
            continue
        for dirpath, dirnames, _ in os.walk(hier):
            depth = len(Path(dirpath).relative_to(hier).parts)
            for d in dirnames:
                if d in names:
                    found.append(Path(dirpath) / d)
            if depth >= 3:
                dirnames[:] = []
            else:
                dirnames[:] = [d for d in dirnames if d not in names]
    return found


def _remove_cgroups() -> list[str]:
    removed = 0
    for d in _cgroup_dirs():
        for sub, dirs, _ in sorted(os.walk(d, topdown=False), key=lambda t: -len(t[0])):
            try:
                os.rmdir(sub)
                removed += 1
            except OSError:
                pass
    return [f"removed {removed} lab cgroups"] if removed else []


# --- status -------------------------------------------------------------------------------------


def faults(host: str) -> dict:
    return state.load_faults(host)


def _link_view(name: str) -> list[dict]:
    h = HOSTS[name]
    have = netns.links(h.netns)
    f = state.load_faults(name)
    rows = []
    expected = [(h.mgmt_device, h.mgmt_address, topo.MGMT_MTU, "management", h.mgmt_speed_mbps, [])]
    expected += [(n.device, n.address, n.mtu, n.peer, n.speed_mbps, list(n.rdma)) for n in h.fabric]
    for dev, addr, mtu, peer, speed, rdma in expected:
        cur = have.get(dev)
        row = {"device": dev, "peer": peer, "address": addr, "expected_mtu": mtu, "rdma": rdma,
               "present": cur is not None}
        if cur:
            row.update({
                "addresses": cur["addresses"], "mtu": cur["mtu"], "state": cur["operstate"], "admin_up": cur["up"],
                "speed_mbps": state.speed(h, dev, f, cur["operstate"]),
                "rdma_state": {r: state.rdma_state(r, f, cur["operstate"])[1] for r in rdma},
            })
        rows.append(row)
    return rows


def _fault_lines(name: str, links: list[dict]) -> list[str]:
    f = state.load_faults(name)
    out = []
    for ln in links:
        if not ln["present"]:
            out.append(f"{name}: {ln['device']} missing")
            continue
        if not ln["admin_up"]:
            out.append(f"{name}: link-down {ln['device']}")
        if ln["mtu"] != ln["expected_mtu"]:
            out.append(f"{name}: mtu {ln['device']}={ln['mtu']} (expected {ln['expected_mtu']})")
    for dev, v in f.get("speed", {}).items():
        out.append(f"{name}: speed {dev}={v}Mb/s")
    for r in f.get("rdma-down", []):
        out.append(f"{name}: rdma-down {r}")
    if f.get("gpu-missing"):
        out.append(f"{name}: gpu-missing {','.join(map(str, f['gpu-missing']))}")
    if f.get("driver"):
        out.append(f"{name}: driver {f['driver']}")
    for p in f.get("gpu-process", []):
        out.append(f"{name}: gpu-process pid {p['pid']} {p['used_mib']}MiB on GPU {p.get('gpu', 0)}")
    return out


def status() -> dict:
    preflight.require_root("`sparkctl lab status`")
    existing = netns.existing_netns()
    hosts = {}
    all_faults: list[str] = []
    healthy = True
    for name, h in HOSTS.items():
        init = procs.host_init(name)
        kids = procs.host_children(init) if init else {}
        dv = docker_get(name, "/version") if init else None
        banner = ssh_banner(name) if init else None
        links = _link_view(name) if h.netns in existing else []
        fl = _fault_lines(name, links) if links else []
        all_faults += fl
        ok = bool(init and dv and banner)
        healthy &= ok
        hosts[name] = {
            "role": h.role,
            "netns": h.netns,
            "netns_exists": h.netns in existing,
            "init_pid": init,
            "management": {"device": h.mgmt_device, "address": h.mgmt_address},
            "sshd": {"pid": kids.get("sshd"), "healthy": banner is not None, "banner": banner},
            "dockerd": {"pid": kids.get("dockerd"), "healthy": dv is not None,
                        "version": (dv or {}).get("Version"), "api_version": (dv or {}).get("ApiVersion"),
                        "socket": str(docker_socket(name))},
            "gpus": [g.name for g in h.gpus],
            "links": links,
            "faults": state.load_faults(name),
            "rss_mib": round(procs.rss_kib([init]) / 1024, 1) if init else 0,
            "healthy": ok,
        }
    root = netns.links(None).get(topo.RUNNER_DEVICE)
    reg_pid = procs.registry_pid()
    reg_ok = registry.healthy() if reg_pid else False
    cfg = registry.image_config() if reg_ok else None
    key_file = paths.REGISTRY_DIR / "image-key"
    present_key = ((cfg or {}).get("config") or {}).get("Labels", {}).get(image.KEY_LABEL) if cfg else None
    healthy &= reg_ok and cfg is not None
    return {
        "up": bool(healthy),
        "lab_dir": str(LAB_DIR),
        "inventory": str(INVENTORY_PATH) if INVENTORY_PATH.exists() else None,
        "ssh_config": str(SSH_CONFIG) if SSH_CONFIG.exists() else None,
        "namespaces": sorted(n for n in topo.NETNS if n in existing),
        "runner": {
            "device": topo.RUNNER_DEVICE,
            "address": f"{topo.RUNNER_ADDRESS}/24",
            "present": root is not None,
            "state": (root or {}).get("operstate"),
            "route_unreachable": netns._has_unreachable(),
        },
        "hosts": hosts,
        "registry": {"address": REGISTRY, "pid": reg_pid, "healthy": reg_ok,
                     "rss_mib": round(procs.rss_kib([reg_pid]) / 1024, 1) if reg_pid else 0},
        "image": {
            "name": IMAGE,
            "present": cfg is not None,
            "id": (cfg or {}).get("_id"),
            "digest": (cfg or {}).get("_manifest_digest"),
            "key": present_key or (key_file.read_text().strip() if key_file.exists() else None),
            "current": present_key == image.image_key() if cfg else False,
        },
        "faults": all_faults,
    }


# --- faults -------------------------------------------------------------------------------------


def _host(name: str) -> topo.LabHost:
    if name not in HOSTS:
        raise InputError(f"unknown lab host {name!r}", fix=f"use one of: {', '.join(HOSTS)}")
    return HOSTS[name]


def _init_pid(name: str) -> int:
    pid = procs.host_init(name)
    if pid is None:
        raise SparkctlError(f"lab host {name} is not running", fix="run `sparkctl lab up`")
    return pid


def host_exec(host: str, argv: list[str], input: str | None = None, timeout: float = 60,
              check: bool = False) -> subprocess.CompletedProcess:
    """Run argv inside a lab host (its net, mount, UTS and PID namespaces), as root in /root."""
    preflight.require_root("host_exec")
    _host(host)
    pid = _init_pid(host)
    env = {"PATH": HOST_PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root", "LOGNAME": "root"}
    r = subprocess.run(
        ["nsenter", "-t", str(pid), "-n", "-m", "-u", "-p", "--wd=/root", "--", *argv],
        input=input, capture_output=True, text=True, timeout=timeout, env=env,
    )
    if check and r.returncode != 0:
        raise SparkctlError(f"{host}: `{' '.join(argv)}` exited {r.returncode}: {r.stderr.strip()}")
    return r


def _netdev(h: topo.LabHost, target: str | None, kind: str) -> str:
    devices = [h.mgmt_device] + [n.device for n in h.fabric]
    if target is None:
        raise InputError(f"fault {kind} needs a TARGET device on {h.name}", fix=f"one of: {', '.join(devices)}")
    if target in devices:
        return target
    try:
        return topo.find_rdma(h, target).device
    except KeyError:
        raise InputError(f"{h.name} has no device {target!r}", fix=f"one of: {', '.join(devices)}") from None


def _int(value, default: int, what: str) -> int:
    try:
        return int(value if value is not None else default)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a whole number, not {value!r}", fix=f"e.g. --value {default}") from None


def fault(host: str, kind: str, target: str | None = None, value: str | int | None = None,
          clear: bool = False) -> dict:
    """Switch one fault on (or off with clear=True). See the module docstring for the kinds."""
    preflight.require_root("`sparkctl lab fault`")
    h = _host(host)
    kind = ALIASES.get(kind, kind)
    if kind not in state.FAULT_KINDS:
        raise InputError(f"unknown fault kind {kind!r}", fix=f"use one of: {', '.join(state.FAULT_KINDS)}")
    _init_pid(host)
    f = state.load_faults(host)

    if kind in ("link-down", "mtu"):
        dev = _netdev(h, target, kind)
        nominal = topo.MGMT_MTU if dev == h.mgmt_device else h.nic(dev).mtu
        if kind == "link-down":
            netns.ip("-n", h.netns, "link", "set", dev, "up" if clear else "down")
        else:
            mtu = nominal if clear else _int(value, DEFAULTS["mtu"], "the MTU")
            netns.ip("-n", h.netns, "link", "set", dev, "mtu", str(mtu))
    elif kind == "speed":
        dev = _netdev(h, target, kind)
        sp = f.setdefault("speed", {})
        if clear:
            sp.pop(dev, None)
        else:
            sp[dev] = _int(value, DEFAULTS["speed"], "the speed (Mb/s)")
    elif kind == "rdma-down":
        dev = _netdev(h, target, kind)
        names = [target] if target and target != dev else list(h.nic(dev).rdma) if dev != h.mgmt_device else []
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
        procs_ = f.get("gpu-process", [])
        if clear:
            for p in procs_:
                host_exec(host, ["kill", "-9", str(p["pid"])])
            f["gpu-process"] = []
        else:
            r = host_exec(host, ["sh", "-c", "setsid sleep infinity </dev/null >/dev/null 2>&1 & echo $!"], check=True)
            procs_.append({"pid": int(r.stdout.strip()), "name": "python3", "gpu": gpu,
                           "used_mib": _int(value, DEFAULTS["gpu-process"], "the memory (MiB)")})
            f["gpu-process"] = procs_
    state.save_faults(host, f)
    _sync_all()
    return {"host": host, "faults": state.load_faults(host),
            "links": {ln["device"]: {k: ln.get(k) for k in ("state", "mtu", "admin_up")} for ln in _link_view(host)}}


def clear_faults() -> list[str]:
    """Every fault off: links up at their nominal MTU, fault files emptied, foreign processes killed."""
    preflight.require_root("`sparkctl lab fault --clear-all`")
    changes = netns.restore_links()
    for name in HOSTS:
        f = state.load_faults(name)
        if not f:
            continue
        if f.get("gpu-process") and procs.host_init(name):
            for p in f["gpu-process"]:
                host_exec(name, ["kill", "-9", str(p["pid"])])
        state.save_faults(name, {})
        changes.append(f"{name}: cleared {', '.join(sorted(f))}")
    if paths.LAB_DIR.exists():
        _sync_all()
    return changes
