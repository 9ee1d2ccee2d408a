"""System facts: the login (user id, sudo), clock, memory, disk, memlock limit, systemd-logind RemoveIPC,
and which of the tools sparkctl runs on a host are installed there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from sparkctl.facts.base import Reading, fact, host_fields
from sparkctl.transport.image_identity import images_root

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo -> bytes per field (MemTotal, MemAvailable, ...)."""
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key.strip()] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return out


@dataclass(frozen=True)
class Disk:
    path: str
    mount: str
    size: int
    available: int


def parse_df(text: str, paths: list[str]) -> dict[str, Disk]:
    """`df -P -B1 PATH...` -> Disk per asked path (rows come back in the same order)."""
    rows = [ln.split() for ln in text.splitlines()[1:] if ln.strip()]
    out = {}
    for path, row in zip(paths, rows):
        if len(row) >= 6 and row[1].isdigit():
            out[path] = Disk(path, row[5], int(row[1]), int(row[3]))
    return out


# the system containerd's root when /etc/containerd/config.toml names none (transport/image_identity.py
# images_root: where containerd's store keeps images)
CONTAINERD_ROOT = "/var/lib/containerd"


def disk_probe(cache_path: str) -> str:
    """Shell: docker's info (one line), then `df` of docker's data root, of containerd's root (when
    the directory exists) and of the cache dir (its nearest existing parent)."""
    import shlex

    toml_root = (
        r"""sed -n -e '/^[[:space:]]*\[/q' -e 's/^[[:space:]]*root[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' """
        "/etc/containerd/config.toml 2>/dev/null"
    )  # top-level `root`, before the first [section]
    # only the fields read (docker info also carries proxies and labels); `.Containerd` (API >= 1.46)
    # is asked apart: an older CLI refuses the whole template for a field it does not know
    info = """'{"DockerRootDir":{{json .DockerRootDir}},"DriverStatus":{{json .DriverStatus}}}'"""
    return (
        f"info=$(docker info --format {info} 2>/dev/null); "
        'case "$info" in *io.containerd.snapshotter.v1*) '
        "a=$(docker info --format '{{json .Containerd}}' 2>/dev/null);; *) a=;; esac; "
        'd=$(printf \'%s\' "$info" | sed -n \'s/.*"DockerRootDir":"\\([^"]*\\)".*/\\1/p\'); '
        '[ -n "$d" ] || d=/var/lib/docker; '
        f'c=$({toml_root}); [ -n "$c" ] || c={CONTAINERD_ROOT}; '
        f'p={shlex.quote(cache_path)}; while [ ! -e "$p" ]; do p=$(dirname "$p"); done; '
        'printf "@@info %s\\n@@containerd-info %s\\n" "$info" "$a"; echo "@@docker $d"; df -P -B1 "$d"; '
        'if [ -d "$c" ]; then echo "@@containerd $c"; df -P -B1 "$c"; fi; echo "@@caches $p"; df -P -B1 "$p"'
    )


@dataclass(frozen=True)
class DiskFacts:
    disks: dict[str, Disk]  # "images" (where the image store is), "docker" (data root), "caches"
    docker_root: Optional[str]
    image_store: str  # "classic" or "containerd"; "classic" when docker's info was not read
    images_root: Optional[str]  # the directory the image store keeps its layers in


def parse_disk(text: str) -> DiskFacts:
    """The output of `disk_probe`."""
    import json

    info: dict = {}
    paths: dict[str, str] = {}
    disks: dict[str, Disk] = {}
    for block in text.split("\n@@"):
        head, _, df = block.lstrip("@").partition("\n")
        label, _, path = head.partition(" ")
        if label in ("info", "containerd-info"):
            try:
                doc = json.loads(path) if path.strip() else None
            except ValueError:
                doc = None
            if isinstance(doc, dict):
                info.update(doc if label == "info" else {"Containerd": doc})
            continue
        disk = parse_df(df, [path]).get(path)
        if path:
            paths[label] = path
        if disk and path:
            disks[label] = disk
    docker_root = paths.get("docker")
    store, where = images_root(info, docker_root or "/var/lib/docker", paths.get("containerd"))
    # the image store's disk: the data root's for the classic store; containerd's root otherwise
    image_disk = disks.get("docker") if store == "classic" else disks.get("containerd")
    if store == "containerd" and where != paths.get("containerd"):
        image_disk = disks.get("docker")  # dockerd's own containerd, under the data root
    out = {k: v for k, v in disks.items() if k in ("docker", "caches")}
    if image_disk is not None:
        out["images"] = image_disk
    return DiskFacts(out, docker_root, store, where)


