"""`sparkctl doctor` against the lab: healthy -> nothing fails; each fault -> exactly its checks fail.

The lab's hosts share the machine's /var/lib, /srv and /mnt (only /etc, /root, /run, /sys and /dev
are per host), so a "cache dir missing on one node" cannot be made under the inventory's real
paths without breaking every node. The tests therefore run doctor on a copy of the lab inventory
whose cache dir and Engram tables live under each host's private /run (the same checks, the same
code paths), and prepare what `sparkctl up` would have done: the image pulled on every node, the
cache dirs, the Engram tables placed in a tmpfs with their placement record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
BASE = "/run/sparkctl-doctor"
DISK = f"{BASE}/disk"  # a roomy tmpfs (size is only a limit): /run itself is 256 MiB, too small for host.disk
CACHE = f"{DISK}/cache"
ENGRAM_SRC = f"{BASE}/engram-src"
ENGRAM_DST = f"{BASE}/engram"
RUNTIME_HOSTS = ("head", "worker", "offload")
FENCE = "127.0.0.0/8,10.231.0.0/16"  # the network rule: loopback and the lab only
# What a healthy lab may still warn about: an empty compile cache ("next start will be cold")
# and a machine with little free disk. Nothing may fail.
HEALTHY_WARNINGS = {"caches.compile", "host.disk"}


def sh(lab, host: str, cmd: str, check: bool = True) -> str:
    r = lab.host_exec(host, ["sh", "-c", cmd], timeout=120)
    if check and r.returncode != 0:
        raise AssertionError(f"{host}: {cmd}: exit {r.returncode}: {r.stdout}{r.stderr}")
    return r.stdout


def test_inventory(tmp_path_factory) -> Path:
    doc = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
    doc["caches"]["host_path"] = CACHE
    doc["engram"].update(source=ENGRAM_SRC, target=ENGRAM_DST, size_gib=0.01, min_free_gib=0.05)
    path = tmp_path_factory.mktemp("doctor") / "lab-doctor.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


test_inventory.__test__ = False  # a helper, not a test


def prepare(lab) -> None:
    """What `sparkctl up` leaves behind, minus the running runtime (idempotent)."""
    for h in RUNTIME_HOSTS:
        sh(lab, h, f"mkdir -p {DISK} && {{ mountpoint -q {DISK} || mount -t tmpfs -o size=64g sparkctl-doctor {DISK}; }}")
        sh(lab, h, f"mkdir -p {CACHE} && {{ docker image inspect {lab.IMAGE} >/dev/null 2>&1 || docker pull -q {lab.IMAGE}; }}")
    size = int(0.01 * (1 << 30))
    sh(
        lab,
        "offload",
        f"mkdir -p {ENGRAM_SRC} {ENGRAM_DST} && cd {ENGRAM_SRC} && "
        "{ [ -f table0.bin ] || head -c 3000000 /dev/urandom > table0.bin; } && "
        "{ [ -f table1.bin ] || head -c 2000000 /dev/urandom > table1.bin; } && "
        "sha256sum table0.bin table1.bin > SHA256SUMS && "
        f"{{ mountpoint -q {ENGRAM_DST} || mount -t tmpfs -o size={size},mode=0755 sparkctl-engram {ENGRAM_DST}; }} && "
        f"cp -a {ENGRAM_SRC}/. {ENGRAM_DST}/ && cp SHA256SUMS {ENGRAM_DST}/.sparkctl-placed",
    )


def unprepare(lab) -> None:
    sh(lab, "offload", f"umount {ENGRAM_DST} 2>/dev/null; true", check=False)
    for h in RUNTIME_HOSTS:
        sh(lab, h, f"umount {DISK} 2>/dev/null; rm -rf {BASE}", check=False)


@pytest.fixture(scope="module")
def doctor_lab(lab, tmp_path_factory):
    inv = test_inventory(tmp_path_factory)
    prepare(lab)
    yield lab, inv
    lab.clear_faults()
    unprepare(lab)


def run_doctor(inv: Path, *args: str) -> tuple[int, dict, str]:
    env = {**os.environ, "SPARKCTL_ONLY_NETWORKS": FENCE, "COLUMNS": "200"}
    r = subprocess.run(
        [sys.executable, "-m", "sparkctl", "doctor", "-i", str(inv), *args],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    doc = json.loads(r.stdout) if "--json" in args else {}
    return r.returncode, doc, r.stderr


def failing(doc: dict) -> set[tuple[str, str, str]]:
    return {(c["name"], c["host"], c.get("target") or "") for c in doc["checks"] if c["status"] == "fail"}


def eventually_doctor(inv: Path, want, *args: str, timeout: float = 5.0):
    """Link changes reach the simulated sysfs through a netlink watcher: give doctor a moment."""
    deadline = time.monotonic() + timeout
    while True:
        rc, doc, err = run_doctor(inv, "--json", *args)
        if want(doc) or time.monotonic() > deadline:
            return rc, doc, err
        time.sleep(0.2)


# --- healthy -------------------------------------------------------------------------------------


def test_healthy_lab_nothing_fails_and_runtime_reports_not_running(doctor_lab):
    lab, inv = doctor_lab
    rc, doc, _ = run_doctor(inv, "--json")
    assert failing(doc) == set() and rc == 0, failing(doc)
    warned = {c["name"] for c in doc["checks"] if c["status"] == "warn"}
    assert warned <= HEALTHY_WARNINGS
    names = {c["name"] for c in doc["checks"]}
    # every check of a normal run shows up (fabric.bandwidth only with --deep)
    from sparkctl.checks import REGISTRY

    assert names == {n for n, c in REGISTRY.items() if not c.deep_only}
    runtime = [c for c in doc["checks"] if c["name"].startswith("runtime.")]
    assert runtime and all(c["status"] == "skipped" and "not running" in c["message"] for c in runtime)
    for c in doc["checks"]:
        if c["name"].startswith(("ssh.", "gpu.", "fabric.", "images.", "engram.", "env.")):
            assert c["status"] == "ok", c
    assert doc["summary"]["fail"] == 0 and doc["seconds"] > 0
    # every rail of every host was judged, in both directions
    pings = {(c["host"], c["target"]) for c in doc["checks"] if c["name"] == "fabric.ping"}
    assert len(pings) == sum(len(h["fabric"]) for h in yaml.safe_load(inv.read_text())["hosts"].values())


def test_table_on_stderr_json_on_stdout(doctor_lab):
    lab, inv = doctor_lab
    env = {**os.environ, "SPARKCTL_ONLY_NETWORKS": FENCE, "COLUMNS": "200"}
    r = subprocess.run([sys.executable, "-m", "sparkctl", "doctor", "-i", str(inv), "--only", "fabric"],
                       capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert r.returncode == 0 and r.stdout == ""
    assert "fabric.ping" in r.stderr and "enP2p1s0f0np0" in r.stderr and " ok " in r.stderr
    assert "gpu.model" not in r.stderr  # --only
    assert " in " in r.stderr.splitlines()[-1] and r.stderr.rstrip().endswith(" s")


def test_only_ignore_and_hosts(doctor_lab):
    lab, inv = doctor_lab
    rc, doc, _ = run_doctor(inv, "--json", "--only", "gpu,ssh", "--ignore", "ssh.clock", "--hosts", "worker")
    assert rc == 0
    assert {c["host"] for c in doc["checks"]} == {"worker"}
    assert {c["name"].split(".")[0] for c in doc["checks"]} == {"gpu", "ssh"}
    assert "ssh.clock" not in {c["name"] for c in doc["checks"]}
    rc, doc, _ = run_doctor(inv, "--json", "--only", "fabrik")
    assert rc == 2 and "did you mean 'fabric'" in doc["error"]


# --- one fault at a time: exactly the checks that name it fail ----------------------------------
# (host, fault kind, target, value) -> the failing (check, host, target) set. A link down
# legitimately fails several checks of that rail, on both ends (the peer loses carrier).

W, H, O = "worker", "head", "offload"
RAIL = "enp1s0f0np0"
FAULTS = {
    "link-down": (
        (W, "link-down", RAIL, None),
        {
            ("fabric.link", W, RAIL), ("fabric.rdma", W, "rocep1s0f0"), ("fabric.ping", W, RAIL), ("fabric.route", W, RAIL),
            ("fabric.link", H, RAIL), ("fabric.rdma", H, "rocep1s0f0"), ("fabric.ping", H, RAIL),
        },
    ),
    "wrong-mtu": ((W, "mtu", RAIL, 1500), {("fabric.mtu", W, RAIL), ("fabric.ping", W, RAIL), ("fabric.ping", H, RAIL)}),
    "degraded-speed": ((W, "speed", RAIL, 13000), {("fabric.speed", W, RAIL)}),
    "rdma-down": ((W, "rdma-down", "rocep1s0f0", None), {("fabric.rdma", W, "rocep1s0f0")}),
    "gpu-missing": ((W, "gpu-missing", None, None), {("gpu.model", W, "")}),
    "offload-gpu-missing": ((O, "gpu-missing", "1", None), {("gpu.model", O, "")}),
    "wrong-driver": ((W, "driver", None, "580.82.09"), {("gpu.driver", W, "")}),
    "foreign-gpu-process": ((H, "gpu-process", "0", 16384), {("gpu.processes", H, "")}),
}  # fmt: skip

FIX_WORDS = {  # the fix line names what to do
    "fabric.link": "ip link set",
    "fabric.mtu": "mtu 9000",
    "fabric.speed": "ethtool",
    "fabric.rdma": "ibdev2netdev",
    "fabric.ping": "ping -M do -s 8972",
    "fabric.route": "fabric.address",
    "gpu.model": "nvidia-smi -L",
    "gpu.driver": "install driver 580.95.05",
    "gpu.processes": "ps -o",
    "images.present": "docker pull",
    "images.same": "docker save",
    "caches.volume": "mkdir -p",
}


@pytest.mark.parametrize("case", list(FAULTS))
def test_each_lab_fault_fails_exactly_its_checks(doctor_lab, case):
    lab, inv = doctor_lab
    (host, kind, target, value), expected = FAULTS[case]
    lab.clear_faults()
    lab.fault(host, kind, target, value)
    try:
        rc, doc, _ = eventually_doctor(inv, lambda d: failing(d) == expected)
    finally:
        lab.clear_faults()
    assert failing(doc) == expected
    assert rc == 1 and doc["summary"]["failed_checks"] == sorted({n for n, _, _ in expected})
    for c in doc["checks"]:
        if c["status"] == "fail":
            assert c["fix"] and FIX_WORDS[c["name"]] in c["fix"], c
            assert c["runbook"] == f"docs/runbooks/{c['name']}.md" and (REPO / c["runbook"]).exists()


def _docker(lab, host: str):
    import docker

    return docker.DockerClient(base_url=f"unix://{lab.docker_socket(host)}")


def test_image_missing_on_one_node(doctor_lab):
    lab, inv = doctor_lab
    client = _docker(lab, W)
    image = client.images.get(lab.IMAGE)
    saved = image.id
    client.images.remove(lab.IMAGE)  # untagged and deleted: pulled again afterwards (same ID)
    try:
        rc, doc, _ = run_doctor(inv, "--json", "--only", "images")
        assert failing(doc) == {("images.present", W, lab.IMAGE)} and rc == 1
        same = [c for c in doc["checks"] if c["name"] == "images.same" and c["host"] == W]
        assert same[0]["status"] == "skipped"
    finally:
        sh(lab, W, f"docker pull -q {lab.IMAGE}")
    assert client.images.get(lab.IMAGE).id == saved


def test_image_mismatch_on_one_node(doctor_lab):
    import io
    import tarfile

    lab, inv = doctor_lab
    client = _docker(lab, W)
    saved = client.images.get(lab.IMAGE)
    # a different image under the runtime's tag, as a stale or foreign build would be
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b"not the runtime\n"
        info = tarfile.TarInfo("README")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    repo, tag = lab.IMAGE.rsplit(":", 1)
    client.api.import_image_from_data(buf.getvalue(), repository=repo, tag=tag)
    other = client.images.get(lab.IMAGE)
    assert other.id != saved.id
    try:
        rc, doc, _ = run_doctor(inv, "--json", "--only", "images")
        assert failing(doc) == {("images.same", W, lab.IMAGE)} and rc == 1
        bad = next(c for c in doc["checks"] if c["status"] == "fail")
        assert saved.id[7:19] in bad["message"] and "head" in bad["message"]
        assert FIX_WORDS["images.same"] in bad["fix"]
    finally:
        saved.tag(repo, tag)
        client.images.remove(other.id, force=True)
    assert client.images.get(lab.IMAGE).id == saved.id


def test_cache_dir_missing_on_one_node(doctor_lab):
    lab, inv = doctor_lab
    sh(lab, W, f"rm -rf {CACHE}")
    try:
        rc, doc, _ = run_doctor(inv, "--json")
        assert failing(doc) == {("caches.volume", W, "")} and rc == 1
        fail = next(c for c in doc["checks"] if c["status"] == "fail")
        assert f"mkdir -p {CACHE}" in fail["fix"]
    finally:
        sh(lab, W, f"mkdir -p {CACHE}")


def test_compile_cache_present_is_warm(doctor_lab):
    lab, inv = doctor_lab
    rank = f"{CACHE}/torch_compile_cache/0123abcd/rank_0_0/backbone"
    sh(lab, H, f"mkdir -p {rank} && echo '{{}}' > {rank}/vllm_compile_cache.py")
    try:
        rc, doc, _ = run_doctor(inv, "--json", "--only", "caches", "--hosts", "head")
        c = next(c for c in doc["checks"] if c["name"] == "caches.compile")
        assert c["status"] == "ok" and "compiled graphs for 1 config" in c["message"]
    finally:
        sh(lab, H, f"rm -rf {CACHE}/torch_compile_cache")
    rc, doc, _ = run_doctor(inv, "--json", "--only", "caches", "--hosts", "head")
    c = next(c for c in doc["checks"] if c["name"] == "caches.compile")
    assert c["status"] == "warn" and "cold" in c["message"]


def test_engram_not_placed_warns_with_up_as_fix(doctor_lab):
    lab, inv = doctor_lab
    sh(lab, O, f"umount {ENGRAM_DST}")
    try:
        rc, doc, _ = run_doctor(inv, "--json", "--only", "engram")
        placed = next(c for c in doc["checks"] if c["name"] == "engram.placed")
        assert placed["status"] == "warn" and "sparkctl up" in placed["fix"]
        assert next(c for c in doc["checks"] if c["name"] == "engram.checksums")["status"] == "skipped"
        assert rc == 0
    finally:
        prepare(lab)


def test_engram_copy_differs_fails_checksums_deep(doctor_lab):
    lab, inv = doctor_lab
    sh(lab, O, f"printf 'X' | dd of={ENGRAM_DST}/table1.bin bs=1 seek=100 conv=notrunc 2>/dev/null")
    try:
        rc, doc, _ = run_doctor(inv, "--json", "--only", "engram")
        assert failing(doc) == set()  # same sizes: only re-hashing can tell
        rc, doc, _ = run_doctor(inv, "--json", "--only", "engram,fabric", "--deep", "--hosts", "head,offload")
        assert ("engram.checksums", O, "") in failing(doc) and rc == 1
        bw = [c for c in doc["checks"] if c["name"] == "fabric.bandwidth"]
        assert bw and all(c["status"] == "ok" and c["data"]["gbps"] > 0 for c in bw)
    finally:
        sh(lab, O, f"cp {ENGRAM_SRC}/table1.bin {ENGRAM_DST}/table1.bin")


def test_unreachable_host_is_one_failure_not_a_traceback(doctor_lab, tmp_path):
    lab, inv = doctor_lab
    doc = yaml.safe_load(inv.read_text())
    doc["hosts"]["worker"]["ssh"]["port"] = 2222  # nothing listens there
    doc["ssh_defaults"]["connect_timeout"] = 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc, sort_keys=False))
    rc, out, err = run_doctor(bad, "--json", "--only", "gpu")
    assert rc == 1 and "Traceback" not in err
    worker = [c for c in out["checks"] if c["host"] == "worker"]
    assert [c["name"] for c in worker if c["status"] == "fail"] == ["ssh.reachable"]
    assert all(c["status"] == "skipped" for c in worker if c["name"] != "ssh.reachable")
    assert all(c["status"] == "ok" for c in out["checks"] if c["host"] == "head")
