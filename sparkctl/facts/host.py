"""The one fact layer: everything sparkctl reads from a host, each fact read in one place.

A fact kind (KINDS) is a shell probe and its parser. Checks declare the kinds they read (READS
in each checks module) and steps theirs (`Step.facts`); a run gathers the union in ONE round
trip per host (`gather_host`) and parses it once into a `HostFacts` that doctor, every step,
status and reload share. `probes_for` builds the probes from the inventory (rails, RDMA devices,
images, cache path, Engram placement, state files on the head ...); `parse_host` is the pure
half, so tests feed recorded sections. Probes that only wait (pings, docker CLI calls,
nvidia-smi, hashing) run concurrently inside the script.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from sparkctl.facts import caches, docker, engram, gpu, logs, network, rdma, system
from sparkctl.facts.probe import Section, gather
from sparkctl.inventory.models import FabricLink, Inventory
from sparkctl.lock import parse_holder
from sparkctl.lock import probe as lock_probe
from sparkctl.state import APPLIED, EVENTS, EVENTS_SHOWN, HISTORY_PROBE, JOURNAL, LOCK, parse_events, parse_history
from sparkctl.transport.redact import redact

# Every fact kind a host can be asked for. Checks (checks/*.py `READS`) and steps (`Step.facts`)
# declare the kinds they read; a run gathers the union, once per host, in one round trip.
# Parsed in this order: engram_hashes reads the placement record the `engram` fact holds.
KINDS = (
    "clock", "whoami", "ip_addr", "speeds", "rdma_state", "ibdev2netdev", "route", "ping", "gpus",
    "gpu_apps", "meminfo", "disk", "memlock", "logind", "image", "containers", "logs", "cache",
    "engram", "engram_hashes", "engram_rehash", "engram_source_hashes", "drafter_health", "master_port", "applied", "gid",
    "netplan", "health", "journal", "events", "history", "lock",
)
# waiting, not working: run these concurrently inside the host's script
BACKGROUND_KINDS = {"ping", "route", "gpus", "gpu_apps", "disk", "image", "containers", "logs", "drafter_health", "master_port",
                    "engram_hashes", "engram_rehash", "engram_source_hashes"}

GPU_APPS_SPLIT = "@@cgroups"
NETPLAN_PATH = "/etc/netplan/40-sparkctl-fabric.yaml"  # written by steps/fabric.py
NVIDIA_SMI_GPUS = f"nvidia-smi --query-gpu={gpu.GPU_QUERY} --format=csv,noheader,nounits"
NVIDIA_SMI_APPS = f"nvidia-smi --query-compute-apps={gpu.APPS_QUERY} --format=csv,noheader,nounits"


def peer_ip(inv: Inventory, host: str, link: FabricLink) -> Optional[str]:
    """The peer's address on the same rail (the rail on the peer pointing back, same subnet)."""
    peer = inv.hosts.get(link.peer)
    if peer is None:
        return None
    for other in peer.fabric:
        if other.peer == host and other.address.network == link.address.network:
            return str(other.address.ip)
    return None


def ping_command(link: FabricLink, ip: str) -> str:
    # MTU-28 bytes (IP + ICMP headers), fragmentation forbidden: proves jumbo frames end to end.
    # One packet answers in microseconds on a good rail; one retry keeps a single lost packet
    # from failing a healthy rail.
    one = f"ping -M do -s {link.mtu - 28} -c 1 -W 1 -I {shlex.quote(link.device)} {shlex.quote(ip)}"
    return f"{one} || {{ sleep 0.2; {one}; }}"


def images_for(inv: Inventory, host: str) -> list[str]:
    """Image references the host's runtime containers run (runtime and/or drafter image)."""
    from sparkctl.runtime.launch import render

    try:
        plan = render(inv)
    except Exception:  # an inventory render cannot handle: images checks then report nothing
        return []
    return list(dict.fromkeys(spec.image for spec in plan.for_host(host)))


def _each(devices: list[str], value: str) -> str:
    """Shell: a `DEVICE VALUE` line per device, VALUE a shell word over $d."""
    return "for d in " + " ".join(shlex.quote(d) for d in devices) + f'; do printf "%s %s\\n" "$d" "{value}"; done'