def parse_memlock(text: str) -> Optional[int]:
    """`ulimit -l` -> KiB, or -1 for unlimited, None if unreadable."""
    value = text.strip().splitlines()[-1].strip() if text.strip() else ""
    if value == "unlimited":
        return -1
    return int(value) if value.isdigit() else None


def parse_remove_ipc(text: str) -> Optional[bool]:
    """Effective RemoveIPC from logind.conf then logind.conf.d/*.conf (last wins); None = unset (systemd default: yes)."""
    value = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("RemoveIPC="):
            value = line.split("=", 1)[1].strip().lower() in ("yes", "true", "1", "on")
    return value


@host_fields
class SystemFields:
    """The HostFacts attributes this module's facts fill (a host where one was not read keeps the default)."""

    clock_offset: Optional[float] = None  # host clock minus runner clock, seconds
    uid: Optional[int] = None
    user: str = ""
    sudo: Optional[bool] = None  # root, or passwordless sudo
    meminfo: dict[str, int] = field(default_factory=dict)  # /proc/meminfo, kB
    disks: dict[str, Disk] = field(default_factory=dict)  # "images" / "docker" / "caches" -> Disk
    docker_root: Optional[str] = None
    image_store: str = "classic"  # "containerd" when dockerd keeps images in containerd's store
    images_root: Optional[str] = None  # where that store keeps them (docker's data root, or containerd's root)
    tools: Optional[frozenset[str]] = None  # REMOTE_TOOLS found on the PATH
    memlock_kib: Optional[int] = None  # ulimit -l in KiB, -1: unlimited, None: unreadable
    logind_running: Optional[bool] = None
    remove_ipc: Optional[bool] = None  # logind's RemoveIPC


# --- the facts (facts/base.py) ---------------------------------------------------------------


# first in the script: it starts right after the command is sent
@fact("clock", "date +%s.%N")  # host clock minus runner clock, seconds
def _clock(f: HostFacts, r: Reading) -> None:
    if r.sent is not None and r.ok:
        f.clock_offset = float(r.out.strip().splitlines()[0]) - r.sent


@fact(
    "whoami",
    'id -u; id -un; if [ "$(id -u)" != 0 ]; then sudo -n true 2>/dev/null && echo sudo || echo no-sudo; fi',
)
def _whoami(f: HostFacts, r: Reading) -> None:
    words = r.out.split()
    f.uid = int(words[0])
    f.user = words[1] if len(words) > 1 else ""
    f.sudo = f.uid == 0 or words[2:3] == ["sudo"]


@fact("meminfo", "cat /proc/meminfo")
def _meminfo(f: HostFacts, r: Reading) -> None:
    f.meminfo.update(parse_meminfo(r.out))


@fact(
    "disk",
    lambda t: disk_probe(t.inventory.caches.host_path),
    background=True,
)
def _disk(f: HostFacts, r: Reading) -> None:
    d = parse_disk(r.out)
    f.disks.update(d.disks)
    f.docker_root, f.image_store, f.images_root = d.docker_root, d.image_store, d.images_root


# The programs sparkctl's steps and checks run on a host (not docker, which every fact reads):
# dockerd's `--gpus all` needs the NVIDIA Container Toolkit's hook on dockerd's PATH (moby
# daemon/nvidia_linux.go registers its "nvidia" device driver only then), doctor's bandwidth probe
# runs iperf3 on both ends of a rail, the weights step copies the model with rsync.
REMOTE_TOOLS = ("nvidia-container-runtime-hook", "iperf3", "rsync")


def parse_tools(text: str) -> frozenset[str]:
    """`command -v` of each tool, one path per line for those found -> the names found."""
    found = {line.strip().rsplit("/", 1)[-1] for line in text.splitlines() if line.strip()}
    return frozenset(t for t in REMOTE_TOOLS if t in found)


@fact("tools", "for t in " + " ".join(REMOTE_TOOLS) + '; do command -v "$t"; done; true')
def _tools(f: HostFacts, r: Reading) -> None:
    f.tools = parse_tools(r.out)


@fact("memlock", "ulimit -l")
def _memlock(f: HostFacts, r: Reading) -> None:
    f.memlock_kib = parse_memlock(r.out)


@fact(
    "logind",
    "if pidof systemd-logind >/dev/null 2>&1; then echo running; else echo stopped; fi; "
    "cat /etc/systemd/logind.conf /etc/systemd/logind.conf.d/*.conf 2>/dev/null; true",
)
def _logind(f: HostFacts, r: Reading) -> None:
    first, _, rest = r.out.partition("\n")
    f.logind_running, f.remove_ipc = first.strip() == "running", parse_remove_ipc(rest)
