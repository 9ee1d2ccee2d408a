"""`sparkctl doctor` against the lab: healthy -> nothing fails; each fault -> exactly its checks fail.

Doctor runs on the lab's own inventory (inventories/lab.yaml). The fixture first makes the lab look
like a cluster `sparkctl up` has converged, adding only what is missing and removing on teardown
only what it added: the runtime image pulled on every node, the cache directory on every node, the
Engram tables placed in a tmpfs on the offload host with their placement record.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml
from labcli import run

from sparkctl_lab.paths import INVENTORY_PATH

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
# the inventory `lab up` wrote: inventories/lab.yaml on the lab (test_lab_topology holds the two
# together), with its addresses moved on a second lab (SPARKCTL_LAB_INSTANCE)
LAB_INVENTORY = INVENTORY_PATH
LAB = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())  # its caches and Engram: the same on both
CACHE = LAB["caches"]["host_path"]
ENGRAM = LAB["engram"]
RUNTIME_HOSTS = ("head", "worker", "offload")
FENCE = "127.0.0.0/8,10.231.0.0/16"  # the network rule: loopback and the lab only
# What a healthy lab may still warn about: an empty compile cache ("next start will be cold"), a
# machine with little free disk, and the lab inventory's memlock limit (its dockerd cannot raise
# RLIMIT_MEMLOCK; real hosts keep -1). Nothing may fail.
HEALTHY_WARNINGS = {"caches.compile", "host.disk", "host.memlock"}
# The lab's runtime is shared with whoever else is testing `up`: fault tests leave the runtime
# group out (test_doctor_runtime.py starts its own runtime and judges that group).
NOT_RUNTIME = "ssh,host,gpu,fabric,env,images,caches,engram"


def sh(lab, host: str, cmd: str, check: bool = True) -> str:
    r = lab.host_exec(host, ["sh", "-c", cmd], timeout=120)
    if check and r.returncode != 0:
        raise AssertionError(f"{host}: {cmd}: exit {r.returncode}: {r.stdout}{r.stderr}")
    return r.stdout


def variant(tmp_path: Path, name: str, edit) -> Path:
    doc = yaml.safe_load(LAB_INVENTORY.read_text())
    edit(doc)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def prepare(lab) -> list[tuple[str, str]]:
    """What `sparkctl up` leaves behind, minus the running runtime; returns the undo commands."""
    undo = []
    for h in RUNTIME_HOSTS:
        if sh(lab, h, f"[ -d {CACHE} ] && echo yes || echo no").strip() == "no":
            sh(lab, h, f"mkdir -p {CACHE}")
            undo.append((h, f"rmdir {CACHE} 2>/dev/null; true"))
        sh(lab, h, f"docker image inspect {lab.IMAGE} >/dev/null 2>&1 || docker pull -q {lab.IMAGE}")
    src, dst = ENGRAM["source"], ENGRAM["target"]
    placed = sh(lab, "offload", f"mountpoint -q {dst} && [ -f {dst}/.sparkctl-placed ] && echo yes || echo no").strip()
    if placed == "no":
        size = int(ENGRAM["size_gib"] * (1 << 30))
        sh(
            lab,
            "offload",
            f"mkdir -p {dst} && {{ mountpoint -q {dst} || mount -t tmpfs -o size={size},mode=0755 sparkctl-engram {dst}; }} && "
            f"cp -a {src}/. {dst}/ && cd {dst} && "
            "find . -type f ! -name SHA256SUMS ! -name .sparkctl-placed | sort | xargs sha256sum | sed 's|  ./|  |' > .sparkctl-placed",
        )
        undo.append(("offload", f"umount {dst}"))
    return undo


@pytest.fixture(scope="module")
def doctor_lab(lab):
    undo = prepare(lab)
    yield lab, LAB_INVENTORY
    lab.clear_faults()
    for host, cmd in undo:
        sh(lab, host, cmd, check=False)


def run_doctor(inv: Path, *args: str) -> tuple[int, dict, str]:
    env = {**os.environ, "SPARKCTL_ONLY_NETWORKS": FENCE, "COLUMNS": "200"}
    r = run(["doctor", "-i", str(inv), *args], timeout=300, env=env)
    doc = json.loads(r.stdout) if "--json" in args else {}
    return r.returncode, doc, r.stderr


def failing(doc: dict) -> set[tuple[str, str, str]]:
    return {(c["name"], c["host"], c.get("target") or "") for c in doc["checks"] if c["status"] == "failed"}


def eventually_doctor(inv: Path, want, *args: str, timeout: float = 5.0):
    """Link changes reach the simulated sysfs through a netlink watcher: give doctor a moment."""
    deadline = time.monotonic() + timeout
    while True:
        rc, doc, err = run_doctor(inv, "--json", *args)
        if want(doc) or time.monotonic() > deadline:
            return rc, doc, err
        time.sleep(0.2)


# --- healthy -------------------------------------------------------------------------------------


def test_healthy_lab_nothing_fails(doctor_lab):
    lab, inv = doctor_lab
    rc, doc, _ = run_doctor(inv, "--json", "--only", NOT_RUNTIME)
    assert failing(doc) == set() and rc == 0, failing(doc)
    warned = {c["name"] for c in doc["checks"] if c["status"] == "warn"}
    assert warned <= HEALTHY_WARNINGS, warned
    for c in doc["checks"]:
        if c["name"].startswith(("ssh.", "gpu.", "fabric.", "images.", "engram.", "env.")):
            assert c["status"] == "ok", c
    assert doc["summary"]["failed"] == 0 and doc["seconds"] > 0
    # every rail of every host was judged, in both directions
    pings = {(c["host"], c["target"]) for c in doc["checks"] if c["name"] == "fabric.ping"}
    assert len(pings) == sum(len(h["fabric"]) for h in yaml.safe_load(inv.read_text())["hosts"].values())


def test_full_run_names_every_check(doctor_lab):
    lab, inv = doctor_lab
    rc, doc, _ = run_doctor(inv, "--json")
    from sparkctl.checks import REGISTRY

    # every check of a normal run shows up (fabric.bandwidth only with --deep)
    # (the fleet's checks are `sparkctl fleet doctor`'s)
    assert {c["name"] for c in doc["checks"]} == {n for n, c in REGISTRY.items() if not c.deep_only and not c.fleet}
    runtime = [c for c in doc["checks"] if c["name"].startswith("runtime.")]
    if not any(c["status"] != "skipped" for c in runtime):  # nobody's runtime up: each check says so
        assert all("not running" in c["message"] for c in runtime)


def test_table_on_stdout(doctor_lab):
    lab, inv = doctor_lab
    env = {**os.environ, "SPARKCTL_ONLY_NETWORKS": FENCE, "COLUMNS": "200"}
    r = run(["doctor", "-i", str(inv), "--only", "fabric", "-v"], timeout=120, env=env)
    assert r.returncode == 0 and r.stderr == ""  # the table is the answer (`doctor | less`)
    # -v: every row
    assert "fabric.ping" in r.stdout and "enP2p1s0f0np0" in r.stdout and " ok " in r.stdout
    assert "gpu.model" not in r.stdout  # --only
    assert " in " in r.stdout.splitlines()[-1] and r.stdout.rstrip().endswith(" s")
    # the default: a line per group, nothing expanded on a healthy cluster, the same summary line
    r = run(["doctor", "-i", str(inv), "--only", "fabric"], timeout=120, env=env)
    assert r.returncode == 0 and r.stderr == "" and "fabric.ping" not in r.stdout
    assert any(line.startswith("fabric ") for line in r.stdout.splitlines())
    assert r.stdout.rstrip().endswith(" s")


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
    # the rail shaped to 250 Mb/s both ways, its speed file nominal: only traffic shows it, on both ends
    "degraded-speed": ((W, "speed", RAIL, None), {("fabric.bandwidth", W, RAIL), ("fabric.bandwidth", H, RAIL)}),
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
    "fabric.bandwidth": "mlxfwreset",
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
        rc, doc, _ = eventually_doctor(inv, lambda d: failing(d) == expected, "--only", NOT_RUNTIME)
    finally:
        lab.clear_faults()
    assert failing(doc) == expected
    assert rc == 1 and doc["summary"]["failed_checks"] == sorted({n for n, _, _ in expected})
    for c in doc["checks"]:
        if c["status"] == "failed":
            assert c["fix"] and FIX_WORDS[c["name"]] in c["fix"], c
            assert c["runbook"] == f"docs/runbooks/{c['name']}.md" and (REPO / c["runbook"]).exists()


def _docker(lab, host: str):
    import docker

    return docker.DockerClient(base_url=f"unix://{lab.docker_socket(host)}")


def test_image_missing_on_one_node(doctor_lab):
    lab, inv = doctor_lab
    client = _docker(lab, W)
    saved = client.images.get(lab.IMAGE)
    repo, tag = lab.IMAGE.rsplit(":", 1)
    saved.tag(repo, "doctor-kept")  # a second tag: removing the runtime's tag only untags
    client.images.remove(lab.IMAGE)
    try:
        rc, doc, _ = run_doctor(inv, "--json", "--only", "images")
        assert failing(doc) == {("images.present", W, lab.IMAGE)} and rc == 1
        same = [c for c in doc["checks"] if c["name"] == "images.same" and c["host"] == W]
        assert same[0]["status"] == "skipped"
    finally:
        saved.tag(repo, tag)
        client.images.remove(f"{repo}:doctor-kept")
    assert client.images.get(lab.IMAGE).id == saved.id


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
        bad = next(c for c in doc["checks"] if c["status"] == "failed")
        from sparkctl.transport.image_identity import identity_of_inspect, short

        # images are named by the identity both image stores agree on (facts/docker.py), not a docker ID
        assert short(identity_of_inspect(saved.attrs)) in bad["message"] and "head" in bad["message"]
        assert FIX_WORDS["images.same"] in bad["fix"]
    finally:
        saved.tag(repo, tag)
        client.images.remove(other.id, force=True)
    assert client.images.get(lab.IMAGE).id == saved.id


def test_cache_dir_missing_on_one_node(doctor_lab):
    lab, inv = doctor_lab
    hidden = f"{CACHE}.doctor-hidden"  # moved aside, not deleted: it may hold someone's compiled graphs
    sh(lab, W, f"mv {CACHE} {hidden}")
    try:
        rc, doc, _ = run_doctor(inv, "--json", "--only", NOT_RUNTIME)
        assert failing(doc) == {("caches.volume", W, "")} and rc == 1
        fail = next(c for c in doc["checks"] if c["status"] == "failed")
        assert f"mkdir -p {CACHE}" in fail["fix"]
    finally:
        sh(lab, W, f"mv {hidden} {CACHE}")


def test_compile_cache_present_is_warm(doctor_lab):
    lab, inv = doctor_lab

    def compile_check():
        rc, doc, _ = run_doctor(inv, "--json", "--only", "caches", "--hosts", "head")
        return next(c for c in doc["checks"] if c["name"] == "caches.compile")

    before = compile_check()
    if "no compiled graphs" in before["message"]:
        assert before["status"] == "warn" and "next start compiles from scratch" in before["message"]
    mine = f"{CACHE}/torch_compile_cache/doctor0test0hash"
    sh(lab, H, f"mkdir -p {mine}/rank_0_0/backbone && echo '{{}}' > {mine}/rank_0_0/backbone/vllm_compile_cache.py")
    try:
        after = compile_check()
        assert "no compiled graphs" not in after["message"] and "compiled graphs for" in after["message"]
    finally:
        sh(lab, H, f"rm -rf {mine}")


def test_engram_not_placed_warns_with_up_as_fix(doctor_lab, tmp_path):
    lab, _ = doctor_lab
    inv = variant(tmp_path, "unplaced", lambda d: d["engram"].update(target="/mnt/engram-doctor-unplaced"))
    rc, doc, _ = run_doctor(inv, "--json", "--only", "engram")
    placed = next(c for c in doc["checks"] if c["name"] == "engram.placed")
    assert placed["status"] == "warn" and "not placed" in placed["message"] and "sparkctl up" in placed["fix"]
    assert next(c for c in doc["checks"] if c["name"] == "engram.checksums")["status"] == "skipped"
    assert rc == 0


def test_engram_copy_differs_fails_checksums_deep(doctor_lab):
    lab, inv = doctor_lab
    dst, src = ENGRAM["target"], ENGRAM["source"]
    table = sh(lab, O, f"cd {dst} && ls | grep -v SHA256SUMS | head -n 1").strip()
    sh(lab, O, f"printf 'X' | dd of={dst}/{table} bs=1 seek=100 conv=notrunc 2>/dev/null")
    try:
        rc, doc, _ = run_doctor(inv, "--json", "--only", "engram")
        assert failing(doc) == set()  # same sizes, same record: only re-hashing can tell
        rc, doc, _ = run_doctor(inv, "--json", "--only", "engram,fabric", "--deep", "--hosts", "head,offload")
        assert failing(doc) == {("engram.checksums", O, "")} and rc == 1
        assert table in next(c for c in doc["checks"] if c["status"] == "failed")["message"]
        bw = [c for c in doc["checks"] if c["name"] == "fabric.bandwidth"]
        assert bw and all(c["status"] == "ok" and c["data"]["gbps"] > 0 for c in bw)  # the lab's veths: a figure
    finally:
        sh(lab, O, f"cp {src}/{table} {dst}/{table}")


def test_unreachable_host_is_one_failure_not_a_traceback(doctor_lab, tmp_path):
    lab, _ = doctor_lab

    def unreachable(d):
        d["hosts"]["worker"]["ssh"]["port"] = 2222  # nothing listens there
        d["hosts"]["worker"]["ssh"]["host_key_policy"] = "accept-new"  # [10.231.0.12]:2222 is in no known_hosts
        d["ssh_defaults"]["connect_timeout"] = 1

    rc, out, err = run_doctor(variant(tmp_path, "bad", unreachable), "--json", "--only", "gpu")
    assert rc == 1 and "Traceback" not in err
    worker = [c for c in out["checks"] if c["host"] == "worker"]
    assert [c["name"] for c in worker if c["status"] == "failed"] == ["ssh.reachable"]
    assert "cannot connect" in worker[0]["message"] and worker[0]["fix"]
    assert all(c["status"] == "skipped" for c in worker if c["name"] != "ssh.reachable")
    assert not [c for c in out["checks"] if c["host"] != "worker" and c["status"] == "failed"]