def health_probe(port: int) -> str:
    """/health from the head itself: bash's /dev/tcp needs no curl on the host."""
    return (
        "bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && printf \"GET /health HTTP/1.0\\r\\n\\r\\n\" >&3 "
        "&& timeout 2 head -1 <&3' 2>/dev/null || echo refused" % port
    )


def probes_for(inv: Inventory, host: str, kinds: Optional[Iterable[str]] = None) -> dict[str, str]:
    """Shell probes for one host, limited to the fact kinds asked for (all when None)."""
    want = set(kinds) if kinds is not None else None
    if want is not None and want - set(KINDS):
        raise ValueError(f"unknown fact kind(s): {sorted(want - set(KINDS))}")
    h = inv.hosts[host]
    probes: dict[str, str] = {}

    def add(key: str, snippet: str) -> None:
        if want is None or key.split(".", 1)[0] in want:
            probes[key] = snippet

    add("clock", "date +%s.%N")  # first: the script starts right after the command is sent
    add("whoami", 'id -u; id -un; if [ "$(id -u)" != 0 ]; then sudo -n true 2>/dev/null && echo sudo || echo no-sudo; fi')
    rdmas = [d for link in h.fabric for d in link.rdma]
    refs = images_for(inv, host)
    if h.fabric:
        add("ip_addr", "ip -j addr")
        # third column: a device without a bus device behind it is virtual (veth, lab)
        add("speeds", _each([link.device for link in h.fabric], "$(cat /sys/class/net/$d/speed 2>/dev/null || echo -1) "
                            "$([ -e /sys/class/net/$d/device ] && echo physical || echo virtual)"))  # fmt: skip
        for i, link in enumerate(h.fabric):
            ip = peer_ip(inv, host, link)
            if ip:
                add(f"route.{i}", f"ip -j route get {shlex.quote(ip)}")
                add(f"ping.{i}", ping_command(link, ip))
    if rdmas:
        add("rdma_state", _each(rdmas, "$(cat /sys/class/infiniband/$d/ports/1/state 2>/dev/null || echo missing)"))
        add("ibdev2netdev", "ibdev2netdev")
        gid_index = inv.runtime.env.get("NCCL_IB_GID_INDEX")
        if gid_index is not None:
            add("gid", _each(rdmas, rdma.gid_probe_value(shlex.quote(gid_index))))
    if h.gpu is not None:
        add("gpus", NVIDIA_SMI_GPUS)
        add(
            "gpu_apps",
            f'out=$({NVIDIA_SMI_APPS}); rc=$?; printf "%s\\n" "$out"; echo {GPU_APPS_SPLIT}; '
            'for p in $(printf "%s\\n" "$out" | cut -d, -f2 | tr -d " "); do '
            '[ "$p" -eq "$p" ] 2>/dev/null && printf "%s %s\\n" "$p" "$(tr "\\n" " " < /proc/$p/cgroup 2>/dev/null)"; done; exit $rc',
        )
    add("meminfo", "cat /proc/meminfo")
    add("disk", system.disk_probe(inv.caches.host_path))
    add("memlock", "ulimit -l")
    add(
        "logind",
        "if pidof systemd-logind >/dev/null 2>&1; then echo running; else echo stopped; fi; "
        "cat /etc/systemd/logind.conf /etc/systemd/logind.conf.d/*.conf 2>/dev/null; true",
    )
    for i, ref in enumerate(refs):
        add(f"image.{i}", docker.image_probe(ref))
    add("containers", docker.containers_probe(inv.cluster.name))
    add("logs", docker.cluster_ids(inv.cluster.name) + logs.scan_command())
    if refs:
        add("cache", caches.cache_probe(inv.caches.host_path))
    if h.role == "head":
        add("applied", f"cat {APPLIED} 2>/dev/null || true")
        add("journal", f"cat {JOURNAL} 2>/dev/null || true")
        add("events", f"tail -n {EVENTS_SHOWN} {EVENTS} 2>/dev/null || true")
        add("history", HISTORY_PROBE)
        # the holder record, the lock's mtime and the head's clock (lock.parse_holder reads these three)
        add("lock", lock_probe())
        add("health", health_probe(inv.runtime.port))
    if h.fabric:
        add("netplan", network.netplan_probe(NETPLAN_PATH, [link.device for link in h.fabric]))
    if inv.engram and inv.engram.host == host:
        add("engram", engram.engram_probe(inv.engram.source, inv.engram.target))
        # `up` re-hashes what changed since placement; `doctor --deep` re-hashes every byte (minutes for ~220 GiB)
        add("engram_hashes", engram.changed_checksum_command(inv.engram.target))
        add("engram_rehash", engram.checksum_command(inv.engram.target))
        add("engram_source_hashes", engram.source_sums_command(inv.engram.source))
    spec = inv.runtime.speculative
    if spec and spec.drafter_host == host:
        from sparkctl.runtime.launch import fabric_link_to

        heads = inv.hosts_with_role("head")
        link = fabric_link_to(inv, host, heads[0]) if heads else None
        ip = str(link.address.ip) if link else h.ssh.address  # where render() binds the drafter
        url = shlex.quote(f"http://{ip}:{spec.drafter_port}/health")
        add(
            "drafter_health",
            f"if command -v curl >/dev/null; then curl -s -o /dev/null -w '%{{http_code}}' --max-time 3 {url}; "
            f"else wget -q -T 3 -O /dev/null {url} && echo 200; fi",
        )
    if inv.runtime.distributed_executor_backend == "mp" and h.role == "worker":
        # mp: this worker's headless ranks reach the head's rendezvous over the fabric (never the management net)
        from sparkctl.runtime.launch import mp_master

        ip, port = mp_master(inv)
        add("master_port", f"if timeout 3 bash -c 'exec 3<>/dev/tcp/{ip}/{port}' 2>/dev/null; then echo open; else echo closed; fi")
    return probes


