"""`sparkctl up` on the lab: converge, no-op, --force, drift repaired and only drift, warm restart.

Runs the real CLI (`python -m sparkctl up --json`) against the lab's real sshd/dockerd, and reads
the results the way a script would. The tests share one converged cluster and run in order.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest
import yaml
from labcli import HEAD_IP, run

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "SPARKCTL_ONLY_NETWORKS": "127.0.0.0/8,10.231.0.0/16"}


def sparkctl(*args: str, check_rc: int | None = 0) -> dict:
    p = run([*args, "--json"], env=ENV)
    assert "Traceback" not in p.stderr, p.stderr
    doc = json.loads(p.stdout)
    if check_rc is not None:
        assert p.returncode == check_rc, (p.returncode, json.dumps(doc, indent=1)[-3000:], p.stderr[-2000:])
    return doc


def changed(doc: dict) -> set[tuple[str, str]]:
    return {(r["host"], r["step"]) for r in doc["results"] if r["status"] == "changed"}


def container_id(lab, host: str, name: str) -> str:
    return lab.host_exec(host, ["docker", "inspect", "-f", "{{.Id}}", name], check=True).stdout.strip()


@pytest.fixture(scope="module")
def inventory(lab, tmp_path_factory) -> Path:
    return Path(lab.INVENTORY_PATH)


@pytest.fixture(scope="module")
def converged(lab, inventory):
    # start from a stopped runtime (images, caches and Engram stay, as `down` promises)
    down = sparkctl("down", "-i", str(inventory))
    assert not down["failed"]
    for h in ("head", "worker", "offload"):
        assert lab.host_exec(h, ["docker", "ps", "-q", "--filter", "label=io.sparkctl.cluster"]).stdout.strip() == ""
    doc = sparkctl("up", "-i", str(inventory))
    assert doc["failed"] == 0
    return doc


def test_up_brings_the_splice_shape_to_serving(lab, converged):
    hosts = converged["hosts"]
    assert set(hosts) == {"head", "worker", "offload"}
    # the engine (on the head's loopback), through the gateway's engine route
    assert f"serving at http://{HEAD_IP}:8888/gateway/engine" in hosts["head"]["runtime"]["message"]
    assert "smoke completion ok" in hosts["head"]["runtime"]["message"]
    for h in ("head", "worker", "offload"):
        assert "jumbo ping ok" in hosts[h]["fabric"]["message"]
    assert hosts["offload"]["engram"]["status"] in ("ok", "changed")
    models = httpx.get(f"http://{HEAD_IP}:8888/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["deepseek-v4.1-flash"]
    assert models["data"][0]["max_model_len"] == 327680


def test_second_up_changes_nothing_and_keeps_the_runtime(lab, inventory, converged):
    before = container_id(lab, "head", "sparkctl-head")
    doc = sparkctl("up", "-i", str(inventory))
    assert doc["changed"] == 0 and doc["failed"] == 0
    assert container_id(lab, "head", "sparkctl-head") == before
    assert "running config" in doc["hosts"]["head"]["runtime"]["message"]
    assert "already" in doc["hosts"]["head"]["fabric"]["message"]


def test_check_mode_shows_the_plan_and_changes_nothing(lab, inventory, converged):
    # the second twin: a half-configured rail that carries Ray's traffic would (really) kill the engine
    lab.host_exec("worker", ["ip", "link", "set", "enP2p1s0f0np0", "mtu", "1500"], check=True)
    try:
        doc = sparkctl("up", "-i", str(inventory), "--check")
        assert changed(doc) == {("worker", "fabric")}
        assert "set MTU 9000 on enP2p1s0f0np0 (now 1500)" in doc["hosts"]["worker"]["fabric"]["message"]
        mtu = lab.host_exec("worker", ["cat", "/sys/class/net/enP2p1s0f0np0/mtu"]).stdout.strip()
        assert mtu == "1500"  # --check changed nothing
    finally:
        lab.host_exec("worker", ["ip", "link", "set", "enP2p1s0f0np0", "mtu", "9000"], check=True)


def test_mtu_changed_by_hand_is_repaired_by_the_fabric_step_only(lab, inventory, converged):
    lab.host_exec("worker", ["ip", "link", "set", "enP2p1s0f0np0", "mtu", "1500"], check=True)
    doc = sparkctl("up", "-i", str(inventory))
    assert changed(doc) == {("worker", "fabric")}
    assert lab.host_exec("worker", ["cat", "/sys/class/net/enP2p1s0f0np0/mtu"]).stdout.strip() == "9000"
    assert "jumbo ping ok on 3 rail(s)" in doc["hosts"]["worker"]["fabric"]["message"]
    # a fabric change is proven under traffic too: every healthy rail passes the bandwidth probe
    assert "bandwidth probe ok on 3 rail(s)" in doc["hosts"]["worker"]["fabric"]["message"]


def test_a_degraded_rail_stops_up_after_a_fabric_change(lab, inventory, converged):
    # PR #108's ConnectX-7: ACTIVE, 200000Mb/s in sysfs and ethtool, ~7% of what its twin carries
    lab.fault("worker", "degraded-speed", "enp1s0f0np0")
    lab.host_exec("worker", ["ip", "link", "set", "enP2p1s0f0np0", "mtu", "1500"], check=True)  # the fabric change
    try:
        doc = sparkctl("up", "-i", str(inventory), check_rc=1)
    finally:
        lab.clear_faults()
    assert doc["stopped_at"] == "fabric"
    for host in ("head", "worker"):  # both ends of the rail
        r = doc["hosts"][host]["fabric"]
        assert r["status"] == "failed" and "rail degraded: head:enp1s0f0np0 -> worker:enp1s0f0np0" in r["message"], r
        assert "of its twin head:enP2p1s0f0np0" in r["message"] and "mlxfwreset" in r["fix"]
    assert "bandwidth probe ok on 2 rail(s)" in doc["hosts"]["offload"]["fabric"]["message"]
    # the MTU was repaired before the proof failed: with the rail healthy again, nothing is left to do
    again = sparkctl("up", "-i", str(inventory))
    assert ("worker", "fabric") not in changed(again)


def test_image_removed_from_the_worker_is_pulled_back_by_the_images_step_only(lab, inventory, converged):
    image = yaml.safe_load(inventory.read_text())["runtime"]["image"]
    lab.host_exec("worker", ["docker", "rmi", "-f", image], check=True)
    running_before = container_id(lab, "worker", "sparkctl-worker")
    doc = sparkctl("up", "-i", str(inventory))
    assert changed(doc) == {("worker", "images")}
    assert f"pulled {image}" in doc["hosts"]["worker"]["images"]["message"]
    assert "already current in the registry" in doc["hosts"]["head"]["images"]["message"]
    assert container_id(lab, "worker", "sparkctl-worker") == running_before


def test_engram_mount_removed_is_placed_again_by_the_engram_step_only(lab, inventory, converged):
    lab.host_exec("offload", ["umount", "/mnt/engram"], check=True)
    doc = sparkctl("up", "-i", str(inventory))
    assert changed(doc) == {("offload", "engram")}
    assert "every SHA-256 in /mnt/engram verified" in doc["hosts"]["offload"]["engram"]["message"]


def test_force_restarts_the_runtime(lab, inventory, converged):
    before = container_id(lab, "head", "sparkctl-head")
    doc = sparkctl("up", "-i", str(inventory), "--force")
    # the restart, its decode measurement (the next reload's baseline) and the record of it
    assert {s for h, s in changed(doc)} == {"stop", "runtime", "throughput", "record"}
    assert container_id(lab, "head", "sparkctl-head") != before
    assert "warm (compile cache hit)" in doc["hosts"]["head"]["runtime"]["message"]


def test_config_change_outside_the_compile_hash_restarts_warm_and_is_recorded(lab, inventory, converged, tmp_path):
    doc = yaml.safe_load(inventory.read_text())
    doc["runtime"]["served_model_name"] = "lab-renamed"  # not part of vLLM's compile hash
    changed_inv = tmp_path / "renamed.yaml"
    changed_inv.write_text(yaml.safe_dump(doc))
    try:
        out = sparkctl("up", "-i", str(changed_inv))
        assert ("head", "runtime") in changed(out) and ("head", "record") in changed(out)
        assert "warm (compile cache hit)" in out["hosts"]["head"]["runtime"]["message"]
        assert out["runtime_start"]["cache"].startswith("warm")
        history = lab.host_exec("head", ["ls", "/var/lib/sparkctl/state/history"]).stdout.split()
        assert history, "the replaced record is kept for rollback"
    finally:
        sparkctl("up", "-i", str(inventory))  # back to the lab's own config


def test_a_failed_step_stops_up_and_says_what_was_not_done(lab, inventory, converged):
    # a NIC that is not there (renamed, as a missing or misnamed ConnectX-7 would be): up cannot fix it
    dev = "enP2p1s0f0np0"
    lab.host_exec("worker", ["sh", "-c", f"ip link set {dev} down && ip link set {dev} name sparkgone0"], check=True)
    try:
        doc = sparkctl("up", "-i", str(inventory), check_rc=1)
        assert doc["stopped_at"] == "fabric"
        worker = doc["hosts"]["worker"]["fabric"]
        assert worker["status"] == "failed" and f"net device {dev} does not exist" in worker["message"]
        # validated before touching any host: the others' plans were not applied
        assert doc["hosts"]["head"]["fabric"]["status"] == "skipped"
        later = [r for r in doc["results"] if r["step"] != "fabric"]
        assert later and all(r["status"] == "skipped" for r in later)
    finally:
        lab.host_exec("worker", ["sh", "-c", f"ip link set sparkgone0 name {dev} && ip link set {dev} up"], check=True)
        sparkctl("up", "-i", str(inventory))


def test_bad_inventory_touches_nothing_and_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    doc = yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())
    doc["runtime"]["max_num_seqs"] = "four"
    bad.write_text(yaml.safe_dump(doc))
    p = run(["up", "-i", str(bad)], env=ENV)
    assert p.returncode == 2
    assert "runtime.max_num_seqs" in p.stderr and "Traceback" not in p.stderr


def dspark_shape(inventory: Path) -> dict:
    """The DSpark recipe's shape (seed 002) on the lab's two Sparks: no offload host, DSpark k=3."""
    doc = yaml.safe_load(inventory.read_text())
    doc["cluster"]["name"] = "lab-dspark"
    del doc["hosts"]["offload"]
    for h in doc["hosts"].values():
        h["fabric"] = [link for link in h["fabric"] if link["peer"] != "offload"]
    doc.pop("engram")
    doc["weights"].pop("drafter")  # DSpark drafts from the checkpoint itself
    r = doc["runtime"]
    r.update(
        served_model_name="deepseek-v4-flash-dspark",
        # the recipe's folder name under /models: each lab host's own disk (the recipe's /cache is the machine's)
        model="/models/fraserprice/DeepSeek-V4-Flash-DSpark",
        kv_cache_dtype="nvfp4_ds_mla",
        max_model_len=262144,
        max_num_seqs=2,
        kv_pool_tokens=2830000,
        speculative={"method": "dspark", "num_speculative_tokens": 3},
    )
    r["env"]["VLLM_DSPARK_GPU_REJECTED_CONTEXT_MASK"] = "1"
    return doc


def test_dspark_shape_two_sparks_serves(lab, inventory, converged, tmp_path):
    inv = tmp_path / "dspark.yaml"
    inv.write_text(yaml.safe_dump(dspark_shape(inventory)))
    try:
        doc = sparkctl("up", "-i", str(inv))
        assert set(doc["hosts"]) == {"head", "worker"}
        assert "serving at" in doc["hosts"]["head"]["runtime"]["message"]
        models = httpx.get(f"http://{HEAD_IP}:8888/v1/models", timeout=10).json()["data"]
        assert [(m["id"], m["max_model_len"]) for m in models] == [("deepseek-v4-flash-dspark", 262144)]
        again = sparkctl("up", "-i", str(inv))
        assert again["changed"] == 0
    finally:
        sparkctl("down", "-i", str(inv))
        sparkctl("up", "-i", str(inventory))


def side_load_worker(lab, inventory) -> tuple[dict, str, str]:
    image = yaml.safe_load(inventory.read_text())["runtime"]["image"]
    head_id = lab.host_exec("head", ["docker", "image", "inspect", "-f", "{{.Id}}", image], check=True).stdout.strip()
    lab.host_exec("worker", ["docker", "rmi", "-f", image], check=True)
    doc = sparkctl("up", "-i", str(inventory), "--side-load")
    worker_id = lab.host_exec("worker", ["docker", "image", "inspect", "-f", "{{.Id}}", image], check=True).stdout.strip()
    assert changed(doc) == {("worker", "images")}
    assert worker_id == head_id
    return doc, head_id, doc["hosts"]["worker"]["images"]["message"]


def test_side_load_of_an_image_the_worker_still_holds_only_tags_it(lab, inventory, converged):
    # the worker's container still uses the image, so `docker rmi -f` only untagged it: nothing is
    # copied (the fabric and relay paths, and layer-only copies: tests/lab/test_image_transport_lab.py)
    _, head_id, msg = side_load_worker(lab, inventory)
    assert f"worker still held {head_id[7:19]} (untagged), tagged it" in msg
    assert "image matches" in msg


def test_preflight_runs_only_before_a_change_and_blocks_on_a_missing_gpu(lab, inventory, converged):
    noop = sparkctl("up", "-i", str(inventory))
    assert {r["status"] for r in noop["results"] if r["step"] == "preflight"} == {"skipped"}
    assert "not needed: nothing to change" in noop["hosts"]["head"]["preflight"]["message"]
    lab.fault("worker", "gpu-missing")
    lab.host_exec("worker", ["ip", "link", "set", "enP2p1s0f0np0", "mtu", "1500"], check=True)
    try:
        doc = sparkctl("up", "-i", str(inventory), check_rc=1)
        assert doc["stopped_at"] == "preflight"
        pre = doc["hosts"]["worker"]["preflight"]
        assert pre["status"] == "failed" and "gpu.model" in pre["message"] and "nvidia-smi shows no GPU" in pre["message"]
        # nothing changed: the drift the fabric step would repair is still there
        assert lab.host_exec("worker", ["cat", "/sys/class/net/enP2p1s0f0np0/mtu"]).stdout.strip() == "1500"
        assert doc["changed"] == 0
    finally:
        lab.clear_faults()
        sparkctl("up", "-i", str(inventory))


def test_status_shows_where_it_runs_and_live_figures(lab, inventory, converged):
    import threading

    model = yaml.safe_load(inventory.read_text())["runtime"]["served_model_name"]

    def load():  # one long generation while status samples /metrics
        httpx.post(
            f"http://{HEAD_IP}:8888/v1/completions",
            json={"model": model, "prompt": "Count from 1 to 200:", "max_tokens": 60000, "temperature": 0, "ignore_eos": True},
            timeout=120,
        )

    t = threading.Thread(target=load)
    t.start()
    time.sleep(0.5)  # the lab decodes ~100x faster than a Spark: 60K tokens last a few seconds
    try:
        doc = sparkctl("status", "-i", str(inventory), "--sample", "1")
    finally:
        t.join()
    assert doc["healthy"] is True
    assert {h: [c["name"] for c in v["containers"]] for h, v in doc["hosts"].items()} == {
        "head": ["sparkctl-head"],
        "worker": ["sparkctl-worker"],
        "offload": ["sparkctl-drafter"],
    }
    assert all(c["config_matches"] for v in doc["hosts"].values() for c in v["containers"])
    r = doc["runtime"]
    assert r["health"] == 200 and r["model"] == model
    assert r["output_tokens_per_s"] > 0 and r["running"] == 1
    assert 0 < r["spec_decode_acceptance_rate"] <= 100  # percent, as vllm bench serve reports it
