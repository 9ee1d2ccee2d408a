"""Doctor's checks on facts recorded from the lab (tests/unit/recorded/doctor/): no host needed.

healthy.json holds every probe section of head, worker and offload on a prepared lab; each fault
file holds only the sections that changed with that lab fault switched on (recorded the same way),
so each case below is real tool output. Cases the lab cannot produce are small edits of it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from sparkctl.checks import REGISTRY
from sparkctl.checks.base import Context
from sparkctl.checks.doctor import run_checks, select
from sparkctl.facts.host import parse_host
from sparkctl.facts.probe import Section
from sparkctl.inventory.models import Inventory
from sparkctl.session import Unreachable

REC = Path(__file__).parent / "recorded" / "doctor"
INV = Inventory.model_validate(yaml.safe_load((REC / "inventory.yaml").read_text()))
HEALTHY = json.loads((REC / "healthy.json").read_text())
W, H, O = "worker", "head", "offload"
RAIL = "enp1s0f0np0"


def sections(scenario: str | None = None) -> dict[str, dict[str, dict]]:
    secs = copy.deepcopy(HEALTHY)
    if scenario:
        for host, changed in json.loads((REC / f"{scenario}.json").read_text()).items():
            secs[host].update(changed)
    return secs


def run(secs=None, inv: Inventory = INV, unreachable=None, deep=False, only=None, **ctx_fields):
    secs = sections() if secs is None else secs
    unreachable = unreachable or {}
    facts = {}
    for host, raw in secs.items():
        if host in unreachable:
            continue
        s = {k: Section(v["rc"], v["out"]) for k, v in raw.items()}
        clock = float(s["clock"].out.split()[0]) if "clock" in s else None  # as if sent at that instant
        facts[host] = parse_host(inv, host, s, sent=clock)
    ctx = Context(inventory=inv, hosts=list(inv.hosts), facts=facts, unreachable=unreachable, deep=deep, **ctx_fields)
    return run_checks(ctx, select(only=only, deep=deep))


def failing(results) -> set[tuple[str, str, str]]:
    return {(r.name, r.host, r.target or "") for r in results if r.status == "failed"}


def by(results, name: str, host: str, target: str | None = None):
    found = [r for r in results if r.name == name and r.host == host and (target is None or r.target == target)]
    assert found, f"no result {name} on {host} {target or ''}"
    return found[0]


def edit(secs, host: str, key: str, out: str, rc: int = 0):
    secs[host][key] = {"rc": rc, "out": out}
    return secs


# --- healthy and the recorded lab faults -----------------------------------------------------------


def test_healthy_recording_nothing_fails_runtime_skipped():
    results = run()
    assert failing(results) == set()
    # the lab inventory limits memlock (its dockerd cannot raise it): a warning, as on any such host
    # and asks no key at its front door (gateway.keys: open to whoever reaches the port)
    assert {r.name for r in results if r.status == "warn"} <= {"caches.compile", "host.memlock", "gateway.keys"}
    assert {r.name for r in results} == {n for n, c in REGISTRY.items() if not c.deep_only and not c.fleet}
    assert all(r.status == "skipped" and "not running" in r.message for r in results if r.group == "runtime")
    assert by(results, "engram.placed", O).status == "ok" and by(results, "engram.checksums", O).status == "ok"
    assert by(results, "fabric.speed", W, RAIL).data["gbps"] == 200


RECORDED_FAULTS = {
    "link-down": {
        ("fabric.link", W, RAIL), ("fabric.rdma", W, "rocep1s0f0"), ("fabric.ping", W, RAIL), ("fabric.route", W, RAIL),
        ("fabric.link", H, RAIL), ("fabric.rdma", H, "rocep1s0f0"), ("fabric.ping", H, RAIL),
    },
    "wrong-mtu": {("fabric.mtu", W, RAIL), ("fabric.ping", W, RAIL), ("fabric.ping", H, RAIL)},
    "rdma-down": {("fabric.rdma", W, "rocep1s0f0")},
    "gpu-missing": {("gpu.model", W, "")},
    "offload-gpu-missing": {("gpu.model", O, "")},
    "wrong-driver": {("gpu.driver", W, "")},
    "foreign-gpu-process": {("gpu.processes", H, "")},
}  # fmt: skip


@pytest.mark.parametrize("scenario", list(RECORDED_FAULTS))
def test_recorded_fault_fails_exactly_its_checks_with_a_fix(scenario):
    results = run(sections(scenario))
    assert failing(results) == RECORDED_FAULTS[scenario]
    for r in results:
        if r.status == "failed":
            assert r.fix and r.runbook == f"docs/runbooks/{r.name}.md"
            assert (Path(__file__).parents[2] / r.runbook).exists()


def test_fault_messages_say_what_is_wrong():
    r = run(sections("wrong-mtu"))
    assert "MTU 1500, expected 9000" in by(r, "fabric.mtu", W, RAIL).message
    assert "ip link set enp1s0f0np0 mtu 9000" in by(r, "fabric.mtu", W, RAIL).fix
    assert "message too long" in by(r, "fabric.ping", W, RAIL).message
    r = run(sections("link-down"))
    assert "administratively down" in by(r, "fabric.link", W, RAIL).message
    assert "no carrier" in by(r, "fabric.link", H, RAIL).message
    assert by(r, "fabric.speed", W, RAIL).status == "skipped"
    r = run(sections("gpu-missing"))
    assert "expected 1x NVIDIA GB10, nvidia-smi shows no GPU" in by(r, "gpu.model", W).message
    assert by(r, "gpu.smi", W).status == "ok"  # nvidia-smi answers; it just sees no device
    r = run(sections("offload-gpu-missing"))
    assert "expected 2x NVIDIA GeForce RTX 3090, nvidia-smi shows 1x" in by(r, "gpu.model", O).message
    r = run(sections("wrong-driver"))
    assert "580.82.09" in by(r, "gpu.driver", W).message and "install driver 580.95.05" in by(r, "gpu.driver", W).fix
    assert by(r, "gpu.driver", H).status == "ok"
    r = run(sections("foreign-gpu-process"))
    msg = by(r, "gpu.processes", H).message
    assert "16384 MiB" in msg and "pid" in msg


# --- cases made by editing the recording ---------------------------------------------------------


def test_nvidia_smi_missing_fails_smi_and_skips_the_rest():
    r = run(edit(sections(), W, "gpus", "sh: 1: nvidia-smi: not found\n", rc=127))
    assert failing(r) == {("gpu.smi", W, "")}
    assert by(r, "gpu.model", W).status == "skipped" and by(r, "gpu.driver", W).status == "skipped"


def test_nvidia_smi_failures_keep_the_line_that_names_the_cause():
    rec = Path(__file__).parent / "recorded" / "nvidia_smi"
    r = run(edit(sections(), W, "gpus", (rec / "nvml_mismatch.txt").read_text(), rc=18))
    smi = by(r, "gpu.smi", W)
    assert smi.message == (
        "nvidia-smi failed: Failed to initialize NVML: Driver/library version mismatch (NVML library version: 580.173)"
    )
    assert "reboot worker" in smi.fix and "/proc/driver/nvidia/version" in smi.fix
    r = run(edit(sections(), W, "gpus", (rec / "no_driver.txt").read_text(), rc=9))
    smi = by(r, "gpu.smi", W)
    assert "couldn't communicate with the NVIDIA driver" in smi.message and "lsmod | grep nvidia" in smi.fix
    # a GPU that dropped off: its handle error is the cause, not the "No devices were found" after it
    r = run(
        edit(
            sections(),
            W,
            "gpus",
            "Unable to determine the device handle for GPU0000:0F:01.0: Unknown Error\nNo devices were found\n",
            rc=15,
        )
    )
    assert by(r, "gpu.smi", W).status == "failed" and "device handle" in by(r, "gpu.smi", W).message


def test_address_missing_wrong_prefix_and_route_leak():
    secs = sections()
    ip = json.loads(secs[W]["ip_addr"]["out"])
    for item in ip:
        if item["ifname"] == RAIL:
            item["addr_info"] = [a for a in item["addr_info"] if a.get("family") != "inet"]
        if item["ifname"] == "enP2p1s0f0np0":
            for a in item["addr_info"]:
                if a.get("family") == "inet":
                    a["prefixlen"] = 16
    edit(secs, W, "ip_addr", json.dumps(ip))
    edit(secs, W, "route.0", '[{"dst":"10.231.100.2","gateway":"10.231.0.1","dev":"enP7s7","prefsrc":"10.231.0.12"}]')
    r = run(secs)
    assert ("fabric.address", W, RAIL) in failing(r)
    assert "is not configured on worker" in by(r, "fabric.address", W, RAIL).message
    assert "wrong prefix" in by(r, "fabric.address", W, "enP2p1s0f0np0").message
    leak = by(r, "fabric.route", W, RAIL)
    assert leak.status == "failed" and "leaves via enP7s7" in leak.message
    assert by(r, "env.fabric", W, "sparkctl-worker").status == "failed"  # VLLM_HOST_IP no longer on the device


def test_unreachable_host_one_failure_rest_skipped():
    u = {
        W: Unreachable(
            W, "timeout", "worker: cannot connect to root@10.231.0.12:22 after 3 attempts: timed out", "check the host"
        )
    }
    r = run(unreachable=u)
    worker = [x for x in r if x.host == W]
    assert [x.name for x in worker if x.status == "failed"] == ["ssh.reachable"]
    assert all(x.status == "skipped" for x in worker if x.name != "ssh.reachable")
    assert failing(r) == {("ssh.reachable", W, "")}
    # cross-host checks still judge the hosts that answered
    assert by(r, "gpu.driver", H).status == "ok" and by(r, "images.same", H).status == "ok"


def test_changed_host_key_is_named_and_the_host_is_up():
    u = {O: Unreachable(O, "host_key", "offload: HOST KEY CHANGED for 10.231.0.13 ...", "ssh-keygen -R ...")}
    r = run(unreachable=u)
    assert by(r, "ssh.reachable", O).status == "ok" and by(r, "ssh.host_key", O).status == "failed"
    assert "ssh-keygen -R" in by(r, "ssh.host_key", O).fix


def test_only_still_reports_why_a_host_is_missing():
    u = {W: Unreachable(W, "refused", "worker: cannot connect")}
    r = run(unreachable=u, only=["gpu"])
    assert ("ssh.reachable", W, "") in failing(r) and {x.group for x in r} == {"ssh", "gpu"}


def test_not_root_without_sudo():
    r = run(edit(sections(), W, "whoami", "1000\nops\nno-sudo\n"))
    assert failing(r) == {("ssh.privilege", W, "")} and "NOPASSWD" in by(r, "ssh.privilege", W).fix
    r = run(edit(sections(), W, "whoami", "1000\nops\nsudo\n"))
    assert by(r, "ssh.privilege", W).status == "ok"


def test_clock_skew():
    secs = sections()
    t = float(secs[W]["clock"]["out"].split()[0])
    secs[W]["clock"]["out"] = f"{t + 4.5:.6f}\n"  # the worker's clock runs 4.5 s ahead
    facts = {}
    for host, raw in secs.items():
        s = {k: Section(v["rc"], v["out"]) for k, v in raw.items()}
        sent = t if host == W else float(s["clock"].out.split()[0])  # every probe sent "now" for its host
        facts[host] = parse_host(INV, host, s, sent=sent)
    results = run_checks(Context(inventory=INV, hosts=list(INV.hosts), facts=facts), select(only=["ssh"]))
    assert failing(results) == {("ssh.clock", W, "")} and "timedatectl" in by(results, "ssh.clock", W).fix
    assert "+4.5" in by(results, "ssh.clock", W).message and by(results, "ssh.clock", H).status == "ok"


def test_remove_ipc():
    r = run(edit(sections(), H, "logind", "running\n[Login]\n#RemoveIPC=yes\n"))
    assert failing(r) == {("host.remove_ipc", H, "")} and "RemoveIPC=no" in by(r, "host.remove_ipc", H).fix
    r = run(edit(sections(), H, "logind", "running\n[Login]\nRemoveIPC=no\n"))
    assert by(r, "host.remove_ipc", H).status == "ok"
    r = run(sections())  # the lab runs no logind: nothing removes IPC
    assert by(r, "host.remove_ipc", H).status == "ok" and "not running" in by(r, "host.remove_ipc", H).message


def test_disk_low():
    secs = sections()
    out, section = [], None
    for ln in secs[H]["disk"]["out"].splitlines():
        parts = ln.split()
        if ln.startswith("@@"):
            section = ln.split()[0]
        elif section == "@@docker" and len(parts) >= 6 and parts[1].isdigit():
            parts[3] = str(5 * (1 << 30))  # 5 GiB available under docker's data root
            ln = " ".join(parts)
        out.append(ln)
    r = run(edit(secs, H, "disk", "\n".join(out) + "\n"))
    assert failing(r) == {("host.disk", H, "docker")} and "5.0 GiB free" in by(r, "host.disk", H, "docker").message
    assert "docker image prune" in by(r, "host.disk", H, "docker").fix


def test_images_missing_and_mismatch():
    secs = sections()
    edit(secs, W, "image.0", "Error: No such image: 10.231.0.1:5000/sparkctl/vllm-sim:0.1\n", rc=1)
    r = run(secs)
    ref = INV.runtime.image
    assert failing(r) == {("images.present", W, ref)} and "docker pull" in by(r, "images.present", W).fix
    assert by(r, "images.same", W).status == "skipped"
    secs = sections()
    edit(secs, W, "image.0", "sha256:" + "ab" * 32 + "\n")
    r = run(secs)
    assert failing(r) == {("images.same", W, ref)}
    assert "head" in by(r, "images.same", W).message and by(r, "images.same", H).status == "ok"
    edit(secs, W, "image.0", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.\n", rc=1)
    assert "docker did not answer" in by(run(secs), "images.present", W).message


def applied_now(secs):
    """The head's record says this inventory's launch was applied (the recording predates later launch changes)."""
    from sparkctl.launch.plan import render

    return edit(secs, H, "applied", json.dumps({"config_hash": render(INV).config_hash, "applied_at": "2026-11-29T15:00:00Z"}))


def test_cache_dir_missing_and_compile_cache():
    r = run(edit(sections(), W, "cache", "missing\n"))
    assert failing(r) == {("caches.volume", W, "")} and "mkdir -p" in by(r, "caches.volume", W).fix
    assert by(r, "caches.compile", W).status == "skipped"
    warm = "present\nd ./3f2a\ni ./3f2a/rank_0_0/backbone/vllm_compile_cache.py\nd ./torch_aot_compile\n"
    r = run(applied_now(edit(sections(), H, "cache", warm)))
    assert by(r, "caches.compile", H).status == "ok" and "1 config" in by(r, "caches.compile", H).message
    partial = "present\nd ./3f2a\n"
    r = run(edit(sections(), H, "cache", partial))
    c = by(r, "caches.compile", H)
    assert c.status == "warn" and "interrupted" in c.message and "cold" in c.message


def test_compile_cache_against_the_applied_config():
    from sparkctl.launch.plan import render

    warm = "present\nd ./3f2a\ni ./3f2a/rank_0_0/backbone/vllm_compile_cache.py\n"
    h = render(INV).config_hash
    secs = edit(sections(), H, "cache", warm)
    edit(secs, H, "applied", json.dumps({"config_hash": h, "applied_at": "2026-11-29T15:00:00Z"}))
    assert "next start warm" in by(run(secs), "caches.compile", H).message
    edit(secs, H, "applied", json.dumps({"config_hash": "0000000000000000"}))
    c = by(run(secs), "caches.compile", H)
    assert c.status == "warn" and "differs from the last applied" in c.message


def _engram_parts(out: str) -> dict[str, str]:
    parts, key = {}, None
    for line in out.splitlines(keepends=True):
        if line.startswith("@@"):
            key = line.strip()[2:]
            parts[key] = ""
        elif key:
            parts[key] += line
    return parts


def _engram_text(parts: dict[str, str]) -> str:
    return "".join(f"@@{k}\n{v}" for k, v in parts.items())


def test_engram_checks():
    secs = sections()
    parts = _engram_parts(secs[O]["engram"]["out"])
    assert parts["mount"].startswith("tmpfs") and parts["marker"]  # the recording has them placed
    r = run(edit(copy.deepcopy(secs), O, "engram", _engram_text({**parts, "mount": ""})))
    placed = by(r, "engram.placed", O)
    assert placed.status == "warn" and "not a mount" in placed.message and "sparkctl up" in placed.fix
    # a file cut short in RAM
    name, size = next(ln for ln in parts["target"].splitlines() if not ln.startswith("SHA256SUMS")).rsplit(" ", 1)
    short = parts["target"].replace(f"{name} {size}\n", f"{name} {int(size) - 1000}\n")
    r = run(edit(copy.deepcopy(secs), O, "engram", _engram_text({**parts, "target": short})))
    assert failing(r) == {("engram.checksums", O, "")} and name in by(r, "engram.checksums", O).message
    # not enough RAM, tables not placed
    low = edit(copy.deepcopy(secs), O, "meminfo", "MemTotal: 1000 kB\nMemAvailable: 10240 kB\n")
    edit(low, O, "engram", _engram_text({**parts, "mount": "", "marker": "", "target": ""}))
    r = run(low)
    assert failing(r) == {("engram.memory", O, "")} and "0.0 GiB RAM available" in by(r, "engram.memory", O).message


def test_engram_deep_rehash():
    # --deep gathers the `engram_rehash` fact: sha256sum of every file in RAM
    secs = sections()
    marker = _engram_parts(secs[O]["engram"]["out"])["marker"]
    r = run(edit(copy.deepcopy(secs), O, "engram_rehash", marker), deep=True)
    assert by(r, "engram.checksums", O).status == "ok" and "re-hashed" in by(r, "engram.checksums", O).message
    bad = marker.replace(marker[:4], "0000", 1)
    r = run(edit(copy.deepcopy(secs), O, "engram_rehash", bad), deep=True)
    assert failing(r) == {("engram.checksums", O, "")}


def test_env_fabric_twin_left_out_and_gid_index():
    doc = yaml.safe_load((REC / "inventory.yaml").read_text())
    doc["hosts"]["head"]["fabric"] = doc["hosts"]["head"]["fabric"][:1] + doc["hosts"]["head"]["fabric"][2:]
    doc["hosts"]["worker"]["fabric"] = doc["hosts"]["worker"]["fabric"][:1] + doc["hosts"]["worker"]["fabric"][2:]
    inv = Inventory.model_validate(doc)
    secs = sections()
    for h in (H, W):  # the probes of a one-rail inventory: ping/route indexes shift
        secs[h] = {k: v for k, v in secs[h].items() if not k.startswith(("ping.", "route."))}
        secs[h]["ping.0"], secs[h]["route.0"] = HEALTHY[h]["ping.0"], HEALTHY[h]["route.0"]
        secs[h]["ping.1"], secs[h]["route.1"] = HEALTHY[h]["ping.2"], HEALTHY[h]["route.2"]
    r = run(secs, inv=inv)
    e = by(r, "env.fabric", H, "sparkctl-head")
    assert e.status == "warn" and "roceP2p1s0f0" in e.message and "twin" in e.message


# --- NCCL_IB_GID_INDEX against recorded GID tables (tests/unit/recorded/gids/README.md) ------------------

SHOW_GIDS = (Path(__file__).parent / "recorded" / "gids" / "show_gids_spark.txt").read_text()
REAL = {"head": "192.168.100.10", "worker": "192.168.100.11"}  # the recorded Spark's rail address, and its peer's


def _show_gids(text: str) -> dict[int, tuple[str, str, str]]:
    """show_gids rows -> {index: (sysfs type, GID, netdev)} (VER v1/v2 is gid_attrs/types' IB/RoCE v1 / RoCE v2)."""
    rows = {}
    for line in text.splitlines()[2:]:
        cols = [c.strip() for c in line.split("\t") if c.strip()]
        if len(cols) >= 6:
            rows[int(cols[2])] = ("RoCE v2" if cols[-2] == "v2" else "IB/RoCE v1", cols[3], cols[-1])
    return rows


def _like_recorded(ip: str, netdev: str, mac: str = "4ebb:47ff:fee8:9f39") -> dict[int, tuple[str, str, str]]:
    """The recorded table's shape for another device: v1/v2 of its fe80 GID, then of its IPv4 GID."""
    from ipaddress import IPv6Address

    v4 = IPv6Address(f"::ffff:{ip}").exploded
    fe80 = IPv6Address(f"fe80::{mac}").exploded
    return {
        0: ("IB/RoCE v1", fe80, netdev),
        1: ("RoCE v2", fe80, netdev),
        2: ("IB/RoCE v1", v4, netdev),
        3: ("RoCE v2", v4, netdev),
    }


def _gid_case(index: int, head_table=None, worker_table=None, extra_head_addr=None):
    """Doctor on the lab recording with the recorded Spark's rail (head) and its peer's (worker) at
    NCCL_IB_GID_INDEX=index; every other device has the same shape of table for its own address."""
    doc = yaml.safe_load((REC / "inventory.yaml").read_text())
    doc["runtime"]["env"]["NCCL_IB_GID_INDEX"] = str(index)
    for h, ip in REAL.items():
        doc["hosts"][h]["fabric"][0]["address"] = f"{ip}/24"
    inv = Inventory.model_validate(doc)
    secs = sections()
    for h, ip in REAL.items():
        _with_addresses(secs, h, RAIL, [f"{ip}/24"] + ([extra_head_addr] if h == H and extra_head_addr else []))
    tables = {H: head_table or _show_gids(SHOW_GIDS), W: worker_table or _like_recorded(REAL[W], RAIL, "4ebb:47ff:fee8:1234")}
    for h in (H, W, O):
        lines = []
        for link in inv.hosts[h].fabric:
            for d in link.rdma:
                table = tables[h] if link.device == RAIL and h in tables else _like_recorded(str(link.address.ip), link.device)
                kind, gid, netdev = table.get(index, ("missing", "0000:0000:0000:0000:0000:0000:0000:0000", ""))
                lines.append(f"{d} {kind}|{gid}|{netdev}\n")
        edit(secs, h, "gid", "".join(lines))
    return by(run(secs, inv=inv), "env.gid_index", H)


def test_gid_index_pinned_to_the_rails_roce_v2_ipv4_gid_passes():
    g = _gid_case(3)
    assert g.status == "ok" and "GID 3 on rocep1s0f0 is RoCE v2 192.168.100.10 (enp1s0f0np0)" in g.message


def test_gid_index_0_of_the_upstream_dspark_examples_works_back_to_back_and_warns_why():
    g = _gid_case(0)
    assert g.status == "warn" and "fe80 link-local GID" in g.message and "direct cable" in g.message
    assert "remove NCCL_IB_GID_INDEX" in g.fix
    assert _gid_case(1).status == "warn"  # RoCE v2 over fe80: direct cable only
    g = _gid_case(2)  # RoCE v1 over the rail's IPv4 address
    assert g.status == "warn" and "RoCE v1 is plain Ethernet" in g.message


def test_gid_index_that_cannot_work_fails_with_the_reason():
    # the RoCE v2 IPv4 GID moved from 3 to 4 on one device and left 3 empty (a field report's drift)
    drifted = _show_gids(SHOW_GIDS)
    drifted[4] = drifted.pop(3)
    g = _gid_case(3, head_table=drifted)
    assert g.status == "failed" and "GID 3 on rocep1s0f0 is an empty slot" in g.message and "remove NCCL_IB_GID_INDEX" in g.fix
    # NVIDIA's link-local address came up first: indexes 2 and 3 are its GIDs, ours moved to 4 and 5
    ll = {**_like_recorded("169.254.41.7", RAIL), **{i + 2: v for i, v in _show_gids(SHOW_GIDS).items() if i >= 2}}
    g = _gid_case(3, head_table=ll, extra_head_addr="169.254.41.7/16")
    assert g.status == "failed" and "169.254.41.7, the IPv4 link-local address" in g.message and "sparkctl up" in g.message
    # RoCE v2 at the head, v1 at the worker for the same index: the two ends cannot connect
    worker = _like_recorded(REAL[W], RAIL)
    worker[3] = ("IB/RoCE v1", worker[3][1], RAIL)
    g = _gid_case(3, worker_table=worker)
    assert g.status == "failed" and "RoCE v2 on rocep1s0f0 but IB/RoCE v1 on worker's rocep1s0f0" in g.message


def test_a_crashing_check_is_one_failure_not_a_traceback(monkeypatch):
    def boom(ctx, host, f):
        raise KeyError("surprise")

    import dataclasses

    monkeypatch.setitem(REGISTRY, "gpu.model", dataclasses.replace(REGISTRY["gpu.model"], fn=boom))
    r = run()
    assert {x.name for x in r if x.status == "failed"} == {"gpu.model"}
    assert "check crashed" in by(r, "gpu.model", H).message


def test_select_rejects_unknown_groups_and_names():
    from sparkctl.errors import InputError

    with pytest.raises(InputError, match="did you mean 'fabric'"):
        select(only=["fabrik"])
    with pytest.raises(InputError, match="did you mean 'fabric.mtu'"):
        select(ignore=["fabric.mtuu"])
    names = [c.name for c in select(only=["gpu,fabric"], ignore=["gpu.driver"])]
    assert "gpu.driver" not in names and "fabric.mtu" in names and "ssh.reachable" in names
    assert "fabric.bandwidth" in names  # a degraded ConnectX-7 shows only under traffic: probed by default


def test_docs_list_every_check_and_runbooks_exist():
    root = Path(__file__).parents[2]
    doc = (root / "docs" / "checks.md").read_text()
    for name, check in REGISTRY.items():
        assert f"`{name}`" in doc, name
        if check.runbook:
            assert (root / check.runbook_path).exists(), check.runbook_path


def _with_addresses(secs, host: str, device: str, addrs: list[str]):
    """Set a device's IPv4 addresses in a recorded `ip -j addr` section."""
    items = json.loads(secs[host]["ip_addr"]["out"])
    for it in items:
        if it["ifname"] == device:
            it["addr_info"] = [a for a in it.get("addr_info", []) if a["family"] != "inet"] + [
                {"family": "inet", "local": a.split("/")[0], "prefixlen": int(a.split("/")[1]), "scope": "global"} for a in addrs
            ]
    return edit(secs, host, "ip_addr", json.dumps(items))


NVIDIA_NETPLAN = (Path(__file__).parent / "recorded" / "netplan" / "40-cx7-link-local.yaml").read_text()
NVIDIA_STATIC = (Path(__file__).parent / "recorded" / "netplan" / "40-cx7-static-node1.yaml").read_text()


def _netplan(secs, host: str, files: dict[str, str]):
    """The `netplan` probe's answer (facts/network.netplan_probe): each file's path, then its base64."""
    import base64

    out = "".join(f"@@netplan {p}\n{base64.b64encode(t.encode()).decode()}\n" for p, t in files.items())
    return edit(secs, host, "netplan", out)


def test_fabric_address_warns_of_nvidias_link_local_netplan_and_says_up_takes_the_rail_over():
    # the healthy worker after NVIDIA's connect-two-sparks option 1: a 169.254.x/16 beside ours.
    # It works (a person would not call this cluster broken), so doctor warns, naming the file and the fix.
    secs = _with_addresses(sections(), W, RAIL, ["10.231.100.3/24", "169.254.41.7/16"])
    r = run(_netplan(secs, W, {"/etc/netplan/40-cx7.yaml": NVIDIA_NETPLAN}))
    assert failing(r) == set()
    a = by(r, "fabric.address", W, RAIL)
    assert a.status == "warn" and "169.254.41.7/16" in a.message and "/etc/netplan/40-cx7.yaml" in a.message
    assert "takes the rail over from /etc/netplan/40-cx7.yaml" in a.fix and ".bak" in a.fix
    # the file alone (someone deleted the address by hand): it comes back at the next boot
    r = run(_netplan(sections(), W, {"/etc/netplan/40-cx7.yaml": NVIDIA_NETPLAN}))
    a = by(r, "fabric.address", W, RAIL)
    assert a.status == "warn" and "also configures it (link-local: [ ipv4 ])" in a.message
    assert by(r, "fabric.address", W, "enP2p1s0f0np0").status == "ok"  # NVIDIA's file does not name this twin
    # a static address file on the rail: netplan would concatenate its address with ours
    r = run(_netplan(sections(), H, {"/etc/netplan/40-cx7.yaml": NVIDIA_STATIC}))
    assert "addresses 192.168.100.10/24" in by(r, "fabric.address", H, RAIL).message


def test_fabric_address_link_local_from_outside_netplan_and_in_place_of_ours():
    r = run(_with_addresses(sections(), W, RAIL, ["10.231.100.3/24", "169.254.41.7/16"]))
    a = by(r, "fabric.address", W, RAIL)
    assert a.status == "warn" and "from outside /etc/netplan" in a.message and "returns" in a.fix
    # only the link-local address, ours missing: the rail cannot carry the cluster's traffic
    r = run(_with_addresses(sections(), W, RAIL, ["169.254.41.7/16"]))
    a = by(r, "fabric.address", W, RAIL)
    assert a.status == "failed" and "has 169.254.41.7/16, not 10.231.100.3/24" in a.message and "IPv4 link-local" in a.message


def test_fabric_address_names_a_wrong_a_stray_and_a_peers_duplicate_address():
    # a wrong IP on the worker's rail (the right one absent)
    r = run(_with_addresses(sections(), W, "enp1s0f0np0", ["10.231.100.9/24"]))
    f = by(r, "fabric.address", W, "enp1s0f0np0")
    assert f.status == "failed" and "has 10.231.100.9/24, not 10.231.100.3/24" in f.message
    assert "ip addr del 10.231.100.9/24 dev enp1s0f0np0" in f.fix
    # the head's address added on the worker's rail: the worker is named, the head is not
    r = run(_with_addresses(sections(), W, "enp1s0f0np0", ["10.231.100.3/24", "10.231.100.2/24"]))
    f = by(r, "fabric.address", W, "enp1s0f0np0")
    assert f.status == "failed" and "10.231.100.2/24 (head's address: a duplicate on the fabric)" in f.message
    assert by(r, "fabric.address", H, "enp1s0f0np0").status == "ok"


def test_compile_cache_reports_the_cuda_jit_cache_and_warns_when_it_leaves_the_volume():
    warm = "present\nd ./3f2a\ni ./3f2a/rank_0_0/backbone/vllm_compile_cache.py\nk cuda_cache 327680\nk torch_extensions 12\n"
    c = by(run(applied_now(edit(sections(), H, "cache", warm))), "caches.compile", H)
    assert c.status == "ok" and "CUDA JIT cache 320 MiB" in c.message and c.data["cuda_cache_mib"] == 320
    # runtime.env moving the driver's cache back into the container (or disabling it): PTX is JIT-compiled every start
    d = INV.model_dump(mode="json")
    d["runtime"]["env"] = {**d["runtime"].get("env", {}), "CUDA_CACHE_PATH": "/root/.nv/ComputeCache"}
    c = by(run(edit(sections(), H, "cache", warm), inv=Inventory.model_validate(d)), "caches.compile", H)
    assert c.status == "warn" and "CUDA_CACHE_PATH=/root/.nv/ComputeCache is not on the volume" in c.message
    d["runtime"]["env"] = {"CUDA_CACHE_DISABLE": "1"}
    c = by(run(edit(sections(), H, "cache", warm), inv=Inventory.model_validate(d)), "caches.compile", H)
    assert c.status == "warn" and "CUDA_CACHE_DISABLE=1" in c.message


# --- the programs sparkctl runs on a host (the lab's `command -v` output, with lines taken away) ---

TOOLS_ALL = "/usr/local/bin/nvidia-container-runtime-hook\n/usr/bin/iperf3\n/usr/bin/rsync\n"


def test_without_the_nvidia_container_hook_gpu_containers_fails_and_preflight_blocks_up():
    secs = edit(sections(), W, "tools", "/usr/bin/iperf3\n/usr/bin/rsync\n")
    r = run(secs)
    assert failing(r) == {("host.gpu_containers", W, "")}
    fix = by(r, "host.gpu_containers", W).fix
    assert "nvidia-container-toolkit" in fix and "nvidia-ctk runtime configure --runtime=docker" in fix
    assert by(r, "host.gpu_containers", H).status == "ok"
    from sparkctl.steps.preflight import BLOCKING

    assert "host.gpu_containers" in BLOCKING and "host.tools" in BLOCKING


def test_rsync_is_needed_only_where_the_model_is_copied_and_iperf3_only_warns():
    from sparkctl.inventory.models import Weights

    no_rsync = "/usr/local/bin/nvidia-container-runtime-hook\n/usr/bin/iperf3\n"
    assert by(run(edit(sections(), W, "tools", no_rsync)), "host.tools", W).status == "ok"  # no `weights`: no copy
    with_weights = INV.model_copy(update={"weights": Weights(repo="deepseek-ai/DeepSeek-V4-Flash", revision="main")})
    r = run(edit(sections(), W, "tools", no_rsync), inv=with_weights)
    assert failing(r) == {("host.tools", W, "")}
    t = by(r, "host.tools", W)
    assert "rsync" in t.message and "apt-get install -y rsync" in t.fix
    r = run(edit(sections(), H, "tools", "/usr/local/bin/nvidia-container-runtime-hook\n/usr/bin/rsync\n"), inv=with_weights)
    assert failing(r) == set() and by(r, "host.tools", H).status == "warn" and "iperf3" in by(r, "host.tools", H).message
    assert by(run(edit(sections(), O, "tools", TOOLS_ALL), inv=with_weights), "host.tools", O).status == "ok"