def background_keys(probes: Iterable[str]) -> set[str]:
    return {k for k in probes if k.split(".", 1)[0] in BACKGROUND_KINDS}


@dataclass
class HostFacts:
    """Parsed facts of one host. A fact that could not be read is None (with the reason in `errors`)."""

    host: str
    sections: dict[str, Section]
    errors: dict[str, str] = field(default_factory=dict)
    clock_offset: Optional[float] = None  # host clock minus runner clock, seconds
    uid: Optional[int] = None
    user: str = ""
    sudo: Optional[bool] = None
    interfaces: Optional[dict[str, network.Interface]] = None
    speeds: dict[str, Optional[int]] = field(default_factory=dict)
    virtual: set[str] = field(default_factory=set)  # net devices with no bus device (veth): no line rate
    rdma_states: dict[str, str] = field(default_factory=dict)
    ibdev: dict[str, rdma.RdmaPort] = field(default_factory=dict)
    gids: dict[str, rdma.GidEntry] = field(default_factory=dict)  # RDMA device -> its entry at the pinned NCCL_IB_GID_INDEX
    routes: dict[int, Optional[str]] = field(default_factory=dict)  # rail index -> device the route uses
    route_text: dict[int, str] = field(default_factory=dict)
    pings: dict[int, network.PingResult] = field(default_factory=dict)  # rail index -> ping
    gpus: Optional[list[gpu.GPU]] = None
    gpu_error: Optional[str] = None
    gpu_apps: list[gpu.GPUApp] = field(default_factory=list)
    app_cgroups: dict[int, str] = field(default_factory=dict)
    meminfo: dict[str, int] = field(default_factory=dict)
    docker_root: Optional[str] = None
    disks: dict[str, system.Disk] = field(default_factory=dict)  # "images" / "docker" / "caches" -> disk
    image_store: str = "classic"  # "containerd" when dockerd keeps images in containerd's store
    images_root: Optional[str] = None  # where that store keeps them (docker's data root, or containerd's root)
    memlock_kib: Optional[int] = None
    logind_running: Optional[bool] = None
    remove_ipc: Optional[bool] = None
    images: dict[str, docker.ImageFact] = field(default_factory=dict)
    containers: Optional[list[docker.ContainerFact]] = None
    logs: dict[str, logs.LogFacts] = field(default_factory=dict)  # container id -> log facts
    cache: Optional[caches.CacheFacts] = None
    engram: Optional[engram.EngramFacts] = None
    drafter_health: Optional[int] = None
    master_port: Optional[str] = None  # mp workers: "open" / "closed", the head's rendezvous port seen from here
    applied: Optional[dict] = None  # the head's record of the last `sparkctl up` (whole applied.json)
    journal: Optional[dict] = None  # a reload in progress (or interrupted): state.JOURNAL
    events: list[dict] = field(default_factory=list)  # applied configs, reloads, rollbacks: state.EVENTS
    history: list[dict] = field(default_factory=list)  # replaced applied records, oldest first
    lock: Any = None  # the cluster lock's holder (sparkctl.lock.Holder), None when the lock is free
    health: Optional[str] = None  # the head's /health status line from the head itself, or "refused"
    netplan: Optional[str] = None  # the fabric netplan file sparkctl writes, None when absent
    netplan_others: dict[str, str] = field(default_factory=dict)  # other /etc/netplan files naming a rail: path -> text
    engram_rehashed: list[str] = field(default_factory=list)  # files whose size/ctime moved since placement
    engram_hashes: Optional[dict[str, str]] = None  # SHA-256 per file of the RAM copy (re-hashed where changed, or all with --deep)
    engram_source_hashes: Optional[dict[str, str]] = None  # the source's SHA256SUMS, else computed


