"""PID 1 of a lab host: `python -m sparkctl_lab.hostinit NAME`, started by `lab up` as

    setsid -f nsenter --net=/run/netns/lab-NAME unshare --pid --fork --mount-proc --mount --uts \
        --propagation slave --kill-child -- python -S -m sparkctl_lab.hostinit NAME

(`nsenter --net` + `unshare --mount`, not `ip netns exec`, which remounts /sys and hides the
cgroup mounts dockerd needs). It makes the mount namespace look like that host's machine,
starts a real `sshd -D -e` and a real `dockerd` with their default config paths, keeps the
simulated sysfs in line with the real link states, reaps zombies, and on SIGTERM kills the
host's containers, stops dockerd and exits (taking the PID namespace with it).

What the host sees (its mount namespace only; the real machine is untouched):
  /run                private tmpfs (own docker.sock, containerd, /run/sshd)
  /etc                overlay: own hostname, hosts, ssh/sshd_config + host key, docker/daemon.json, shadow
  /root               LAB_DIR/hosts/NAME/root (authorized_keys, the lab's client key)
  /var/lib/sparkctl, /srv, /mnt, /models   own folders (node caches, Engram source and target, model
                      weights: each host's own copy, empty on a fresh lab); on the offload host
                      /srv/engram/tables holds the simulated Engram tables (read-only)
  /usr/local/bin      overlay with the simulated nvidia-smi, ibdev2netdev, ethtool, GPU hook
  /sys                sysfs of the host's network namespace; /sys/fs/cgroup carried over;
                      /sys/class on a tmpfs with every class bound back plus `infiniband`
                      (RDMA port state); each NIC's `speed` bound to a simulated file
  /dev                overlay adding /dev/infiniband (inert nodes, so `--device /dev/infiniband`
                      works); own /dev/shm

Stdlib only, and it never imports anything heavy: three of these (five with a second pair) run for
the lab's lifetime.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import socket
import subprocess
import sys
import time

from sparkctl_lab import paths
from sparkctl_lab.hw import state
from sparkctl_lab.topology import ALL_HOSTS, ENGRAM_HOST, ENGRAM_SOURCE

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
MNT_DETACH = 2
RTMGRP_LINK = 1
NETLINK_ROUTE = 0

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PRIVATE = "/run/sparkctl-lab"  # staging mounts inside the host's /run
PRIVATE_DIRS = {"/var/lib/sparkctl": "var-lib-sparkctl", "/srv": "srv", "/mnt": "mnt", "/models": "models"}

_libc = ctypes.CDLL(None, use_errno=True)


def log(msg: str) -> None:
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} hostinit: {msg}\n")
    sys.stderr.flush()


def _b(s: str | None):
    return s.encode() if s is not None else None


def mount(src: str | None, target: str, fstype: str | None = None, flags: int = 0, data: str | None = None) -> None:
    if _libc.mount(_b(src), _b(target), _b(fstype), ctypes.c_ulong(flags), _b(data)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {fstype or ''} {src} -> {target} ({data or ''}): {os.strerror(e)}")


def umount(target: str) -> None:
    if _libc.umount2(_b(target), MNT_DETACH) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"umount {target}: {os.strerror(e)}")


def _paths_under_root() -> list[str]:
    """Interpreter, venv and PYTHONPATH folders under /root (outermost only)."""
    found = set()
    for p in [sys.base_prefix, sys.prefix, os.path.dirname(sys.executable), *os.environ.get("PYTHONPATH", "").split(":")]:
        for q in {os.path.abspath(p), os.path.realpath(p)} if p else ():
            if q.startswith("/root/") and os.path.isdir(q):
                found.add(q)
    return sorted(q for q in found if not any(q != o and q.startswith(o + "/") for o in found))


def setup_mounts(name: str) -> None:
    h = paths.host_dir(name)
    host = ALL_HOSTS[name]

    mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=256m")
    for d in ("/run/sshd", "/run/lock", PRIVATE):
        os.makedirs(d, mode=0o755, exist_ok=True)

    mount("overlay", "/etc", "overlay", 0, f"lowerdir=/etc,upperdir={h}/etc/upper,workdir={h}/etc/work")
    # Own /root; but what the lab runs from (interpreter, venv, the sparkctl checkout) may live
    # under the real /root (pyenv, a clone in ~): keep those visible at the same paths, or the
    # simulated tools lose Python.
    keep = _paths_under_root()
    for i, path in enumerate(keep):
        os.makedirs(f"{PRIVATE}/keep{i}")
        mount(path, f"{PRIVATE}/keep{i}", None, MS_BIND | MS_REC)
    mount(str(h / "root"), "/root", None, MS_BIND)
    for i, path in enumerate(keep):
        os.makedirs(path, exist_ok=True)
        mount(f"{PRIVATE}/keep{i}", path, None, MS_BIND | MS_REC)
        umount(f"{PRIVATE}/keep{i}")
    mount("overlay", "/usr/local/bin", "overlay", MS_RDONLY, f"lowerdir={h}/bin:/usr/local/bin")

    # Each host's own disk where sparkctl keeps state on a node: caches, Engram source and target, weights
    for target, sub in PRIVATE_DIRS.items():
        os.makedirs(h / sub, exist_ok=True)
        os.makedirs(target, exist_ok=True)  # /var/lib/sparkctl may not exist on the machine: lab down removes it
        mount(str(h / sub), target, None, MS_BIND)
    if name == ENGRAM_HOST:  # the offload host's Engram tables on "disk" (read-only, from the cache)
        os.makedirs(ENGRAM_SOURCE, exist_ok=True)
        mount(str(paths.ENGRAM_CACHE), ENGRAM_SOURCE, None, MS_BIND)
        mount(None, ENGRAM_SOURCE, None, MS_BIND | MS_REMOUNT | MS_RDONLY)

    # sysfs of this network namespace, keeping the cgroup tree dockerd needs
    old = f"{PRIVATE}/oldsys"
    os.makedirs(old)
    mount("/sys", old, None, MS_BIND | MS_REC)
    mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount(f"{old}/fs/cgroup", "/sys/fs/cgroup", None, MS_BIND | MS_REC)
    umount(old)

    # /sys/class on a tmpfs: every real class bound back, plus the simulated infiniband class
    stage = f"{PRIVATE}/sysclass"
    os.makedirs(stage)
    mount("/sys/class", stage, None, MS_BIND)
    mount("tmpfs", "/sys/class", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755,size=1m")
    for cls in sorted(os.listdir(stage)):
        os.mkdir(f"/sys/class/{cls}")
        mount(f"{stage}/{cls}", f"/sys/class/{cls}", None, MS_BIND)
    umount(stage)
    os.mkdir("/sys/class/infiniband")
    mount(str(state.sys_root(name) / "infiniband"), "/sys/class/infiniband", None, MS_BIND)
    for n in host.nics:
        mount(str(state.speed_file(name, n.device)), f"/sys/class/net/{n.device}/speed", None, MS_BIND)

    # /dev: an overlay so /dev/infiniband can exist here without touching the real /dev
    upper = f"{PRIVATE}/dev"
    os.makedirs(upper)
    mount("tmpfs", upper, "tmpfs", MS_NOSUID, "mode=755,size=1m")
    os.makedirs(f"{upper}/upper")
    os.makedirs(f"{upper}/work")
    olddev = f"{PRIVATE}/olddev"
    os.makedirs(olddev)
    mount("/dev", olddev, None, MS_BIND | MS_REC)
    mount("overlay", "/dev", "overlay", MS_NOSUID, f"lowerdir=/dev,upperdir={upper}/upper,workdir={upper}/work")
    mount(f"{olddev}/pts", "/dev/pts", None, MS_BIND | MS_REC)
    if os.path.ismount(f"{olddev}/mqueue"):
        mount(f"{olddev}/mqueue", "/dev/mqueue", None, MS_BIND | MS_REC)
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    umount(olddev)
    os.mkdir("/dev/infiniband", 0o755)
    # Inert nodes: major 231 (infiniband) has no driver here, so opening them fails harmlessly.
    rdma = [r for n in host.fabric for r in n.rdma]
    nodes = {"rdma_cm": 255}
    for i, _ in enumerate(rdma):
        nodes[f"uverbs{i}"] = 192 + i
        nodes[f"umad{i}"] = i
        nodes[f"issm{i}"] = 64 + i
    for node, minor in nodes.items():
        os.mknod(f"/dev/infiniband/{node}", 0o600 | 0o020000, os.makedev(231, minor))


class Init:
    def __init__(self, name: str):
        self.name = name
        self.children: dict[str, subprocess.Popen] = {}
        self.stop = False

    def on_signal(self, *_) -> None:
        self.stop = True

    def spawn(self, label: str, argv: list[str], env: dict | None = None) -> None:
        with open(paths.host_dir(self.name) / "log" / f"{label}.log", "ab") as logf:
            self.children[label] = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=logf,
                cwd="/",
                close_fds=True,
                start_new_session=True,
            )
        log(f"started {label} (pid {self.children[label].pid})")

    def reap(self) -> None:
        """Reap every exited child (orphans in this PID namespace are ours too)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for label, p in list(self.children.items()):
                if p.pid == pid:
                    p.returncode = os.waitstatus_to_exitcode(status)
                    if not self.stop:
                        log(f"{label} exited with {p.returncode}")

    def sync(self) -> None:
        try:
            state.sync_sys(self.name, state.host_operstates())
        except Exception as e:  # never let a sysfs hiccup take the host down
            log(f"sysfs sync failed: {e}")

    def run(self) -> int:
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, self.on_signal)  # a PID 1 ignores what it has no handler for
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wake the loop to reap
        signal.signal(signal.SIGUSR1, lambda *_: None)  # wake the loop to resync (faults changed)
        rfd, wfd = os.pipe()
        os.set_blocking(rfd, False)
        os.set_blocking(wfd, False)
        signal.set_wakeup_fd(wfd)

        socket.sethostname(self.name)
        setup_mounts(self.name)
        os.environ.clear()
        os.environ.update({"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root"})
        os.chdir("/")
        self.sync()

        nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        nl.bind((0, RTMGRP_LINK))
        nl.setblocking(False)

        self.spawn("sshd", ["/usr/sbin/sshd", "-D", "-e"])
        self.spawn("dockerd", ["/usr/sbin/dockerd"])
        # the host's enabled units, as systemd starts them at boot (the lab's stand-in, hw/systemctl.py)
        lab_code = os.path.dirname(os.path.dirname(os.path.abspath(paths.__file__)))
        self.spawn("units", [sys.executable, "-S", "-m", "sparkctl_lab.hw.systemctl", "--boot"],
                   env={**os.environ, "PYTHONPATH": lab_code})  # fmt: skip
        log("up")
        while not self.stop:
            ready, _, _ = select.select([nl, rfd], [], [], 2.0)
            for r in ready:
                try:
                    (os.read(rfd, 4096) if r == rfd else nl.recv(65536))
                except (BlockingIOError, InterruptedError):
                    pass
            self.reap()
            self.sync()  # link events, plus a periodic pass as a backstop
        return self.shutdown()

    def shutdown(self) -> int:
        log("stopping")
        # Containers first: dockerd would otherwise wait each one's stop timeout.
        try:
            running = subprocess.run(["docker", "ps", "-q"], capture_output=True, text=True, timeout=5).stdout.split()
            if running:
                subprocess.run(["docker", "kill", *running], capture_output=True, timeout=5 * len(running))
        except (OSError, subprocess.SubprocessError) as e:
            log(f"could not kill the containers: {e}")
        for label in ("dockerd", "sshd"):
            p = self.children.get(label)
            if p and p.returncode is None:
                try:
                    os.kill(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            self.reap()
            if all(p.returncode is not None for p in self.children.values()):
                break
            time.sleep(0.05)
        # Whatever is left in this PID namespace (kill(-1) spares PID 1 itself).
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.kill(-1, sig)
            except ProcessLookupError:
                pass
            time.sleep(0.2)
            self.reap()
        log("stopped")
        return 0


def main() -> int:
    name = sys.argv[1]
    if name not in ALL_HOSTS:
        sys.stderr.write(f"hostinit: unknown lab host {name!r}\n")
        return 2
    return Init(name).run()


if __name__ == "__main__":
    sys.exit(main())