def _last_line(sec: Section) -> str:
    lines = [ln for ln in sec.out.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else f"exit {sec.rc}"


def _json(sec: Section) -> Optional[dict]:
    """A state file's JSON; None when the file is absent (the probe printed nothing)."""
    return json.loads(sec.out) if sec.out.strip() else None


def _read(f: HostFacts, kind: str, i: int, sec: Section, refs: list[str], clock_sent: Optional[float]) -> None:
    """Parse one section of the host's round trip into `f` (section `kind.i` for per-rail/per-image kinds)."""
    out = sec.out
    match kind:
        case "clock" if clock_sent is not None and sec.ok:
            f.clock_offset = float(out.strip().splitlines()[0]) - clock_sent
        case "whoami":
            words = out.split()
            f.uid = int(words[0])
            f.user = words[1] if len(words) > 1 else ""
            f.sudo = f.uid == 0 or words[2:3] == ["sudo"]
        case "ip_addr" if not sec.ok:
            f.errors["ip_addr"] = _last_line(sec)
        case "ip_addr":
            f.interfaces = network.parse_ip_addr(out)
        case "speeds":
            f.speeds.update(network.parse_speeds(out))
            f.virtual.update(ln.split()[0] for ln in out.splitlines() if ln.split()[2:3] == ["virtual"])
        case "route":
            f.routes[i], f.route_text[i] = network.parse_route_get(out), out.strip()
        case "ping":
            f.pings[i] = network.parse_ping(sec.rc, out)
        case "rdma_state":
            f.rdma_states.update(rdma.parse_port_states(out))
        case "ibdev2netdev":
            f.ibdev.update(rdma.parse_ibdev2netdev(out))
        case "gid":
            f.gids.update(rdma.parse_gids(out))
        case "gpus":
            found, err = gpu.parse_gpus(sec.rc, out)
            if err and err != "No devices were found":
                f.gpu_error = err
            else:
                f.gpus = found
        case "gpu_apps":
            apps_text, _, cgroups = out.partition(GPU_APPS_SPLIT)
            f.gpu_apps = gpu.parse_apps(sec.rc, apps_text)
            for pid, _, cgroup in (line.strip().partition(" ") for line in cgroups.splitlines()):
                if pid.isdigit():
                    f.app_cgroups[int(pid)] = cgroup
        case "meminfo":
            f.meminfo.update(system.parse_meminfo(out))
        case "disk":
            d = system.parse_disk(out)
            f.disks.update(d.disks)
            f.docker_root, f.image_store, f.images_root = d.docker_root, d.image_store, d.images_root
        case "memlock":
            f.memlock_kib = system.parse_memlock(out)
        case "logind":
            first, _, rest = out.partition("\n")
            f.logind_running, f.remove_ipc = first.strip() == "running", system.parse_remove_ipc(rest)
        case "image":
            f.images[refs[i]] = docker.parse_image(refs[i], sec.rc, out)
        case "containers":
            found, err = docker.parse_containers(sec.rc, out)
            if err:
                f.errors["containers"] = err
            else:
                f.containers = found
        case "logs":
            f.logs.update(logs.parse_scan(out))
        case "cache":
            f.cache = caches.parse_cache(sec.rc, out)
        case "engram":
            f.engram = engram.parse_engram(out)
        case "engram_hashes":  # re-hashed where size or ctime moved since placement, else the placement's sums
            if not sec.ok:
                f.errors["engram_hashes"] = _last_line(sec)
            f.engram_hashes = engram.parse_changed_sums(out, f.engram.placed_sums if f.engram else {})
            f.engram_rehashed = sorted(engram.parse_sums(out))
        case "engram_rehash":  # --deep: every file hashed again
            if not sec.ok:
                f.errors["engram_hashes"] = _last_line(sec)
            f.engram_hashes = engram.parse_sums(out)
        case "engram_source_hashes":
            if not sec.ok:
                f.errors["engram_source_hashes"] = _last_line(sec)
            f.engram_source_hashes = engram.parse_sums(out) if sec.ok else None
        case "master_port":
            f.master_port = out.strip() if out.strip() in ("open", "closed") else None
        case "drafter_health":
            code = out.strip()
            f.drafter_health = int(code) if code.isdigit() and int(code) > 0 else None
        case "applied":
            f.applied = _json(sec)
        case "journal":
            f.journal = _json(sec)
        case "events":
            f.events = parse_events(out)
        case "history":
            f.history = parse_history(out)
        case "lock" if out.strip():
            f.lock = parse_holder(out)
            if f.lock is None:
                f.errors["lock"] = f"unreadable lock file {LOCK}: {redact(out.strip())[:200]}"
        case "health":
            f.health = out.strip() or "no answer"
        case "netplan" if not sec.ok:
            f.errors["netplan"] = _last_line(sec)
        case "netplan":
            files = network.parse_netplan_files(out)
            f.netplan = files.pop(NETPLAN_PATH, None)
            f.netplan_others = files


def parse_host(inv: Inventory, host: str, sections: dict[str, Section], clock_sent: Optional[float] = None) -> HostFacts:
    """Pure: sections gathered by `probes_for`'s script -> HostFacts (never raises on odd output)."""
    f = HostFacts(host=host, sections=dict(sections))
    refs = images_for(inv, host)
    for key in sorted(sections, key=lambda k: KINDS.index(k.partition(".")[0])):
        kind, _, i = key.partition(".")
        try:
            _read(f, kind, int(i or 0), sections[key], refs, clock_sent)
        except Exception as exc:  # an answer we did not expect: a fact we cannot judge, not a crash
            f.errors[key] = f"unreadable output ({type(exc).__name__}: {exc}): {sections[key].out.strip()[:200]}"
    return f


def gather_host(
    session, inv: Inventory, kinds: Optional[Iterable[str]] = None, timeout: float = 60, into: Optional[HostFacts] = None
) -> HostFacts:
    """Connect (if needed), run the host's probes for `kinds` in one round trip, parse them.
    With `into`, the new sections replace that HostFacts' sections of the same keys (a re-read
    after a change, or a second round trip for a gate), and everything is parsed again."""
    session.connect()
    probes = probes_for(inv, session.name, kinds)
    sent = time.time()
    sections = gather(session, probes, timeout=timeout, background=background_keys(probes)) if probes else {}
    merged = {**(into.sections if into else {}), **sections}
    f = parse_host(inv, session.name, merged, clock_sent=sent if "clock" in probes else None)
    if into is not None and "clock" not in probes:
        f.clock_offset = into.clock_offset
    return f
